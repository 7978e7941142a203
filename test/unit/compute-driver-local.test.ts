/**
 * What the local compute driver does beyond the compute driver contract (test/contracts/compute-driver.ts,
 * run by compute-driver-contract.test.ts): its files, sparse disks, peers under one root, down flags,
 * the registry and fault injection.
 */
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, openSync, writeSync } from 'node:fs';
import { mkdtemp, open, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigurationError, DriverError } from '../../functions/core/errors.js';
import { POWER_STATE, type ComputeHostConfig, type Flavor, type MigrationProgress } from '../../functions/drivers/compute/driver.js';
import { GIB, LocalComputeDriver, connectionKeyOf, setHostDown } from '../../functions/drivers/compute/local.js';
import { clearComputeDriverCache, computeDriverFor } from '../../functions/drivers/compute/registry.js';
import { clearFaultCalls, clearFaults, faultCalls, injectFault } from '../../functions/core/faults.js';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';
import { volumeFilePath, type LocalVolumeDriver } from '../../functions/drivers/volume/local.js';
import { readDevice, writeDevice } from '../contracts/compute-driver.js';
import { exportLocalVolume, localVolumeBackend } from './compute-driver-fixtures.js';

const UUID_A = '0a1b2c3d-0000-4000-8000-00000000000a';
const UUID_B = '0a1b2c3d-0000-4000-8000-00000000000b';
const VOL_1 = '11111111-2222-4333-8444-555555555501';
const VOL_2 = '11111111-2222-4333-8444-555555555502';
const SMALL: Flavor = { vcpus: 1, memoryMb: 512, rootGb: 0 };
const IMAGE_BYTES = 64 * 1024;

let tmp: string;
let computeRoot: string;
let imagePath: string;
let image: Buffer;
let volumes: LocalVolumeDriver;
let volumeConfig: BackendConfig;
let cfg1: ComputeHostConfig;
let cfg2: ComputeHostConfig;
let cmp1: LocalComputeDriver;
let cmp2: LocalComputeDriver;

const hostConfig = (host: string): ComputeHostConfig => ({ host, driver: 'local', root: computeRoot, vcpus: 8, memoryMb: 16384, diskGb: 200 });

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'ferry-compute-driver-'));
  computeRoot = join(tmp, 'compute');
  image = randomBytes(IMAGE_BYTES);
  imagePath = join(tmp, 'image.raw');
  await writeFile(imagePath, image);
  ({ volumes, volumeConfig } = localVolumeBackend(tmp));
  cfg1 = hostConfig('cmp1');
  cfg2 = hostConfig('cmp2');
  cmp1 = new LocalComputeDriver(cfg1);
  cmp2 = new LocalComputeDriver(cfg2);
});

afterEach(async () => {
  clearFaults();
  clearFaultCalls();
  clearComputeDriverCache();
  await rm(tmp, { recursive: true, force: true });
});

const exportVolume = (volumeId: string, host: string) => exportLocalVolume(volumes, volumeId, host);

/** Every file under a host directory, relative (none when the directory is missing). */
const filesOf = (host: string): Promise<string[]> => new LocalComputeDriver(hostConfig(host)).listFiles();

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
const diskPath = (host: string, uuid: string) => join(computeRoot, host, 'guests', uuid, 'disk');


async function drain(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c as Buffer));
  return Buffer.concat(chunks);
}

describe('host', () => {
  it('reports configured capacity and the guests that exist, and writes host.json', async () => {
    // Prepare
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });

    // Act
    const info = await cmp1.getHostInfo();

    // Assess
    expect(info).toMatchObject({ host: 'cmp1', vcpus: 8, memoryMb: 16384, diskGb: 200, up: true, guests: [UUID_A], hypervisorType: 'ferry-local' });
    expect(JSON.parse(await readFile(join(computeRoot, 'cmp1', 'host.json'), 'utf8'))).toMatchObject({ host: 'cmp1', vcpus: 8, memoryMb: 16384, diskGb: 200 });
  });

  it('declares what it can do: local volumes only, live migration, volume swap', () => {
    // Act / Assess
    expect(cmp1.capabilities()).toEqual({ volumeTypes: ['local'], liveMigration: true, swapVolume: true });
    expect(computeDriverFor(cfg2).capabilities()).toEqual(cmp1.capabilities());
  });

  it('refuses unsafe host names and uuids', async () => {
    // Act / Assess
    expect(() => new LocalComputeDriver({ ...cfg1, host: '../etc' })).toThrow(DriverError);
    expect(() => new LocalComputeDriver({ ...cfg1, host: '.hidden' })).toThrow(/invalid compute host name/);
    await expect(cmp1.spawn({ uuid: '../../x', flavor: SMALL, image: { path: imagePath } })).rejects.toThrow(/invalid guest uuid/);
    await expect(cmp1.destroy('0A1B2C3D-0000-4000-8000-00000000000A')).rejects.toThrow(/invalid guest uuid/);
    await expect(cmp1.snapshot(UUID_A, '../img')).rejects.toThrow(/invalid image id/);
  });
});

