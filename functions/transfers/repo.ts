/**
 * Persistence of transfers. Each change is one transaction whose conditions are model.ts's rules:
 * - offer: the transfer record, and the volume `available` -> `awaiting-transfer` at the version
 *   read (plus a ConditionCheck on each snapshot moving with it, at its version);
 * - accept: the transfer record goes, the volume (status `awaiting-transfer`, owner the source
 *   project, version read) and its snapshots change project, and the quota moves: charged to the
 *   accepting project (quotas/engine.ts writeCharged, refused over its limits), given back by the
 *   source project, all or nothing;
 * - delete: the record goes and the volume, if still offered, is `available` again.
 * A lost race re-reads and re-decides.
 */
import { GetCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import type { AuthContext } from '../core/auth.js';
import { db, isConditionFailure, listKind, versionedUpdate, withRetries } from '../core/db.js';
import { FerryError } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { releaseItem, type Deltas } from '../quotas/engine.js';
import { getSnapshot } from '../snapshots/repo.js';
import { snapshotGsi1, snapshotKey, type Snapshot } from '../snapshots/model.js';
import { volumeGsi1, volumeKey, type Volume } from '../volumes/model.js';
import { cinderBuiltin, countLegacyVolumes, perVolumeCheck, snapshotOverError, snapshotTakes, volumeOverError, volumeTakes } from '../volumes/quotas.js';
import { cancellationCodes, getVolume, getVolumeOrThrow, type TransactItem } from '../volumes/repo.js';
import { writeCharged } from '../quotas/engine.js';
import { acceptRefusal, AWAITING, offered, offerRefusal, transferGsi1, transferKey, transferNotFound, type Transfer } from './model.js';

const KEY_ATTRIBUTES = ['pk', 'sk', 'gsi1pk', 'gsi1sk'];
const strip = <T>(item: Record<string, unknown>) => Object.fromEntries(Object.entries(item).filter(([k]) => !KEY_ATTRIBUTES.includes(k))) as T;
const RETRY = { retryable: (e: unknown) => isConditionFailure(e) || cancellationCodes(e).includes('TransactionConflict'), attempts: 20 };

export async function getTransfer(id: string): Promise<Transfer | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: transferKey(id), ConsistentRead: true }));
  return out.Item ? strip<Transfer>(out.Item) : undefined;
}

/** transfer_get: another project's transfer does not exist for a non-admin. */
export async function getTransferScoped(auth: AuthContext, id: string): Promise<Transfer> {
  const t = await getTransfer(id);
  if (!t || (!auth.isAdmin && t.sourceProjectId !== auth.projectId)) throw transferNotFound(id);
  return t;
}

/** A project's transfers (GSI1), or every one (admin all_tenants: a scan). */
export async function listTransfers(projectId?: string): Promise<Transfer[]> {
  const items = await listKind(tableName('volume'), { sk: 'XFER', pkPrefix: 'XFER#', gsi1pk: projectId === undefined ? undefined : transferGsi1({ sourceProjectId: projectId, createdAt: '', id: '' }).gsi1pk });
  return items.map((i) => strip<Transfer>(i));
}

async function snapshotsOf(v: Volume): Promise<Snapshot[]> {
  const found = await Promise.all((v.snapshotIds ?? []).map((id) => getSnapshot(id)));
  return found.filter((s): s is Snapshot => s !== undefined);
}

const snapshotCheck = (s: Snapshot): TransactItem => ({
  ConditionCheck: {
    TableName: tableName('volume'),
    Key: snapshotKey(s.id),
    ConditionExpression: '#version = :v AND #status = :available',
    ExpressionAttributeNames: { '#version': 'version', '#status': 'status' },
    ExpressionAttributeValues: { ':v': s.version, ':available': 'available' },
  },
});

/** Records the offer (`t` without id-dependent parts filled by the caller) with the volume `awaiting-transfer`. */
export async function insertTransfer(t: Transfer): Promise<void> {
  await withRetries(async () => {
    const v = await getVolumeOrThrow(t.volumeId);
    const snapshots = t.noSnapshots ? [] : await snapshotsOf(v);
    const refusal = offerRefusal(v, snapshots, t.noSnapshots);
    if (refusal) throw refusal;
    const items: TransactItem[] = [
      { Update: versionedUpdate({ TableName: tableName('volume'), Key: volumeKey(v.id) }, v, offered(v, t.createdAt), { expression: '#st = :available', names: { '#st': 'status' }, values: { ':available': 'available' } }) },
      { Put: { TableName: tableName('volume'), Item: { ...transferKey(t.id), ...transferGsi1(t), ...t }, ConditionExpression: 'attribute_not_exists(pk)' } },
      ...snapshots.map(snapshotCheck),
    ];
    await db().send(new TransactWriteCommand({ TransactItems: items }));
  }, { retryable: (e) => !(e instanceof FerryError) && RETRY.retryable(e), attempts: 20 });
}

