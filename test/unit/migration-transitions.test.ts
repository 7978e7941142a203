/**
 * functions/migration/transitions.ts as pure functions: which states accept a migration, a
 * cancel or a complete; step events refused for a stale migration or while a cancel is asked;
 * the phase 2 flip; finish keeping the migration record while anything is held. A fast-check
 * property drives random event sequences and checks that no transition ever ends a migration
 * (migration null) that still held something.
 */
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { Conflict, FerryError } from '../../functions/core/errors.js';
import { heldByMigration, migrationTransition, startableError, type MigrationEvent } from '../../functions/migration/transitions.js';
import { BUSY_TASK_STATES, TASK_STATES, type MigrationInstance, type Share, type ShareMigration, type TaskState } from '../../functions/shares/model.js';

const at = '2026-01-01T00:00:00.000Z';
const later = '2026-01-01T00:00:01.000Z';
const SRC = 'ferry@nfs-a#pool0';
const DST = 'ferry@nfs-b#pool0';

function migration(overrides: Partial<ShareMigration> = {}): ShareMigration {
  return {
    id: 'm1', destinationHost: DST, newShareTypeId: null, newShareNetworkId: null, writable: false, preserveMetadata: false, nondisruptive: false,
    preserveSnapshots: false, forceHostAssisted: false, approach: null, destination: null, retired: null, readOnlyCast: false, dataNodeAccess: false,
    copyOperationId: null, copyAttempts: 0, driverPolls: 0, cancelRequested: false, startedAt: at, error: null, ...overrides,
  };
}

function share(overrides: Partial<Share> = {}): Share {
  return {
    id: 's1', projectId: 'demo', userId: 'demo', name: 'x', description: null, size: 1, shareProto: 'NFS', status: 'available', taskState: null,
    shareTypeId: 't1', shareTypeName: 'default', shareNetworkId: null, availabilityZone: 'nova', metadata: {}, isPublic: false,
    instanceId: 'src-instance', host: SRC, exportLocations: ['/shares/nfs-a/share-src'], capacity: { pool: SRC, gb: 1 }, ownsBackendShare: true,
    accessRules: {}, errorReason: null, migration: null, createdAt: at, updatedAt: at, version: 1, ...overrides,
  };
}

const dest = (overrides: Partial<MigrationInstance> = {}): MigrationInstance => ({
  id: 'dst-instance', host: DST, status: 'migrating_to', exportLocations: ['/shares/nfs-b/share-dst'], capacity: { pool: DST, gb: 1 }, ownsBackendShare: true, ...overrides,
});

/** A share in phase 1 of migration m1 at `taskState`, with a destination holding a backend share and capacity. */
const migrating = (taskState: TaskState, m: Partial<ShareMigration> = {}, s: Partial<Share> = {}) =>
  share({ status: 'migrating', taskState, migration: migration({ approach: 'driver', destination: dest(), ...m }), ...s });

function ok(r: Share | FerryError): Share {
  if (r instanceof FerryError) throw r;
  return r;
}
function err(r: Share | FerryError): FerryError {
  expect(r).toBeInstanceOf(FerryError);
  return r as FerryError;
}

const NON_BUSY: (TaskState | null)[] = [null, ...TASK_STATES.filter((t) => !BUSY_TASK_STATES.includes(t))];

