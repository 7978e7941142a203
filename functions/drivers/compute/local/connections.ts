/**
 * Volume connections of a local host (os-brick's role plus the driver's attach_volume): an entry
 * `connections/<key>.json` pointing at what the local volume driver exported, shared by every guest
 * of the host that uses the volume; a guest's attached volume is a connection plus a mountpoint.
 */
import { createHash } from 'node:crypto';
import { open, realpath, type FileHandle } from 'node:fs/promises';
import { isAbsolute, join, resolve, sep } from 'node:path';
import { DriverError } from '../../../core/errors.js';
import { logger } from '../../../core/logger.js';
import { ROOT_DEVICE_NAME, type AttachedVolume, type BlockDeviceSpec, type BlockHandle, type CanConnect, type ConnectResult, type HostConnection } from '../driver.js';
import { FileBlockHandle } from './block-handle.js';
import { isErrno, listVisible, readJson, statOrUndefined, unlinkIfPresent, writeJsonAtomic } from './files.js';
import type { LocalHost } from './host.js';
import { CONNECTIONS_DIR, DISK_FILE, LOCAL_VOLUME_TYPE, isRecord, type ConnectionEntry, type GuestState } from './layout.js';

interface NormalizedConnection {
  driverVolumeType: string;
  devicePath?: string;
  exportHost?: string;
  volumeId?: string;
  backendName?: string;
}

const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

/**
 * Cinder's connection_info in either shape: Nova's `{driver_volume_type, data: {...}, serial}` or
 * the attachments API's flat `{driver_volume_type, device_path, ...}` (Ferry's buildConnectionInfo).
 */
export function normalizeConnectionInfo(info: Record<string, unknown>): NormalizedConnection {
  if (!isRecord(info)) throw new DriverError('connection_info is not an object', { context: {} });
  const data = isRecord(info.data) ? info.data : info;
  return {
    driverVolumeType: str(info.driver_volume_type) ?? str(data.driver_volume_type) ?? '',
    devicePath: str(data.device_path),
    exportHost: str(data.host),
    volumeId: str(info.serial) ?? str(data.volume_id),
    backendName: str(data.backend_name),
  };
}

/** The connection's key on a host: readable label + digest of the export path (stable across retries). */
export function connectionKeyOf(conn: { devicePath: string; backendName?: string; volumeId?: string }): string {
  const label = (conn.backendName ?? conn.volumeId ?? 'volume').replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64) || 'volume';
  const digest = createHash('sha256').update(conn.devicePath).digest('hex').slice(0, 16);
  return `${label}-${digest}`;
}

/** Whether an export can be opened now: false when it is gone or cannot be reached; other failures throw. */
async function exportReachable(devicePath: string): Promise<boolean> {
  try {
    return (await statOrUndefined(await realpath(devicePath)))?.isFile() ?? false;
  } catch (e) {
    if (isErrno(e, 'ENOENT', 'ENOTDIR', 'ELOOP', 'EACCES')) return false;
    throw e;
  }
}

type Use = { uuid: string; mountpoint: string };

export class HostConnections {
  constructor(private readonly h: LocalHost) {}

