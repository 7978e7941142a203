import {
  CreateSnapshotCommand,
  DeleteSnapshotCommand,
  DescribeSnapshotsCommand,
  DescribeVolumesCommand,
  EC2Client,
  type Filter,
  type Snapshot,
} from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';
import { AwsEbsVolumeDriver } from '../../functions/drivers/volume/aws-ebs.js';
import { replicationDriverFor } from '../../functions/drivers/volume/registry.js';
import { LocalVolumeDriver, snapshotPath, volumeFilePath } from '../../functions/drivers/volume/local.js';
import { clearDriverCache, driverFor, snapshotDriverFor } from '../../functions/drivers/volume/registry.js';
import { clearFaults, injectFault } from '../../functions/core/faults.js';
import { readAt, writeAt } from '../support/files.js';

const VOLUME_BYTES = 64 * 1024 * 1024;


describe('local snapshots', () => {
  let base: string;
  let config: BackendConfig;
  let driver: LocalVolumeDriver;

  beforeEach(async () => {
    base = await mkdtemp(join(tmpdir(), 'ferry-snapshots-'));
    config = {
      host: 'ferry@snap',
      driver: 'local',
      root: join(base, 'primary'),
      pools: [{ name: 'pool0', totalCapacityGb: 100 }],
      serviceUuid: '44444444-4444-4444-8444-444444444444',
      volumeBackendName: 'snap',
    };
    driver = new LocalVolumeDriver(config);
    // A 64 MiB file in the pool is a volume to the driver; a cold GiB of holes would cost seconds to read.
    await mkdir(join(base, 'primary', 'pool0'), { recursive: true });
    await writeFile(join(base, 'primary', 'pool0', 'vol-1'), '');
    await truncate(join(base, 'primary', 'pool0', 'vol-1'), VOLUME_BYTES);
    await writeAt(volumeFilePath(config, 'vol-1')!, 3000, 'at-snapshot');
  });

  afterEach(async () => {
    clearFaults();
    clearDriverCache();
    await rm(base, { recursive: true, force: true });
  });

  it('a snapshot is a sparse point-in-time copy of the volume', async () => {
    // Act
    await driver.createSnapshot('vol-1', 'snap-1');
    await writeAt(volumeFilePath(config, 'vol-1')!, 3000, 'later-write');

    // Assess
    const path = snapshotPath(config, 'pool0', 'vol-1', 'snap-1');
    const st = await stat(path);
    expect(path).toBe(join(base, 'primary', 'pool0', '.snapshots', 'vol-1', 'snap-1'));
    expect(st.size).toBe(VOLUME_BYTES);
    expect(st.blocks * 512).toBeLessThan(8 * 1024 * 1024);
    expect(await readAt(path, 3000, 11)).toBe('at-snapshot');
  });

  it('create is idempotent and keeps the first snapshot', async () => {
    // Prepare
    await driver.createSnapshot('vol-1', 'snap-1');
    await writeAt(volumeFilePath(config, 'vol-1')!, 3000, 'later-write');

    // Act
    await driver.createSnapshot('vol-1', 'snap-1');

    // Assess
    expect(await readAt(snapshotPath(config, 'pool0', 'vol-1', 'snap-1'), 3000, 11)).toBe('at-snapshot');
    expect(await driver.listSnapshots()).toEqual([{ backendName: 'vol-1', snapshotName: 'snap-1' }]);
  });

  it('lists snapshots, not as volumes, and deletes them idempotently', async () => {
    // Prepare
    await driver.createSnapshot('vol-1', 'snap-1');
    await driver.createSnapshot('vol-1', 'snap-2');

    // Act
    const listed = await driver.listSnapshots();
    await driver.deleteSnapshot('vol-1', 'snap-1');
    await driver.deleteSnapshot('vol-1', 'snap-1');
    const afterOne = await driver.listSnapshots();
    await driver.deleteSnapshot('vol-1', 'snap-2');

    // Assess
    expect(listed.map((s) => s.snapshotName).sort()).toEqual(['snap-1', 'snap-2']);
    expect(afterOne).toEqual([{ backendName: 'vol-1', snapshotName: 'snap-2' }]);
    expect(await driver.listSnapshots()).toEqual([]);
    expect(await driver.listVolumes()).toEqual([{ backendName: 'vol-1', sizeGb: 1 }]);
    expect(existsSync(join(base, 'primary', 'pool0', '.snapshots', 'vol-1'))).toBe(false);
  });

  it('refuses to delete a volume that has snapshots, and deletes it once they are gone', async () => {
    // Prepare
    await driver.createSnapshot('vol-1', 'snap-1');

    // Act
    const refused = await driver.deleteVolume('vol-1').catch((e: unknown) => e);
    await driver.deleteSnapshot('vol-1', 'snap-1');
    await driver.deleteVolume('vol-1');

    // Assess
    expect(refused).toBeInstanceOf(DriverError);
    expect((refused as Error).message).toMatch(/vol-1 still has 1 snapshot\(s\) \(snap-1\)/);
    expect(await driver.getVolume('vol-1')).toBeUndefined();
  });

  it('refuses a missing volume and an unsafe snapshot name', async () => {
    // Act / Assess
    await expect(driver.createSnapshot('vol-missing', 'snap-1')).rejects.toBeInstanceOf(DriverError);
    await expect(driver.createSnapshot('vol-1', '../escape')).rejects.toThrow(/invalid snapshot name/);
  });

  it('snapshots of a replicated volume follow it to the target and are there after a failover', async () => {
    // Prepare
    const siteB = join(base, 'site-b');
    await mkdir(siteB);
    const replicated: BackendConfig = { ...config, replicationDevices: [{ backend_id: 'site-b', root: siteB }] };
    const primary = new LocalVolumeDriver(replicated);
    await primary.enableReplication('vol-1');
    await primary.createSnapshot('vol-1', 'snap-1');
    await primary.syncNow();
    await rm(join(base, 'primary'), { recursive: true, force: true });

    // Act
    const { activeBackendId } = await primary.failoverHost([{ volumeId: 'v1', backendName: 'vol-1', sizeGb: 1 }], null);
    const onTarget = new LocalVolumeDriver(replicated, { activeBackendId });

    // Assess
    expect(await onTarget.listSnapshots()).toEqual([{ backendName: 'vol-1', snapshotName: 'snap-1' }]);
    expect(await readAt(snapshotPath(replicated, 'pool0', 'vol-1', 'snap-1', 'site-b'), 3000, 11)).toBe('at-snapshot');
  });

  it('the registry gives the local driver as a SnapshotDriver and faults reach its methods', async () => {
    // Prepare
    const snapshots = snapshotDriverFor(driverFor(config))!;
    injectFault({ kind: 'volume', backend: config.host, method: 'createSnapshot', mode: 'fail-after', times: 1 });

    // Act
    const attempt = await snapshots.createSnapshot('vol-1', 'snap-1').catch((e: unknown) => e);
    await snapshots.createSnapshot('vol-1', 'snap-1');

    // Assess
    expect(attempt).toBeInstanceOf(DriverError);
    expect((attempt as Error).message).toBe('injected fault: volume.createSnapshot on ferry@snap');
    expect(await snapshots.listSnapshots()).toEqual([{ backendName: 'vol-1', snapshotName: 'snap-1' }]);
  });
});

