/**
 * The aws-ebs driver's io1/io2 volumes (provisioned IOPS, Multi-Attach per volume, EC2's size
 * limits) and its adoption of volumes it did not make (manage of a foreign EBS volume by id),
 * against the EC2 model of test/support/fake-ec2.ts, which refuses what EC2 refuses.
 */
import { CreateTagsCommand, CreateVolumeCommand, DeleteTagsCommand, EC2Client } from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import { AwsEbsVolumeDriver } from '../../functions/drivers/volume/aws-ebs.js';
import { provisionedIops } from '../../functions/drivers/volume/aws-ebs-ec2.js';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';
import { awsError, FakeEc2, wireFakeEc2 } from '../support/fake-ec2.js';

const backend = (ebsVolumeType: string, extra: Partial<BackendConfig> = {}): BackendConfig => ({
  host: 'ferry@ebs-a',
  driver: 'aws-ebs',
  availabilityZone: 'eu-west-1a',
  ebsVolumeType,
  pools: [{ name: 'p', totalCapacityGb: 100 }],
  serviceUuid: '22222222-2222-4222-8222-222222222222',
  volumeBackendName: 'ebs-a',
  ...extra,
});

const client = new EC2Client({ region: 'eu-west-1' });
const ec2 = mockClient(client);
let fake: FakeEc2;
const driverOf = (config: BackendConfig) => new AwsEbsVolumeDriver(config, { client, pollIntervalMs: 0, pollAttempts: 5 });
const tags = (volumeId: string) => Object.fromEntries((fake.volumes.get(volumeId)?.Tags ?? []).map((t) => [t.Key, t.Value]));

/** A volume someone made outside Ferry: no ferry tags. */
function foreign(sizeGb: number, extra: Parameters<FakeEc2['add']>[3] = {}): string {
  const v = fake.add('x', sizeGb, 'p', { Tags: [{ Key: 'Name', Value: 'legacy-db' }], ...extra });
  return v.VolumeId!;
}

beforeEach(() => {
  fake = new FakeEc2();
  fake.devices.set('i-2', ['/dev/sda1']);
  ec2.reset();
  wireFakeEc2(ec2, fake);
});
afterEach(() => ec2.reset());

describe('io1 and io2 volumes', () => {
  it('creates io2 with its IOPS provisioned and Multi-Attach only when the volume asks, so it attaches to two instances', async () => {
    // Prepare
    const driver = driverOf(backend('io2'));

    // Act
    await driver.createVolume({ backendName: 'volume-m', sizeGb: 8, pool: 'p', multiattach: true });
    await driver.createVolume({ backendName: 'volume-s', sizeGb: 8, pool: 'p' });
    await driver.initializeConnection('volume-m', { host: 'i-1' });
    await driver.initializeConnection('volume-m', { host: 'i-2' });
    await driver.initializeConnection('volume-s', { host: 'i-1' });
    const second = driver.initializeConnection('volume-s', { host: 'i-2' });

    // Assess
    const inputs = ec2.commandCalls(CreateVolumeCommand).map((c) => c.args[0].input);
    expect(inputs.map((i) => [i.VolumeType, i.Iops, i.MultiAttachEnabled])).toEqual([
      ['io2', 400, true],
      ['io2', 400, undefined],
    ]);
    await expect(second).rejects.toThrow(/VolumeInUse/);
    expect((await driver.listConnections()).sort((a, b) => (a.backendName + a.host).localeCompare(b.backendName + b.host))).toEqual([
      { backendName: 'volume-m', host: 'i-1' },
      { backendName: 'volume-m', host: 'i-2' },
      { backendName: 'volume-s', host: 'i-1' },
    ]);
  });

  it('refuses, before any CreateVolume, a multiattach volume of a type EBS cannot share and a size the type does not take', async () => {
    // Act
    const gp3Multi = driverOf(backend('gp3')).createVolume({ backendName: 'volume-1', sizeGb: 8, pool: 'p', multiattach: true });
    const io2Small = driverOf(backend('io2')).createVolume({ backendName: 'volume-2', sizeGb: 1, pool: 'p' });

    // Assess
    await expect(gp3Multi).rejects.toThrow(/cannot attach to several instances/);
    await expect(io2Small).rejects.toThrow(/EBS io2 volumes are 4 to 65536 GiB/);
    await expect(io2Small).rejects.toBeInstanceOf(DriverError);
    expect(ec2.commandCalls(CreateVolumeCommand)).toHaveLength(0);
  });

  it('keeps the IOPS within each type\'s range and ratio', () => {
    expect(provisionedIops('gp3', 100)).toBeUndefined();
    expect(provisionedIops('io2', 4)).toBe(200);
    expect(provisionedIops('io1', 1)).toBe(100);
    expect(provisionedIops('io1', 10_000)).toBe(64_000);
    expect(provisionedIops('io1', 10, 500)).toBe(500);
    expect(provisionedIops('io2', 10, 5_000)).toBe(10_000);
  });
});

