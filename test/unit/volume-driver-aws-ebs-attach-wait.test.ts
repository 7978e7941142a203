/**
 * An EBS attach EC2 has not finished (issue 13): initializeConnection answers `pending` while EC2's
 * attachment is `attaching`, attachmentState is the volume-attach-wait machine's look (attached,
 * attaching, gone with the reason; a throttled look is BackendNotReady), and the pure transitions
 * of the wait's record (functions/attachments/attach-wait.ts).
 */
import { DescribeVolumesCommand, EC2Client } from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { attachWaitExecutionName, failAttach, liveItemWait, liveWait, renewAttachWait, withAttachWait } from '../../functions/attachments/attach-wait.js';
import { attachWaitStep } from '../../functions/attachments/attach-wait-steps.js';
import { attachmentToTerminate } from '../../functions/attachments/legacy.js';
import { connect, remove, reserve } from '../../functions/attachments/transitions.js';
import { BackendNotReady, DriverError } from '../../functions/core/errors.js';
import { AwsEbsVolumeDriver } from '../../functions/drivers/volume/aws-ebs.js';
import { awsError, FAKE_EC2_GP_BACKEND, FakeEc2, wireFakeEc2 } from '../support/fake-ec2.js';
import { connectorFor, INSTANCE_A, INSTANCE_B, T0, T1, volumeFixture } from '../support/attachment-fixtures.js';

const client = new EC2Client({ region: 'eu-west-1' });
const ec2 = mockClient(client);
let fake: FakeEc2;
let driver: AwsEbsVolumeDriver;

beforeEach(() => {
  fake = new FakeEc2();
  ec2.reset();
  wireFakeEc2(ec2, fake);
  driver = new AwsEbsVolumeDriver(FAKE_EC2_GP_BACKEND, { client, pollIntervalMs: 0, pollAttempts: 3 });
});
afterEach(() => ec2.reset());

/** The fake's DescribeVolumes stops settling attachments (EC2 still at it) until settled() again. */
const unsettled = () => Object.assign(fake, { settle: () => undefined });
const settled = () => delete (fake as unknown as { settle?: unknown }).settle;

describe('initializeConnection: pending while EC2 is attaching', () => {
  it('an attachment found attached (or busy) is not pending; one found attaching is', async () => {
    // Prepare
    fake.add('volume-1', 8, 'gp', { State: 'in-use', Attachments: [{ VolumeId: 'vol-1', InstanceId: 'i-1', Device: '/dev/sdf', State: 'busy' }] });
    fake.add('volume-2', 8, 'gp', { State: 'in-use', Attachments: [{ VolumeId: 'vol-2', InstanceId: 'i-1', Device: '/dev/sdg', State: 'attaching' }] });
    unsettled();

    // Act
    const busy = await driver.initializeConnection('volume-1', { host: 'i-1' });
    const attaching = await driver.initializeConnection('volume-2', { host: 'i-1' });

    // Assess
    expect([busy.pending, attaching.pending]).toEqual([false, true]);
    expect(attaching.data).toEqual({ volume_id: 'vol-2', instance_id: 'i-1', device: '/dev/sdg' });
  });
});

