/**
 * Persistence of replication: the backend item's `service` (reference §2.3), failover operations,
 * their batches, and drills — all in the volume table.
 *
 * - backend item (backends.ts): `service` map; `failoverOperationId` (the operation that set
 *   `failing-over`); `drill` ({operationId, target, status}) while a drill exists.
 * - operation: pk `REPLOP#<id>`, sk `OP` — kind, host, target, status, batchCount, progress.
 * - batch:     pk `REPLOP#<id>`, sk `BATCH#<nnnnn>` — the volume ids of one Map item (the Map's
 *   items are batch numbers, so an execution's payload stays small whatever the backend holds).
 * - drill copies: pk `REPLOP#<drill op id>`, sk `COPIES#<nnnnn>` — what startDrill made for a batch.
 *
 * Every change of `service` is a conditional write whose condition is the transition's guard
 * (frozen = false for freeze, replication_status in [...] for failover, ...), so two requests
 * racing for one backend cannot both pass; no read-then-write.
 */
import { BatchGetCommand, BatchWriteCommand, DeleteCommand, GetCommand, PutCommand, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure, queryAll, scanAll, withRetries } from '../core/db.js';
import { FerryError, NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { BackendConfig, BackendServiceState, DrillCopy } from '../drivers/volume/driver.js';
import { backendOf, initialServiceState } from '../volumes/backends.js';
import { cancellationCodes } from '../volumes/repo.js';
import { FAILOVER_FROM, REPLICATION, serviceTransition, type ServiceEvent } from './service-state.js';

const backendKey = (host: string) => ({ pk: `BACKEND#${backendOf(host)}`, sk: 'BACKEND' });
export const operationKey = (id: string) => ({ pk: `REPLOP#${id}`, sk: 'OP' });
const batchKey = (id: string, n: number) => ({ pk: `REPLOP#${id}`, sk: `BATCH#${String(n).padStart(5, '0')}` });
const copiesKey = (id: string, n: number) => ({ pk: `REPLOP#${id}`, sk: `COPIES#${String(n).padStart(5, '0')}` });

/** Volumes per Map item: few enough for one step to finish well inside its timeout, many enough to keep the history small. */
export const FAILOVER_BATCH_SIZE = 200;

export type OperationKind = 'failover' | 'drill' | 'drill-end';

export interface DrillState {
  operationId: string;
  target: string;
  /** starting -> active (copies up) | failed (some copies may exist) -> ending -> removed */
  status: 'starting' | 'active' | 'failed' | 'ending';
  /** The operation that is removing the copies, while ending. */
  endOperationId?: string;
}

export interface BackendItem {
  config: BackendConfig;
  service: BackendServiceState;
  /** False when the item predates service state (a backend put without it). */
  hasService: boolean;
  failoverOperationId?: string;
  drill?: DrillState;
}

export interface ReplicationOperation {
  id: string;
  kind: OperationKind;
  /** `host@backend` */
  host: string;
  /** What the request asked for: a backend_id, null (the driver picks) or 'default'. */
  requestedBackendId: string | null;
  failback: boolean;
  /** The target the driver resolved (failover/drill), '' for failback. Set by the first step. */
  target?: string;
  /** drill-end: the drill operation whose copies are removed. */
  drillOperationId?: string;
  status: 'running' | 'succeeded' | 'failed';
  batchCount?: number;
  volumeCount?: number;
  volumesDone?: number;
  error?: string;
  requestedBy: string;
  createdAt: string;
  updatedAt: string;
}

export async function getBackendItem(host: string): Promise<BackendItem> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: backendKey(host), ConsistentRead: true }));
  if (!out.Item) throw new NotFound(`Service ${backendOf(host)} could not be found.`);
  const config = out.Item.config as BackendConfig;
  const service = out.Item.service as BackendServiceState | undefined;
  return {
    config,
    service: service ?? initialServiceState(config),
    hasService: service !== undefined,
    failoverOperationId: out.Item.failoverOperationId as string | undefined,
    drill: out.Item.drill as DrillState | undefined,
  };
}

/**
 * Gives a backend item its `service` map if it has none (a backend put before service state
 * existed), so the conditions below can name `service.<field>`. Never replaces an existing one.
 */
