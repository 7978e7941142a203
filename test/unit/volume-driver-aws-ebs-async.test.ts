/**
 * The aws-ebs driver never waits long in a function: a change EC2 has not finished after a few
 * looks is BackendNotReady (the state machine runs the step again after its wait), and the next
 * call carries on from where EC2 is, making nothing twice.
 */
import { CreateVolumeCommand, DescribeVolumesCommand, EC2Client, type VolumeState } from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BackendNotReady } from '../../functions/core/errors.js';
import { AwsEbsVolumeDriver } from '../../functions/drivers/volume/aws-ebs.js';
import { FAKE_EC2_GP_BACKEND, FakeEc2, wireFakeEc2 } from '../support/fake-ec2.js';

const client = new EC2Client({ region: 'eu-west-1' });
const ec2 = mockClient(client);
let fake: FakeEc2;
let driver: AwsEbsVolumeDriver;
const sentWrites = () => ec2.calls().map((c) => (c.args[0] as object).constructor.name.replace(/Command$/, '')).filter((n) => !n.startsWith('Describe'));

beforeEach(() => {
  fake = new FakeEc2();
  ec2.reset();
  wireFakeEc2(ec2, fake);
  driver = new AwsEbsVolumeDriver(FAKE_EC2_GP_BACKEND, { client, pollIntervalMs: 0, pollAttempts: 3 });
});
afterEach(() => ec2.reset());

describe('changes EC2 has not finished: BackendNotReady, and the next call carries on', () => {
  const stuck = (state: VolumeState) => ec2.on(DescribeVolumesCommand, { VolumeIds: ['vol-1'] }).resolves({ Volumes: [{ VolumeId: 'vol-1', Size: 8, State: state, Attachments: [], Tags: fake.volumes.get('vol-1')?.Tags }] });

  it('a volume still creating after the looks is not ready; the retried create finds it by its tags and finishes', async () => {
    const created = driver.createVolume({ backendName: 'volume-1', sizeGb: 8, pool: 'gp' });
    // The fake's volume settles on its first look; EC2's may take longer: make every look by id see `creating`.
    stuck('creating');
    await expect(created).rejects.toBeInstanceOf(BackendNotReady);
    expect(ec2.commandCalls(CreateVolumeCommand)).toHaveLength(1);

    wireFakeEc2(ec2, fake);
    expect(await driver.createVolume({ backendName: 'volume-1', sizeGb: 8, pool: 'gp' })).toEqual({ providerLocation: 'vol-1' });
    expect(ec2.commandCalls(CreateVolumeCommand)).toHaveLength(1);
  });

  it('deleting an attached volume asks for the detach, is not ready until EC2 detached it, then deletes', async () => {
    fake.add('volume-1', 8, 'gp', { State: 'in-use', Attachments: [{ VolumeId: 'vol-1', InstanceId: 'i-1', Device: '/dev/sdf', State: 'attached' }] });
    stuck('in-use');
    await expect(driver.deleteVolume('volume-1')).rejects.toBeInstanceOf(BackendNotReady);
    expect(sentWrites()).toEqual(['DetachVolume']);
    expect(fake.volumes.has('vol-1')).toBe(true);

    wireFakeEc2(ec2, fake);
    await driver.deleteVolume('volume-1');
    expect(fake.volumes.has('vol-1')).toBe(false);
  });
});
