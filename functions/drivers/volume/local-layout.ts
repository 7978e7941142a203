/**
 * Where the local volume driver keeps things on a site (a directory; local-sites.ts has the
 * replication-only parts of the layout), and the name checks that keep every name one path component.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { DriverError } from '../../core/errors.js';
import { logger } from '../../core/logger.js';
import { listVisible, statOrUndefined, unlinkIfPresent } from '../files.js';
import type { BackendConfig } from './driver.js';
import { CONNECTIONS_DIR, PRIMARY_BACKEND_ID, siteRoot, snapshotDirOf } from './local-sites.js';

export const GIB = 1024 ** 3;
export const LOCAL_DRIVER_VERSION = '1.0';
/** Backend and pool names become file names: no separators, no leading dot, nothing odd. */
const SAFE_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$/;

/** The root of the site the backend runs on: the primary's, or a replication target's after a failover. */
export function rootOf(config: BackendConfig, activeBackendId = PRIMARY_BACKEND_ID): string {
  return siteRoot(config, activeBackendId);
}

/** GiB held by the volume files of a pool's directory (their sizes on disk: the pool's real use). */
export async function poolUsedGb(root: string, pool: string): Promise<number> {
  let used = 0;
  for (const name of await listVisible(join(root, pool))) {
    const st = await statOrUndefined(join(root, pool, name));
    if (st?.isFile()) used += sizeGbOf(st.size);
  }
  return used;
}

export function checkName(what: string, name: string, config: BackendConfig): void {
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

export const sizeGbOf = (bytes: number) => Math.ceil(bytes / GIB);

/**
 * Capacity is checked then used in two steps; in-process calls on one root are serialized so two
 * creates cannot both take the last free gigabytes.
 */
const settled = (): void => undefined;

const rootQueues = new Map<string, Promise<unknown>>();
export function serialized<T>(root: string, fn: () => Promise<T>): Promise<T> {
  const previous = rootQueues.get(root) ?? Promise.resolve();
  const run = previous.then(fn, fn);
  // The queue only orders the calls: each caller awaits its own `run` and gets its error there.
  const tail = run.then(settled, settled);
  rootQueues.set(root, tail);
  void tail.then(() => {
    if (rootQueues.get(root) === tail) rootQueues.delete(root);
  });
  return run;
}

/**
 * Removes a temp file a failed or finished publish left. A temp file that cannot be removed is
 * harmless (names starting with '.' are never volumes) but is logged, so an operator can find it.
 */
export async function discardTemp(path: string): Promise<void> {
  try {
    await unlinkIfPresent(path);
  } catch (e) {
    logger.warn('could not remove a temp file of the local volume driver; it is left behind', { path, error: e as Error });
  }
}
