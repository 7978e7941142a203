/**
 * The replication engine of the local volume driver: asynchronous, a pass compares each replicated
 * volume with its replica chunk by chunk and writes only the chunks that differ (sites and layout:
 * local-sites.ts). The local stack runs passes on an interval (infra/local/replicator.ts); the
 * driver runs one for enableReplication's initial copy and for failback.
 *
 * Direction: replication only runs while the primary is active. After a failover nothing is
 * replicated (the primary is presumed lost); failback copies every volume back from the target in
 * one full comparison, after which the targets are replicas again.
 */
import { constants } from 'node:fs';
import { mkdir, open, stat, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { DriverError } from '../../core/errors.js';
import { logger } from '../../core/logger.js';
import type { BackendConfig } from './driver.js';
import { LagTally, type BackendLag } from './replication-lag.js';
import { isDirectory, listVisible, readChunk, readJson, statOrUndefined, writeFully } from '../files.js';
import {
  PRIMARY_BACKEND_ID,
  PROMOTED_MARKER,
  REPLICATION_DIR,
  findVolumeOn,
  hasSiteMarker,
  mirrorConnections,
  mirrorSnapshots,
  readReplicaState,
  removeSiteMarker,
  replicationDevicesOf,
  readReplicationMarker,
  siteRoot,
  writeReplicaState,
  type ReplicaState,
} from './local-sites.js';
import { REPLICATION_CHUNK_BYTES, ZERO_DIGEST, chunkDigest } from './sparse-copy.js';
import { chunksHoldingData, dataExtentsOfOpen } from '../sparse.js';

/**
 * A source whose mtime is this close to the sync's start may be written again within the same
 * timestamp tick, unseen by the size+mtime check: such a volume is compared again on the next pass.
 */
const MTIME_SETTLE_MS = 50;

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
  /** Bytes the pass read from sources and replicas (holes are never read). */
  bytesRead: number;
  errors: { backendName: string; targetBackendId: string; message: string }[];
  /** Per target, over the volumes this pass synced (absent when skipped). */
  lag?: BackendLag;
}

interface DigestCache {
  ino: number;
  size: number;
  mtimeMs: number;
  digests: string[];
}

/** One queue per backend host in this process: passes, failovers, drills and deletes never overlap. */
const settled = (): void => undefined;

const hostQueues = new Map<string, { tail: Promise<unknown>; depth: number }>();

