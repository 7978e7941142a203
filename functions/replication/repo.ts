/**
 * Persistence of replication operations: failover operations, their batches, and drills' copies,
 * in the volume table (the backend item's service state: service-repo.ts).
 *
 * - operation: pk `REPLOP#<id>`, sk `OP` — kind, host, target, status, batchCount, progress.
 * - batch:     pk `REPLOP#<id>`, sk `BATCH#<nnnnn>` — one Map item's volumes as Prepare's listing
 *   read them (`listing`: FailoverVolumeState[] as one JSON string, keys, versions and what the
 *   failover decides on; plans recorded before have them as a list of maps, `volumes`, or their
 *   ids only, `volumeIds`), and once the driver chose them,
 *   the replicas its volumes start from (`replicaChoices`). The Map's items are batch numbers, so an
 *   execution's payload stays small whatever the backend holds.
 * - progress:  pk `REPLOP#<id>`, sk `PROGRESS#<nnnnn>#<slot>` — the volumes one batch's transaction slot switched (operation-record.ts).
 * - drill copies: pk `REPLOP#<drill op id>`, sk `COPIES#<nnnnn>` — what startDrill made for a batch.
 */
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { BatchWriteCommand, DeleteCommand, GetCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { batchGetAll, db, isConditionFailure, queryAll, scanAll } from '../core/db.js';
import { DependencyError, InvariantViolation, NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { DrillCopy } from '../drivers/volume/driver.js';
import { backendOf } from '../volumes/backends.js';
import type { Volume } from '../volumes/model.js';
import { operationKey, withVolumesDone, type ReplicationOperation } from './operation-record.js';

// The operation record's shape and key live in operation-record.ts (no driver behind them: ferry ops reads them).
export { batchVolumesDone, FAILOVER_BATCH_SIZE, MAX_TRANSACTION_ITEMS, operationKey, progressUpdate, VOLUMES_PER_TRANSACTION, type OperationKind, type ReplicationOperation } from './operation-record.js';

const batchKey = (id: string, n: number) => ({ pk: `REPLOP#${id}`, sk: `BATCH#${String(n).padStart(5, '0')}` });
const copiesKey = (id: string, n: number) => ({ pk: `REPLOP#${id}`, sk: `COPIES#${String(n).padStart(5, '0')}` });

// ---- operations -----------------------------------------------------------------------------------

/** The operation's record as stored (what the steps decide on; `volumesDone` is not added up). */
export async function getOperationRecord(id: string): Promise<ReplicationOperation | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: operationKey(id), ConsistentRead: true }));
  if (!out.Item) return undefined;
  const { pk: _pk, sk: _sk, ...op } = out.Item;
  return op as ReplicationOperation;
}

/** The operation with its progress added up from its batches (what the API, tests and benches show). */
export async function getOperation(id: string): Promise<ReplicationOperation | undefined> {
  const op = await getOperationRecord(id);
  return op && withVolumesDone(op);
}

export async function getOperationOrThrow(id: string): Promise<ReplicationOperation> {
  const op = await getOperationRecord(id);
  if (!op) throw new NotFound(`Replication operation ${id} could not be found.`);
  return op;
}

/** BatchWriteItem requests recordPlan keeps in flight (10,000 volumes are 3 requests of 25 batch items, ~1 MB each). */
const PLAN_WRITES_IN_FLIGHT = 4;

