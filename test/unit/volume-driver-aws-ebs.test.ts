import {
  AttachVolumeCommand,
  CreateVolumeCommand,
  DeleteVolumeCommand,
  DescribeInstancesCommand,
  DescribeVolumesCommand,
  DetachVolumeCommand,
  EC2Client,
  ModifyVolumeCommand,
} from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigurationError, DriverError } from '../../functions/core/errors.js';
import { driverFor } from '../../functions/drivers/volume/registry.js';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';
import { AwsEbsVolumeDriver, clientTokenFor, regionOfAvailabilityZone } from '../../functions/drivers/volume/aws-ebs.js';
import { awsError, FakeEc2, wireFakeEc2 } from '../support/fake-ec2.js';

const config: BackendConfig = {
  host: 'ferry@ebs-a',
  driver: 'aws-ebs',
  availabilityZone: 'eu-west-1a',
  ebsVolumeType: 'gp3',
  pools: [
    { name: 'gp', totalCapacityGb: 100 },
    { name: 'small', totalCapacityGb: 10 },
  ],
  serviceUuid: '22222222-2222-4222-8222-222222222222',
  volumeBackendName: 'ebs-a',
};

const client = new EC2Client({ region: 'eu-west-1' });
const ec2 = mockClient(client);
let fake: FakeEc2;
let driver: AwsEbsVolumeDriver;

/** Command names in the order the driver sent them. */
const sent = () => ec2.calls().map((c) => (c.args[0] as object).constructor.name.replace(/Command$/, ''));
const sentWrites = () => sent().filter((n) => !n.startsWith('Describe'));

beforeEach(() => {
  fake = new FakeEc2();
  ec2.reset();
  wireFakeEc2(ec2, fake);
  driver = new AwsEbsVolumeDriver(config, { client, pollIntervalMs: 0, pollAttempts: 5 });
});

afterEach(() => ec2.reset());

describe('createVolume', () => {
  it('creates a tagged volume with a stable client token and waits until it is available', async () => {
    // Act
    const { providerLocation } = await driver.createVolume({ backendName: 'volume-1', sizeGb: 8, pool: 'gp' });

    // Assess
    const [call] = ec2.commandCalls(CreateVolumeCommand);
    expect(call.args[0].input).toEqual({
      Size: 8,
      AvailabilityZone: 'eu-west-1a',
      VolumeType: 'gp3',
      ClientToken: clientTokenFor('ferry@ebs-a', 'volume-1'),
      TagSpecifications: [
        {
          ResourceType: 'volume',
          Tags: [
            { Key: 'Name', Value: 'volume-1' },
            { Key: 'ferry:backend-name', Value: 'volume-1' },
            { Key: 'ferry:backend', Value: 'ferry@ebs-a' },
            { Key: 'ferry:pool', Value: 'gp' },
          ],
        },
      ],
    });
    expect(call.args[0].input.ClientToken!.length).toBeLessThanOrEqual(64);
    expect(providerLocation).toBe('vol-1');
    expect(fake.volumes.get('vol-1')?.State).toBe('available');
    expect(ec2.commandCalls(DescribeVolumesCommand, { VolumeIds: ['vol-1'] }).length).toBeGreaterThan(0);
  });

  it('returns the existing volume without creating another', async () => {
    // Prepare
    fake.add('volume-1', 8);

    // Act
    const { providerLocation } = await driver.createVolume({ backendName: 'volume-1', sizeGb: 8, pool: 'gp' });

    // Assess
    expect(providerLocation).toBe('vol-1');
    expect(ec2.commandCalls(CreateVolumeCommand)).toHaveLength(0);
  });

  it('refuses an existing name with a different size', async () => {
    // Prepare
    fake.add('volume-1', 8);

    // Act / Assess
    await expect(driver.createVolume({ backendName: 'volume-1', sizeGb: 9, pool: 'gp' })).rejects.toThrow(/already exists with 8 GiB/);
    expect(ec2.commandCalls(CreateVolumeCommand)).toHaveLength(0);
  });

  it('refuses when the pool has too little free capacity', async () => {
    // Prepare
    fake.add('volume-a', 8, 'small');

    // Act / Assess
    await expect(driver.createVolume({ backendName: 'volume-b', sizeGb: 3, pool: 'small' })).rejects.toThrow(/pool small has 2 GiB free/);
    expect(ec2.commandCalls(CreateVolumeCommand)).toHaveLength(0);
  });

  it('maps an EC2 error to a DriverError carrying the code and cause', async () => {
    // Prepare
    const cause = awsError('IdempotentParameterMismatch', 'token reused with other parameters');
    ec2.on(CreateVolumeCommand).rejects(cause);

    // Act
    const error = (await driver.createVolume({ backendName: 'volume-1', sizeGb: 8, pool: 'gp' }).catch((e: unknown) => e)) as DriverError;

    // Assess
    expect(error).toBeInstanceOf(DriverError);
    expect(error.message).toBe('backend ferry@ebs-a: EBS CreateVolume failed: IdempotentParameterMismatch: token reused with other parameters');
    expect(error.context).toMatchObject({ operation: 'CreateVolume', code: 'IdempotentParameterMismatch', backendName: 'volume-1' });
    expect(error.cause).toBe(cause);
  });

  it('fails clearly when the volume goes into error while creating', async () => {
    // Prepare
    ec2.on(CreateVolumeCommand).resolves({ VolumeId: 'vol-bad', State: 'creating', Size: 8 });
    ec2.on(DescribeVolumesCommand, { VolumeIds: ['vol-bad'] }).resolves({ Volumes: [{ VolumeId: 'vol-bad', State: 'error', Size: 8 }] });

    // Act / Assess
    await expect(driver.createVolume({ backendName: 'volume-1', sizeGb: 8, pool: 'gp' })).rejects.toThrow(/vol-bad went into state error/);
  });
});