  /** Why this host cannot connect, or undefined when it can. Resolves the export path. */
  private async connectProblem(info: Record<string, unknown>): Promise<{ problem?: string; conn?: NormalizedConnection & { devicePath: string } }> {
    const conn = normalizeConnectionInfo(info);
    // The safety net behind the declared capabilities (volumeTypes): the API checks those first.
    if (conn.driverVolumeType !== LOCAL_VOLUME_TYPE) return { problem: `driver_volume_type ${JSON.stringify(conn.driverVolumeType)} is not supported (only ${LOCAL_VOLUME_TYPE})` };
    if (!conn.devicePath || !isAbsolute(conn.devicePath)) return { problem: 'connection_info has no absolute device_path' };
    if (conn.exportHost !== undefined && conn.exportHost !== this.h.host) return { problem: `the volume is exported to host ${conn.exportHost}, not ${this.h.host}` };
    let real: string;
    try {
      real = await realpath(conn.devicePath);
    } catch (e) {
      if (isErrno(e, 'ENOENT', 'ENOTDIR')) return { problem: `device_path ${conn.devicePath} does not exist (is the volume still exported?)` };
      return { problem: `device_path ${conn.devicePath} cannot be resolved: ${(e as Error).message}` };
    }
    const st = await statOrUndefined(real);
    if (!st?.isFile()) return { problem: `device_path ${conn.devicePath} is not a volume` };
    const allowed = this.h.config.allowedVolumeRoots;
    if (allowed && !allowed.some((r) => real === resolve(r) || real.startsWith(resolve(r) + sep))) {
      return { problem: `device_path ${conn.devicePath} is outside the allowed volume roots` };
    }
    return { conn: { ...conn, devicePath: conn.devicePath } };
  }

  async canConnectVolume(connectionInfo: Record<string, unknown>): Promise<CanConnect> {
    await this.h.ensureUp();
    const { problem } = await this.connectProblem(connectionInfo);
    return problem ? { canConnect: false, reason: problem } : { canConnect: true };
  }

  entryPath(key: string): string {
    return join(this.h.dir, CONNECTIONS_DIR, `${key}.json`);
  }

  /** Makes (or finds) the entry; `created` says whether this call made it (for rollbacks). */
  async connect(info: Record<string, unknown>): Promise<{ key: string; created: boolean; entry: ConnectionEntry }> {
    const { problem, conn } = await this.connectProblem(info);
    if (problem || !conn) throw this.h.fail(`cannot connect volume: ${problem}`, { connectionInfo: info });
    const key = connectionKeyOf(conn);
    const entry: ConnectionEntry = { version: 1, key, devicePath: conn.devicePath, driverVolumeType: conn.driverVolumeType };
    if (conn.volumeId) entry.volumeId = conn.volumeId;
    if (conn.backendName) entry.backendName = conn.backendName;
    const current = await this.h.readRewritable<ConnectionEntry>(this.entryPath(key), 'connection entry');
    if (current && current.devicePath === entry.devicePath) return { key, created: false, entry: current };
    await writeJsonAtomic(this.entryPath(key), entry);
    return { key, created: current === undefined, entry };
  }

  async connectVolume(connectionInfo: Record<string, unknown>): Promise<ConnectResult> {
    await this.h.ensureUp();
    return this.h.locked(async () => {
      const { key, entry } = await this.connect(connectionInfo);
      return { key, entryPath: this.entryPath(key), devicePath: entry.devicePath };
    });
  }

  async disconnectVolume(connectionInfo: Record<string, unknown>, options: { force?: boolean } = {}): Promise<void> {
    await this.h.ensureUp();
    const conn = normalizeConnectionInfo(connectionInfo);
    if (!conn.devicePath) throw this.h.fail('connection_info has no device_path', { connectionInfo });
    const key = connectionKeyOf({ ...conn, devicePath: conn.devicePath });
    await this.h.locked(async () => {
      if (options.force) await unlinkIfPresent(this.entryPath(key));
      else await this.disconnectKey(key);
    });
  }

  /** Who on this host uses each connection: guests' volumes and incoming migrations' volumes. */
  private async users(): Promise<Map<string, Use[]>> {
    const out = new Map<string, Use[]>();
    const add = (key: string, u: Use) => out.set(key, [...(out.get(key) ?? []), u]);
    for (const s of await this.h.allStates()) for (const v of s.volumes) add(v.connectionKey, { uuid: s.uuid, mountpoint: v.mountpoint });
    for (const uuid of await this.h.incomingUuids()) {
      const inc = await this.h.readIncoming(uuid);
      for (const v of inc?.volumes ?? []) add(v.connectionKey, { uuid, mountpoint: v.mountpoint });
    }
    return out;
  }

