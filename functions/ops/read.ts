/**
 * Reading operations for `ferry ops`, `ferry watch` and the console, with Queries on keys and
 * indexes only (no scan of a table that grows with the fleet):
 *
 * - share migrations: the operations index (core/ops-index.ts) in the share table, `OPS#open`
 *   whole and `OPS#ended` since the cut-off, then the shares (and the copies of those copying) in
 *   BatchGetItem;
 * - failovers, failbacks, drills: the volume backends (GSI1 `BACKENDS`, one item per backend),
 *   whose records name their running or last operation, then those operations;
 * - server operations: each cell's instance actions since the cut-off (GSI1 `ACTIONS`), then the
 *   instances (is the operation still theirs?) and a running move's migration record.
 *
 * One consequence, said where it shows (docs/operations.md): a server operation older than the
 * cut-off is not listed, even when it still runs (`ferry watch server:UUID` still follows it).
 */
import type { CellMapping } from '../compute/model.js';
import { cellTable, fromItem, listCells } from '../compute/repo.js';
import { copyOperationKey, getCopyOperation, type CopyOperationRecord } from '../copy/progress.js';
import { batchGetAll, queryAll } from '../core/db.js';
import { NotFound } from '../core/errors.js';
import type { BackendLag } from '../drivers/volume/replication-lag.js';
import { OPS_ENDED, OPS_OPEN, type OpIndexEntry } from '../core/ops-index.js';
import { GSI1, tableName } from '../core/tables.js';
import { operationKey, withVolumesDone, type ReplicationOperation } from '../replication/operation-record.js';
import { getMigration } from '../servers/migrations.js';
import { instanceKey, SERVER_GSI, type Instance, type InstanceAction } from '../servers/model.js';
import { findServer, loadPartition } from '../servers/repo.js';
import { shareKey } from '../shares/model.js';
import { getShare, toShare } from '../shares/repo.js';
import { isSettled, parseRef, type OperationRef, type OperationView, type OpsSnapshot } from './model.js';
import { copyView, replicationView, serverOpView, shareMigrationView } from './views.js';

/** What `ferry ops` lists by default: failures (and server operations) of the last day. */
export const DEFAULT_SINCE_HOURS = 24;

const stripOp = ({ pk: _pk, sk: _sk, ...op }: Record<string, unknown>) => op as unknown as ReplicationOperation;

/** A volume backend's record as the replication views need it (volumes/backends.ts writes it). */
export interface BackendState {
  host: string;
  replicated: boolean;
  service: { replicationStatus: string; activeBackendId: string; frozen: boolean; disabled: boolean; disabledReason: string } | undefined;
  /** What the last replication pass measured (replicas per target, largest lag). */
  replicationLag?: BackendLag;
  failoverOperationId?: string;
  drill?: { operationId: string; target: string; status: string; endOperationId?: string };
}

