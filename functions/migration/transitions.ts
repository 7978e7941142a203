/**
 * Every change a migration makes to a share, as a pure function (share, event) -> share | error.
 * The steps persist the result with the share's version condition (shares/repo.ts updateShareBy),
 * so two steps (or a step and an API call) never both act on one read.
 *
 * Every step event names its migration: a step of an older migration of the same share (a
 * zombie Lambda retry, an execution resumed after a restart) finds another id and changes nothing.
 *
 * Invariants kept here rather than trusted to the callers:
 *  - a migration ends (its record is removed) only when it holds nothing: no destination backend
 *    share or capacity, no retired source, no read-only cast, no data-node access;
 *  - it ends in migration_success only after phase 2 flipped the share to the destination.
 */
import { BadRequest, Conflict, FerryError } from '../core/errors.js';
import { BUSY_TASK_STATES, type DriverMigrationProgress, type MigrationApproach, type MigrationEnd, type MigrationInstance, type Share, type ShareMigration, type TaskState, type MigrationDataNode, type CopyTaskDefinition } from '../shares/model.js';
import { InvalidShare } from '../shares/transitions.js';
import { accessRulesStatus } from '../shares/views.js';

export type MigrationOutcome = 'migration_success' | 'migration_error' | 'migration_cancelled';

export type MigrationEvent =
  /** API row 23: the share becomes `migrating` with task_state migration_starting. */
  | { type: 'accept'; at: string; migration: ShareMigration }
  /** API row 20: destination equals source; nothing else happens. */
  | { type: 'no-op-success'; at: string }
  /** A task_state step, allowed only from the listed states. */
  | { type: 'task'; at: string; migrationId: string; from: readonly (TaskState | null)[]; to: TaskState }
  | { type: 'approach'; at: string; migrationId: string; approach: MigrationApproach }
  | { type: 'destination'; at: string; migrationId: string; destination: MigrationInstance | null }
  | { type: 'destination-update'; at: string; migrationId: string; changes: Partial<Omit<MigrationInstance, 'id'>> }
  | { type: 'read-only'; at: string; migrationId: string; cast: boolean }
  | { type: 'data-node-access'; at: string; migrationId: string; present: boolean; dataNode?: MigrationDataNode }
  /** The copy task definition of the migration: its family recorded before it is registered, its ARN after; null once deregistered. */
  | { type: 'copy-task-definition'; at: string; migrationId: string; definition: CopyTaskDefinition | null }
  | { type: 'copy-started'; at: string; migrationId: string; operationId: string }
  /** One migration_continue poll, with what migration_get_progress said before it (when it answered). */
  | { type: 'driver-polled'; at: string; migrationId: string; progress?: DriverMigrationProgress }
  /** migration_cancel: acted on by the running phase 1 machine, or by the cancel machine. */
  | { type: 'cancel-requested'; at: string }
  /** migration_complete: phase 2 begins (one request wins; a cancel cannot also run). */
  | { type: 'complete-requested'; at: string }
  /** Phase 2: the share takes the destination instance; the source is retired. */
  | { type: 'flip'; at: string; migrationId: string; availabilityZone?: string }
  | { type: 'retired-update'; at: string; migrationId: string; changes: Partial<Omit<MigrationInstance, 'id'>> }
  /** Phase 2 of a driver-assisted migration failed: both instances error (reference §1.9). */
  | { type: 'phase2-driver-failed'; at: string; migrationId: string; reason: string }
  | { type: 'finish'; at: string; migrationId: string; outcome: MigrationOutcome; reason?: string; newShareType?: { id: string; name: string } };

/** States from which migration_cancel acts (reference §1.4), plus the copy state it interrupts. */
export const CANCELLABLE_TASK_STATES: readonly TaskState[] = ['data_copying_completed', 'migration_driver_phase1_done', 'migration_driver_in_progress', 'data_copying_in_progress'];
/** States migration_complete accepts (reference §1.4). */
export const COMPLETABLE_TASK_STATES: readonly TaskState[] = ['data_copying_completed', 'migration_driver_phase1_done'];