/** Records the resolved target and the batches, once: a re-run keeps the first run's. */
export async function recordPlan(id: string, plan: { target: string; batches: FailoverVolumeState[][] }): Promise<ReplicationOperation> {
  const op = await getOperationOrThrow(id);
  if (op.batchCount !== undefined) return op;
  const items = plan.batches.map((volumes, n) => ({ PutRequest: { Item: { ...batchKey(id, n), listing: JSON.stringify(volumes) } } }));
  // BatchWriteItem takes 25 items a request; PLAN_WRITES_IN_FLIGHT requests go side by side. Every
  // lane ends before a failure is thrown, so no write of this run lands over a retried Prepare's.
  let next = 0;
  let stopped = false;
  const lanes = await Promise.allSettled(
    Array.from({ length: PLAN_WRITES_IN_FLIGHT }, async () => {
      for (let i = next; i < items.length && !stopped; i = next) {
        next += 25;
        await batchWrite(items.slice(i, i + 25)).catch((e: unknown) => {
          stopped = true;
          throw e;
        });
      }
    }),
  );
  const failed = lanes.find((l): l is PromiseRejectedResult => l.status === 'rejected');
  if (failed) throw failed.reason;
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
    if (pending.length && attempt > 10) throw new DependencyError(`BatchWriteItem left ${pending.length} items unprocessed`);
    if (pending.length) await new Promise((r) => setTimeout(r, 20 * 2 ** Math.min(attempt, 5)));
  }
}

/** Volume id -> the replica (driver-opaque) it starts from; null: it had none. */
export type ReplicaChoices = Record<string, string | null>;

/**
 * A batch as recorded: its volumes as Prepare read them, or (a plan recorded before they were
 * carried) their ids only; and the replicas its volumes start from once the driver chose them.
 */
export type RecordedBatch = ({ volumes: FailoverVolumeState[] } | { volumeIds: string[] }) & { replicaChoices?: ReplicaChoices };

export async function getBatch(id: string, n: number): Promise<RecordedBatch> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: batchKey(id, n), ConsistentRead: true }));
  if (!out.Item) throw new NotFound(`Batch ${n} of replication operation ${id} could not be found.`);
  return recordedBatch(out.Item, id, n);
}

/** A batch item as read (of operation `id`, number `n`) as the batch it records, whichever form its plan was recorded in. */
export function recordedBatch(item: Record<string, unknown>, id: string, n: number): RecordedBatch {
  const choices = item.replicaChoices ? { replicaChoices: item.replicaChoices as ReplicaChoices } : {};
  if (typeof item.listing === 'string') return { volumes: parseListing(item.listing, id, n), ...choices };
  if (Array.isArray(item.volumes)) return { volumes: item.volumes as FailoverVolumeState[], ...choices };
  if (Array.isArray(item.volumeIds)) return { volumeIds: item.volumeIds as string[], ...choices };
  throw new InvariantViolation(`Batch ${n} of replication operation ${id} records no volumes.`);
}

/**
 * A batch's volumes are stored as one JSON string, not a list of maps: DynamoDB Local spent about
 * twice the CPU on 198 maps of 9 attributes per batch (nested attribute values parsed, stored and
 * serialized one by one): 0.18-0.20 against 0.08-0.11 CPU s to write 3,000 volumes' batch items,
 * 0.06-0.09 against 0.02-0.04 s to read them (npm run bench:failover:listing). Nothing queries
 * inside a batch's volumes, so DynamoDB needs to see them as no more than bytes.
 */
function parseListing(listing: string, id: string, n: number): FailoverVolumeState[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(listing);
  } catch (e) {
    throw new InvariantViolation(`Batch ${n} of replication operation ${id} holds a listing that is not JSON.`, { cause: e });
  }
  if (!Array.isArray(parsed)) throw new InvariantViolation(`Batch ${n} of replication operation ${id} holds a listing that is not a list of volumes.`);
  return parsed as FailoverVolumeState[];
}

/**
 * The intent of a batch's failover or drill: which replica each volume starts from, recorded once
 * (condition: none recorded yet) before the driver makes anything from them. Answers what is
 * recorded: `chosen`, or an earlier run's choices (from the refused write's old item, no extra read).
 * With `replacing` (a drill whose recorded copy was pruned before a re-run made anything from it),
 * each named volume's choice becomes `chosen`'s only where the record still holds the gone one, in
 * one conditional write, so two runs that both found it gone agree on one new choice.
 */
