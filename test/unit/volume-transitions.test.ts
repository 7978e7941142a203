import { describe, expect, test } from 'vitest';
import { FerryError } from '../../functions/core/errors.js';
import type { Volume } from '../../functions/volumes/model.js';
import { DELETABLE_STATUSES, deleteRefusedMessage, transition, VOLUME_STATUSES } from '../../functions/volumes/transitions.js';

const AT = '2024-05-01T10:00:00.000Z';

function volume(overrides: Partial<Volume> = {}): Volume {
  return {
    id: 'v1',
    projectId: 'demo',
    userId: 'demo',
    name: 'vol',
    description: null,
    size: 10,
    status: 'available',
    attachStatus: 'detached',
    previousStatus: null,
    migrationStatus: null,
    replicationStatus: null,
    volumeTypeId: 't1',
    volumeTypeName: 'default',
    multiattach: false,
    bootable: false,
    host: 'ferry@lvm-a#pool0',
    backendName: 'volume-v1',
    providerLocation: null,
    serviceUuid: null,
    sharedTargets: null,
    availabilityZone: 'nova',
    metadata: {},
    adminMetadata: {},
    attachments: {},
    instances: {},
    connections: {},
    capacity: { pool: 'ferry@lvm-a#pool0', gb: 10 },
    createdAt: AT,
    updatedAt: AT,
    version: 3,
    ...overrides,
  };
}

const attached = (): Partial<Volume> => ({
  status: 'in-use',
  attachStatus: 'attached',
  attachments: { a1: { status: 'attached', instanceUuid: 'i1', host: 'cmp1', mode: 'rw', attachedAt: AT, connected: true } },
  instances: { i1: 1 },
});

function expectError(out: Volume | FerryError, status: number, message?: string | RegExp): void {
  expect(out).toBeInstanceOf(FerryError);
  expect((out as FerryError).status).toBe(status);
  if (message) expect((out as FerryError).message).toMatch(message);
}

describe('scheduled', () => {
  test('a creating volume gets its pool, capacity and service', () => {
    // Prepare
    const v = volume({ status: 'creating', host: null, capacity: null });
    // Act
    const out = transition(v, { type: 'scheduled', at: AT, capacity: { pool: 'ferry@lvm-b#pool0', gb: 10 }, serviceUuid: 's-b', sharedTargets: false }) as Volume;
    // Assess
    expect(out.host).toBe('ferry@lvm-b#pool0');
    expect(out.capacity).toEqual({ pool: 'ferry@lvm-b#pool0', gb: 10 });
    expect(out.serviceUuid).toBe('s-b');
    expect(v.host).toBeNull();
  });
  test('scheduling the same pool again changes nothing (idempotent)', () => {
    const v = volume({ status: 'creating' });
    expect(transition(v, { type: 'scheduled', at: AT, capacity: { pool: 'ferry@lvm-a#pool0', gb: 10 }, serviceUuid: 's', sharedTargets: false })).toBe(v);
  });
  test('an available volume cannot be scheduled', () => {
    expectError(transition(volume({ capacity: null }), { type: 'scheduled', at: AT, capacity: { pool: 'p', gb: 1 }, serviceUuid: 's', sharedTargets: null }), 400, /must be creating or managing/);
  });
  test('a volume holding capacity elsewhere cannot be scheduled to another pool', () => {
    expectError(transition(volume({ status: 'creating' }), { type: 'scheduled', at: AT, capacity: { pool: 'ferry@lvm-b#pool0', gb: 10 }, serviceUuid: 's', sharedTargets: null }), 400, /already scheduled/);
  });
});

describe('created-on-backend and mark-available', () => {
  test('a created new volume owns its backend object and becomes available', () => {
    const created = transition(volume({ status: 'creating' }), { type: 'created-on-backend', at: AT, providerLocation: '/x' }) as Volume;
    expect(created.ownsBackendObject).toBe(true);
    expect(created.providerLocation).toBe('/x');
    const available = transition(created, { type: 'mark-available', at: AT }) as Volume;
    expect(available.status).toBe('available');
  });
  test('a managed volume owns its object only once available', () => {
    const found = transition(volume({ status: 'managing', managed: true, ownsBackendObject: false }), { type: 'created-on-backend', at: AT, providerLocation: null, sizeGb: 7 }) as Volume;
    expect(found.ownsBackendObject).toBe(false);
    expect(found.size).toBe(7);
    expect((transition(found, { type: 'mark-available', at: AT }) as Volume).ownsBackendObject).toBe(true);
  });
  test('mark-available on an available volume is a no-op; from error it is refused', () => {
    const v = volume();
    expect(transition(v, { type: 'mark-available', at: AT })).toBe(v);
    expectError(transition(volume({ status: 'error' }), { type: 'mark-available', at: AT }), 400, /current status is error/);
  });
  test('an unscheduled volume cannot be created on a backend', () => {
    expectError(transition(volume({ status: 'creating', host: null }), { type: 'created-on-backend', at: AT, providerLocation: null }), 400, /not been scheduled/);
  });
});

