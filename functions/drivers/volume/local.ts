/**
 * The local volume driver: real bytes on the local disk, the embedded stack's default and what the
 * tests run. Layout under `config.root`:
 *
 *   <root>/<pool>/<backendName>                          the volume, a sparse file of the volume's size
 *   <root>/<pool>/.snapshots/<backendName>/<snapshot>    a snapshot: a sparse copy of the volume
 *   <root>/.connections/<host>/<backendName>             a host's connection: a symlink to the volume file
 *
 * Keeping volumes per pool makes each pool's capacity real (its volumes' sizes on disk). Names that
 * start with '.' are never volumes or hosts: temp files and the connections tree use them.
 * Like LVM, the backend has no shared targets and any number of hosts may open a volume.
 *
 * A backend with replication_devices is replicated (local-replication.ts): each device's `root` is a
 * second site with the same layout. The driver reads and writes the ACTIVE site only: the primary
 * `config.root`, or after a failover the target's root (constructor option `activeBackendId`).
 *
 * Decisions beyond upstream's driver contract:
 * - Connections follow the volume: the replicator mirrors each replicated volume's connection
 *   entries to the targets on every pass, and a failover copies the current ones from the old site
 *   when it is still readable; failback makes the primary's entries those of the target. So the
 *   active site's connections always match the attachments recorded in DynamoDB, and a host's
 *   `device_path` after a failover is on the target.
 * - Snapshots: deleting a volume that has snapshots is refused with a DriverError (Cinder refuses at
 *   the API); the replicator mirrors snapshots of replicated volumes, so they survive a failover.
 * - Deleting or un-replicating a volume removes its copies from every other reachable site.
 */
import { existsSync } from 'node:fs';
import { lstat, link, mkdir, open, readlink, rename, rm, rmdir, symlink, truncate, unlink } from 'node:fs/promises';
import { join, relative, dirname } from 'node:path';
import { DriverError } from '../../core/errors.js';
import { logger } from '../../core/logger.js';
import type {
  BackendConfig,
  BackendConnection,
  BackendVolume,
  ConnectionProperties,
  Connector,
  DrillCopy,
  FailoverResult,
  PoolCapabilities,
  ReplicatedVolumeRef,
  ReplicationDriver,
  SnapshotDriver,
  VolumeDriver,
} from './driver.js';
import {
  CONNECTIONS_DIR,
  FAILBACK_SENTINEL,
  FROZEN_MARKER,
  InvalidReplicationTarget,
  PRIMARY_BACKEND_ID,
  PROMOTED_MARKER,
  REPLICATION_DIR,
  SNAPSHOTS_DIR,
  drillCopyPath,
  findVolumeOn,
  hasSiteMarker,
  isDirectory,
  isErrno,
  listVisible as listDir,
  mirrorConnections,
  mirrorSnapshots,
  removeSiteMarker,
  removeVolumeFromSite,
  replicationDevicesOf,
  replicationEngineFor,
  replicationMarkerPath,
  siteRoot,
  snapshotDirOf,
  sparseCopyFile,
  statOrUndefined,
  tempName,
  writeReplicationMarker,
  writeSiteMarker,
  type LocalReplicationEngine,
  type ReplicaStatus,
  type ReplicationPassReport,
} from './local-replication.js';

export { InvalidReplicationTarget } from './local-replication.js';

export const GIB = 1024 ** 3;
export const LOCAL_DRIVER_VERSION = '1.0';
/** Backend and pool names become file names: no separators, no leading dot, nothing odd. */
const SAFE_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$/;

/** The root of the site the backend runs on: the primary's, or a replication target's after a failover. */
function rootOf(config: BackendConfig, activeBackendId = PRIMARY_BACKEND_ID): string {
  return siteRoot(config, activeBackendId);
}

function checkName(what: string, name: string, config: BackendConfig): void {
  if (!SAFE_NAME.test(name)) throw new DriverError(`backend ${config.host}: invalid ${what} name ${JSON.stringify(name)}`, { context: { host: config.host, [what]: name } });
}

