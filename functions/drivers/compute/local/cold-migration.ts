/**
 * Cold migration and resize between local hosts of one root (Nova's migrate_disk_and_power_off,
 * finish_migration, confirm_migration, finish_revert_migration): the source copies the root disk
 * into the destination's `incoming/<uuid>` and keeps its own disks until confirm or revert.
 */
import { mkdir, rename } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { POWER_STATE, type BlockDeviceSpec, type Flavor, type GuestInfo, type GuestSpec } from '../driver.js';
import type { HostConnections } from './connections.js';
import { fsyncDirectory, removeTree, sparseCopy, tempName, writeJsonAtomic } from './files.js';
import type { LocalHost } from './host.js';
import { DISK_FILE, GIB, INCOMING_DIR, MIGRATION_FILE, isPeerDown, type GuestState, type IncomingMigration } from './layout.js';
import type { GuestLifecycle } from './lifecycle.js';

export class ColdMigration {
  constructor(
    private readonly h: LocalHost,
    private readonly conns: HostConnections,
    private readonly lifecycle: GuestLifecycle,
  ) {}

  async migrateDiskAndPowerOff(uuid: string, destHost: string, flavor: Flavor): Promise<void> {
    this.h.checkUuid(uuid);
    const destDir = this.h.peer(destHost);
    const newFlavor = this.h.checkFlavor(flavor);
    await this.h.ensureUp();
    await this.h.locked(async () => {
      const state = await this.h.readState(uuid);
      if (!state) throw this.h.fail(`guest ${uuid} is not on this host`, { uuid });
      const m = state.migration;
      if (!state.defined && m?.kind === 'resize' && m.role === 'source' && m.peer === destHost) return;
      if (!state.defined) throw this.h.fail(`guest ${uuid} is not defined on this host`, { uuid });
      if (await isPeerDown(destDir)) throw this.h.fail(`destination host ${destHost} is down`, { uuid, dest: destHost });
      if (await this.h.readState(uuid, destDir)) throw this.h.fail(`guest ${uuid} already exists on ${destHost}`, { uuid, dest: destHost });
      const disk = join(this.h.guestDir(uuid), DISK_FILE);
      if (state.rootDisk === 'local' && newFlavor.rootGb > 0 && (await this.h.diskBytes(uuid)) > newFlavor.rootGb * GIB) {
        throw this.h.fail(`cannot resize the root disk of ${uuid} down to ${newFlavor.rootGb} GiB`, { uuid, rootGb: newFlavor.rootGb });
      }
      if (state.powerState !== POWER_STATE.SHUTDOWN) await this.h.writeState({ ...state, powerState: POWER_STATE.SHUTDOWN });
      // The copy first: if it fails the guest is still here, powered off, with its volumes.
      const incoming = this.h.incomingDir(uuid, destDir);
      await removeTree(incoming);
      const staging = join(destDir, INCOMING_DIR, tempName(uuid));
      try {
        await mkdir(staging, { recursive: true });
        if (state.rootDisk === 'local') await sparseCopy(disk, join(staging, DISK_FILE));
        const record: IncomingMigration = { version: 1, uuid, kind: 'resize', source: this.h.host, rootDisk: state.rootDisk, flavor: state.flavor };
        if (state.imageRef !== undefined) record.imageRef = state.imageRef;
        await writeJsonAtomic(join(staging, MIGRATION_FILE), record);
        // The copy is recorded done once this returns (the source's state, then the flow's): the
        // staging directory's names and its rename must survive a power loss, not only the bytes.
        await fsyncDirectory(staging);
        await rename(staging, incoming);
        await fsyncDirectory(dirname(incoming));
      } catch (e) {
        await this.lifecycle.removeLeftover(staging, uuid);
        throw this.h.fail(`cannot copy the disk of ${uuid} to ${destHost}: ${(e as Error).message}`, { uuid, dest: destHost }, e);
      }
      for (const v of state.volumes) await this.conns.disconnectKey(v.connectionKey, { uuid, mountpoint: v.mountpoint });
      await this.h.writeState({
        ...state,
        defined: false,
        powerState: POWER_STATE.SHUTDOWN,
        volumes: [],
        migration: { kind: 'resize', role: 'source', peer: destHost, volumes: state.volumes, flavor: state.flavor },
      });
    });
  }

  async finishMigration(spec: Omit<GuestSpec, 'image'>, sourceHost: string): Promise<GuestInfo> {
    this.h.checkSpec(spec);
    this.h.peer(sourceHost);
    await this.h.ensureUp();
    return this.h.locked(async () => {
      const existing = await this.h.readState(spec.uuid);
      if (existing) return this.lifecycle.respawnMigrated(existing, spec);
      const incoming = await this.h.readIncoming(spec.uuid);
      if (!incoming || incoming.kind !== 'resize' || incoming.source !== sourceHost) {
        throw this.h.fail(`no disk of ${spec.uuid} arrived from ${sourceHost} (migrate_disk_and_power_off has not run)`, { uuid: spec.uuid, source: sourceHost });
      }
      const extra: Partial<GuestState> = { rootDisk: incoming.rootDisk, ...(incoming.imageRef !== undefined && spec.imageRef === undefined ? { imageRef: incoming.imageRef } : {}) };
      return this.lifecycle.build(spec, async () => incoming.rootDisk, extra, this.h.incomingDir(spec.uuid));
    });
  }

  async confirmMigration(uuid: string): Promise<void> {
    await this.lifecycle.removeReleased(uuid, `guest ${uuid} is defined on this host: there are no kept disks to remove`);
  }

  async finishRevertMigration(uuid: string, options: { blockDevices?: BlockDeviceSpec[]; powerOn?: boolean } = {}): Promise<GuestInfo> {
    this.h.checkUuid(uuid);
    for (const bd of options.blockDevices ?? []) this.h.checkMountpoint(bd.mountpoint);
    await this.h.ensureUp();
    return this.h.locked(async () => {
      const state = await this.h.readState(uuid);
      if (!state) throw this.h.fail(`guest ${uuid} has no kept disks on this host`, { uuid });
      const devices = options.blockDevices ?? (state.migration?.volumes ?? []).map((v) => ({ mountpoint: v.mountpoint, connectionInfo: v.connectionInfo, volumeId: v.volumeId }));
      if (state.defined) {
        let s = state;
        for (const bd of devices) s = await this.conns.attachInState(s, bd);
        return this.h.info(s);
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
        next = { ...next, volumes: [...next.volumes, this.conns.attached(bd, (await this.conns.connect(bd.connectionInfo)).key)] };
      }
      await this.h.writeState(next);
      return this.h.info(next);
    });
  }
}
