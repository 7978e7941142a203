import { lstat, mkdtemp, open, readlink, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';
import { GIB, LocalVolumeDriver, connectionPath, decodeHost, encodeHost, volumeFilePath } from '../../functions/drivers/volume/local.js';
import { clearDriverCache, driverFor } from '../../functions/drivers/volume/registry.js';
import { clearFaults, faultCalls, injectFault } from '../../functions/core/faults.js';

let root: string;
let config: BackendConfig;
let driver: LocalVolumeDriver;

const HOST_A = { host: 'compute-1' };
const HOST_B = { host: 'compute-2.example.org' };

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'ferry-local-driver-'));
  config = {
    host: 'ferry@lvm-a',
    driver: 'local',
    root,
    pools: [
      { name: 'pool0', totalCapacityGb: 2000 },
      { name: 'small', totalCapacityGb: 10 },
    ],
    serviceUuid: '11111111-1111-4111-8111-111111111111',
    volumeBackendName: 'lvm-a',
  };
  driver = new LocalVolumeDriver(config);
});

afterEach(async () => {
  clearFaults();
  clearDriverCache();
  await rm(root, { recursive: true, force: true });
});

describe('create', () => {
  it('makes a sparse file of the volume size in its pool', async () => {
    // Act
    const { providerLocation } = await driver.createVolume({ backendName: 'volume-big', sizeGb: 1024, pool: 'pool0' });

    // Assess
    const st = await stat(providerLocation);
    expect(providerLocation).toBe(join(root, 'pool0', 'volume-big'));
    expect(st.size).toBe(1024 * GIB);
    expect(st.blocks * 512).toBeLessThan(1024 * 1024);
    expect(await driver.getVolume('volume-big')).toEqual({ backendName: 'volume-big', sizeGb: 1024 });
  });

  it('is idempotent for the same size and keeps the bytes', async () => {
    // Prepare
    await driver.createVolume({ backendName: 'volume-1', sizeGb: 1, pool: 'pool0' });
    const path = volumeFilePath(config, 'volume-1')!;
    await writeFile(path, 'kept', { flag: 'r+' });

    // Act
    const again = await driver.createVolume({ backendName: 'volume-1', sizeGb: 1, pool: 'pool0' });

    // Assess
    expect(again.providerLocation).toBe(path);
    const head = Buffer.alloc(4);
    const fh = await open(path, 'r');
    await fh.read(head, 0, 4, 0);
    await fh.close();
    expect(head.toString()).toBe('kept');
  });

  it('refuses when the pool has too little free capacity', async () => {
    // Prepare
    await driver.createVolume({ backendName: 'volume-a', sizeGb: 8, pool: 'small' });

    // Act
    const attempt = driver.createVolume({ backendName: 'volume-b', sizeGb: 3, pool: 'small' });

    // Assess
    await expect(attempt).rejects.toThrow(/pool small has 2 GiB free/);
    expect(await driver.getVolume('volume-b')).toBeUndefined();
    await expect(driver.createVolume({ backendName: 'volume-c', sizeGb: 2, pool: 'small' })).resolves.toBeDefined();
  });

  it('refuses an unknown pool and an unsafe name', async () => {
    // Act / Assess
    await expect(driver.createVolume({ backendName: 'volume-1', sizeGb: 1, pool: 'nope' })).rejects.toThrow(/no pool nope/);
    await expect(driver.createVolume({ backendName: '../escape', sizeGb: 1, pool: 'pool0' })).rejects.toThrow(/invalid volume name/);
  });

  it('concurrent creates in one pool never exceed its capacity', async () => {
    // Act
    const results = await Promise.allSettled(
      ['v1', 'v2', 'v3'].map((n) => driver.createVolume({ backendName: n, sizeGb: 4, pool: 'small' })),
    );

    // Assess
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(2);
    expect((await driver.capabilities()).find((p) => p.pool === 'small')?.freeCapacityGb).toBe(2);
  });
});

