/**
 * What the local compute driver does beyond the compute driver contract (test/contracts/compute-driver.ts,
 * run by compute-driver-contract.test.ts) when a guest moves between peer hosts under one root: cold
 * migration / resize (confirm, revert, refusals), live migration (progress, stop-and-copy, abort,
 * rollback, volume-backed), and evacuation off a down host. One host's guest lifecycle:
 * compute-driver-local-lifecycle.test.ts.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { POWER_STATE, type Flavor, type MigrationProgress } from '../../functions/drivers/compute/driver.js';
import { GIB, LocalComputeDriver, setHostDown } from '../../functions/drivers/compute/local.js';
import { readDevice, writeDevice } from '../contracts/compute-driver.js';
import { UUID_A, UUID_B, VOL_1, SMALL, IMAGE_BYTES, computeRoot, imagePath, image, volumes, cfg1, cfg2, cmp1, cmp2, hostConfig, useLocalComputeHosts, exportVolume, filesOf, sha, diskPath } from '../support/local-compute-hosts.js';

useLocalComputeHosts();

describe('cold migration / resize', () => {
  async function prepareGuest() {
    const src = await exportVolume(VOL_1, 'cmp1');
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath }, imageRef: 'img-1', blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: src }] });
    await writeDevice(cmp1, UUID_A, '/dev/vda', 512, Buffer.from('root bytes'));
    await writeDevice(cmp1, UUID_A, '/dev/vdb', 512, Buffer.from('volume bytes'));
    return { src, rootSha: sha(await readFile(diskPath('cmp1', UUID_A))) };
  }

  it('copies the disk, keeps the source until confirm, and grows the disk to the new flavor', async () => {
    // Prepare
    const { rootSha } = await prepareGuest();
    const bigger: Flavor = { vcpus: 2, memoryMb: 1024, rootGb: 1 };

    // Act
    await cmp1.migrateDiskAndPowerOff(UUID_A, 'cmp2', bigger);
    await cmp1.migrateDiskAndPowerOff(UUID_A, 'cmp2', bigger);

    // Assess: the source keeps its disks, undefined; its volume connection is gone.
    expect(await cmp1.listGuests()).toEqual([]);
    const kept = await cmp1.listKeptDisks();
    expect(kept.map((g) => [g.uuid, g.migration?.role, g.migration?.peer])).toEqual([[UUID_A, 'source', 'cmp2']]);
    expect(sha(await readFile(diskPath('cmp1', UUID_A)))).toBe(rootSha);
    expect(await cmp1.listConnections()).toEqual([]);

    // Act: the destination finishes with its own connection.
    await volumes.terminateConnection(`volume-${VOL_1}`, { host: 'cmp1' });
    const dst = await exportVolume(VOL_1, 'cmp2');
    const spec = { uuid: UUID_A, flavor: bigger, blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: dst }] };
    const finished = await cmp2.finishMigration(spec, 'cmp1');
    const again = await cmp2.finishMigration(spec, 'cmp1');

    // Assess
    expect(finished).toMatchObject({ defined: true, powerState: POWER_STATE.RUNNING, flavor: bigger, rootDiskBytes: GIB, imageRef: 'img-1' });
    expect(again.defined).toBe(true);
    expect((await readDevice(cmp2, UUID_A, '/dev/vda', 0, IMAGE_BYTES)).toString('hex')).toBe((await readFile(diskPath('cmp1', UUID_A))).toString('hex'));
    expect((await readDevice(cmp2, UUID_A, '/dev/vdb', 512, 12)).toString()).toBe('volume bytes');
    expect(await filesOf('cmp1')).toContain(`guests/${UUID_A}/disk`);

    // Act: confirm at the source.
    await cmp1.confirmMigration(UUID_A);
    await cmp1.confirmMigration(UUID_A);

    // Assess
    expect(await filesOf('cmp1')).toEqual(['host.json']);
    expect(await filesOf('cmp2')).toEqual(expect.arrayContaining([`guests/${UUID_A}/disk`, `guests/${UUID_A}/state.json`]));
    expect((await filesOf('cmp2')).filter((f) => f.startsWith('incoming/'))).toEqual([]);
  });

  it('revert: the destination destroys, the source comes back on its kept disks with the old flavor', async () => {
    // Prepare
    const { src, rootSha } = await prepareGuest();
    await cmp1.migrateDiskAndPowerOff(UUID_A, 'cmp2', { vcpus: 2, memoryMb: 1024, rootGb: 1 });
    const dst = await exportVolume(VOL_1, 'cmp2');
    await cmp2.finishMigration({ uuid: UUID_A, flavor: { vcpus: 2, memoryMb: 1024, rootGb: 1 }, blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: dst }] }, 'cmp1');

    // Act
    await cmp2.destroy(UUID_A);
    const reverted = await cmp1.finishRevertMigration(UUID_A, { blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: src }] });
    const again = await cmp1.finishRevertMigration(UUID_A, { blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: src }] });

    // Assess
    expect(reverted).toMatchObject({ defined: true, flavor: SMALL, powerState: POWER_STATE.RUNNING });
    expect(reverted.migration).toBeUndefined();
    expect(again.volumes).toHaveLength(1);
    expect(sha(await readFile(diskPath('cmp1', UUID_A)))).toBe(rootSha);
    expect((await readDevice(cmp1, UUID_A, '/dev/vdb', 512, 12)).toString()).toBe('volume bytes');
    expect(await filesOf('cmp2')).toEqual(['host.json']);
    await expect(cmp1.confirmMigration(UUID_A)).rejects.toThrow(/defined on this host/);
  });

  it('refuses to shrink, a down destination, and finish without a copied disk', async () => {
    // Prepare
    await cmp1.spawn({ uuid: UUID_A, flavor: { vcpus: 1, memoryMb: 512, rootGb: 2 }, image: { path: imagePath } });
    await cmp2.getHostInfo();

    // Act / Assess
    await expect(cmp1.migrateDiskAndPowerOff(UUID_A, 'cmp2', { vcpus: 1, memoryMb: 512, rootGb: 1 })).rejects.toThrow(/cannot resize the root disk .* down/);
    await setHostDown(cfg2, true);
    await expect(cmp1.migrateDiskAndPowerOff(UUID_A, 'cmp2', { vcpus: 1, memoryMb: 512, rootGb: 2 })).rejects.toThrow(/destination host cmp2 is down/);
    await setHostDown(cfg2, false);
    await expect(cmp2.finishMigration({ uuid: UUID_B, flavor: SMALL }, 'cmp1')).rejects.toThrow(/has not run/);
    await expect(cmp1.migrateDiskAndPowerOff(UUID_A, 'cmp1', SMALL)).rejects.toThrow(/is this host/);
    expect((await cmp1.getGuest(UUID_A))?.defined).toBe(true);
    expect(await filesOf('cmp2')).toEqual(['host.json']);
  });
});

describe('live migration', () => {
  async function prepareGuest() {
    const src = await exportVolume(VOL_1, 'cmp1');
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath }, blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: src }] });
    await writeDevice(cmp1, UUID_A, '/dev/vda', 0, Buffer.from('root head'));
    await writeDevice(cmp1, UUID_A, '/dev/vda', IMAGE_BYTES - 9, Buffer.from('root tail'));
    await writeDevice(cmp1, UUID_A, '/dev/vdb', 1 << 20, Buffer.from('data before the move'));
    const dst = await exportVolume(VOL_1, 'cmp2');
    return { src, dst, rootSha: sha(await readFile(diskPath('cmp1', UUID_A))) };
  }

  it('moves the root disk with increasing progress; bytes written before the move are intact after it', async () => {
    // Prepare
    const { dst, rootSha } = await prepareGuest();
    const data = await cmp2.preLiveMigration({ uuid: UUID_A, flavor: SMALL, blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: dst }] }, 'cmp1');
    const progress: MigrationProgress[] = [];

    // Act
    await cmp1.liveMigration(UUID_A, 'cmp2', { chunkBytes: 4096, onProgress: (p) => progress.push(p) });
    await cmp1.liveMigration(UUID_A, 'cmp2', { chunkBytes: 4096 });
    await cmp1.postLiveMigration(UUID_A);
    await cmp1.postLiveMigration(UUID_A);
    const atDest = await cmp2.postLiveMigrationAtDestination(UUID_A);

    // Assess
    expect(data).toMatchObject({ sourceHost: 'cmp1', destHost: 'cmp2', rootDisk: 'local' });
    expect(progress.length).toBeGreaterThan(10);
    for (let i = 1; i < progress.length; i++) {
      expect(progress[i].percent).toBeGreaterThanOrEqual(progress[i - 1].percent);
      if (progress[i].phase === 'disk') expect(progress[i].processedBytes).toBeGreaterThan(progress[i - 1].processedBytes);
    }
    expect(progress.at(-1)).toEqual({ phase: 'complete', processedBytes: IMAGE_BYTES, totalBytes: IMAGE_BYTES, percent: 100 });
    expect(atDest).toMatchObject({ defined: true, powerState: POWER_STATE.RUNNING, host: 'cmp2' });
    expect(atDest.migration).toBeUndefined();
    expect(sha(await readFile(diskPath('cmp2', UUID_A)))).toBe(rootSha);
    expect((await readDevice(cmp2, UUID_A, '/dev/vda', 0, 9)).toString()).toBe('root head');
    expect((await readDevice(cmp2, UUID_A, '/dev/vda', IMAGE_BYTES - 9, 9)).toString()).toBe('root tail');
    expect((await readDevice(cmp2, UUID_A, '/dev/vdb', 1 << 20, 20)).toString()).toBe('data before the move');
    expect(await cmp1.getGuest(UUID_A)).toBeUndefined();
    expect(await filesOf('cmp1')).toEqual(['host.json']);
    expect((await cmp2.listConnections()).map((c) => c.users)).toEqual([[{ uuid: UUID_A, mountpoint: '/dev/vdb' }]]);
    expect((await filesOf('cmp2')).filter((f) => f.startsWith('incoming/'))).toEqual([]);
  });

  it('copies again what the guest wrote during the pre-copy (stop-and-copy)', async () => {
    // Prepare
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });
    await cmp2.preLiveMigration({ uuid: UUID_A, flavor: SMALL }, 'cmp1');
    const fd = openSync(diskPath('cmp1', UUID_A), 'r+');
    let dirtied = false;

    // Act: the guest writes into a chunk that has already been copied.
    await cmp1.liveMigration(UUID_A, 'cmp2', {
      chunkBytes: 4096,
      onProgress: (p) => {
        if (!dirtied && p.percent >= 50) {
          writeSync(fd, Buffer.from('written mid-migration'), 0, 21, 0);
          dirtied = true;
        }
      },
    });
    closeSync(fd);

    // Assess
    expect(dirtied).toBe(true);
    expect((await readDevice(cmp2, UUID_A, '/dev/vda', 0, 21)).toString()).toBe('written mid-migration');
  });

  it('an abort mid-way leaves the guest on the source intact; rollback at the destination leaves nothing', async () => {
    // Prepare
    const { dst, rootSha } = await prepareGuest();
    await cmp2.preLiveMigration({ uuid: UUID_A, flavor: SMALL, blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: dst }] }, 'cmp1');
    const controller = new AbortController();
    const seen: number[] = [];

    // Act
    const attempt = cmp1.liveMigration(UUID_A, 'cmp2', {
      chunkBytes: 4096,
      signal: controller.signal,
      onProgress: (p) => {
        seen.push(p.percent);
        if (p.percent >= 30) controller.abort();
      },
    });

    // Assess
    await expect(attempt).rejects.toThrow(/aborted; the guest stays on cmp1/);
    expect(Math.max(...seen)).toBeLessThan(100);
    const guest = await cmp1.getGuest(UUID_A);
    expect(guest).toMatchObject({ defined: true, powerState: POWER_STATE.RUNNING });
    expect(guest?.migration).toBeUndefined();
    expect(sha(await readFile(diskPath('cmp1', UUID_A)))).toBe(rootSha);
    expect((await readDevice(cmp1, UUID_A, '/dev/vdb', 1 << 20, 20)).toString()).toBe('data before the move');
    expect(await cmp2.getGuest(UUID_A)).toBeUndefined();

    // Act
    await cmp2.rollbackLiveMigrationAtDestination(UUID_A);
    await cmp2.rollbackLiveMigrationAtDestination(UUID_A);

    // Assess
    expect(await filesOf('cmp2')).toEqual(['host.json']);
    expect((await cmp1.listConnections()).map((c) => c.users)).toEqual([[{ uuid: UUID_A, mountpoint: '/dev/vdb' }]]);

    // Act: a second attempt goes through.
    await cmp2.preLiveMigration({ uuid: UUID_A, flavor: SMALL, blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: dst }] }, 'cmp1');
    await cmp1.liveMigration(UUID_A, 'cmp2', { chunkBytes: 8192 });

    // Assess
    expect(sha(await readFile(diskPath('cmp2', UUID_A)))).toBe(rootSha);
  });

  it('refuses without pre_live_migration, with mismatched volumes, and rollback after the switch-over', async () => {
    // Prepare
    await prepareGuest();

    // Act / Assess
    await expect(cmp1.liveMigration(UUID_A, 'cmp2')).rejects.toThrow(/pre_live_migration of .* has not run on cmp2/);
    await cmp2.preLiveMigration({ uuid: UUID_A, flavor: SMALL }, 'cmp1');
    await expect(cmp1.liveMigration(UUID_A, 'cmp2')).rejects.toThrow(/differ from the guest's/);
    expect((await cmp1.getGuest(UUID_A))?.migration).toBeUndefined();
    await cmp2.rollbackLiveMigrationAtDestination(UUID_A);
    await cmp1.detachVolume(UUID_A, '/dev/vdb');
    await cmp2.preLiveMigration({ uuid: UUID_A, flavor: SMALL }, 'cmp1');
    await cmp1.liveMigration(UUID_A, 'cmp2');
    await expect(cmp2.rollbackLiveMigrationAtDestination(UUID_A)).rejects.toThrow(/switched over/);
    await expect(cmp2.preLiveMigration({ uuid: UUID_B, flavor: SMALL }, 'cmp1')).rejects.toThrow(/not defined on cmp1/);
  });

  it('migrates a volume-backed guest: no disk, the boot volume reconnects on the destination', async () => {
    // Prepare
    const boot = await exportVolume(VOL_1, 'cmp1');
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, blockDevices: [{ mountpoint: '/dev/vda', connectionInfo: boot }] });
    await writeDevice(cmp1, UUID_A, '/dev/vda', 0, Buffer.from('boot sector'));
    const bootDst = await exportVolume(VOL_1, 'cmp2');
    const progress: MigrationProgress[] = [];

    // Act
    await cmp2.preLiveMigration({ uuid: UUID_A, flavor: SMALL, blockDevices: [{ mountpoint: '/dev/vda', connectionInfo: bootDst }] }, 'cmp1');
    await cmp1.liveMigration(UUID_A, 'cmp2', { onProgress: (p) => progress.push(p) });
    await cmp1.postLiveMigration(UUID_A);

    // Assess
    expect(progress).toEqual([{ phase: 'complete', processedBytes: 0, totalBytes: 0, percent: 100 }]);
    expect((await readDevice(cmp2, UUID_A, '/dev/vda', 0, 11)).toString()).toBe('boot sector');
    expect(await filesOf('cmp1')).toEqual(['host.json']);
    await expect(cmp2.snapshot(UUID_A, 'img')).rejects.toThrow(/volume-backed/);
    await expect(cmp2.detachVolume(UUID_A, '/dev/vda')).rejects.toThrow(/boot volume/);
  });
});

describe('evacuate', () => {
  it('rebuilds on another host from the down host’s root disk; the source cleans up when it is back', async () => {
    // Prepare
    const src = await exportVolume(VOL_1, 'cmp1');
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath }, imageRef: 'img-1', blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: src }] });
    await writeDevice(cmp1, UUID_A, '/dev/vda', 0, Buffer.from('survives evacuation'));
    const rootSha = sha(await readFile(diskPath('cmp1', UUID_A)));
    const dst = await exportVolume(VOL_1, 'cmp2');
    const spec = { uuid: UUID_A, flavor: SMALL, blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: dst }] };
    await expect(cmp2.spawnEvacuated(spec, { host: 'cmp1' })).rejects.toThrow(/source host cmp1 is up/);

    // Act
    await setHostDown(cfg1, true);
    const rebuilt = await cmp2.spawnEvacuated(spec, { host: 'cmp1' });
    const again = await cmp2.spawnEvacuated(spec, { host: 'cmp1' });

    // Assess
    expect(rebuilt).toMatchObject({ defined: true, evacuatedFrom: 'cmp1', imageRef: 'img-1', powerState: POWER_STATE.RUNNING });
    expect(again.volumes).toHaveLength(1);
    expect(sha(await readFile(diskPath('cmp2', UUID_A)))).toBe(rootSha);
    expect(sha(await readFile(diskPath('cmp1', UUID_A)))).toBe(rootSha);
    await expect(cmp1.listGuests()).rejects.toThrow(/the host is down/);
    await expect(cmp1.destroy(UUID_A)).rejects.toThrow(/the host is down/);
    expect(await cmp1.getHostInfo()).toMatchObject({ up: false, guests: [UUID_A] });

    // Act: the source comes back and destroys its stale guest (Nova's _destroy_evacuated_instances).
    await setHostDown(cfg1, false);
    await cmp1.destroy(UUID_A);

    // Assess
    expect(await filesOf('cmp1')).toEqual(['host.json']);
    expect((await readDevice(cmp2, UUID_A, '/dev/vda', 0, 19)).toString()).toBe('survives evacuation');
  });

  it('rebuilds from the image when the source disk is lost, and refuses without one', async () => {
    // Prepare
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });
    await rm(join(computeRoot, 'cmp1'), { recursive: true, force: true });
    const cmp3 = new LocalComputeDriver(hostConfig('cmp3'));

    // Act
    await expect(cmp2.spawnEvacuated({ uuid: UUID_A, flavor: SMALL }, { host: 'cmp1' })).rejects.toThrow(/unreadable and no image/);
    const withImage = await cmp3.spawnEvacuated({ uuid: UUID_A, flavor: SMALL, image: { data: image } }, { host: 'cmp1', down: true });

    // Assess
    expect(withImage.defined).toBe(true);
    expect(await readFile(diskPath('cmp3', UUID_A))).toEqual(image);
    expect(await cmp2.getGuest(UUID_A)).toBeUndefined();
  });
});
