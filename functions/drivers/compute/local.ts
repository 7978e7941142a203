/**
 * The local compute driver: a compute host is a directory, a guest a root disk file plus a state
 * file, a volume connection an entry the host opens. The embedded stack's default and what the
 * tests run. Its layout is in local/layout.ts (and docs/compute-driver.md); its parts:
 *
 *   local/host.ts            the host's directory, lock, checks and guest records
 *   local/connections.ts     volume connections and the devices a guest sees
 *   local/lifecycle.ts       spawn, destroy, power, snapshot
 *   local/cold-migration.ts  migrate_disk_and_power_off, finish, confirm, revert
 *   local/live-migration.ts  pre, live, post and rollback of a live migration
 *   local/evacuate.ts        rebuild of a down host's guest here
 *
 * Names starting with '.' are temp files. Every directory and state file is published whole
 * (temp + rename), so a crash leaves either the old or the new state and at most a temp file.
 * The hosts of one root see each other's directories: a peer host is passed by name and found
 * beside this one; migrations copy into the peer's `incoming/`, and an evacuation reads the down
 * source's disk (shared storage).
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type {
  AttachedVolume,
  BlockDeviceSpec,
  BlockHandle,
  CanConnect,
  ComputeDriver,
  ComputeDriverCapabilities,
  ComputeHostConfig,
  ConnectResult,
  EvacuationSource,
  Flavor,
  GuestInfo,
  GuestSpec,
  HostConnection,
  HostInfo,
  LiveMigrateData,
  LiveMigrationOptions,
  PowerState,
  SnapshotFormat,
  SnapshotImage,
} from './driver.js';
import { POWER_STATE } from './driver.js';
import { ColdMigration } from './local/cold-migration.js';
import { HostConnections } from './local/connections.js';
import { Evacuation } from './local/evacuate.js';
import { isErrno } from './local/files.js';
import { LocalHost } from './local/host.js';
import { LOCAL_VOLUME_TYPE } from './local/layout.js';
import { GuestLifecycle } from './local/lifecycle.js';
import { LiveMigration } from './local/live-migration.js';

export { connectionKeyOf, normalizeConnectionInfo } from './local/connections.js';
export { GIB, HYPERVISOR_TYPE, LOCAL_COMPUTE_DRIVER_VERSION, LOCAL_VOLUME_TYPE, setHostDown } from './local/layout.js';
export { localCopyStats, resetLocalCopyStats } from './local/files.js';

/** What the local driver can do: only its own volume type connects; it live-migrates and swaps volumes. */
export const LOCAL_COMPUTE_CAPABILITIES: ComputeDriverCapabilities = Object.freeze({
  volumeTypes: Object.freeze([LOCAL_VOLUME_TYPE]),
  liveMigration: true,
  swapVolume: true,
});

export class LocalComputeDriver implements ComputeDriver {
  readonly host: string;
  /** `<root>/<host>` */
  readonly dir: string;
  private readonly h: LocalHost;
  private readonly conns: HostConnections;
  private readonly lifecycle: GuestLifecycle;
  private readonly cold: ColdMigration;
  private readonly live: LiveMigration;
  private readonly evacuation: Evacuation;

  constructor(config: ComputeHostConfig) {
    this.h = new LocalHost(config);
    this.host = this.h.host;
    this.dir = this.h.dir;
    this.conns = new HostConnections(this.h);
    this.lifecycle = new GuestLifecycle(this.h, this.conns);
    this.cold = new ColdMigration(this.h, this.conns, this.lifecycle);
    this.live = new LiveMigration(this.h, this.conns, this.lifecycle);
    this.evacuation = new Evacuation(this.h, this.lifecycle);
  }

  capabilities(): ComputeDriverCapabilities {
    return LOCAL_COMPUTE_CAPABILITIES;
  }

  // ---- host -----------------------------------------------------------------------------------

  async getHostInfo(): Promise<HostInfo> {
    const up = !(await this.h.isDown());
    if (up) await this.h.ensureUp();
    return {
      ...this.h.hostRecord(),
      hypervisorHostname: this.host,
      up,
      guests: (await this.h.allStates()).filter((s) => s.defined).map((s) => s.uuid),
    };
  }

  async listGuests(): Promise<GuestInfo[]> {
    await this.h.ensureUp();
    return Promise.all((await this.h.allStates()).filter((s) => s.defined).map((s) => this.h.info(s)));
  }

  async listKeptDisks(): Promise<GuestInfo[]> {
    await this.h.ensureUp();
    return Promise.all((await this.h.allStates()).filter((s) => !s.defined).map((s) => this.h.info(s)));
  }

  async getGuest(uuid: string): Promise<GuestInfo | undefined> {
    this.h.checkUuid(uuid);
    await this.h.ensureUp();
    const state = await this.h.readState(uuid);
    return state && this.h.info(state);
  }

  /** Every file under this host's directory (tests and the audit: what a host holds). */
  async listFiles(): Promise<string[]> {
    const out: string[] = [];
    const walk = async (dir: string, rel: string) => {
      let entries;
      try {
        entries = await readdir(dir, { withFileTypes: true });
      } catch (e) {
        // A host never started (or removed) holds nothing; a directory removed while walking neither.
        if (isErrno(e, 'ENOENT', 'ENOTDIR')) return;
        throw e;
      }
      for (const ent of entries) {
        const p = rel ? `${rel}/${ent.name}` : ent.name;
        if (ent.isDirectory()) await walk(join(dir, ent.name), p);
        else out.push(p);
      }
    };
    await walk(this.dir, '');
    return out.sort();
  }