describe('create-failed', () => {
  test('a new volume goes to error with the reason; a managed one to error_managing', () => {
    const failed = transition(volume({ status: 'creating', pendingServerId: 'i1' }), { type: 'create-failed', at: AT, reason: 'no pool' }) as Volume;
    expect([failed.status, failed.errorReason, failed.pendingServerId]).toEqual(['error', 'no pool', null]);
    expect((transition(volume({ status: 'managing', managed: true }), { type: 'create-failed', at: AT, reason: 'x' }) as Volume).status).toBe('error_managing');
  });
  test('failing an available volume, or one with attachments, is refused', () => {
    expectError(transition(volume(), { type: 'create-failed', at: AT, reason: 'x' }), 400);
    expectError(transition(volume({ ...attached(), status: 'creating' }), { type: 'create-failed', at: AT, reason: 'x' }), 400, /with attachments/);
  });
  test('a volume an admin reset mid-create is still marked failed', () => {
    expect((transition(volume({ status: 'maintenance' }), { type: 'create-failed', at: AT, reason: 'x' }) as Volume).status).toBe('error');
  });
});

describe('capacity-released', () => {
  test('drops capacity once; a second release changes nothing', () => {
    const once = transition(volume(), { type: 'capacity-released', at: AT }) as Volume;
    expect(once.capacity).toBeNull();
    expect(transition(once, { type: 'capacity-released', at: AT })).toBe(once);
  });
});

describe('begin-delete', () => {
  test.each(DELETABLE_STATUSES)('%s -> deleting', (status) => {
    const out = transition(volume({ status }), { type: 'begin-delete', at: AT }) as Volume;
    expect(out.status).toBe('deleting');
    expect(out.previousStatus).toBe(status);
  });
  test.each(VOLUME_STATUSES.filter((s) => !DELETABLE_STATUSES.includes(s)))('%s is refused with the upstream message', (status) => {
    expectError(transition(volume({ status }), { type: 'begin-delete', at: AT }), 400, `Invalid volume: ${deleteRefusedMessage()}`);
  });
  test('an attached volume is refused even if its status says available', () => {
    expectError(transition(volume({ ...attached(), status: 'available' }), { type: 'begin-delete', at: AT }), 400, /must not be migrating, attached/);
  });
  test('a migrating volume is refused', () => {
    expectError(transition(volume({ migrationStatus: 'migrating' }), { type: 'begin-delete', at: AT }), 400);
  });
  test('the delete machine resumes a volume already deleting; the API does not', () => {
    const v = volume({ status: 'deleting' });
    expect(transition(v, { type: 'begin-delete', at: AT, resume: true })).toBe(v);
    expectError(transition(v, { type: 'begin-delete', at: AT }), 400);
  });
  test('the upstream message lists the deletable statuses', () => {
    expect(deleteRefusedMessage()).toBe(
      'Volume status must be available or error or error_restoring or error_extending or error_managing and must not be migrating, attached, belong to a group, have snapshots or be disassociated from snapshots after volume transfer.',
    );
  });
});

describe('delete-failed', () => {
  test('deleting -> error_deleting; anything else refused', () => {
    expect((transition(volume({ status: 'deleting' }), { type: 'delete-failed', at: AT, reason: 'disk' }) as Volume).status).toBe('error_deleting');
    expectError(transition(volume(), { type: 'delete-failed', at: AT, reason: 'disk' }), 400);
  });
});

describe('update', () => {
  test('changes only the fields given', () => {
    const out = transition(volume({ description: 'd' }), { type: 'update', at: AT, name: 'new', metadata: { a: '1' } }) as Volume;
    expect([out.name, out.description, out.metadata]).toEqual(['new', 'd', { a: '1' }]);
  });
  test('refused during maintenance', () => {
    expectError(transition(volume({ status: 'maintenance' }), { type: 'update', at: AT, name: 'x' }), 400, 'Invalid volume: The volume cannot be updated during maintenance.');
  });
});

