/**
 * Each kind of operation as an OperationView, from the records its own steps keep: pure functions
 * of those records (read.ts reads them), so what `ferry watch` shows is tested without a stack.
 */
import type { CopyOperationRecord } from '../copy/progress.js';
import type { ReplicationOperation } from '../replication/operation-record.js';
import type { Instance, InstanceAction, Migration } from '../servers/model.js';
import type { Share, TaskState } from '../shares/model.js';
import { etaSeconds, fractionOf, rateFromTimestamps } from './rate.js';
import type { OperationProgress, OperationStatus, OperationView } from './model.js';

/** The measured part of a view: fraction, rate (from the timestamps) and ETA. */
function measured(progress: OperationProgress | null, status: OperationStatus, startedAt: string, updatedAt: string) {
  if (status === 'succeeded') return { progress, fraction: 1, rate: null, etaSeconds: 0 };
  if (!progress) return { progress, fraction: null, rate: null, etaSeconds: null };
  const fraction = fractionOf(progress.done, progress.total);
  const rate = status === 'running' ? rateFromTimestamps(progress.done, startedAt, updatedAt) : null;
  return { progress, fraction, rate, etaSeconds: status === 'running' ? etaSeconds(progress.done, progress.total, rate) : null };
}

// ---- share migrations ------------------------------------------------------------------------

const SHARE_STEPS: Record<TaskState, string> = {
  migration_starting: 'starting',
  migration_in_progress: 'choosing the approach, reserving the destination',
  migration_driver_starting: 'driver-assisted: starting on the backend',
  migration_driver_in_progress: 'driver-assisted: copying',
  migration_driver_phase1_done: 'phase 1 done (driver-assisted): waiting for migration-complete',
  data_copying_starting: 'host-assisted: preparing the destination',
  data_copying_in_progress: 'host-assisted: copying data',
  data_copying_completing: 'host-assisted: removing the copy\'s access',
  data_copying_completed: 'phase 1 done (host-assisted): waiting for migration-complete',
  data_copying_cancelled: 'copy cancelled',
  data_copying_error: 'copy failed',
  migration_completing: 'phase 2: cutting over to the destination',
  migration_success: 'migrated',
  migration_error: 'failed',
  migration_cancelled: 'cancelled',
};

const describeShare = (s: Share) => `share ${s.id}${s.name ? ` (${s.name})` : ''}`;

/**
 * The share's migration: the one running (or left failed on the record), else how the last one
 * ended; undefined when the share never migrated. `copy` is the host-assisted copy's record.
 */