describe('deleteVolume', () => {
  it('detaches an attached volume, waits, then deletes it', async () => {
    // Prepare
    const v = fake.add('volume-1', 8);
    await driver.initializeConnection('volume-1', { host: 'i-1' });
    ec2.resetHistory();

    // Act
    await driver.deleteVolume('volume-1');

    // Assess
    expect(sentWrites()).toEqual(['DetachVolume', 'DeleteVolume']);
    expect(ec2.commandCalls(DeleteVolumeCommand)[0].args[0].input).toEqual({ VolumeId: v.VolumeId });
    expect(fake.volumes.size).toBe(0);
  });

  it('succeeds when the volume is already gone, by tag or by EC2', async () => {
    // Prepare
    fake.add('volume-1', 8);
    ec2.on(DeleteVolumeCommand).rejects(awsError('InvalidVolume.NotFound'));

    // Act
    await driver.deleteVolume('volume-1');
    await driver.deleteVolume('volume-never');

    // Assess
    expect(ec2.commandCalls(DeleteVolumeCommand)).toHaveLength(1);
  });

  it('maps other errors to DriverError', async () => {
    // Prepare
    fake.add('volume-1', 8);
    ec2.on(DeleteVolumeCommand).rejects(awsError('UnauthorizedOperation', 'not allowed'));

    // Act / Assess
    await expect(driver.deleteVolume('volume-1')).rejects.toThrow('EBS DeleteVolume failed: UnauthorizedOperation: not allowed');
  });
});

describe('extendVolume', () => {
  it('grows with ModifyVolume, accepts the current size, refuses to shrink', async () => {
    // Prepare
    fake.add('volume-1', 8);

    // Act
    await driver.extendVolume('volume-1', 20);
    await driver.extendVolume('volume-1', 20);
    const shrink = await driver.extendVolume('volume-1', 4).catch((e: unknown) => e);

    // Assess
    expect(ec2.commandCalls(ModifyVolumeCommand).map((c) => c.args[0].input)).toEqual([{ VolumeId: 'vol-1', Size: 20 }]);
    expect(shrink).toBeInstanceOf(DriverError);
    expect((shrink as Error).message).toMatch(/cannot shrink volume-1 from 20 GiB to 4 GiB/);
  });

  it('refuses a missing volume and growth beyond the pool', async () => {
    // Prepare
    fake.add('volume-1', 8, 'small');

    // Act / Assess
    await expect(driver.extendVolume('volume-x', 20)).rejects.toThrow(/not found/);
    await expect(driver.extendVolume('volume-1', 11)).rejects.toThrow(/pool small has 2 GiB free/);
    expect(ec2.commandCalls(ModifyVolumeCommand)).toHaveLength(0);
  });
});

