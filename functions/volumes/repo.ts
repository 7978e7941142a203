/**
 * Persistence of volumes: every write is conditional on the item's `version` (and bumps it), so a
 * transition computed from a stale read is refused and re-applied to a fresh read.
 *
 * Items this module writes besides the volume itself:
 * - backend-object claim: pk `BACKOBJ#<host@backend>`, sk `<backendName>`, `volumeId` — one per
 *   backend object Ferry knows, so an object is managed (or created) by one volume only, and the
 *   manageable-volumes listing can tell known objects from unknown ones.
 * - the volume type's `volumeCount` (types.ts), moved in the same transaction as the volume item.
 * - the pool item's `allocatedGb` (scheduler.ts) when the volume held capacity.
 */
import { GetCommand, TransactWriteCommand, type TransactWriteCommandInput } from '@aws-sdk/lib-dynamodb';
import type { AuthContext } from '../core/auth.js';
import { cancellationCodes, db, failedItem, isConditionFailure, listKind, queryAll, versionedUpdate, withRetries, type ExtraCondition } from '../core/db.js';
import { BadRequest, ConcurrentModification, Conflict, FerryError, NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { backendOf } from './backends.js';
import { volumeGsi1, volumeKey, type Volume, type VolumeSourceRef } from './model.js';
import { transition, type VolumeEvent } from './transitions.js';
import { volumeTypeKey } from './types.js';
import { writeVolumeCharged } from './quotas.js';
import { releaseItem } from '../quotas/engine.js';

export type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];

const KEY_ATTRIBUTES = ['pk', 'sk', 'gsi1pk', 'gsi1sk'];

export const claimKey = (backend: string, backendName: string) => ({ pk: `BACKOBJ#${backendOf(backend)}`, sk: backendName });
export const poolKey = (poolHost: string) => ({ pk: `POOL#${poolHost}`, sk: 'POOL' });
/**
 * A backend object an admin let go of with os-unmanage: it keeps Ferry's name but is no longer
 * Ferry's, so the audit counts it as unmanaged rather than an orphan. Removed when it is managed again.
 */
export const unmanagedKey = (backend: string, backendName: string) => ({ pk: `UNMANAGED#${backendOf(backend)}`, sk: backendName });

export const volumeNotFound = (id: string) => new NotFound(`Volume ${id} could not be found.`);

export function toVolume(item: Record<string, unknown>): Volume {
  const v = Object.fromEntries(Object.entries(item).filter(([k]) => !KEY_ATTRIBUTES.includes(k))) as unknown as Volume;
  v.attachments ??= {};
  v.instances ??= {};
  v.connections ??= {};
  return v;
}

export async function getVolume(id: string): Promise<Volume | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: volumeKey(id), ConsistentRead: true }));
  return out.Item ? toVolume(out.Item) : undefined;
}

export async function getVolumeOrThrow(id: string): Promise<Volume> {
  const v = await getVolume(id);
  if (!v) throw volumeNotFound(id);
  return v;
}

/** Upstream's project-scoped lookup: another project's volume does not exist for a non-admin. */
export async function getVolumeScoped(auth: AuthContext, id: string): Promise<Volume> {
  const v = await getVolume(id);
  if (!v || (!auth.isAdmin && v.projectId !== auth.projectId)) throw volumeNotFound(id);
  return v;
}

/**
 * The Update (for a transaction or alone) that turns `before` into `after` under a condition on
 * the version read (core/db.ts versionedUpdate). Attributes not changed (attachments, instances,
 * connections, which the attachments API maintains) are not touched.
 */
export type { ExtraCondition };

export function volumeUpdate(before: Volume, after: Volume, extraCondition?: ExtraCondition): NonNullable<TransactItem['Update']> {
  return versionedUpdate({ TableName: tableName('volume'), Key: volumeKey(before.id) }, before, after, extraCondition);
}

/** `after` as it is stored once `volumeUpdate(before, after)` has been written. */
export function written(before: Volume, after: Volume): Volume {
  return { ...after, version: before.version + 1 };
}

/**
 * Reads the volume, applies the event the callback builds from it, and writes the result with a
 * condition on the version read. A lost race re-reads and re-applies (the transition decides again
 * on fresh state). A refused transition throws its FerryError and writes nothing. An event that
 * changes nothing writes nothing (so steps are idempotent).
 */
export async function updateVolume(id: string, event: VolumeEvent | ((v: Volume) => VolumeEvent)): Promise<Volume> {
  return withRetries(
    async () => {
      const before = await getVolumeOrThrow(id);
      const e = typeof event === 'function' ? event(before) : event;
      const after = transition(before, e);
      if (after instanceof FerryError) throw after;
      if (after === before) return before;
      await db().send(new TransactWriteCommand({ TransactItems: [{ Update: volumeUpdate(before, after) }] }));
      return written(before, after);
    },
    { retryable: (e) => isConditionFailure(e) || (e as { name?: string }).name === 'TransactionConflictException' },
  ).catch((e) => {
    if (isConditionFailure(e)) throw new ConcurrentModification(`Volume ${id}`, e);
    throw e;
  });
}