/** _migration_validate_error_message (reference §1.4): the message for a share not in a migration's middle. */
export function migrationStateMessage(s: Pick<Share, 'id' | 'taskState'>): string | undefined {
  switch (s.taskState) {
    case 'migration_success':
      return `Migration of share ${s.id} has already completed.`;
    case null:
    case 'migration_error':
      return `There is no migration being performed for share ${s.id} at this moment.`;
    case 'migration_cancelled':
      return `Migration of share ${s.id} was already cancelled.`;
    default:
      return undefined;
  }
}

const isBusy = (s: Share) => s.taskState !== null && BUSY_TASK_STATES.includes(s.taskState);

/** What a migration still holds that must be undone before it can end. */
export function heldByMigration(m: ShareMigration): string[] {
  const held: string[] = [];
  if (m.destination?.ownsBackendShare) held.push(`destination backend share ${m.destination.id} on ${m.destination.host}`);
  if (m.destination?.capacity) held.push(`destination capacity on ${m.destination.capacity.pool}`);
  if (m.retired?.ownsBackendShare) held.push(`retired source backend share ${m.retired.id} on ${m.retired.host}`);
  if (m.retired?.capacity) held.push(`retired source capacity on ${m.retired.capacity.pool}`);
  if (m.readOnlyCast) held.push('read-only cast of the source access rules');
  if (m.dataNodeAccess) held.push('data node access rules');
  if (m.copyTaskDefinition) held.push(`copy task definition ${m.copyTaskDefinition.family}`);
  return held;
}

/** Checks of reference §1.3 rows 12-14 on the share as stored (the accept write is conditional on it). */
export function startableError(s: Share): FerryError | undefined {
  if (s.status !== 'available') return new InvalidShare(`Share instance ${s.instanceId} status must be available, but current status is: ${s.status}.`);
  if (accessRulesStatus(s) === 'error') {
    return new InvalidShare(`Share instance ${s.instanceId} access rules status must not be in error when attempting to start a migration.`);
  }
  if (isBusy(s)) return new BadRequest(`Share is busy with an active task: Share ${s.id} is busy as part of an active task: ${s.taskState}.`);
  if (s.migration) {
    return new InvalidShare(`Share ${s.id} still holds what an earlier migration left (${heldByMigration(s.migration).join(', ') || 'its record'}); run migration_cancel to clean it up first.`);
  }
  return undefined;
}

/** The record of how migration `m` ended, kept on the share (Share.lastMigration). */
function ended(m: ShareMigration, outcome: MigrationOutcome, reason: string | null, at: string): MigrationEnd {
  return { id: m.id, outcome, reason, destinationHost: m.destinationHost, approach: m.approach, startedAt: m.startedAt, endedAt: at };
}