export async function recordReplicaChoices(id: string, n: number, chosen: ReplicaChoices, replacing?: ReplicaChoices): Promise<ReplicaChoices> {
  const replaced = replacing ? Object.keys(replacing) : [];
  const names = Object.fromEntries(replaced.map((v, i) => [`#v${i}`, v]));
  try {
    const out = await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: batchKey(id, n),
        ...(replacing
          ? {
              UpdateExpression: `SET ${replaced.map((_, i) => `#choices.#v${i} = :new${i}`).join(', ')}`,
              ConditionExpression: replaced.map((_, i) => `#choices.#v${i} = :old${i}`).join(' AND '),
              ExpressionAttributeValues: Object.fromEntries(replaced.flatMap((v, i) => [[`:new${i}`, chosen[v] ?? null], [`:old${i}`, replacing[v]]])),
              ReturnValues: 'ALL_NEW' as const,
            }
          : {
              UpdateExpression: 'SET #choices = :chosen',
              ConditionExpression: 'attribute_exists(pk) AND attribute_not_exists(#choices)',
              ExpressionAttributeValues: { ':chosen': chosen },
            }),
        ExpressionAttributeNames: { '#choices': 'replicaChoices', ...names },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    return replacing ? (out.Attributes?.replicaChoices as ReplicaChoices) : chosen;
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    // The old item comes back as DynamoDB attribute values, not through the document client.
    const raw = (e as { Item?: Parameters<typeof unmarshall>[0] }).Item;
    const recorded = raw ? (unmarshall(raw).replicaChoices as ReplicaChoices | undefined) : undefined;
    if (!recorded) throw new NotFound(`Batch ${n} of replication operation ${id} could not be found.`);
    return recorded;
  }
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

// ---- drill copies ---------------------------------------------------------------------------------

export async function putDrillCopies(drillOperationId: string, batch: number, copies: DrillCopy[]): Promise<void> {
  await db().send(new PutCommand({ TableName: tableName('volume'), Item: { ...copiesKey(drillOperationId, batch), copies } }));
}

export async function getDrillCopies(drillOperationId: string, batch: number): Promise<DrillCopy[] | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: copiesKey(drillOperationId, batch), ConsistentRead: true }));
  return out.Item?.copies as DrillCopy[] | undefined;
}

/**
 * What ending a drill removes for one of its batches: the copies the batch recorded, or, when it
 * recorded none (its run crashed or failed after the driver made some, before putDrillCopies), its
 * intent: the volumes it chose a replica for (recordReplicaChoices precedes every copy it makes),
 * with `location` '' for the driver to find. A batch that chose nothing made nothing.
 */