describe('initializeConnection', () => {
  it('attaches at the first free device and answers at once, while EC2 is still attaching', async () => {
    // Prepare
    fake.add('volume-1', 8);
    fake.devices.set('i-1', ['/dev/sda1', '/dev/sdf', '/dev/xvdg']);

    // Act
    const props = await driver.initializeConnection('volume-1', { host: 'i-1' });

    // Assess: the connection_info the instance needs, with no look after the attach (no wait in the API):
    // pending, so the attach's wait runs in volume-attach-wait.
    expect(ec2.commandCalls(AttachVolumeCommand)[0].args[0].input).toEqual({ VolumeId: 'vol-1', InstanceId: 'i-1', Device: '/dev/sdh' });
    expect(props).toEqual({ driverVolumeType: 'aws_ebs', data: { volume_id: 'vol-1', instance_id: 'i-1', device: '/dev/sdh' }, pending: true });
    expect(sent().at(-1)).toBe('AttachVolume');
    expect(fake.volumes.get('vol-1')?.Attachments?.[0].State).toBe('attaching');
  });

  it('uses the connector mountpoint when given, and connecting again returns the same', async () => {
    // Prepare
    fake.add('volume-1', 8);
    const first = await driver.initializeConnection('volume-1', { host: 'i-1', mountpoint: '/dev/sdk' });

    // Act
    const again = await driver.initializeConnection('volume-1', { host: 'i-1' });

    // Assess
    expect(ec2.commandCalls(AttachVolumeCommand)).toHaveLength(1);
    expect(ec2.commandCalls(DescribeInstancesCommand)).toHaveLength(0);
    expect(again.data).toEqual(first.data);
    expect(first.data.device).toBe('/dev/sdk');
    // The look that found the attachment saw it attached (the fake settles it): nothing left to wait for.
    expect([first.pending, again.pending]).toEqual([true, false]);
  });

  it('succeeds when AttachVolume did its work but the reply was lost', async () => {
    // Prepare
    fake.add('volume-1', 8);
    ec2.on(AttachVolumeCommand).callsFakeOnce((i) => {
      fake.attachVolume(i);
      throw awsError('RequestTimeout');
    });

    // Act
    const props = await driver.initializeConnection('volume-1', { host: 'i-1' });

    // Assess
    expect(props.data).toEqual({ volume_id: 'vol-1', instance_id: 'i-1', device: '/dev/sdf' });
  });

  it('maps a refused attach to DriverError, and refuses a full instance or missing volume', async () => {
    // Prepare
    fake.add('volume-1', 8);
    ec2.on(AttachVolumeCommand).rejects(awsError('VolumeInUse', 'vol-1 is already attached to an instance'));

    // Act / Assess
    await expect(driver.initializeConnection('volume-1', { host: 'i-1' })).rejects.toThrow(/EBS AttachVolume failed: VolumeInUse/);
    fake.devices.set('i-full', 'fghijklmnop'.split('').map((c) => `/dev/sd${c}`));
    await expect(driver.initializeConnection('volume-1', { host: 'i-full' })).rejects.toThrow(/no free device/);
    await expect(driver.initializeConnection('volume-x', { host: 'i-1' })).rejects.toThrow(/volume volume-x not found/);
  });
});

describe('terminateConnection', () => {
  it('detaches without waiting for EC2 to finish, and succeeds again once not attached', async () => {
    // Prepare
    fake.add('volume-1', 8);
    await driver.initializeConnection('volume-1', { host: 'i-1' });

    // Act
    await driver.terminateConnection('volume-1', { host: 'i-1' });
    await driver.terminateConnection('volume-1', { host: 'i-1' });
    await driver.terminateConnection('volume-x', { host: 'i-1' });

    // Assess
    expect(ec2.commandCalls(DetachVolumeCommand).map((c) => c.args[0].input)).toEqual([{ VolumeId: 'vol-1', InstanceId: 'i-1' }]);
    expect(fake.volumes.get('vol-1')?.Attachments).toEqual([]);
  });

  it('treats IncorrectState (detached meanwhile) as success', async () => {
    // Prepare
    fake.add('volume-1', 8, 'gp', { State: 'in-use', Attachments: [{ VolumeId: 'vol-1', InstanceId: 'i-1', Device: '/dev/sdf', State: 'attached' }] });
    ec2.on(DetachVolumeCommand).callsFakeOnce(() => {
      fake.volumes.get('vol-1')!.Attachments = [];
      throw awsError('IncorrectState');
    });

    // Act / Assess
    await expect(driver.terminateConnection('volume-1', { host: 'i-1' })).resolves.toBeUndefined();
  });
});