describe('attachmentState: the look of volume-attach-wait', () => {
  it('attaching, then attached once EC2 finished (after N looks)', async () => {
    // Prepare
    fake.add('volume-1', 8);
    await driver.initializeConnection('volume-1', { host: 'i-1' });
    unsettled();

    // Act / Assess: EC2 still attaching for two looks, then done.
    expect(await driver.attachmentState('volume-1', { host: 'i-1' })).toEqual({ state: 'attaching' });
    expect(await driver.attachmentState('volume-1', { host: 'i-1' })).toEqual({ state: 'attaching' });
    settled();
    expect(await driver.attachmentState('volume-1', { host: 'i-1' })).toEqual({ state: 'attached' });
  });

  it('an attachment EC2 dropped (vanished, or detaching) is gone, with the reason in words', async () => {
    // Prepare
    fake.add('volume-1', 8);
    fake.add('volume-2', 8, 'gp', { Attachments: [{ VolumeId: 'vol-2', InstanceId: 'i-1', Device: '/dev/sdf', State: 'detaching' }] });
    unsettled();

    // Act
    const vanished = await driver.attachmentState('volume-1', { host: 'i-1' });
    const detaching = await driver.attachmentState('volume-2', { host: 'i-1' });
    const noVolume = await driver.attachmentState('volume-x', { host: 'i-1' });

    // Assess
    expect(vanished).toEqual({ state: 'gone', reason: expect.stringMatching(/^EC2 holds no attachment of EBS volume vol-1 to instance i-1: the attach did not take/) });
    expect(detaching).toMatchObject({ state: 'gone', reason: expect.stringContaining('(its attachment is detaching)') });
    expect(noVolume).toMatchObject({ state: 'gone', reason: expect.stringContaining('no longer exists') });
  });

  it('a throttled look is BackendNotReady (looked at again), another EC2 error stays a DriverError', async () => {
    // Prepare
    fake.add('volume-1', 8);
    ec2.on(DescribeVolumesCommand).rejectsOnce(awsError('RequestLimitExceeded', 'Request limit exceeded.')).rejectsOnce(awsError('UnauthorizedOperation', 'not allowed'));

    // Act / Assess
    await expect(driver.attachmentState('volume-1', { host: 'i-1' })).rejects.toBeInstanceOf(BackendNotReady);
    const other = await driver.attachmentState('volume-1', { host: 'i-1' }).catch((e: unknown) => e);
    expect(other).toBeInstanceOf(DriverError);
    expect(other).not.toBeInstanceOf(BackendNotReady);
  });
});