export async function drillCopiesToEnd(drillOperationId: string, batch: number, target: string): Promise<DrillCopy[]> {
  const recorded = await getDrillCopies(drillOperationId, batch);
  if (recorded) return recorded;
  const planned = await getBatch(drillOperationId, batch).catch((e: unknown) => {
    if (e instanceof NotFound) return undefined;
    throw e;
  });
  const chose = Object.entries(planned?.replicaChoices ?? {}).filter(([, replica]) => replica !== null).map(([volumeId]) => volumeId);
  if (!planned || chose.length === 0) return [];
  const listed = 'volumes' in planned ? planned.volumes : await batchGetVolumeItems(planned.volumeIds);
  const names = new Map(listed.map((v) => [v.id as string, v.backendName as string]));
  return chose.flatMap((volumeId) => (names.get(volumeId) ? [{ volumeId, backendName: names.get(volumeId)!, targetBackendId: target, location: '' }] : []));
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

/**
 * Segments of the parallel scan that finds a backend's volumes. 8 rather than 4: at 3,000 volumes
 * (6,000 items) DynamoDB Local spent 0.36-0.46 CPU s on an 8-segment listing against 0.50-0.57 s
 * on a 4-segment one, in each of 7 interleaved pairs (1 segment: 0.61-0.71 s); on AWS each segment
 * is a request stream of its own, so more segments only shorten the listing.
 */
const SCAN_SEGMENTS = 8;

/**
 * What a failover batch decides on and writes from, as Prepare's listing read it (Volume's own
 * names), so a batch reads no volume: each write is conditional on `version`, which proves nothing
 * changed since the listing; one that did is read again and decided alone (steps.ts). A volume's
 * snapshot ids are not carried, only how many it has (`snapshots`): a volume with many would make
 * a batch's item outgrow DynamoDB's 400 KB, and only the outcomes that set them `error`
 * (not-capable, failover-error) need them, which read that volume again. About 200 bytes a volume:
 * a batch of 198 is ~40 KB, whatever the volumes hold.
 */
export type FailoverVolumeState = Pick<Volume, 'id' | 'version' | 'host' | 'status' | 'replicationStatus' | 'backendName' | 'size' | 'failoverOperationId'> & {
  /** How many snapshots the volume has (their ids are read again when an outcome needs them). */
  snapshots: number;
};

/** The attributes the listing projects: FailoverVolumeState's, with the snapshot ids it counts. */
const LISTED_ATTRIBUTES = ['id', 'version', 'host', 'status', 'replicationStatus', 'backendName', 'size', 'failoverOperationId', 'snapshotIds'];

/**
 * Every volume on a backend (`host` `<backend>#<pool>`), sorted by id, as FailoverVolumeState. A
 * parallel scan with a projection: the volume table has no index by host, and a failover lists a
 * backend once, so a scan of the table (about 10 MB for 10,000 volumes) costs less than keeping a
 * second index entry on every volume write. On a table much larger than one backend's volumes, a
 * GSI on host would be the next step (docs/failover-at-scale.md).
 */
export async function listFailoverVolumesOnBackend(host: string): Promise<FailoverVolumeState[]> {
  const backend = backendOf(host);
  const names = Object.fromEntries(LISTED_ATTRIBUTES.map((a) => [`#${a}`, a]));
  const segments = await Promise.all(
    Array.from({ length: SCAN_SEGMENTS }, async (_, segment) => {
      const items = await scanAll({
        TableName: tableName('volume'),
        Segment: segment,
        TotalSegments: SCAN_SEGMENTS,
        ProjectionExpression: Object.keys(names).join(', '),
        FilterExpression: 'sk = :vol AND begins_with(#host, :prefix)',
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: { ':vol': 'VOL', ':prefix': `${backend}#` },
        ConsistentRead: true,
      });
      return items.map(failoverVolumeState);
    }),
  );
  return segments.flat().sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** A listed (or read) volume item as a batch carries it (an attribute the item lacks stays absent; a null stays null: replication_status null means not replicated). */
export function failoverVolumeState(item: Record<string, unknown>): FailoverVolumeState {
  const state: Record<string, unknown> = { snapshots: Array.isArray(item.snapshotIds) ? item.snapshotIds.length : 0 };
  for (const a of LISTED_ATTRIBUTES) if (a !== 'snapshotIds' && item[a] !== undefined) state[a] = item[a];
  return state as FailoverVolumeState;
}

/** BatchGetItem's limit of keys per request. */
const BATCH_GET_KEYS = 100;

/**
 * Consistent reads of any number of volumes, 100 keys per BatchGetItem, the requests side by side
 * (a batch's two are one round trip, not two); missing ones are left out.
 */
export async function batchGetVolumeItems(ids: string[]): Promise<Record<string, unknown>[]> {
  const keys = ids.map((id) => ({ pk: `VOL#${id}`, sk: 'VOL' }));
  const pages: Record<string, unknown>[][] = [];
  for (let i = 0; i < keys.length; i += BATCH_GET_KEYS) pages.push(keys.slice(i, i + BATCH_GET_KEYS));
  return (await Promise.all(pages.map((page) => batchGetAll(tableName('volume'), page)))).flat();
}
