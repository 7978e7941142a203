/**
 * For tests that run the volume API against a local stack (test/support/stack.ts) and must know
 * whether a request changed anything: demo-owned fixtures made through the real code paths, a
 * snapshot of everything a volume request can touch (the whole volume table, every backend's
 * objects and connections as its driver reports them, and the backends' directories on disk), and
 * a wait for the volume machines' executions to finish, so a snapshot is taken at rest.
 */
import { randomUUID } from 'node:crypto';
import { lstat, readdir, readlink } from 'node:fs/promises';
import { join } from 'node:path';
import { ListExecutionsCommand } from '@aws-sdk/client-sfn';
import { DeleteCommand } from '@aws-sdk/lib-dynamodb';
import { completeAttachment, createAttachment, deleteAttachment, updateAttachment } from '../../functions/attachments/service.js';
import type { AuthContext } from '../../functions/core/auth.js';
import { db, scanAll } from '../../functions/core/db.js';
import { sfn, stateMachineArn } from '../../functions/core/executions.js';
import { tableName } from '../../functions/core/tables.js';
import type { Connector } from '../../functions/drivers/volume/driver.js';
import { driverFor } from '../../functions/drivers/volume/registry.js';
import { listBackends } from '../../functions/volumes/backends.js';
import type { Volume } from '../../functions/volumes/model.js';
import { getVolume, getVolumeOrThrow, updateVolume } from '../../functions/volumes/repo.js';
import { recordNewVolume } from '../../functions/volumes/create.js';
import * as steps from '../../functions/volumes/steps.js';
import { deleteVolumeType } from '../../functions/volumes/types.js';
import { STATE_MACHINES } from '../../functions/wiring.js';
import { eventually } from './poll.js';

export const authOf = (projectId: string, admin = false): AuthContext => ({
  userId: projectId,
  projectId,
  isAdmin: admin,
  roles: admin ? ['admin', 'member', 'reader'] : ['member', 'reader'],
});
export const DEMO_AUTH = authOf('demo');

export const hostConnector = (host: string, extra: Partial<Connector> = {}): Connector => ({
  initiator: `iqn.2004-10.org:${host}`,
  ip: '10.0.0.5',
  platform: 'x86_64',
  host,
  os_type: 'linux2',
  multipath: false,
  mountpoint: null,
  ...extra,
});

/** An available volume made by the create machine's own steps (no execution needed). */
export async function availableVolume(opts: { auth?: AuthContext; size?: number; name?: string | null; metadata?: Record<string, string>; volumeType?: string | null } = {}): Promise<Volume> {
  const v = await recordNewVolume(opts.auth ?? DEMO_AUTH, {
    size: opts.size ?? 1,
    name: opts.name ?? null,
    description: null,
    volumeType: opts.volumeType ?? null,
    availabilityZone: null,
    metadata: opts.metadata ?? {},
    serverId: null,
  });
  await steps.schedule(v.id);
  await steps.createOnBackend(v.id);
  await steps.markAvailable(v.id);
  return getVolumeOrThrow(v.id);
}

/** A volume with one attachment: `reserved` (no connector), `attaching` (connected) or `attached` (completed, volume in-use). */
export async function attachedVolume(state: 'reserved' | 'attaching' | 'attached', opts: { auth?: AuthContext; name?: string | null } = {}): Promise<{ volume: Volume; attachmentId: string }> {
  const auth = opts.auth ?? DEMO_AUTH;
  const volume = await availableVolume({ auth, name: opts.name });
  const a = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
  if (state !== 'reserved') await updateAttachment({ auth, attachmentId: a.id, connector: hostConnector(`cmp-${a.id.slice(0, 8)}`) });
  if (state === 'attached') await completeAttachment({ auth, attachmentId: a.id });
  return { volume: await getVolumeOrThrow(volume.id), attachmentId: a.id };
}

export async function volumeIs(id: string, pred: (v: Volume) => boolean): Promise<boolean> {
  const v = await getVolume(id);
  return v !== undefined && pred(v);
}