/**
 * A host name as one path component, reversibly (listConnections gives back the real host):
 * letters, digits, '_', '-' and inner '.' stay; everything else, and a leading '.', becomes %XX.
 */
export function encodeHost(host: string): string {
  const encoded = Array.from(Buffer.from(host, 'utf8'))
    .map((b, i) => {
      const c = String.fromCharCode(b);
      return /[A-Za-z0-9_-]/.test(c) || (c === '.' && i > 0) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
    })
    .join('');
  return encoded;
}

export function decodeHost(entry: string): string {
  return decodeURIComponent(entry);
}

/** Where a volume of `pool` lives on a site (whether or not it exists). */
export function poolVolumePath(config: BackendConfig, pool: string, backendName: string, activeBackendId = PRIMARY_BACKEND_ID): string {
  return join(rootOf(config, activeBackendId), pool, backendName);
}

/** The file of an existing volume on a site, found in whichever pool holds it; undefined when there is none. */
export function volumeFilePath(config: BackendConfig, backendName: string, activeBackendId = PRIMARY_BACKEND_ID): string | undefined {
  for (const pool of config.pools) {
    const path = poolVolumePath(config, pool.name, backendName, activeBackendId);
    if (existsSync(path)) return path;
  }
  return undefined;
}

/** The entry a host opens for a connected volume (the `device_path` of its connection) on a site. */
export function connectionPath(config: BackendConfig, host: string, backendName: string, activeBackendId = PRIMARY_BACKEND_ID): string {
  return join(rootOf(config, activeBackendId), CONNECTIONS_DIR, encodeHost(host), backendName);
}

/** Where `createSnapshot` keeps a snapshot on a site. */
export function snapshotPath(config: BackendConfig, pool: string, backendName: string, snapshotName: string, activeBackendId = PRIMARY_BACKEND_ID): string {
  return join(snapshotDirOf(rootOf(config, activeBackendId), pool, backendName), snapshotName);
}

const sizeGbOf = (bytes: number) => Math.ceil(bytes / GIB);

/**
 * Capacity is checked then used in two steps; in-process calls on one root are serialized so two
 * creates cannot both take the last free gigabytes.
 */
const rootQueues = new Map<string, Promise<unknown>>();
function serialized<T>(root: string, fn: () => Promise<T>): Promise<T> {
  const previous = rootQueues.get(root) ?? Promise.resolve();
  const run = previous.then(fn, fn);
  const tail = run.catch(() => undefined);
  rootQueues.set(root, tail);
  void tail.then(() => {
    if (rootQueues.get(root) === tail) rootQueues.delete(root);
  });
  return run;
}

export class LocalVolumeDriver implements VolumeDriver, ReplicationDriver, SnapshotDriver {
  readonly backendHost: string;
  /** '' = the primary; else the replication target the backend was failed over to. */
  readonly activeBackendId: string;
  /** The active site's root: every VolumeDriver call reads and writes here. */
  private readonly root: string;

  /**
   * `activeBackendId`: the service's (reference §2.3 "Use at startup"). The driver never switches
   * site by itself: after failoverHost the caller persists the returned id and builds a new driver
   * with it (registry.driverFor), so a retried failover on this instance gives the same answer.
   */
  constructor(
    private readonly config: BackendConfig,
    protected readonly options: { activeBackendId?: string } = {},
  ) {
    this.backendHost = config.host;
    replicationDevicesOf(config);
    this.activeBackendId = options.activeBackendId ?? PRIMARY_BACKEND_ID;
    this.root = rootOf(config, this.activeBackendId);
    for (const pool of config.pools) checkName('pool', pool.name, config);
  }

  private get engine(): LocalReplicationEngine {
    return replicationEngineFor(this.config);
  }

  private get replicated(): boolean {
    return (this.config.replicationDevices?.length ?? 0) > 0;
  }

