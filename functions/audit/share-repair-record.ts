/**
 * The record of a repair the reconciler makes on a share backend (share-backend-repairs.ts): the
 * intent, written before the effect outside DynamoDB under an id derived from what it acts on, and
 * done after it. A pass that dies between the two leaves the intent, which the next pass finishes
 * (recoverShareRepairs); an operator reads both in the share table (pk `SREPAIR#<id>`, sk
 * `SREPAIR`): what the repair saw, what it did and when.
 *
 * One item per id: a new intent replaces a done one (the quota of a share is enforced again and
 * again), never a pending one of another target or kind (Conflict: two repairs under one id).
 */
import { GetCommand, PutCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure, isTransactionConflict } from '../core/db.js';
import { Conflict, FerryError, NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { TransactItem } from '../shares/repo.js';

export const SHARE_REPAIR_SK = 'SREPAIR';

/**
 * `quota`: a share's writes withheld or given back by its size; `stray-replication`: a replication no
 * migration holds, and its replica, deleted; `copy-task-definition`: a copy task definition family of a
 * migration that ended or is gone, deregistered (copy-task-repairs.ts).
 */
export type ShareRepairKind = 'quota' | 'stray-replication' | 'copy-task-definition';

export interface ShareRepairRecord {
  id: string;
  kind: ShareRepairKind;
  /** What the repair acts on (names and ids, never parsed from words). */
  target: Record<string, string>;
  state: 'intent' | 'done';
  /** What it saw when it recorded the intent. */
  saw: string;
  /** What it did; null until done. */
  did: string | null;
  intendedAt: string;
  doneAt: string | null;
  version: number;
}

export type ShareRepairEvent = { type: 'intend'; at: string; kind: ShareRepairKind; target: Record<string, string>; saw: string } | { type: 'done'; at: string; did: string };

const sameTarget = (a: Record<string, string>, b: Record<string, string>) => JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort());

/**
 * Pure: the record after `e`. Intending what is pending already answers the record unchanged (the
 * same object: nothing to write), as does finishing what is done.
 */
export function shareRepairTransition(r: ShareRepairRecord | undefined, id: string, e: ShareRepairEvent): ShareRepairRecord | FerryError {
  if (e.type === 'intend') {
    if (r?.state === 'intent') {
      if (r.kind === e.kind && sameTarget(r.target, e.target)) return r;
      return new Conflict(`repair ${id} is pending for ${r.kind} ${JSON.stringify(r.target)}, not ${e.kind} ${JSON.stringify(e.target)}`);
    }
    return { id, kind: e.kind, target: e.target, state: 'intent', saw: e.saw, did: null, intendedAt: e.at, doneAt: null, version: r?.version ?? 0 };
  }
  if (!r) return new NotFound(`repair ${id} has no intent to finish`);
  if (r.state === 'done') return r;
  return { ...r, state: 'done', did: e.did, doneAt: e.at };
}

const keyOf = (id: string) => ({ pk: `SREPAIR#${id}`, sk: SHARE_REPAIR_SK });

export async function getShareRepair(id: string): Promise<ShareRepairRecord | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('share'), Key: keyOf(id), ConsistentRead: true }));
  if (!out.Item) return undefined;
  const { pk: _pk, sk: _sk, ...record } = out.Item;
  return record as ShareRepairRecord;
}

/**
 * Applies `e` to the record and writes it on the version read (a new one only where none is), with
 * `conditions` in the same transaction (the quota's: the share unchanged since its re-check).
 * undefined when a condition failed (another pass, or the share, moved on); the record otherwise.
 */
export async function recordShareRepair(id: string, e: ShareRepairEvent, conditions: TransactItem[] = []): Promise<ShareRepairRecord | undefined> {
  const before = await getShareRepair(id);
  const after = shareRepairTransition(before, id, e);
  if (after instanceof FerryError) throw after;
  if (after === before) return after;
  const written = { ...after, version: (before?.version ?? 0) + 1 };
  const put = {
    TableName: tableName('share'),
    Item: { ...keyOf(id), ...written },
    ConditionExpression: before ? '#version = :expected' : 'attribute_not_exists(pk)',
    ...(before ? { ExpressionAttributeNames: { '#version': 'version' }, ExpressionAttributeValues: { ':expected': before.version } } : {}),
  };
  try {
    if (conditions.length === 0) await db().send(new PutCommand(put));
    else await db().send(new TransactWriteCommand({ TransactItems: [{ Put: put }, ...conditions] }));
  } catch (e) {
    if (isConditionFailure(e) || isTransactionConflict(e)) return undefined;
    throw e;
  }
  return written;
}
