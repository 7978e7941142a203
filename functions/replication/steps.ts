/**
 * The step handlers of statemachines/volume-failover.asl.json: one Lambda,
 * `handler({step, ...})`, running failover, failback, drill start and drill end of one backend.
 *
 *   Prepare  -> Map over batch numbers (MaxConcurrency) of Batch -> Finish
 *   any failure -> Fail (service state per reference §2.3, operation failed)
 *
 * The Map's items are batch numbers, never volumes: a batch's volumes live in DynamoDB (repo.ts),
 * so the execution's payload and history stay small (about 8 events per batch of 198 volumes).
 * Prepare records each batch's volumes as its listing read them (keys, versions and what the
 * failover decides on), so a batch reads one item, not its 198 volumes: every volume's write is
 * conditional on the version listed, and a volume changed since is read again and decided alone.
 *
 * Every step is idempotent: Prepare keeps the first run's plan, a Batch skips volumes this
 * operation already did (`failoverOperationId`), starts the others from the replicas its first run
 * recorded (repo.ts recordReplicaChoices) and the driver's calls are idempotent, Finish and
 * Fail act only while the operation is running. So a retried Task, or a local stack that runs the
 * execution again from the start after a restart, finishes the same operation with the same result.
 */
import { TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import type { AuthContext } from '../core/auth.js';
import { db, isConditionFailure, withRetries } from '../core/db.js';
import { BadRequest } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { negotiateVersion, VOLUME_VERSIONS } from '../core/microversion.js';
import type { RecordReplicaChoices, ReplicatedVolumeRef } from '../drivers/volume/driver.js';
import { driverFor, isReplicationDriver } from '../drivers/volume/registry.js';
import { snapshotErrorItem } from '../snapshots/repo.js';
import { backendOf } from '../volumes/backends.js';
import { REPLICATION, type Volume } from '../volumes/model.js';
import { cancellationCodes, getVolume, toVolume, volumeUpdate, type TransactItem } from '../volumes/repo.js';
import type { CaughtError } from '../core/errors.js';
import { InvalidReplicationTarget, isInvalidReplicationTarget, ReplicationNotSupported } from './errors.js';
import {
  batchGetVolumeItems,
  batchVolumesDone,
  deleteDrillCopies,
  FAILOVER_BATCH_SIZE,
  getBatch,
  drillCopiesToEnd,
  getOperationOrThrow,
  getOperationRecord,
  listFailoverVolumesOnBackend,
  type FailoverVolumeState,
  MAX_TRANSACTION_ITEMS,
  progressUpdate,
  putDrillCopies,
  VOLUMES_PER_TRANSACTION,
  recordPlan,
  recordReplicaChoices,
  type ReplicaChoices,
} from './repo.js';
import { discardUnheldReplicas, holdsReplica, unheldSinceChoice } from './failover-discard.js';
import { fail, finish } from './operation-end.js';
import { getBackendItem } from './service-repo.js';
import { operationIdForExecution, parseAction, recordFailover, validateServiceAction } from './requests.js';
import { FAILBACK_SENTINEL } from '../drivers/volume/driver.js';
import { isReplicatedVolume } from '../volumes/capabilities.js';
import { applyFailoverUpdate, doneBy, markNotCapable, type DriverVolumeUpdate, type VolumeOutcome } from './volume-rules.js';

export { MAX_TRANSACTION_ITEMS } from './operation-record.js';

const now = () => new Date().toISOString();
const range = (n: number) => Array.from({ length: n }, (_, i) => i);

export interface FailoverStepInput {
  step: 'prepare' | 'batch' | 'finish' | 'fail';
  operationId?: string;
  batch?: number;
  error?: CaughtError;
  /** prepare: the execution's input — `{operationId}` (API start) or a console start (below). */
  request?: { operationId?: string; action?: string; host?: string; backend_id?: string | null; drill?: boolean | string; cluster?: string | null };
  /** fail: the execution's state when it failed (`prepared` is there once Prepare ran). */
  state?: { operationId?: string; prepared?: { operationId?: string } };
  executionName?: string;
}

/** A console start runs as an operator. */
const CONSOLE_AUTH: AuthContext = { userId: 'admin', projectId: 'admin', isAdmin: true, roles: ['admin', 'member', 'reader'] };

// ---- Prepare --------------------------------------------------------------------------------------

/**
 * First state. An API start passes `{operationId}` of an operation the API recorded; a console
 * start passes the os-services body (`{host, backend_id, drill?}`, optional `action`, default
 * failover_host) and gets the same validation and recording, with the operation id derived from
 * the execution name. Then, once per operation: resolve the target through the driver (so an
 * InvalidReplicationTarget changes no volume), list the backend's volumes and record the batches.
 * No rollback of its own: a failure goes to Fail, which puts the service back (§2.3).
 */
export async function prepare(input: FailoverStepInput): Promise<{ operationId: string; batches: number[] }> {
  const operationId = input.request?.operationId ?? (await recordConsoleStart(input));
  const op = await getOperationOrThrow(operationId);
  if (op.status !== 'running') return { operationId, batches: [] };
  if (op.batchCount !== undefined) return { operationId, batches: range(op.batchCount) };

  const item = await getBackendItem(op.host);
  if (op.kind === 'drill-end') {
    // The batches are the drill's: each has one copies item to remove.
    const drillOp = await getOperationOrThrow(op.drillOperationId!);
    const planned = await recordPlan(op.id, { target: op.target ?? '', batches: range(drillOp.batchCount ?? 0).map(() => []) });
    return { operationId, batches: range(planned.batchCount ?? 0) };
  }
  let target = op.target ?? '';
  if (op.kind === 'failover') {
    const driver = driverFor(item.config, item.service.activeBackendId);
    if (!isReplicationDriver(driver)) throw new ReplicationNotSupported(op.host, item.config.driver);
    if (op.failback) {
      // Failing back needs a backend that runs on a target; the batches ask the driver to bring
      // each volume home, and nothing is resolved up front (a failback is not a probe).
      if (!item.service.activeBackendId) throw new InvalidReplicationTarget(`Invalid Replication Target: ${op.host} is not failed over; there is nothing to fail back from.`);
      target = '';
    } else {
      // Resolve the target once, before any volume changes, so every batch names the same one: a
      // named target must be one of the driver's; null asks the driver to pick (a call with no
      // volumes). An invalid target is refused here and no volume is touched (upstream would
      // already have marked the non-replicated ones; see docs/compatibility.md).
      if (op.requestedBackendId !== null) {
        if (!driver.replicationTargets().includes(op.requestedBackendId)) {
          throw new InvalidReplicationTarget(`Invalid Replication Target: ${op.requestedBackendId} is not a replication target of ${op.host} (expected one of ${driver.replicationTargets().join(', ') || 'none'}).`);
        }
        target = op.requestedBackendId;
      } else {
        try {
          target = (await driver.failoverHost([], null)).activeBackendId;
        } catch (e) {
          if (isInvalidReplicationTarget(e)) throw new InvalidReplicationTarget((e as Error).message, e);
          throw e;
        }
      }
    }
  }
  const volumes = await listFailoverVolumesOnBackend(op.host);
  const batches: FailoverVolumeState[][] = [];
  const size = batchSize();
  for (let i = 0; i < volumes.length; i += size) batches.push(volumes.slice(i, i + size));
  const planned = await recordPlan(op.id, { target, batches });
  return { operationId, batches: range(planned.batchCount ?? 0) };
}

/** Volumes per batch: FERRY_FAILOVER_BATCH_SIZE (tests make several batches of a few volumes), else the default. */
function batchSize(): number {
  const n = Number(process.env.FERRY_FAILOVER_BATCH_SIZE);
  return Number.isInteger(n) && n > 0 ? n : FAILOVER_BATCH_SIZE;
}

async function recordConsoleStart(input: FailoverStepInput): Promise<string> {
  const req = input.request ?? {};
  const id = operationIdForExecution(input.executionName ?? 'console');
  if (await getOperationRecord(id)) return id; // recorded by an earlier run of this step
  const version = negotiateVersion({ 'openstack-api-version': 'volume 3.70' }, VOLUME_VERSIONS);
  const action = parseAction(req.action ?? 'failover_host', version);
  const body = Object.fromEntries(Object.entries({ host: req.host, backend_id: req.backend_id, drill: req.drill, cluster: req.cluster }).filter(([, v]) => v !== undefined));
  const { request, item } = await validateServiceAction(CONSOLE_AUTH, action, body, version);
  if (action === 'freeze' || action === 'thaw') throw new BadRequest(`Invalid input received: the volume-failover machine runs failover_host/failover only, not ${action}.`);
  await recordFailover(CONSOLE_AUTH, request, item, id);
  return id;
}

// ---- Batch ----------------------------------------------------------------------------------------

/** What one batch did (the Map drops it; the operation record keeps the progress). */
export interface BatchResult {
  batch: number;
  volumes: number;
}

export async function runBatch(operationId: string, batch: number): Promise<BatchResult> {
  // Two round trips: the operation then its backend, beside the batch's item and its progress
  // (then its volumes only when they must be read again; a drill-end batch lists none). Read even
  // when the operation turns out ended: a wasted read then, one round trip fewer on every batch.
  const [{ op, item }, carried] = await Promise.all([
    getOperationOrThrow(operationId).then(async (o) => ({ op: o, item: o.status === 'running' ? await getBackendItem(o.host) : undefined })),
    batchVolumes(operationId, batch),
  ]);
  if (op.status !== 'running' || !item) return { batch, volumes: 0 };
  const driver = driverFor(item.config, item.service.activeBackendId);
  if (!isReplicationDriver(driver)) throw new ReplicationNotSupported(op.host, item.config.driver);

  if (op.kind === 'drill-end') {
    // What the batch recorded, or what it chose before a crash lost the record of what it made.
    const copies = await drillCopiesToEnd(op.drillOperationId!, batch, op.target ?? '');
    if (copies.length) await driver.endDrill(copies);
    await deleteDrillCopies(op.drillOperationId!, batch);
    return { batch, volumes: copies.length };
  }

  // Only volumes still on this backend (one deleted meanwhile is simply gone).
  const volumes = carried.volumes.filter((v) => onBackend(v, op.host));
  // The replicas the driver starts the batch's volumes from: recorded before it makes anything, and
  // an earlier run's record handed back to it (refOf), so a re-run starts each from the same one.
  const recordReplicas: RecordReplicaChoices = (chosen, replacing) => recordReplicaChoices(operationId, batch, chosen, replacing);
  const { replicaChoices } = carried;
  const refOf = (v: Volume): ReplicatedVolumeRef => ({ volumeId: v.id, backendName: v.backendName, sizeGb: v.size, ...(v.providerLocation ? { location: v.providerLocation } : {}), ...(replicaChoices ? { replica: replicaChoices[v.id] ?? null } : {}) });

  if (op.kind === 'drill') {
    const replicated = volumes.filter(isReplicatedVolume);
    if (replicated.length) {
      const copies = await driver.startDrill(replicated.map(refOf), op.target!, recordReplicas);
      await putDrillCopies(operationId, batch, copies);
    }
    return { batch, volumes: replicated.length };
  }

  const todo = volumes.filter((v) => !doneBy(v, operationId));
  const at = now();
  const pending: PendingOutcome[] = [];
  // Before the driver, as upstream: a non-replicated volume is marked not-capable unless failing back.
  if (!op.failback) {
    for (const v of todo.filter((x) => !isReplicatedVolume(x))) pending.push({ before: v, decide: (fresh) => markNotCapable(fresh, operationId, at) });
  }
  // One being deleted gets no replica (its delete would leave it behind); nor one listed with a replica chosen and unheld since.
  const replicated = todo.filter((v) => isReplicatedVolume(v) && (op.failback || v.status !== 'deleting'));
  const refound = op.failback ? [] : unheldSinceChoice(carried.listed, replicaChoices, volumes, op.host);
  let updates = new Map<string, DriverVolumeUpdate>();
  let activeBackendId = '';
  if (replicated.length || refound.length) {
    try {
      // A failback brings home the volume that is there: nothing to choose.
      const result = op.failback ? await driver.failoverHost(replicated.map(refOf), FAILBACK_SENTINEL) : await driver.failoverHost([...replicated.map(refOf), ...refound], op.target!, recordReplicas);
      updates = new Map(result.volumeUpdates.map((u) => [u.volumeId, u.updates]));
      activeBackendId = result.activeBackendId;
    } catch (e) {
      if (isInvalidReplicationTarget(e)) throw new InvalidReplicationTarget((e as Error).message, e);
      throw e;
    }
    for (const v of replicated) pending.push({ before: v, decide: (fresh) => applyFailoverUpdate(fresh, updates.get(v.id), op.failback, operationId, at) });
  }
  const unheld = await writeOutcomes(op.host, operationId, batch, await withSnapshotIds(op.host, pending, carried.withoutSnapshotIds));
  // What the driver brought up for a volume whose record does not hold it (failover-discard.ts).
  if (!op.failback) {
    const left = [...replicated.filter((v) => unheld.has(v.id)), ...refound.map((r) => ({ id: r.volumeId, backendName: r.backendName }))].flatMap((v) => {
      const location = updates.get(v.id)?.providerLocation;
      return location ? [{ volumeId: v.id, backendName: v.backendName, targetBackendId: activeBackendId, location }] : [];
    });
    await discardUnheldReplicas(driver, operationId, batch, left);
  }
  return { batch, volumes: todo.length };
}

const onBackend = (v: Pick<Volume, 'host'>, host: string): boolean => !!v.host && backendOf(v.host) === host;

/**
 * A batch's volumes. On its first run, as Prepare's listing recorded them (no read: each write's
 * condition on the version listed proves the volume unchanged). A batch whose progress shows
 * volumes done ran before (a retried Task, a restarted stack): what it carries is stale for those,
 * so it reads them all again, as does a plan recorded with ids only. `withoutSnapshotIds`: the
 * carried volumes that have snapshots whose ids were not carried (withSnapshotIds reads them when
 * an outcome needs them).
 */
async function batchVolumes(operationId: string, batch: number): Promise<{ volumes: Volume[]; listed: FailoverVolumeState[]; withoutSnapshotIds: Set<string>; replicaChoices?: ReplicaChoices }> {
  const [recorded, done] = await Promise.all([getBatch(operationId, batch), batchVolumesDone(operationId, batch)]);
  if ('volumes' in recorded && done === 0) {
    const volumes = recorded.volumes.map(({ snapshots: _count, ...v }) => toVolume(v));
    return { volumes, listed: recorded.volumes, withoutSnapshotIds: new Set(recorded.volumes.filter((v) => v.snapshots > 0).map((v) => v.id)), replicaChoices: recorded.replicaChoices };
  }
  const listed = 'volumes' in recorded ? recorded.volumes : [];
  const ids = 'volumes' in recorded ? recorded.volumes.map((v) => v.id) : recorded.volumeIds;
  return { volumes: (await batchGetVolumeItems(ids)).map(toVolume), listed, withoutSnapshotIds: new Set(), replicaChoices: recorded.replicaChoices };
}

/**
 * The outcomes that set a volume's snapshots `error` (not-capable, failover-error) need the
 * snapshot ids a batch does not carry: those volumes are read again (one BatchGetItem) and decided
 * on what was read; one gone or moved to another backend meanwhile is left out, as writeOne does.
 */
async function withSnapshotIds(host: string, pending: PendingOutcome[], withoutSnapshotIds: Set<string>): Promise<PendingOutcome[]> {
  const stale = pending.filter((p) => withoutSnapshotIds.has(p.before.id) && setsSnapshotsError(p.decide(p.before)));
  if (!stale.length) return pending;
  const fresh = new Map((await batchGetVolumeItems(stale.map((p) => p.before.id))).map((i) => [i.id as string, toVolume(i)]));
  return pending.flatMap((p) => {
    if (!stale.includes(p)) return [p];
    const v = fresh.get(p.before.id);
    return v && onBackend(v, host) ? [{ ...p, before: v }] : [];
  });
}

const setsSnapshotsError = (o: VolumeOutcome): boolean => o.volume.replicationStatus === REPLICATION.notCapable || o.volume.replicationStatus === REPLICATION.failoverError;

interface PendingOutcome {
  before: Volume;
  /** The rule applied to a volume as read (re-applied to a fresh read after a lost race). */
  decide: (v: Volume) => VolumeOutcome;
}

function outcomeItems(before: Volume, outcome: VolumeOutcome, at: string): TransactItem[] {
  return [{ Update: volumeUpdate(before, outcome.volume) }, ...outcome.snapshotsToError.map((id) => snapshotErrorItem(id, at))];
}

/**
 * Transactions one batch has in flight at once: a full batch's two, side by side (each has its own
 * progress slot, so they touch no common item). A batch with more (volumes carrying snapshots
 * take more items) writes them two at a time.
 */
const TRANSACTIONS_IN_FLIGHT = 2;

/** Volumes per transaction: FERRY_FAILOVER_TRANSACTION_VOLUMES (tests make several transactions of a few volumes), else as many as fit. */
function volumesPerTransaction(): number {
  const n = Number(process.env.FERRY_FAILOVER_TRANSACTION_VOLUMES);
  return Number.isInteger(n) && n > 0 && n <= VOLUMES_PER_TRANSACTION ? n : VOLUMES_PER_TRANSACTION;
}

/**
 * One conditional write per volume (on its `version`), packed into transactions of up to 100
 * items (a volume and its snapshots always in the same one), each with its slot's progress count
 * of the volumes it switches (operation-record.ts), so progress is exactly the volumes written.
 * The transactions are written side by side (TRANSACTIONS_IN_FLIGHT): each is atomic with its own
 * count, so a crash between them leaves the done volumes counted and the rest to the re-run. A
 * transaction refused because some volume changed meanwhile (an attach, a rename) falls back to
 * writing its volumes one by one, each re-read and re-decided; one this operation already did is
 * skipped (it was counted when it was done), and so is one whose record no longer holds a replica:
 * gone, moved to another backend or being deleted since the listing (failover-discard.ts). Answers
 * the ids of those.
 */
async function writeOutcomes(host: string, operationId: string, batch: number, pending: PendingOutcome[]): Promise<Set<string>> {
  const at = now();
  // One slot of every transaction is the progress count.
  const room = MAX_TRANSACTION_ITEMS - 1;
  const volumesEach = volumesPerTransaction();
  let chunk: { items: TransactItem[]; members: PendingOutcome[] } = { items: [], members: [] };
  const chunks: (typeof chunk)[] = [];
  for (const p of pending) {
    const items = outcomeItems(p.before, p.decide(p.before), at);
    if ((chunk.items.length + items.length > room || chunk.members.length >= volumesEach) && chunk.items.length) {
      chunks.push(chunk);
      chunk = { items: [], members: [] };
    }
    chunk.items.push(...items);
    chunk.members.push(p);
  }
  if (chunk.items.length) chunks.push(chunk);
  const unheld = new Set<string>();
  const writeChunk = async (c: typeof chunk, slot: number): Promise<void> => {
    try {
      await db().send(new TransactWriteCommand({ TransactItems: [...c.items, { Update: progressUpdate(operationId, batch, slot, c.members.length, at) }] }));
    } catch (e) {
      if (!isConditionFailure(e) && !cancellationCodes(e).includes('TransactionConflict')) throw e;
      for (const p of c.members) if ((await writeOne(host, operationId, batch, slot, p)) === 'unheld') unheld.add(p.before.id);
    }
  };
  let next = 0;
  let stopped = false;
  const lanes = Array.from({ length: Math.min(TRANSACTIONS_IN_FLIGHT, chunks.length) }, async () => {
    for (let slot = next++; slot < chunks.length && !stopped; slot = next++) {
      await writeChunk(chunks[slot]!, slot).catch((e: unknown) => {
        stopped = true;
        throw e;
      });
    }
  });
  // Every lane ends (its transaction in flight answered, no new one started) before the batch
  // answers, so no write of this run lands behind a retried batch; the first error is the batch's.
  const settled = await Promise.allSettled(lanes);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) throw failed.reason;
  return unheld;
}

