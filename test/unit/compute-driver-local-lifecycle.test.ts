/**
 * What the local compute driver does beyond the compute driver contract (test/contracts/compute-driver.ts,
 * run by compute-driver-contract.test.ts), for a guest on one host: the host's files and capacity,
 * spawn with sparse disks, volumes, snapshot, destroy, the registry and fault injection, connection
 * keys. Moving guests between hosts: compute-driver-local-moves.test.ts.
 */
import { open, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { ConfigurationError, DriverError } from '../../functions/core/errors.js';
import { POWER_STATE } from '../../functions/drivers/compute/driver.js';
import { GIB, LocalComputeDriver, connectionKeyOf } from '../../functions/drivers/compute/local.js';
import { computeDriverFor } from '../../functions/drivers/compute/registry.js';
import { faultCalls, injectFault } from '../../functions/core/faults.js';
import { volumeFilePath } from '../../functions/drivers/volume/local.js';
import { readDevice, writeDevice } from '../contracts/compute-driver.js';
import { UUID_A, UUID_B, VOL_1, VOL_2, SMALL, IMAGE_BYTES, tmp, computeRoot, imagePath, image, volumes, volumeConfig, cfg1, cfg2, cmp1, cmp2, useLocalComputeHosts, exportVolume, filesOf, sha, diskPath, drain } from '../support/local-compute-hosts.js';

useLocalComputeHosts();

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