/** JSON with sorted keys (DynamoDB does not keep a map's key order). */
export function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** Everything a volume request can change, keyed for a readable diff: `table <pk>|<sk>`, `backend <host> ...`, `fs <path>`. */
export type Snapshot = Map<string, string>;

const SCAN_SEGMENTS = 4;

async function scanVolumeTable(into: Snapshot): Promise<void> {
  const segments = await Promise.all(
    Array.from({ length: SCAN_SEGMENTS }, (_, segment) => scanAll({ TableName: tableName('volume'), ConsistentRead: true, Segment: segment, TotalSegments: SCAN_SEGMENTS })),
  );
  for (const item of segments.flat().sort((a, b) => `${String(a.pk)}|${String(a.sk)}`.localeCompare(`${String(b.pk)}|${String(b.sk)}`))) {
    // A backend's replicationLag is the replication loop's measurement, written on its own schedule
    // (volumes/backends.ts recordReplicationLag), never by a request.
    const { replicationLag: _measured, ...rest } = item;
    into.set(`table ${String(item.pk)}|${String(item.sk)}`, stableJson(String(item.pk).startsWith('BACKEND#') ? rest : item));
  }
}

async function walk(dir: string, into: Snapshot, root: string): Promise<void> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const path = join(dir, name);
    const st = await lstat(path);
    const rel = path.slice(root.length);
    if (st.isDirectory()) {
      into.set(`fs ${rel}/`, 'dir');
      await walk(path, into, root);
    } else if (st.isSymbolicLink()) {
      into.set(`fs ${rel}`, `symlink -> ${await readlink(path)}`);
    } else {
      into.set(`fs ${rel}`, `file size=${st.size} mtime=${st.mtimeMs} ino=${st.ino} nlink=${st.nlink}`);
    }
  }
}

/**
 * The volume table, every backend's driver view, and the backends' directories (under `<dataDir>/backends`).
 * The three are read side by side (the fuzz suites take one after every request): each goes into a
 * map of its own, merged in a fixed order, so the snapshot is the same as read one after another.
 */
export async function snapshotState(dataDir: string): Promise<Snapshot> {
  const root = join(dataDir, 'backends');
  const [table, backends, files] = await Promise.all([
    (async () => {
      const part: Snapshot = new Map();
      await scanVolumeTable(part);
      return part;
    })(),
    (async () => {
      const views = await Promise.all(
        (await listBackends()).map(async (backend) => {
          const driver = driverFor(backend);
          const [volumes, connections] = await Promise.all([driver.listVolumes(), driver.listConnections()]);
          return [
            [`backend ${backend.host} volumes`, stableJson([...volumes].sort((a, b) => a.backendName.localeCompare(b.backendName)))],
            [`backend ${backend.host} connections`, stableJson(connections.map((c) => `${c.backendName}@${c.host}`).sort())],
          ] as const;
        }),
      );
      return new Map(views.flat());
    })(),
    (async () => {
      const part: Snapshot = new Map();
      await walk(root, part, root);
      return part;
    })(),
  ]);
  return new Map([...table, ...backends, ...files]);
}

/** The differing leaves of two JSON values, as `path: before -> after`. */
function leafDiff(a: unknown, b: unknown, path: string, out: string[]): void {
  const isObj = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null;
  if (isObj(a) && isObj(b) && Array.isArray(a) === Array.isArray(b)) {
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) leafDiff(a[k], b[k], `${path}.${k}`, out);
    return;
  }
  const sa = JSON.stringify(a) ?? 'undefined';
  const sb = JSON.stringify(b) ?? 'undefined';
  if (sa !== sb) out.push(`${path || '.'}: ${sa.slice(0, 200)} -> ${sb.slice(0, 200)}`);
}

