/**
 * What every compute driver must do (docs/drivers.md "Compute drivers"), as vitest tests. A driver
 * kind runs it from test/unit/compute-driver-contract.test.ts with a harness that makes two fresh
 * hosts of that driver and exports volumes to them the way its volume driver would.
 *
 * Only the ComputeDriver interface is used here: nothing about where a driver keeps things.
 */
import { Readable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import { POWER_STATE, type ComputeDriver, type Flavor } from '../../functions/drivers/compute/driver.js';

export interface ComputeDriverHarness {
  /** A fresh, up host with no guests. */
  driver: ComputeDriver;
  /** A second fresh, up host the first can migrate to (and evacuate from). */
  peer: ComputeDriver;
  /** Bytes of a bootable image (at least 4 KiB). */
  image: Uint8Array;
  /**
   * Exports a volume (made on first use, at least 1 MiB) to `host` and returns the connection_info
   * Cinder would give that host: Nova's nested `{driver_volume_type, data, serial}` shape, with a
   * driver_volume_type the driver declares.
   */
  exportVolume(volumeId: string, host: string): Promise<Record<string, unknown>>;
  /** Called after each test. */
  cleanup(): Promise<void>;
}

const UUID_A = 'c0c0c0c0-0000-4000-8000-00000000000a';
const UUID_B = 'c0c0c0c0-0000-4000-8000-00000000000b';
const VOL_1 = 'c1c1c1c1-2222-4333-8444-555555555501';
const VOL_2 = 'c1c1c1c1-2222-4333-8444-555555555502';
const SMALL: Flavor = { vcpus: 1, memoryMb: 512, rootGb: 0 };

export async function readDevice(driver: ComputeDriver, uuid: string, device: string, pos: number, len: number): Promise<Buffer> {
  const h = await driver.openGuestDevice(uuid, device);
  try {
    return await h.read(pos, len);
  } finally {
    await h.close();
  }
}

export async function writeDevice(driver: ComputeDriver, uuid: string, device: string, pos: number, data: Buffer): Promise<void> {
  const h = await driver.openGuestDevice(uuid, device);
  try {
    await h.write(pos, data);
  } finally {
    await h.close();
  }
}

export function describeComputeDriverContract(name: string, makeDriver: () => Promise<ComputeDriverHarness>): void {
  describe(`compute driver contract: ${name}`, () => {
    let h: ComputeDriverHarness;
    let driver: ComputeDriver;
    const spawnSmall = (uuid: string, extra: { imageRef?: string; powerOn?: boolean } = {}) => driver.spawn({ uuid, flavor: SMALL, image: { data: h.image }, ...extra });

    beforeEach(async () => {
      h = await makeDriver();
      driver = h.driver;
    });

    afterEach(async () => {
      await h.cleanup();
    });

    describe('capabilities', () => {
      it('are declared, constant, and name the volume types the host connects', async () => {
        // Act
        const caps = driver.capabilities();
        const info = await h.exportVolume(VOL_1, driver.host);

        // Assess
        expect(driver.capabilities()).toEqual(caps);
        expect(caps.volumeTypes.length).toBeGreaterThan(0);
        for (const t of caps.volumeTypes) expect(typeof t).toBe('string');
        expect(typeof caps.liveMigration).toBe('boolean');
        expect(typeof caps.swapVolume).toBe('boolean');
        expect(caps.volumeTypes).toContain(info.driver_volume_type);
        expect(await driver.canConnectVolume(info)).toEqual({ canConnect: true });
      });

      it('a volume type the driver does not declare is refused before anything is made', async () => {
        // Prepare
        await spawnSmall(UUID_A);
        const undeclared = 'contract-undeclared-type';
        expect(driver.capabilities().volumeTypes).not.toContain(undeclared);
        const info = { driver_volume_type: undeclared, data: { device_path: '/nonexistent/contract' }, serial: VOL_1 };

        // Act
        const answer = await driver.canConnectVolume(info);
        const attach = driver.attachVolume(UUID_A, info, '/dev/vdb');

        // Assess
        expect(answer.canConnect).toBe(false);
        expect(answer.reason).toEqual(expect.any(String));
        await expect(attach).rejects.toBeInstanceOf(DriverError);
        await expect(driver.connectVolume(info)).rejects.toBeInstanceOf(DriverError);
        expect((await driver.getGuest(UUID_A))?.volumes).toEqual([]);
        expect(await driver.listConnections()).toEqual([]);
      });

      it('live migration works when declared and is refused when not', async () => {
        // Prepare
        await spawnSmall(UUID_A, { imageRef: 'img-1' });
        await writeDevice(driver, UUID_A, '/dev/vda', 0, Buffer.from('moves along'));

        // Act
        const attempt = (async () => {
          await h.peer.preLiveMigration({ uuid: UUID_A, flavor: SMALL }, driver.host);
          await driver.liveMigration(UUID_A, h.peer.host);
          await driver.postLiveMigration(UUID_A);
          return h.peer.postLiveMigrationAtDestination(UUID_A);
        })();

        // Assess
        if (!driver.capabilities().liveMigration) {
          await expect(attempt).rejects.toBeInstanceOf(DriverError);
          expect((await driver.getGuest(UUID_A))?.defined).toBe(true);
          return;
        }
        expect(await attempt).toMatchObject({ uuid: UUID_A, host: h.peer.host, defined: true, powerState: POWER_STATE.RUNNING, imageRef: 'img-1' });
        expect((await h.peer.getGuest(UUID_A))?.migration).toBeUndefined();
        expect(await driver.getGuest(UUID_A)).toBeUndefined();
        expect((await readDevice(h.peer, UUID_A, '/dev/vda', 0, 11)).toString()).toBe('moves along');
      });

      it('a declared volume swap is what the swap flow does: connect the new, copy through handles, detach, attach at the same mountpoint', async () => {
        // Prepare
        if (!driver.capabilities().swapVolume) return;
        await spawnSmall(UUID_A);
        const oldVolume = await h.exportVolume(VOL_1, driver.host);
        const newVolume = await h.exportVolume(VOL_2, driver.host);
        await driver.attachVolume(UUID_A, oldVolume, '/dev/vdb', VOL_1);
        await writeDevice(driver, UUID_A, '/dev/vdb', 512, Buffer.from('carried over'));

        // Act
        await driver.connectVolume(newVolume);
        const from = await driver.openGuestDevice(UUID_A, '/dev/vdb');
        const to = await driver.openConnection(newVolume);
        try {
          await to.write(0, await from.read(0, Math.min(from.sizeBytes, to.sizeBytes, 1 << 20)));
        } finally {
          await from.close();
          await to.close();
        }
        await driver.detachVolume(UUID_A, '/dev/vdb');
        const swapped = await driver.attachVolume(UUID_A, newVolume, '/dev/vdb', VOL_2);

        // Assess
        expect(swapped).toMatchObject({ mountpoint: '/dev/vdb', volumeId: VOL_2 });
        expect((await readDevice(driver, UUID_A, '/dev/vdb', 512, 12)).toString()).toBe('carried over');
        expect((await driver.getGuest(UUID_A))?.volumes.map((v) => v.volumeId)).toEqual([VOL_2]);
      });
    });

    describe('spawn and destroy', () => {
      it('a retried spawn under the same uuid answers the same guest; one with another image is refused', async () => {
        // Prepare
        const first = await spawnSmall(UUID_A, { imageRef: 'img-1' });
        await writeDevice(driver, UUID_A, '/dev/vda', 0, Buffer.from('guest wrote this'));
        const unused = Readable.from([Buffer.from('other')]);

        // Act
        const again = await driver.spawn({ uuid: UUID_A, flavor: SMALL, image: { stream: unused }, imageRef: 'img-1' });

        // Assess
        expect(again).toMatchObject({ uuid: UUID_A, host: driver.host, defined: true, imageRef: 'img-1', bootCount: first.bootCount });
        expect(unused.destroyed).toBe(true);
        expect((await readDevice(driver, UUID_A, '/dev/vda', 0, 16)).toString()).toBe('guest wrote this');
        await expect(driver.spawn({ uuid: UUID_A, flavor: SMALL, image: { data: h.image }, imageRef: 'img-2' })).rejects.toBeInstanceOf(DriverError);
        await expect(driver.spawn({ uuid: UUID_A, flavor: { ...SMALL, vcpus: 4 }, image: { data: h.image } })).rejects.toThrow(/different spec/);
        expect((await driver.listGuests()).map((g) => g.uuid)).toEqual([UUID_A]);
      });

      it('destroy is idempotent; an absent guest reads as absent, and destroying it succeeds', async () => {
        // Prepare
        const info = await h.exportVolume(VOL_1, driver.host);
        await driver.spawn({ uuid: UUID_A, flavor: SMALL, image: { data: h.image }, blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: info }] });

        // Act
        await driver.destroy(UUID_A);
        await driver.destroy(UUID_A);
        await driver.destroy(UUID_B);

        // Assess
        expect(await driver.getGuest(UUID_A)).toBeUndefined();
        expect(await driver.getPowerState(UUID_A)).toBe(POWER_STATE.NOSTATE);
        expect(await driver.listGuests()).toEqual([]);
        expect(await driver.listKeptDisks()).toEqual([]);
        expect(await driver.listConnections()).toEqual([]);
        expect((await driver.getHostInfo()).guests).toEqual([]);
      });

      it('a call that needs the guest fails with a DriverError when it is absent', async () => {
        // Act / Assess
        await expect(driver.powerOn(UUID_B)).rejects.toBeInstanceOf(DriverError);
        await expect(driver.snapshot(UUID_B, 'image-1')).rejects.toBeInstanceOf(DriverError);
        await expect(driver.attachVolume(UUID_B, await h.exportVolume(VOL_1, driver.host), '/dev/vdb')).rejects.toBeInstanceOf(DriverError);
        await expect(driver.openGuestDevice(UUID_B, '/dev/vda')).rejects.toBeInstanceOf(DriverError);
      });
    });

    describe('power', () => {
      it('power off, on and reboot are idempotent and counted', async () => {
        // Prepare
        await spawnSmall(UUID_A);

        // Act
        await driver.powerOff(UUID_A);
        await driver.powerOff(UUID_A);
        const off = await driver.getPowerState(UUID_A);
        await driver.powerOn(UUID_A);
        await driver.powerOn(UUID_A);
        await driver.reboot(UUID_A, 'HARD');

        // Assess
        expect(off).toBe(POWER_STATE.SHUTDOWN);
        expect(await driver.getPowerState(UUID_A)).toBe(POWER_STATE.RUNNING);
        expect((await driver.getGuest(UUID_A))?.bootCount).toBe(3);
        expect(await driver.getPowerState(UUID_B)).toBe(POWER_STATE.NOSTATE);
        await expect(driver.powerOn(UUID_B)).rejects.toThrow(/not defined/);
      });

      it('pause, unpause, suspend and resume move the power state, are idempotent, and refuse a wrong state', async () => {
        // Prepare
        await spawnSmall(UUID_A);

        // Act
        await driver.pause(UUID_A);
        await driver.pause(UUID_A);
        const paused = await driver.getPowerState(UUID_A);
        await driver.unpause(UUID_A);
        await driver.suspend(UUID_A);
        await driver.suspend(UUID_A);
        const suspended = await driver.getPowerState(UUID_A);
        const pauseSuspended = driver.pause(UUID_A);
        await expect(pauseSuspended).rejects.toBeInstanceOf(DriverError);
        await driver.resume(UUID_A);
        await driver.resume(UUID_A);

        // Assess
        expect(paused).toBe(POWER_STATE.PAUSED);
        expect(suspended).toBe(POWER_STATE.SUSPENDED);
        expect(await driver.getPowerState(UUID_A)).toBe(POWER_STATE.RUNNING);
        await driver.powerOff(UUID_A);
        await expect(driver.pause(UUID_A)).rejects.toBeInstanceOf(DriverError);
        await expect(driver.resume(UUID_A)).rejects.toBeInstanceOf(DriverError);
        await expect(driver.suspend(UUID_B)).rejects.toBeInstanceOf(DriverError);
      });

      it('a guest spawned powered off stays off until powered on', async () => {
        // Act
        const guest = await spawnSmall(UUID_A, { powerOn: false });

        // Assess
        expect(guest).toMatchObject({ powerState: POWER_STATE.SHUTDOWN, bootCount: 0 });
        await driver.powerOn(UUID_A);
        expect((await driver.getGuest(UUID_A))?.bootCount).toBe(1);
      });
    });

    describe('volumes', () => {
      it('connect and disconnect are idempotent', async () => {
        // Prepare
        const info = await h.exportVolume(VOL_1, driver.host);

        // Act
        const connected = await driver.connectVolume(info);
        const again = await driver.connectVolume(info);
        const listed = await driver.listConnections();
        await driver.disconnectVolume(info);
        await driver.disconnectVolume(info);

        // Assess
        expect(again).toEqual(connected);
        expect(listed).toHaveLength(1);
        expect(listed[0]).toMatchObject({ key: connected.key, reachable: true, users: [] });
        expect(await driver.listConnections()).toEqual([]);
      });

      it('attach is idempotent at the same mountpoint and refuses a busy one', async () => {
        // Prepare
        await spawnSmall(UUID_A);
        const info = await h.exportVolume(VOL_1, driver.host);
        const other = await h.exportVolume(VOL_2, driver.host);

        // Act
        const first = await driver.attachVolume(UUID_A, info, '/dev/vdb');
        const again = await driver.attachVolume(UUID_A, info, '/dev/vdb', VOL_1);

        // Assess
        expect(again.connectionKey).toBe(first.connectionKey);
        expect(first).toMatchObject({ mountpoint: '/dev/vdb', volumeId: VOL_1 });
        expect((await driver.getGuest(UUID_A))?.volumes).toHaveLength(1);
        await expect(driver.attachVolume(UUID_A, other, '/dev/vdb')).rejects.toBeInstanceOf(DriverError);
      });

      it('detach removes the connection; detaching again, or from a gone guest, succeeds', async () => {
        // Prepare
        await spawnSmall(UUID_A);
        const info = await h.exportVolume(VOL_1, driver.host);
        await driver.attachVolume(UUID_A, info, '/dev/vdb');

        // Act
        await driver.detachVolume(UUID_A, '/dev/vdb');
        await driver.detachVolume(UUID_A, '/dev/vdb');
        await driver.detachVolume(UUID_B, '/dev/vdb');

        // Assess
        expect(await driver.listConnections()).toEqual([]);
        expect((await driver.getGuest(UUID_A))?.volumes).toEqual([]);
        await expect(driver.openConnection(info)).rejects.toThrow(/not connected/);
        await expect(driver.openGuestDevice(UUID_A, '/dev/vdb')).rejects.toThrow(/no device/);
      });
    });

    describe('claims', () => {
      it('the host lists the guests it defines and the connections each claims', async () => {
        // Prepare
        const info = await h.exportVolume(VOL_1, driver.host);

        // Act
        await driver.spawn({ uuid: UUID_A, flavor: SMALL, image: { data: h.image }, blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: info }] });
        await spawnSmall(UUID_B);

        // Assess
        expect((await driver.getHostInfo()).guests.sort()).toEqual([UUID_A, UUID_B]);
        expect((await driver.listGuests()).map((g) => g.uuid).sort()).toEqual([UUID_A, UUID_B]);
        const conns = await driver.listConnections();
        expect(conns).toHaveLength(1);
        expect(conns[0]).toMatchObject({ volumeId: VOL_1, users: [{ uuid: UUID_A, mountpoint: '/dev/vdb' }] });
      });

      it('keeps a connection another guest on the host still claims (multiattach)', async () => {
        // Prepare
        await spawnSmall(UUID_A);
        await spawnSmall(UUID_B);
        const info = await h.exportVolume(VOL_1, driver.host);
        await driver.attachVolume(UUID_A, info, '/dev/vdb');
        await driver.attachVolume(UUID_B, info, '/dev/vdc');

        // Act
        await driver.detachVolume(UUID_A, '/dev/vdb');
        await driver.disconnectVolume(info);

        // Assess
        const conns = await driver.listConnections();
        expect(conns).toHaveLength(1);
        expect(conns[0].users).toEqual([{ uuid: UUID_B, mountpoint: '/dev/vdc' }]);
        await writeDevice(driver, UUID_B, '/dev/vdc', 0, Buffer.from('still here'));
        expect((await readDevice(driver, UUID_B, '/dev/vdc', 0, 10)).toString()).toBe('still here');
      });

      it('kept disks are claimed without a definition until destroyed', async () => {
        // Prepare
        await spawnSmall(UUID_A);

        // Act
        await driver.destroy(UUID_A, { keepDisks: true });
        await driver.destroy(UUID_A, { keepDisks: true });

        // Assess
        expect(await driver.listGuests()).toEqual([]);
        expect((await driver.listKeptDisks()).map((g) => g.uuid)).toEqual([UUID_A]);
        expect(await driver.getPowerState(UUID_A)).toBe(POWER_STATE.NOSTATE);
        await driver.destroy(UUID_A);
        expect(await driver.listKeptDisks()).toEqual([]);
      });
    });
  });
}