  private fail(message: string, context: Record<string, unknown> = {}, cause?: unknown): DriverError {
    return new DriverError(`backend ${this.backendHost}: ${message}`, { cause, context: { host: this.backendHost, ...context } });
  }

  /** Every pool directory on disk, including pools since dropped from the config (their volumes still exist). */
  private async poolDirs(): Promise<string[]> {
    const onDisk = await listDir(this.root);
    const configured = this.config.pools.map((p) => p.name);
    return [...new Set([...configured, ...onDisk])];
  }

  private async find(backendName: string): Promise<{ pool: string; path: string; sizeGb: number } | undefined> {
    checkName('volume', backendName, this.config);
    for (const pool of await this.poolDirs()) {
      const path = join(this.root, pool, backendName);
      const st = await statOrUndefined(path);
      if (st?.isFile()) return { pool, path, sizeGb: sizeGbOf(st.size) };
    }
    return undefined;
  }

  private async usedGb(pool: string): Promise<number> {
    let used = 0;
    for (const name of await listDir(join(this.root, pool))) {
      const st = await statOrUndefined(join(this.root, pool, name));
      if (st?.isFile()) used += sizeGbOf(st.size);
    }
    return used;
  }

  private poolConfig(pool: string) {
    const found = this.config.pools.find((p) => p.name === pool);
    if (!found) throw this.fail(`no pool ${pool}`, { pool });
    return found;
  }

  async capabilities(): Promise<PoolCapabilities[]> {
    const out: PoolCapabilities[] = [];
    for (const pool of this.config.pools) {
      const used = await this.usedGb(pool.name);
      out.push({
        pool: pool.name,
        totalCapacityGb: pool.totalCapacityGb,
        freeCapacityGb: Math.max(0, pool.totalCapacityGb - used),
        multiattach: true,
        sharedTargets: false,
        storageProtocol: 'local',
        volumeBackendName: this.config.volumeBackendName,
        driverVersion: LOCAL_DRIVER_VERSION,
        vendorName: 'Ferry',
        replicationEnabled: this.replicated,
        replicationTargets: this.replicationTargets(),
        replicationCount: this.replicationTargets().length,
        replicationType: this.replicated ? ['async'] : [],
      });
    }
    return out;
  }

  async createVolume(req: { backendName: string; sizeGb: number; pool: string }): Promise<{ providerLocation: string }> {
    const { backendName, sizeGb, pool } = req;
    checkName('volume', backendName, this.config);
    if (!Number.isInteger(sizeGb) || sizeGb <= 0) throw this.fail(`invalid size ${sizeGb} GiB for ${backendName}`, { backendName, sizeGb });
    const poolConf = this.poolConfig(pool);
    return serialized(this.root, async () => {
      const existing = await this.find(backendName);
      if (existing) return this.sameVolume(existing, req);
      const free = poolConf.totalCapacityGb - (await this.usedGb(pool));
      if (sizeGb > free) throw this.fail(`pool ${pool} has ${free} GiB free, ${sizeGb} GiB requested for ${backendName}`, { pool, freeGb: free, sizeGb });

      const dir = join(this.root, pool);
      await mkdir(dir, { recursive: true });
      const temp = join(dir, tempName(backendName));
      const path = join(dir, backendName);
      // Build under a temp name, then publish with link(): it never replaces an existing file, so a
      // volume made meanwhile by another process keeps its bytes, and a crash leaves only a temp file.
      const handle = await open(temp, 'wx');
      try {
        await handle.truncate(sizeGb * GIB);
      } finally {
        await handle.close();
      }
      try {
        await link(temp, path);
      } catch (e) {
        if (!isErrno(e, 'EEXIST')) throw this.fail(`cannot create ${backendName}: ${(e as Error).message}`, { backendName }, e);
        const raced = await this.find(backendName);
        if (!raced) throw this.fail(`cannot create ${backendName}: it appeared and vanished`, { backendName }, e);
        return this.sameVolume(raced, req);
      } finally {
        await unlink(temp).catch(() => undefined);
      }
      return { providerLocation: path };
    });
  }