/** Writes a transition together with other items in one transaction (capacity, claims). */
export async function writeVolumeWith(before: Volume, after: Volume, others: TransactItem[], extraCondition?: ExtraCondition): Promise<Volume> {
  await db().send(new TransactWriteCommand({ TransactItems: [{ Update: volumeUpdate(before, after, extraCondition) }, ...others] }));
  return written(before, after);
}

export { cancellationCodes };

function cancellationItem(e: unknown, index: number): Record<string, unknown> | undefined {
  return (e as { CancellationReasons?: { Item?: Record<string, unknown> }[] }).CancellationReasons?.[index]?.Item;
}

/** A value from a cancellation reason's item, marshalled (`{S: ...}`) or not. */
function plain(v: unknown): unknown {
  if (v && typeof v === 'object' && 'S' in (v as Record<string, unknown>)) return (v as { S: string }).S;
  return v;
}

/**
 * Creates the volume item, counting it on its type (which must still exist) and, for a managed
 * volume, claiming its backend object — all or nothing.
 */
export async function insertVolume(
  v: Volume,
  options: { claimBackendObject?: boolean; hold?: { item: TransactItem; refused: () => FerryError } } = {},
): Promise<void> {
  // The record carries what it takes from the quota (set by writeVolumeCharged before items are built).
  const items = (v: Volume): TransactItem[] => [
    { Put: { TableName: tableName('volume'), Item: { ...volumeKey(v.id), ...volumeGsi1(v), ...v }, ConditionExpression: 'attribute_not_exists(pk)' } },
    {
      Update: {
        TableName: tableName('volume'),
        Key: volumeTypeKey(v.volumeTypeId),
        UpdateExpression: 'ADD volumeCount :one',
        ConditionExpression: 'attribute_exists(pk)',
        ExpressionAttributeValues: { ':one': 1 },
      },
    },
    ...(options.claimBackendObject
      ? [
          { Delete: { TableName: tableName('volume'), Key: unmanagedKey(v.host!, v.backendName) } },
          {
            Put: {
              TableName: tableName('volume'),
              Item: { ...claimKey(v.host!, v.backendName), volumeId: v.id, host: backendOf(v.host!), backendName: v.backendName },
              ConditionExpression: 'attribute_not_exists(pk)',
              ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
            },
          } as TransactItem,
        ]
      : []),
    // A volume from a source holds it (sources.ts): last, so its index is the items' length - 1.
    ...(options.hold ? [options.hold.item] : []),
  ];
  const holdIndex = options.hold ? items(v).length - 1 : -1;
  try {
    // One transaction: the record, its type's count, its claim, and its quota (usage <= limit - n).
    await writeVolumeCharged(v, items);
  } catch (e) {
    const codes = cancellationCodes(e);
    if (codes[0] === 'ConditionalCheckFailed') throw new Conflict(`Volume ${v.id} already exists.`);
    if (options.hold && codes[holdIndex] === 'ConditionalCheckFailed') throw options.hold.refused();
    if (codes[1] === 'ConditionalCheckFailed') throw new NotFound(`Volume type ${v.volumeTypeId} could not be found.`);
    if (options.claimBackendObject && codes[3] === 'ConditionalCheckFailed') {
      const owner = plain(cancellationItem(e, 3)?.volumeId);
      throw new BadRequest(`Invalid volume: Backend object ${v.backendName} on ${backendOf(v.host!)} is already managed by volume ${owner}.`);
    }
    throw e;
  }
}

/** The claim Put for a newly scheduled volume's backend object (idempotent for the same volume). */
export function claimItem(v: Volume, poolHost: string): TransactItem {
  return {
    Put: {
      TableName: tableName('volume'),
      Item: { ...claimKey(poolHost, v.backendName), volumeId: v.id, host: backendOf(poolHost), backendName: v.backendName },
      ConditionExpression: 'attribute_not_exists(pk) OR volumeId = :vid',
      ExpressionAttributeValues: { ':vid': v.id },
    },
  };
}

/** Gives the hold back (the source cannot be gone while it is held: its delete is refused). */
/* sources.ts holds the other half (holdSourceItem). */
export function releaseSourceItem(ref: VolumeSourceRef): TransactItem {
  return {
    Update: {
      TableName: tableName('volume'),
      Key: ref.key!,
      UpdateExpression: 'ADD dependentCreates :minus, #version :one',
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeNames: { '#version': 'version' },
      ExpressionAttributeValues: { ':minus': -1, ':one': 1 },
    },
  };
}