export async function ensureServiceState(item: BackendItem): Promise<void> {
  if (item.hasService) return;
  await db().send(
    new UpdateCommand({
      TableName: tableName('volume'),
      Key: backendKey(item.config.host),
      UpdateExpression: 'SET #service = if_not_exists(#service, :initial)',
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeNames: { '#service': 'service' },
      ExpressionAttributeValues: { ':initial': initialServiceState(item.config) },
    }),
  );
}

/**
 * API failover accepted: `failing-over`, conditional on replication_status being enabled or
 * failed-over (upstream's `_replication_db_change`), written with the operation record in one
 * transaction. Refused -> the transition's own 400 (upstream's message).
 */
export async function beginFailover(item: BackendItem, op: ReplicationOperation): Promise<void> {
  const host = item.config.host;
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          {
            Update: {
              TableName: tableName('volume'),
              Key: backendKey(host),
              UpdateExpression: 'SET #service.#rs = :failingOver, failoverOperationId = :op',
              ConditionExpression: '#service.#rs IN (:from0, :from1)',
              ExpressionAttributeNames: { '#service': 'service', '#rs': 'replicationStatus' },
              ExpressionAttributeValues: { ':failingOver': REPLICATION.failingOver, ':op': op.id, ':from0': FAILOVER_FROM[0], ':from1': FAILOVER_FROM[1] },
            },
          },
          { Put: { TableName: tableName('volume'), Item: { ...operationKey(op.id), ...op }, ConditionExpression: 'attribute_not_exists(pk)' } },
        ],
      }),
    );
  } catch (e) {
    const codes = cancellationCodes(e);
    if (codes[0] === 'ConditionalCheckFailed') {
      const refused = serviceTransition(host, { ...item.service, replicationStatus: REPLICATION.failingOver }, { type: 'failover-requested' });
      throw refused instanceof FerryError ? refused : e;
    }
    throw e;
  }
}

/** Starts a drill: only from the primary (`enabled`) and only one drill per backend at a time. */
export async function beginDrill(item: BackendItem, op: ReplicationOperation, target: string): Promise<void> {
  const host = item.config.host;
  const drill: DrillState = { operationId: op.id, target, status: 'starting' };
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          {
            Update: {
              TableName: tableName('volume'),
              Key: backendKey(host),
              UpdateExpression: 'SET drill = :drill',
              ConditionExpression: '#service.#rs = :enabled AND attribute_not_exists(drill)',
              ExpressionAttributeNames: { '#service': 'service', '#rs': 'replicationStatus' },
              ExpressionAttributeValues: { ':drill': drill, ':enabled': REPLICATION.enabled },
              ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
            },
          },
          { Put: { TableName: tableName('volume'), Item: { ...operationKey(op.id), ...op, target }, ConditionExpression: 'attribute_not_exists(pk)' } },
        ],
      }),
    );
  } catch (e) {
    const codes = cancellationCodes(e);
    if (codes[0] === 'ConditionalCheckFailed') {
      const now = await getBackendItem(host);
      if (now.drill) throw new FerryError(400, 'badRequest', `Invalid input received: Backend ${host} already has a drill (${now.drill.status}, operation ${now.drill.operationId}); end it first with {"drill": "end"}.`);
      throw new FerryError(400, 'badRequest', `Invalid input received: A drill needs backend ${host} running on its primary with replication_status enabled; it is ${now.service.replicationStatus}.`);
    }
    throw e;
  }
}

/** Starts removing a drill's copies: the drill must be active or failed (a failed one may have made some). */
export async function beginDrillEnd(item: BackendItem, op: ReplicationOperation): Promise<void> {
  const host = item.config.host;
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          {
            Update: {
              TableName: tableName('volume'),
              Key: backendKey(host),
              UpdateExpression: 'SET drill.#status = :ending, drill.endOperationId = :op',
              ConditionExpression: 'drill.#status IN (:active, :failed)',
              ExpressionAttributeNames: { '#status': 'status' },
              ExpressionAttributeValues: { ':ending': 'ending', ':op': op.id, ':active': 'active', ':failed': 'failed' },
            },
          },
          { Put: { TableName: tableName('volume'), Item: { ...operationKey(op.id), ...op }, ConditionExpression: 'attribute_not_exists(pk)' } },
        ],
      }),
    );
  } catch (e) {
    if (cancellationCodes(e)[0] === 'ConditionalCheckFailed') {
      const now = await getBackendItem(host);
      throw new FerryError(
        400,
        'badRequest',
        now.drill
          ? `Invalid input received: The drill on backend ${host} is ${now.drill.status}; it can be ended once it is active or failed.`
          : `Invalid input received: Backend ${host} has no drill to end.`,
      );
    }
    throw e;
  }
}

