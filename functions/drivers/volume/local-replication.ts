/**
 * Replication for the local volume driver (seed 001, reference §2): every site of a backend is a
 * directory with the same layout, the primary `config.root` and one `root` per replication_device:
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
 * the target's root from then on. Replication is asynchronous: a pass compares each replicated
 * volume with its replica chunk by chunk and writes only the chunks that differ.
 *
 * Direction: replication only runs while the primary is active. After a failover nothing is
 * replicated (the primary is presumed lost); failback copies every volume back from the target in
 * one full comparison, after which the targets are replicas again.
 */
import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import {
  copyFile,
  lstat,
  mkdir,
  open,
  readlink,
  rename,
  rm,
  rmdir,
  stat,
  symlink,
  type FileHandle,
} from 'node:fs/promises';
import { basename, dirname, join, relative } from 'node:path';
import { DriverError, FerryError } from '../../core/errors.js';
import { logger } from '../../core/logger.js';
import type { BackendConfig, ReplicationDevice } from './driver.js';
import { isDirectory, isErrno, listVisible, readChunk, readJson, statOrUndefined, tempName, unlinkIfPresent, writeFileAtomic, writeFully } from '../files.js';

/** The active backend id of a backend running on its primary site (reference §2.3: `''`). */
export const PRIMARY_BACKEND_ID = '';
/** `failover_host(..., 'default')` means fail back (upstream `VolumeManager.FAILBACK_SENTINEL`). */
export const FAILBACK_SENTINEL = 'default';
export const REPLICATION_CHUNK_BYTES = 1024 * 1024;
export const DEFAULT_REPLICATION_INTERVAL_MS = 1000;
export const REPLICATION_INTERVAL_ENV = 'FERRY_REPLICATION_INTERVAL_MS';

export const CONNECTIONS_DIR = '.connections';
export const REPLICATION_DIR = '.replication';
export const REPLICA_STATE_DIR = '.replica';
export const SITE_DIR = '.site';
export const DRILL_DIR = '.drill';
export const SNAPSHOTS_DIR = '.snapshots';
export const PROMOTED_MARKER = 'promoted';
export const FROZEN_MARKER = 'frozen';

/**
 * A source whose mtime is this close to the sync's start may be written again within the same
 * timestamp tick, unseen by the size+mtime check: such a volume is compared again on the next pass.
 */
const MTIME_SETTLE_MS = 50;
const ZERO_DIGEST = 'zero';

/** Upstream's InvalidReplicationTarget (an Invalid, so 400): an unknown secondary id, or failback while on the primary. */
export class InvalidReplicationTarget extends FerryError {
  constructor(reason: string, context?: Record<string, unknown>) {
    super(400, 'badRequest', `Invalid Replication Target: ${reason}`, { context });
  }
}

// The small file helpers live in ../files.ts (shared with the compute driver); local.ts takes them from here.
export { isDirectory, isErrno, listVisible, statOrUndefined, tempName } from '../files.js';

function chunkDigest(chunk: Buffer, zeros: Buffer): string {
  // Most chunks of a volume are never written: a memcmp against zeros is much cheaper than a hash.
  if (chunk.equals(zeros.subarray(0, chunk.length))) return ZERO_DIGEST;
  return createHash('sha1').update(chunk).digest('base64');
}

/**
 * Copies a file keeping it sparse (chunks of zeros stay holes), published atomically at `dst`
 * (temp + fsync + rename). A reflink is tried first: on XFS or btrfs the copy is instant and shares blocks.
 */
export async function sparseCopyFile(src: string, dst: string, chunkBytes = REPLICATION_CHUNK_BYTES): Promise<void> {
  await mkdir(dirname(dst), { recursive: true });
  const temp = join(dirname(dst), tempName(basename(dst)));
  try {
    try {
      await copyFile(src, temp, constants.COPYFILE_FICLONE_FORCE);
    } catch (e) {
      if (isErrno(e, 'ENOENT')) throw e;
      await unlinkIfPresent(temp);
      await copyChunksSparse(src, temp, chunkBytes);
    }
    const fh = await open(temp, 'r+');
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(temp, dst);
  } finally {
    await unlinkIfPresent(temp);
  }
}