  private sameVolume(existing: { pool: string; path: string; sizeGb: number }, req: { backendName: string; sizeGb: number; pool: string }) {
    if (existing.sizeGb !== req.sizeGb || existing.pool !== req.pool) {
      throw this.fail(`volume ${req.backendName} already exists with ${existing.sizeGb} GiB in pool ${existing.pool}`, {
        backendName: req.backendName,
        existingSizeGb: existing.sizeGb,
        existingPool: existing.pool,
      });
    }
    return { providerLocation: existing.path };
  }

  async deleteVolume(backendName: string): Promise<void> {
    checkName('volume', backendName, this.config);
    // Cinder's API refuses a volume with snapshots; the driver refuses too rather than orphan them.
    const snapshots = (await this.listSnapshots()).filter((s) => s.backendName === backendName).map((s) => s.snapshotName);
    if (snapshots.length > 0) {
      throw this.fail(`volume ${backendName} still has ${snapshots.length} snapshot(s) (${snapshots.join(', ')}); delete them first`, { backendName, snapshots });
    }
    if (!this.replicated) return this.deleteFromActiveSite(backendName);
    // Replicas go first and the registration marker last, so a retry after a crash finds the volume
    // still registered; inside `exclusive` so no pass recreates a replica meanwhile.
    await this.engine.exclusive(async () => {
      await this.removeFromOtherSites(backendName);
      await this.deleteFromActiveSite(backendName);
      await unlink(replicationMarkerPath(this.root, backendName)).catch((e: unknown) => {
        if (!isErrno(e, 'ENOENT', 'ENOTDIR')) throw e;
      });
    });
  }

  /** Every site but the active one: the targets' replicas, or after a failover the stale primary copy too. */
  private async removeFromOtherSites(backendName: string): Promise<void> {
    for (const id of [PRIMARY_BACKEND_ID, ...this.replicationTargets()]) {
      if (id === this.activeBackendId) continue;
      await removeVolumeFromSite(siteRoot(this.config, id), this.config, backendName);
      await rm(drillCopyPath(siteRoot(this.config, id), backendName), { force: true });
    }
    this.engine.forget(backendName);
  }

  private async deleteFromActiveSite(backendName: string): Promise<void> {
    // Connections first: a crash in between leaves a volume without connections, which a retry
    // deletes, never a connection pointing at nothing.
    for (const host of await listDir(join(this.root, CONNECTIONS_DIR))) {
      await this.removeConnectionEntry(join(this.root, CONNECTIONS_DIR, host, backendName));
    }
    for (const pool of await this.poolDirs()) {
      try {
        await unlink(join(this.root, pool, backendName));
      } catch (e) {
        if (!isErrno(e, 'ENOENT')) throw this.fail(`cannot delete ${backendName}: ${(e as Error).message}`, { backendName }, e);
      }
    }
  }

  async extendVolume(backendName: string, newSizeGb: number): Promise<void> {
    if (!Number.isInteger(newSizeGb) || newSizeGb <= 0) throw this.fail(`invalid size ${newSizeGb} GiB for ${backendName}`, { backendName, newSizeGb });
    await serialized(this.root, async () => {
      const existing = await this.find(backendName);
      if (!existing) throw this.fail(`volume ${backendName} not found`, { backendName });
      if (newSizeGb === existing.sizeGb) return;
      if (newSizeGb < existing.sizeGb) throw this.fail(`cannot shrink ${backendName} from ${existing.sizeGb} GiB to ${newSizeGb} GiB`, { backendName, sizeGb: existing.sizeGb, newSizeGb });
      const poolConf = this.config.pools.find((p) => p.name === existing.pool);
      const free = (poolConf?.totalCapacityGb ?? 0) - (await this.usedGb(existing.pool));
      const growth = newSizeGb - existing.sizeGb;
      if (growth > free) throw this.fail(`pool ${existing.pool} has ${free} GiB free, ${backendName} needs ${growth} GiB more`, { pool: existing.pool, freeGb: free, growth });
      // Truncating a file up is a single metadata change: the volume is either old or new size.
      await truncate(existing.path, newSizeGb * GIB);
    });
  }

