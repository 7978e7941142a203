/**
 * The steps of the migration machines (statemachines/share-migration-*.asl.json): one Lambda,
 * `handler({step, shareId, migrationId, error?})`. Each step reads the share, acts on what its
 * migration record says, and records every backend change BEFORE making it (ownsBackendShare,
 * readOnlyCast, dataNodeAccess), so a retried step repeats nothing and `cleanup` knows exactly
 * what to undo at any failure point (reference §1.9).
 *
 * Phase 1 (share-migration-start): begin -> reserve-destination -> driver-start ->
 * (wait, driver-continue)* | host-prepare -> copy task -> copy-ended -> host-finish.
 * Phase 2 (share-migration-complete): complete-begin -> driver-complete | (host) -> apply-rules ->
 * flip -> delete-retired -> finish-success. Cancel and every failure: cleanup.
 */
import { randomUUID } from 'node:crypto';
import { DeleteCommand } from '@aws-sdk/lib-dynamodb';
import { cancellationCodes, db, withRetries } from '../core/db.js';
import { Conflict, DriverError, FerryError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { tableName } from '../core/tables.js';
import type { MigrationRequest, ShareBackendConfig } from '../drivers/share/driver.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { copyOperationKey, getCopyOperation } from '../copy/progress.js';
import { rulesForDriver } from '../shares/access.js';
import { backendShareName, sharePoolOf, type MigrationInstance, type Share, type ShareMigration, type TaskState } from '../shares/model.js';
import { allocatedOnSharePool, getShare, getShareBackend, getShareOrThrow, releaseSharePoolItem, typeCountItem, updateShareBy, writeShareWith, type TransactItem } from '../shares/repo.js';
import { DEFAULT_SHARE_AZ, filterAndWeighShares, NoValidHost, reserveSharePoolItem } from '../shares/scheduler.js';
import { reasonOf, type CaughtError } from '../shares/steps.js';
import { getShareTypeById } from '../shares/types.js';
import { syncDestinationRules, syncSourceRules } from './access.js';
import { migrationTransition, type MigrationEvent, type MigrationOutcome } from './transitions.js';

const now = () => new Date().toISOString();

/** Upstream's ShareMigrationFailed (a 500 in the API; here the reason a machine fails with). */
export class ShareMigrationFailed extends FerryError {
  constructor(reason: string) {
    super(500, 'computeFault', `Share migration failed: ${reason}`);
    this.name = 'ShareMigrationFailed';
  }
}

/** The copy task is started again after a crash or a failed run this many times in all. */
export const MAX_COPY_ATTEMPTS = 3;

/** migration_continue polls before phase 1 gives up (keeps an execution's history under 25,000 events). */
export function maxDriverPolls(): number {
  const v = Number(process.env.FERRY_MIGRATION_MAX_DRIVER_POLLS);
  return Number.isInteger(v) && v > 0 ? v : 2000;
}

export interface MigrationStepInput {
  step: string;
  shareId: string;
  migrationId: string;
  error?: CaughtError;
  outcome?: 'migration_error' | 'migration_cancelled';
}

async function apply(input: { shareId: string }, event: MigrationEvent | ((s: Share) => MigrationEvent)): Promise<Share> {
  return updateShareBy(input.shareId, (s) => migrationTransition(s, typeof event === 'function' ? event(s) : event));
}

/**
 * apply() for events that move something else in the same transaction (a pool's allocation, a
 * type's share count): `build` looks at the current share and returns the event and the other
 * items, or undefined when there is nothing (left) to do. A lost race re-reads and builds again.
 */
async function applyWith(shareId: string, build: (s: Share) => { event: MigrationEvent; items: TransactItem[] } | undefined): Promise<Share> {
  return withRetries(
    async () => {
      const cur = await getShareOrThrow(shareId);
      const plan = build(cur);
      if (!plan) return cur;
      const after = migrationTransition(cur, plan.event);
      if (after instanceof FerryError) throw after;
      return writeShareWith(cur, after, plan.items);
    },
    { retryable: (e) => cancellationCodes(e).some((c) => c === 'ConditionalCheckFailed' || c === 'TransactionConflict') },
  );
}

/** The share and its migration, which must be the one this execution runs. */
async function load(input: MigrationStepInput): Promise<{ s: Share; m: ShareMigration }> {
  const s = await getShareOrThrow(input.shareId);
  if (!s.migration || s.migration.id !== input.migrationId) {
    throw new Conflict(`Share ${input.shareId} is not in migration ${input.migrationId}; this execution has nothing left to do.`);
  }
  return { s, m: s.migration };
}

const task = (input: MigrationStepInput, from: readonly (TaskState | null)[], to: TaskState) =>
  apply(input, { type: 'task', at: now(), migrationId: input.migrationId, from, to });

export function migrationRequest(s: Share, destination: MigrationInstance, destBackend: ShareBackendConfig): MigrationRequest {
  return {
    source: { name: backendShareName(s.instanceId), sizeGb: s.size, proto: s.shareProto },
    destination: { name: backendShareName(destination.id), host: destination.host, backend: destBackend },
  };
}

async function sourceDriver(s: Share) {
  return shareDriverFor(await getShareBackend(s.host!));
}

// ---- phase 1 -------------------------------------------------------------------------------

/**
 * migration_in_progress; picks the approach (reference §1.7 step 2-3): driver-assisted when the
 * source's driver says the destination is compatible and supports every requested flag;
 * otherwise host-assisted, which can honour none of the four flags.
 */
export async function begin(input: MigrationStepInput): Promise<{ approach: string }> {
  let { s, m } = await load(input);
  if (m.approach) return { approach: m.approach };
  s = await task(input, ['migration_starting'], 'migration_in_progress');
  m = s.migration!;
  const destBackend = await getShareBackend(m.destinationHost);
  const destination: MigrationInstance = m.destination ?? {
    id: randomUUID(),
    host: m.destinationHost,
    status: 'creating',
    exportLocations: [],
    capacity: null,
    ownsBackendShare: false,
  };
  if (!m.destination) s = await apply(input, { type: 'destination', at: now(), migrationId: m.id, destination });
  const flags = { writable: m.writable, preserve_metadata: m.preserveMetadata, nondisruptive: m.nondisruptive, preserve_snapshots: m.preserveSnapshots };
  const wanted = Object.entries(flags).filter(([, v]) => v).map(([k]) => k);
  let approach: 'driver' | 'host' = 'host';
  if (!m.forceHostAssisted) {
    const compat = await (await sourceDriver(s)).migrationCheckCompatibility(migrationRequest(s, destination, destBackend));
    const unsupported = wanted.filter((k) => !compat[k as keyof typeof compat]);
    if (compat.compatible && unsupported.length === 0) approach = 'driver';
    else if (wanted.length) {
      throw new ShareMigrationFailed(
        compat.compatible
          ? `the driver cannot honour ${unsupported.join(', ')} and host-assisted migration honours none of them.`
          : `the backends are not compatible for driver-assisted migration and host-assisted migration cannot honour ${wanted.join(', ')}.`,
      );
    }
  }
  await apply(input, { type: 'approach', at: now(), migrationId: m.id, approach });
  return { approach };
}

/** Reserves the share's size on the destination pool (the scheduler's host_passes_filters). */
export async function reserveDestination(input: MigrationStepInput): Promise<{ pool: string }> {
  for (let attempt = 0; attempt < 10; attempt++) {
    const { s, m } = await load(input);
    const d = m.destination!;
    if (d.capacity) return { pool: d.capacity.pool };
    const destBackend = await getShareBackend(d.host);
    const poolName = sharePoolOf(d.host);
    const caps = (await shareDriverFor(destBackend).capabilities()).find((c) => c.pool === poolName);
    if (!caps) throw new NoValidHost(`Pool ${poolName ?? '(none given)'} does not exist on ${destBackend.host}; give the destination as host@backend#pool.`);
    const type = await getShareTypeById(m.newShareTypeId ?? s.shareTypeId);
    const pool = { host: d.host, backend: destBackend, caps, allocatedGb: await allocatedOnSharePool(d.host) };
    const { chosen, rejected } = filterAndWeighShares([pool], { sizeGb: s.size, proto: s.shareProto, extraSpecs: type.extraSpecs, availabilityZone: null });
    if (!chosen.length) throw new NoValidHost(`${rejected.join('; ')}.`);
    const after = migrationTransition(s, { type: 'destination-update', at: now(), migrationId: m.id, changes: { capacity: { pool: d.host, gb: s.size } } });
    if (after instanceof FerryError) throw after;
    try {
      await writeShareWith(s, after, [reserveSharePoolItem(d.host, s.size, caps.totalCapacityGb)]);
      return { pool: d.host };
    } catch (e) {
      const codes = cancellationCodes(e);
      if (codes[1] === 'ConditionalCheckFailed') throw new NoValidHost(`${d.host} was filled by another request.`);
      if (codes[0] === 'ConditionalCheckFailed' || codes.includes('TransactionConflict')) continue;
      throw e;
    }
  }
  throw new ShareMigrationFailed(`share ${input.shareId} kept changing while its destination was reserved.`);
}

/** Driver-assisted start (reference §1.7 step 2): dest instance migrating_to, RO cast if needed, driver.migration_start. */
export async function driverStart(input: MigrationStepInput): Promise<{ taskState: string }> {
  let { s, m } = await load(input);
  // A resumed execution (the local stack re-runs RUNNING executions from the start) finds it done.
  if (s.taskState === 'migration_driver_in_progress' || s.taskState === 'migration_driver_phase1_done') return { taskState: s.taskState };
  const destBackend = await getShareBackend(m.destination!.host);
  const driver = await sourceDriver(s);
  // Recorded before the driver can create anything on the destination, so cleanup removes it.
  s = await apply(input, { type: 'destination-update', at: now(), migrationId: m.id, changes: { ownsBackendShare: true, status: 'migrating_to' } });
  m = s.migration!;
  const req = migrationRequest(s, m.destination!, destBackend);
  const compat = await driver.migrationCheckCompatibility(req);
  if (!compat.writable) {
    s = await apply(input, { type: 'read-only', at: now(), migrationId: m.id, cast: true });
    await syncSourceRules(s);
  }
  await task(input, ['migration_in_progress', 'migration_driver_starting'], 'migration_driver_starting');
  await driver.migrationStart(req);
  s = await task(input, ['migration_driver_starting'], 'migration_driver_in_progress');
  return { taskState: s.taskState! };
}

/**
 * The driver could not start: undo what it may have made (reference §1.9 row 2) and fall back to
 * host-assisted when no flag forbids it; otherwise fail (the machine's rollback runs next).
 */
export async function driverStartFailed(input: MigrationStepInput): Promise<{ approach: string }> {
  let { s, m } = await load(input);
  logger.warn('driver-assisted migration could not start', { shareId: s.id, reason: reasonOf(input.error) });
  await undoDriverDestination(s);
  s = await getShareOrThrow(s.id);
  if (s.migration!.readOnlyCast) {
    s = await apply(input, { type: 'read-only', at: now(), migrationId: m.id, cast: false });
    await syncSourceRules(s);
  }
  m = s.migration!;
  if (m.writable || m.preserveMetadata || m.nondisruptive || m.preserveSnapshots) {
    throw new ShareMigrationFailed(`driver-assisted migration failed (${reasonOf(input.error)}) and host-assisted migration cannot honour the requested flags.`);
  }
  await apply(input, { type: 'approach', at: now(), migrationId: m.id, approach: 'host' });
  await task(input, ['migration_in_progress', 'migration_driver_starting', 'migration_driver_in_progress'], 'migration_in_progress');
  return { approach: 'host' };
}

/** driver.migration_cancel plus the destination's backend share: the driver's half of a rollback. */
async function undoDriverDestination(s: Share): Promise<void> {
  const m = s.migration!;
  const d = m.destination;
  if (!d?.ownsBackendShare) return;
  const destBackend = await getShareBackend(d.host);
  if (m.approach === 'driver') await (await sourceDriver(s)).migrationCancel(migrationRequest(s, d, destBackend));
  await shareDriverFor(destBackend).deleteShare(backendShareName(d.id));
  await apply({ shareId: s.id }, { type: 'destination-update', at: now(), migrationId: m.id, changes: { ownsBackendShare: false, exportLocations: [], status: 'creating' } });
}

/** One poll of the bounded Wait loop: migration_continue, or the cancel the API asked for. */
export async function driverContinue(input: MigrationStepInput): Promise<{ next: 'wait' | 'done' | 'cancel' }> {
  const { s, m } = await load(input);
  if (m.cancelRequested) return { next: 'cancel' };
  if (s.taskState === 'migration_driver_phase1_done') return { next: 'done' };
  if (m.driverPolls >= maxDriverPolls()) throw new ShareMigrationFailed(`migration_continue did not finish within ${m.driverPolls} polls.`);
  await apply(input, { type: 'driver-polled', at: now(), migrationId: m.id });
  const destBackend = await getShareBackend(m.destination!.host);
  const done = await (await sourceDriver(s)).migrationContinue(migrationRequest(s, m.destination!, destBackend));
  if (!done) return { next: 'wait' };
  try {
    await task(input, ['migration_driver_in_progress'], 'migration_driver_phase1_done');
  } catch (e) {
    if ((await getShareOrThrow(s.id)).migration?.cancelRequested) return { next: 'cancel' };
    throw e;
  }
  return { next: 'done' };
}

/** The ECS RunTask parameters of the copy worker (on AWS from the stack; locally placeholders the local integration ignores). */
export function copyTaskParameters(operationId: string, source: string, destination: string) {
  const list = (v: string | undefined) => (v ? v.split(',').map((x) => x.trim()).filter(Boolean) : []);
  return {
    cluster: process.env.FERRY_COPY_CLUSTER ?? 'ferry-local',
    taskDefinition: process.env.FERRY_COPY_TASK_DEFINITION ?? 'ferry-copy-worker',
    subnets: list(process.env.FERRY_COPY_SUBNETS),
    securityGroups: list(process.env.FERRY_COPY_SECURITY_GROUPS),
    environment: [
      { Name: 'FERRY_COPY_OPERATION_ID', Value: operationId },
      { Name: 'FERRY_COPY_SOURCE', Value: source },
      { Name: 'FERRY_COPY_DESTINATION', Value: destination },
    ],
  };
}

export const copyOperationIdOf = (migrationId: string) => `share-migration-${migrationId}`;

/**
 * Host-assisted preparation (reference §1.8): source rules cast read-only, destination share
 * created and `migrating_to`, the data node given access to both, then the copy task's parameters.
 */
export async function hostPrepare(input: MigrationStepInput): Promise<{ copyTask: ReturnType<typeof copyTaskParameters> }> {
  let { s, m } = await load(input);
  if (s.taskState === 'data_copying_completing' || s.taskState === 'data_copying_completed') {
    // Resumed after the copy: the worker finds its operation completed and exits at once; HostFinish resumes.
    return { copyTask: copyTaskParameters(copyOperationIdOf(m.id), s.exportLocations[0]!, m.destination!.exportLocations[0]!) };
  }
  if (s.taskState === 'migration_in_progress') {
    if (!m.readOnlyCast) s = await apply(input, { type: 'read-only', at: now(), migrationId: m.id, cast: true });
    await syncSourceRules(s);
    m = s.migration!;
    const d = m.destination!;
    const destBackend = await getShareBackend(d.host);
    if (!d.ownsBackendShare) s = await apply(input, { type: 'destination-update', at: now(), migrationId: m.id, changes: { ownsBackendShare: true } });
    const created = await shareDriverFor(destBackend).createShare({ name: backendShareName(d.id), sizeGb: s.size, proto: s.shareProto, pool: sharePoolOf(d.host)! });
    s = await apply(input, { type: 'destination-update', at: now(), migrationId: m.id, changes: { exportLocations: [created.exportPath], status: 'migrating_to' } });
    s = await task(input, ['migration_in_progress'], 'data_copying_starting');
  }
  if (s.taskState === 'data_copying_starting') {
    s = await apply(input, { type: 'data-node-access', at: now(), migrationId: s.migration!.id, present: true });
    await syncSourceRules(s);
    await syncDestinationRules(s);
    s = await task(input, ['data_copying_starting'], 'data_copying_in_progress');
  }
  if (s.taskState !== 'data_copying_in_progress') throw new ShareMigrationFailed(`share ${s.id} is ${s.taskState}, not ready to copy.`);
  return { copyTask: await startCopyAttempt(input) };
}

async function startCopyAttempt(input: MigrationStepInput) {
  const operationId = copyOperationIdOf(input.migrationId);
  const s = await apply(input, { type: 'copy-started', at: now(), migrationId: input.migrationId, operationId });
  return copyTaskParameters(operationId, s.exportLocations[0]!, s.migration!.destination!.exportLocations[0]!);
}

/**
 * After the copy task stopped (however it stopped): the operation record decides. A crashed or
 * failed run is started again (it resumes from its journal) up to MAX_COPY_ATTEMPTS in all.
 */
export async function copyEnded(input: MigrationStepInput): Promise<{ next: 'done' | 'retry' | 'cancel'; copyTask?: ReturnType<typeof copyTaskParameters> }> {
  const { m } = await load(input);
  if (m.cancelRequested) return { next: 'cancel' };
  const record = m.copyOperationId ? await getCopyOperation(m.copyOperationId) : undefined;
  if (record?.status === 'completed') return { next: 'done' };
  if (record?.status === 'cancelled') return { next: 'cancel' };
  const why = record?.error ?? reasonOf(input.error);
  if (m.copyAttempts >= MAX_COPY_ATTEMPTS) throw new ShareMigrationFailed(`the data copy failed ${m.copyAttempts} times; last: ${why}`);
  logger.warn('copy task ended without completing; starting it again', { shareId: input.shareId, attempt: m.copyAttempts, why });
  return { next: 'retry', copyTask: await startCopyAttempt(input) };
}

/** data_copying_completing: the data node's access removed; then data_copying_completed (phase 1 done). */
export async function hostFinish(input: MigrationStepInput): Promise<{ taskState: string }> {
  let { s } = await load(input);
  if (s.taskState === 'data_copying_completed') return { taskState: s.taskState };
  s = await task(input, ['data_copying_in_progress', 'data_copying_completing'], 'data_copying_completing');
  if (s.migration!.dataNodeAccess) s = await apply(input, { type: 'data-node-access', at: now(), migrationId: input.migrationId, present: false });
  await syncSourceRules(s);
  await syncDestinationRules(s);
  s = await task(input, ['data_copying_completing'], 'data_copying_completed');
  return { taskState: s.taskState! };
}

// ---- cleanup (cancel, and every failure of phase 1 or of host-assisted phase 2) ---------------

/**
 * Undoes whatever the migration record says is held, in the reverse order of making it, then
 * ends the migration: driver's destination (migration_cancel), data node access, destination
 * share and capacity, read-only cast; a retired source (phase 2 got past the flip) is deleted
 * and the migration ends in success instead. Idempotent at every point.
 */
export async function cleanup(input: MigrationStepInput): Promise<{ taskState: string | null }> {
  let s = await getShare(input.shareId);
  if (!s?.migration || s.migration.id !== input.migrationId) return { taskState: s?.taskState ?? null };
  if (s.migration.retired) {
    // Phase 2 got past the flip and the retired source could not be deleted then: delete it now.
    await deleteRetired(input);
    return finishSuccess(input);
  }
  // A cancel that raced a failure still ends as the operator asked: cancelled, source intact.
  const outcome: MigrationOutcome = s.migration.cancelRequested ? 'migration_cancelled' : (input.outcome ?? 'migration_error');
  const reason = outcome === 'migration_error' ? reasonOf(input.error) : undefined;
  if (s.migration.dataNodeAccess) {
    s = await apply(input, { type: 'data-node-access', at: now(), migrationId: input.migrationId, present: false });
    // Both backends: the source holds the data node's rule too, and a cleanup that fails later
    // must not leave it there unrecorded.
    await syncSourceRules(s);
    await syncDestinationRules(s);
  }
  await undoDriverDestination(s);
  s = await getShareOrThrow(input.shareId);
  await releaseDestinationCapacity(s);
  s = await getShareOrThrow(input.shareId);
  if (s.migration!.readOnlyCast) s = await apply(input, { type: 'read-only', at: now(), migrationId: input.migrationId, cast: false });
  await syncSourceRules(s);
  await deleteCopyRecord(s.migration!);
  s = await apply(input, { type: 'finish', at: now(), migrationId: input.migrationId, outcome, ...(reason ? { reason } : {}) });
  return { taskState: s.taskState };
}

/** The cleanup itself failed after its retries: record migration_error, keeping what is still held on the record. */
export async function cleanupFailed(input: MigrationStepInput): Promise<{ taskState: string | null }> {
  const s = await getShare(input.shareId);
  if (!s?.migration || s.migration.id !== input.migrationId) return { taskState: s?.taskState ?? null };
  // Past the flip the share has moved (migration_error would be refused): it stays migration_success
  // with the retired source on the record, and cancelRequested cleared so migration_cancel can retry.
  if (s.migration.retired) return finishSuccess(input);
  const after = await apply(input, { type: 'finish', at: now(), migrationId: input.migrationId, outcome: 'migration_error', reason: `cleanup failed: ${reasonOf(input.error)}` });
  return { taskState: after.taskState };
}

async function releaseDestinationCapacity(s: Share): Promise<void> {
  await applyWith(s.id, (cur) => {
    const cap = cur.migration?.destination?.capacity;
    if (!cap) return undefined;
    return { event: { type: 'destination-update', at: now(), migrationId: cur.migration!.id, changes: { capacity: null } }, items: [releaseSharePoolItem(cap.pool, cap.gb)] };
  });
}

async function deleteCopyRecord(m: ShareMigration): Promise<void> {
  if (!m.copyOperationId) return;
  await db().send(new DeleteCommand({ TableName: tableName('share'), Key: copyOperationKey(m.copyOperationId) }));
}

// ---- phase 2 -------------------------------------------------------------------------------

/** Driver-assisted phase 2: driver.migration_complete gives the destination's export locations. */
export async function driverComplete(input: MigrationStepInput): Promise<{ exportLocations: string[] }> {
  let { s, m } = await load(input);
  if (m.retired) return { exportLocations: s.exportLocations };
  const d = m.destination!;
  // Phase 2 is disruptive (nondisruptive is never reported): the source stops taking writes
  // before the driver's final sync, so nothing written during it is lost.
  if (!m.readOnlyCast) s = await apply(input, { type: 'read-only', at: now(), migrationId: m.id, cast: true });
  await syncSourceRules(s);
  const paths = await (await sourceDriver(s)).migrationComplete(migrationRequest(s, d, await getShareBackend(d.host)));
  s = await apply(input, { type: 'destination-update', at: now(), migrationId: m.id, changes: { exportLocations: paths } });
  return { exportLocations: paths };
}

/** Phase 2 of a driver-assisted migration failed: upstream's outcome, both instances error, no rollback (§1.9). */
export async function phase2DriverFailed(input: MigrationStepInput): Promise<{ taskState: string | null }> {
  const after = await apply(input, { type: 'phase2-driver-failed', at: now(), migrationId: input.migrationId, reason: reasonOf(input.error) });
  return { taskState: after.taskState };
}

/** apply_new_access_rules: the share's rules, as they are (not read-only), onto the destination. */
export async function applyRules(input: MigrationStepInput): Promise<{ rules: number }> {
  const { s, m } = await load(input);
  if (m.retired) return { rules: 0 };
  const rules = rulesForDriver(s);
  await syncDestinationRules(s, rules);
  return { rules: rules.length };
}

/** The share takes the destination instance; the source is retired (inactive). */
export async function flip(input: MigrationStepInput): Promise<{ host: string }> {
  const { m } = await load(input);
  const zone = m.destination ? zoneOf(await getShareBackend(m.destination.host)) : undefined;
  const s = await apply(input, { type: 'flip', at: now(), migrationId: input.migrationId, ...(zone ? { availabilityZone: zone } : {}) });
  return { host: s.host! };
}

/** Deletes the retired source's backend share (host-assisted; the driver did it for driver-assisted) and gives back its capacity. */
export async function deleteRetired(input: MigrationStepInput): Promise<{ deleted: string | null }> {
  const { m } = await load(input);
  const r = m.retired;
  if (!r) throw new ShareMigrationFailed(`share ${input.shareId} has no retired source to delete.`);
  if (r.ownsBackendShare) {
    await shareDriverFor(await getShareBackend(r.host)).deleteShare(backendShareName(r.id));
    await apply(input, { type: 'retired-update', at: now(), migrationId: m.id, changes: { ownsBackendShare: false, exportLocations: [] } });
  }
  await applyWith(input.shareId, (cur) => {
    const cap = cur.migration?.retired?.capacity;
    if (!cap) return undefined;
    return { event: { type: 'retired-update', at: now(), migrationId: m.id, changes: { capacity: null } }, items: [releaseSharePoolItem(cap.pool, cap.gb)] };
  });
  return { deleted: r.id };
}

/** migration_success, with the new share type's attributes (reference §1.7 "Success"). */
export async function finishSuccess(input: MigrationStepInput): Promise<{ taskState: string | null }> {
  const s = await getShare(input.shareId);
  if (!s?.migration || s.migration.id !== input.migrationId) return { taskState: s?.taskState ?? null };
  const m = s.migration;
  const type = m.newShareTypeId && m.newShareTypeId !== s.shareTypeId ? await getShareTypeById(m.newShareTypeId) : undefined;
  await deleteCopyRecord(m);
  const event: MigrationEvent = { type: 'finish', at: now(), migrationId: m.id, outcome: 'migration_success', ...(type ? { newShareType: { id: type.id, name: type.name } } : {}) };
  if (!type) return { taskState: (await apply(input, event)).taskState };
  // A retype moves the share between the types' share counts in the same transaction.
  const after = await applyWith(input.shareId, (cur) =>
    cur.migration?.id === m.id ? { event, items: [typeCountItem(cur.shareTypeId, -1), typeCountItem(type.id, 1)] } : undefined,
  );
  return { taskState: after.taskState };
}

/** The availability zone of a backend, as the share view shows it after the move. */
export function zoneOf(backend: ShareBackendConfig): string {
  return backend.availabilityZone ?? DEFAULT_SHARE_AZ;
}

// ---- dispatch -------------------------------------------------------------------------------

const STEPS: Record<string, (input: MigrationStepInput) => Promise<unknown>> = {
  begin,
  'reserve-destination': reserveDestination,
  'driver-start': driverStart,
  'driver-start-failed': driverStartFailed,
  'driver-continue': driverContinue,
  'host-prepare': hostPrepare,
  'copy-ended': copyEnded,
  'host-finish': hostFinish,
  cleanup,
  'cleanup-failed': cleanupFailed,
  'driver-complete': driverComplete,
  'phase2-driver-failed': phase2DriverFailed,
  'apply-rules': applyRules,
  flip,
  'delete-retired': deleteRetired,
  'finish-success': finishSuccess,
};

export async function handler(input: MigrationStepInput): Promise<unknown> {
  if (!input || typeof input.shareId !== 'string' || typeof input.migrationId !== 'string') {
    throw new FerryError(400, 'badRequest', 'a migration step needs shareId and migrationId');
  }
  const step = Object.hasOwn(STEPS, input.step) ? STEPS[input.step] : undefined;
  if (!step) throw new DriverError(`unknown migration step ${JSON.stringify(input.step)}`);
  return step(input);
}