describe('delete', () => {
  it('removes every host connection of the volume and only those', async () => {
    // Prepare
    await driver.createVolume({ backendName: 'volume-1', sizeGb: 1, pool: 'pool0' });
    await driver.createVolume({ backendName: 'volume-2', sizeGb: 1, pool: 'pool0' });
    await driver.initializeConnection('volume-1', HOST_A);
    await driver.initializeConnection('volume-1', HOST_B);
    await driver.initializeConnection('volume-2', HOST_A);

    // Act
    await driver.deleteVolume('volume-1');

    // Assess
    expect(await driver.listConnections()).toEqual([{ backendName: 'volume-2', host: 'compute-1' }]);
    await expect(lstat(connectionPath(config, HOST_A.host, 'volume-1'))).rejects.toThrow(/ENOENT/);
  });
});

describe('extend', () => {
  it('grows the file, accepts the same size, refuses to shrink', async () => {
    // Prepare
    await driver.createVolume({ backendName: 'volume-1', sizeGb: 2, pool: 'pool0' });

    // Act
    await driver.extendVolume('volume-1', 5);
    await driver.extendVolume('volume-1', 5);
    const shrink = driver.extendVolume('volume-1', 3);

    // Assess
    await expect(shrink).rejects.toThrow(/cannot shrink/);
    expect((await stat(volumeFilePath(config, 'volume-1')!)).size).toBe(5 * GIB);
  });

  it('refuses growth beyond the pool and a missing volume', async () => {
    // Prepare
    await driver.createVolume({ backendName: 'volume-1', sizeGb: 8, pool: 'small' });

    // Act / Assess
    await expect(driver.extendVolume('volume-1', 11)).rejects.toThrow(/needs 3 GiB more/);
    await expect(driver.extendVolume('volume-missing', 11)).rejects.toThrow(/not found/);
    expect((await driver.getVolume('volume-1'))?.sizeGb).toBe(8);
  });
});

describe('connections', () => {
  it('gives the host an entry whose bytes are the volume bytes', async () => {
    // Prepare
    await driver.createVolume({ backendName: 'volume-1', sizeGb: 1, pool: 'pool0' });

    // Act
    const props = await driver.initializeConnection('volume-1', HOST_A);
    const device = await open(props.data.device_path as string, 'r+');
    await device.write(Buffer.from('written by the host'), 0, 19, 4096);
    await device.close();

    // Assess
    expect(props).toEqual({
      driverVolumeType: 'local',
      data: {
        device_path: join(root, '.connections', 'compute-1', 'volume-1'),
        volume_path: join(root, 'pool0', 'volume-1'),
        backend_name: 'volume-1',
        target_lun: 0,
        host: 'compute-1',
      },
    });
    const volume = await open(props.data.volume_path as string, 'r');
    const bytes = Buffer.alloc(19);
    await volume.read(bytes, 0, 19, 4096);
    await volume.close();
    expect(bytes.toString()).toBe('written by the host');
    expect((await lstat(props.data.device_path as string)).isSymbolicLink()).toBe(true);
  });

  it('repairs an entry pointing elsewhere', async () => {
    // Prepare
    await driver.createVolume({ backendName: 'volume-1', sizeGb: 1, pool: 'pool0' });
    const props = await driver.initializeConnection('volume-1', HOST_A);
    await rm(props.data.device_path as string);
    await symlink('/nonexistent', props.data.device_path as string);

    // Act
    await driver.initializeConnection('volume-1', HOST_A);

    // Assess
    expect((await stat(props.data.device_path as string)).size).toBe(GIB);
    expect(await readlink(props.data.device_path as string)).not.toBe('/nonexistent');
  });

  it('refuses a missing volume and a connector without host', async () => {
    // Prepare
    await driver.createVolume({ backendName: 'volume-1', sizeGb: 1, pool: 'pool0' });

    // Act / Assess
    await expect(driver.initializeConnection('volume-missing', HOST_A)).rejects.toThrow(/not found/);
    await expect(driver.initializeConnection('volume-1', { host: '' })).rejects.toThrow(/connector has no host/);
  });

  it('keeps odd host names in one path component and lists them back unchanged', async () => {
    // Prepare
    const odd = { host: '../etc/passwd host%ü' };
    await driver.createVolume({ backendName: 'volume-1', sizeGb: 1, pool: 'pool0' });

    // Act
    const props = await driver.initializeConnection('volume-1', odd);

    // Assess
    expect(props.data.device_path).toBe(join(root, '.connections', encodeHost(odd.host), 'volume-1'));
    expect(encodeHost(odd.host)).not.toContain('/');
    expect(decodeHost(encodeHost(odd.host))).toBe(odd.host);
    expect(await driver.listConnections()).toEqual([{ backendName: 'volume-1', host: odd.host }]);
  });
});