  async initializeConnection(backendName: string, connector: Connector): Promise<ConnectionProperties> {
    const host = this.hostOf(connector);
    const volume = await this.find(backendName);
    if (!volume) throw this.fail(`volume ${backendName} not found`, { backendName, connectorHost: host });
    const entry = connectionPath(this.config, host, backendName, this.activeBackendId);
    // Relative, so the whole root can be moved without breaking connections.
    const target = relative(dirname(entry), volume.path);
    const current = await readlink(entry).catch((e: unknown) => {
      if (isErrno(e, 'ENOENT')) return undefined;
      throw e;
    });
    if (current !== target) {
      await mkdir(dirname(entry), { recursive: true });
      // Symlink under a temp name, then rename over the entry: the entry is always whole.
      const temp = join(dirname(entry), tempName(backendName));
      await symlink(target, temp);
      try {
        await rename(temp, entry);
      } catch (e) {
        await unlink(temp).catch(() => undefined);
        throw this.fail(`cannot connect ${backendName} to ${host}: ${(e as Error).message}`, { backendName, connectorHost: host }, e);
      }
    }
    return {
      driverVolumeType: 'local',
      data: { device_path: entry, volume_path: volume.path, backend_name: backendName, target_lun: 0, host },
    };
  }

  async terminateConnection(backendName: string, connector: Connector): Promise<void> {
    checkName('volume', backendName, this.config);
    await this.removeConnectionEntry(connectionPath(this.config, this.hostOf(connector), backendName, this.activeBackendId));
  }

  private hostOf(connector: Connector): string {
    if (!connector || typeof connector.host !== 'string' || connector.host === '') throw this.fail('connector has no host', { connector });
    return connector.host;
  }

  private async removeConnectionEntry(path: string): Promise<void> {
    try {
      const st = await lstat(path);
      if (!st.isSymbolicLink()) throw this.fail(`${path} is not a connection entry`, { path });
      await unlink(path);
    } catch (e) {
      if (isErrno(e, 'ENOENT')) return;
      throw e;
    }
  }

  async listVolumes(): Promise<BackendVolume[]> {
    const out: BackendVolume[] = [];
    for (const pool of await this.poolDirs()) {
      for (const name of await listDir(join(this.root, pool))) {
        const st = await statOrUndefined(join(this.root, pool, name));
        if (st?.isFile()) out.push({ backendName: name, sizeGb: sizeGbOf(st.size) });
      }
    }
    return out;
  }

  async listConnections(): Promise<BackendConnection[]> {
    const out: BackendConnection[] = [];
    const base = join(this.root, CONNECTIONS_DIR);
    for (const hostEntry of await listDir(base)) {
      const host = decodeHost(hostEntry);
      for (const backendName of await listDir(join(base, hostEntry))) out.push({ backendName, host });
    }
    return out;
  }

  async getVolume(backendName: string): Promise<BackendVolume | undefined> {
    const found = await this.find(backendName);
    return found && { backendName, sizeGb: found.sizeGb };
  }

  // ---- Snapshots ------------------------------------------------------------------------------

  /** A sparse copy of the volume, published whole (temp + rename); an existing snapshot of that name is kept. */
  async createSnapshot(backendName: string, snapshotName: string): Promise<void> {
    checkName('snapshot', snapshotName, this.config);
    const volume = await this.find(backendName);
    if (!volume) throw this.fail(`volume ${backendName} not found`, { backendName, snapshotName });
    const path = join(snapshotDirOf(this.root, volume.pool, backendName), snapshotName);
    if (await statOrUndefined(path)) return;
    try {
      await sparseCopyFile(volume.path, path);
    } catch (e) {
      throw this.fail(`cannot snapshot ${backendName} as ${snapshotName}: ${(e as Error).message}`, { backendName, snapshotName }, e);
    }
  }