describe('spawn', () => {
  it('makes the root disk from an image file, sparse-extended to root_gb, and powers on', async () => {
    // Act
    const guest = await cmp1.spawn({ uuid: UUID_A, flavor: { vcpus: 2, memoryMb: 1024, rootGb: 1 }, image: { path: imagePath }, imageRef: 'img-1' });

    // Assess
    const st = await stat(diskPath('cmp1', UUID_A));
    expect(st.size).toBe(GIB);
    expect(st.blocks * 512).toBeLessThan(4 * 1024 * 1024);
    expect(await readDevice(cmp1, UUID_A, '/dev/vda', 0, IMAGE_BYTES)).toEqual(image);
    expect(await readDevice(cmp1, UUID_A, '/dev/vda', IMAGE_BYTES, 16)).toEqual(Buffer.alloc(16));
    expect(guest).toMatchObject({ uuid: UUID_A, host: 'cmp1', defined: true, powerState: POWER_STATE.RUNNING, rootDisk: 'local', rootDiskBytes: GIB, imageRef: 'img-1', bootCount: 1 });
    expect(await cmp1.getPowerState(UUID_A)).toBe(POWER_STATE.RUNNING);
  });

  it('root_gb 0 keeps the image size; bytes and lazy streams work as sources', async () => {
    // Prepare
    let opened = 0;
    const factory = () => {
      opened += 1;
      return Readable.from([image]);
    };

    // Act
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { data: image } });
    await cmp1.spawn({ uuid: UUID_B, flavor: SMALL, image: { stream: factory }, imageRef: 'img-s3', powerOn: false });
    await cmp1.spawn({ uuid: UUID_B, flavor: SMALL, image: { stream: factory }, imageRef: 'img-s3', powerOn: false });

    // Assess
    expect(await readFile(diskPath('cmp1', UUID_A))).toEqual(image);
    expect(await readFile(diskPath('cmp1', UUID_B))).toEqual(image);
    expect(opened).toBe(1);
    expect(await cmp1.getPowerState(UUID_B)).toBe(POWER_STATE.SHUTDOWN);
  });

  it('leaves nothing behind when it fails', async () => {
    // Prepare
    const good = await exportVolume(VOL_1, 'cmp1');
    const wrongHost = await exportVolume(VOL_2, 'cmp2');

    // Act
    const attempt = cmp1.spawn({
      uuid: UUID_A,
      flavor: SMALL,
      image: { path: imagePath },
      blockDevices: [
        { mountpoint: '/dev/vdb', connectionInfo: good },
        { mountpoint: '/dev/vdc', connectionInfo: wrongHost },
      ],
    });

    // Assess
    await expect(attempt).rejects.toThrow(/exported to host cmp2, not cmp1/);
    expect(await cmp1.getGuest(UUID_A)).toBeUndefined();
    expect(await cmp1.listConnections()).toEqual([]);
    expect(await filesOf('cmp1')).toEqual(['host.json']);
    await expect(cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: join(tmp, 'missing') } })).rejects.toThrow(/not a readable file/);
    await expect(cmp1.spawn({ uuid: UUID_A, flavor: SMALL })).rejects.toThrow(/neither an image nor a boot volume/);
    expect(await filesOf('cmp1')).toEqual(['host.json']);
  });
});