  /**
   * Removes the entry unless someone else still uses it (like Nova's libvirt driver, which keeps a
   * multiattach volume's host connection while another guest on the host has it). `except` names
   * the use being dropped (a guest's mountpoint, or all of a guest's uses when no mountpoint).
   */
  async disconnectKey(key: string, except?: { uuid: string; mountpoint?: string; incoming?: boolean }): Promise<void> {
    const others = ((await this.users()).get(key) ?? []).filter(
      (u) => !except || u.uuid !== except.uuid || (except.mountpoint !== undefined && u.mountpoint !== except.mountpoint),
    );
    if (others.length > 0) return;
    await unlinkIfPresent(this.entryPath(key));
  }

  /**
   * Rollback of connections a failed call made: each is removed if unused; one that cannot be is
   * logged with its key (the audit reports it as a connection nobody claims), and the rest go on.
   */
  async undoConnections(keys: string[], context: { uuid: string; why: string }): Promise<void> {
    for (const key of keys) {
      try {
        await this.disconnectKey(key, { uuid: context.uuid });
      } catch (e) {
        logger.error(`compute host ${this.h.host}: a connection made by a failed ${context.why} is left behind`, { host: this.h.host, uuid: context.uuid, key, error: e as Error });
      }
    }
  }

  attached(bd: BlockDeviceSpec, key: string): AttachedVolume {
    const volumeId = bd.volumeId ?? normalizeConnectionInfo(bd.connectionInfo).volumeId;
    const out: AttachedVolume = { mountpoint: bd.mountpoint, connectionKey: key, connectionInfo: bd.connectionInfo };
    if (volumeId) out.volumeId = volumeId;
    return out;
  }

  /** Attaches in the guest's state (idempotent); returns the new state. */
  async attachInState(state: GuestState, bd: BlockDeviceSpec): Promise<GuestState> {
    const mountpoint = this.h.checkMountpoint(bd.mountpoint);
    if (mountpoint === ROOT_DEVICE_NAME && state.rootDisk === 'local') throw this.h.fail(`${ROOT_DEVICE_NAME} is the local root disk of ${state.uuid}`, { uuid: state.uuid });
    const { problem, conn } = await this.connectProblem(bd.connectionInfo);
    if (problem || !conn) throw this.h.fail(`cannot connect volume: ${problem}`, { uuid: state.uuid, mountpoint });
    const key = connectionKeyOf(conn);
    const atMountpoint = state.volumes.find((v) => v.mountpoint === mountpoint);
    if (atMountpoint && atMountpoint.connectionKey !== key) throw this.h.fail(`${mountpoint} of ${state.uuid} is in use by another volume`, { uuid: state.uuid, mountpoint });
    const elsewhere = state.volumes.find((v) => v.connectionKey === key && v.mountpoint !== mountpoint);
    if (elsewhere) throw this.h.fail(`the volume is already attached to ${state.uuid} at ${elsewhere.mountpoint}`, { uuid: state.uuid, mountpoint });
    const { created } = await this.connect(bd.connectionInfo);
    if (atMountpoint) return state;
    const next = { ...state, volumes: [...state.volumes, this.attached(bd, key)] };
    try {
      await this.h.writeState(next);
    } catch (e) {
      if (created) await this.undoConnections([key], { uuid: state.uuid, why: `attach at ${mountpoint}` });
      throw e;
    }
    return next;
  }

  async attachVolume(uuid: string, connectionInfo: Record<string, unknown>, mountpoint: string, volumeId?: string): Promise<AttachedVolume> {
    this.h.checkUuid(uuid);
    this.h.checkMountpoint(mountpoint);
    await this.h.ensureUp();
    return this.h.locked(async () => {
      const state = await this.h.definedState(uuid);
      const next = await this.attachInState(state, { mountpoint, connectionInfo, volumeId });
      return next.volumes.find((v) => v.mountpoint === mountpoint)!;
    });
  }

