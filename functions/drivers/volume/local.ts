/**
 * The local volume driver: real bytes on the local disk, the embedded stack's default and what the
 * tests run. Layout under `config.root`:
 *
 *   <root>/<pool>/<backendName>                  the volume, a sparse file of the volume's size
 *   <root>/.connections/<host>/<backendName>     a host's connection: a symlink to the volume file
 *
 * Keeping volumes per pool makes each pool's capacity real (its volumes' sizes on disk). Names that
 * start with '.' are never volumes or hosts: temp files and the connections tree use them.
 * Like LVM, the backend has no shared targets and any number of hosts may open a volume.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { lstat, link, mkdir, open, readdir, readlink, rename, stat, symlink, truncate, unlink } from 'node:fs/promises';
import { join, relative, dirname } from 'node:path';
import { DriverError } from '../../core/errors.js';
import type {
  BackendConfig,
  BackendConnection,
  BackendVolume,
  ConnectionProperties,
  Connector,
  PoolCapabilities,
  VolumeDriver,
} from './driver.js';

export const GIB = 1024 ** 3;
export const LOCAL_DRIVER_VERSION = '1.0';
const CONNECTIONS_DIR = '.connections';
/** Backend and pool names become file names: no separators, no leading dot, nothing odd. */
const SAFE_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$/;

function rootOf(config: BackendConfig): string {
  if (!config.root) throw new DriverError(`backend ${config.host}: the local driver needs config.root`, { context: { host: config.host } });
  return config.root;
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

/** Where a volume of `pool` lives (whether or not it exists). */
export function poolVolumePath(config: BackendConfig, pool: string, backendName: string): string {
  return join(rootOf(config), pool, backendName);
}

/** The file of an existing volume, found in whichever pool holds it; undefined when there is none. */
export function volumeFilePath(config: BackendConfig, backendName: string): string | undefined {
  for (const pool of config.pools) {
    const path = poolVolumePath(config, pool.name, backendName);
    if (existsSync(path)) return path;
  }
  return undefined;
}

/** The entry a host opens for a connected volume (the `device_path` of its connection). */
export function connectionPath(config: BackendConfig, host: string, backendName: string): string {
  return join(rootOf(config), CONNECTIONS_DIR, encodeHost(host), backendName);
}

const tempName = (name: string) => `.tmp-${name}-${process.pid}-${randomBytes(4).toString('hex')}`;

function isErrno(e: unknown, ...codes: string[]): boolean {
  return typeof e === 'object' && e !== null && codes.includes((e as NodeJS.ErrnoException).code ?? '');
}

async function listDir(path: string): Promise<string[]> {
  try {
    return (await readdir(path)).filter((n) => !n.startsWith('.'));
  } catch (e) {
    if (isErrno(e, 'ENOENT', 'ENOTDIR')) return [];
    throw e;
  }
}

async function statOrUndefined(path: string) {
  try {
    return await stat(path);
  } catch (e) {
    if (isErrno(e, 'ENOENT', 'ENOTDIR')) return undefined;
    throw e;
  }
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

export class LocalVolumeDriver implements VolumeDriver {
  readonly backendHost: string;
  private readonly root: string;

  /** `activeBackendId`: '' for the primary site; a replication target's id after a failover (the replication work reads it). */
  constructor(
    private readonly config: BackendConfig,
    protected readonly options: { activeBackendId?: string } = {},
  ) {
    this.backendHost = config.host;
    this.root = rootOf(config);
    for (const pool of config.pools) checkName('pool', pool.name, config);
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
    const entry = connectionPath(this.config, host, backendName);
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
    await this.removeConnectionEntry(connectionPath(this.config, this.hostOf(connector), backendName));
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
}
