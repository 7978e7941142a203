/**
 * The local compute driver: a compute host is a directory, a guest a root disk file plus a state
 * file, a volume connection an entry the host opens. The embedded stack's default and what the
 * tests run. Layout (docs/compute-driver.md):
 *
 *   <root>/<host>/host.json                        configured capacity (written from the config)
 *   <root>/<host>/down                             flag file: the host is down
 *   <root>/<host>/guests/<uuid>/disk               the root disk, a sparse file (absent when volume-backed)
 *   <root>/<host>/guests/<uuid>/state.json         definition, power state, flavor, volumes by mountpoint
 *   <root>/<host>/incoming/<uuid>/{disk,migration.json}   a migration arriving (before finish/switch-over)
 *   <root>/<host>/connections/<key>.json           a host-level volume connection -> the export's device_path
 *
 * Names starting with '.' are temp files. Every directory and state file is published whole
 * (temp + rename), so a crash leaves either the old or the new state and at most a temp file.
 * All hosts of one root see each other's directories: migrations copy into the peer's `incoming/`,
 * and an evacuation reads the down source's disk (shared storage).
 */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, readdir, realpath, rename, truncate, type FileHandle } from 'node:fs/promises';
import { isAbsolute, join, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { DriverError } from '../../core/errors.js';
import {
  POWER_STATE,
  ROOT_DEVICE_NAME,
  type AttachedVolume,
  type BlockDeviceSpec,
  type BlockHandle,
  type CanConnect,
  type ComputeDriver,
  type ComputeHostConfig,
  type ComputeHostRef,
  type ConnectResult,
  type Flavor,
  type GuestInfo,
  type GuestMigration,
  type GuestSpec,
  type HostConnection,
  type HostInfo,
  type ImageSource,
  type LiveMigrateData,
  type LiveMigrationOptions,
  type MigrationProgress,
  type PowerState,
  type SnapshotImage,
} from './driver.js';
import {
  CopyAborted,
  DEFAULT_CHUNK_BYTES,
  isErrno,
  listVisible,
  readJson,
  removeTree,
  serialized,
  sparseCopy,
  statOrUndefined,
  syncChangedChunks,
  tempName,
  unlinkIfPresent,
  writeFully,
  writeJsonAtomic,
} from './local-files.js';

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
const SNAPSHOTS_DIR = 'snapshots';
const DISK_FILE = 'disk';
const STATE_FILE = 'state.json';
const MIGRATION_FILE = 'migration.json';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HOST_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$/;
const IMAGE_ID = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$/;
const MOUNTPOINT = /^\/dev\/[a-z][a-z0-9]{1,15}$/;

/** A guest's state.json. */
interface GuestState {
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
interface IncomingMigration {
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

interface ConnectionEntry {
  version: 1;
  key: string;
  devicePath: string;
  driverVolumeType: string;
  volumeId?: string;
  backendName?: string;
}

interface NormalizedConnection {
  driverVolumeType: string;
  devicePath?: string;
  exportHost?: string;
  volumeId?: string;
  backendName?: string;
}

export const isGuestUuid = (uuid: unknown): uuid is string => typeof uuid === 'string' && UUID.test(uuid);

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
 * Down = configured down or flagged. `missingIsDown`: a host whose directory is gone counts as down
 * too (an evacuation source that is a smoking hole); a destination's directory is made on demand.
 */
export async function isHostDown(ref: ComputeHostRef, options: { missingIsDown?: boolean } = {}): Promise<boolean> {
  if (ref.down) return true;
  const dir = hostDir(ref);
  if (options.missingIsDown && !(await statOrUndefined(dir))?.isDirectory()) return true;
  return (await statOrUndefined(join(dir, DOWN_FLAG))) !== undefined;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
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

function sameFlavor(a: Flavor, b: Flavor): boolean {
  return a.vcpus === b.vcpus && a.memoryMb === b.memoryMb && a.rootGb === b.rootGb;
}

class FileBlockHandle implements BlockHandle {
  constructor(
    private readonly fh: FileHandle,
    readonly sizeBytes: number,
    private readonly what: string,
  ) {}

  private check(position: number, length: number): void {
    if (!Number.isInteger(position) || !Number.isInteger(length) || position < 0 || length < 0 || position + length > this.sizeBytes) {
      throw new DriverError(`${this.what}: ${length} bytes at ${position} is outside the device (${this.sizeBytes} bytes)`, { context: { position, length } });
    }
  }

  async read(position: number, length: number): Promise<Buffer> {
    this.check(position, length);
    const buf = Buffer.alloc(length);
    let got = 0;
    while (got < length) {
      const { bytesRead } = await this.fh.read(buf, got, length - got, position + got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    return buf;
  }

  async write(position: number, data: Uint8Array): Promise<void> {
    this.check(position, data.length);
    await writeFully(this.fh, data, position);
    await this.fh.datasync();
  }

  async close(): Promise<void> {
    await this.fh.close();
  }
}

export class LocalComputeDriver implements ComputeDriver {
  readonly host: string;
  /** `<root>/<host>` */
  readonly dir: string;
  private readonly root: string;

  constructor(private readonly config: ComputeHostConfig) {
    this.dir = hostDir(config);
    this.host = config.host;
    this.root = resolve(config.root);
    for (const key of ['vcpus', 'memoryMb', 'diskGb'] as const) {
      if (!Number.isInteger(config[key]) || config[key] < 0) throw this.fail(`invalid capacity ${key} ${JSON.stringify(config[key])}`, { [key]: config[key] });
    }
  }

  // ---- plumbing -------------------------------------------------------------------------------

  private fail(message: string, context: Record<string, unknown> = {}, cause?: unknown): DriverError {
    return new DriverError(`compute host ${this.host}: ${message}`, { cause, context: { host: this.host, ...context } });
  }

  private locked<T>(fn: () => Promise<T>): Promise<T> {
    return serialized(this.dir, fn);
  }

  private checkUuid(uuid: unknown): string {
    if (!isGuestUuid(uuid)) throw this.fail(`invalid guest uuid ${JSON.stringify(uuid)}`, { uuid });
    return uuid;
  }

  private checkMountpoint(mountpoint: unknown): string {
    if (typeof mountpoint !== 'string' || !MOUNTPOINT.test(mountpoint)) throw this.fail(`invalid mountpoint ${JSON.stringify(mountpoint)}`, { mountpoint });
    return mountpoint;
  }

  private checkFlavor(flavor: Flavor): Flavor {
    const ok =
      isRecord(flavor) &&
      Number.isInteger(flavor.vcpus) &&
      flavor.vcpus > 0 &&
      Number.isInteger(flavor.memoryMb) &&
      flavor.memoryMb > 0 &&
      Number.isInteger(flavor.rootGb) &&
      flavor.rootGb >= 0;
    if (!ok) throw this.fail(`invalid flavor ${JSON.stringify(flavor)}`, { flavor });
    return { vcpus: flavor.vcpus, memoryMb: flavor.memoryMb, rootGb: flavor.rootGb };
  }

  private checkSpec(spec: Omit<GuestSpec, 'image'> & { image?: ImageSource }): void {
    if (!isRecord(spec)) throw this.fail('invalid guest spec');
    this.checkUuid(spec.uuid);
    this.checkFlavor(spec.flavor);
    if (spec.imageRef !== undefined && typeof spec.imageRef !== 'string') throw this.fail('invalid imageRef', { uuid: spec.uuid });
    const seen = new Set<string>();
    for (const bd of spec.blockDevices ?? []) {
      this.checkMountpoint(bd.mountpoint);
      if (seen.has(bd.mountpoint)) throw this.fail(`two block devices at ${bd.mountpoint}`, { uuid: spec.uuid, mountpoint: bd.mountpoint });
      seen.add(bd.mountpoint);
      if (!isRecord(bd.connectionInfo)) throw this.fail(`block device ${bd.mountpoint} has no connection_info`, { uuid: spec.uuid });
    }
  }

  /** The other host of a migration: validated, not this host, under a root. */
  private peer(ref: ComputeHostRef): string {
    if (!isRecord(ref)) throw this.fail('invalid peer host');
    const dir = hostDir(ref);
    if (dir === this.dir) throw this.fail(`the peer host is this host (${ref.host})`, { peer: ref.host });
    return dir;
  }

  private guestDir(uuid: string): string {
    return join(this.dir, GUESTS_DIR, uuid);
  }

  private incomingDir(uuid: string, base = this.dir): string {
    return join(base, INCOMING_DIR, uuid);
  }

  private async hostIsDown(): Promise<boolean> {
    return this.config.down === true || (await statOrUndefined(join(this.dir, DOWN_FLAG))) !== undefined;
  }

  /** Every call but getHostInfo starts here: a down host answers nothing. Also creates the host's tree. */
  private async ensureUp(): Promise<void> {
    if (await this.hostIsDown()) throw this.fail('the host is down', { down: true });
    const wanted = this.hostRecord();
    const current = await readJson<Record<string, unknown>>(join(this.dir, HOST_FILE)).catch(() => undefined);
    if (JSON.stringify(current) !== JSON.stringify(wanted)) await writeJsonAtomic(join(this.dir, HOST_FILE), wanted);
    for (const d of [GUESTS_DIR, INCOMING_DIR, CONNECTIONS_DIR]) await mkdir(join(this.dir, d), { recursive: true });
  }

  private hostRecord() {
    return {
      host: this.host,
      hypervisorType: HYPERVISOR_TYPE,
      driverVersion: LOCAL_COMPUTE_DRIVER_VERSION,
      vcpus: this.config.vcpus,
      memoryMb: this.config.memoryMb,
      diskGb: this.config.diskGb,
    };
  }

  private async readState(uuid: string, base = this.dir): Promise<GuestState | undefined> {
    try {
      return await readJson<GuestState>(join(base, GUESTS_DIR, uuid, STATE_FILE));
    } catch (e) {
      throw this.fail(`unreadable state of guest ${uuid}: ${(e as Error).message}`, { uuid }, e);
    }
  }

  private async writeState(state: GuestState, dir = this.guestDir(state.uuid)): Promise<void> {
    await writeJsonAtomic(join(dir, STATE_FILE), state);
  }

  private async readIncoming(uuid: string, base = this.dir): Promise<IncomingMigration | undefined> {
    return readJson<IncomingMigration>(join(this.incomingDir(uuid, base), MIGRATION_FILE));
  }

  private async diskBytes(uuid: string, base = this.dir): Promise<number> {
    return (await statOrUndefined(join(base, GUESTS_DIR, uuid, DISK_FILE)))?.size ?? 0;
  }

  private async info(state: GuestState): Promise<GuestInfo> {
    const out: GuestInfo = {
      uuid: state.uuid,
      host: this.host,
      defined: state.defined,
      powerState: state.powerState,
      flavor: state.flavor,
      rootDisk: state.rootDisk,
      rootDiskBytes: state.rootDisk === 'local' ? await this.diskBytes(state.uuid) : 0,
      volumes: state.volumes,
      bootCount: state.bootCount,
    };
    if (state.imageRef !== undefined) out.imageRef = state.imageRef;
    if (state.migration) out.migration = state.migration;
    if (state.evacuatedFrom) out.evacuatedFrom = state.evacuatedFrom;
    return out;
  }

  private async definedState(uuid: string): Promise<GuestState> {
    const state = await this.readState(uuid);
    if (!state?.defined) throw this.fail(`guest ${uuid} is not defined on this host`, { uuid });
    return state;
  }

  // ---- host -----------------------------------------------------------------------------------

  async getHostInfo(): Promise<HostInfo> {
    const up = !(await this.hostIsDown());
    if (up) await this.ensureUp();
    return {
      ...this.hostRecord(),
      hypervisorHostname: this.host,
      up,
      guests: (await this.allStates()).filter((s) => s.defined).map((s) => s.uuid),
    };
  }

  private async allStates(): Promise<GuestState[]> {
    const out: GuestState[] = [];
    for (const name of await listVisible(join(this.dir, GUESTS_DIR))) {
      if (!isGuestUuid(name)) continue;
      const state = await this.readState(name);
      if (state) out.push(state);
    }
    return out;
  }

  async listGuests(): Promise<GuestInfo[]> {
    await this.ensureUp();
    return Promise.all((await this.allStates()).filter((s) => s.defined).map((s) => this.info(s)));
  }

  async listKeptDisks(): Promise<GuestInfo[]> {
    await this.ensureUp();
    return Promise.all((await this.allStates()).filter((s) => !s.defined).map((s) => this.info(s)));
  }

  async getGuest(uuid: string): Promise<GuestInfo | undefined> {
    this.checkUuid(uuid);
    await this.ensureUp();
    const state = await this.readState(uuid);
    return state && this.info(state);
  }

  // ---- lifecycle ------------------------------------------------------------------------------

  async spawn(spec: GuestSpec): Promise<GuestInfo> {
    this.checkSpec(spec);
    await this.ensureUp();
    try {
      return await this.locked(async () => {
        const existing = await this.readState(spec.uuid);
        if (existing) return this.respawn(existing, spec);
        const volumeBacked = !spec.image;
        if (volumeBacked && !(spec.blockDevices ?? []).some((bd) => bd.mountpoint === ROOT_DEVICE_NAME)) {
          throw this.fail(`guest ${spec.uuid} has neither an image nor a boot volume at ${ROOT_DEVICE_NAME}`, { uuid: spec.uuid });
        }
        return this.build(spec, async (dir) => {
          if (!spec.image) return 'volume';
          await this.writeImage(spec.image, join(dir, DISK_FILE), spec);
          return 'local';
        });
      });
    } finally {
      discardUnusedStream(spec.image);
    }
  }

  /** A retried spawn: the same spec is fine (missing volumes get attached), anything else is refused. */
  private async respawn(existing: GuestState, spec: Omit<GuestSpec, 'image'> & { image?: ImageSource }): Promise<GuestInfo> {
    if (!existing.defined) throw this.fail(`guest ${spec.uuid} has kept disks on this host; revert, confirm or destroy them first`, { uuid: spec.uuid });
    const sameImage = spec.imageRef === undefined || existing.imageRef === undefined || spec.imageRef === existing.imageRef;
    const sameRoot = existing.rootDisk === (spec.image ? 'local' : 'volume');
    if (!sameFlavor(existing.flavor, spec.flavor) || !sameImage || !sameRoot) {
      throw this.fail(`guest ${spec.uuid} already exists with a different spec`, { uuid: spec.uuid, existingFlavor: existing.flavor, existingImageRef: existing.imageRef });
    }
    let state = existing;
    for (const bd of spec.blockDevices ?? []) state = await this.attachInState(state, bd);
    return this.info(state);
  }

  /**
   * Builds a guest in a temp directory (root disk by `fillDisk`), connects its volumes, writes its
   * state and publishes the directory as `guests/<uuid>`. On failure nothing of it is left:
   * neither the directory nor the connections it made.
   */
  private async build(
    spec: Omit<GuestSpec, 'image'>,
    fillDisk: (dir: string) => Promise<'local' | 'volume'>,
    extra: Partial<GuestState> = {},
    prepared?: string,
  ): Promise<GuestInfo> {
    const flavor = this.checkFlavor(spec.flavor);
    const dir = prepared ?? join(this.dir, GUESTS_DIR, tempName(spec.uuid));
    const made: string[] = [];
    try {
      await mkdir(dir, { recursive: true });
      const rootDisk = await fillDisk(dir);
      if (rootDisk === 'local') await this.fitDisk(join(dir, DISK_FILE), flavor, spec.uuid);
      const volumes: AttachedVolume[] = [];
      for (const bd of spec.blockDevices ?? []) {
        const { key, created } = await this.connect(bd.connectionInfo);
        if (created) made.push(key);
        volumes.push(this.attached(bd, key));
      }
      const powerOn = spec.powerOn ?? true;
      const state: GuestState = {
        version: 1,
        uuid: spec.uuid,
        defined: true,
        powerState: powerOn ? POWER_STATE.RUNNING : POWER_STATE.SHUTDOWN,
        flavor,
        rootDisk,
        volumes,
        bootCount: powerOn ? 1 : 0,
        ...extra,
      };
      if (spec.imageRef !== undefined) state.imageRef = spec.imageRef;
      await this.writeState(state, dir);
      await unlinkIfPresent(join(dir, MIGRATION_FILE));
      try {
        await rename(dir, this.guestDir(spec.uuid));
      } catch (e) {
        if (isErrno(e, 'EEXIST', 'ENOTEMPTY')) throw this.fail(`guest ${spec.uuid} appeared meanwhile`, { uuid: spec.uuid }, e);
        throw e;
      }
      return this.info(state);
    } catch (e) {
      if (!prepared) await removeTree(dir).catch(() => undefined);
      for (const key of made) await this.disconnectKey(key, { uuid: spec.uuid }).catch(() => undefined);
      if (e instanceof DriverError) throw e;
      throw this.fail(`cannot build guest ${spec.uuid}: ${(e as Error).message}`, { uuid: spec.uuid }, e);
    }
  }

  /** Sparse-extends a root disk to the flavor's root_gb; refuses a disk larger than the flavor allows. */
  private async fitDisk(path: string, flavor: Flavor, uuid: string): Promise<void> {
    const st = await statOrUndefined(path);
    if (!st?.isFile()) throw this.fail(`guest ${uuid} has no root disk`, { uuid });
    if (flavor.rootGb === 0) return;
    const want = flavor.rootGb * GIB;
    if (st.size > want) throw this.fail(`root disk of ${uuid} is ${st.size} bytes, larger than the flavor's ${flavor.rootGb} GiB (cannot resize down)`, { uuid, bytes: st.size, rootGb: flavor.rootGb });
    if (st.size < want) await truncate(path, want);
  }

  private async writeImage(image: ImageSource, dest: string, spec: GuestSpec): Promise<void> {
    let source: Readable;
    if ('path' in image) {
      const st = await statOrUndefined(image.path);
      if (!st?.isFile()) throw this.fail(`image ${image.path} is not a readable file`, { uuid: spec.uuid, image: image.path });
      source = createReadStream(image.path);
    } else if ('data' in image) {
      source = Readable.from([Buffer.from(image.data.buffer, image.data.byteOffset, image.data.byteLength)]);
    } else if ('stream' in image) {
      source = typeof image.stream === 'function' ? await image.stream() : image.stream;
      consumed.add(source);
    } else {
      throw this.fail('invalid image source', { uuid: spec.uuid });
    }
    try {
      await pipeline(source, createWriteStream(dest, { flags: 'wx' }));
    } catch (e) {
      throw this.fail(`cannot write the image of ${spec.uuid}: ${(e as Error).message}`, { uuid: spec.uuid }, e);
    }
  }

  async destroy(uuid: string, options: { keepDisks?: boolean } = {}): Promise<void> {
    this.checkUuid(uuid);
    await this.ensureUp();
    await this.locked(async () => {
      const state = await this.readState(uuid);
      if (state) {
        // Connections first: a crash in between leaves a guest that still claims them, which a retry
        // disconnects, never a connection nobody claims.
        for (const v of state.volumes) await this.disconnectKey(v.connectionKey, { uuid, mountpoint: v.mountpoint });
        if (options.keepDisks) {
          if (state.defined || state.volumes.length > 0) {
            await this.writeState({ ...state, defined: false, powerState: POWER_STATE.SHUTDOWN, volumes: [] });
          }
        } else {
          await removeTree(this.guestDir(uuid));
        }
      }
      if (!options.keepDisks) await this.removeIncoming(uuid);
    });
  }

  /** Removes an incoming migration of `uuid` on this host with the connections it made. */
  private async removeIncoming(uuid: string): Promise<void> {
    const incoming = await this.readIncoming(uuid).catch(() => undefined);
    for (const v of incoming?.volumes ?? []) await this.disconnectKey(v.connectionKey, { uuid, mountpoint: v.mountpoint, incoming: true });
    await removeTree(this.incomingDir(uuid));
  }

  private async setPower(uuid: string, fn: (s: GuestState) => GuestState | undefined): Promise<void> {
    this.checkUuid(uuid);
    await this.ensureUp();
    await this.locked(async () => {
      const state = await this.definedState(uuid);
      const next = fn(state);
      if (next) await this.writeState(next);
    });
  }

  async powerOff(uuid: string): Promise<void> {
    await this.setPower(uuid, (s) => (s.powerState === POWER_STATE.SHUTDOWN ? undefined : { ...s, powerState: POWER_STATE.SHUTDOWN }));
  }

  async powerOn(uuid: string): Promise<void> {
    await this.setPower(uuid, (s) => (s.powerState === POWER_STATE.RUNNING ? undefined : { ...s, powerState: POWER_STATE.RUNNING, bootCount: s.bootCount + 1 }));
  }

  async reboot(uuid: string, type: 'SOFT' | 'HARD' = 'SOFT'): Promise<void> {
    if (type !== 'SOFT' && type !== 'HARD') throw this.fail(`invalid reboot type ${JSON.stringify(type)}`, { uuid });
    await this.setPower(uuid, (s) => ({ ...s, powerState: POWER_STATE.RUNNING, bootCount: s.bootCount + 1 }));
  }

  async getPowerState(uuid: string): Promise<PowerState> {
    this.checkUuid(uuid);
    await this.ensureUp();
    const state = await this.readState(uuid);
    return state?.defined ? state.powerState : POWER_STATE.NOSTATE;
  }

  async snapshot(uuid: string, imageId: string): Promise<SnapshotImage> {
    this.checkUuid(uuid);
    if (typeof imageId !== 'string' || !IMAGE_ID.test(imageId)) throw this.fail(`invalid image id ${JSON.stringify(imageId)}`, { uuid, imageId });
    await this.ensureUp();
    return this.locked(async () => {
      const state = await this.readState(uuid);
      if (!state) throw this.fail(`guest ${uuid} is not on this host`, { uuid });
      if (state.rootDisk !== 'local') throw this.fail(`guest ${uuid} is volume-backed: snapshot its boot volume instead`, { uuid });
      // A point-in-time copy, unlinked once open: the stream reads it, and nothing stays behind.
      const copy = join(this.dir, SNAPSHOTS_DIR, tempName(imageId));
      try {
        const sizeBytes = await sparseCopy(join(this.guestDir(uuid), DISK_FILE), copy);
        const fh = await open(copy, 'r');
        await unlinkIfPresent(copy);
        return { imageId, sizeBytes, stream: fh.createReadStream() };
      } catch (e) {
        await unlinkIfPresent(copy);
        throw this.fail(`cannot snapshot guest ${uuid}: ${(e as Error).message}`, { uuid, imageId }, e);
      }
    });
  }

  // ---- volume connections (os-brick's role) ---------------------------------------------------

  /** Why this host cannot connect, or undefined when it can. Resolves the export path. */
  private async connectProblem(info: Record<string, unknown>): Promise<{ problem?: string; conn?: NormalizedConnection & { devicePath: string } }> {
    const conn = normalizeConnectionInfo(info);
    if (conn.driverVolumeType !== LOCAL_VOLUME_TYPE) return { problem: `driver_volume_type ${JSON.stringify(conn.driverVolumeType)} is not supported (only ${LOCAL_VOLUME_TYPE})` };
    if (!conn.devicePath || !isAbsolute(conn.devicePath)) return { problem: 'connection_info has no absolute device_path' };
    if (conn.exportHost !== undefined && conn.exportHost !== this.host) return { problem: `the volume is exported to host ${conn.exportHost}, not ${this.host}` };
    let real: string;
    try {
      real = await realpath(conn.devicePath);
    } catch {
      return { problem: `device_path ${conn.devicePath} does not exist (is the volume still exported?)` };
    }
    const st = await statOrUndefined(real);
    if (!st?.isFile()) return { problem: `device_path ${conn.devicePath} is not a volume` };
    const allowed = this.config.allowedVolumeRoots;
    if (allowed && !allowed.some((r) => real === resolve(r) || real.startsWith(resolve(r) + sep))) {
      return { problem: `device_path ${conn.devicePath} is outside the allowed volume roots` };
    }
    return { conn: { ...conn, devicePath: conn.devicePath } };
  }

  async canConnectVolume(connectionInfo: Record<string, unknown>): Promise<CanConnect> {
    await this.ensureUp();
    const { problem } = await this.connectProblem(connectionInfo);
    return problem ? { canConnect: false, reason: problem } : { canConnect: true };
  }

  private entryPath(key: string): string {
    return join(this.dir, CONNECTIONS_DIR, `${key}.json`);
  }

  /** Makes (or finds) the entry; `created` says whether this call made it (for rollbacks). */
  private async connect(info: Record<string, unknown>): Promise<{ key: string; created: boolean; entry: ConnectionEntry }> {
    const { problem, conn } = await this.connectProblem(info);
    if (problem || !conn) throw this.fail(`cannot connect volume: ${problem}`, { connectionInfo: info });
    const key = connectionKeyOf(conn);
    const entry: ConnectionEntry = { version: 1, key, devicePath: conn.devicePath, driverVolumeType: conn.driverVolumeType };
    if (conn.volumeId) entry.volumeId = conn.volumeId;
    if (conn.backendName) entry.backendName = conn.backendName;
    const current = await readJson<ConnectionEntry>(this.entryPath(key)).catch(() => undefined);
    if (current && current.devicePath === entry.devicePath) return { key, created: false, entry: current };
    await writeJsonAtomic(this.entryPath(key), entry);
    return { key, created: current === undefined, entry };
  }

  async connectVolume(connectionInfo: Record<string, unknown>): Promise<ConnectResult> {
    await this.ensureUp();
    return this.locked(async () => {
      const { key, entry } = await this.connect(connectionInfo);
      return { key, entryPath: this.entryPath(key), devicePath: entry.devicePath };
    });
  }

  async disconnectVolume(connectionInfo: Record<string, unknown>, options: { force?: boolean } = {}): Promise<void> {
    await this.ensureUp();
    const conn = normalizeConnectionInfo(connectionInfo);
    if (!conn.devicePath) throw this.fail('connection_info has no device_path', { connectionInfo });
    const key = connectionKeyOf({ ...conn, devicePath: conn.devicePath });
    await this.locked(async () => {
      if (options.force) await unlinkIfPresent(this.entryPath(key));
      else await this.disconnectKey(key);
    });
  }

  /** Who on this host uses each connection: guests' volumes and incoming migrations' volumes. */
  private async users(): Promise<Map<string, { uuid: string; mountpoint: string }[]>> {
    const out = new Map<string, { uuid: string; mountpoint: string }[]>();
    const add = (key: string, u: { uuid: string; mountpoint: string }) => out.set(key, [...(out.get(key) ?? []), u]);
    for (const s of await this.allStates()) for (const v of s.volumes) add(v.connectionKey, { uuid: s.uuid, mountpoint: v.mountpoint });
    for (const uuid of await listVisible(join(this.dir, INCOMING_DIR))) {
      if (!isGuestUuid(uuid)) continue;
      const inc = await this.readIncoming(uuid).catch(() => undefined);
      for (const v of inc?.volumes ?? []) add(v.connectionKey, { uuid, mountpoint: v.mountpoint });
    }
    return out;
  }

  /**
   * Removes the entry unless someone else still uses it (like Nova's libvirt driver, which keeps a
   * multiattach volume's host connection while another guest on the host has it). `except` names
   * the use being dropped (a guest's mountpoint, or all of a guest's uses when no mountpoint).
   */
  private async disconnectKey(key: string, except?: { uuid: string; mountpoint?: string; incoming?: boolean }): Promise<void> {
    const others = ((await this.users()).get(key) ?? []).filter(
      (u) => !except || u.uuid !== except.uuid || (except.mountpoint !== undefined && u.mountpoint !== except.mountpoint),
    );
    if (others.length > 0) return;
    await unlinkIfPresent(this.entryPath(key));
  }

  private attached(bd: BlockDeviceSpec, key: string): AttachedVolume {
    const volumeId = bd.volumeId ?? normalizeConnectionInfo(bd.connectionInfo).volumeId;
    const out: AttachedVolume = { mountpoint: bd.mountpoint, connectionKey: key, connectionInfo: bd.connectionInfo };
    if (volumeId) out.volumeId = volumeId;
    return out;
  }

  /** Attaches in the guest's state (idempotent); returns the new state. */
  private async attachInState(state: GuestState, bd: BlockDeviceSpec): Promise<GuestState> {
    const mountpoint = this.checkMountpoint(bd.mountpoint);
    if (mountpoint === ROOT_DEVICE_NAME && state.rootDisk === 'local') throw this.fail(`${ROOT_DEVICE_NAME} is the local root disk of ${state.uuid}`, { uuid: state.uuid });
    const { problem, conn } = await this.connectProblem(bd.connectionInfo);
    if (problem || !conn) throw this.fail(`cannot connect volume: ${problem}`, { uuid: state.uuid, mountpoint });
    const key = connectionKeyOf(conn);
    const atMountpoint = state.volumes.find((v) => v.mountpoint === mountpoint);
    if (atMountpoint && atMountpoint.connectionKey !== key) throw this.fail(`${mountpoint} of ${state.uuid} is in use by another volume`, { uuid: state.uuid, mountpoint });
    const elsewhere = state.volumes.find((v) => v.connectionKey === key && v.mountpoint !== mountpoint);
    if (elsewhere) throw this.fail(`the volume is already attached to ${state.uuid} at ${elsewhere.mountpoint}`, { uuid: state.uuid, mountpoint });
    const { created } = await this.connect(bd.connectionInfo);
    if (atMountpoint) return state;
    const next = { ...state, volumes: [...state.volumes, this.attached(bd, key)] };
    try {
      await this.writeState(next);
    } catch (e) {
      if (created) await this.disconnectKey(key).catch(() => undefined);
      throw e;
    }
    return next;
  }

  async attachVolume(uuid: string, connectionInfo: Record<string, unknown>, mountpoint: string, volumeId?: string): Promise<AttachedVolume> {
    this.checkUuid(uuid);
    this.checkMountpoint(mountpoint);
    await this.ensureUp();
    return this.locked(async () => {
      const state = await this.definedState(uuid);
      const next = await this.attachInState(state, { mountpoint, connectionInfo, volumeId });
      return next.volumes.find((v) => v.mountpoint === mountpoint)!;
    });
  }

  async detachVolume(uuid: string, mountpoint: string): Promise<void> {
    this.checkUuid(uuid);
    this.checkMountpoint(mountpoint);
    await this.ensureUp();
    await this.locked(async () => {
      const state = await this.readState(uuid);
      const volume = state?.volumes.find((v) => v.mountpoint === mountpoint);
      if (!state || !volume) return;
      if (mountpoint === ROOT_DEVICE_NAME && state.defined) throw this.fail(`cannot detach the boot volume of ${uuid}`, { uuid, mountpoint });
      await this.disconnectKey(volume.connectionKey, { uuid, mountpoint });
      await this.writeState({ ...state, volumes: state.volumes.filter((v) => v.mountpoint !== mountpoint) });
    });
  }

  async listConnections(): Promise<HostConnection[]> {
    await this.ensureUp();
    const users = await this.users();
    const out: HostConnection[] = [];
    for (const name of await listVisible(join(this.dir, CONNECTIONS_DIR))) {
      if (!name.endsWith('.json')) continue;
      const entry = await readJson<ConnectionEntry>(join(this.dir, CONNECTIONS_DIR, name)).catch(() => undefined);
      if (!entry) continue;
      const real = await realpath(entry.devicePath).catch(() => undefined);
      const item: HostConnection = {
        key: entry.key,
        entryPath: join(this.dir, CONNECTIONS_DIR, name),
        devicePath: entry.devicePath,
        driverVolumeType: entry.driverVolumeType,
        reachable: real !== undefined && ((await statOrUndefined(real))?.isFile() ?? false),
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
    if (!entry) throw this.fail(`${what}: the volume is not connected to this host`, { key });
    let fh: FileHandle;
    try {
      fh = await open(entry.devicePath, 'r+');
    } catch (e) {
      throw this.fail(`${what}: cannot open ${entry.devicePath}: ${(e as Error).message}`, { key }, e);
    }
    return new FileBlockHandle(fh, (await fh.stat()).size, `${this.host} ${what}`);
  }

  async openConnection(connectionInfo: Record<string, unknown>): Promise<BlockHandle> {
    await this.ensureUp();
    const conn = normalizeConnectionInfo(connectionInfo);
    if (!conn.devicePath) throw this.fail('connection_info has no device_path');
    return this.openKey(connectionKeyOf({ ...conn, devicePath: conn.devicePath }), `connection ${conn.devicePath}`);
  }

  async openGuestDevice(uuid: string, device: string): Promise<BlockHandle> {
    this.checkUuid(uuid);
    this.checkMountpoint(device);
    await this.ensureUp();
    const state = await this.definedState(uuid);
    if (device === ROOT_DEVICE_NAME && state.rootDisk === 'local') {
      const fh = await open(join(this.guestDir(uuid), DISK_FILE), 'r+');
      return new FileBlockHandle(fh, (await fh.stat()).size, `${this.host} ${uuid} root disk`);
    }
    const volume = state.volumes.find((v) => v.mountpoint === device);
    if (!volume) throw this.fail(`guest ${uuid} has no device ${device}`, { uuid, device });
    return this.openKey(volume.connectionKey, `${uuid} ${device}`);
  }

  // ---- cold migration / resize ----------------------------------------------------------------

  async migrateDiskAndPowerOff(uuid: string, dest: ComputeHostRef, flavor: Flavor): Promise<void> {
    this.checkUuid(uuid);
    const destDir = this.peer(dest);
    const newFlavor = this.checkFlavor(flavor);
    await this.ensureUp();
    await this.locked(async () => {
      const state = await this.readState(uuid);
      if (!state) throw this.fail(`guest ${uuid} is not on this host`, { uuid });
      const m = state.migration;
      if (!state.defined && m?.kind === 'resize' && m.role === 'source' && m.peer === dest.host) return;
      if (!state.defined) throw this.fail(`guest ${uuid} is not defined on this host`, { uuid });
      if (await isHostDown(dest)) throw this.fail(`destination host ${dest.host} is down`, { uuid, dest: dest.host });
      if (await this.readState(uuid, destDir)) throw this.fail(`guest ${uuid} already exists on ${dest.host}`, { uuid, dest: dest.host });
      const disk = join(this.guestDir(uuid), DISK_FILE);
      if (state.rootDisk === 'local' && newFlavor.rootGb > 0 && (await this.diskBytes(uuid)) > newFlavor.rootGb * GIB) {
        throw this.fail(`cannot resize the root disk of ${uuid} down to ${newFlavor.rootGb} GiB`, { uuid, rootGb: newFlavor.rootGb });
      }
      if (state.powerState !== POWER_STATE.SHUTDOWN) await this.writeState({ ...state, powerState: POWER_STATE.SHUTDOWN });
      // The copy first: if it fails the guest is still here, powered off, with its volumes.
      const incoming = this.incomingDir(uuid, destDir);
      await removeTree(incoming);
      const staging = join(destDir, INCOMING_DIR, tempName(uuid));
      try {
        await mkdir(staging, { recursive: true });
        if (state.rootDisk === 'local') await sparseCopy(disk, join(staging, DISK_FILE));
        const record: IncomingMigration = { version: 1, uuid, kind: 'resize', source: this.host, rootDisk: state.rootDisk, flavor: state.flavor };
        if (state.imageRef !== undefined) record.imageRef = state.imageRef;
        await writeJsonAtomic(join(staging, MIGRATION_FILE), record);
        await rename(staging, incoming);
      } catch (e) {
        await removeTree(staging).catch(() => undefined);
        throw this.fail(`cannot copy the disk of ${uuid} to ${dest.host}: ${(e as Error).message}`, { uuid, dest: dest.host }, e);
      }
      for (const v of state.volumes) await this.disconnectKey(v.connectionKey, { uuid, mountpoint: v.mountpoint });
      await this.writeState({
        ...state,
        defined: false,
        powerState: POWER_STATE.SHUTDOWN,
        volumes: [],
        migration: { kind: 'resize', role: 'source', peer: dest.host, volumes: state.volumes, flavor: state.flavor },
      });
    });
  }

  async finishMigration(spec: Omit<GuestSpec, 'image'>, source: ComputeHostRef): Promise<GuestInfo> {
    this.checkSpec(spec);
    this.peer(source);
    await this.ensureUp();
    return this.locked(async () => {
      const existing = await this.readState(spec.uuid);
      if (existing) return this.respawnMigrated(existing, spec);
      const incoming = await this.readIncoming(spec.uuid);
      if (!incoming || incoming.kind !== 'resize' || incoming.source !== source.host) {
        throw this.fail(`no disk of ${spec.uuid} arrived from ${source.host} (migrate_disk_and_power_off has not run)`, { uuid: spec.uuid, source: source.host });
      }
      return this.build(spec, async () => incoming.rootDisk, { rootDisk: incoming.rootDisk, ...(incoming.imageRef !== undefined && spec.imageRef === undefined ? { imageRef: incoming.imageRef } : {}) }, this.incomingDir(spec.uuid));
    });
  }

  private async respawnMigrated(existing: GuestState, spec: Omit<GuestSpec, 'image'>): Promise<GuestInfo> {
    if (!existing.defined) throw this.fail(`guest ${spec.uuid} has kept disks on this host`, { uuid: spec.uuid });
    if (!sameFlavor(existing.flavor, spec.flavor)) throw this.fail(`guest ${spec.uuid} already exists with a different flavor`, { uuid: spec.uuid });
    let state = existing;
    for (const bd of spec.blockDevices ?? []) state = await this.attachInState(state, bd);
    return this.info(state);
  }

  async confirmMigration(uuid: string): Promise<void> {
    this.checkUuid(uuid);
    await this.ensureUp();
    await this.locked(async () => {
      const state = await this.readState(uuid);
      if (!state) return;
      if (state.defined) throw this.fail(`guest ${uuid} is defined on this host: there are no kept disks to remove`, { uuid });
      for (const v of state.volumes) await this.disconnectKey(v.connectionKey, { uuid });
      await removeTree(this.guestDir(uuid));
    });
  }

  async finishRevertMigration(uuid: string, options: { blockDevices?: BlockDeviceSpec[]; powerOn?: boolean } = {}): Promise<GuestInfo> {
    this.checkUuid(uuid);
    for (const bd of options.blockDevices ?? []) this.checkMountpoint(bd.mountpoint);
    await this.ensureUp();
    return this.locked(async () => {
      const state = await this.readState(uuid);
      if (!state) throw this.fail(`guest ${uuid} has no kept disks on this host`, { uuid });
      const devices = options.blockDevices ?? (state.migration?.volumes ?? []).map((v) => ({ mountpoint: v.mountpoint, connectionInfo: v.connectionInfo, volumeId: v.volumeId }));
      if (state.defined) {
        let s = state;
        for (const bd of devices) s = await this.attachInState(s, bd);
        return this.info(s);
      }
      const powerOn = options.powerOn ?? true;
      let next: GuestState = {
        ...state,
        defined: true,
        flavor: state.migration?.flavor ?? state.flavor,
        powerState: powerOn ? POWER_STATE.RUNNING : POWER_STATE.SHUTDOWN,
        bootCount: state.bootCount + (powerOn ? 1 : 0),
        volumes: [],
      };
      delete next.migration;
      for (const bd of devices) {
        next = { ...next, volumes: [...next.volumes, this.attached(bd, (await this.connect(bd.connectionInfo)).key)] };
      }
      await this.writeState(next);
      return this.info(next);
    });
  }

  // ---- live migration -------------------------------------------------------------------------

  async preLiveMigration(spec: Omit<GuestSpec, 'image'>, source: ComputeHostRef): Promise<LiveMigrateData> {
    this.checkSpec(spec);
    const sourceDir = this.peer(source);
    await this.ensureUp();
    return this.locked(async () => {
      const existing = await this.readState(spec.uuid);
      if (existing) throw this.fail(`guest ${spec.uuid} already exists on this host`, { uuid: spec.uuid });
      const sourceState = await this.readState(spec.uuid, sourceDir);
      if (!sourceState?.defined) throw this.fail(`guest ${spec.uuid} is not defined on ${source.host}`, { uuid: spec.uuid, source: source.host });
      const current = await this.readIncoming(spec.uuid);
      if (current && (current.kind !== 'live' || current.source !== source.host)) throw this.fail(`another migration of ${spec.uuid} is arriving`, { uuid: spec.uuid });
      const volumes: AttachedVolume[] = [];
      const made: string[] = [];
      const dir = this.incomingDir(spec.uuid);
      try {
        for (const bd of spec.blockDevices ?? []) {
          const { key, created } = await this.connect(bd.connectionInfo);
          if (created) made.push(key);
          volumes.push(this.attached(bd, key));
        }
        const record: IncomingMigration = { version: 1, uuid: spec.uuid, kind: 'live', source: source.host, rootDisk: sourceState.rootDisk, flavor: this.checkFlavor(spec.flavor), volumes };
        const imageRef = spec.imageRef ?? sourceState.imageRef;
        if (imageRef !== undefined) record.imageRef = imageRef;
        await writeJsonAtomic(join(dir, MIGRATION_FILE), record);
      } catch (e) {
        for (const key of made) await unlinkIfPresent(this.entryPath(key)).catch(() => undefined);
        if (!current) await removeTree(dir).catch(() => undefined);
        if (e instanceof DriverError) throw e;
        throw this.fail(`pre_live_migration of ${spec.uuid} failed: ${(e as Error).message}`, { uuid: spec.uuid }, e);
      }
      return {
        uuid: spec.uuid,
        sourceHost: source.host,
        destHost: this.host,
        rootDisk: sourceState.rootDisk,
        destConnections: Object.fromEntries(volumes.map((v) => [v.mountpoint, v.connectionKey])),
      };
    });
  }

  async liveMigration(uuid: string, dest: ComputeHostRef, options: LiveMigrationOptions = {}): Promise<void> {
    this.checkUuid(uuid);
    const destDir = this.peer(dest);
    await this.ensureUp();
    if (await isHostDown(dest)) throw this.fail(`destination host ${dest.host} is down`, { uuid, dest: dest.host });
    const chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
    const incomingDir = this.incomingDir(uuid, destDir);

    // 1. Check and mark (under the lock): the guest is here, the destination is prepared.
    const start = await this.locked(async () => {
      const state = await this.readState(uuid);
      const m = state?.migration;
      if (state && !state.defined && m?.kind === 'live' && m.role === 'source' && m.peer === dest.host) return { state, switched: true };
      if (!state?.defined) throw this.fail(`guest ${uuid} is not defined on this host`, { uuid });
      if (m && !(m.kind === 'live' && m.peer === dest.host)) throw this.fail(`guest ${uuid} is already migrating (${m.kind} with ${m.peer})`, { uuid });
      const incoming = await this.readIncoming(uuid, destDir);
      if (!incoming || incoming.kind !== 'live' || incoming.source !== this.host) {
        throw this.fail(`pre_live_migration of ${uuid} has not run on ${dest.host}`, { uuid, dest: dest.host });
      }
      const here = state.volumes.map((v) => v.mountpoint).sort().join(',');
      const there = (incoming.volumes ?? []).map((v) => v.mountpoint).sort().join(',');
      if (here !== there) throw this.fail(`the destination's volumes (${there || 'none'}) differ from the guest's (${here || 'none'})`, { uuid, dest: dest.host });
      const marked: GuestState = { ...state, migration: { kind: 'live', role: 'source', peer: dest.host } };
      await this.writeState(marked);
      return { state: marked, switched: false };
    });
    if (start.switched) {
      // A retry after the source was released: finish publishing the destination if it is not yet.
      await this.publishDestination(uuid, destDir, dest.host);
      return;
    }

    // 2. Pre-copy, outside the lock: the guest keeps running on the source.
    const src = join(this.guestDir(uuid), DISK_FILE);
    const part = join(incomingDir, `.disk-part`);
    let lastPercent = -1;
    const report = (p: MigrationProgress) => {
      if (p.percent < lastPercent) return;
      lastPercent = p.percent;
      options.onProgress?.(p);
    };
    const unmark = async () => {
      await unlinkIfPresent(part).catch(() => undefined);
      await this.locked(async () => {
        const s = await this.readState(uuid);
        if (s?.defined && s.migration?.kind === 'live') {
          const rest = { ...s };
          delete rest.migration;
          await this.writeState(rest);
        }
      });
    };
    try {
      if (start.state.rootDisk === 'local') {
        await unlinkIfPresent(part);
        await sparseCopy(src, part, {
          chunkBytes,
          signal: options.signal,
          onChunk: (done, total) => report({ phase: 'disk', processedBytes: done, totalBytes: total, percent: Math.min(99, Math.floor((done / total) * 100)) }),
        });
      }
      if (options.signal?.aborted) throw new CopyAborted();
    } catch (e) {
      await unmark();
      if (e instanceof CopyAborted) throw this.fail(`live migration of ${uuid} to ${dest.host} was aborted; the guest stays on ${this.host}`, { uuid, dest: dest.host, aborted: true });
      throw this.fail(`live migration of ${uuid} to ${dest.host} failed: ${(e as Error).message}`, { uuid, dest: dest.host }, e);
    }

    // 3. Stop-and-copy and switch-over (under the lock): what changed meanwhile is copied again,
    // then the source lets the guest go and the destination defines it.
    try {
      await this.locked(async () => {
        const state = await this.readState(uuid);
        if (!state?.defined || state.migration?.kind !== 'live' || state.migration.peer !== dest.host) {
          throw this.fail(`guest ${uuid} changed during its live migration`, { uuid });
        }
        const incoming = await this.readIncoming(uuid, destDir);
        if (!incoming) throw this.fail(`the destination ${dest.host} dropped the migration of ${uuid}`, { uuid });
        if (options.signal?.aborted) throw new CopyAborted();
        const totalBytes = state.rootDisk === 'local' ? await this.diskBytes(uuid) : 0;
        if (state.rootDisk === 'local') {
          await syncChangedChunks(src, part, chunkBytes);
          await rename(part, join(incomingDir, DISK_FILE));
        }
        const destState: GuestState = {
          version: 1,
          uuid,
          defined: true,
          powerState: state.powerState,
          flavor: incoming.flavor ?? state.flavor,
          rootDisk: state.rootDisk,
          volumes: incoming.volumes ?? [],
          bootCount: state.bootCount,
          migration: { kind: 'live', role: 'dest', peer: this.host },
        };
        if (incoming.imageRef ?? state.imageRef) destState.imageRef = incoming.imageRef ?? state.imageRef;
        await this.writeState(destState, incomingDir);
        await this.writeState({ ...state, defined: false, powerState: POWER_STATE.SHUTDOWN, migration: { kind: 'live', role: 'source', peer: dest.host } });
        await this.publishDestination(uuid, destDir, dest.host);
        report({ phase: 'complete', processedBytes: totalBytes, totalBytes, percent: 100 });
      });
    } catch (e) {
      const s = await this.readState(uuid).catch(() => undefined);
      if (s?.defined) await unmark();
      if (e instanceof CopyAborted) throw this.fail(`live migration of ${uuid} to ${dest.host} was aborted; the guest stays on ${this.host}`, { uuid, dest: dest.host, aborted: true });
      if (e instanceof DriverError) throw e;
      throw this.fail(`live migration of ${uuid} to ${dest.host} failed at the switch-over: ${(e as Error).message}`, { uuid, dest: dest.host }, e);
    }
  }

  /** Moves the prepared `incoming/<uuid>` (with its state.json) to `guests/<uuid>` on the destination. */
  private async publishDestination(uuid: string, destDir: string, destHost: string): Promise<void> {
    const incomingDir = this.incomingDir(uuid, destDir);
    if (await this.readState(uuid, destDir)) return;
    if (!(await statOrUndefined(join(incomingDir, STATE_FILE)))) throw this.fail(`the destination ${destHost} has no prepared guest ${uuid}`, { uuid, dest: destHost });
    await unlinkIfPresent(join(incomingDir, MIGRATION_FILE));
    await mkdir(join(destDir, GUESTS_DIR), { recursive: true });
    await rename(incomingDir, join(destDir, GUESTS_DIR, uuid));
  }

  async postLiveMigration(uuid: string): Promise<void> {
    this.checkUuid(uuid);
    await this.ensureUp();
    await this.locked(async () => {
      const state = await this.readState(uuid);
      if (!state) return;
      if (state.defined) throw this.fail(`guest ${uuid} is still defined on this host: the live migration did not switch over`, { uuid });
      for (const v of state.volumes) await this.disconnectKey(v.connectionKey, { uuid });
      await removeTree(this.guestDir(uuid));
    });
  }

  async postLiveMigrationAtDestination(uuid: string): Promise<GuestInfo> {
    this.checkUuid(uuid);
    await this.ensureUp();
    return this.locked(async () => {
      const state = await this.definedState(uuid);
      if (!state.migration) return this.info(state);
      const next = { ...state };
      delete next.migration;
      await this.writeState(next);
      return this.info(next);
    });
  }

  async rollbackLiveMigrationAtDestination(uuid: string): Promise<void> {
    this.checkUuid(uuid);
    await this.ensureUp();
    await this.locked(async () => {
      const state = await this.readState(uuid);
      if (state?.defined) throw this.fail(`guest ${uuid} already runs on this host: the live migration switched over, nothing to roll back`, { uuid });
      await this.removeIncoming(uuid);
    });
  }

  // ---- evacuate -------------------------------------------------------------------------------

  async spawnEvacuated(spec: GuestSpec, source: ComputeHostRef): Promise<GuestInfo> {
    this.checkSpec(spec);
    const sourceDir = this.peer(source);
    await this.ensureUp();
    try {
      if (!(await isHostDown(source, { missingIsDown: true }))) throw this.fail(`source host ${source.host} is up: refusing to evacuate ${spec.uuid}`, { uuid: spec.uuid, source: source.host });
      return await this.locked(async () => {
        const existing = await this.readState(spec.uuid);
        if (existing) {
          if (existing.evacuatedFrom !== source.host) throw this.fail(`guest ${spec.uuid} already exists on this host`, { uuid: spec.uuid });
          return this.respawnMigrated(existing, spec);
        }
        const sourceState = await this.readState(spec.uuid, sourceDir).catch(() => undefined);
        const sourceDisk = join(sourceDir, GUESTS_DIR, spec.uuid, DISK_FILE);
        const diskReadable = sourceState?.rootDisk === 'local' && (await statOrUndefined(sourceDisk))?.isFile() === true;
        const volumeBacked = sourceState ? sourceState.rootDisk === 'volume' : !spec.image && (spec.blockDevices ?? []).some((bd) => bd.mountpoint === ROOT_DEVICE_NAME);
        if (volumeBacked && !(spec.blockDevices ?? []).some((bd) => bd.mountpoint === ROOT_DEVICE_NAME)) {
          throw this.fail(`volume-backed guest ${spec.uuid} needs its boot volume at ${ROOT_DEVICE_NAME}`, { uuid: spec.uuid });
        }
        if (!volumeBacked && !diskReadable && !spec.image) {
          throw this.fail(`the root disk of ${spec.uuid} on ${source.host} is unreadable and no image was given`, { uuid: spec.uuid, source: source.host });
        }
        const extra: Partial<GuestState> = { evacuatedFrom: source.host };
        const imageRef = spec.imageRef ?? sourceState?.imageRef;
        return this.build({ ...spec, ...(imageRef !== undefined ? { imageRef } : {}) }, async (dir) => {
          if (volumeBacked) return 'volume';
          if (diskReadable) await sparseCopy(sourceDisk, join(dir, DISK_FILE));
          else await this.writeImage(spec.image!, join(dir, DISK_FILE), spec);
          return 'local';
        }, extra);
      });
    } finally {
      discardUnusedStream(spec.image);
    }
  }

  /** Every file under this host's directory (tests and the audit: what a host holds). */
  async listFiles(): Promise<string[]> {
    const out: string[] = [];
    const walk = async (dir: string, rel: string) => {
      for (const ent of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
        const p = rel ? `${rel}/${ent.name}` : ent.name;
        if (ent.isDirectory()) await walk(join(dir, ent.name), p);
        else out.push(p);
      }
    };
    await walk(this.dir, '');
    return out.sort();
  }
}

/** A Readable passed as an image and not consumed (idempotent spawn, failure before the copy) is destroyed, not leaked. */
function discardUnusedStream(image: ImageSource | undefined): void {
  if (image && 'stream' in image && typeof image.stream !== 'function' && !consumed.has(image.stream)) image.stream.destroy();
}

/** Image streams a spawn has read from. */
const consumed = new WeakSet<Readable>();
