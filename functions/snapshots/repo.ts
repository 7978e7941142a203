/**
 * Persistence of snapshots. A snapshot's record and its id on the volume item are written in one
 * transaction conditioned on the volume's `version` (and, for changes that upstream refuses on a
 * frozen backend, on the backend not being frozen), so no request sees one without the other.
 */
import { GetCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import type { AuthContext } from '../core/auth.js';
import { db, isConditionFailure, listKind, withRetries } from '../core/db.js';
import { ConcurrentModification, FerryError, NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { BackendFrozen, notFrozenCheck } from '../volumes/frozen.js';
import { cancellationCodes, getVolume, getVolumeOrThrow, unmanagedKey, volumeUpdate, type TransactItem } from '../volumes/repo.js';
import { snapshotTakes, writeSnapshotCharged } from '../volumes/quotas.js';
import { releaseItem } from '../quotas/engine.js';
import { recordMessage } from '../messages/store.js';
import { transition as volumeTransition } from '../volumes/transitions.js';
import { snapshotGsi1, snapshotKey, snapshotTransition, type Snapshot, type SnapshotEvent } from './model.js';

const KEY_ATTRIBUTES = ['pk', 'sk', 'gsi1pk', 'gsi1sk'];

export const snapshotNotFound = (id: string) => new NotFound(`Snapshot ${id} could not be found.`);

function toSnapshot(item: Record<string, unknown>): Snapshot {
  return Object.fromEntries(Object.entries(item).filter(([k]) => !KEY_ATTRIBUTES.includes(k))) as unknown as Snapshot;
}

export async function getSnapshot(id: string): Promise<Snapshot | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: snapshotKey(id), ConsistentRead: true }));
  return out.Item ? toSnapshot(out.Item) : undefined;
}

/** Another project's snapshot does not exist for a non-admin (upstream's scoped get). */
export async function getSnapshotScoped(auth: AuthContext, id: string): Promise<Snapshot> {
  const s = await getSnapshot(id);
  if (!s || (!auth.isAdmin && s.projectId !== auth.projectId)) throw snapshotNotFound(id);
  return s;
}

/** The Update that turns `before` into `after`, conditioned on the version read (and bumping it). */
function snapshotUpdate(before: Snapshot, after: Snapshot): NonNullable<TransactItem['Update']> {
  const { id: _id, version: _v, ...rest } = after;
  const names: Record<string, string> = { '#version': 'version' };
  const values: Record<string, unknown> = { ':expected': before.version, ':next': before.version + 1 };
  const sets = ['#version = :next'];
  Object.entries(rest).forEach(([k, v], i) => {
    if (v === undefined) return;
    names[`#a${i}`] = k;
    values[`:a${i}`] = v;
    sets.push(`#a${i} = :a${i}`);
  });
  return {
    TableName: tableName('volume'),
    Key: snapshotKey(before.id),
    UpdateExpression: `SET ${sets.join(', ')}`,
    ConditionExpression: '#version = :expected',
    ExpressionAttributeNames: names,
    ExpressionAttributeValues: values,
  };
}

/**
 * Records a new snapshot (`creating`) and adds it to its volume, in one transaction: the volume's
 * guard (status, migration) is the pure transition, conditioned on its version; the backend must
 * not be frozen (ConditionCheck). A lost race on the volume re-reads and re-decides.
 */
export async function insertSnapshot(s: Snapshot, allowInUse: boolean): Promise<void> {
  await withRetries(
    async () => {
      const before = await getVolumeOrThrow(s.volumeId);
      const after = volumeTransition(before, { type: 'snapshot-added', at: s.createdAt, snapshotId: s.id, allowInUse });
      if (after instanceof FerryError) throw after;
      // The snapshot carries what it takes from the quota; the charge joins the same transaction.
      const taken = snapshotTakes(s.size, before.volumeTypeName);
      s.quota = taken;
      try {
        await writeSnapshotCharged(s.projectId, s.size, taken, [
          { Update: volumeUpdate(before, after) },
          { Put: { TableName: tableName('volume'), Item: { ...snapshotKey(s.id), ...snapshotGsi1(s), ...s }, ConditionExpression: 'attribute_not_exists(pk)' } },
          notFrozenCheck(s.backendHost),
        ]);
      } catch (e) {
        if (cancellationCodes(e)[2] === 'ConditionalCheckFailed') throw new BackendFrozen(s.backendHost);
        throw e;
      }
    },
    { retryable: (e) => cancellationCodes(e)[0] === 'ConditionalCheckFailed' || cancellationCodes(e).includes('TransactionConflict'), attempts: 20 },
  );
}