describe('reset-status', () => {
  test('sets status, attach status and migration status', () => {
    const out = transition(volume({ status: 'error' }), { type: 'reset-status', at: AT, status: 'available', attachStatus: 'detached', migrationStatus: null }) as Volume;
    expect([out.status, out.attachStatus, out.migrationStatus, out.previousStatus]).toEqual(['available', 'detached', null, 'error']);
  });
  test('needs at least one field', () => {
    expectError(transition(volume(), { type: 'reset-status', at: AT }), 400, "Must specify 'status', 'attach_status' or 'migration_status' for update.");
  });
  test('detached is refused while attachment records exist', () => {
    expectError(transition(volume(attached()), { type: 'reset-status', at: AT, attachStatus: 'detached' }), 400, /delete them with the attachments API/);
  });
});

describe('detaching', () => {
  test('in-use + attached -> detaching, and roll back', () => {
    const detaching = transition(volume(attached()), { type: 'begin-detaching', at: AT }) as Volume;
    expect(detaching.status).toBe('detaching');
    expect((transition(detaching, { type: 'roll-detaching', at: AT }) as Volume).status).toBe('in-use');
  });
  test('an available volume cannot begin detaching', () => {
    expectError(transition(volume(), { type: 'begin-detaching', at: AT }), 400, "Invalid volume: Unable to detach volume. Volume status must be 'in-use' and attach_status must be 'attached' to detach.");
  });
  test('a migrating volume keeps its status silently (upstream)', () => {
    const v = volume({ ...attached(), migrationStatus: 'migrating' });
    expect(transition(v, { type: 'begin-detaching', at: AT })).toBe(v);
  });
  test('roll-detaching of a volume not detaching changes nothing', () => {
    const v = volume();
    expect(transition(v, { type: 'roll-detaching', at: AT })).toBe(v);
  });
});

describe('extend', () => {
  test('available -> extending holding the new size, then available at the new size', () => {
    const extending = transition(volume(), { type: 'begin-extend', at: AT, newSize: 20 }) as Volume;
    expect([extending.status, extending.capacity?.gb, extending.size]).toEqual(['extending', 20, 10]);
    const done = transition(extending, { type: 'extend-done', at: AT }) as Volume;
    expect([done.status, done.size]).toEqual(['available', 20]);
  });
  test('a size not larger is refused with the upstream message', () => {
    expectError(transition(volume(), { type: 'begin-extend', at: AT, newSize: 10 }), 400, 'Invalid input received: New size for extend must be greater than current size. (current: 10, extended: 10).');
  });
  test('an in-use volume is refused', () => {
    expectError(transition(volume(attached()), { type: 'begin-extend', at: AT, newSize: 20 }), 400, "Invalid volume: Volume v1 status must be 'available' to extend, currently in-use.");
  });
  test('a driver failure leaves error_extending', () => {
    const extending = transition(volume(), { type: 'begin-extend', at: AT, newSize: 20 }) as Volume;
    expect((transition(extending, { type: 'extend-failed', at: AT, reason: 'x' }) as Volume).status).toBe('error_extending');
    expectError(transition(volume(), { type: 'extend-done', at: AT }), 400);
  });
});

describe('pending attach', () => {
  test('clears the pending instance once, recording a failure reason', () => {
    const out = transition(volume({ pendingServerId: 'i1' }), { type: 'pending-attach-done', at: AT, reason: 'boom' }) as Volume;
    expect([out.pendingServerId, out.errorReason]).toEqual([null, 'boom']);
    expect(transition(out, { type: 'pending-attach-done', at: AT })).toBe(out);
  });
});

describe('image metadata (os-set_image_metadata / os-unset_image_metadata)', () => {
  test('set merges into what the volume has; remove drops one key; a key the volume lacks is 404', () => {
    const v = volume({ imageMetadata: { image_id: 'i1', image_name: 'cirros' } });
    const set = transition(v, { type: 'image-metadata', at: AT, set: { image_name: 'other', kernel_id: 'k1' } }) as Volume;
    expect(set.imageMetadata).toEqual({ image_id: 'i1', image_name: 'other', kernel_id: 'k1' });
    const removed = transition(set, { type: 'image-metadata', at: AT, remove: 'kernel_id' }) as Volume;
    expect(removed.imageMetadata).toEqual({ image_id: 'i1', image_name: 'other' });
    expectError(transition(removed, { type: 'image-metadata', at: AT, remove: 'kernel_id' }), 404, 'Glance metadata for volume v1 cannot be found.');
    expect((transition(volume(), { type: 'image-metadata', at: AT, set: { a: 'b' } }) as Volume).imageMetadata).toEqual({ a: 'b' });
  });

  test('refused in maintenance, as update_volume_metadata', () => {
    expectError(transition(volume({ status: 'maintenance' }), { type: 'image-metadata', at: AT, set: { a: 'b' } }), 400, 'Invalid volume: Updating volume metadata is not allowed for volumes in maintenance status.');
  });
});