async function writeOne(host: string, operationId: string, batch: number, slot: number, p: PendingOutcome): Promise<'written' | 'unheld' | 'skipped'> {
  return withRetries(
    async () => {
      const fresh = await getVolume(p.before.id);
      if (!holdsReplica(fresh, host)) return 'unheld';
      if (doneBy(fresh, operationId)) return 'skipped';
      const at = now();
      await db().send(new TransactWriteCommand({ TransactItems: [...outcomeItems(fresh, p.decide(fresh), at), { Update: progressUpdate(operationId, batch, slot, 1, at) }] }));
      return 'written';
    },
    { retryable: (e) => isConditionFailure(e) || cancellationCodes(e).includes('TransactionConflict'), attempts: 20 },
  );
}

// ---- dispatch -------------------------------------------------------------------------------------

function need<T>(value: T | undefined, what: string, step: string): T {
  if (value === undefined) throw new BadRequest(`step ${step} needs ${what}`);
  return value;
}

export async function handler(input: FailoverStepInput): Promise<unknown> {
  switch (input.step) {
    case 'prepare':
      return prepare(input);
    case 'batch':
      return runBatch(need(input.operationId, 'operationId', input.step), need(input.batch, 'batch', input.step));
    case 'finish':
      return finish(need(input.operationId, 'operationId', input.step));
    case 'fail': {
      // Which operation failed: Prepare's result, the API's input, or a console start's derived id.
      const id = input.operationId ?? input.state?.prepared?.operationId ?? input.state?.operationId ?? (input.executionName ? operationIdForExecution(input.executionName) : undefined);
      return fail(id, input.error);
    }
    default:
      logger.error('unknown failover step', { step: (input as { step?: unknown }).step });
      throw new BadRequest(`unknown failover step ${JSON.stringify((input as { step?: unknown }).step)}`);
  }
}