describe('listing and capabilities', () => {
  it('lists volumes and connections of this backend only, across pages', async () => {
    // Prepare
    fake.add('volume-1', 8);
    fake.add('volume-2', 2, 'small', { State: 'in-use', Attachments: [{ InstanceId: 'i-1', State: 'attached', Device: '/dev/sdf' }, { InstanceId: 'i-2', State: 'detached' }] });
    fake.add('volume-3', 1);
    const other = fake.add('volume-4', 5);
    other.Tags = other.Tags!.map((t) => (t.Key === 'ferry:backend' ? { ...t, Value: 'ferry@ebs-b' } : t));
    fake.add('volume-5', 7, 'gp', { State: 'deleting' });

    // Act
    const volumes = await driver.listVolumes();
    const connections = await driver.listConnections();

    // Assess
    expect(volumes).toEqual([
      { backendName: 'volume-1', sizeGb: 8 },
      { backendName: 'volume-2', sizeGb: 2 },
      { backendName: 'volume-3', sizeGb: 1 },
    ]);
    expect(connections).toEqual([{ backendName: 'volume-2', host: 'i-1' }]);
    expect(ec2.commandCalls(DescribeVolumesCommand, { NextToken: '2' }).length).toBeGreaterThan(0);
    expect(ec2.commandCalls(DescribeVolumesCommand)[0].args[0].input.Filters).toEqual([{ Name: 'tag:ferry:backend', Values: ['ferry@ebs-a'] }]);
  });

  it('reports pools with free = total minus the sizes of their volumes', async () => {
    // Prepare
    fake.add('volume-1', 30);
    fake.add('volume-2', 25);
    fake.add('volume-3', 4, 'small');

    // Act
    const caps = await driver.capabilities();

    // Assess
    expect(caps).toEqual([
      {
        pool: 'gp',
        totalCapacityGb: 100,
        freeCapacityGb: 45,
        multiattach: false,
        sharedTargets: false,
        storageProtocol: 'aws_ebs',
        volumeBackendName: 'ebs-a',
        driverVersion: '1.0',
        vendorName: 'Ferry',
        replicationEnabled: false,
      },
      expect.objectContaining({ pool: 'small', freeCapacityGb: 6 }),
    ]);
    expect((await new AwsEbsVolumeDriver({ ...config, ebsVolumeType: 'io2' }, { client }).capabilities())[0].multiattach).toBe(true);
  });

  it('gets one volume by backend name', async () => {
    // Prepare
    fake.add('volume-1', 8);

    // Act / Assess
    expect(await driver.getVolume('volume-1')).toEqual({ backendName: 'volume-1', sizeGb: 8 });
    expect(await driver.getVolume('volume-x')).toBeUndefined();
    expect(ec2.commandCalls(DescribeVolumesCommand)[0].args[0].input.Filters).toEqual([
      { Name: 'tag:ferry:backend', Values: ['ferry@ebs-a'] },
      { Name: 'tag:ferry:backend-name', Values: ['volume-1'] },
    ]);
  });

  it('maps a DescribeVolumes failure to DriverError', async () => {
    // Prepare
    ec2.on(DescribeVolumesCommand).rejects(awsError('UnauthorizedOperation', 'You are not authorized'));

    // Act / Assess
    await expect(driver.listVolumes()).rejects.toThrow('backend ferry@ebs-a: EBS DescribeVolumes failed: UnauthorizedOperation: You are not authorized');
  });

  it('derives the region from the availability zone', () => {
    // Act / Assess
    expect(regionOfAvailabilityZone('eu-west-1a')).toBe('eu-west-1');
    expect(regionOfAvailabilityZone('us-gov-west-1b')).toBe('us-gov-west-1');
  });
});

describe('registry', () => {
  it('checks an aws-ebs backend\'s replication_devices like any other kind', () => {
    // Act / Assess
    expect(() => driverFor({ ...config, replicationDevices: [{ backend_id: 'default' }] })).toThrow(ConfigurationError);
    expect(() => driverFor({ ...config, replicationDevices: [{ backend_id: 'site-b' }, { backend_id: 'site-b' }] })).toThrow(/site-b is configured twice/);
    expect(() => driverFor({ ...config, replicationDevices: [{ backend_id: '' }] })).toThrow(/has no backend_id/);
  });
});