/** The drill's next status, conditional on the operation still owning it. `undefined` removes the drill. */
export async function setDrillStatus(host: string, operationId: string, status: DrillState['status'] | undefined): Promise<void> {
  const removing = status === undefined;
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: backendKey(host),
        UpdateExpression: removing ? 'REMOVE drill' : 'SET drill.#status = :status',
        ConditionExpression: 'drill.operationId = :op OR drill.endOperationId = :op',
        ExpressionAttributeNames: removing ? undefined : { '#status': 'status' },
        ExpressionAttributeValues: { ':op': operationId, ...(removing ? {} : { ':status': status }) },
      }),
    );
  } catch (e) {
    // Another operation owns the drill now (or it is gone): nothing of ours to change.
    if (!isConditionFailure(e)) throw e;
  }
}

/** freeze: frozen false -> true, disabled with reason `frozen`, in one conditional write. */
export async function freezeService(item: BackendItem): Promise<void> {
  const host = item.config.host;
  const after = serviceTransition(host, { ...item.service, frozen: false }, { type: 'freeze' }) as BackendServiceState;
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: backendKey(host),
        UpdateExpression: 'SET #service.frozen = :true, #service.disabled = :true, #service.disabledReason = :reason',
        ConditionExpression: '#service.frozen = :false',
        ExpressionAttributeNames: { '#service': 'service' },
        ExpressionAttributeValues: { ':true': true, ':false': false, ':reason': after.disabledReason },
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw serviceTransition(host, { ...item.service, frozen: true }, { type: 'freeze' }) as FerryError;
    throw e;
  }
}

/** thaw, the DB half: frozen true -> false (the service stays disabled until the driver agrees). */
export async function thawService(item: BackendItem): Promise<void> {
  const host = item.config.host;
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: backendKey(host),
        UpdateExpression: 'SET #service.frozen = :false',
        ConditionExpression: '#service.frozen = :true',
        ExpressionAttributeNames: { '#service': 'service' },
        ExpressionAttributeValues: { ':true': true, ':false': false },
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw serviceTransition(host, { ...item.service, frozen: false }, { type: 'thaw' }) as FerryError;
    throw e;
  }
}

/** thaw, after the driver thawed: enabled again, unless a freeze came in between. */
export async function enableAfterThaw(host: string): Promise<void> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: backendKey(host),
        UpdateExpression: 'SET #service.disabled = :false, #service.disabledReason = :empty',
        ConditionExpression: '#service.frozen = :false',
        ExpressionAttributeNames: { '#service': 'service' },
        ExpressionAttributeValues: { ':false': false, ':empty': '' },
      }),
    );
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
  }
}

/**
 * Applies a failover-ending event (succeeded / invalid target / failed) for `operationId`: read,
 * pure transition, then one write conditioned on the fields the transition read (status
 * failing-over for this operation, and `frozen`, which failback copies into `disabled`). A race
 * re-reads and re-applies. Returns false when the service no longer belongs to this operation
 * (an earlier run of the step already finished it) — idempotent.
 */
export async function finishServiceFailover(host: string, operationId: string, event: ServiceEvent): Promise<boolean> {
  return withRetries(
    async () => {
      const item = await getBackendItem(host);
      if (item.failoverOperationId !== operationId || item.service.replicationStatus !== REPLICATION.failingOver) return false;
      const after = serviceTransition(host, item.service, event);
      if (after instanceof FerryError) throw after;
      await db().send(
        new UpdateCommand({
          TableName: tableName('volume'),
          Key: backendKey(host),
          UpdateExpression: 'SET #service = :after',
          ConditionExpression: 'failoverOperationId = :op AND #service.#rs = :failingOver AND #service.frozen = :frozen',
          ExpressionAttributeNames: { '#service': 'service', '#rs': 'replicationStatus' },
          ExpressionAttributeValues: { ':after': after, ':op': operationId, ':failingOver': REPLICATION.failingOver, ':frozen': item.service.frozen },
        }),
      );
      return true;
    },
    { retryable: isConditionFailure, attempts: 20 },
  );
}