export async function listVolumeBackends(): Promise<BackendState[]> {
  const items = await queryAll({ TableName: tableName('volume'), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': 'BACKENDS' } });
  return items.map((i) => {
    const config = i.config as { host: string; replicationDevices?: unknown[] };
    return {
      host: config.host,
      replicated: (config.replicationDevices ?? []).length > 0,
      service: i.service as BackendState['service'],
      ...(i.replicationLag ? { replicationLag: i.replicationLag as BackendState['replicationLag'] } : {}),
      ...(i.failoverOperationId ? { failoverOperationId: i.failoverOperationId as string } : {}),
      ...(i.drill ? { drill: i.drill as BackendState['drill'] } : {}),
    };
  });
}

/** The replication operations the backends name (running or last of each), newest first. */
async function replicationOperations(backends: BackendState[]): Promise<ReplicationOperation[]> {
  const ids = [...new Set(backends.flatMap((b) => [b.failoverOperationId, b.drill?.operationId, b.drill?.endOperationId].filter((x): x is string => !!x)))];
  const items = await batchGetAll(tableName('volume'), ids.map(operationKey));
  const ops = await Promise.all(items.map(stripOp).map(withVolumesDone));
  return ops.sort((a, b) => b.createdAt.localeCompare(a.createdAt));
}

async function indexEntries(gsi1pk: string, since?: string): Promise<OpIndexEntry[]> {
  const items = await queryAll({
    TableName: tableName('share'),
    IndexName: GSI1,
    KeyConditionExpression: since ? 'gsi1pk = :p AND gsi1sk >= :since' : 'gsi1pk = :p',
    ExpressionAttributeValues: { ':p': gsi1pk, ...(since ? { ':since': since } : {}) },
  });
  return items.map((i) => i as unknown as OpIndexEntry);
}

/** The share migrations the index lists (open ones, and ended since `since`), as views of their shares. */
async function shareMigrations(since: string): Promise<OperationView[]> {
  const entries = [...(await indexEntries(OPS_OPEN)), ...(await indexEntries(OPS_ENDED, since))];
  const shareIds = [...new Set(entries.map((e) => e.resourceId))];
  const shares = (await batchGetAll(tableName('share'), shareIds.map(shareKey))).map(toShare);
  const copyIds = shares.map((s) => (s.taskState === 'data_copying_in_progress' ? s.migration?.copyOperationId : undefined)).filter((x): x is string => !!x);
  const copies = new Map((await batchGetAll(tableName('share'), copyIds.map(copyOperationKey))).map((c) => [String(c.operationId), c as unknown as CopyOperationRecord]));
  const views: OperationView[] = [];
  for (const s of shares) {
    const v = shareMigrationView(s, s.migration?.copyOperationId ? copies.get(s.migration.copyOperationId) : undefined);
    // A share migrated twice since the cut-off shows its latest migration once.
    if (v) views.push(v);
  }
  return views;
}

/** Each cell's instance actions started since `since`, as views (the instance and a running move's migration read too). */
async function serverOperations(since: string): Promise<OperationView[]> {
  const cells = await listCells();
  const perCell = await Promise.all(cells.map((cell) => cellOperations(cell, since)));
  // A cross-cell move keeps a copy of the server (and its actions) in each cell: one view per action.
  const byRef = new Map<string, OperationView>();
  for (const v of perCell.flat()) if (!byRef.has(v.ref) || v.status === 'running') byRef.set(v.ref, v);
  return [...byRef.values()];
}

async function cellOperations(cell: CellMapping, since: string): Promise<OperationView[]> {
  const actions = (
    await queryAll({
      TableName: cellTable(cell),
      IndexName: GSI1,
      KeyConditionExpression: 'gsi1pk = :p AND gsi1sk >= :since',
      ExpressionAttributeValues: { ':p': SERVER_GSI.actions, ':since': since },
    })
  ).map((i) => fromItem<InstanceAction>(i));
  if (!actions.length) return [];
  const uuids = [...new Set(actions.map((a) => a.instanceUuid))];
  const instances = new Map((await batchGetAll(cellTable(cell), uuids.map(instanceKey))).map((i) => fromItem<Instance>(i)).map((i) => [i.uuid, i]));
  return Promise.all(
    actions.map(async (a) => {
      const instance = instances.get(a.instanceUuid);
      const op = instance?.operation?.requestId === a.requestId ? instance.operation : undefined;
      const migration = op?.migrationUuid ? await getMigration(cell, op.migrationUuid) : undefined;
      return serverOpView(a, instance, migration);
    }),
  );
}

/** Everything in flight, and what failed since `since` (what succeeded too, when asked). */
export async function listOperations(options: { since: Date; includeSuccesses?: boolean }): Promise<OpsSnapshot> {
  const since = options.since.toISOString();
  const backends = await listVolumeBackends();
  const [shares, replication, servers] = await Promise.all([shareMigrations(since), replicationOperations(backends), serverOperations(since)]);
  const all = [...shares, ...replication.map(replicationView), ...servers];
  const inFlight = all.filter((v) => !isSettled(v.status) || v.status === 'waiting').sort((a, b) => a.startedAt.localeCompare(b.startedAt));
  const ended = all.filter((v) => isSettled(v.status) && v.status !== 'waiting' && (v.endedAt ?? v.updatedAt) >= since).sort((a, b) => (b.endedAt ?? b.updatedAt).localeCompare(a.endedAt ?? a.updatedAt));
  return {
    at: new Date().toISOString(),
    since,
    inFlight,
    recentFailures: ended.filter((v) => v.status === 'failed' || v.status === 'cancelled'),
    ...(options.includeSuccesses ? { recentSuccesses: ended.filter((v) => v.status === 'succeeded') } : {}),
  };
}

// ---- one operation ------------------------------------------------------------------------------

async function getReplicationOperation(id: string): Promise<ReplicationOperation | undefined> {
  const [item] = await batchGetAll(tableName('volume'), [operationKey(id)]);
  return item ? withVolumesDone(stripOp(item)) : undefined;
}

async function shareView(id: string): Promise<OperationView | undefined> {
  const s = await getShare(id);
  if (!s) return undefined;
  const copyId = s.taskState === 'data_copying_in_progress' ? s.migration?.copyOperationId : undefined;
  const view = shareMigrationView(s, copyId ? await getCopyOperation(copyId) : undefined);
  if (!view) throw new NotFound(`Share ${id} has never been migrated: no operation to show.`);
  return view;
}

async function serverView(uuid: string, requestId?: string): Promise<OperationView | undefined> {
  const server = await findServer(uuid);
  if (!server) return undefined;
  const { instance, actions } = await loadPartition(server.cell, uuid);
  const wanted = requestId ?? instance?.operation?.requestId;
  const action = wanted ? actions.find((a) => a.requestId === wanted) : [...actions].sort((a, b) => b.startTime.localeCompare(a.startTime))[0];
  if (!action) throw new NotFound(requestId ? `Server ${uuid} has no operation ${requestId}.` : `Server ${uuid} has no operation to show.`);
  const op = instance?.operation?.requestId === action.requestId ? instance.operation : undefined;
  const migration = op?.migrationUuid ? await getMigration(server.cell, op.migrationUuid) : undefined;
  return serverOpView(action, instance, migration);
}

async function backendView(host: string): Promise<OperationView | undefined> {
  const backend = (await listVolumeBackends()).find((b) => b.host === host);
  if (!backend) return undefined;
  const [latest] = await replicationOperations([backend]);
  if (!latest) throw new NotFound(`Backend ${host} has run no failover or drill.`);
  return replicationView(latest);
}

const FINDERS: Record<NonNullable<OperationRef['family']>, (ref: OperationRef) => Promise<OperationView | undefined>> = {
  share: (r) => shareView(r.id),
  replication: async (r) => {
    const op = await getReplicationOperation(r.id);
    return op ? replicationView(op) : undefined;
  },
  backend: (r) => backendView(r.id),
  server: (r) => serverView(r.id, r.requestId),
  copy: async (r) => {
    const c = await getCopyOperation(r.id);
    return c ? copyView(c) : undefined;
  },
};

/**
 * The operation `ref` names (a reference or its text), read now. NotFound when nothing has that id
 * (or the share or server it names never ran one). A bare id is tried as each family.
 */
export async function getOperation(ref: OperationRef | string): Promise<OperationView> {
  const r = typeof ref === 'string' ? parseRef(ref) : ref;
  if (r.family) {
    const view = await FINDERS[r.family](r);
    if (!view) throw new NotFound(`No ${r.family === 'replication' ? 'replication operation' : r.family} ${r.id}.`);
    return view;
  }
  for (const family of ['share', 'replication', 'server', 'copy'] as const) {
    const view = await FINDERS[family]({ ...r, family });
    if (view) return view;
  }
  throw new NotFound(`No share, replication operation, server or copy has the id ${r.id}.`);
}
