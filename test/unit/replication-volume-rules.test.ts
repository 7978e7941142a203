/**
 * The per-volume failover rules of VolumeManager.failover (reference §2.4), as pure functions.
 */
import { describe, expect, test } from 'vitest';
import { applyFailoverUpdate, doneBy, markNotCapable } from '../../functions/replication/volume-rules.js';
import { isReplicatedVolume } from '../../functions/volumes/capabilities.js';
import type { Volume } from '../../functions/volumes/model.js';

const AT = '2024-05-01T00:00:00.000Z';
const OP = 'op-1';

function volume(over: Partial<Volume> = {}): Volume {
  return {
    id: 'v1', projectId: 'p', userId: 'u', name: null, description: null, size: 1, status: 'available', attachStatus: 'detached', previousStatus: null,
    migrationStatus: null, replicationStatus: 'enabled', volumeTypeId: 't', volumeTypeName: 'replicated', multiattach: false, bootable: false,
    host: 'ferry@lvm-r#pool0', backendName: 'volume-v1', providerLocation: '/p/volume-v1', serviceUuid: 's', sharedTargets: false, availabilityZone: 'nova',
    metadata: {}, adminMetadata: {}, attachments: {}, instances: {}, connections: {}, snapshotIds: ['s1', 's2'], createdAt: AT, updatedAt: AT, version: 3, ...over,
  };
}

describe('which volumes are replicated', () => {
  test.each([
    ['enabled', true],
    ['failed-over', true],
    ['error', true],
    ['failover-error', true],
    ['disabled', false],
    ['not-capable', false],
    [null, false],
  ] as const)('replication_status %s -> %s', (status, expected) => {
    expect(isReplicatedVolume({ replicationStatus: status })).toBe(expected);
  });
});

describe('non-replicated volume on failover', () => {
  test('error / not-capable, previous_status kept, every snapshot to error, marked by the operation', () => {
    const out = markNotCapable(volume({ replicationStatus: 'disabled', status: 'in-use' }), OP, AT);
    expect(out.volume).toMatchObject({ status: 'error', previousStatus: 'in-use', replicationStatus: 'not-capable', failoverOperationId: OP });
    expect(out.snapshotsToError).toEqual(['s1', 's2']);
    expect(doneBy(out.volume, OP)).toBe(true);
    expect(doneBy(out.volume, 'op-2')).toBe(false);
  });
});

describe('replicated volume after the driver', () => {
  test('no update: the service-level value, status kept, no previous_status', () => {
    const out = applyFailoverUpdate(volume(), undefined, false, OP, AT);
    expect(out.volume).toMatchObject({ status: 'available', previousStatus: null, replicationStatus: 'failed-over', failoverOperationId: OP });
    expect(out.snapshotsToError).toEqual([]);
  });
  test('failback: failed-over (or nothing) from the driver becomes enabled', () => {
    expect(applyFailoverUpdate(volume({ replicationStatus: 'failed-over' }), { replicationStatus: 'failed-over' }, true, OP, AT).volume.replicationStatus).toBe('enabled');
    expect(applyFailoverUpdate(volume({ replicationStatus: 'failed-over' }), {}, true, OP, AT).volume.replicationStatus).toBe('enabled');
  });
  test('driver status error: failover-error, status error with previous_status, snapshots error', () => {
    const out = applyFailoverUpdate(volume({ status: 'in-use' }), { status: 'error' }, false, OP, AT);
    expect(out.volume).toMatchObject({ status: 'error', previousStatus: 'in-use', replicationStatus: 'failover-error' });
    expect(out.snapshotsToError).toEqual(['s1', 's2']);
  });
  test('driver replication_status failover-error without a status: status defaults to error', () => {
    const out = applyFailoverUpdate(volume(), { replicationStatus: 'failover-error' }, false, OP, AT);
    expect(out.volume).toMatchObject({ status: 'error', previousStatus: 'available', replicationStatus: 'failover-error' });
  });
  test('another driver replication_status is kept as it is; provider_location is taken', () => {
    const out = applyFailoverUpdate(volume(), { replicationStatus: 'error', providerLocation: '/b/volume-v1' }, false, OP, AT);
    expect(out.volume).toMatchObject({ replicationStatus: 'error', providerLocation: '/b/volume-v1', status: 'available' });
    expect(out.snapshotsToError).toEqual([]);
  });
  test('the input is not modified', () => {
    const v = volume();
    applyFailoverUpdate(v, { status: 'error' }, false, OP, AT);
    expect(v).toEqual(volume());
  });
});