  async deleteSnapshot(backendName: string, snapshotName: string): Promise<void> {
    checkName('volume', backendName, this.config);
    checkName('snapshot', snapshotName, this.config);
    for (const pool of await this.poolDirs()) {
      const dir = snapshotDirOf(this.root, pool, backendName);
      try {
        await unlink(join(dir, snapshotName));
      } catch (e) {
        if (!isErrno(e, 'ENOENT', 'ENOTDIR')) throw this.fail(`cannot delete snapshot ${snapshotName} of ${backendName}: ${(e as Error).message}`, { backendName, snapshotName }, e);
      }
      // The volume's snapshot directory goes with its last snapshot (fails harmlessly while others remain).
      await rmdir(dir).catch(() => undefined);
    }
  }

  async listSnapshots(): Promise<{ backendName: string; snapshotName: string }[]> {
    const out: { backendName: string; snapshotName: string }[] = [];
    for (const pool of await this.poolDirs()) {
      const base = join(this.root, pool, SNAPSHOTS_DIR);
      for (const backendName of await listDir(base)) {
        for (const snapshotName of await listDir(join(base, backendName))) out.push({ backendName, snapshotName });
      }
    }
    return out;
  }

  // ---- Replication v2.1 -----------------------------------------------------------------------

  replicationTargets(): string[] {
    return replicationDevicesOf(this.config).map((d) => d.backend_id);
  }

  private checkTarget(backendId: string): string {
    const targets = this.replicationTargets();
    if (!targets.includes(backendId)) {
      const known = targets.length ? `one of ${targets.join(', ')}` : 'none: the backend has no replication_device';
      throw new InvalidReplicationTarget(`${backendId} is not a replication target of ${this.backendHost} (expected ${known}).`, { host: this.backendHost, backendId });
    }
    return siteRoot(this.config, backendId);
  }

  /**
   * Registers the volume for replication (a marker on the active site) and, while on the primary,
   * copies it in full to every target before returning: a replica exists once this succeeds.
   * While failed over it only registers the volume; failback copies it to the primary.
   */
  async enableReplication(backendName: string): Promise<void> {
    if (!this.replicated) throw this.fail('the backend has no replication_device: volumes cannot be replicated', { backendName });
    await this.engine.exclusive(async () => {
      if (!(await this.find(backendName))) throw this.fail(`volume ${backendName} not found`, { backendName });
      await writeReplicationMarker(this.root, backendName, Date.now());
      if (this.activeBackendId !== PRIMARY_BACKEND_ID) return;
      for (const target of this.replicationTargets()) {
        try {
          await this.engine.syncVolumeTo(backendName, target);
        } catch (e) {
          throw this.fail(`cannot make the initial copy of ${backendName} on ${target}: ${(e as Error).message}`, { backendName, target }, e);
        }
      }
    });
  }

  async disableReplication(backendName: string): Promise<void> {
    checkName('volume', backendName, this.config);
    if (!this.replicated) return;
    await this.engine.exclusive(async () => {
      await this.removeFromOtherSites(backendName);
      await unlink(replicationMarkerPath(this.root, backendName)).catch((e: unknown) => {
        if (!isErrno(e, 'ENOENT', 'ENOTDIR')) throw e;
      });
    });
  }

  /** Per target: last completed sync, lag, bytes the last sync wrote (measured against the primary). */
  async replicationStatus(backendName: string): Promise<ReplicaStatus[]> {
    checkName('volume', backendName, this.config);
    return this.replicated ? this.engine.status(backendName) : [];
  }

  /** Runs a replication pass now (after any running one); what the stack's loop does every interval. */
  async syncNow(): Promise<ReplicationPassReport> {
    if (!this.replicated) return { volumes: 0, bytesCopied: 0, errors: [], skipped: 'not replicated' };
    return this.engine.syncAll(this.activeBackendId);
  }

