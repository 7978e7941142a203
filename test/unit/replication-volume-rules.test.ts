/**
 * The per-volume failover rules of VolumeManager.failover (reference §2.4), as pure functions.
 */
import { describe, expect, test } from 'vitest';
import { InvariantViolation } from '../../functions/core/errors.js';
import { FAILOVER_BATCH_SIZE, failoverVolumeState, recordedBatch } from '../../functions/replication/repo.js';
import { applyFailoverUpdate, doneBy, markNotCapable } from '../../functions/replication/volume-rules.js';
import { volumeUpdate } from '../../functions/volumes/repo.js';
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

describe('a volume as a failover batch carries it (replication/repo.ts failoverVolumeState)', () => {
  test('the listed fields and a snapshot count; replication_status null stays null (not replicated)', () => {
    // Prepare: a stored item (with its keys) of a plain volume with snapshots.
    const item = { pk: 'VOL#v1', sk: 'VOL', ...volume({ replicationStatus: null, failoverOperationId: null }) };
    // Act
    const carried = failoverVolumeState(item);
    // Assess
    expect(carried).toEqual({ id: 'v1', version: 3, host: 'ferry@lvm-r#pool0', status: 'available', replicationStatus: null, backendName: 'volume-v1', size: 1, failoverOperationId: null, snapshots: 2 });
    expect(isReplicatedVolume(carried)).toBe(false);
    expect(failoverVolumeState({ ...item, snapshotIds: undefined }).snapshots).toBe(0);
  });

  test('the write built from a carried volume sets only what the failover changes, on the listed version', () => {
    const { snapshots: _count, ...carried } = failoverVolumeState({ ...volume() });
    const before = carried as unknown as Volume;
    // Act
    const update = volumeUpdate(before, applyFailoverUpdate(before, undefined, false, OP, AT).volume);
    // Assess: no attribute the listing did not read is written or removed.
    expect(update.ConditionExpression).toBe('#version = :expected');
    expect(update.ExpressionAttributeValues).toMatchObject({ ':expected': 3, ':next': 4 });
    expect(Object.values(update.ExpressionAttributeNames!).sort()).toEqual(['failoverOperationId', 'replicationStatus', 'updatedAt', 'version']);
    expect(update.UpdateExpression).not.toMatch(/REMOVE/);
  });

  test('a batch of the largest volumes fits a DynamoDB item (400 KB) whatever their snapshots', () => {
    const largest = failoverVolumeState({ ...volume({ id: 'f'.repeat(36), backendName: 'x'.repeat(255), host: `${'h'.repeat(64)}@${'b'.repeat(64)}#${'p'.repeat(64)}`, failoverOperationId: 'o'.repeat(36), snapshotIds: Array.from({ length: 1000 }, (_, i) => `snapshot-${i}`) }) });
    expect(JSON.stringify(Array.from({ length: FAILOVER_BATCH_SIZE }, () => largest)).length).toBeLessThan(400 * 1024);
  });
});

describe('a batch item as read (replication/repo.ts recordedBatch)', () => {
  const carried = [failoverVolumeState({ ...volume() }), failoverVolumeState({ ...volume({ id: 'v2', replicationStatus: null, snapshotIds: [] }) })];

  test('the listing, stored as one JSON string, comes back as the volumes listed, with the recorded replica choices', () => {
    // Prepare: the item as Prepare writes it (recordPlan), after the driver recorded its choices.
    const item = { pk: 'REPLOP#op-1', sk: 'BATCH#00000', listing: JSON.stringify(carried), replicaChoices: { v1: 'snap-1', v2: null } };
    // Act / Assess
    expect(recordedBatch(item, OP, 0)).toEqual({ volumes: carried, replicaChoices: { v1: 'snap-1', v2: null } });
  });

  test('plans recorded before: volumes as a list of maps, or ids only', () => {
    expect(recordedBatch({ volumes: carried }, OP, 0)).toEqual({ volumes: carried });
    expect(recordedBatch({ volumeIds: ['v1', 'v2'] }, OP, 0)).toEqual({ volumeIds: ['v1', 'v2'] });
  });

  test.each([
    ['a listing that is not JSON', { listing: '[{"id": "v1",' }, 'is not JSON'],
    ['a listing that is not a list', { listing: '{"id": "v1"}' }, 'is not a list of volumes'],
    ['no volumes in any form', {}, 'records no volumes'],
  ])('%s is an invariant violation naming the batch', (_, item, reason) => {
    expect(() => recordedBatch(item, OP, 7)).toThrow(InvariantViolation);
    expect(() => recordedBatch(item, OP, 7)).toThrow(new RegExp(`Batch 7 of replication operation ${OP} .*${reason}`));
  });
});
