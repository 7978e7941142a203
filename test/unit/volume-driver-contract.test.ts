/**
 * The volume driver contract suite (test/contracts/volume-driver.ts) against every volume driver:
 * the local driver on a temp directory, and the aws-ebs driver on a mocked EC2Client whose replies
 * follow the EC2 API reference, with a throttle, a lost reply and eventual consistency.
 */
import { CreateVolumeCommand, DescribeVolumesCommand, EC2Client } from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { mkdir, mkdtemp, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AwsEbsVolumeDriver } from '../../functions/drivers/volume/aws-ebs.js';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';
import { LocalVolumeDriver } from '../../functions/drivers/volume/local.js';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import { describeVolumeDriverContract } from '../contracts/volume-driver.js';
import { awsError, FAKE_EC2_BACKEND, FakeEc2, wireFakeEc2 } from '../support/fake-ec2.js';

describeVolumeDriverContract('local', async () => {
  const root = await mkdtemp(join(tmpdir(), 'ferry-volume-contract-'));
  const driver = new LocalVolumeDriver({
    host: 'ferry@contract',
    driver: 'local',
    root,
    pools: [{ name: 'pool0', totalCapacityGb: 20 }],
    serviceUuid: '55555555-5555-4555-8555-555555555555',
    volumeBackendName: 'contract',
  });
  return {
    driver,
    pool: 'pool0',
    connectors: [{ host: 'compute-1' }, { host: 'compute-2.example.org' }],
    // Local drivers implement ReplicationDriver; without replication_devices they report it disabled.
    declares: { driverVolumeType: 'local', snapshots: true, replication: true },
    // A 16 MiB file in the pool is a volume to the driver: snapshotting a GiB of holes costs seconds.
    putSmallVolume: async (backendName) => {
      await mkdir(join(root, 'pool0'), { recursive: true });
      await writeFile(join(root, 'pool0', backendName), '');
      await truncate(join(root, 'pool0', backendName), 16 * 1024 * 1024);
    },
    cleanup: async () => {
      clearDriverCache();
      await rm(root, { recursive: true, force: true });
    },
  };
});

const client = new EC2Client({ region: 'eu-west-1' });
const ec2 = mockClient(client);

describeVolumeDriverContract('aws-ebs', async () => {
  const fake = new FakeEc2(FAKE_EC2_BACKEND);
  fake.devices.set('i-2', ['/dev/sda1']);
  ec2.reset();
  wireFakeEc2(ec2, fake);
  const createVolume = (i: Parameters<FakeEc2['createVolume']>[0]) => fake.createVolume(i);
  const ebsBackend = (ebsVolumeType: string, pool: string): BackendConfig => ({
    host: FAKE_EC2_BACKEND,
    driver: 'aws-ebs',
    availabilityZone: 'eu-west-1a',
    ebsVolumeType,
    pools: [{ name: pool, totalCapacityGb: 20 }],
    serviceUuid: '22222222-2222-4222-8222-222222222222',
    volumeBackendName: 'ebs-a',
  });
  const driver = new AwsEbsVolumeDriver(ebsBackend('gp3', 'gp'), { client, pollIntervalMs: 0, pollAttempts: 5 });
  // A gp3 volume attaches to one instance only (EC2 answers VolumeInUse): two hosts need io2.
  const io2 = new AwsEbsVolumeDriver(ebsBackend('io2', 'io'), { client, pollIntervalMs: 0, pollAttempts: 5 });
  return {
    driver,
    pool: 'gp',
    multiattach: { driver: io2, pool: 'io', sizeGb: 4 },
    connectors: [{ host: 'i-1' }, { host: 'i-2' }],
    declares: { driverVolumeType: 'aws_ebs', snapshots: true, replication: true },
    faults: {
      throttleNext: () => {
        ec2.on(CreateVolumeCommand)
          .callsFakeOnce(() => {
            throw awsError('RequestLimitExceeded', 'Request limit exceeded.');
          })
          .callsFake(createVolume);
      },
      loseNextReply: () => {
        ec2.on(CreateVolumeCommand)
          .callsFakeOnce((i) => {
            createVolume(i);
            throw awsError('TimeoutError', 'Connection timed out after 120000 ms');
          })
          .callsFake(createVolume);
      },
      delayVisibilityOfNextCreate: () => {
        let hidden: string | undefined;
        let unseen = 2;
        ec2.on(CreateVolumeCommand).callsFake((i) => {
          const v = createVolume(i);
          hidden = v.VolumeId;
          return v;
        });
        ec2.on(DescribeVolumesCommand).callsFake((i: { VolumeIds?: string[] }) => {
          if (hidden && i.VolumeIds?.includes(hidden) && unseen-- > 0) throw awsError('InvalidVolume.NotFound', `The volume '${hidden}' does not exist.`);
          return fake.describeVolumes(i);
        });
      },
    },
    cleanup: async () => {
      ec2.reset();
    },
  };
});