describe('the wait record (attach-wait.ts)', () => {
  const connected = (pending: boolean) => {
    const r = reserve(volumeFixture(), { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0 });
    const connection = { driverVolumeType: 'aws_ebs', data: { volume_id: 'vol-1' }, pending };
    return withAttachWait(connect(r.volume, r.attachment, { connector: connectorFor('i-1'), connection, now: T1 }, { checkDuplicates: true }), connection, T1);
  };

  it('a pending connect records a waiting wait on the volume, named after the attachment and the volume version it writes; one made at once records none', () => {
    // Act
    const pending = connected(true);
    const made = connected(false);

    // Assess
    expect(pending.volume.attachWaits!['att-1']).toEqual({ execution: attachWaitExecutionName('att-1', pending.volume.version), host: 'i-1', status: 'waiting', startedAt: T1 });
    expect(pending.volume.attachWaits!['att-1']!.execution).toBe(`volume-attach-wait-att-1-v${pending.volume.version}`);
    expect(pending.attachment.attachWait).toBeUndefined();
    expect(liveWait(pending.volume, 'att-1')).toBe(pending.volume.attachWaits!['att-1']);
    expect(made.volume.attachWaits).toBeUndefined();
    // A later connect made at once drops the earlier wait (and one an older item held).
    const again = withAttachWait({ ...pending, attachment: { ...pending.attachment, attachWait: pending.volume.attachWaits!['att-1'] } }, { driverVolumeType: 'aws_ebs', data: {} }, T1);
    expect([again.volume.attachWaits, again.attachment.attachWait]).toEqual([{}, undefined]);
  });

  it('the longest name (a uuid attachment id, the largest version a number holds exactly) fits the 80 characters executionName keeps', () => {
    const name = attachWaitExecutionName('0b4f9c2e-6f1d-4f8a-9a57-3c2d1e0f9b8a', Number.MAX_SAFE_INTEGER);
    expect(name.length).toBeLessThanOrEqual(80);
    expect(name.endsWith(`-v${Number.MAX_SAFE_INTEGER}`)).toBe(true);
  });

  it('a failed attach: error_attaching without connection_info, off its host, the volume recomputed; deleted or ended waits are not live', () => {
    // Prepare
    const { volume, attachment } = connected(true);

    // Act
    const failed = failAttach(volume, attachment, 'EC2 holds no attachment', '2026-01-01T00:00:09.000Z');

    // Assess
    expect(failed.attachment).toMatchObject({ attachStatus: 'error_attaching', connectionInfo: null, version: attachment.version });
    expect(failed.attachment.attachWait).toBeUndefined();
    expect(failed.volume.attachWaits!['att-1']).toMatchObject({ status: 'failed', reason: 'EC2 holds no attachment', detachPending: true });
    expect(failed.volume).toMatchObject({ status: 'available', attachStatus: 'detached', connections: {}, version: volume.version + 1 });
    expect(failed.volume.attachments['att-1']).toMatchObject({ status: 'error_attaching', connected: false });
    expect(liveWait(failed.volume, 'att-1')).toBeUndefined();
    expect(liveWait(remove(volume, attachment, T1).volume, 'att-1')).toBeUndefined();
    expect(liveWait({ ...volume, attachments: { 'att-1': { ...volume.attachments['att-1']!, host: 'i-2' } } }, 'att-1')).toBeUndefined();
  });

  it('a delete drops the attachment\'s wait from the volume, but for a failed attach whose detach is still pending', () => {
    // Prepare
    const { volume, attachment } = connected(true);
    const failed = failAttach(volume, attachment, 'EC2 holds no attachment', '2026-01-01T00:00:09.000Z');

    // Act
    const waiting = remove(volume, attachment, T1);
    const detachPending = remove(failed.volume, failed.attachment, T1);
    const detached = remove({ ...failed.volume, attachWaits: { 'att-1': { ...failed.volume.attachWaits!['att-1']!, detachPending: undefined } } }, failed.attachment, T1);

    // Assess
    expect(waiting.volume.attachWaits).toEqual({});
    expect(detachPending.volume.attachWaits).toEqual(failed.volume.attachWaits);
    expect(detached.volume.attachWaits).toEqual({});
  });

  it('a failed wait on an attachment item written before the volume\'s map is recorded on that item', () => {
    // Prepare: the wait on the item, as written before
    const { volume, attachment } = connected(true);
    const { attachWaits: _waits, ...before } = volume;
    const itemWait = volume.attachWaits!['att-1']!;

    // Act
    const failed = failAttach(before, { ...attachment, attachWait: itemWait }, 'gone', '2026-01-01T00:00:09.000Z');

    // Assess
    expect(failed.attachment.attachWait).toMatchObject({ status: 'failed', reason: 'gone', detachPending: true });
    expect(failed.volume.attachWaits).toBeUndefined();
    expect(liveItemWait({ ...attachment, attachWait: itemWait })).toBe(itemWait);
    expect(liveItemWait({ ...attachment, attachWait: itemWait, deleted: true })).toBeUndefined();
  });
  it('a failed attach\'s summary keeps its host and connector, but counts for no connection: a delete of it or a move of it terminates nothing', () => {
    // Prepare: another attachment of the multiattach volume uses the same host's connection
    const r = reserve(volumeFixture({ multiattach: true }), { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0 });
    const connection = { driverVolumeType: 'aws_ebs', data: { volume_id: 'vol-1' }, pending: true };
    const first = withAttachWait(connect(r.volume, r.attachment, { connector: connectorFor('i-1'), connection, now: T1 }, { checkDuplicates: true }), connection, T1);
    const other = reserve(first.volume, { attachmentId: 'att-2', instanceUuid: INSTANCE_B, now: T1 });
    const both = connect(other.volume, other.attachment, { connector: connectorFor('i-1'), connection: { ...connection, pending: false }, now: T1 }, { checkDuplicates: true });

    // Act
    const failed = failAttach(both.volume, first.attachment, 'EC2 holds no attachment', '2026-01-01T00:00:09.000Z');
    const deleted = remove(failed.volume, failed.attachment, '2026-01-01T00:00:10.000Z');
    const moved = connect(failed.volume, failed.attachment, { connector: connectorFor('i-2'), connection, now: '2026-01-01T00:00:10.000Z' }, { checkDuplicates: true });

    // Assess
    expect(failed.volume.attachments['att-1']).toMatchObject({ status: 'error_attaching', connected: false, host: 'i-1', connector: { host: 'i-1' } });
    expect(failed.volume.connections).toEqual({ 'i-1': ['att-2'] });
    expect([deleted.disconnect, deleted.volume.connections]).toEqual([null, { 'i-1': ['att-2'] }]);
    expect([moved.releasedHost, moved.volume.connections]).toEqual([null, { 'i-1': ['att-2'], 'i-2': ['att-1'] }]);
    // Alone on its host, the same: its failure took it off, so nothing is left to terminate by it.
    const alone = failAttach(first.volume, first.attachment, 'EC2 holds no attachment', '2026-01-01T00:00:09.000Z');
    expect(remove(alone.volume, alone.attachment, '2026-01-01T00:00:10.000Z').disconnect).toBeNull();
  });
  it('os-terminate_connection on a host where an attach failed and another attachment connected since: the connected one goes', () => {
    // Prepare: os-initialize_connection's attachments (no instance), the first failed, the second connected on the same host
    const connection = { driverVolumeType: 'aws_ebs', data: { volume_id: 'vol-1' }, pending: true };
    const r = reserve(volumeFixture(), { attachmentId: 'att-1', instanceUuid: null, now: T0 });
    const first = withAttachWait(connect(r.volume, r.attachment, { connector: connectorFor('i-1'), connection, now: T1 }, { checkDuplicates: true }), connection, T1);
    const failed = failAttach(first.volume, first.attachment, 'EC2 holds no attachment', '2026-01-01T00:00:09.000Z');
    const again = reserve(failed.volume, { attachmentId: 'att-2', instanceUuid: null, now: '2026-01-01T00:00:10.000Z' });
    const second = connect(again.volume, again.attachment, { connector: connectorFor('i-1'), connection, now: '2026-01-01T00:00:10.000Z' }, { checkDuplicates: true });

    // Act, Assess: the failed one is listed first, but holds no connection
    expect(Object.keys(second.volume.attachments)).toEqual(['att-1', 'att-2']);
    expect(attachmentToTerminate(second.volume, 'i-1')).toBe('att-2');
    // With only the failed one on the host, it goes (the call ends what is there: nothing)
    expect(attachmentToTerminate(failed.volume, 'i-1')).toBe('att-1');
    expect(attachmentToTerminate(second.volume, 'i-2')).toBeUndefined();
  });
  it('a renewed wait carries its own version\'s name (the volume\'s next version); the connection it watches is the same, made once', () => {
    // Prepare
    const { volume } = connected(true);

    // Act
    const renewed = renewAttachWait(volume, 'att-1', '2026-01-01T00:00:09.000Z');

    // Assess
    expect(renewed.version).toBe(volume.version + 1);
    expect(renewed.attachWaits!['att-1']).toEqual({ execution: attachWaitExecutionName('att-1', renewed.version), host: 'i-1', status: 'waiting', startedAt: '2026-01-01T00:00:09.000Z' });
    expect(renewed.attachWaits!['att-1']!.execution).not.toBe(volume.attachWaits!['att-1']!.execution);
    expect({ ...renewed, attachWaits: undefined, version: 0 }).toEqual({ ...volume, attachWaits: undefined, version: 0 });
  });

  it('a Look or Failed step without its execution\'s name acts on no wait (superseded, nothing read)', async () => {
    const attachmentId = () => {
      throw new Error('read the attachment');
    };
    expect(await attachWaitStep({ step: 'attach-wait-look', attachmentId: 'att-1' }, attachmentId)).toEqual({ outcome: 'superseded' });
    expect(await attachWaitStep({ step: 'attach-wait-failed', attachmentId: 'att-1' }, attachmentId)).toEqual({ outcome: 'superseded' });
    expect(attachWaitStep({ step: 'attach' }, attachmentId)).toBeUndefined();
  });
});