describe('volumes', () => {
  it('attach connects the export on the host; bytes written through the guest land in the volume', async () => {
    // Prepare
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });
    const info = await exportVolume(VOL_1, 'cmp1');
    expect(await cmp1.canConnectVolume(info)).toEqual({ canConnect: true });

    // Act
    const attached = await cmp1.attachVolume(UUID_A, info, '/dev/vdb');
    await writeDevice(cmp1, UUID_A, '/dev/vdb', 4096, Buffer.from('hello volume'));

    // Assess
    expect(attached).toMatchObject({ mountpoint: '/dev/vdb', volumeId: VOL_1 });
    const volumeFile = volumeFilePath(volumeConfig, `volume-${VOL_1}`)!;
    const fh = await open(volumeFile, 'r');
    const fromFile = (await fh.read(Buffer.alloc(12), 0, 12, 4096)).buffer.toString();
    await fh.close();
    expect(fromFile).toBe('hello volume');
    const handle = await cmp1.openConnection(info);
    expect((await handle.read(4096, 12)).toString()).toBe('hello volume');
    expect(handle.sizeBytes).toBe(GIB);
    await handle.close();
    const conns = await cmp1.listConnections();
    expect(conns).toHaveLength(1);
    expect(conns[0]).toMatchObject({ volumeId: VOL_1, backendName: `volume-${VOL_1}`, reachable: true, users: [{ uuid: UUID_A, mountpoint: '/dev/vdb' }] });
    expect((await cmp1.getGuest(UUID_A))?.volumes.map((v) => v.mountpoint)).toEqual(['/dev/vdb']);
  });

  it('attach is idempotent, refuses a busy mountpoint, and accepts the flat attachments-API shape', async () => {
    // Prepare
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });
    const nested = await exportVolume(VOL_1, 'cmp1');
    const flat = { ...(nested.data as Record<string, unknown>), driver_volume_type: 'local', access_mode: 'rw', attachment_id: 'att-1' };
    const other = await exportVolume(VOL_2, 'cmp1');

    // Act
    const first = await cmp1.attachVolume(UUID_A, nested, '/dev/vdb');
    const again = await cmp1.attachVolume(UUID_A, flat, '/dev/vdb', VOL_1);

    // Assess
    expect(again.connectionKey).toBe(first.connectionKey);
    expect((await cmp1.getGuest(UUID_A))?.volumes).toHaveLength(1);
    await expect(cmp1.attachVolume(UUID_A, other, '/dev/vdb')).rejects.toThrow(/in use by another volume/);
    await expect(cmp1.attachVolume(UUID_A, nested, '/dev/vdc')).rejects.toThrow(/already attached/);
    await expect(cmp1.attachVolume(UUID_A, nested, '/dev/../etc')).rejects.toThrow(/invalid mountpoint/);
    await expect(cmp1.attachVolume(UUID_A, other, '/dev/vda')).rejects.toThrow(/local root disk/);
  });

  it('can_connect_volume says why not; a terminated export can no longer be opened', async () => {
    // Prepare
    const info = await exportVolume(VOL_1, 'cmp1');
    const guarded = new LocalComputeDriver({ ...cfg1, allowedVolumeRoots: [join(tmp, 'elsewhere')] });

    // Act
    const wrongHost = await cmp2.canConnectVolume(info);
    const iscsi = await cmp1.canConnectVolume({ driver_volume_type: 'iscsi', data: { target_iqn: 'iqn.x' } });
    const outside = await guarded.canConnectVolume(info);
    const connected = await cmp1.connectVolume(info);
    const againConnected = await cmp1.connectVolume(info);
    await volumes.terminateConnection(`volume-${VOL_1}`, { host: 'cmp1' });

    // Assess
    expect(wrongHost).toEqual({ canConnect: false, reason: expect.stringContaining('exported to host cmp1, not cmp2') });
    expect(iscsi.canConnect).toBe(false);
    expect(outside).toEqual({ canConnect: false, reason: expect.stringContaining('outside the allowed volume roots') });
    expect(againConnected).toEqual(connected);
    expect((await cmp1.canConnectVolume(info)).reason).toMatch(/does not exist/);
    expect((await cmp1.listConnections())[0].reachable).toBe(false);
    await expect(cmp1.openConnection(info)).rejects.toThrow(/cannot open/);
    await cmp1.disconnectVolume(info);
    await cmp1.disconnectVolume(info);
    expect(await cmp1.listConnections()).toEqual([]);
  });
});

describe('snapshot', () => {
  it('streams exactly the root disk as of the call and leaves no file behind', async () => {
    // Prepare
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });
    await writeDevice(cmp1, UUID_A, '/dev/vda', 100, Buffer.from('before snapshot'));

    // Act
    const snap = await cmp1.snapshot(UUID_A, 'image-1');
    await writeDevice(cmp1, UUID_A, '/dev/vda', 100, Buffer.from('AFTER SNAPSHOT!'));
    const bytes = await drain(snap.stream);

    // Assess
    expect(snap.sizeBytes).toBe(IMAGE_BYTES);
    expect(bytes.length).toBe(IMAGE_BYTES);
    expect(bytes.subarray(100, 115).toString()).toBe('before snapshot');
    const disk = await readFile(diskPath('cmp1', UUID_A));
    expect(sha(bytes.subarray(115))).toBe(sha(disk.subarray(115)));
    expect(sha(bytes.subarray(0, 100))).toBe(sha(disk.subarray(0, 100)));
    expect((await filesOf('cmp1')).filter((f) => f.startsWith('snapshots/'))).toEqual([]);
    await expect(cmp1.snapshot(UUID_B, 'image-2')).rejects.toThrow(/not on this host/);
  });
});