/** Removes a transfer; the volume, if still offered by the transfer's project, is `available` again. */
export async function deleteTransfer(t: Transfer, at: string): Promise<void> {
  await withRetries(async () => {
    const items: TransactItem[] = [
      { Delete: { TableName: tableName('volume'), Key: transferKey(t.id), ConditionExpression: 'attribute_exists(pk)' } },
    ];
    const v = await getVolume(t.volumeId);
    if (v && v.status === AWAITING && v.projectId === t.sourceProjectId) {
      items.push({ Update: versionedUpdate({ TableName: tableName('volume'), Key: volumeKey(v.id) }, v, { ...v, status: 'available', updatedAt: at }, { expression: '#st = :awaiting', names: { '#st': 'status' }, values: { ':awaiting': AWAITING } }) });
    }
    try {
      await db().send(new TransactWriteCommand({ TransactItems: items }));
    } catch (e) {
      if (cancellationCodes(e)[0] === 'ConditionalCheckFailed') throw transferNotFound(t.id);
      throw e;
    }
  }, { retryable: (e) => !(e instanceof FerryError) && RETRY.retryable(e), attempts: 20 });
}

function sum(parts: Deltas[]): Deltas {
  const out: Deltas = {};
  for (const p of parts) for (const [r, n] of Object.entries(p)) out[r] = (out[r] ?? 0) + n;
  return out;
}

/**
 * Accept: one transaction that removes the transfer, gives the volume (and its snapshots unless
 * no_snapshots) to `to`, and moves their quota from the source project to `to`. Returns the
 * volume as written.
 */
export async function acceptTransfer(t: Transfer, to: { projectId: string; userId: string }, at: string): Promise<Volume> {
  return withRetries(async () => {
    const current = await getTransfer(t.id);
    if (!current) throw transferNotFound(t.id);
    const v = await getVolumeOrThrow(t.volumeId);
    const refusal = acceptRefusal(current, v);
    if (refusal) throw refusal;
    const snapshots = current.noSnapshots ? [] : await snapshotsOf(v);
    const volumeQuota = v.quota ?? volumeTakes(v);
    const after: Volume = { ...v, projectId: to.projectId, userId: to.userId, status: 'available', quota: volumeQuota, updatedAt: at };
    const items: TransactItem[] = [
      { Delete: { TableName: tableName('volume'), Key: transferKey(t.id), ConditionExpression: '#version = :v', ExpressionAttributeNames: { '#version': 'version' }, ExpressionAttributeValues: { ':v': current.version } } },
      {
        Update: versionedUpdate({ TableName: tableName('volume'), Key: volumeKey(v.id) }, { ...v, ...volumeGsi1(v) }, { ...after, ...volumeGsi1(after) }, {
          expression: '#st = :awaiting AND #proj = :source',
          names: { '#st': 'status', '#proj': 'projectId' },
          values: { ':awaiting': AWAITING, ':source': current.sourceProjectId },
        }),
      },
      ...snapshots.map((s): TransactItem => {
        const moved = { ...s, projectId: to.projectId, userId: to.userId, quota: s.quota ?? snapshotTakes(s.size, v.volumeTypeName) };
        return { Update: versionedUpdate({ TableName: tableName('volume'), Key: snapshotKey(s.id) }, { ...s, ...snapshotGsi1(s) }, { ...moved, ...snapshotGsi1(moved) }) };
      }),
    ];
    const deltas = sum([volumeQuota, ...snapshots.map((s) => s.quota ?? snapshotTakes(s.size, v.volumeTypeName))]);
    if (to.projectId === current.sourceProjectId) {
      // Accepted by its own project: nothing moves between quotas (and one transaction may not touch the usage item twice).
      await db().send(new TransactWriteCommand({ TransactItems: items }));
      return { ...after, version: v.version + 1 };
    }
    // What the source project had counted goes back with the same transaction.
    const released = sum([v.quota ?? {}, ...snapshots.map((s) => s.quota ?? {})]);
    const release = releaseItem('volume', current.sourceProjectId, released);
    await writeCharged({
      table: 'volume',
      project: to.projectId,
      deltas,
      builtin: cinderBuiltin,
      items: release ? [...items, release] : items,
      countLegacy: () => countLegacyVolumes(to.projectId),
      overError: (overs) => (overs[0]!.resource.startsWith('snapshots') ? snapshotOverError(overs, v.size) : volumeOverError(overs, v.size)),
      precheck: perVolumeCheck(v.size),
    });
    return { ...after, version: v.version + 1 };
  }, { retryable: (e) => !(e instanceof FerryError) && RETRY.retryable(e), attempts: 20 });
}
