/**
 * The operations index: one small item per long operation whose own record has no index of its
 * own to be found by (a share migration lives on its share item, whose GSI lists shares by
 * project), so `ferry ops` and the console find what is in flight with a Query, not a scan.
 *
 * Item (in the operation's own table): pk `OPINDEX#<kind>#<id>`, sk `OPINDEX`, on GSI1 under
 * `OPS#open` (sorted by start) while the operation runs, moved to `OPS#ended` (sorted by end,
 * expiring after ENDED_INDEX_DAYS) when it ends. Both writes go in the same transaction as the
 * operation's own state change, so the index never says "running" of an operation that ended.
 * The index only points: the operation's record (the share) stays the truth about its state.
 */
import { TTL_ATTRIBUTE } from './tables.js';

export const OPS_OPEN = 'OPS#open';
export const OPS_ENDED = 'OPS#ended';
/** How long an ended operation stays listed (the item's TTL). */
export const ENDED_INDEX_DAYS = 30;

export type IndexedOperationKind = 'share-migration';

export interface OpIndexEntry {
  kind: IndexedOperationKind;
  /** The operation's own id (a share migration's id). */
  id: string;
  /** The record that holds the operation's state (a share migration: the share's id). */
  resourceId: string;
  startedAt: string;
  endedAt?: string;
  outcome?: string;
}

export const opIndexKey = (kind: IndexedOperationKind, id: string) => ({ pk: `OPINDEX#${kind}#${id}`, sk: 'OPINDEX' });

/** The Put that lists a new operation as open; conditional, so an id is indexed once. */
export function openIndexPut(table: string, entry: Omit<OpIndexEntry, 'endedAt' | 'outcome'>) {
  return {
    Put: {
      TableName: table,
      Item: { ...opIndexKey(entry.kind, entry.id), gsi1pk: OPS_OPEN, gsi1sk: `${entry.startedAt}#${entry.kind}#${entry.id}`, ...entry },
      ConditionExpression: 'attribute_not_exists(pk)',
    },
  };
}

/**
 * The Update that moves the entry to the ended list. Unconditional: an operation begun before the
 * index existed gets its entry here (an upsert), and a repeated end (a cleanup run again) only
 * moves its time.
 */
export function endIndexUpdate(table: string, entry: Required<Pick<OpIndexEntry, 'kind' | 'id' | 'resourceId' | 'endedAt' | 'outcome'>>) {
  const expires = Math.floor(Date.parse(entry.endedAt) / 1000) + ENDED_INDEX_DAYS * 86_400;
  return {
    Update: {
      TableName: table,
      Key: opIndexKey(entry.kind, entry.id),
      UpdateExpression:
        'SET gsi1pk = :ended, gsi1sk = :sk, #kind = :kind, #id = :id, resourceId = :resource, endedAt = :at, outcome = :outcome, #ttl = :ttl, startedAt = if_not_exists(startedAt, :at)',
      ExpressionAttributeNames: { '#ttl': TTL_ATTRIBUTE, '#kind': 'kind', '#id': 'id' },
      ExpressionAttributeValues: {
        ':ended': OPS_ENDED,
        ':sk': `${entry.endedAt}#${entry.kind}#${entry.id}`,
        ':kind': entry.kind,
        ':id': entry.id,
        ':resource': entry.resourceId,
        ':at': entry.endedAt,
        ':outcome': entry.outcome,
        ':ttl': expires,
      },
    },
  };
}
