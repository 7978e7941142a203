/**
 * Persistence of shares: every write is conditional on the item's `version` (and bumps it), so a
 * transition computed from a stale read never lands. Also the share backends (manila-share
 * services), pool allocation items, and the share counts of share types and share networks that
 * move with the shares (so neither can be deleted while a share uses it).
 */
import { GetCommand, TransactWriteCommand, type TransactWriteCommandInput } from '@aws-sdk/lib-dynamodb';
import type { AuthContext } from '../core/auth.js';
import { cancellationCodes, db, isConditionFailure, queryAll, scanAll, versionedUpdate, withRetries } from '../core/db.js';
import { ConcurrentModification, FerryError, NotFound } from '../core/errors.js';
import { GSI1, tableName } from '../core/tables.js';
import type { ShareBackendConfig } from '../drivers/share/driver.js';
import { shareBackendKey, shareBackendOf, shareGsi1, shareKey, shareNetworkKey, sharePoolKey, shareTypeKey, type Share } from './model.js';
import { transition, type ShareEvent } from './transitions.js';
import { writeShareCharged } from './quotas.js';
import { releaseItem } from '../quotas/engine.js';

export type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];
const KEY_ATTRIBUTES = ['pk', 'sk', 'gsi1pk', 'gsi1sk'];

export const shareNotFound = (id: string) => new NotFound(`Share ${id} could not be found.`);
export const shareNetworkNotFound = (id: string) => new NotFound(`Share network ${id} could not be found.`);

export function toShare(item: Record<string, unknown>): Share {
  const s = Object.fromEntries(Object.entries(item).filter(([k]) => !KEY_ATTRIBUTES.includes(k))) as unknown as Share;
  s.accessRules ??= {};
  s.exportLocations ??= [];
  s.metadata ??= {};
  s.taskState ??= null;
  s.migration ??= null;
  return s;
}

export async function getShare(id: string): Promise<Share | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('share'), Key: shareKey(id), ConsistentRead: true }));
  return out.Item ? toShare(out.Item) : undefined;
}

export async function getShareOrThrow(id: string): Promise<Share> {
  const s = await getShare(id);
  if (!s) throw shareNotFound(id);
  return s;
}

/** Another project's share does not exist for a non-admin. */
export async function getShareScoped(auth: AuthContext, id: string): Promise<Share> {
  const s = await getShare(id);
  if (!s || (!auth.isAdmin && s.projectId !== auth.projectId && !s.isPublic)) throw shareNotFound(id);
  return s;
}