  async detachVolume(uuid: string, mountpoint: string): Promise<void> {
    this.h.checkUuid(uuid);
    this.h.checkMountpoint(mountpoint);
    await this.h.ensureUp();
    await this.h.locked(async () => {
      const state = await this.h.readState(uuid);
      const volume = state?.volumes.find((v) => v.mountpoint === mountpoint);
      if (!state || !volume) return;
      if (mountpoint === ROOT_DEVICE_NAME && state.defined) throw this.h.fail(`cannot detach the boot volume of ${uuid}`, { uuid, mountpoint });
      await this.disconnectKey(volume.connectionKey, { uuid, mountpoint });
      await this.h.writeState({ ...state, volumes: state.volumes.filter((v) => v.mountpoint !== mountpoint) });
    });
  }

  async listConnections(): Promise<HostConnection[]> {
    await this.h.ensureUp();
    const users = await this.users();
    const out: HostConnection[] = [];
    for (const name of await listVisible(join(this.h.dir, CONNECTIONS_DIR))) {
      if (!name.endsWith('.json')) continue;
      const entryPath = join(this.h.dir, CONNECTIONS_DIR, name);
      let entry: ConnectionEntry | undefined;
      try {
        entry = await readJson<ConnectionEntry>(entryPath);
      } catch (e) {
        throw this.h.fail(`unreadable connection entry ${name}: ${(e as Error).message}`, { entryPath }, e);
      }
      // Gone between the listing and the read: a concurrent disconnect.
      if (!entry) continue;
      const item: HostConnection = {
        key: entry.key,
        entryPath,
        devicePath: entry.devicePath,
        driverVolumeType: entry.driverVolumeType,
        reachable: await exportReachable(entry.devicePath),
        users: users.get(entry.key) ?? [],
      };
      if (entry.volumeId) item.volumeId = entry.volumeId;
      if (entry.backendName) item.backendName = entry.backendName;
      out.push(item);
    }
    return out;
  }

  /** Opens through the host's entry: the entry must exist, and what it points at must still be exported. */
  private async openKey(key: string, what: string): Promise<BlockHandle> {
    const entry = await readJson<ConnectionEntry>(this.entryPath(key));
    if (!entry) throw this.h.fail(`${what}: the volume is not connected to this host`, { key });
    let fh: FileHandle;
    try {
      fh = await open(entry.devicePath, 'r+');
    } catch (e) {
      throw this.h.fail(`${what}: cannot open ${entry.devicePath}: ${(e as Error).message}`, { key }, e);
    }
    return new FileBlockHandle(fh, (await fh.stat()).size, `${this.h.host} ${what}`, entry.devicePath);
  }

  async openConnection(connectionInfo: Record<string, unknown>): Promise<BlockHandle> {
    await this.h.ensureUp();
    const conn = normalizeConnectionInfo(connectionInfo);
    if (!conn.devicePath) throw this.h.fail('connection_info has no device_path');
    return this.openKey(connectionKeyOf({ ...conn, devicePath: conn.devicePath }), `connection ${conn.devicePath}`);
  }

  async openGuestDevice(uuid: string, device: string): Promise<BlockHandle> {
    this.h.checkUuid(uuid);
    this.h.checkMountpoint(device);
    await this.h.ensureUp();
    const state = await this.h.definedState(uuid);
    if (device === ROOT_DEVICE_NAME && state.rootDisk === 'local') {
      const disk = join(this.h.guestDir(uuid), DISK_FILE);
      const fh = await open(disk, 'r+');
      return new FileBlockHandle(fh, (await fh.stat()).size, `${this.h.host} ${uuid} root disk`, disk);
    }
    const volume = state.volumes.find((v) => v.mountpoint === device);
    if (!volume) throw this.h.fail(`guest ${uuid} has no device ${device}`, { uuid, device });
    return this.openKey(volume.connectionKey, `${uuid} ${device}`);
  }
}