  /**
   * Upstream failover_host (reference §2.4). To a target: promotes it (no pass writes into it any
   * more) and reports each volume it holds a replica of as failed-over at its path there; a volume
   * without a replica gets `{status: 'error'}`. Nothing is read from the old site's volumes (it may
   * be a smoking hole): the target holds each volume as of its last completed sync.
   * `'default'`: fails back (see failBack).
   */
  async failoverHost(volumes: ReplicatedVolumeRef[], secondaryId: string | null): Promise<FailoverResult> {
    for (const v of volumes) checkName('volume', v.backendName, this.config);
    if (secondaryId === FAILBACK_SENTINEL) {
      if (this.activeBackendId === PRIMARY_BACKEND_ID) {
        throw new InvalidReplicationTarget(`${this.backendHost} is not failed over; there is nothing to fail back from.`, { host: this.backendHost });
      }
      return this.engine.exclusive(() => this.failBack(volumes));
    }
    // null: the first target. Always the first, not "the first but the current one", so that a
    // retried failover_host(null) lands where the first try did.
    const target = secondaryId ?? this.replicationTargets()[0];
    const targetRoot = this.checkTarget(target ?? '');
    return this.engine.exclusive(() => this.failOverTo(target, targetRoot, volumes));
  }

  private async failOverTo(target: string, targetRoot: string, volumes: ReplicatedVolumeRef[]): Promise<FailoverResult> {
    if (!(await isDirectory(targetRoot))) {
      throw this.fail(`Unable to failover to replication target: ${target} is unreachable (${targetRoot} is not a directory).`, { target });
    }
    const wasPromoted = await hasSiteMarker(targetRoot, PROMOTED_MARKER);
    // Promote first: from here no replication pass writes into the target, in any driver instance.
    await writeSiteMarker(targetRoot, PROMOTED_MARKER, { from: this.activeBackendId, at: Date.now() });
    try {
      // Connections: the old site's entries are the current ones when it is still readable; after a
      // smoking hole the target keeps those the replicator mirrored on its last pass.
      const oldRoot = this.root;
      const oldSiteReadable = target !== this.activeBackendId && (await isDirectory(oldRoot));
      const volumeUpdates: FailoverResult['volumeUpdates'] = [];
      for (const v of volumes) {
        const replica = await findVolumeOn(targetRoot, this.config, v.backendName);
        if (!replica) {
          volumeUpdates.push({ volumeId: v.volumeId, updates: { status: 'error' } });
          continue;
        }
        await writeReplicationMarker(targetRoot, v.backendName, Date.now());
        if (oldSiteReadable) await mirrorConnections(oldRoot, targetRoot, v.backendName, replica.pool);
        volumeUpdates.push({ volumeId: v.volumeId, updates: { replicationStatus: 'failed-over', providerLocation: replica.path } });
      }
      return { activeBackendId: target, volumeUpdates };
    } catch (e) {
      // Upstream: on an unrecoverable error, raise and stay on the previous backend.
      if (!wasPromoted) await removeSiteMarker(targetRoot, PROMOTED_MARKER).catch(() => undefined);
      throw this.fail(`Unable to failover to replication target: ${(e as Error).message}`, { target }, e);
    }
  }

