/**
 * The on-disk layout of the local compute driver (docs/compute-driver.md): a compute host is the
 * directory `<root>/<host>`, and every host of one root sees the others' directories (one root is
 * one shared storage domain). The records it keeps there are typed here.
 *
 *   <root>/<host>/host.json                        configured capacity (written from the config)
 *   <root>/<host>/down                             flag file: the host is down
 *   <root>/<host>/guests/<uuid>/disk               the root disk, a sparse file (absent when volume-backed)
 *   <root>/<host>/guests/<uuid>/state.json         definition, power state, flavor, volumes by mountpoint
 *   <root>/<host>/incoming/<uuid>/{disk,migration.json}   a migration arriving (before finish/switch-over)
 *   <root>/<host>/connections/<key>.json           a host-level volume connection -> the export's device_path
 */
import { join, resolve } from 'node:path';
import { DriverError } from '../../../core/errors.js';
import type { AttachedVolume, Flavor, GuestMigration, PowerState } from '../driver.js';
import { statOrUndefined, unlinkIfPresent, writeJsonAtomic } from './files.js';

export const GIB = 1024 ** 3;
export const LOCAL_COMPUTE_DRIVER_VERSION = '1.0';
export const HYPERVISOR_TYPE = 'ferry-local';
/** The only connection type the local driver opens: the local volume driver's. */
export const LOCAL_VOLUME_TYPE = 'local';

export const HOST_FILE = 'host.json';
export const DOWN_FLAG = 'down';
export const GUESTS_DIR = 'guests';
export const INCOMING_DIR = 'incoming';
export const CONNECTIONS_DIR = 'connections';
export const SNAPSHOTS_DIR = 'snapshots';
export const DISK_FILE = 'disk';
export const STATE_FILE = 'state.json';
export const MIGRATION_FILE = 'migration.json';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HOST_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$/;
export const IMAGE_ID = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$/;
export const MOUNTPOINT = /^\/dev\/[a-z][a-z0-9]{1,15}$/;

/** A guest's state.json. */
export interface GuestState {
  version: 1;
  uuid: string;
  defined: boolean;
  powerState: PowerState;
  flavor: Flavor;
  imageRef?: string;
  rootDisk: 'local' | 'volume';
  volumes: AttachedVolume[];
  bootCount: number;
  migration?: GuestMigration;
  evacuatedFrom?: string;
}

/** An incoming migration's migration.json (destination side, before the guest is defined here). */
export interface IncomingMigration {
  version: 1;
  uuid: string;
  kind: 'resize' | 'live';
  source: string;
  rootDisk: 'local' | 'volume';
  /** Live: the guest as pre_live_migration prepared it. */
  flavor?: Flavor;
  imageRef?: string;
  volumes?: AttachedVolume[];
}

/** A connection entry `connections/<key>.json`. */
export interface ConnectionEntry {
  version: 1;
  key: string;
  devicePath: string;
  driverVolumeType: string;
  volumeId?: string;
  backendName?: string;
}

export const isGuestUuid = (uuid: unknown): uuid is string => typeof uuid === 'string' && UUID.test(uuid);

export const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The directory of a host under a root. */
export function hostDir(ref: { host: string; root: string }): string {
  if (typeof ref.host !== 'string' || !HOST_NAME.test(ref.host)) throw new DriverError(`invalid compute host name ${JSON.stringify(ref.host)}`, { context: { host: ref.host } });
  if (typeof ref.root !== 'string' || ref.root === '') throw new DriverError(`compute host ${ref.host}: no root directory configured`, { context: { host: ref.host } });
  return join(resolve(ref.root), ref.host);
}

/** Models a host crash (or its recovery): the flag file every call of that host's driver checks. */
export async function setHostDown(ref: { host: string; root: string }, down: boolean): Promise<void> {
  const dir = hostDir(ref);
  if (down) await writeJsonAtomic(join(dir, DOWN_FLAG), { down: true, at: new Date().toISOString() });
  else await unlinkIfPresent(join(dir, DOWN_FLAG));
}

/**
 * Whether a peer host (by its directory) is flagged down. `missingIsDown`: a host whose directory is
 * gone counts as down too (an evacuation source that is a smoking hole); a destination's directory
 * is made on demand.
 */
export async function isPeerDown(dir: string, options: { missingIsDown?: boolean } = {}): Promise<boolean> {
  if (options.missingIsDown && !(await statOrUndefined(dir))?.isDirectory()) return true;
  return (await statOrUndefined(join(dir, DOWN_FLAG))) !== undefined;
}