/** Deletes the claim of a volume's backend object, if it is this volume's. */
export function releaseClaimItem(v: Volume): TransactItem | undefined {
  if (!v.host) return undefined;
  return {
    Delete: {
      TableName: tableName('volume'),
      Key: claimKey(v.host, v.backendName),
      ConditionExpression: 'attribute_not_exists(pk) OR volumeId = :vid',
      ExpressionAttributeValues: { ':vid': v.id },
    },
  };
}

/** Gives back held capacity on its pool item (the volume side of the same transaction drops `capacity`). */
export function releasePoolItem(v: Volume): TransactItem | undefined {
  if (!v.capacity) return undefined;
  return {
    Update: {
      TableName: tableName('volume'),
      Key: poolKey(v.capacity.pool),
      UpdateExpression: 'ADD allocatedGb :minus',
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeValues: { ':minus': -v.capacity.gb },
    },
  };
}

/** The backend object names Ferry knows on a backend, with their volumes. */
export async function listClaims(backend: string): Promise<Map<string, string>> {
  const items = await queryAll({ TableName: tableName('volume'), KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': claimKey(backend, '').pk } });
  return new Map(items.map((i) => [i.sk as string, i.volumeId as string]));
}

/**
 * The volume holds no connect intent (attachments/model.ts `connectIntents`: a connect in flight,
 * or one that died, whose backend connection recovery undoes from it). Intent writes leave the
 * version alone, so the version condition does not see them.
 */
const NO_CONNECT_INTENTS = '(attribute_not_exists(#connectIntents) OR size(#connectIntents) = :noIntents)';

/**
 * The volume's record was not removed: it holds connect intents (NO_CONNECT_INTENTS). A live
 * connect ends its own within seconds; a dead one's is undone by the attachments' recovery pass
 * (the reconciler's), after which the delete may be tried again.
 */
export class VolumeConnectsPending extends Conflict {
  constructor(volumeId: string, intents: number) {
    super(`Volume ${volumeId} still has ${intents} connect(s) in flight or awaiting recovery; it can be deleted once they are undone.`, { volumeId });
  }
}

/**
 * Removes a volume's record with everything it holds — capacity, backend-object claim, type count —
 * in one transaction, conditional on the version read (so the state the caller validated is the
 * state removed) and on no connect intent being left (VolumeConnectsPending). Removing a volume
 * that is already gone succeeds (idempotent delete step).
 */
export async function removeVolumeRecord(before: Volume, condition?: ExtraCondition, options: { unmanaged?: boolean } = {}): Promise<void> {
  const items: TransactItem[] = [
    {
      Delete: {
        TableName: tableName('volume'),
        Key: volumeKey(before.id),
        ConditionExpression: `#version = :expected AND ${NO_CONNECT_INTENTS}${condition ? ` AND (${condition.expression})` : ''}`,
        ExpressionAttributeNames: { '#version': 'version', '#connectIntents': 'connectIntents', ...(condition?.names ?? {}) },
        ExpressionAttributeValues: { ':expected': before.version, ':noIntents': 0, ...(condition?.values ?? {}) },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      },
    },
    {
      Update: {
        TableName: tableName('volume'),
        Key: volumeTypeKey(before.volumeTypeId),
        UpdateExpression: 'ADD volumeCount :minus',
        ConditionExpression: 'attribute_exists(pk)',
        ExpressionAttributeValues: { ':minus': -1 },
      },
    },
  ];
  const pool = releasePoolItem(before);
  if (pool) items.push(pool);
  const claim = releaseClaimItem(before);
  if (claim) items.push(claim);
  // A hold on a source still held (an admin reset a creating volume and deleted it) goes back too.
  if (before.source?.held) items.push(releaseSourceItem(before.source));
  // What the volume took from its project's quota goes back with the record, exactly once.
  const quota = releaseItem('volume', before.projectId, before.quota);
  if (quota) items.push(quota);
  if (options.unmanaged && before.host) {
    items.push({ Put: { TableName: tableName('volume'), Item: { ...unmanagedKey(before.host, before.backendName), volumeId: before.id, at: new Date().toISOString() } } });
  }
  try {
    await db().send(new TransactWriteCommand({ TransactItems: items }));
  } catch (e) {
    // At the version read, only the intents can have refused it (a moved version is the caller's retry).
    const found = failedItem(e, 0);
    const intents = found?.version === before.version ? Object.keys((found.connectIntents as object | undefined) ?? {}).length : 0;
    if (intents > 0) throw new VolumeConnectsPending(before.id, intents);
    throw e;
  }
}

/** Every volume of a project, or of all projects (admin `all_tenants`). Filtering and paging happen in routes.ts. */
export async function listVolumes(projectId?: string): Promise<Volume[]> {
  const items = await listKind(tableName('volume'), { sk: 'VOL', pkPrefix: 'VOL#', gsi1pk: projectId === undefined ? undefined : volumeGsi1({ projectId, createdAt: '', id: '' }).gsi1pk });
  return items.map(toVolume);
}