/** Applies an event to a snapshot, conditioned on its version (re-read and re-applied on a race). `notFrozen`: also require the backend unfrozen. */
export async function updateSnapshot(id: string, event: SnapshotEvent, options: { notFrozen?: boolean } = {}): Promise<Snapshot> {
  return withRetries(
    async () => {
      const before = await getSnapshot(id);
      if (!before) throw snapshotNotFound(id);
      const after = snapshotTransition(before, event);
      if (after instanceof FerryError) throw after;
      if (after === before) return before;
      const items: TransactItem[] = [{ Update: snapshotUpdate(before, after) }];
      if (options.notFrozen) items.push(notFrozenCheck(before.backendHost));
      try {
        await db().send(new TransactWriteCommand({ TransactItems: items }));
      } catch (e) {
        if (options.notFrozen && cancellationCodes(e)[1] === 'ConditionalCheckFailed') throw new BackendFrozen(before.backendHost);
        throw e;
      }
      return { ...after, version: before.version + 1 };
    },
    { retryable: (e) => cancellationCodes(e)[0] === 'ConditionalCheckFailed' || cancellationCodes(e).includes('TransactionConflict'), attempts: 20 },
  ).catch((e) => {
    if (isConditionFailure(e) && !(e instanceof FerryError)) throw new ConcurrentModification(`Snapshot ${id}`, e);
    throw e;
  });
}

/**
 * Removes a deleted snapshot's record and its id on the volume, in one transaction. Idempotent.
 * `unmanaged` (os-unmanage): the backend object stays, and a marker in the same transaction tells
 * the audit it is an operator's now, not an orphan (as volumes/repo.ts removeVolumeRecord does).
 */
export async function removeSnapshotRecord(id: string, options: { unmanaged?: boolean } = {}): Promise<void> {
  await withRetries(
    async () => {
      const s = await getSnapshot(id);
      if (!s) return;
      const items: TransactItem[] = [
        {
          Delete: {
            TableName: tableName('volume'),
            Key: snapshotKey(id),
            ConditionExpression: '#version = :v AND #status = :deleting',
            ExpressionAttributeNames: { '#version': 'version', '#status': 'status' },
            ExpressionAttributeValues: { ':v': s.version, ':deleting': 'deleting' },
          },
        },
      ];
      // Only a volume that is not there is gone: a failed read (a throttle) fails the removal, to be
      // retried, rather than leave this snapshot's id on the volume for ever.
      const volume = await getVolume(s.volumeId);
      if (volume) {
        const after = volumeTransition(volume, { type: 'snapshot-removed', at: new Date().toISOString(), snapshotId: id });
        if (after instanceof FerryError) throw after;
        if (after !== volume) items.push({ Update: volumeUpdate(volume, after) });
      }
      // What the snapshot took from its project's quota goes back with the record, exactly once.
      const quota = releaseItem('volume', s.projectId, s.quota);
      if (quota) items.push(quota);
      if (options.unmanaged) {
        items.push({ Put: { TableName: tableName('volume'), Item: { ...unmanagedKey(s.backendHost, `${s.volumeBackendName} ${s.backendName}`), snapshotId: s.id, at: new Date().toISOString() } } });
      }
      await db().send(new TransactWriteCommand({ TransactItems: items }));
    },
    { retryable: (e) => isConditionFailure(e) || cancellationCodes(e).includes('TransactionConflict'), attempts: 20 },
  );
}

/**
 * The write that sets a snapshot `error` when its volume's failover made it unusable (§2.4): the
 * transition accepts every status, so it is conditioned only on the snapshot still existing; the
 * version is bumped so any concurrent transition computed before it is refused.
 */
export function snapshotErrorItem(id: string, at: string): TransactItem {
  return {
    Update: {
      TableName: tableName('volume'),
      Key: snapshotKey(id),
      UpdateExpression: 'SET #status = :error, updatedAt = :at ADD #version :one',
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeNames: { '#status': 'status', '#version': 'version' },
      ExpressionAttributeValues: { ':error': 'error', ':at': at, ':one': 1 },
    },
  };
}

/** A project's snapshots (GSI1), or every snapshot (admin all_tenants; a scan). */
export async function listSnapshots(projectId?: string): Promise<Snapshot[]> {
  const items = await listKind(tableName('volume'), { sk: 'SNAP', pkPrefix: 'SNAP#', gsi1pk: projectId === undefined ? undefined : snapshotGsi1({ projectId, createdAt: '', id: '' }).gsi1pk });
  return items.map(toSnapshot);
}

/** C/volume/manager.py create_snapshot's failure: a SNAPSHOT_CREATE / SNAPSHOT_CREATE_ERROR user message, one per snapshot. */
export async function recordSnapshotCreateFailure(s: Pick<Snapshot, 'id' | 'projectId'>): Promise<void> {
  await recordMessage('volume', { key: [s.id, 'snapshot-create-failed'], projectId: s.projectId, resourceType: 'VOLUME_SNAPSHOT', resourceId: s.id, actionId: '009', detailId: '013' });
}