describe('listing and capabilities', () => {
  it('lists volumes of every pool from disk, ignoring temp files', async () => {
    // Prepare
    await driver.createVolume({ backendName: 'volume-1', sizeGb: 3, pool: 'pool0' });
    await driver.createVolume({ backendName: 'volume-2', sizeGb: 1, pool: 'small' });
    await writeFile(join(root, 'pool0', '.tmp-volume-9-crashed'), '');

    // Act
    const volumes = await driver.listVolumes();

    // Assess
    expect(volumes.sort((a, b) => a.backendName.localeCompare(b.backendName))).toEqual([
      { backendName: 'volume-1', sizeGb: 3 },
      { backendName: 'volume-2', sizeGb: 1 },
    ]);
  });

  it('lists nothing for an empty root', async () => {
    // Act / Assess
    expect(await new LocalVolumeDriver({ ...config, root: join(root, 'not-yet') }).listVolumes()).toEqual([]);
    expect(await driver.listConnections()).toEqual([]);
  });

  it('reports each pool with free capacity from disk', async () => {
    // Prepare
    await driver.createVolume({ backendName: 'volume-1', sizeGb: 100, pool: 'pool0' });
    await driver.createVolume({ backendName: 'volume-2', sizeGb: 4, pool: 'small' });

    // Act
    const caps = await driver.capabilities();

    // Assess
    expect(caps).toEqual([
      {
        pool: 'pool0',
        totalCapacityGb: 2000,
        freeCapacityGb: 1900,
        multiattach: true,
        sharedTargets: false,
        storageProtocol: 'local',
        volumeBackendName: 'lvm-a',
        driverVersion: '1.0',
        vendorName: 'Ferry',
        replicationEnabled: false,
        replicationTargets: [],
        replicationCount: 0,
        replicationType: [],
      },
      expect.objectContaining({ pool: 'small', totalCapacityGb: 10, freeCapacityGb: 6 }),
    ]);
  });
});

describe('registry', () => {
  it('caches per host, rebuilds on a changed config, and wraps in faults', async () => {
    // Prepare
    const first = driverFor(config);

    // Act
    const same = driverFor({ ...config, pools: [...config.pools] });
    const changed = driverFor({ ...config, pools: [{ name: 'pool0', totalCapacityGb: 5 }] });
    injectFault({ kind: 'volume', backend: config.host, method: 'listVolumes', mode: 'fail', times: 1 });
    const attempt = await changed.listVolumes().catch((e: unknown) => e);

    // Assess
    expect(same).toBe(first);
    expect(changed).not.toBe(first);
    expect((await changed.capabilities())[0].totalCapacityGb).toBe(5);
    expect(attempt).toBeInstanceOf(DriverError);
    expect((attempt as Error).message).toBe('injected fault: volume.listVolumes on ferry@lvm-a');
    expect(faultCalls().map((c) => c.method)).toEqual(expect.arrayContaining(['listVolumes', 'capabilities']));
  });

  it('refuses an unknown driver kind clearly', () => {
    // Act / Assess
    expect(() => driverFor({ ...config, driver: 'nfs' as 'local' })).toThrow(/unknown volume driver "nfs"/);
  });
});