describe('adopting a volume Ferry did not make', () => {
  it('lists the zone\'s untagged volumes, with the attached ones in use, and none of Ferry\'s or another zone\'s', async () => {
    // Prepare
    const free = foreign(5);
    const attached = foreign(6, { State: 'in-use', Attachments: [{ InstanceId: 'i-9', State: 'attached', Device: '/dev/sdf' }] });
    foreign(7, { AvailabilityZone: 'eu-west-1b' });
    fake.add('volume-ferry', 1);

    // Act
    const listed = await driverOf(backend('gp3')).listAdoptable();

    // Assess
    expect(listed).toEqual([
      { backendName: free, sizeGb: 5, inUse: false },
      { backendName: attached, sizeGb: 6, inUse: true },
    ]);
  });

  it('tags the volume as this backend\'s under its own id, once; getVolume finds it before and after', async () => {
    // Prepare
    const driver = driverOf(backend('gp3'));
    const id = foreign(5);

    // Act
    const before = await driver.getVolume(id);
    const first = await driver.adoptVolume(id, 'p');
    const again = await driver.adoptVolume(id, 'p');

    // Assess
    expect(before).toEqual({ backendName: id, sizeGb: 5 });
    expect(first).toEqual({ backendName: id, sizeGb: 5 });
    expect(again).toEqual(first);
    expect(ec2.commandCalls(CreateTagsCommand)).toHaveLength(1);
    expect(tags(id)).toEqual({ Name: 'legacy-db', 'ferry:backend-name': id, 'ferry:backend': 'ferry@ebs-a', 'ferry:pool': 'p', 'ferry:adopted': 'true' });
    expect(await driver.listVolumes()).toEqual([{ backendName: id, sizeGb: 5 }]);
    expect(await driver.listAdoptable()).toEqual([]);
  });

  it('a lost CreateTags reply: the retry finds the tags and sends nothing more', async () => {
    // Prepare
    const driver = driverOf(backend('gp3'));
    const id = foreign(5);
    ec2.on(CreateTagsCommand).callsFakeOnce((input: Parameters<FakeEc2['createTags']>[0]) => {
      fake.createTags(input);
      throw awsError('RequestTimeout');
    });

    // Act
    const lost = await driver.adoptVolume(id, 'p').catch((e: unknown) => e);
    const retried = await driver.adoptVolume(id, 'p');

    // Assess
    expect(lost).toBeInstanceOf(DriverError);
    expect(retried).toEqual({ backendName: id, sizeGb: 5 });
    expect(ec2.commandCalls(CreateTagsCommand)).toHaveLength(1);
  });

  it('refuses an attached volume, another backend\'s, another zone\'s and an unknown id, tagging nothing', async () => {
    // Prepare
    const driver = driverOf(backend('gp3'));
    const attached = foreign(5, { State: 'in-use', Attachments: [{ InstanceId: 'i-9', State: 'attached', Device: '/dev/sdf' }] });
    const otherZone = foreign(5, { AvailabilityZone: 'eu-west-1b' });
    const ferryB = new FakeEc2('ferry@ebs-b');
    const theirs = fake.add('volume-b', 1, 'p', { Tags: ferryB.add('volume-b', 1).Tags });

    // Act / Assess
    await expect(driver.adoptVolume(attached, 'p')).rejects.toThrow(/attached to i-9: detach it before managing it/);
    await expect(driver.adoptVolume(otherZone, 'p')).rejects.toThrow(/is in eu-west-1b/);
    await expect(driver.adoptVolume(theirs.VolumeId!, 'p')).rejects.toThrow(/belongs to Ferry backend ferry@ebs-b/);
    await expect(driver.adoptVolume('vol-999', 'p')).rejects.toThrow(/no volume vol-999 to manage/);
    expect(await driver.getVolume(otherZone)).toBeUndefined();
    expect(await driver.getVolume(theirs.VolumeId!)).toBeUndefined();
    expect(ec2.commandCalls(CreateTagsCommand)).toHaveLength(0);
  });

  it('release removes only what adoption added, and never touches a volume Ferry made', async () => {
    // Prepare
    const driver = driverOf(backend('gp3'));
    const id = foreign(5);
    await driver.adoptVolume(id, 'p');
    await driver.createVolume({ backendName: 'volume-own', sizeGb: 1, pool: 'p' });

    // Act
    await driver.releaseAdopted(id);
    await driver.releaseAdopted(id);
    await driver.releaseAdopted('volume-own');

    // Assess
    expect(tags(id)).toEqual({ Name: 'legacy-db' });
    expect(ec2.commandCalls(DeleteTagsCommand)).toHaveLength(1);
    expect(await driver.listVolumes()).toEqual([{ backendName: 'volume-own', sizeGb: 1 }]);
    expect(await driver.listAdoptable()).toEqual([{ backendName: id, sizeGb: 5, inUse: false }]);
  });
});