describe('aws-ebs snapshots', () => {
  const config: BackendConfig = {
    host: 'ferry@ebs-a',
    driver: 'aws-ebs',
    availabilityZone: 'eu-west-1a',
    pools: [{ name: 'gp', totalCapacityGb: 100 }],
    serviceUuid: '22222222-2222-4222-8222-222222222222',
    volumeBackendName: 'ebs-a',
  };
  const awsError = (name: string) => Object.assign(new Error(name), { name, $fault: 'client' });

  /** EC2 snapshots behind the mocked client: a new snapshot is pending until described once. */
  class FakeSnapshots {
    snapshots = new Map<string, Snapshot>();
    private next = 1;

    create(input: { VolumeId: string; TagSpecifications: { Tags: { Key: string; Value: string }[] }[] }): Snapshot {
      const s: Snapshot = { SnapshotId: `snap-${this.next++}`, VolumeId: input.VolumeId, State: 'pending', Tags: input.TagSpecifications[0].Tags };
      this.snapshots.set(s.SnapshotId!, s);
      return structuredClone(s);
    }

    describe(input: { SnapshotIds?: string[]; Filters?: Filter[]; OwnerIds?: string[] }) {
      const found = input.SnapshotIds
        ? input.SnapshotIds.map((id) => {
            const s = this.snapshots.get(id);
            if (!s) throw awsError('InvalidSnapshot.NotFound');
            return s;
          })
        : [...this.snapshots.values()].filter((s) =>
            (input.Filters ?? []).every((f) => f.Values!.includes(s.Tags?.find((t) => `tag:${t.Key}` === f.Name)?.Value ?? '')),
          );
      const out = structuredClone(found);
      for (const s of found) if (s.State === 'pending') s.State = 'completed';
      return { Snapshots: out };
    }

    delete(input: { SnapshotId: string }) {
      if (!this.snapshots.delete(input.SnapshotId)) throw awsError('InvalidSnapshot.NotFound');
      return {};
    }
  }

  const client = new EC2Client({ region: 'eu-west-1' });
  const ec2 = mockClient(client);
  let fake: FakeSnapshots;
  let driver: AwsEbsVolumeDriver;
  const sent = () => ec2.calls().map((c) => (c.args[0] as object).constructor.name.replace(/Command$/, ''));

  beforeEach(() => {
    fake = new FakeSnapshots();
    ec2.reset();
    ec2.on(DescribeVolumesCommand).resolves({
      Volumes: [
        {
          VolumeId: 'vol-9',
          Size: 1,
          State: 'available',
          Tags: [
            { Key: 'ferry:backend', Value: config.host },
            { Key: 'ferry:backend-name', Value: 'volume-1' },
            { Key: 'ferry:pool', Value: 'gp' },
          ],
        },
      ],
    });
    ec2.on(CreateSnapshotCommand).callsFake((i) => fake.create(i));
    ec2.on(DescribeSnapshotsCommand).callsFake((i) => fake.describe(i));
    ec2.on(DeleteSnapshotCommand).callsFake((i) => fake.delete(i));
    driver = new AwsEbsVolumeDriver(config, { client, pollIntervalMs: 0, pollAttempts: 5 });
  });

  it('creates a tagged EBS snapshot of the volume and waits until it is completed', async () => {
    // Act
    await driver.createSnapshot('volume-1', 'snap-1');

    // Assess
    const [s] = [...fake.snapshots.values()];
    expect(s).toMatchObject({ VolumeId: 'vol-9', State: 'completed' });
    expect(s.Tags).toEqual(
      expect.arrayContaining([
        { Key: 'ferry:backend', Value: config.host },
        { Key: 'ferry:backend-name', Value: 'volume-1' },
        { Key: 'ferry:snapshot-name', Value: 'snap-1' },
      ]),
    );
    const create = ec2.commandCalls(CreateSnapshotCommand)[0].args[0].input;
    expect(create.TagSpecifications?.[0].ResourceType).toBe('snapshot');
    expect(sent()).toContain('DescribeSnapshots');
  });

  it('create is idempotent: a retry finds the snapshot by its tags', async () => {
    // Prepare
    await driver.createSnapshot('volume-1', 'snap-1');

    // Act
    await driver.createSnapshot('volume-1', 'snap-1');

    // Assess
    expect(ec2.commandCalls(CreateSnapshotCommand)).toHaveLength(1);
    expect(await driver.listSnapshots()).toEqual([{ backendName: 'volume-1', snapshotName: 'snap-1' }]);
  });

  it('refuses a missing volume', async () => {
    // Prepare
    ec2.on(DescribeVolumesCommand).resolves({ Volumes: [] });

    // Act / Assess
    await expect(driver.createSnapshot('volume-x', 'snap-1')).rejects.toThrow(/volume volume-x not found/);
    expect(ec2.commandCalls(CreateSnapshotCommand)).toHaveLength(0);
  });

  it('a snapshot going into error fails the create', async () => {
    // Prepare
    ec2.on(CreateSnapshotCommand).callsFake((i) => ({ ...fake.create(i), State: 'error', StateMessage: 'broken' }));

    // Act / Assess
    await expect(driver.createSnapshot('volume-1', 'snap-1')).rejects.toThrow(/went into state error: broken/);
  });

  it('delete is idempotent and removes every snapshot of that name', async () => {
    // Prepare
    await driver.createSnapshot('volume-1', 'snap-1');
    fake.create({ VolumeId: 'vol-9', TagSpecifications: [{ Tags: [...fake.snapshots.get('snap-1')!.Tags!] as { Key: string; Value: string }[] }] });
    // The first delete races another caller's: the snapshot is gone by the time EC2 answers.
    ec2.on(DeleteSnapshotCommand)
      .callsFakeOnce((i) => {
        fake.delete(i);
        throw awsError('InvalidSnapshot.NotFound');
      })
      .callsFake((i) => fake.delete(i));

    // Act
    await driver.deleteSnapshot('volume-1', 'snap-1');
    await driver.deleteSnapshot('volume-1', 'snap-1');

    // Assess
    expect(ec2.commandCalls(DeleteSnapshotCommand).map((c) => c.args[0].input.SnapshotId)).toEqual(['snap-1', 'snap-2']);
    expect(fake.snapshots.has('snap-2')).toBe(false);
    expect(await driver.listSnapshots()).toEqual([]);
  });

  it('without replication_devices it reports no replication, and replicationDriverFor gives nothing', async () => {
    // Act
    const caps = await driver.capabilities();

    // Assess: a ReplicationDriver by kind (aws-ebs replicates to other regions when configured to).
    expect(caps[0].replicationEnabled).toBe(false);
    expect(replicationDriverFor(driver)).toBeUndefined();
  });
});