describe('accept (migration_start row 23)', () => {
  test('from an available, not busy share without a migration record: migrating, migration_starting, the record set', () => {
    for (const taskState of NON_BUSY) {
      const s = share({ taskState, errorReason: 'old' });
      const m = migration();
      const after = ok(migrationTransition(s, { type: 'accept', at: later, migration: m }));
      expect(after).toEqual({ ...s, status: 'migrating', taskState: 'migration_starting', migration: m, errorReason: null, updatedAt: later });
    }
  });

  test('refused from any other status (row 12)', () => {
    for (const status of ['creating', 'deleting', 'error', 'error_deleting', 'migrating', 'migrating_to', 'inactive'] as const) {
      const e = err(migrationTransition(share({ status }), { type: 'accept', at, migration: migration() }));
      expect(e.status).toBe(400);
      expect(e.message).toBe(`Invalid share: Share instance src-instance status must be available, but current status is: ${status}.`);
    }
  });

  test('refused with an access rule in error (row 13)', () => {
    const rule = { id: 'r1', accessType: 'ip' as const, accessTo: '10.0.0.1', accessLevel: 'rw' as const, state: 'error' as const, createdAt: at, updatedAt: at };
    const e = err(migrationTransition(share({ accessRules: { r1: rule } }), { type: 'accept', at, migration: migration() }));
    expect(e.message).toBe('Invalid share: Share instance src-instance access rules status must not be in error when attempting to start a migration.');
    // A rule still being applied is not an error.
    expect(migrationTransition(share({ accessRules: { r1: { ...rule, state: 'applying' } } }), { type: 'accept', at, migration: migration() })).not.toBeInstanceOf(FerryError);
  });

  test('refused while busy (row 14): 400, not 409', () => {
    for (const t of BUSY_TASK_STATES) {
      const e = err(migrationTransition(share({ taskState: t }), { type: 'accept', at, migration: migration() }));
      expect(e.status).toBe(400);
      expect(e.message).toBe(`Share is busy with an active task: Share s1 is busy as part of an active task: ${t}.`);
    }
  });

  test('refused while an earlier migration left something (a record on the share)', () => {
    const leftover = share({ taskState: 'migration_error', migration: migration({ destination: dest({ status: 'error' }) }) });
    const e = err(migrationTransition(leftover, { type: 'accept', at, migration: migration({ id: 'm2' }) }));
    expect(e.message).toMatch(/still holds what an earlier migration left \(destination backend share dst-instance on ferry@nfs-b#pool0, destination capacity on ferry@nfs-b#pool0\); run migration_cancel/);
    expect(startableError(share({ migration: migration() }))!.message).toMatch(/\(its record\)/);
  });

  test('no-op-success: the same preconditions; only task_state becomes migration_success', () => {
    const s = share({ taskState: 'migration_cancelled' });
    expect(ok(migrationTransition(s, { type: 'no-op-success', at: later }))).toEqual({ ...s, taskState: 'migration_success', updatedAt: later });
    expect(migrationTransition(share({ taskState: 'migration_in_progress' }), { type: 'no-op-success', at })).toBeInstanceOf(FerryError);
    expect(migrationTransition(share({ status: 'error' }), { type: 'no-op-success', at })).toBeInstanceOf(FerryError);
  });
});

describe('cancel-requested (migration_cancel)', () => {
  test('in a cancellable state: cancelRequested set, nothing else', () => {
    for (const t of ['data_copying_completed', 'migration_driver_phase1_done', 'migration_driver_in_progress', 'data_copying_in_progress'] as const) {
      const s = migrating(t);
      const after = ok(migrationTransition(s, { type: 'cancel-requested', at: later }));
      expect(after).toEqual({ ...s, migration: { ...s.migration!, cancelRequested: true }, updatedAt: later });
      // Asked again: the same share (nothing to write).
      expect(migrationTransition(after, { type: 'cancel-requested', at })).toBe(after);
    }
  });

  test('refused in the other phase-1/phase-2 states, with the validate message or "cannot be cancelled"', () => {
    for (const t of ['migration_starting', 'migration_in_progress', 'migration_driver_starting', 'data_copying_starting', 'data_copying_completing', 'migration_completing'] as const) {
      expect(err(migrationTransition(migrating(t), { type: 'cancel-requested', at })).message).toBe('Invalid share: Migration of share s1 cannot be cancelled at this moment.');
    }
  });

  test('without a migration record: the _migration_validate_error_message texts', () => {
    const cases: [TaskState | null, string][] = [
      [null, 'There is no migration being performed for share s1 at this moment.'],
      ['migration_error', 'There is no migration being performed for share s1 at this moment.'],
      ['migration_success', 'Migration of share s1 has already completed.'],
      ['migration_cancelled', 'Migration of share s1 was already cancelled.'],
      ['migration_driver_phase1_done', 'Migration of share s1 cannot be cancelled at this moment.'],
    ];
    for (const [taskState, msg] of cases) expect(err(migrationTransition(share({ taskState }), { type: 'cancel-requested', at })).message).toBe(`Invalid share: ${msg}`);
  });

  test('leftovers: a failed cleanup (migration_error, share available) or a retired source after success can be cancelled again', () => {
    const failedCleanup = share({ taskState: 'migration_error', migration: migration({ destination: dest({ status: 'error' }) }) });
    expect(ok(migrationTransition(failedCleanup, { type: 'cancel-requested', at })).migration!.cancelRequested).toBe(true);
    const retired = share({ taskState: 'migration_success', migration: migration({ retired: { ...dest({ id: 'old', host: SRC, status: 'inactive' }) } }) });
    expect(ok(migrationTransition(retired, { type: 'cancel-requested', at })).migration!.cancelRequested).toBe(true);
  });

  test('not after a phase 2 driver failure (share error), nor after a success that retired nothing', () => {
    const phase2Failed = share({ status: 'error', taskState: 'migration_error', migration: migration({ destination: dest({ status: 'error' }) }) });
    expect(err(migrationTransition(phase2Failed, { type: 'cancel-requested', at })).message).toBe('Invalid share: There is no migration being performed for share s1 at this moment.');
    const flippedError = share({ taskState: 'migration_error', migration: migration({ retired: dest({ id: 'old', status: 'inactive' }) }) });
    expect(migrationTransition(flippedError, { type: 'cancel-requested', at })).toBeInstanceOf(FerryError);
    const success = share({ taskState: 'migration_success', migration: migration() });
    expect(err(migrationTransition(success, { type: 'cancel-requested', at })).message).toBe('Invalid share: Migration of share s1 has already completed.');
  });
});

describe('complete-requested (migration_complete)', () => {
  test('from data_copying_completed or migration_driver_phase1_done with a destination: migration_completing', () => {
    for (const t of ['data_copying_completed', 'migration_driver_phase1_done'] as const) {
      const s = migrating(t);
      expect(ok(migrationTransition(s, { type: 'complete-requested', at: later }))).toEqual({ ...s, taskState: 'migration_completing', updatedAt: later });
    }
  });

  test('any other state: the validate message, else "First migration phase ... not completed yet."', () => {
    for (const t of [null, ...TASK_STATES]) {
      if (t === 'data_copying_completed' || t === 'migration_driver_phase1_done') continue;
      const msg =
        t === 'migration_success' ? 'Migration of share s1 has already completed.'
        : t === null || t === 'migration_error' ? 'There is no migration being performed for share s1 at this moment.'
        : t === 'migration_cancelled' ? 'Migration of share s1 was already cancelled.'
        : 'First migration phase of share s1 not completed yet.';
      expect(err(migrationTransition(migrating(t as TaskState), { type: 'complete-requested', at })).message).toBe(`Invalid share: ${msg}`);
    }
  });

  test('not while a cancel is requested, and not without a destination instance', () => {
    expect(err(migrationTransition(migrating('migration_driver_phase1_done', { cancelRequested: true }), { type: 'complete-requested', at })).message).toBe('Invalid share: Migration of share s1 is being cancelled.');
    expect(err(migrationTransition(share({ taskState: 'data_copying_completed' }), { type: 'complete-requested', at })).message).toBe(
      'Invalid share: Share instances src-instance and None in inconsistent states, cannot continue share migration for share s1.',
    );
    expect(migrationTransition(migrating('data_copying_completed', { destination: null }), { type: 'complete-requested', at })).toBeInstanceOf(FerryError);
  });
});

describe('step events', () => {
  const stepEvents = (migrationId: string): MigrationEvent[] => [
    { type: 'task', at, migrationId, from: ['migration_starting'], to: 'migration_in_progress' },
    { type: 'approach', at, migrationId, approach: 'host' },
    { type: 'destination', at, migrationId, destination: null },
    { type: 'destination-update', at, migrationId, changes: { status: 'available' } },
    { type: 'read-only', at, migrationId, cast: true },
    { type: 'data-node-access', at, migrationId, present: true },
    { type: 'copy-started', at, migrationId, operationId: 'op' },
    { type: 'driver-polled', at, migrationId },
    { type: 'flip', at, migrationId },
    { type: 'retired-update', at, migrationId, changes: { ownsBackendShare: false } },
    { type: 'phase2-driver-failed', at, migrationId, reason: 'x' },
    { type: 'finish', at, migrationId, outcome: 'migration_error' },
  ];

  test('a stale migration id (or no migration at all) -> Conflict, nothing changed', () => {
    const s = migrating('migration_starting');
    for (const e of stepEvents('m0')) {
      const r = migrationTransition(s, e);
      expect(r, e.type).toBeInstanceOf(Conflict);
      expect((r as Conflict).status).toBe(409);
    }
    for (const e of stepEvents('m1')) expect(migrationTransition(share(), e), e.type).toBeInstanceOf(Conflict);
  });

  test("'task' only from the listed states; the same state again is a no-op", () => {
    const s = migrating('migration_starting');
    expect(ok(migrationTransition(s, { type: 'task', at, migrationId: 'm1', from: ['migration_starting'], to: 'migration_in_progress' })).taskState).toBe('migration_in_progress');
    expect(err(migrationTransition(s, { type: 'task', at, migrationId: 'm1', from: ['migration_in_progress'], to: 'migration_driver_starting' })).status).toBe(400);
    expect(migrationTransition(s, { type: 'task', at, migrationId: 'm1', from: [], to: 'migration_starting' })).toBe(s);
  });

  test("'task' refused while a cancel is requested (Conflict)", () => {
    const s = migrating('migration_driver_in_progress', { cancelRequested: true });
    const r = migrationTransition(s, { type: 'task', at, migrationId: 'm1', from: ['migration_driver_in_progress'], to: 'migration_driver_phase1_done' });
    expect(r).toBeInstanceOf(Conflict);
    expect((r as Conflict).message).toMatch(/being cancelled/);
  });

  test('a destination that holds a backend share or capacity is neither dropped nor replaced', () => {
    const s = migrating('migration_in_progress');
    expect(migrationTransition(s, { type: 'destination', at, migrationId: 'm1', destination: null })).toBeInstanceOf(FerryError);
    expect(migrationTransition(s, { type: 'destination', at, migrationId: 'm1', destination: dest({ id: 'other' }) })).toBeInstanceOf(FerryError);
    const released = migrating('migration_in_progress', { destination: dest({ capacity: null, ownsBackendShare: false }) });
    expect(ok(migrationTransition(released, { type: 'destination', at, migrationId: 'm1', destination: null })).migration!.destination).toBeNull();
  });
});

describe('flip (phase 2)', () => {
  test('the share takes the destination; the old source is retired, inactive, still holding its backend share and capacity', () => {
    const s = migrating('migration_completing', { readOnlyCast: true });
    const after = ok(migrationTransition(s, { type: 'flip', at: later, migrationId: 'm1' }));
    expect(after).toEqual({
      ...s,
      instanceId: 'dst-instance',
      host: DST,
      exportLocations: ['/shares/nfs-b/share-dst'],
      capacity: { pool: DST, gb: 1 },
      ownsBackendShare: true,
      status: 'available',
      updatedAt: later,
      migration: {
        ...s.migration!,
        destination: null,
        readOnlyCast: false,
        retired: { id: 'src-instance', host: SRC, status: 'inactive', exportLocations: ['/shares/nfs-a/share-src'], capacity: { pool: SRC, gb: 1 }, ownsBackendShare: true },
      },
    });
    // Again: already flipped, nothing changes.
    expect(migrationTransition(after, { type: 'flip', at, migrationId: 'm1' })).toBe(after);
  });

  test('preconditions: migration_completing and a destination that owns its backend share, migrating_to', () => {
    expect(migrationTransition(migrating('migration_driver_phase1_done'), { type: 'flip', at, migrationId: 'm1' })).toBeInstanceOf(FerryError);
    expect(migrationTransition(migrating('migration_completing', { destination: null }), { type: 'flip', at, migrationId: 'm1' })).toBeInstanceOf(FerryError);
    expect(migrationTransition(migrating('migration_completing', { destination: dest({ ownsBackendShare: false }) }), { type: 'flip', at, migrationId: 'm1' })).toBeInstanceOf(FerryError);
    expect(migrationTransition(migrating('migration_completing', { destination: dest({ status: 'creating' }) }), { type: 'flip', at, migrationId: 'm1' })).toBeInstanceOf(FerryError);
  });
});

describe('finish', () => {
  const flipped = (retired: Partial<MigrationInstance> = {}) => {
    const s = ok(migrationTransition(migrating('migration_completing', { newShareNetworkId: null }), { type: 'flip', at, migrationId: 'm1' }));
    return { ...s, migration: { ...s.migration!, retired: { ...s.migration!.retired!, ...retired } } };
  };

  test('success before the flip is refused', () => {
    for (const t of ['migration_completing', 'migration_driver_phase1_done', 'data_copying_completed'] as const) {
      expect(err(migrationTransition(migrating(t), { type: 'finish', at, migrationId: 'm1', outcome: 'migration_success' })).message).toMatch(/has not been moved to its destination/);
    }
  });

  test('success with nothing held: the record cleared, the new type taken, migration_success', () => {
    const s = flipped({ ownsBackendShare: false, capacity: null });
    const after = ok(migrationTransition(s, { type: 'finish', at: later, migrationId: 'm1', outcome: 'migration_success', newShareType: { id: 't2', name: 'on-nfs-b' } }));
    expect(after).toMatchObject({ status: 'available', taskState: 'migration_success', migration: null, shareTypeId: 't2', shareTypeName: 'on-nfs-b', host: DST, errorReason: null });
  });

  test('success while the retired source is still held: the record kept (cancelRequested false) naming what is left', () => {
    const s = { ...flipped(), migration: { ...flipped().migration!, cancelRequested: true } };
    const after = ok(migrationTransition(s, { type: 'finish', at, migrationId: 'm1', outcome: 'migration_success' }));
    expect(after.taskState).toBe('migration_success');
    expect(after.migration).toMatchObject({ id: 'm1', cancelRequested: false, retired: s.migration.retired });
    expect(after.migration!.error).toMatch(/^left after success: retired source backend share src-instance/);
    expect(heldByMigration(after.migration!)).toHaveLength(2);
  });

  test('error/cancelled with something held: the record kept, cancelRequested false, migration_error, share available', () => {
    for (const outcome of ['migration_error', 'migration_cancelled'] as const) {
      const s = migrating('migration_driver_in_progress', { cancelRequested: true, readOnlyCast: true });
      const after = ok(migrationTransition(s, { type: 'finish', at, migrationId: 'm1', outcome, reason: 'boom' }));
      expect(after).toMatchObject({ status: 'available', taskState: 'migration_error', errorReason: 'boom' });
      expect(after.migration).toMatchObject({ destination: s.migration!.destination, readOnlyCast: true, cancelRequested: false });
      expect(after.migration!.error).toMatch(/^cleanup incomplete: destination backend share dst-instance .*; boom$/);
    }
  });

  test('error/cancelled with nothing held: the record cleared, the outcome as task_state', () => {
    const s = migrating('migration_driver_in_progress', { destination: dest({ ownsBackendShare: false, capacity: null }) });
    expect(ok(migrationTransition(s, { type: 'finish', at, migrationId: 'm1', outcome: 'migration_cancelled', reason: 'asked' }))).toMatchObject({
      status: 'available', taskState: 'migration_cancelled', errorReason: null, migration: null,
    });
    expect(ok(migrationTransition(s, { type: 'finish', at, migrationId: 'm1', outcome: 'migration_error', reason: 'boom' }))).toMatchObject({
      status: 'available', taskState: 'migration_error', errorReason: 'boom', migration: null,
    });
  });

  test('after the flip only success is possible', () => {
    for (const outcome of ['migration_error', 'migration_cancelled'] as const) {
      expect(err(migrationTransition(flipped(), { type: 'finish', at, migrationId: 'm1', outcome })).message).toMatch(/already moved to its destination/);
    }
  });
});

describe('property: finish never drops what a migration holds', () => {
  const taskStateArb = fc.constantFrom<TaskState | null>(null, ...TASK_STATES);
  const idArb = fc.constantFrom('m1', 'm1', 'm1', 'm0');
  const capacityArb = fc.option(fc.constantFrom({ pool: DST, gb: 1 }, { pool: SRC, gb: 1 }), { nil: null });
  const instanceArb: fc.Arbitrary<MigrationInstance> = fc.record({
    id: fc.constantFrom('d1', 'd2'),
    host: fc.constant(DST),
    status: fc.constantFrom('creating', 'migrating_to', 'available', 'error', 'inactive') as fc.Arbitrary<MigrationInstance['status']>,
    exportLocations: fc.constant(['/x']).map((x) => [...x]),
    capacity: capacityArb,
    ownsBackendShare: fc.boolean(),
  });
  const changesArb = fc.record({ status: fc.constantFrom('creating', 'migrating_to', 'available', 'inactive') as fc.Arbitrary<MigrationInstance['status']>, capacity: capacityArb, ownsBackendShare: fc.boolean() }, { requiredKeys: [] });
  const eventArb: fc.Arbitrary<MigrationEvent> = fc.oneof(
    fc.record({ type: fc.constant('accept' as const), at: fc.constant(at), migration: fc.constantFrom('m1', 'm2').map((id) => migration({ id })) }),
    fc.record({ type: fc.constant('no-op-success' as const), at: fc.constant(at) }),
    fc.record({ type: fc.constant('task' as const), at: fc.constant(at), migrationId: idArb, from: fc.array(taskStateArb, { maxLength: 4 }), to: taskStateArb.filter((t): t is TaskState => t !== null) }),
    fc.record({ type: fc.constant('approach' as const), at: fc.constant(at), migrationId: idArb, approach: fc.constantFrom('driver', 'host') as fc.Arbitrary<'driver' | 'host'> }),
    fc.record({ type: fc.constant('destination' as const), at: fc.constant(at), migrationId: idArb, destination: fc.option(instanceArb, { nil: null }) }),
    fc.record({ type: fc.constant('destination-update' as const), at: fc.constant(at), migrationId: idArb, changes: changesArb }),
    fc.record({ type: fc.constant('read-only' as const), at: fc.constant(at), migrationId: idArb, cast: fc.boolean() }),
    fc.record({ type: fc.constant('data-node-access' as const), at: fc.constant(at), migrationId: idArb, present: fc.boolean() }),
    fc.record({ type: fc.constant('copy-started' as const), at: fc.constant(at), migrationId: idArb, operationId: fc.constant('op') }),
    fc.record({ type: fc.constant('driver-polled' as const), at: fc.constant(at), migrationId: idArb }),
    fc.record({ type: fc.constant('cancel-requested' as const), at: fc.constant(at) }),
    fc.record({ type: fc.constant('complete-requested' as const), at: fc.constant(at) }),
    fc.record({ type: fc.constant('flip' as const), at: fc.constant(at), migrationId: idArb }),
    fc.record({ type: fc.constant('retired-update' as const), at: fc.constant(at), migrationId: idArb, changes: changesArb }),
    fc.record({ type: fc.constant('phase2-driver-failed' as const), at: fc.constant(at), migrationId: idArb, reason: fc.constant('x') }),
    fc.record({
      type: fc.constant('finish' as const),
      at: fc.constant(at),
      migrationId: idArb,
      outcome: fc.constantFrom('migration_success', 'migration_error', 'migration_cancelled') as fc.Arbitrary<'migration_success' | 'migration_error' | 'migration_cancelled'>,
    }),
  );
  const startArb = fc.record({
    taskState: taskStateArb,
    status: fc.constantFrom('available', 'migrating', 'error') as fc.Arbitrary<Share['status']>,
    destination: fc.option(instanceArb, { nil: null }),
    cancelRequested: fc.boolean(),
    withMigration: fc.boolean(),
  });

  test('a transition to migration null only ever starts from a migration that held nothing; success only after the flip', () => {
    fc.assert(
      fc.property(startArb, fc.array(eventArb, { maxLength: 40 }), (init, events) => {
        let s = share({
          status: init.status,
          taskState: init.taskState,
          migration: init.withMigration ? migration({ destination: init.destination, cancelRequested: init.cancelRequested }) : null,
        });
        for (const e of events) {
          const r = migrationTransition(s, e);
          if (r instanceof FerryError) continue;
          if (s.migration && r.migration === null) {
            expect(heldByMigration(s.migration), `${e.type} dropped a migration that held something`).toEqual([]);
          }
          if (s.migration && r.migration && r.migration.id === s.migration.id) {
            // Whatever was held is still held (on the share after a flip), unless a step explicitly released it.
            const d = s.migration.destination;
            if (d && (d.ownsBackendShare || d.capacity) && e.type !== 'destination-update' && e.type !== 'destination') {
              const stillHeld = r.migration.destination?.id === d.id || (r.instanceId === d.id && r.ownsBackendShare);
              expect(stillHeld, `${e.type} lost destination ${d.id}`).toBe(true);
            }
          }
          if (e.type === 'finish' && e.outcome === 'migration_success' && s.migration) expect(s.migration.retired).not.toBeNull();
          s = r;
        }
      }),
      { numRuns: 2000 },
    );
  });
});