export async function listShares(projectId?: string): Promise<Share[]> {
  if (projectId) {
    const items = await queryAll({ TableName: tableName('share'), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': `PROJ#${projectId}#SHARE` } });
    // The GSI projects whole items: like the volume listing, answer from it (a GetItem per share would multiply a list's cost).
    return items.map(toShare).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }
  const items = await scanAll({ TableName: tableName('share'), FilterExpression: 'sk = :s', ExpressionAttributeValues: { ':s': 'SHARE' }, ConsistentRead: true });
  return items.map(toShare).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
}

export function shareUpdate(before: Share, after: Share): NonNullable<TransactItem['Update']> {
  return versionedUpdate({ TableName: tableName('share'), Key: shareKey(before.id) }, before, after);
}

const written = (before: Share, after: Share): Share => ({ ...after, version: before.version + 1 });

/** Read, apply the event, write with a version condition; a lost race re-reads and re-applies. */
export async function updateShare(id: string, event: ShareEvent | ((s: Share) => ShareEvent)): Promise<Share> {
  return updateShareBy(id, (before) => transition(before, typeof event === 'function' ? event(before) : event));
}

/** updateShare with any pure transition (the migration's, functions/migration/transitions.ts). */
export async function updateShareBy(id: string, apply: (s: Share) => Share | FerryError): Promise<Share> {
  return withRetries(
    async () => {
      const before = await getShareOrThrow(id);
      const after = apply(before);
      if (after instanceof FerryError) throw after;
      if (after === before) return before;
      await db().send(new TransactWriteCommand({ TransactItems: [{ Update: shareUpdate(before, after) }] }));
      return written(before, after);
    },
    { retryable: (e) => isConditionFailure(e) || (e as { name?: string }).name === 'TransactionConflictException' },
  ).catch((e) => {
    if (isConditionFailure(e)) throw new ConcurrentModification(`Share ${id}`, e);
    throw e;
  });
}

export async function writeShareWith(before: Share, after: Share, others: TransactItem[]): Promise<Share> {
  await db().send(new TransactWriteCommand({ TransactItems: [{ Update: shareUpdate(before, after) }, ...others] }));
  return written(before, after);
}

export async function insertShare(s: Share): Promise<void> {
  try {
    // One transaction with the project's quota charge (shares/quotas.ts): usage <= limit - n holds under concurrency.
    await writeShareCharged(s, (s) => [
      { Put: { TableName: tableName('share'), Item: { ...shareKey(s.id), ...shareGsi1(s), ...s }, ConditionExpression: 'attribute_not_exists(pk)' } },
      // The type's share count moves with the share, so a type in use cannot be deleted (types.ts).
      typeCountItem(s.shareTypeId, 1),
      // So does its network's (networks.ts); the condition also refuses a network deleted since it was checked.
      ...(s.shareNetworkId ? [networkCountItem(s.shareNetworkId, 1)] : []),
    ]);
  } catch (e) {
    if (s.shareNetworkId && cancellationCodes(e)[2] === 'ConditionalCheckFailed') throw shareNetworkNotFound(s.shareNetworkId);
    throw e;
  }
}

/** The pool update that gives back `gb` (condition: the pool holds at least that much). */
export function releaseSharePoolItem(pool: string, gb: number): TransactItem {
  return {
    Update: {
      TableName: tableName('share'),
      Key: sharePoolKey(pool),
      UpdateExpression: 'ADD allocatedGb :minus',
      ConditionExpression: 'allocatedGb >= :gb',
      ExpressionAttributeValues: { ':minus': -gb, ':gb': gb },
    },
  };
}

/** Removes the share record; it must hold no capacity and no backend share (the invariants of a gone share). */
export async function removeShareRecord(before: Share, requireStatus?: string): Promise<void> {
  await db().send(
    new TransactWriteCommand({
      TransactItems: [
        {
          Delete: {
            TableName: tableName('share'),
            Key: shareKey(before.id),
            ConditionExpression: `#version = :expected AND (attribute_not_exists(#cap) OR #cap = :null)${requireStatus ? ' AND #status = :status' : ''}`,
            ExpressionAttributeNames: { '#version': 'version', '#cap': 'capacity', ...(requireStatus ? { '#status': 'status' } : {}) },
            ExpressionAttributeValues: { ':expected': before.version, ':null': null, ...(requireStatus ? { ':status': requireStatus } : {}) },
          },
        },
        typeCountItem(before.shareTypeId, -1),
        ...(before.shareNetworkId ? [networkCountItem(before.shareNetworkId, -1)] : []),
        // What the share took from its project's quota goes back with the record, exactly once.
        ...[releaseItem('share', before.projectId, before.quota)].filter((i): i is TransactItem => i !== undefined),
      ],
    }),
  );
}

/** The share type's share count moves with its shares (a migration that retypes a share moves it too). */
export function typeCountItem(typeId: string, delta: number): TransactItem {
  return {
    Update: {
      TableName: tableName('share'),
      Key: shareTypeKey(typeId),
      UpdateExpression: 'ADD shareCount :d',
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeValues: { ':d': delta },
    },
  };
}

/** The share network's share count moves with its shares (a migration to a new network moves it too). */
export function networkCountItem(networkId: string, delta: number): TransactItem {
  return {
    Update: {
      TableName: tableName('share'),
      Key: shareNetworkKey(networkId),
      UpdateExpression: 'ADD shareCount :d',
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeValues: { ':d': delta },
    },
  };
}

// ---- backends and pools ----------------------------------------------------------------------

export async function listShareBackends(): Promise<ShareBackendConfig[]> {
  const items = await queryAll({ TableName: tableName('share'), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': 'SBACKENDS' } });
  return items.map((i) => i.config as ShareBackendConfig).sort((a, b) => a.host.localeCompare(b.host));
}

export async function getShareBackend(host: string): Promise<ShareBackendConfig> {
  const out = await db().send(new GetCommand({ TableName: tableName('share'), Key: shareBackendKey(shareBackendOf(host)) }));
  if (!out.Item) throw new NotFound(`Service ${shareBackendOf(host)} could not be found.`);
  return out.Item.config as ShareBackendConfig;
}

export async function allocatedOnSharePool(poolHost: string): Promise<number> {
  const out = await db().send(new GetCommand({ TableName: tableName('share'), Key: sharePoolKey(poolHost), ConsistentRead: true }));
  return (out.Item?.allocatedGb as number | undefined) ?? 0;
}
