/**
 * The sites of a replicated local backend (seed 001, reference §2): every site is a directory with
 * the same layout, the primary `config.root` and one `root` per replication_device:
 *
 *   <site>/<pool>/<backendName>                        the volume (on a target: its replica)
 *   <site>/<pool>/.snapshots/<backendName>/<snapshot>  its snapshots (mirrored to the targets)
 *   <site>/.connections/<host>/<backendName>           host connections (mirrored to the targets)
 *   <site>/.replication/<backendName>                  "this volume is replicated" (on the active site)
 *   <site>/.replica/<backendName>                      what the replica's last completed sync covered (on a target)
 *   <site>/.site/promoted                              this target was failed over to (replication stops)
 *   <site>/.site/frozen                                freeze_backend was called on this active site
 *   <site>/.drill/<backendName>                        a drill's copy of the replica (on a target)
 *
 * Because the layouts match, a failover needs no data movement: the driver simply reads and writes
 * the target's root from then on. This module names the paths, reads and writes the markers, and
 * mirrors a volume's connections and snapshots from one site to another.
 */
import { lstat, mkdir, open, readlink, rename, rm, rmdir, symlink, type FileHandle } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { DriverError } from '../../core/errors.js';
import { InvalidReplicationTarget, replicationDeviceProblems, type BackendConfig, type ReplicationDevice } from './driver.js';
import { fsyncDirectory, isDirectory, isErrno, listVisible, readJson, statOrUndefined, tempName, unlinkIfPresent, writeFileAtomic } from '../files.js';
import { REPLICATION_CHUNK_BYTES, sparseCopyFile } from './sparse-copy.js';

/** The active backend id of a backend running on its primary site (reference §2.3: `''`). */
export const PRIMARY_BACKEND_ID = '';

export const CONNECTIONS_DIR = '.connections';
export const REPLICATION_DIR = '.replication';
export const REPLICA_STATE_DIR = '.replica';
export const SITE_DIR = '.site';
export const DRILL_DIR = '.drill';
export const SNAPSHOTS_DIR = '.snapshots';
export const PROMOTED_MARKER = 'promoted';
export const FROZEN_MARKER = 'frozen';

export { InvalidReplicationTarget };

/** The backend's replication devices, checked: each has a backend_id (never `default`, unique) and a root. */
export function replicationDevicesOf(config: BackendConfig): ReplicationDevice[] {
  const problems = replicationDeviceProblems(config);
  if (problems.length > 0) throw new DriverError(problems.join('; '), { context: { host: config.host } });
  const devices = config.replicationDevices ?? [];
  for (const d of devices) {
    if (typeof d.root !== 'string' || d.root === '') {
      throw new DriverError(`backend ${config.host}: replication_device ${d.backend_id} needs a root directory for the local driver`, { context: { host: config.host, backendId: d.backend_id } });
    }
  }
  return devices;
}

/** The root directory of a site: '' = the primary, else a replication_device's. */
export function siteRoot(config: BackendConfig, backendId: string): string {
  if (backendId === PRIMARY_BACKEND_ID) {
    if (!config.root) throw new DriverError(`backend ${config.host}: the local driver needs config.root`, { context: { host: config.host } });
    return config.root;
  }
  const device = replicationDevicesOf(config).find((d) => d.backend_id === backendId);
  if (!device) throw new InvalidReplicationTarget(`${backendId} is not a replication_device of ${config.host}.`, { host: config.host, backendId });
  return device.root;
}

/** Pools to look in: the configured ones and any on disk (a pool dropped from the config keeps its volumes). */
export async function poolsOn(root: string, config: BackendConfig): Promise<string[]> {
  return [...new Set([...config.pools.map((p) => p.name), ...(await listVisible(root))])];
}

/** `pools`: the site's pools when the caller listed them once for many volumes (a failover batch). */
export async function findVolumeOn(root: string, config: BackendConfig, backendName: string, pools?: string[]): Promise<{ pool: string; path: string; size: number } | undefined> {
  for (const pool of pools ?? (await poolsOn(root, config))) {
    const path = join(root, pool, backendName);
    const st = await statOrUndefined(path);
    if (st?.isFile()) return { pool, path, size: st.size };
  }
  return undefined;
}

