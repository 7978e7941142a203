import { describe, expect, test } from 'vitest';
import type { AuthContext } from '../../functions/core/auth.js';
import { ApiVersion } from '../../functions/core/microversion.js';
import type { Volume } from '../../functions/volumes/model.js';
import { volumeDetail, volumeSummary, type ViewContext } from '../../functions/volumes/views.js';

const ADMIN: AuthContext = { userId: 'admin', projectId: 'admin', isAdmin: true, roles: ['admin'] };
const OWNER: AuthContext = { userId: 'demo', projectId: 'demo', isAdmin: false, roles: ['member'] };
const BASE = 'http://h/volume/v3';

function ctx(auth: AuthContext, v: string): ViewContext {
  const [maj, min] = v.split('.').map(Number);
  return { auth, version: new ApiVersion(maj!, min!), baseUrl: BASE };
}

const vol: Volume = {
  id: 'v1', projectId: 'demo', userId: 'demo', name: 'n', description: 'd', size: 2, status: 'in-use', attachStatus: 'attached',
  previousStatus: null, migrationStatus: null, replicationStatus: null, volumeTypeId: 't1', volumeTypeName: 'default', multiattach: false,
  bootable: false, host: 'ferry@lvm-a#pool0', backendName: 'volume-v1', providerLocation: null, serviceUuid: 'svc', sharedTargets: null,
  availabilityZone: 'nova', metadata: { k: 'v' }, adminMetadata: {},
  attachments: {
    a1: { status: 'attached', instanceUuid: 'i1', host: 'cmp1', mode: 'rw', attachedAt: '2024-05-01T10:00:00.123Z', connected: true, mountpoint: '/dev/vdb' },
    a2: { status: 'reserved', instanceUuid: 'i2', host: null, mode: 'rw', attachedAt: null, connected: false },
  },
  instances: { i1: 1, i2: 1 }, connections: {}, createdAt: '2024-05-01T09:00:00.000Z', updatedAt: '2024-05-01T10:00:00.000Z', version: 1,
};

describe('volume detail view', () => {
  test('3.0 for the owner: base fields, tenant attribute, no admin attributes, no later-version fields', () => {
    // Act
    const out = volumeDetail(ctx(OWNER, '3.0'), vol, true);
    // Assess
    expect(out).toMatchObject({ id: 'v1', status: 'in-use', size: 2, bootable: 'false', encrypted: false, volume_type: 'default', multiattach: false, 'os-vol-tenant-attr:tenant_id': 'demo' });
    expect(out.created_at).toBe('2024-05-01T09:00:00.000000');
    for (const k of ['os-vol-host-attr:host', 'os-vol-mig-status-attr:migstat', 'migration_status', 'group_id', 'provider_id', 'shared_targets', 'service_uuid', 'cluster_name', 'volume_type_id', 'consumes_quota']) {
      expect(out).not.toHaveProperty(k);
    }
  });
  test('without the extensions (create, update, manage): no os-vol-* attribute, even for an admin', () => {
    const out = volumeDetail(ctx(ADMIN, '3.70'), vol);
    expect(Object.keys(out).filter((k) => k.startsWith('os-vol-'))).toEqual([]);
    expect(out).toMatchObject({ migration_status: null, provider_id: null, cluster_name: null });
  });
  test('only attached attachments are shown, host_name hidden from non-admins', () => {
    const out = volumeDetail(ctx(OWNER, '3.0'), vol);
    expect(out.attachments).toEqual([
      { id: 'v1', attachment_id: 'a1', volume_id: 'v1', server_id: 'i1', host_name: null, device: '/dev/vdb', attached_at: '2024-05-01T10:00:00.123000' },
    ]);
    expect((volumeDetail(ctx(ADMIN, '3.0'), vol).attachments as { host_name: string }[])[0]!.host_name).toBe('cmp1');
  });
  test('3.70 for an admin: every versioned and admin field', () => {
    const out = volumeDetail(ctx(ADMIN, '3.70'), vol, true);
    expect(out).toMatchObject({
      'os-vol-host-attr:host': 'ferry@lvm-a#pool0', 'os-vol-mig-status-attr:migstat': null, group_id: null, provider_id: null,
      shared_targets: null, service_uuid: 'svc', cluster_name: null, volume_type_id: 't1', consumes_quota: true,
    });
  });
  test('a null shared_targets shows as true from 3.48 until 3.69', () => {
    expect(volumeDetail(ctx(OWNER, '3.48'), vol).shared_targets).toBe(true);
    expect(volumeDetail(ctx(OWNER, '3.68'), vol).shared_targets).toBe(true);
    expect(volumeDetail(ctx(OWNER, '3.69'), vol).shared_targets).toBeNull();
    expect(volumeDetail(ctx(OWNER, '3.48'), { ...vol, sharedTargets: false }).shared_targets).toBe(false);
  });
  test('version boundaries: group_id 3.13, provider_id 3.21 (admin), volume_type_id 3.63, consumes_quota 3.65, cluster_name 3.61 (admin)', () => {
    expect(volumeDetail(ctx(OWNER, '3.12'), vol)).not.toHaveProperty('group_id');
    expect(volumeDetail(ctx(OWNER, '3.13'), vol)).toHaveProperty('group_id');
    expect(volumeDetail(ctx(ADMIN, '3.20'), vol)).not.toHaveProperty('provider_id');
    expect(volumeDetail(ctx(OWNER, '3.21'), vol)).not.toHaveProperty('provider_id');
    expect(volumeDetail(ctx(ADMIN, '3.21'), vol)).toHaveProperty('provider_id');
    expect(volumeDetail(ctx(OWNER, '3.62'), vol)).not.toHaveProperty('volume_type_id');
    expect(volumeDetail(ctx(OWNER, '3.63'), vol).volume_type_id).toBe('t1');
    expect(volumeDetail(ctx(OWNER, '3.64'), vol)).not.toHaveProperty('consumes_quota');
    expect(volumeDetail(ctx(OWNER, '3.65'), vol)).toHaveProperty('consumes_quota');
    expect(volumeDetail(ctx(OWNER, '3.70'), vol)).not.toHaveProperty('cluster_name');
    expect(volumeDetail(ctx(ADMIN, '3.61'), vol)).toHaveProperty('cluster_name');
  });
  test('summary has id, name and self/bookmark links', () => {
    expect(volumeSummary(ctx(OWNER, '3.0'), vol)).toEqual({
      id: 'v1', name: 'n',
      links: [{ href: 'http://h/volume/v3/demo/volumes/v1', rel: 'self' }, { href: 'http://h/volume/demo/volumes/v1', rel: 'bookmark' }],
    });
  });
});