function exclusiveFor<T>(host: string, fn: () => Promise<T>): Promise<T> {
  const queue = hostQueues.get(host) ?? { tail: Promise.resolve(), depth: 0 };
  hostQueues.set(host, queue);
  queue.depth += 1;
  const run = queue.tail.then(fn, fn);
  // The queue only orders the operations: each caller awaits its own `run` and gets its error there.
  queue.tail = run
    .then(settled, settled)
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
  /** Bytes read by chunk comparisons since the engine was made (a pass reports its share). */
  private bytesRead = 0;

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
      const report: ReplicationPassReport = { volumes: 0, bytesCopied: 0, bytesRead: 0, errors: [] };
      const readBefore = this.bytesRead;
      if (activeBackendId !== PRIMARY_BACKEND_ID) return { ...report, skipped: `failed over to ${activeBackendId}` };
      if (options.promotionIsStale) await this.clearPromotion();
      const promoted = await this.promotedTarget();
      if (promoted) return { ...report, skipped: `failed over to ${promoted}` };
      const primary = this.root(PRIMARY_BACKEND_ID);
      const tally = new LagTally(this.targets());
      for (const backendName of await listVisible(join(primary, REPLICATION_DIR))) {
        report.volumes += 1;
        for (const target of this.targets()) {
          const key = `${target}\0${backendName}`;
          const syncStart = this.now();
          try {
            report.bytesCopied += await this.syncVolumeTo(backendName, target);
            this.lastErrors.delete(key);
            // The replica now holds the source as of the sync's start.
            tally.add(target, this.now() - syncStart);
          } catch (e) {
            // Counted as no replica: the figure never promises a failover more than this pass saw.
            tally.add(target, null);
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
      return { ...report, bytesRead: this.bytesRead - readBefore, lag: tally.summary(this.now()) };
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
        copied = await this.syncChanged(src, before, replicaPath, targetRoot, { key, backendName, pool: source.pool, startedAt, previous: state, sourcePath: source.path });
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
    info: { key: string; backendName: string; pool: string; startedAt: number; previous: ReplicaState | undefined; sourcePath: string },
  ): Promise<number> {
    const { key, startedAt } = info;
    const copied = await this.copyChangedChunks(src, before.size, replicaPath, key, before.blocks, info.sourcePath);
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
  async copyChangedChunks(src: FileHandle, size: number, dstPath: string, cacheKey?: string, srcBlocks?: number, srcPath?: string): Promise<number> {
    // Reading a hole still costs the kernel a zeroed page per 4 KiB (about 1 s per cold GiB): a
    // large source with no block allocated is known to be all zeros unread, and with its path the
    // source's chunks outside its data extents (SEEK_DATA/SEEK_HOLE) are too.
    const sourceAllHoles = srcBlocks === 0 && size >= this.chunkBytes;
    const dataChunks = sourceAllHoles || srcPath === undefined ? undefined : chunksHoldingData(await dataExtentsOfOpen(src, srcPath, size), this.chunkBytes);
    await mkdir(dirname(dstPath), { recursive: true });
    const dstStat = await statOrUndefined(dstPath);
    const cached = cacheKey ? this.digests.get(cacheKey) : undefined;
    const cacheValid = cached && dstStat && cached.ino === dstStat.ino && cached.size === dstStat.size && cached.mtimeMs === dstStat.mtimeMs;
    const oldSize = dstStat?.size ?? 0;
    let digests = cacheValid ? cached.digests : [];
    if (size < oldSize) digests = [];
    const dst = await open(dstPath, constants.O_RDWR | constants.O_CREAT);
    try {
      // Without cached digests the replica's chunks are read to compare, but only where it holds data.
      const dstDataChunks = cacheValid || oldSize === 0 ? undefined : chunksHoldingData(await dataExtentsOfOpen(dst, dstPath, oldSize), this.chunkBytes);
      if (oldSize !== size) await dst.truncate(size);
      const srcBuf = Buffer.alloc(this.chunkBytes);
      const dstBuf = Buffer.alloc(this.chunkBytes);
      const zeros = Buffer.alloc(this.chunkBytes);
      let copied = 0;
      for (let i = 0, off = 0; off < size; i++, off += this.chunkBytes) {
        const len = Math.min(this.chunkBytes, size - off);
        const holes = sourceAllHoles || (dataChunks !== undefined && !dataChunks.has(i));
        const chunk = holes ? zeros.subarray(0, len) : await this.read(src, srcBuf, len, off);
        const want = holes ? ZERO_DIGEST : chunkDigest(chunk, zeros);
        // Past the replica's old end there is only the hole truncate just made.
        const have = digests[i] ?? (off >= oldSize || (dstDataChunks !== undefined && !dstDataChunks.has(i)) ? ZERO_DIGEST : chunkDigest(await this.read(dst, dstBuf, len, off), zeros));
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

  private async read(fh: FileHandle, buf: Buffer, len: number, off: number): Promise<Buffer> {
    this.bytesRead += len;
    return readChunk(fh, buf, len, off);
  }

  /** Per target: when the replica was last synced, how far behind it is, what the last sync wrote. */
  async status(backendName: string): Promise<ReplicaStatus[]> {
    const primary = this.root(PRIMARY_BACKEND_ID);
    const source = await findVolumeOn(primary, this.config, backendName);
    const sourceStat = source ? await statOrUndefined(source.path) : undefined;
    const marker = await readReplicationMarker(primary, backendName);
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