export function shareMigrationView(s: Share, copy?: CopyOperationRecord): OperationView | undefined {
  const m = s.migration;
  const last = s.lastMigration ?? undefined;
  const ref = `share:${s.id}`;
  if (!m) {
    if (!last) return undefined;
    const status: OperationStatus = last.outcome === 'migration_success' ? 'succeeded' : last.outcome === 'migration_cancelled' ? 'cancelled' : 'failed';
    return {
      ref,
      kind: 'share-migration',
      id: last.id,
      resource: `${describeShare(s)}: ${last.outcome === 'migration_success' ? `moved to ${last.destinationHost}` : `${s.host ?? '?'} (was going to ${last.destinationHost})`}`,
      step: SHARE_STEPS[last.outcome],
      status,
      ...measured(null, status, last.startedAt, last.endedAt),
      startedAt: last.startedAt,
      updatedAt: last.endedAt,
      endedAt: last.endedAt,
      ...(last.reason ? { reason: last.reason } : {}),
    };
  }
  const t = s.taskState;
  const failedReason = m.error ?? (t === 'migration_error' ? (s.errorReason ?? 'unknown error') : null);
  let status: OperationStatus = 'running';
  if (failedReason) status = 'failed';
  else if (t === 'migration_driver_phase1_done' || t === 'data_copying_completed') status = 'waiting';
  else if (t === 'migration_success') status = 'succeeded';
  else if (t === 'migration_cancelled') status = 'cancelled';
  let step = t ? SHARE_STEPS[t] : 'starting';
  let progress: OperationProgress | null = null;
  let startedAt = m.startedAt;
  let updatedAt = s.updatedAt;
  if (t === 'data_copying_in_progress' && copy) {
    progress = { done: copy.bytesDone ?? 0, total: copy.bytesTotal ?? 0, unit: 'bytes', filesDone: copy.filesDone ?? 0, filesTotal: copy.filesTotal ?? 0 };
    // The copy's own clock: its rate is bytes over the copy's time, not the migration's.
    startedAt = copy.startedAt;
    updatedAt = copy.updatedAt;
    step += m.copyAttempts > 1 ? ` (attempt ${m.copyAttempts})` : '';
    if (copy.currentFile) step += `: ${copy.currentFile}`;
  } else if (t === 'migration_driver_in_progress' && m.driverProgress) {
    const d = m.driverProgress;
    progress = d.bytesTotal !== undefined ? { done: d.bytesDone ?? 0, total: d.bytesTotal, unit: 'bytes', ...(d.filesTotal !== undefined ? { filesDone: d.filesDone ?? 0, filesTotal: d.filesTotal } : {}) } : { done: d.percent, total: 100, unit: 'percent' };
    updatedAt = d.at;
    step += ` (poll ${m.driverPolls})`;
  } else if (status === 'waiting') {
    progress = { done: 100, total: 100, unit: 'percent' };
  }
  if (m.cancelRequested && status === 'running') step = `cancelling (${step})`;
  return {
    ref,
    kind: 'share-migration',
    id: m.id,
    resource: `${describeShare(s)}: ${s.host ?? '?'} -> ${m.destinationHost}${m.approach ? ` (${m.approach}-assisted)` : ''}`,
    step,
    status,
    ...measured(progress, status, startedAt, updatedAt),
    startedAt: m.startedAt,
    updatedAt: s.updatedAt > updatedAt ? s.updatedAt : updatedAt,
    ...(failedReason ? { reason: failedReason } : {}),
  };
}

/** A copy worker's operation record on its own (`copy:<id>`). */
export function copyView(c: CopyOperationRecord): OperationView {
  const status: OperationStatus = c.status === 'running' ? 'running' : c.status === 'completed' ? 'succeeded' : c.status === 'cancelled' ? 'cancelled' : 'failed';
  const progress: OperationProgress = { done: c.bytesDone ?? 0, total: c.bytesTotal ?? 0, unit: 'bytes', filesDone: c.filesDone ?? 0, filesTotal: c.filesTotal ?? 0 };
  return {
    ref: `copy:${c.operationId}`,
    kind: 'copy',
    id: c.operationId,
    resource: `copy ${c.operationId}`,
    step: c.status === 'running' ? (c.cancelRequested ? 'cancelling' : c.currentFile ? `copying ${c.currentFile}` : 'copying') : c.status,
    status,
    ...measured(progress, status, c.startedAt, c.updatedAt),
    startedAt: c.startedAt,
    updatedAt: c.updatedAt,
    ...(c.finishedAt ? { endedAt: c.finishedAt } : {}),
    ...(c.error ? { reason: c.error } : {}),
  };
}

// ---- replication ----------------------------------------------------------------------------