// ---- operations -----------------------------------------------------------------------------------

export async function getOperation(id: string): Promise<ReplicationOperation | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: operationKey(id), ConsistentRead: true }));
  if (!out.Item) return undefined;
  const { pk: _pk, sk: _sk, ...op } = out.Item;
  return op as ReplicationOperation;
}

export async function getOperationOrThrow(id: string): Promise<ReplicationOperation> {
  const op = await getOperation(id);
  if (!op) throw new NotFound(`Replication operation ${id} could not be found.`);
  return op;
}

/** Records the resolved target and the batches, once: a re-run keeps the first run's. */
export async function recordPlan(id: string, plan: { target: string; batches: string[][] }): Promise<ReplicationOperation> {
  const op = await getOperationOrThrow(id);
  if (op.batchCount !== undefined) return op;
  const items = plan.batches.map((ids, n) => ({ PutRequest: { Item: { ...batchKey(id, n), volumeIds: ids } } }));
  for (let i = 0; i < items.length; i += 25) await batchWrite(items.slice(i, i + 25));
  await db().send(
    new UpdateCommand({
      TableName: tableName('volume'),
      Key: operationKey(id),
      UpdateExpression: 'SET #target = :target, batchCount = :n, volumeCount = :count, volumesDone = :zero, updatedAt = :at',
      ConditionExpression: 'attribute_not_exists(batchCount)',
      ExpressionAttributeNames: { '#target': 'target' },
      ExpressionAttributeValues: { ':target': plan.target, ':n': plan.batches.length, ':count': plan.batches.reduce((n, b) => n + b.length, 0), ':zero': 0, ':at': new Date().toISOString() },
    }),
  ).catch((e) => {
    if (!isConditionFailure(e)) throw e;
  });
  return getOperationOrThrow(id);
}

/** BatchWriteItem with its unprocessed items sent again (DynamoDB may return some under load). */
async function batchWrite(requests: Record<string, unknown>[]): Promise<void> {
  let pending: Record<string, unknown>[] = requests;
  for (let attempt = 0; pending.length > 0; attempt++) {
    const out = await db().send(new BatchWriteCommand({ RequestItems: { [tableName('volume')]: pending as never } }));
    pending = (out.UnprocessedItems?.[tableName('volume')] ?? []) as Record<string, unknown>[];
    if (pending.length && attempt > 10) throw new Error(`BatchWriteItem left ${pending.length} items unprocessed`);
    if (pending.length) await new Promise((r) => setTimeout(r, 20 * 2 ** Math.min(attempt, 5)));
  }
}

export async function getBatch(id: string, n: number): Promise<string[]> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: batchKey(id, n), ConsistentRead: true }));
  if (!out.Item) throw new NotFound(`Batch ${n} of replication operation ${id} could not be found.`);
  return out.Item.volumeIds as string[];
}

export async function addProgress(id: string, volumes: number): Promise<void> {
  if (volumes === 0) return;
  await db().send(
    new UpdateCommand({
      TableName: tableName('volume'),
      Key: operationKey(id),
      UpdateExpression: 'ADD volumesDone :n SET updatedAt = :at',
      ExpressionAttributeValues: { ':n': volumes, ':at': new Date().toISOString() },
    }),
  );
}

/** running -> succeeded | failed, once (a re-run finds it finished and changes nothing). */
export async function finishOperation(id: string, status: 'succeeded' | 'failed', error?: string): Promise<boolean> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: operationKey(id),
        UpdateExpression: `SET #status = :status, updatedAt = :at${error ? ', #error = :error' : ''}`,
        ConditionExpression: '#status = :running',
        ExpressionAttributeNames: { '#status': 'status', ...(error ? { '#error': 'error' } : {}) },
        ExpressionAttributeValues: { ':status': status, ':running': 'running', ':at': new Date().toISOString(), ...(error ? { ':error': error } : {}) },
      }),
    );
    return true;
  } catch (e) {
    if (isConditionFailure(e)) return false;
    throw e;
  }
}