export const replicationMarkerPath = (root: string, backendName: string) => join(root, REPLICATION_DIR, backendName);
export const replicaStatePath = (root: string, backendName: string) => join(root, REPLICA_STATE_DIR, backendName);
export const siteMarkerPath = (root: string, marker: string) => join(root, SITE_DIR, marker);
export const drillCopyPath = (root: string, backendName: string) => join(root, DRILL_DIR, backendName);
export const snapshotDirOf = (root: string, pool: string, backendName: string) => join(root, pool, SNAPSHOTS_DIR, backendName);

export async function writeSiteMarker(root: string, marker: string, body: Record<string, unknown>): Promise<void> {
  await writeFileAtomic(siteMarkerPath(root, marker), JSON.stringify(body));
}

export async function removeSiteMarker(root: string, marker: string): Promise<void> {
  await unlinkIfPresent(siteMarkerPath(root, marker));
}

export async function hasSiteMarker(root: string, marker: string): Promise<boolean> {
  return (await statOrUndefined(siteMarkerPath(root, marker))) !== undefined;
}

/** What a replication marker holds; `enabledAt` is absent from one whose body a crash lost (see writeReplicationMarkers). */
export interface ReplicationMarker {
  enabledAt?: number;
}

/** The volume's replication marker on a site, or undefined when it is not registered there. */
export async function readReplicationMarker(root: string, backendName: string): Promise<ReplicationMarker | undefined> {
  try {
    return await readJson<ReplicationMarker>(replicationMarkerPath(root, backendName));
  } catch (e) {
    // Present but empty or torn (a crash before its bytes reached the disk, see
    // writeReplicationMarkers): registered all the same; only the time is unknown.
    if (e instanceof SyntaxError) return {};
    throw e;
  }
}

/** Registers one volume on a site (kept when already there: its first enabledAt stays). */
export async function writeReplicationMarker(root: string, backendName: string, now: number): Promise<void> {
  if (await readReplicationMarker(root, backendName)) return;
  await writeFileAtomic(replicationMarkerPath(root, backendName), JSON.stringify({ backendName, enabledAt: now }));
}

/**
 * Registers many volumes on a site at once (a failover batch, seeding): each marker is created
 * with O_EXCL (one already there is kept) and written, none is fsynced on its own; then the
 * marker directory is fsynced once, so every marker's name is on disk before this returns. What
 * a marker says is that it exists; a crash may lose the bytes of one written here (ext4 allocates
 * them later), which readReplicationMarker reads as registered at an unknown time. So one fsync
 * per batch keeps the guarantee the caller needs: the volumes it records as failed over are
 * registered on the new site, whatever happens after.
 */
export async function writeReplicationMarkers(root: string, backendNames: string[], now: number, parallelism: number): Promise<void> {
  const dir = join(root, REPLICATION_DIR);
  await mkdir(dir, { recursive: true });
  const one = async (backendName: string): Promise<void> => {
    let fh: FileHandle;
    try {
      fh = await open(join(dir, backendName), 'wx');
    } catch (e) {
      if (isErrno(e, 'EEXIST')) return;
      throw e;
    }
    try {
      await fh.writeFile(JSON.stringify({ backendName, enabledAt: now }));
    } finally {
      await fh.close();
    }
  };
  for (let i = 0; i < backendNames.length; i += parallelism) await Promise.all(backendNames.slice(i, i + parallelism).map(one));
  await fsyncDirectory(dir);
}

/** What a replica holds: the source as it was when its last completed sync started. */
export interface ReplicaState {
  backendName: string;
  pool: string;
  /** When the last completed sync started reading the source (epoch ms). */
  lastSyncAt: number;
  /** The source's mtime and size that sync covered. */
  sourceMtimeMs: number;
  sourceSize: number;
  /** The replica's mtime after that sync: a different one means someone else changed the replica. */
  replicaMtimeMs: number;
  /** Bytes the last completed sync wrote, and every sync since replication was enabled. */
  bytesCopied: number;
  totalBytesCopied: number;
}

export const readReplicaState = (root: string, backendName: string) => readJson<ReplicaState>(replicaStatePath(root, backendName));

export async function writeReplicaState(root: string, state: ReplicaState): Promise<void> {
  await writeFileAtomic(replicaStatePath(root, state.backendName), JSON.stringify(state));
}

