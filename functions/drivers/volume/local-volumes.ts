/**
 * The local volume driver's volumes, connections and snapshots on the ACTIVE site (the replication
 * half is local.ts, which extends this). Layout under the site's root:
 *
 *   <root>/<pool>/<backendName>                          the volume, a sparse file of the volume's size
 *   <root>/<pool>/.snapshots/<backendName>/<snapshot>    a snapshot: a sparse copy of the volume
 *   <root>/.connections/<host>/<backendName>             a host's connection: a symlink to the volume file
 *
 * Keeping volumes per pool makes each pool's capacity real (its volumes' sizes on disk). Names that
 * start with '.' are never volumes or hosts: temp files and the connections tree use them.
 * Like LVM, the backend has no shared targets and any number of hosts may open a volume.
 * Deleting a volume that has snapshots is refused with a DriverError (Cinder refuses at the API).
 */
import { lstat, link, mkdir, open, readlink, rename, rmdir, symlink, truncate, unlink } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { DriverError } from '../../core/errors.js';
import type { BackendConfig, BackendConnection, BackendVolume, ConnectionProperties, Connector, CopyingDriver, CreateVolumeRequest, ImageFillingDriver, PoolCapabilities, SnapshotDriver, VolumeDriver } from './driver.js';
import { isErrno, listVisible as listDir, statOrUndefined, tempName } from '../files.js';
import { GIB, LOCAL_DRIVER_VERSION, checkName, discardTemp, connectionPath, decodeHost, poolUsedGb, rootOf, serialized, sizeGbOf } from './local-layout.js';
import { CONNECTIONS_DIR, PRIMARY_BACKEND_ID, SNAPSHOTS_DIR, replicationDevicesOf, snapshotDirOf } from './local-sites.js';
import { sparseCopyFile, writeStreamToFile } from './sparse-copy.js';

export class LocalVolumeStore implements VolumeDriver, SnapshotDriver, CopyingDriver, ImageFillingDriver {
  readonly backendHost: string;
  /** A file on this machine, opened by its path (connection_info `device_path`). */
  readonly driverVolumeType = 'local';
  /** '' = the primary; else the replication target the backend was failed over to. */
  readonly activeBackendId: string;
  /** The active site's root: every VolumeDriver call reads and writes here. */
  protected readonly root: string;

  constructor(
    protected readonly config: BackendConfig,
    protected readonly options: { activeBackendId?: string } = {},
  ) {
    this.backendHost = config.host;
    replicationDevicesOf(config);
    this.activeBackendId = options.activeBackendId ?? PRIMARY_BACKEND_ID;
    this.root = rootOf(config, this.activeBackendId);
    for (const pool of config.pools) checkName('pool', pool.name, config);
  }

  protected get replicated(): boolean {
    return (this.config.replicationDevices?.length ?? 0) > 0;
  }

  /** The replication_device backend_ids, in configuration order. */
  protected targetIds(): string[] {
    return replicationDevicesOf(this.config).map((d) => d.backend_id);
  }

  protected fail(message: string, context: Record<string, unknown> = {}, cause?: unknown): DriverError {
    return new DriverError(`backend ${this.backendHost}: ${message}`, { cause, context: { host: this.backendHost, ...context } });
  }

  /** Every pool directory on disk, including pools since dropped from the config (their volumes still exist). */
  protected async poolDirs(): Promise<string[]> {
    const onDisk = await listDir(this.root);
    const configured = this.config.pools.map((p) => p.name);
    return [...new Set([...configured, ...onDisk])];
  }

  /** The volume's file, in poolDirs()'s order; the root is listed only when no configured pool has it (every connect comes here). */
  protected async find(backendName: string): Promise<{ pool: string; path: string; sizeGb: number } | undefined> {
    checkName('volume', backendName, this.config);
    const inPools = async (pools: string[]) => {
      for (const pool of pools) {
        const path = join(this.root, pool, backendName);
        const st = await statOrUndefined(path);
        if (st?.isFile()) return { pool, path, sizeGb: sizeGbOf(st.size) };
      }
      return undefined;
    };
    const configured = this.config.pools.map((p) => p.name);
    return (await inPools(configured)) ?? (await inPools((await listDir(this.root)).filter((p) => !configured.includes(p))));
  }

  /** The checks every create makes before touching the disk; the request's pool's configuration. */
  private checkCreate(req: { backendName: string; sizeGb: number; pool: string }) {
    const { backendName, sizeGb, pool } = req;
    checkName('volume', backendName, this.config);
    if (!Number.isInteger(sizeGb) || sizeGb <= 0) throw this.fail(`invalid size ${sizeGb} GiB for ${backendName}`, { backendName, sizeGb });
    const found = this.config.pools.find((p) => p.name === pool);
    if (!found) throw this.fail(`no pool ${pool}`, { pool });
    return found;
  }

