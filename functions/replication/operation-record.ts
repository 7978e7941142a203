/**
 * A replication operation's record (failover, failback, drill, drill-end) in the volume table,
 * pk `REPLOP#<id>`, sk `OP`: its shape and key, with no driver behind them, so a reader that only
 * shows operations (functions/ops) need not bundle the volume drivers. repo.ts persists it.
 *
 * Progress is counted per batch, beside the record: pk `REPLOP#<id>`, sk `PROGRESS#<nnnnn>#<slot>`,
 * `done` = the volumes that batch's transaction slot switched, added by the same transaction that switches them
 * (steps.ts). So the count never drifts from the volumes (a crash between a volume write and a
 * separate counter write would have left it short for good), and concurrent batches never update
 * one hot item: every batch of a 10,000-volume failover used to wait on the record's counter.
 * Readers add them up (readVolumesDone): one Query of up to a few thousand tiny items.
 */
import type { TransactWriteCommandInput } from '@aws-sdk/lib-dynamodb';
import { queryAll } from '../core/db.js';
import { tableName } from '../core/tables.js';

export const operationKey = (id: string) => ({ pk: `REPLOP#${id}`, sk: 'OP' });

const PROGRESS_PREFIX = 'PROGRESS#';

/** The sort-key prefix of one batch's progress slots. */
const batchProgressPrefix = (batch: number) => `${PROGRESS_PREFIX}${String(batch).padStart(5, '0')}#`;

/**
 * One count per transaction slot of a batch (`PROGRESS#<batch>#<slot>`): a batch writes its
 * transactions side by side, and two transactions that update one item at once would cancel each
 * other (TransactionConflict). A re-run's transaction in slot k adds to the same item as the first
 * run's: the sum stays exact whichever volumes each slot held.
 */
export const progressKey = (id: string, batch: number, slot: number) => ({ pk: `REPLOP#${id}`, sk: `${batchProgressPrefix(batch)}${String(slot).padStart(3, '0')}` });

/** The Update (for a TransactWriteItems) that counts `volumes` more switched by slot `slot` of batch `batch`. */
export function progressUpdate(id: string, batch: number, slot: number, volumes: number, at: string): NonNullable<NonNullable<TransactWriteCommandInput['TransactItems']>[number]['Update']> {
  return {
    TableName: tableName('volume'),
    Key: progressKey(id, batch, slot),
    UpdateExpression: 'ADD done :n SET updatedAt = :at',
    ExpressionAttributeValues: { ':n': volumes, ':at': at },
  };
}

/**
 * The operation with `volumesDone` as its batches counted it (plus what the record itself holds:
 * records made before the per-batch counts kept theirs there), and `updatedAt` the last count's
 * when that is later (ferry watch's rate without samples is measured up to it).
 */
export async function withVolumesDone(op: ReplicationOperation): Promise<ReplicationOperation> {
  if (op.batchCount === undefined) return op;
  const counts = await queryAll({
    TableName: tableName('volume'),
    KeyConditionExpression: 'pk = :p AND begins_with(sk, :prefix)',
    ProjectionExpression: 'done, updatedAt',
    ExpressionAttributeValues: { ':p': operationKey(op.id).pk, ':prefix': PROGRESS_PREFIX },
    ConsistentRead: true,
  });
  const volumesDone = counts.reduce((n, c) => n + Number(c.done ?? 0), op.volumesDone ?? 0);
  const updatedAt = counts.reduce((latest, c) => (typeof c.updatedAt === 'string' && c.updatedAt > latest ? c.updatedAt : latest), op.updatedAt);
  return { ...op, volumesDone, updatedAt };
}

/**
 * The volumes one batch's transactions have counted so far (0 before its first transaction
 * committed): a batch that finds some knows it ran before (a retried Task, a restart) and that
 * the volumes it carries from Prepare's listing are stale (steps.ts).
 */
export async function batchVolumesDone(id: string, batch: number): Promise<number> {
  const counts = await queryAll({
    TableName: tableName('volume'),
    KeyConditionExpression: 'pk = :p AND begins_with(sk, :prefix)',
    ProjectionExpression: 'done',
    ExpressionAttributeValues: { ':p': operationKey(id).pk, ':prefix': batchProgressPrefix(batch) },
    ConsistentRead: true,
  });
  return counts.reduce((n, c) => n + Number(c.done ?? 0), 0);
}

export { FAILOVER_BATCH_SIZE, MAX_TRANSACTION_ITEMS, VOLUMES_PER_TRANSACTION } from './failover-batch.js';

export type OperationKind = 'failover' | 'drill' | 'drill-end';

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