async function copyChunksSparse(src: string, dst: string, chunkBytes: number): Promise<void> {
  const input = await open(src, 'r');
  try {
    const output = await open(dst, 'wx');
    try {
      const { size } = await input.stat();
      await output.truncate(size);
      const buf = Buffer.alloc(chunkBytes);
      const zeros = Buffer.alloc(chunkBytes);
      for (let off = 0; off < size; off += chunkBytes) {
        const chunk = await readChunk(input, buf, Math.min(chunkBytes, size - off), off);
        if (chunkDigest(chunk, zeros) !== ZERO_DIGEST) await writeFully(output, chunk, off);
      }
    } finally {
      await output.close();
    }
  } finally {
    await input.close();
  }
}

// ---- sites -------------------------------------------------------------------------------------

/** The backend's replication devices, checked: each has a backend_id (never `default`, unique) and a root. */
export function replicationDevicesOf(config: BackendConfig): ReplicationDevice[] {
  const devices = config.replicationDevices ?? [];
  const seen = new Set<string>();
  for (const d of devices) {
    const id = d.backend_id;
    if (typeof id !== 'string' || id === '') throw new DriverError(`backend ${config.host}: a replication_device has no backend_id`, { context: { host: config.host } });
    if (id === FAILBACK_SENTINEL) {
      throw new DriverError(`backend ${config.host}: replication_device backend_id must not be "${FAILBACK_SENTINEL}" (it means fail back to the primary)`, { context: { host: config.host } });
    }
    if (seen.has(id)) throw new DriverError(`backend ${config.host}: replication_device backend_id ${id} is configured twice`, { context: { host: config.host, backendId: id } });
    seen.add(id);
    if (config.driver === 'local' && (typeof d.root !== 'string' || d.root === '')) {
      throw new DriverError(`backend ${config.host}: replication_device ${id} needs a root directory for the local driver`, { context: { host: config.host, backendId: id } });
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

export async function findVolumeOn(root: string, config: BackendConfig, backendName: string): Promise<{ pool: string; path: string; size: number } | undefined> {
  for (const pool of await poolsOn(root, config)) {
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

export async function writeReplicationMarker(root: string, backendName: string, now: number): Promise<void> {
  const path = replicationMarkerPath(root, backendName);
  const existing = await readJson<{ enabledAt: number }>(path);
  if (existing) return;
  await writeFileAtomic(path, JSON.stringify({ backendName, enabledAt: now }));
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

async function writeReplicaState(root: string, state: ReplicaState): Promise<void> {
  await writeFileAtomic(replicaStatePath(root, state.backendName), JSON.stringify(state));
}

// ---- mirroring of connections and snapshots ----------------------------------------------------

/** The hosts with a connection entry for the volume on a site (entry names, i.e. encoded hosts). */
async function connectedHostEntries(root: string, backendName: string): Promise<string[]> {
  const out: string[] = [];
  for (const hostEntry of await listVisible(join(root, CONNECTIONS_DIR))) {
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

/** The volume's connections on `to` become exactly those on `from` (both sites must exist). */
export async function mirrorConnections(from: string, to: string, backendName: string, pool: string): Promise<void> {
  const wanted = new Set(await connectedHostEntries(from, backendName));
  for (const hostEntry of wanted) await ensureConnectionEntry(to, hostEntry, backendName, pool);
  for (const hostEntry of await connectedHostEntries(to, backendName)) {
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
  if (wanted.length === 0) await rmdir(toDir).catch(() => undefined);
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

// ---- the engine --------------------------------------------------------------------------------

/** Replication state of one volume on one target, as `replicationStatus` reports it. */
export interface ReplicaStatus {
  targetBackendId: string;
  /** When the replica's last completed sync started (it holds the source as of then); null = never synced. */
  lastSyncAt: number | null;
  /** 0 when the replica equals the source; else an upper bound of the age of the oldest change it lacks (≥ 1). */
  lagMs: number;
  /** Bytes written by the last completed sync. */
  bytesCopied: number;
  totalBytesCopied: number;
}

export interface ReplicationPassReport {
  /** Why nothing was replicated (the backend is failed over), if so. */
  skipped?: string;
  volumes: number;
  bytesCopied: number;
  errors: { backendName: string; targetBackendId: string; message: string }[];
}

interface DigestCache {
  ino: number;
  size: number;
  mtimeMs: number;
  digests: string[];
}

/** One queue per backend host in this process: passes, failovers, drills and deletes never overlap. */
const hostQueues = new Map<string, { tail: Promise<unknown>; depth: number }>();

function exclusiveFor<T>(host: string, fn: () => Promise<T>): Promise<T> {
  const queue = hostQueues.get(host) ?? { tail: Promise.resolve(), depth: 0 };
  hostQueues.set(host, queue);
  queue.depth += 1;
  const run = queue.tail.then(fn, fn);
  queue.tail = run
    .catch(() => undefined)
    .finally(() => {
      queue.depth -= 1;
      if (queue.depth === 0 && hostQueues.get(host) === queue) hostQueues.delete(host);
    });
  return run;
}

export class LocalReplicationEngine {
  private readonly chunkBytes: number;
  private readonly now: () => number;
  /** What each replica's chunks hold, per `<target>\0<backendName>`, valid while the replica's stat is unchanged. */
  private readonly digests = new Map<string, DigestCache>();
  /** Replicas to compare on the next pass even if size and mtime look unchanged. */
  private readonly recheck = new Set<string>();
  /** When a pass last found the replica equal to the source (memory only; lag is measured from here). */
  private readonly verifiedAt = new Map<string, number>();
  /** The last error logged per replica, so a target that stays missing is logged once, not every pass. */
  private readonly lastErrors = new Map<string, string>();

  constructor(
    public config: BackendConfig,
    options: { chunkBytes?: number; now?: () => number } = {},
  ) {
    this.chunkBytes = options.chunkBytes ?? REPLICATION_CHUNK_BYTES;
    this.now = options.now ?? Date.now;
    replicationDevicesOf(config);
  }

  get host(): string {
    return this.config.host;
  }

  targets(): string[] {
    return replicationDevicesOf(this.config).map((d) => d.backend_id);
  }

  root(backendId: string): string {
    return siteRoot(this.config, backendId);
  }

  /** Runs `fn` with no pass, failover or drill of this backend running in this process. */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    return exclusiveFor(this.host, fn);
  }

  /** True while a pass or another exclusive operation runs or waits. */
  busy(): boolean {
    return (hostQueues.get(this.host)?.depth ?? 0) > 0;
  }

  /** The first target that was failed over to (and not failed back from), if any. */
  async promotedTarget(): Promise<string | undefined> {
    for (const id of this.targets()) if (await hasSiteMarker(this.root(id), PROMOTED_MARKER)) return id;
    return undefined;
  }

  /** Every target is a replica again (after a failback, or when the service says the failover never happened). */
  async clearPromotion(): Promise<void> {
    for (const id of this.targets()) {
      const root = this.root(id);
      if (await isDirectory(root)) await removeSiteMarker(root, PROMOTED_MARKER);
    }
  }

  /**
   * One replication pass over every replicated volume of the primary, to every target. Runs only
   * while the primary is active: per the caller's active backend id, and per the targets' own
   * promoted markers (a failover in another driver instance stops replication at once).
   */
  syncAll(activeBackendId: string, options: { promotionIsStale?: boolean } = {}): Promise<ReplicationPassReport> {
    return this.exclusive(async () => {
      const report: ReplicationPassReport = { volumes: 0, bytesCopied: 0, errors: [] };
      if (activeBackendId !== PRIMARY_BACKEND_ID) return { ...report, skipped: `failed over to ${activeBackendId}` };
      if (options.promotionIsStale) await this.clearPromotion();
      const promoted = await this.promotedTarget();
      if (promoted) return { ...report, skipped: `failed over to ${promoted}` };
      const primary = this.root(PRIMARY_BACKEND_ID);
      for (const backendName of await listVisible(join(primary, REPLICATION_DIR))) {
        report.volumes += 1;
        for (const target of this.targets()) {
          const key = `${target}\0${backendName}`;
          try {
            report.bytesCopied += await this.syncVolumeTo(backendName, target);
            this.lastErrors.delete(key);
          } catch (e) {
            // One volume or target failing must not stop the others; the next pass tries again.
            const message = (e as Error).message;
            report.errors.push({ backendName, targetBackendId: target, message });
            if (this.lastErrors.get(key) !== message) {
              this.lastErrors.set(key, message);
              logger.warn('replication of a volume failed; will retry on the next pass', { host: this.host, backendName, target, error: e as Error });
            }
          }
        }
      }
      return report;
    });
  }

  /**
   * Brings one target's replica of a primary volume up to date; returns the bytes written. Call
   * inside `exclusive`. A missing source (being created or deleted) is left alone: a replica is
   * never removed because its source cannot be read, since that is exactly the smoking hole.
   */
  async syncVolumeTo(backendName: string, target: string): Promise<number> {
    const primary = this.root(PRIMARY_BACKEND_ID);
    const source = await findVolumeOn(primary, this.config, backendName);
    if (!source) return 0;
    const targetRoot = this.root(target);
    // The target root is the secondary site's storage: recreating it here would hide its loss.
    if (!(await isDirectory(targetRoot))) throw new DriverError(`replication target ${target} is unreachable: ${targetRoot} is not a directory`, { context: { host: this.host, target } });
    const key = `${target}\0${backendName}`;
    const replicaPath = join(targetRoot, source.pool, backendName);
    const startedAt = this.now();
    // One open source for the whole sync: an rm -rf of the primary meanwhile does not cut it short.
    const src = await open(source.path, 'r');
    let copied = 0;
    try {
      const before = await src.stat();
      const state = await readReplicaState(targetRoot, backendName);
      const replicaStat = await statOrUndefined(replicaPath);
      const unchanged =
        state !== undefined &&
        !this.recheck.has(key) &&
        state.sourceSize === before.size &&
        state.sourceMtimeMs === before.mtimeMs &&
        replicaStat?.size === before.size &&
        replicaStat.mtimeMs === state.replicaMtimeMs;
      if (unchanged) {
        this.verifiedAt.set(key, startedAt);
      } else {
        copied = await this.syncChanged(src, before, replicaPath, targetRoot, { key, backendName, pool: source.pool, startedAt, previous: state });
      }
    } finally {
      await src.close();
    }
    // Connections and snapshots change without touching the volume's bytes: mirrored on every pass.
    await mirrorConnections(primary, targetRoot, backendName, source.pool);
    await mirrorSnapshots(primary, targetRoot, backendName, source.pool, this.chunkBytes);
    return copied;
  }

  /** Copies the changed chunks of a source whose size or mtime moved, then records what the replica now covers. */
  private async syncChanged(
    src: FileHandle,
    before: { size: number; mtimeMs: number; blocks: number },
    replicaPath: string,
    targetRoot: string,
    info: { key: string; backendName: string; pool: string; startedAt: number; previous: ReplicaState | undefined },
  ): Promise<number> {
    const { key, startedAt } = info;
    const copied = await this.copyChangedChunks(src, before.size, replicaPath, key, before.blocks);
    const after = await src.stat();
    // A write during the copy (or within the same timestamp tick) may be missing: compare again next pass.
    const settled = after.mtimeMs === before.mtimeMs && after.size === before.size && startedAt - before.mtimeMs >= MTIME_SETTLE_MS;
    if (settled) this.recheck.delete(key);
    else this.recheck.add(key);
    const replicaAfter = await stat(replicaPath);
    await writeReplicaState(targetRoot, {
      backendName: info.backendName,
      pool: info.pool,
      lastSyncAt: startedAt,
      sourceMtimeMs: before.mtimeMs,
      sourceSize: before.size,
      replicaMtimeMs: replicaAfter.mtimeMs,
      bytesCopied: copied,
      totalBytesCopied: (info.previous?.totalBytesCopied ?? 0) + copied,
    });
    this.verifiedAt.set(key, startedAt);
    return copied;
  }

  /**
   * Writes into `dstPath` every chunk of the source that differs from it, keeping holes where both
   * are zeros, then fsyncs. With a digest cache for the replica (`cacheKey`) only the source is read.
   */
  async copyChangedChunks(src: FileHandle, size: number, dstPath: string, cacheKey?: string, srcBlocks?: number): Promise<number> {
    // Reading a hole still costs the kernel a zeroed page per 4 KiB (about 1 s per cold GiB) and
    // Node has no SEEK_DATA: a large source with no block allocated is known to be all zeros unread.
    const sourceAllHoles = srcBlocks === 0 && size >= this.chunkBytes;
    await mkdir(dirname(dstPath), { recursive: true });
    const dstStat = await statOrUndefined(dstPath);
    const cached = cacheKey ? this.digests.get(cacheKey) : undefined;
    const cacheValid = cached && dstStat && cached.ino === dstStat.ino && cached.size === dstStat.size && cached.mtimeMs === dstStat.mtimeMs;
    const oldSize = dstStat?.size ?? 0;
    let digests = cacheValid ? cached.digests : [];
    if (size < oldSize) digests = [];
    const dst = await open(dstPath, constants.O_RDWR | constants.O_CREAT);
    try {
      if (oldSize !== size) await dst.truncate(size);
      const srcBuf = Buffer.alloc(this.chunkBytes);
      const dstBuf = Buffer.alloc(this.chunkBytes);
      const zeros = Buffer.alloc(this.chunkBytes);
      let copied = 0;
      for (let i = 0, off = 0; off < size; i++, off += this.chunkBytes) {
        const len = Math.min(this.chunkBytes, size - off);
        const chunk = sourceAllHoles ? zeros.subarray(0, len) : await readChunk(src, srcBuf, len, off);
        const want = sourceAllHoles ? ZERO_DIGEST : chunkDigest(chunk, zeros);
        // Past the replica's old end there is only the hole truncate just made.
        const have = digests[i] ?? (off >= oldSize ? ZERO_DIGEST : chunkDigest(await readChunk(dst, dstBuf, len, off), zeros));
        if (have !== want) {
          await writeFully(dst, chunk, off);
          copied += len;
        }
        digests[i] = want;
      }
      if (copied > 0 || oldSize !== size) await dst.sync();
      const st = await dst.stat();
      if (cacheKey) this.digests.set(cacheKey, { ino: st.ino, size: st.size, mtimeMs: st.mtimeMs, digests });
      return copied;
    } finally {
      await dst.close();
    }
  }

  /** Per target: when the replica was last synced, how far behind it is, what the last sync wrote. */
  async status(backendName: string): Promise<ReplicaStatus[]> {
    const primary = this.root(PRIMARY_BACKEND_ID);
    const source = await findVolumeOn(primary, this.config, backendName);
    const sourceStat = source ? await statOrUndefined(source.path) : undefined;
    const marker = await readJson<{ enabledAt: number }>(replicationMarkerPath(primary, backendName));
    const now = this.now();
    const out: ReplicaStatus[] = [];
    for (const target of this.targets()) {
      const targetRoot = this.root(target);
      const state = (await isDirectory(targetRoot)) ? await readReplicaState(targetRoot, backendName) : undefined;
      const inSync = state !== undefined && sourceStat !== undefined && sourceStat.size === state.sourceSize && sourceStat.mtimeMs === state.sourceMtimeMs;
      // The replica lacks only changes made after the replicator last found it equal to the source.
      const since = Math.max(state?.lastSyncAt ?? marker?.enabledAt ?? 0, this.verifiedAt.get(`${target}\0${backendName}`) ?? 0);
      out.push({
        targetBackendId: target,
        lastSyncAt: state?.lastSyncAt ?? null,
        lagMs: inSync ? 0 : Math.max(1, now - since),
        bytesCopied: state?.bytesCopied ?? 0,
        totalBytesCopied: state?.totalBytesCopied ?? 0,
      });
    }
    return out;
  }

  /** After a failback the old target holds exactly the primary: record that, so the next pass starts from equality. */
  async recordInSync(target: string, backendName: string, pool: string): Promise<void> {
    const targetRoot = this.root(target);
    const primaryFile = await stat(join(this.root(PRIMARY_BACKEND_ID), pool, backendName));
    const replicaFile = await stat(join(targetRoot, pool, backendName));
    const previous = await readReplicaState(targetRoot, backendName);
    const key = `${target}\0${backendName}`;
    this.digests.delete(key);
    this.recheck.add(key);
    await writeReplicaState(targetRoot, {
      backendName,
      pool,
      lastSyncAt: this.now(),
      sourceMtimeMs: primaryFile.mtimeMs,
      sourceSize: primaryFile.size,
      replicaMtimeMs: replicaFile.mtimeMs,
      bytesCopied: 0,
      totalBytesCopied: previous?.totalBytesCopied ?? 0,
    });
  }

  /** Forgets what this process knew about a replica (after it was removed). */
  forget(backendName: string): void {
    for (const target of this.targets()) {
      const key = `${target}\0${backendName}`;
      this.digests.delete(key);
      this.recheck.delete(key);
      this.verifiedAt.delete(key);
      this.lastErrors.delete(key);
    }
  }
}

/** One engine per backend host in the process, shared by drivers and the stack's replication loop. */
const engines = new Map<string, LocalReplicationEngine>();

export function replicationEngineFor(config: BackendConfig): LocalReplicationEngine {
  const existing = engines.get(config.host);
  if (existing) {
    replicationDevicesOf(config);
    existing.config = config;
    return existing;
  }
  const engine = new LocalReplicationEngine(config);
  engines.set(config.host, engine);
  return engine;
}

/** Forgets the engines' caches (tests that reuse a backend host on fresh directories). */
export function clearReplicationEngines(): void {
  engines.clear();
}

// ---- the loop the local stack runs ---------------------------------------------------------------

export function replicationIntervalFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env[REPLICATION_INTERVAL_ENV];
  if (raw === undefined || raw === '') return DEFAULT_REPLICATION_INTERVAL_MS;
  const ms = Number(raw);
  if (!Number.isFinite(ms) || ms <= 0) throw new Error(`${REPLICATION_INTERVAL_ENV} must be a positive number of milliseconds, got ${JSON.stringify(raw)}`);
  return ms;
}

export interface ReplicationLoop {
  /** Stops scheduling passes and waits for the running one. */
  stop(): Promise<void>;
}

/** A backend as the loop sees it: its config and its service state (reference §2.3). */
export interface ReplicatedBackend {
  config: BackendConfig;
  activeBackendId: string;
  /** The service's replication_status; when given, only `enabled` (on the primary) replicates. */
  replicationStatus?: string;
}

/** What a loop tick does for a backend (see startReplicationLoop). */
export function replicationDecision(backend: ReplicatedBackend): 'skip' | 'sync' | 'sync-clearing-stale-promotion' {
  const { config, activeBackendId, replicationStatus } = backend;
  if (config.driver !== 'local' || !config.replicationDevices?.length) return 'skip';
  if (activeBackendId !== PRIMARY_BACKEND_ID) return 'skip';
  if (replicationStatus === undefined) return 'sync';
  return replicationStatus === 'enabled' ? 'sync-clearing-stale-promotion' : 'skip';
}

/**
 * Runs a pass for every replicated local backend every `intervalMs`. `backends` is asked on every
 * tick, so backends added, failed over or failed back while the stack runs are followed. The next
 * tick is scheduled only when this one is done: ticks never overlap.
 *
 * The service state is the authority: `failing-over` (a failover or failback in progress, batch by
 * batch), `failed-over` and `failover-error` all stop replication. Once the service is `enabled` on
 * the primary again, a target's leftover promoted marker (a failback with no volume left to bring
 * home, a failover refused after its target was picked) is stale and removed.
 */
export function startReplicationLoop(options: { backends: () => Promise<ReplicatedBackend[]>; intervalMs?: number }): ReplicationLoop {
  const intervalMs = options.intervalMs ?? replicationIntervalFromEnv();
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();
  let listFailure: string | undefined;

  const tick = async () => {
    let backends: ReplicatedBackend[];
    try {
      backends = await options.backends();
      listFailure = undefined;
    } catch (e) {
      if (listFailure !== (e as Error).message) logger.warn('replication: cannot list the backends', { error: e as Error });
      listFailure = (e as Error).message;
      return;
    }
    for (const backend of backends) {
      if (stopped) return;
      const decision = replicationDecision(backend);
      if (decision === 'skip') continue;
      const { config } = backend;
      try {
        const engine = replicationEngineFor(config);
        // A failover, drill or test's syncNow holds the backend: leave it to them this tick.
        if (engine.busy()) continue;
        await engine.syncAll(PRIMARY_BACKEND_ID, { promotionIsStale: decision === 'sync-clearing-stale-promotion' });
      } catch (e) {
        logger.warn('replication pass failed', { host: config.host, error: e as Error });
      }
    }
  };
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = tick().finally(schedule);
    }, intervalMs);
  };
  schedule();
  return {
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
    },
  };
}