  async capabilities(): Promise<PoolCapabilities[]> {
    const out: PoolCapabilities[] = [];
    for (const pool of this.config.pools) {
      const used = await poolUsedGb(this.root, pool.name);
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
        replicationTargets: this.targetIds(),
        replicationCount: this.targetIds().length,
        replicationType: this.replicated ? ['async'] : [],
      });
    }
    return out;
  }

  async createVolume(req: { backendName: string; sizeGb: number; pool: string }): Promise<{ providerLocation: string }> {
    const { backendName, sizeGb, pool } = req;
    const poolConf = this.checkCreate(req);
    return serialized(this.root, async () => {
      const existing = await this.find(backendName);
      if (existing) return this.sameVolume(existing, req);
      const free = poolConf.totalCapacityGb - (await poolUsedGb(this.root, pool));
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
        await discardTemp(temp);
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
    await this.removeVolume(backendName);
  }

  /** Removes a volume with no snapshots (a replicated backend's driver removes its replicas too). */
  protected async removeVolume(backendName: string): Promise<void> {
    await this.deleteFromActiveSite(backendName);
  }

  protected async deleteFromActiveSite(backendName: string): Promise<void> {
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
      const free = (poolConf?.totalCapacityGb ?? 0) - (await poolUsedGb(this.root, existing.pool));
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
        await discardTemp(temp);
        throw this.fail(`cannot connect ${backendName} to ${host}: ${(e as Error).message}`, { backendName, connectorHost: host }, e);
      }
    }
    return {
      driverVolumeType: this.driverVolumeType,
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

  protected async removeConnectionEntry(path: string): Promise<void> {
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

  // ---- Volumes with data (CopyingDriver) -------------------------------------------------------

  async createVolumeFromSnapshot(req: CreateVolumeRequest, source: { volumeBackendName: string; snapshotName: string }): Promise<{ providerLocation: string }> {
    checkName('volume', source.volumeBackendName, this.config);
    checkName('snapshot', source.snapshotName, this.config);
    for (const pool of await this.poolDirs()) {
      const path = join(snapshotDirOf(this.root, pool, source.volumeBackendName), source.snapshotName);
      if ((await statOrUndefined(path))?.isFile()) return this.createFrom(req, path);
    }
    // A re-run after the snapshot went (it cannot while the volume is being created from it) finds its volume made.
    const made = await this.find(req.backendName);
    if (made) return this.sameVolume(made, req);
    throw this.fail(`snapshot ${source.snapshotName} of ${source.volumeBackendName} not found`, { ...source, backendName: req.backendName });
  }

  async cloneVolume(req: CreateVolumeRequest, sourceBackendName: string): Promise<{ providerLocation: string }> {
    const src = await this.find(sourceBackendName);
    if (!src) {
      const made = await this.find(req.backendName);
      if (made) return this.sameVolume(made, req);
      throw this.fail(`source volume ${sourceBackendName} not found`, { sourceBackendName, backendName: req.backendName });
    }
    return this.createFrom(req, src.path);
  }

  async createVolumeFromImage(req: CreateVolumeRequest, openImage: () => Promise<AsyncIterable<Uint8Array>>): Promise<{ providerLocation: string }> {
    return this.createFrom(req, async (temp) => {
      const written = await writeStreamToFile(temp, await openImage(), req.sizeGb * GIB);
      if (written > req.sizeGb * GIB) throw this.fail(`${req.backendName} (${req.sizeGb} GiB) cannot hold its image (${written}+ bytes)`, { backendName: req.backendName });
    });
  }

  /**
   * A sparse copy of `srcPath` grown to the new size, built under a temp name and published with
   * link() as createVolume does: a crash leaves only a temp file, a re-run finds the volume made.
   */
  private async createFrom(req: CreateVolumeRequest, src: string | ((temp: string) => Promise<void>)): Promise<{ providerLocation: string }> {
    const { backendName, sizeGb, pool } = req;
    const poolConf = this.checkCreate(req);
    return serialized(this.root, async () => {
      const existing = await this.find(backendName);
      if (existing) return this.sameVolume(existing, req);
      const srcBytes = typeof src === 'string' ? (await lstat(src)).size : 0;
      if (srcBytes > sizeGb * GIB) throw this.fail(`${backendName} (${sizeGb} GiB) cannot hold its source ${src} (${srcBytes} bytes)`, { backendName, sizeGb, srcBytes });
      const free = poolConf.totalCapacityGb - (await poolUsedGb(this.root, pool));
      if (sizeGb > free) throw this.fail(`pool ${pool} has ${free} GiB free, ${sizeGb} GiB requested for ${backendName}`, { pool, freeGb: free, sizeGb });
      const dir = join(this.root, pool);
      await mkdir(dir, { recursive: true });
      const temp = join(dir, tempName(backendName));
      const path = join(dir, backendName);
      try {
        if (typeof src === 'string') await sparseCopyFile(src, temp);
        else await src(temp);
        await truncate(temp, sizeGb * GIB);
        try {
          await link(temp, path);
        } catch (e) {
          if (!isErrno(e, 'EEXIST')) throw this.fail(`cannot create ${backendName}: ${(e as Error).message}`, { backendName }, e);
          const raced = await this.find(backendName);
          if (!raced) throw this.fail(`cannot create ${backendName}: it appeared and vanished`, { backendName }, e);
          return this.sameVolume(raced, req);
        }
      } catch (e) {
        if (e instanceof DriverError) throw e;
        throw this.fail(`cannot copy ${typeof src === 'string' ? src : 'the image'} to ${backendName}: ${(e as Error).message}`, { backendName }, e);
      } finally {
        await discardTemp(temp);
      }
      return { providerLocation: path };
    });
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
      // The volume's snapshot directory goes with its last snapshot (not empty while others remain).
      await rmdir(dir).catch((e: unknown) => {
        if (!isErrno(e, 'ENOTEMPTY', 'EEXIST', 'ENOENT', 'ENOTDIR')) throw e;
      });
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
}
