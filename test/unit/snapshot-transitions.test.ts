/**
 * Snapshot transitions, and the volume's side of them (snapshot-added / removed, delete refused
 * while snapshots exist, retype), as pure functions.
 */
import { describe, expect, test } from 'vitest';
import { FerryError } from '../../functions/core/errors.js';
import { snapshotTransition, type Snapshot } from '../../functions/snapshots/model.js';
import type { Volume } from '../../functions/volumes/model.js';
import { transition } from '../../functions/volumes/transitions.js';

const AT = '2024-05-01T00:00:00.000Z';
const snap = (over: Partial<Snapshot> = {}): Snapshot => ({
  id: 's1', volumeId: 'v1', projectId: 'p', userId: 'u', name: null, description: null, metadata: {}, size: 1, status: 'creating',
  backendHost: 'ferry@lvm-r', volumeBackendName: 'volume-v1', backendName: 'snapshot-s1', createdAt: AT, updatedAt: AT, version: 1, ...over,
});
const volume = (over: Partial<Volume> = {}): Volume => ({
  id: 'v1', projectId: 'p', userId: 'u', name: null, description: null, size: 1, status: 'available', attachStatus: 'detached', previousStatus: null,
  migrationStatus: null, replicationStatus: 'disabled', volumeTypeId: 't', volumeTypeName: 'default', multiattach: false, bootable: false,
  host: 'ferry@lvm-r#pool0', backendName: 'volume-v1', providerLocation: null, serviceUuid: 's', sharedTargets: false, availabilityZone: 'nova',
  metadata: {}, adminMetadata: {}, attachments: {}, instances: {}, connections: {}, createdAt: AT, updatedAt: AT, version: 1, ...over,
});
const err = (x: unknown) => {
  expect(x).toBeInstanceOf(FerryError);
  return (x as FerryError).message;
};

describe('snapshot lifecycle', () => {
  test('creating -> available (again: unchanged) | error', () => {
    const available = snapshotTransition(snap(), { type: 'created', at: AT }) as Snapshot;
    expect(available.status).toBe('available');
    expect(snapshotTransition(available, { type: 'created', at: AT })).toBe(available);
    expect(snapshotTransition(snap(), { type: 'create-failed', at: AT, reason: 'disk' })).toMatchObject({ status: 'error', errorReason: 'disk' });
  });
  test.each(['available', 'error'] as const)('delete from %s -> deleting', (status) => {
    expect(snapshotTransition(snap({ status }), { type: 'begin-delete', at: AT })).toMatchObject({ status: 'deleting' });
  });
  test.each(['creating', 'deleting', 'error_deleting'] as const)('delete from %s -> upstream InvalidSnapshot', (status) => {
    expect(err(snapshotTransition(snap({ status }), { type: 'begin-delete', at: AT }))).toBe('Invalid snapshot: Snapshot status must be available or error and must not be part of a group.');
  });
  test('a failed delete: error_deleting; failover-error from any status: error', () => {
    expect(snapshotTransition(snap({ status: 'deleting' }), { type: 'delete-failed', at: AT, reason: 'x' })).toMatchObject({ status: 'error_deleting' });
    expect(snapshotTransition(snap({ status: 'available' }), { type: 'failover-error', at: AT })).toMatchObject({ status: 'error' });
  });
});

describe("the volume's side", () => {
  test('snapshot-added: available only, unless in-use is allowed (force, or 3.66+)', () => {
    expect(transition(volume(), { type: 'snapshot-added', at: AT, snapshotId: 's1', allowInUse: false })).toMatchObject({ snapshotIds: ['s1'] });
    expect(err(transition(volume({ status: 'in-use' }), { type: 'snapshot-added', at: AT, snapshotId: 's1', allowInUse: false }))).toBe(
      'Invalid volume: Volume v1 status must be available, but current status is: in-use.',
    );
    expect(transition(volume({ status: 'in-use' }), { type: 'snapshot-added', at: AT, snapshotId: 's1', allowInUse: true })).toMatchObject({ snapshotIds: ['s1'] });
    expect(err(transition(volume({ status: 'maintenance' }), { type: 'snapshot-added', at: AT, snapshotId: 's1', allowInUse: true }))).toBe(
      'Invalid volume: The snapshot cannot be created when the volume is in maintenance mode.',
    );
    expect(err(transition(volume({ migrationStatus: 'migrating' }), { type: 'snapshot-added', at: AT, snapshotId: 's1', allowInUse: true }))).toBe(
      'Invalid volume: Snapshot cannot be created while volume is migrating.',
    );
  });
  test('a volume with snapshots is not deleted; once they are removed it is', () => {
    const withSnap = volume({ snapshotIds: ['s1'] });
    expect(err(transition(withSnap, { type: 'begin-delete', at: AT }))).toMatch(/have snapshots/);
    const removed = transition(withSnap, { type: 'snapshot-removed', at: AT, snapshotId: 's1' }) as Volume;
    expect(removed.snapshotIds).toEqual([]);
    expect(transition(removed, { type: 'begin-delete', at: AT })).toMatchObject({ status: 'deleting' });
  });
  test('retype: new type and replication status; same type and wrong status refused', () => {
    expect(transition(volume(), { type: 'retype', at: AT, typeId: 't2', typeName: 'replicated', multiattach: false, replicationStatus: 'enabled' })).toMatchObject({
      volumeTypeId: 't2',
      volumeTypeName: 'replicated',
      replicationStatus: 'enabled',
    });
    expect(err(transition(volume(), { type: 'retype', at: AT, typeId: 't', typeName: 'default', multiattach: false, replicationStatus: 'disabled' }))).toBe(
      'Invalid input received: New volume_type same as original: default.',
    );
    expect(err(transition(volume({ status: 'error' }), { type: 'retype', at: AT, typeId: 't2', typeName: 'x', multiattach: false, replicationStatus: 'enabled' }))).toMatch(
      /status must be available or in-use/,
    );
  });
});