describe('destroy', () => {
  it('keepDisks keeps the disk without a definition; a full destroy leaves no file behind', async () => {
    // Prepare
    const info = await exportVolume(VOL_1, 'cmp1');
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath }, blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: info }] });
    const before = sha(await readFile(diskPath('cmp1', UUID_A)));

    // Act
    await cmp1.destroy(UUID_A, { keepDisks: true });
    await cmp1.destroy(UUID_A, { keepDisks: true });

    // Assess
    expect(await cmp1.listGuests()).toEqual([]);
    expect((await cmp1.listKeptDisks()).map((g) => g.uuid)).toEqual([UUID_A]);
    expect(sha(await readFile(diskPath('cmp1', UUID_A)))).toBe(before);
    expect(await cmp1.listConnections()).toEqual([]);
    expect(await cmp1.getPowerState(UUID_A)).toBe(POWER_STATE.NOSTATE);

    // Act
    await cmp1.destroy(UUID_A);
    await cmp1.destroy(UUID_A);

    // Assess
    expect(await cmp1.listKeptDisks()).toEqual([]);
    expect(await filesOf('cmp1')).toEqual(['host.json']);
  });

  it('destroys a running guest with volumes completely', async () => {
    // Prepare
    const info = await exportVolume(VOL_1, 'cmp1');
    await cmp1.spawn({ uuid: UUID_A, flavor: { vcpus: 1, memoryMb: 512, rootGb: 1 }, image: { path: imagePath }, blockDevices: [{ mountpoint: '/dev/vdb', connectionInfo: info }] });

    // Act
    await cmp1.destroy(UUID_A, { keepDisks: false });

    // Assess
    expect(await filesOf('cmp1')).toEqual(['host.json']);
    expect(await volumes.getVolume(`volume-${VOL_1}`)).toEqual({ backendName: `volume-${VOL_1}`, sizeGb: 1 });
  });
});

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

describe('registry and fault injection', () => {
  it('a fail fault on spawn for one host fails there only, and nothing is created', async () => {
    // Prepare
    const d1 = computeDriverFor(cfg1);
    const d2 = computeDriverFor(cfg2);
    injectFault({ kind: 'compute', backend: 'cmp1', method: 'spawn', mode: 'fail', times: 1 });

    // Act
    const failed = d1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });
    await expect(failed).rejects.toBeInstanceOf(DriverError);
    const ok = await d2.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });
    const retried = await d1.spawn({ uuid: UUID_B, flavor: SMALL, image: { path: imagePath } });

    // Assess
    expect(ok.host).toBe('cmp2');
    expect(retried.host).toBe('cmp1');
    expect(await d1.getGuest(UUID_A)).toBeUndefined();
    expect(computeDriverFor(cfg1)).toBe(d1);
    expect(computeDriverFor({ ...cfg1, vcpus: 16 })).not.toBe(d1);
    const spawns = faultCalls().filter((c) => c.kind === 'compute' && c.method === 'spawn');
    expect(spawns.map((c) => [c.backend, c.outcome])).toEqual([
      ['cmp1', 'injected-fail'],
      ['cmp2', 'ok'],
      ['cmp1', 'ok'],
    ]);
  });

  it('a fail-after fault on liveMigration reports failure after the real move (the caller must check where the guest is)', async () => {
    // Prepare
    const d1 = computeDriverFor(cfg1);
    const d2 = computeDriverFor(cfg2);
    await d1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });
    await d2.preLiveMigration({ uuid: UUID_A, flavor: SMALL }, 'cmp1');
    injectFault({ kind: 'compute', backend: 'cmp1', method: 'liveMigration', mode: 'fail-after', times: 1 });

    // Act
    await expect(d1.liveMigration(UUID_A, 'cmp2')).rejects.toThrow(/injected fault: compute.liveMigration on cmp1/);

    // Assess
    expect((await d2.getGuest(UUID_A))?.defined).toBe(true);
    expect((await d1.getGuest(UUID_A))?.defined).toBe(false);
    await expect(d1.liveMigration(UUID_A, 'cmp2')).resolves.toBeUndefined();
  });

  it('an unknown driver kind is refused', () => {
    // Act / Assess
    expect(() => computeDriverFor({ ...cfg1, driver: 'libvirt' as 'local' })).toThrow(/unknown compute driver/);
    expect(() => computeDriverFor({ ...cfg1, driver: 'libvirt' as 'local' })).toThrow(ConfigurationError);
  });
});

describe('connection keys', () => {
  it('are stable, path-safe and differ per export', () => {
    // Act
    const a = connectionKeyOf({ devicePath: '/x/.connections/cmp1/volume-1', backendName: 'volume-1' });
    const b = connectionKeyOf({ devicePath: '/x/.connections/cmp2/volume-1', backendName: 'volume-1' });
    const evil = connectionKeyOf({ devicePath: '/y', backendName: '../../etc/passwd' });

    // Assess
    expect(a).toBe(connectionKeyOf({ devicePath: '/x/.connections/cmp1/volume-1', backendName: 'volume-1' }));
    expect(a).not.toBe(b);
    expect(evil).toMatch(/^[A-Za-z0-9_-]+$/);
  });
});