export function migrationTransition(s: Share, e: MigrationEvent): Share | FerryError {
  const next = (changes: Partial<Share>): Share => ({ ...s, ...changes, updatedAt: e.at });
  if (e.type === 'accept') {
    const err = startableError(s);
    if (err) return err;
    return next({ status: 'migrating', taskState: 'migration_starting', migration: e.migration, errorReason: null });
  }
  if (e.type === 'no-op-success') {
    const err = startableError(s);
    if (err) return err;
    return next({ taskState: 'migration_success' });
  }
  if (e.type === 'cancel-requested') {
    const m = s.migration;
    if (!m) return new InvalidShare(migrationStateMessage(s) ?? `Migration of share ${s.id} cannot be cancelled at this moment.`);
    if (m.cancelRequested) return s;
    // What a failed cleanup left (never after a phase 2 driver failure: the source may be gone),
    // or a retired source a successful migration could not delete.
    const leftovers = (s.taskState === 'migration_error' && s.status !== 'error' && !m.retired) || (s.taskState === 'migration_success' && m.retired !== null);
    if (!leftovers && !(s.taskState && CANCELLABLE_TASK_STATES.includes(s.taskState))) {
      return new InvalidShare(migrationStateMessage(s) ?? `Migration of share ${s.id} cannot be cancelled at this moment.`);
    }
    return next({ migration: { ...m, cancelRequested: true } });
  }
  if (e.type === 'complete-requested') {
    if (!s.taskState || !COMPLETABLE_TASK_STATES.includes(s.taskState)) {
      return new InvalidShare(migrationStateMessage(s) ?? `First migration phase of share ${s.id} not completed yet.`);
    }
    if (!s.migration?.destination) {
      // get_migrating_instances (upstream a 500 ShareMigrationFailed): e.g. a task_state set by reset_task_state.
      return new InvalidShare(`Share instances ${s.instanceId} and None in inconsistent states, cannot continue share migration for share ${s.id}.`);
    }
    if (s.migration.cancelRequested) return new InvalidShare(`Migration of share ${s.id} is being cancelled.`);
    return next({ taskState: 'migration_completing' });
  }

  const m = s.migration;
  if (!m || m.id !== e.migrationId) return new Conflict(`Share ${s.id} is not in migration ${e.migrationId} (a step of an earlier run; nothing changed).`);
  const withMigration = (changes: Partial<ShareMigration>, shareChanges: Partial<Share> = {}): Share => next({ ...shareChanges, migration: { ...m, ...changes } });

  switch (e.type) {
    case 'task':
      if (s.taskState === e.to) return s;
      if (m.cancelRequested) return new Conflict(`Migration of share ${s.id} is being cancelled; ${e.to} does not follow.`);
      if (!e.from.includes(s.taskState)) return new InvalidShare(`Share ${s.id} task_state is ${s.taskState}; ${e.to} cannot follow it.`);
      return next({ taskState: e.to });
    case 'approach':
      return m.approach === e.approach ? s : withMigration({ approach: e.approach });
    case 'destination':
      if (JSON.stringify(m.destination) === JSON.stringify(e.destination)) return s;
      if (e.destination === null && m.destination && (m.destination.ownsBackendShare || m.destination.capacity)) {
        return new InvalidShare(`The destination instance ${m.destination.id} still holds a backend share or capacity.`);
      }
      if (e.destination && m.destination && m.destination.id !== e.destination.id && (m.destination.ownsBackendShare || m.destination.capacity)) {
        return new InvalidShare(`Share ${s.id} already has the destination instance ${m.destination.id}.`);
      }
      return withMigration({ destination: e.destination });
    case 'destination-update': {
      if (!m.destination) return new InvalidShare(`Share ${s.id} has no destination instance.`);
      const d = { ...m.destination, ...e.changes };
      return JSON.stringify(d) === JSON.stringify(m.destination) ? s : withMigration({ destination: d });
    }
    case 'read-only':
      return m.readOnlyCast === e.cast ? s : withMigration({ readOnlyCast: e.cast });
    case 'data-node-access':
      if (e.present && !m.destination?.ownsBackendShare) return new InvalidShare(`Share ${s.id} has no destination to give the data node access to.`);
      if (m.dataNodeAccess === e.present && (!e.present || !e.dataNode || JSON.stringify(e.dataNode) === JSON.stringify(m.dataNode))) return s;
      // Who the data node is stays recorded while its rules may be held; a grant names it anew.
      return withMigration({ dataNodeAccess: e.present, ...(e.present && e.dataNode ? { dataNode: e.dataNode } : {}) });
    case 'copy-task-definition':
      if (JSON.stringify(m.copyTaskDefinition ?? null) === JSON.stringify(e.definition)) return s;
      if (e.definition && m.copyTaskDefinition && m.copyTaskDefinition.family !== e.definition.family) return new InvalidShare(`Share ${s.id} already has the copy task definition ${m.copyTaskDefinition.family}.`);
      return withMigration({ copyTaskDefinition: e.definition });
    case 'copy-started':
      return withMigration({ copyOperationId: e.operationId, copyAttempts: m.copyAttempts + 1 });
    case 'driver-polled':
      return withMigration({ driverPolls: m.driverPolls + 1, ...(e.progress ? { driverProgress: e.progress } : {}) });
    case 'flip': {
      if (m.retired) return s; // already flipped
      const d = m.destination;
      if (s.taskState !== 'migration_completing') return new InvalidShare(`Share ${s.id} task_state is ${s.taskState}; the instances flip only while migration_completing.`);
      if (!d || !d.ownsBackendShare || d.status !== 'migrating_to') return new InvalidShare(`Share ${s.id} has no destination instance ready to take over.`);
      const retired: MigrationInstance = {
        id: s.instanceId,
        host: s.host ?? '',
        status: 'inactive',
        exportLocations: s.exportLocations,
        capacity: s.capacity,
        ownsBackendShare: s.ownsBackendShare,
      };
      return next({
        instanceId: d.id,
        host: d.host,
        exportLocations: d.exportLocations,
        capacity: d.capacity,
        ownsBackendShare: true,
        status: 'available',
        availabilityZone: e.availabilityZone ?? s.availabilityZone,
        migration: { ...m, destination: null, retired, readOnlyCast: false },
      });
    }
    case 'retired-update': {
      if (!m.retired) return new InvalidShare(`Share ${s.id} has no retired source instance.`);
      const r = { ...m.retired, ...e.changes };
      return JSON.stringify(r) === JSON.stringify(m.retired) ? s : withMigration({ retired: r });
    }
    case 'phase2-driver-failed': {
      if (s.taskState === 'migration_error') return s;
      const destination = m.destination ? { ...m.destination, status: 'error' as const } : null;
      return next({ status: 'error', taskState: 'migration_error', errorReason: e.reason, migration: { ...m, destination, error: e.reason }, lastMigration: ended(m, 'migration_error', e.reason, e.at) });
    }
    case 'finish': {
      if (e.outcome === 'migration_success') {
        if (!m.retired) return new InvalidShare(`Share ${s.id} has not been moved to its destination; the migration cannot succeed.`);
        const held = heldByMigration(m);
        // A retired source that could not be deleted stays on the record (the audit names it); the share itself moved.
        const type = e.newShareType ? { shareTypeId: e.newShareType.id, shareTypeName: e.newShareType.name } : {};
        return next({
          ...type,
          shareNetworkId: m.newShareNetworkId ?? s.shareNetworkId,
          status: 'available',
          taskState: 'migration_success',
          errorReason: null,
          migration: held.length ? { ...m, cancelRequested: false, error: `left after success: ${held.join(', ')}` } : null,
          lastMigration: ended(m, 'migration_success', null, e.at),
        });
      }
      if (m.retired) return new InvalidShare(`Share ${s.id} was already moved to its destination; phase 2 cannot be undone.`);
      const held = heldByMigration(m);
      const reason = e.reason ?? null;
      if (held.length) {
        // Cleanup did not finish: keep the record so the audit names what is left and migration_cancel can finish it.
        return next({
          status: 'available',
          taskState: 'migration_error',
          errorReason: reason,
          // cancelRequested cleared, so a later migration_cancel can run the cleanup again.
          migration: { ...m, cancelRequested: false, error: `cleanup incomplete: ${held.join(', ')}${reason ? `; ${reason}` : ''}` },
          lastMigration: ended(m, 'migration_error', `cleanup incomplete: ${held.join(', ')}${reason ? `; ${reason}` : ''}`, e.at),
        });
      }
      return next({
        status: 'available',
        taskState: e.outcome,
        errorReason: e.outcome === 'migration_error' ? reason : null,
        migration: null,
        lastMigration: ended(m, e.outcome, e.outcome === 'migration_error' ? (reason ?? 'unknown error') : null, e.at),
      });
    }
  }
}