// ---- mirroring of connections and snapshots ----------------------------------------------------

/** The host entries (encoded hosts) of a site's connections, connected to anything. */
export const hostEntriesOn = (root: string): Promise<string[]> => listVisible(join(root, CONNECTIONS_DIR));

/** The hosts with a connection entry for the volume on a site (entry names, i.e. encoded hosts); `hostEntries`: the site's, listed once by the caller. */
async function connectedHostEntries(root: string, backendName: string, hostEntries?: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const hostEntry of hostEntries ?? (await hostEntriesOn(root))) {
    try {
      if ((await lstat(join(root, CONNECTIONS_DIR, hostEntry, backendName))).isSymbolicLink()) out.push(hostEntry);
    } catch (e) {
      if (!isErrno(e, 'ENOENT', 'ENOTDIR')) throw e;
    }
  }
  return out;
}

/** Makes a site's connection entry for the volume point at that site's volume file (relative, like local.ts). */
export async function ensureConnectionEntry(root: string, hostEntry: string, backendName: string, pool: string): Promise<void> {
  const entry = join(root, CONNECTIONS_DIR, hostEntry, backendName);
  const target = relative(dirname(entry), join(root, pool, backendName));
  const current = await readlink(entry).catch((e: unknown) => {
    if (isErrno(e, 'ENOENT')) return undefined;
    throw e;
  });
  if (current === target) return;
  await mkdir(dirname(entry), { recursive: true });
  const temp = join(dirname(entry), tempName(backendName));
  await symlink(target, temp);
  try {
    await rename(temp, entry);
  } finally {
    await unlinkIfPresent(temp);
  }
}

/**
 * The volume's connections on `to` become exactly those on `from` (both sites must exist).
 * `hostEntries`: both sites' host entries, listed once by a caller mirroring many volumes whose
 * connections nothing changes meanwhile (a failover batch, inside the backend's exclusive section).
 */
export async function mirrorConnections(from: string, to: string, backendName: string, pool: string, hostEntries?: { from: string[]; to: string[] }): Promise<void> {
  const wanted = new Set(await connectedHostEntries(from, backendName, hostEntries?.from));
  for (const hostEntry of wanted) await ensureConnectionEntry(to, hostEntry, backendName, pool);
  for (const hostEntry of await connectedHostEntries(to, backendName, hostEntries?.to)) {
    if (!wanted.has(hostEntry)) await unlinkIfPresent(join(to, CONNECTIONS_DIR, hostEntry, backendName));
  }
}

/** The volume's snapshots on `to` become those on `from`; snapshots never change, so a present one is kept. */
export async function mirrorSnapshots(from: string, to: string, backendName: string, pool: string, chunkBytes = REPLICATION_CHUNK_BYTES): Promise<void> {
  const fromDir = snapshotDirOf(from, pool, backendName);
  const toDir = snapshotDirOf(to, pool, backendName);
  const wanted = await listVisible(fromDir);
  const present = new Set(await listVisible(toDir));
  for (const name of wanted) if (!present.has(name)) await sparseCopyFile(join(fromDir, name), join(toDir, name), chunkBytes);
  for (const name of present) if (!wanted.includes(name)) await unlinkIfPresent(join(toDir, name));
  if (wanted.length === 0) {
    await rmdir(toDir).catch((e: unknown) => {
      if (!isErrno(e, 'ENOTEMPTY', 'EEXIST', 'ENOENT', 'ENOTDIR')) throw e;
    });
  }
}

/** Removes every trace of a volume from a (non-active) site: replica, connections, snapshots, markers. */
export async function removeVolumeFromSite(root: string, config: BackendConfig, backendName: string): Promise<void> {
  if (!(await isDirectory(root))) return;
  for (const hostEntry of await connectedHostEntries(root, backendName)) await unlinkIfPresent(join(root, CONNECTIONS_DIR, hostEntry, backendName));
  for (const pool of await poolsOn(root, config)) {
    await rm(snapshotDirOf(root, pool, backendName), { recursive: true, force: true });
    await unlinkIfPresent(join(root, pool, backendName));
  }
  await unlinkIfPresent(replicaStatePath(root, backendName));
  await unlinkIfPresent(replicationMarkerPath(root, backendName));
}