/** Every operation on a backend, newest first (the API shows the last; tests read them). */
export async function listOperations(host: string): Promise<ReplicationOperation[]> {
  const items = await scanAll({
    TableName: tableName('volume'),
    FilterExpression: 'sk = :op AND begins_with(pk, :prefix) AND #host = :host',
    ExpressionAttributeNames: { '#host': 'host' },
    ExpressionAttributeValues: { ':op': 'OP', ':prefix': 'REPLOP#', ':host': backendOf(host) },
  });
  return items.map(({ pk: _pk, sk: _sk, ...op }) => op as unknown as ReplicationOperation).sort((a, b) => b.createdAt.localeCompare(a.createdAt));
}

// ---- drill copies ---------------------------------------------------------------------------------

export async function putDrillCopies(drillOperationId: string, batch: number, copies: DrillCopy[]): Promise<void> {
  await db().send(new PutCommand({ TableName: tableName('volume'), Item: { ...copiesKey(drillOperationId, batch), copies } }));
}

export async function getDrillCopies(drillOperationId: string, batch: number): Promise<DrillCopy[] | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: copiesKey(drillOperationId, batch), ConsistentRead: true }));
  return out.Item?.copies as DrillCopy[] | undefined;
}

export async function deleteDrillCopies(drillOperationId: string, batch: number): Promise<void> {
  await db().send(new DeleteCommand({ TableName: tableName('volume'), Key: copiesKey(drillOperationId, batch) }));
}

/** Every copy a drill recorded (the audit and tests read them). */
export async function listDrillCopies(drillOperationId: string): Promise<DrillCopy[]> {
  const items = await queryAll({
    TableName: tableName('volume'),
    KeyConditionExpression: 'pk = :p AND begins_with(sk, :c)',
    ExpressionAttributeValues: { ':p': operationKey(drillOperationId).pk, ':c': 'COPIES#' },
    ConsistentRead: true,
  });
  return items.flatMap((i) => (i.copies as DrillCopy[] | undefined) ?? []);
}

// ---- volumes of a backend -------------------------------------------------------------------------

/** Segments of the parallel scan that finds a backend's volumes. */
const SCAN_SEGMENTS = 4;

/**
 * The ids of every volume on a backend (`host` `<backend>#<pool>`), sorted. A parallel scan with
 * a projection: the volume table has no index by host, and a failover lists a backend once, so a
 * scan of the table (about 10 MB for 10,000 volumes) costs less than keeping a second index
 * entry on every volume write. On a table much larger than one backend's volumes, a GSI on host
 * would be the next step (docs/state-machines.md).
 */
export async function listVolumeIdsOnBackend(host: string): Promise<string[]> {
  const backend = backendOf(host);
  const segments = await Promise.all(
    Array.from({ length: SCAN_SEGMENTS }, async (_, segment) => {
      const items = await scanAll({
        TableName: tableName('volume'),
        Segment: segment,
        TotalSegments: SCAN_SEGMENTS,
        ProjectionExpression: 'id',
        FilterExpression: 'sk = :vol AND begins_with(#host, :prefix)',
        ExpressionAttributeNames: { '#host': 'host' },
        ExpressionAttributeValues: { ':vol': 'VOL', ':prefix': `${backend}#` },
        ConsistentRead: true,
      });
      return items.map((i) => i.id as string);
    }),
  );
  return segments.flat().sort();
}

/** Consistent reads of up to any number of volumes, 100 keys per BatchGetItem; missing ones are left out. */
export async function batchGetVolumeItems(ids: string[]): Promise<Record<string, unknown>[]> {
  const out: Record<string, unknown>[] = [];
  for (let i = 0; i < ids.length; i += 100) {
    let keys: Record<string, unknown>[] = ids.slice(i, i + 100).map((id) => ({ pk: `VOL#${id}`, sk: 'VOL' }));
    for (let attempt = 0; keys.length > 0; attempt++) {
      const page = await db().send(new BatchGetCommand({ RequestItems: { [tableName('volume')]: { Keys: keys, ConsistentRead: true } } }));
      out.push(...(page.Responses?.[tableName('volume')] ?? []));
      keys = (page.UnprocessedKeys?.[tableName('volume')]?.Keys ?? []) as Record<string, unknown>[];
      if (keys.length && attempt > 10) throw new Error(`BatchGetItem left ${keys.length} keys unprocessed`);
      if (keys.length) await new Promise((r) => setTimeout(r, 20 * 2 ** Math.min(attempt, 5)));
    }
  }
  return out;
}
