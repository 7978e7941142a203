/** The share, export location, access rule and instance views per microversion and caller. */
import { describe, expect, test } from 'vitest';
import type { AuthContext } from '../../functions/core/auth.js';
import { ApiVersion } from '../../functions/core/microversion.js';
import type { Share } from '../../functions/shares/model.js';
import { accessRuleView, exportLocationView, shareDetail, shareInstanceView, type ShareViewContext } from '../../functions/shares/views.js';

const at = '2026-01-01T00:00:00.123Z';
const admin: AuthContext = { userId: 'admin', projectId: 'admin', roles: ['admin'], isAdmin: true };
const demo: AuthContext = { userId: 'demo', projectId: 'demo', roles: ['member'], isAdmin: false };
const ctx = (minor: number, auth = demo): ShareViewContext => ({ auth, version: new ApiVersion(2, minor), baseUrl: 'http://h/share/v2' });

const s: Share = {
  id: 's1', projectId: 'demo', userId: 'demo', name: 'x', description: null, size: 1, shareProto: 'NFS', status: 'available', taskState: null,
  shareTypeId: 't1', shareTypeName: 'default', shareNetworkId: null, availabilityZone: 'nova', metadata: {}, isPublic: false,
  instanceId: '11111111-1111-4111-a111-111111111111', host: 'ferry@nfs-a#pool0', exportLocations: ['/data/shares/nfs-a/share-1'], capacity: { pool: 'ferry@nfs-a#pool0', gb: 1 },
  ownsBackendShare: true,
  accessRules: { r1: { id: 'r1', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'ro', state: 'queued_to_apply', createdAt: at, updatedAt: at } },
  errorReason: null, migration: null, createdAt: at, updatedAt: at, version: 3,
};

describe('share detail', () => {
  test('2.0: export locations inline, no task_state, no host for a non-admin', () => {
    const v = shareDetail(ctx(0), s);
    expect(v).toMatchObject({ id: 's1', status: 'available', share_proto: 'NFS', export_location: '/data/shares/nfs-a/share-1', export_locations: ['/data/shares/nfs-a/share-1'], created_at: '2026-01-01T00:00:00.123000' });
    expect(v).not.toHaveProperty('task_state');
    expect(v).not.toHaveProperty('host');
  });
  test('2.5 adds task_state (null), 2.9 drops inline export locations, 2.10 access_rules_status', () => {
    expect(shareDetail(ctx(5), s).task_state).toBeNull();
    expect(shareDetail(ctx(9), s)).not.toHaveProperty('export_locations');
    expect(shareDetail(ctx(10), s).access_rules_status).toBe('syncing');
  });
  test('an admin sees host', () => {
    expect(shareDetail(ctx(72, admin), s).host).toBe('ferry@nfs-a#pool0');
  });
  test('2.72 shows the newer fields', () => {
    const v = shareDetail(ctx(72), { ...s, taskState: 'migration_driver_in_progress' });
    expect(v).toMatchObject({ task_state: 'migration_driver_in_progress', share_type_name: 'default', user_id: 'demo', is_soft_deleted: false, share_group_id: null, progress: '100%' });
    expect(v).not.toHaveProperty('consistency_group_id');
  });
});

describe('export locations, access rules, instances', () => {
  test('export location: preferred from 2.14, instance id only for admins, stable id', () => {
    const a = exportLocationView(ctx(14), s, s.exportLocations[0]!, 0);
    expect(a).toMatchObject({ path: '/data/shares/nfs-a/share-1', preferred: true });
    expect(a).not.toHaveProperty('share_instance_id');
    expect(exportLocationView(ctx(9, admin), s, s.exportLocations[0]!, 0)).toMatchObject({ share_instance_id: s.instanceId, is_admin_only: false });
    expect(exportLocationView(ctx(9), s, s.exportLocations[0]!, 0).id).toBe(a.id);
  });
  test('access rule: states are collapsed to new before 2.28; access_key from 2.21; metadata from 2.45', () => {
    expect(accessRuleView(ctx(20), s, s.accessRules.r1!)).toMatchObject({ state: 'new', access_level: 'ro' });
    expect(accessRuleView(ctx(28), s, s.accessRules.r1!).state).toBe('queued_to_apply');
    expect(accessRuleView(ctx(21), s, s.accessRules.r1!)).toHaveProperty('access_key', null);
    expect(accessRuleView(ctx(45), s, s.accessRules.r1!)).toHaveProperty('metadata', {});
  });
  test('instance: status, host and share_id', () => {
    expect(shareInstanceView(ctx(72, admin), s)).toMatchObject({ id: s.instanceId, share_id: 's1', status: 'available', host: 'ferry@nfs-a#pool0', share_type_id: 't1' });
  });
});