/** What differs between two snapshots, one line per key (empty when equal). */
export function diffSnapshots(before: Snapshot, after: Snapshot): string[] {
  const out: string[] = [];
  const parse = (s: string): unknown => {
    try {
      return JSON.parse(s);
    } catch {
      return s;
    }
  };
  for (const [k, v] of before) {
    if (!after.has(k)) out.push(`removed ${k}: ${v.slice(0, 300)}`);
    else if (after.get(k) !== v) {
      const leaves: string[] = [];
      leafDiff(parse(v), parse(after.get(k)!), '', leaves);
      out.push(`changed ${k}:\n      ${leaves.join('\n      ')}`);
    }
  }
  for (const [k, v] of after) if (!before.has(k)) out.push(`added ${k}: ${v.slice(0, 300)}`);
  return out;
}

/**
 * Waits until no execution of the stack's machines is RUNNING (the local Step Functions run them in
 * this process). The machines are asked side by side: one round is then one round trip, not one
 * per machine (the fuzz suites and the authz matrix settle before every snapshot).
 */
export async function settleExecutions(timeoutMs = 30_000): Promise<void> {
  await eventually(
    async (note) => {
      const client = await sfn();
      const running = (
        await Promise.all(
          STATE_MACHINES.map(async (m) => {
            const out = await client.send(new ListExecutionsCommand({ stateMachineArn: stateMachineArn(m.name), statusFilter: 'RUNNING' }));
            return (out.executions ?? []).map((e) => `${m.name}/${e.name}`);
          }),
        )
      ).flat();
      return note(running).length === 0 || undefined;
    },
    'no execution of the stack\'s machines RUNNING',
    { timeoutMs, intervalMs: 25 },
  );
}

/**
 * Removes what a test made and no longer needs, through the product's own operations, so later
 * snapshots stay small: volumes not in `keep.volumes` (their attachments deleted first, then the
 * delete machine's steps), backend objects no volume record names (except `keep.backendNames`),
 * volume types not in `keep.types`, and attachment tombstones.
 */
export async function cleanUp(keep: { volumes: Set<string>; backendNames: Set<string>; types: Set<string> }): Promise<void> {
  await settleExecutions();
  const admin = authOf('admin', true);
  const items = await scanAll({ TableName: tableName('volume'), ConsistentRead: true });
  const referenced = new Set<string>();
  for (const item of items) {
    if (item.sk !== 'VOL') continue;
    const id = item.id as string;
    if (keep.volumes.has(id)) {
      referenced.add(item.backendName as string);
      continue;
    }
    for (const attachmentId of Object.keys((item.attachments as Record<string, unknown>) ?? {})) {
      await deleteAttachment({ auth: admin, attachmentId }).catch(() => undefined);
    }
    try {
      await updateVolume(id, { type: 'reset-status', at: new Date().toISOString(), status: 'available', attachStatus: 'detached', migrationStatus: null });
      await steps.beginDelete(id);
      await steps.deleteOnBackend(id);
      await steps.finishDelete(id);
    } catch {
      referenced.add(item.backendName as string);
    }
  }
  for (const item of items) {
    if (item.sk === 'ATT' && item.deleted) await db().send(new DeleteCommand({ TableName: tableName('volume'), Key: { pk: item.pk, sk: item.sk } }));
    if (item.sk === 'VTYPE' && !keep.types.has(item.id as string)) await deleteVolumeType(item.id as string).catch(() => undefined);
  }
  for (const backend of await listBackends()) {
    const driver = driverFor(backend);
    for (const o of await driver.listVolumes()) {
      if (!referenced.has(o.backendName) && !keep.backendNames.has(o.backendName) && (await getVolumeByBackendName(items, o.backendName)) === undefined) {
        await driver.deleteVolume(o.backendName);
      }
    }
  }
}

async function getVolumeByBackendName(items: Record<string, unknown>[], backendName: string): Promise<string | undefined> {
  const item = items.find((i) => i.sk === 'VOL' && i.backendName === backendName);
  if (!item) return undefined;
  return (await getVolume(item.id as string)) ? (item.id as string) : undefined;
}