/** A failover, failback, drill or drill end of a backend, from its operation record. */
export function replicationView(op: ReplicationOperation): OperationView {
  const kind = op.kind === 'failover' ? (op.failback ? 'failback' : 'failover') : op.kind;
  const status: OperationStatus = op.status === 'running' ? 'running' : op.status === 'succeeded' ? 'succeeded' : 'failed';
  const target = op.failback ? 'its primary' : op.target || op.requestedBackendId || 'the first target';
  const progress: OperationProgress | null = op.volumeCount !== undefined ? { done: op.volumesDone ?? 0, total: op.volumeCount, unit: 'volumes' } : null;
  let step: string;
  if (op.status !== 'running') step = op.status;
  else if (op.batchCount === undefined) step = 'listing the backend\'s volumes';
  else if ((op.volumesDone ?? 0) < (op.volumeCount ?? 0)) step = `${op.kind === 'drill-end' ? 'removing drill copies of' : op.kind === 'drill' ? 'bringing up drill copies of' : 'failing over'} volumes (${op.batchCount} batch${op.batchCount === 1 ? '' : 'es'})`;
  else step = 'recording the backend\'s new state';
  const view: OperationView = {
    ref: `replication:${op.id}`,
    kind,
    id: op.id,
    resource: `backend ${op.host} -> ${target}`,
    step,
    status,
    ...measured(progress, status, op.createdAt, op.updatedAt),
    startedAt: op.createdAt,
    updatedAt: op.updatedAt,
    ...(op.status !== 'running' ? { endedAt: op.updatedAt } : {}),
    ...(op.error ? { reason: op.error } : {}),
  };
  // A drill-end or failback with no volumes to move has nothing to measure but is done when it succeeded.
  return view;
}

// ---- servers ----------------------------------------------------------------------------------

/** `compute_live_migration` -> `live migration (compute)`; the event names are Nova's. */
function eventWords(event: string): string {
  const m = /^(compute|conductor|api)_(.+)$/.exec(event);
  return m ? `${m[2]!.replace(/_/g, ' ')} (${m[1]})` : event.replace(/_/g, ' ');
}

/**
 * A server operation from its instance action (the events are its steps), the instance (whether
 * the operation still runs, its task state and fault) and, for a move, its migration record (a live
 * migration's bytes copied).
 */
export function serverOpView(a: InstanceAction, instance: Instance | undefined, migration?: Migration): OperationView {
  const running = instance?.operation?.requestId === a.requestId;
  const failedEvent = a.events.find((e) => e.result === 'Error');
  let status: OperationStatus;
  if (running) status = 'running';
  else if (failedEvent || a.message === 'Error') status = 'failed';
  else if (instance?.vmState === 'resized' && ['resize', 'migrate'].includes(a.action)) status = 'waiting';
  else status = 'succeeded';
  const current = [...a.events].reverse().find((e) => e.finishTime === null) ?? a.events[a.events.length - 1];
  let step: string;
  if (status === 'running') step = `${current ? eventWords(current.event) : 'starting'}${instance?.taskState ? ` [task_state ${instance.taskState}]` : ''}`;
  else if (status === 'waiting') step = 'VERIFY_RESIZE: waiting for resize-confirm or resize-revert';
  else if (status === 'failed') step = `failed${failedEvent ? ` at ${eventWords(failedEvent.event)}` : ''}`;
  else step = 'done';
  const progress: OperationProgress | null = migration?.diskTotal ? { done: migration.diskProcessed ?? 0, total: migration.diskTotal, unit: 'bytes' } : null;
  const reason = status === 'failed' ? (failedEvent?.details ?? instance?.fault?.message ?? 'the action ended in error (no event recorded why)') : undefined;
  const hosts = migration ? `: ${migration.sourceCompute ?? '?'} -> ${migration.destCompute ?? '(to be scheduled)'}` : instance?.host ? ` on ${instance.host}` : '';
  const endedAt = status === 'running' ? undefined : (a.finishTime ?? a.updatedAt);
  return {
    ref: `server:${a.instanceUuid}@${a.requestId}`,
    kind: a.action,
    id: a.requestId,
    resource: `server ${a.instanceUuid}${instance?.name ? ` (${instance.name})` : ''}${hosts}`,
    step,
    status,
    ...measured(progress, status, a.startTime, migration?.updatedAt ?? a.updatedAt),
    startedAt: a.startTime,
    updatedAt: a.updatedAt,
    ...(endedAt ? { endedAt } : {}),
    ...(reason ? { reason } : {}),
  };
}