  /**
   * Failback to the primary: every volume is brought back from the active target by a full chunk
   * comparison (the primary, even its root, is recreated where it was lost), with its connections
   * and snapshots; then no target is promoted any more and replication resumes from the primary.
   * A volume that cannot be brought back gets `{status: 'error'}` (the manager makes it failover-error).
   */
  private async failBack(volumes: ReplicatedVolumeRef[]): Promise<FailoverResult> {
    const from = this.activeBackendId;
    const fromRoot = this.root;
    if (!(await isDirectory(fromRoot))) throw this.fail(`Unable to fail back: the active site ${from} is unreachable (${fromRoot} is not a directory).`, { from });
    const primary = siteRoot(this.config, PRIMARY_BACKEND_ID);
    await mkdir(primary, { recursive: true });
    const volumeUpdates: FailoverResult['volumeUpdates'] = [];
    for (const v of volumes) {
      const source = await findVolumeOn(fromRoot, this.config, v.backendName);
      if (!source) {
        volumeUpdates.push({ volumeId: v.volumeId, updates: { status: 'error' } });
        continue;
      }
      try {
        const dst = join(primary, source.pool, v.backendName);
        const src = await open(source.path, 'r');
        try {
          const { size, blocks } = await src.stat();
          await this.engine.copyChangedChunks(src, size, dst, undefined, blocks);
        } finally {
          await src.close();
        }
        await mirrorConnections(fromRoot, primary, v.backendName, source.pool);
        await mirrorSnapshots(fromRoot, primary, v.backendName, source.pool);
        await writeReplicationMarker(primary, v.backendName, Date.now());
        await this.engine.recordInSync(from, v.backendName, source.pool);
        volumeUpdates.push({ volumeId: v.volumeId, updates: { replicationStatus: 'enabled', providerLocation: dst } });
      } catch (e) {
        logger.error('failback of a volume failed', { host: this.backendHost, backendName: v.backendName, error: e as Error });
        volumeUpdates.push({ volumeId: v.volumeId, updates: { status: 'error' } });
      }
    }
    // The targets are replicas again: the next pass (once the service is back on '') replicates.
    await this.engine.clearPromotion();
    await rm(join(fromRoot, REPLICATION_DIR), { recursive: true, force: true });
    return { activeBackendId: PRIMARY_BACKEND_ID, volumeUpdates };
  }

  /** Freeze has nothing to stop on a local backend: a marker on the active site records it. */
  async freezeBackend(): Promise<void> {
    await writeSiteMarker(this.root, FROZEN_MARKER, { at: Date.now() });
  }

  async thawBackend(): Promise<void> {
    await removeSiteMarker(this.root, FROZEN_MARKER);
  }

  async isFrozen(): Promise<boolean> {
    return hasSiteMarker(this.root, FROZEN_MARKER);
  }

  /**
   * Beyond upstream: each volume's replica on the target is copied (reflink, else sparse) to
   * `<target>/.drill/<backendName>`, as the replica is now; the primary and the replicas stay as
   * they are. A volume with no replica on the target is left out of the answer (and logged).
   */
  async startDrill(volumes: ReplicatedVolumeRef[], targetBackendId: string): Promise<DrillCopy[]> {
    for (const v of volumes) checkName('volume', v.backendName, this.config);
    const targetRoot = this.checkTarget(targetBackendId);
    if (targetBackendId === this.activeBackendId) {
      throw new InvalidReplicationTarget(`${targetBackendId} is the active site of ${this.backendHost}, not a replica to drill on.`, { host: this.backendHost, targetBackendId });
    }
    return this.engine.exclusive(async () => {
      const copies: DrillCopy[] = [];
      for (const v of volumes) {
        const replica = await findVolumeOn(targetRoot, this.config, v.backendName);
        if (!replica) {
          logger.warn('drill: no replica on the target', { host: this.backendHost, backendName: v.backendName, targetBackendId });
          continue;
        }
        const location = drillCopyPath(targetRoot, v.backendName);
        // A retried startDrill keeps the copy it made (a drill may already be using it).
        if (!(await statOrUndefined(location))) await sparseCopyFile(replica.path, location);
        copies.push({ volumeId: v.volumeId, backendName: v.backendName, targetBackendId, location });
      }
      return copies;
    });
  }

  /** Removes the drill copies; the path is recomputed from the target and name, never taken from `location`. */
  async endDrill(copies: DrillCopy[]): Promise<void> {
    for (const c of copies) {
      checkName('volume', c.backendName, this.config);
      await rm(drillCopyPath(this.checkTarget(c.targetBackendId), c.backendName), { force: true });
    }
  }
}
