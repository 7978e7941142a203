/**
 * One local compute host's state: its directory, the lock every mutation takes, the checks of what
 * callers pass in, and the guest and incoming-migration records. The driver's parts (connections,
 * lifecycle, migrations, evacuation) all work through one LocalHost.
 */
import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { DriverError } from '../../../core/errors.js';
import { logger } from '../../../core/logger.js';
import type { ComputeHostConfig, Flavor, GuestInfo, GuestSpec, ImageSource } from '../driver.js';
import { listVisible, readJson, serialized, statOrUndefined, writeJsonAtomic } from './files.js';
import {
  CONNECTIONS_DIR,
  DISK_FILE,
  DOWN_FLAG,
  GUESTS_DIR,
  HOST_FILE,
  HYPERVISOR_TYPE,
  INCOMING_DIR,
  LOCAL_COMPUTE_DRIVER_VERSION,
  MIGRATION_FILE,
  MOUNTPOINT,
  STATE_FILE,
  hostDir,
  isGuestUuid,
  isRecord,
  type GuestState,
  type IncomingMigration,
} from './layout.js';

export function sameFlavor(a: Flavor, b: Flavor): boolean {
  return a.vcpus === b.vcpus && a.memoryMb === b.memoryMb && a.rootGb === b.rootGb;
}

export class LocalHost {
  readonly host: string;
  /** `<root>/<host>` */
  readonly dir: string;
  private readonly root: string;

  constructor(readonly config: ComputeHostConfig) {
    this.dir = hostDir(config);
    this.host = config.host;
    this.root = resolve(config.root);
    for (const key of ['vcpus', 'memoryMb', 'diskGb'] as const) {
      if (!Number.isInteger(config[key]) || config[key] < 0) throw this.fail(`invalid capacity ${key} ${JSON.stringify(config[key])}`, { [key]: config[key] });
    }
  }

  // ---- plumbing -------------------------------------------------------------------------------

  fail(message: string, context: Record<string, unknown> = {}, cause?: unknown): DriverError {
    return new DriverError(`compute host ${this.host}: ${message}`, { cause, context: { host: this.host, ...context } });
  }

  /** One mutation of this host at a time (in this process). */
  locked<T>(fn: () => Promise<T>): Promise<T> {
    return serialized(this.dir, fn);
  }

  checkUuid(uuid: unknown): string {
    if (!isGuestUuid(uuid)) throw this.fail(`invalid guest uuid ${JSON.stringify(uuid)}`, { uuid });
    return uuid;
  }

  checkMountpoint(mountpoint: unknown): string {
    if (typeof mountpoint !== 'string' || !MOUNTPOINT.test(mountpoint)) throw this.fail(`invalid mountpoint ${JSON.stringify(mountpoint)}`, { mountpoint });
    return mountpoint;
  }

  checkFlavor(flavor: Flavor): Flavor {
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

  checkSpec(spec: Omit<GuestSpec, 'image'> & { image?: ImageSource }): void {
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

  /**
   * The directory of the other host of a migration, known by name only: a valid name, not this
   * host, beside this host under the same root (the local hosts' shared storage).
   */
  peer(host: string): string {
    const dir = hostDir({ host, root: this.root });
    if (dir === this.dir) throw this.fail(`the peer host is this host (${host})`, { peer: host });
    return dir;
  }

  guestDir(uuid: string): string {
    return join(this.dir, GUESTS_DIR, uuid);
  }

  incomingDir(uuid: string, base = this.dir): string {
    return join(base, INCOMING_DIR, uuid);
  }

  async isDown(): Promise<boolean> {
    return this.config.down === true || (await statOrUndefined(join(this.dir, DOWN_FLAG))) !== undefined;
  }

  /** Every call but getHostInfo starts here: a down host answers nothing. Also creates the host's tree. */
  async ensureUp(): Promise<void> {
    if (await this.isDown()) throw this.fail('the host is down', { down: true });
    const wanted = this.hostRecord();
    const current = await this.readRewritable<Record<string, unknown>>(join(this.dir, HOST_FILE), 'host record');
    if (JSON.stringify(current) !== JSON.stringify(wanted)) await writeJsonAtomic(join(this.dir, HOST_FILE), wanted);
    for (const d of [GUESTS_DIR, INCOMING_DIR, CONNECTIONS_DIR]) await mkdir(join(this.dir, d), { recursive: true });
  }

  /**
   * Reads a record this driver rewrites whole from what it knows (host.json from the config, a
   * connection entry from connection_info): one that does not parse (edited by hand) is logged and
   * reads as absent, so the caller writes it again. Any other read failure throws.
   */
  async readRewritable<T>(path: string, what: string): Promise<T | undefined> {
    try {
      return await readJson<T>(path);
    } catch (e) {
      if (!(e instanceof SyntaxError)) throw e;
      logger.warn(`compute host ${this.host}: unparsable ${what} is rewritten`, { host: this.host, path, error: e });
      return undefined;
    }
  }

  hostRecord() {
    return {
      host: this.host,
      hypervisorType: HYPERVISOR_TYPE,
      driverVersion: LOCAL_COMPUTE_DRIVER_VERSION,
      vcpus: this.config.vcpus,
      memoryMb: this.config.memoryMb,
      diskGb: this.config.diskGb,
    };
  }

  // ---- records --------------------------------------------------------------------------------

  /** A guest's state on this host (or on a peer, `base` = its directory); undefined when it has none. */
  async readState(uuid: string, base = this.dir): Promise<GuestState | undefined> {
    try {
      return await readJson<GuestState>(join(base, GUESTS_DIR, uuid, STATE_FILE));
    } catch (e) {
      throw this.fail(`unreadable state of guest ${uuid}: ${(e as Error).message}`, { uuid }, e);
    }
  }

  async writeState(state: GuestState, dir = this.guestDir(state.uuid)): Promise<void> {
    await writeJsonAtomic(join(dir, STATE_FILE), state);
  }

  /** An incoming migration's record on this host (or a peer); undefined when none is arriving. */
  async readIncoming(uuid: string, base = this.dir): Promise<IncomingMigration | undefined> {
    try {
      return await readJson<IncomingMigration>(join(this.incomingDir(uuid, base), MIGRATION_FILE));
    } catch (e) {
      throw this.fail(`unreadable incoming migration of guest ${uuid}: ${(e as Error).message}`, { uuid, incoming: true }, e);
    }
  }

  async diskBytes(uuid: string, base = this.dir): Promise<number> {
    return (await statOrUndefined(join(base, GUESTS_DIR, uuid, DISK_FILE)))?.size ?? 0;
  }

  async info(state: GuestState): Promise<GuestInfo> {
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

  async definedState(uuid: string): Promise<GuestState> {
    const state = await this.readState(uuid);
    if (!state?.defined) throw this.fail(`guest ${uuid} is not defined on this host`, { uuid });
    return state;
  }

  async allStates(): Promise<GuestState[]> {
    const out: GuestState[] = [];
    for (const name of await listVisible(join(this.dir, GUESTS_DIR))) {
      if (!isGuestUuid(name)) continue;
      const state = await this.readState(name);
      if (state) out.push(state);
    }
    return out;
  }

  /** uuids with an incoming migration on this host. */
  async incomingUuids(): Promise<string[]> {
    return (await listVisible(join(this.dir, INCOMING_DIR))).filter(isGuestUuid);
  }
}