  // ---- lifecycle ------------------------------------------------------------------------------

  spawn(spec: GuestSpec): Promise<GuestInfo> {
    return this.lifecycle.spawn(spec);
  }
  destroy(uuid: string, options?: { keepDisks?: boolean }): Promise<void> {
    return this.lifecycle.destroy(uuid, options);
  }
  powerOff(uuid: string): Promise<void> {
    return this.lifecycle.powerOff(uuid);
  }
  powerOn(uuid: string): Promise<void> {
    return this.lifecycle.powerOn(uuid);
  }
  reboot(uuid: string, type?: 'SOFT' | 'HARD'): Promise<void> {
    return this.lifecycle.reboot(uuid, type);
  }
  pause(uuid: string): Promise<void> {
    return this.lifecycle.transition(uuid, 'pause', [POWER_STATE.RUNNING], POWER_STATE.PAUSED);
  }
  unpause(uuid: string): Promise<void> {
    return this.lifecycle.transition(uuid, 'unpause', [POWER_STATE.PAUSED], POWER_STATE.RUNNING);
  }
  suspend(uuid: string): Promise<void> {
    return this.lifecycle.transition(uuid, 'suspend', [POWER_STATE.RUNNING, POWER_STATE.PAUSED], POWER_STATE.SUSPENDED);
  }
  resume(uuid: string): Promise<void> {
    return this.lifecycle.transition(uuid, 'resume', [POWER_STATE.SUSPENDED], POWER_STATE.RUNNING);
  }
  getPowerState(uuid: string): Promise<PowerState> {
    return this.lifecycle.getPowerState(uuid);
  }
  snapshot(uuid: string, imageId: string, options?: { diskFormat?: SnapshotFormat }): Promise<SnapshotImage> {
    return this.lifecycle.snapshot(uuid, imageId, options);
  }

  // ---- volume connections (os-brick's role) ---------------------------------------------------

  canConnectVolume(connectionInfo: Record<string, unknown>): Promise<CanConnect> {
    return this.conns.canConnectVolume(connectionInfo);
  }
  connectVolume(connectionInfo: Record<string, unknown>): Promise<ConnectResult> {
    return this.conns.connectVolume(connectionInfo);
  }
  disconnectVolume(connectionInfo: Record<string, unknown>, options?: { force?: boolean }): Promise<void> {
    return this.conns.disconnectVolume(connectionInfo, options);
  }
  attachVolume(uuid: string, connectionInfo: Record<string, unknown>, mountpoint: string, volumeId?: string): Promise<AttachedVolume> {
    return this.conns.attachVolume(uuid, connectionInfo, mountpoint, volumeId);
  }
  detachVolume(uuid: string, mountpoint: string): Promise<void> {
    return this.conns.detachVolume(uuid, mountpoint);
  }
  listConnections(): Promise<HostConnection[]> {
    return this.conns.listConnections();
  }
  openConnection(connectionInfo: Record<string, unknown>): Promise<BlockHandle> {
    return this.conns.openConnection(connectionInfo);
  }
  openGuestDevice(uuid: string, device: string): Promise<BlockHandle> {
    return this.conns.openGuestDevice(uuid, device);
  }

  // ---- cold migration / resize ----------------------------------------------------------------

  migrateDiskAndPowerOff(uuid: string, destHost: string, flavor: Flavor): Promise<void> {
    return this.cold.migrateDiskAndPowerOff(uuid, destHost, flavor);
  }
  finishMigration(spec: Omit<GuestSpec, 'image'>, sourceHost: string): Promise<GuestInfo> {
    return this.cold.finishMigration(spec, sourceHost);
  }
  confirmMigration(uuid: string): Promise<void> {
    return this.cold.confirmMigration(uuid);
  }
  finishRevertMigration(uuid: string, options?: { blockDevices?: BlockDeviceSpec[]; powerOn?: boolean }): Promise<GuestInfo> {
    return this.cold.finishRevertMigration(uuid, options);
  }

  // ---- live migration -------------------------------------------------------------------------

  preLiveMigration(spec: Omit<GuestSpec, 'image'>, sourceHost: string): Promise<LiveMigrateData> {
    return this.live.preLiveMigration(spec, sourceHost);
  }
  liveMigration(uuid: string, destHost: string, options?: LiveMigrationOptions): Promise<void> {
    return this.live.liveMigration(uuid, destHost, options);
  }
  postLiveMigration(uuid: string): Promise<void> {
    return this.live.postLiveMigration(uuid);
  }
  postLiveMigrationAtDestination(uuid: string): Promise<GuestInfo> {
    return this.live.postLiveMigrationAtDestination(uuid);
  }
  rollbackLiveMigrationAtDestination(uuid: string): Promise<void> {
    return this.live.rollbackLiveMigrationAtDestination(uuid);
  }

  // ---- evacuate -------------------------------------------------------------------------------

  spawnEvacuated(spec: GuestSpec, source: EvacuationSource): Promise<GuestInfo> {
    return this.evacuation.spawnEvacuated(spec, source);
  }
}
