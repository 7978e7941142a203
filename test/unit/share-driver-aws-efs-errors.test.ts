/**
 * The EFS and EC2 error codes the aws-efs share driver acts on, each as the API reference lists it
 * for the operation (aws-efs-sdk.ts RETRY_LATER_CODES and the not-found codes): a throttle, a
 * dependency timeout or too little throughput capacity is tried again in the call, and throughout is BackendNotReady carrying the
 * code; a not-found answer to a delete is the delete done; an in-use answer is waited for. Also
 * the quota's shrink (Manila's ShareShrinkingPossibleDataLoss), enforcement with the record's rules,
 * and the replications the audit lists and deletes. Against test/support/fake-efs.ts.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { BackendNotReady, DriverError } from '../../functions/core/errors.js';
import { AwsEfsShareDriver } from '../../functions/drivers/share/aws-efs.js';
import { ShareShrinkingPossibleDataLoss, isShareReplicationDriver, type DriverAccessRule } from '../../functions/drivers/share/driver.js';
import { awsError } from '../support/fake-ec2.js';
import { efsBackend, untilReady } from '../support/fake-efs.js';
import { mockedEfsClients } from '../support/fake-efs-clients.js';
import { efsError, efsThrottle } from '../support/fake-efs-replication.js';

const NAME = 'share-11111111-1111-4111-a111-111111111111';
const REPLICA = 'share-22222222-2222-4222-a222-222222222222';
const GIB = 1024 ** 3;
const ATTEMPTS = 3;
const RW: DriverAccessRule = { id: 'r1', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'rw' };

const restores: (() => void)[] = [];
afterEach(() => {
  for (const r of restores.splice(0)) r();
});

function setup() {
  const { efs, ec2, fake, restore } = mockedEfsClients();
  restores.push(restore);
  const options = { efs, ec2, pollIntervalMs: 0, pollAttempts: ATTEMPTS };
  const driver = new AwsEfsShareDriver(efsBackend('ferry@efs-a'), options);
  const other = new AwsEfsShareDriver(efsBackend('ferry@efs-b'), options);
  const create = (d = driver, name = NAME, sizeGb = 2) => untilReady(() => d.createShare({ name, sizeGb, proto: 'NFS', pool: 'pool0' }));
  const count = (command: string) => fake.calls.filter((c) => c.command === command).length;
  const caught = (p: Promise<unknown>) => p.then(() => undefined, (e: unknown) => e as DriverError);
  return { fake, driver, other, create, count, caught };
}

describe('throttling and dependency timeouts are tried again', () => {
  // A throttled CreateFileSystem, once or at every try, is the share driver contract's (its
  // misbehaving backend, test/unit/share-driver-contract.test.ts); EC2's own throttle code is here.
  test('a throttled AuthorizeSecurityGroupIngress (EC2 RequestLimitExceeded) is sent again in the call: the rule applied', async () => {
    const { fake, driver, create, count } = setup();
    await create();
    fake.failNext('AuthorizeSecurityGroupIngress', awsError('RequestLimitExceeded', 'Request limit exceeded.'));
    await driver.updateAccess(NAME, [RW]);
    expect(count('AuthorizeSecurityGroupIngress')).toBe(2);
    expect(await driver.getAccess(NAME)).toEqual([RW]);
  });

  test('DeleteMountTarget answering DependencyTimeout ("try the call again") is sent again; the delete finishes', async () => {
    const { fake, driver, create, count } = setup();
    await create();
    fake.failNext('DeleteMountTarget', efsError('DependencyTimeout', 'The service timed out.'));
    await untilReady(() => driver.deleteShare(NAME));
    expect(count('DeleteMountTarget')).toBe(3);
    expect(fake.fileSystemNamed(NAME)).toBeUndefined();
  });

  test('IncorrectFileSystemLifeCycleState from CreateMountTarget (the file system updating a moment) is sent again; one mount target per subnet', async () => {
    const { fake, create, count } = setup();
    fake.failNext('CreateMountTarget', efsError('IncorrectFileSystemLifeCycleState', 'File system is updating.'));
    await create();
    expect(count('CreateMountTarget')).toBe(3);
    expect(fake.mountTargets.size).toBe(2);
  });

  test('CreateFileSystem answering InsufficientThroughputCapacity ("try again later") is sent again: one file system; refused at every try it is BackendNotReady carrying the code, nothing made, and the next call makes one', async () => {
    const { fake, driver, create, count, caught } = setup();
    const insufficient = () => efsError('InsufficientThroughputCapacity', 'Not enough capacity to provision additional throughput.', { $metadata: { httpStatusCode: 503 } });
    fake.failNext('CreateFileSystem', insufficient());
    await create();
    expect(count('CreateFileSystem')).toBe(2);
    expect([...fake.fileSystems.values()]).toHaveLength(1);

    for (let n = 0; n < ATTEMPTS; n++) fake.failNext('CreateFileSystem', insufficient());
    const e = await caught(driver.createShare({ name: REPLICA, sizeGb: 1, proto: 'NFS', pool: 'pool0' }));
    expect(e).toBeInstanceOf(BackendNotReady);
    expect(e!.context).toMatchObject({ operation: 'CreateFileSystem', code: 'InsufficientThroughputCapacity' });
    expect(fake.fileSystemNamed(REPLICA)).toBeUndefined();
    await create(driver, REPLICA);
    expect(fake.fileSystemNamed(REPLICA)).toBeDefined();
  });

  test('a code that is no throttle (BadRequest) is a DriverError at once, sent once', async () => {
    const { fake, driver, create, count, caught } = setup();
    await create();
    fake.failNext('PutFileSystemPolicy', efsError('BadRequest', 'malformed'));
    const e = await caught(driver.updateAccess(NAME, [RW]));
    expect(e).toBeInstanceOf(DriverError);
    expect(e!.context).toMatchObject({ operation: 'PutFileSystemPolicy', code: 'BadRequest' });
    expect(count('PutFileSystemPolicy')).toBe(1);
  });
});

describe('not found after a delete is the delete done; in use is waited for', () => {
  test('FileSystemNotFound from DeleteFileSystem, MountTargetNotFound from DeleteMountTarget, InvalidGroup.NotFound from DeleteSecurityGroup: done', async () => {
    const { fake, driver, create } = setup();
    await create();
    // Each thing went (another caller's delete) between the look and the delete.
    fake.failNext('DeleteMountTarget', efsError('MountTargetNotFound', 'gone'), { after: true });
    fake.failNext('DeleteFileSystem', efsError('FileSystemNotFound', 'gone'), { after: true });
    fake.failNext('DeleteSecurityGroup', awsError('InvalidGroup.NotFound', 'gone'), { after: true });
    await untilReady(() => driver.deleteShare(NAME));
    expect(fake.fileSystemNamed(NAME)).toBeUndefined();
    expect(fake.groups.size).toBe(0);
  });

  test('DescribeFileSystems by the token of a deleted file system answers FileSystemNotFound: the share is not there, and can be made again', async () => {
    const { fake, driver, create, count } = setup();
    await create();
    await untilReady(() => driver.deleteShare(NAME));
    const CreationToken = fake.calls.find((c) => c.command === 'CreateFileSystem')!.input.CreationToken as string;
    expect(fake.describeFileSystems({ CreationToken }).FileSystems).toMatchObject([{ LifeCycleState: 'deleting' }]);
    expect(() => fake.describeFileSystems({ CreationToken })).toThrow(/does not exist/);
    expect(await driver.getShare(NAME)).toBeUndefined();
    await driver.deleteShare(NAME);
    await create();
    expect(count('CreateFileSystem')).toBe(2);
    expect(await driver.getShare(NAME)).toBeDefined();
  });

  test('FileSystemInUse from DeleteFileSystem is BackendNotReady, and the next call deletes it', async () => {
    const { fake, driver, create, caught } = setup();
    await create();
    fake.failNext('DeleteFileSystem', efsError('FileSystemInUse', 'has mount targets'));
    expect(await caught(driver.deleteShare(NAME))).toBeInstanceOf(BackendNotReady);
    await untilReady(() => driver.deleteShare(NAME));
    expect(fake.fileSystemNamed(NAME)).toBeUndefined();
  });
});

describe('the quota: shrink, and enforcement with the record\'s rules', () => {
  test('shrink below what EFS meters is ShareShrinkingPossibleDataLoss, nothing changed; above it the size goes down; larger is no shrink', async () => {
    const { fake, driver, create, count, caught } = setup();
    await create(driver, NAME, 4);
    fake.setUsage(fake.fileSystemNamed(NAME)!.FileSystemId!, 2.5 * GIB);
    const e = await caught(driver.shrinkShare(NAME, 2));
    expect(e).toBeInstanceOf(ShareShrinkingPossibleDataLoss);
    expect(e!.context).toMatchObject({ usedBytes: 2.5 * GIB, sizeGb: 4, newSizeGb: 2 });
    expect(count('TagResource')).toBe(0);
    await driver.shrinkShare(NAME, 3);
    expect(await driver.shareUsage(NAME)).toMatchObject({ sizeGb: 3, overQuota: false, writesBlocked: false });
    await expect(driver.shrinkShare(NAME, 5)).rejects.toThrow(/cannot shrink .* from 3 GiB to 5 GiB/);
  });

  test('an extend whose policy change was throttled throughout has raised the size; the retried extend lifts the block', async () => {
    const { fake, driver, create, caught } = setup();
    await create(driver, NAME, 1);
    const fsId = fake.fileSystemNamed(NAME)!.FileSystemId!;
    fake.setUsage(fsId, 1.5 * GIB);
    expect(await driver.enforceQuota(NAME)).toMatchObject({ writesBlocked: true });
    for (let n = 0; n < ATTEMPTS; n++) fake.failNext('PutFileSystemPolicy', efsThrottle());
    expect(await caught(driver.extendShare(NAME, 2))).toBeInstanceOf(BackendNotReady);
    expect(await driver.shareUsage(NAME)).toMatchObject({ sizeGb: 2, overQuota: false, writesBlocked: true });
    await driver.extendShare(NAME, 2);
    expect(await driver.shareUsage(NAME)).toMatchObject({ sizeGb: 2, writesBlocked: false });
  });

  test('enforceQuota with rules pushes them (an access change it raced is re-asserted) and blocks writes while over the size', async () => {
    const { fake, driver, create } = setup();
    await create();
    await driver.updateAccess(NAME, []);
    fake.setUsage(fake.fileSystemNamed(NAME)!.FileSystemId!, 3 * GIB);
    expect(await driver.enforceQuota(NAME, [RW])).toMatchObject({ overQuota: true, writesBlocked: true });
    expect(await driver.getAccess(NAME)).toEqual([RW]);
    fake.setUsage(fake.fileSystemNamed(NAME)!.FileSystemId!, GIB);
    expect(await driver.enforceQuota(NAME, [RW])).toMatchObject({ overQuota: false, writesBlocked: false });
  });
});

describe('replications for the audit', () => {
  test('shareReplications names the replica\'s backend and share; deleteShareReplication deletes it (ReplicationNotFound: done)', async () => {
    const { fake, driver, other, create } = setup();
    expect(isShareReplicationDriver(driver)).toBe(true);
    await create();
    await create(other, REPLICA);
    const source = fake.fileSystemNamed(NAME)!.FileSystemId!;
    const replica = fake.fileSystemNamed(REPLICA)!.FileSystemId!;
    expect(await driver.shareReplications()).toEqual([]);
    fake.replication.updateProtection('eu-west-1', { FileSystemId: replica, ReplicationOverwriteProtection: 'DISABLED' });
    fake.replication.create('eu-west-1', { SourceFileSystemId: source, Destinations: [{ FileSystemId: replica }] });
    expect(await driver.shareReplications()).toEqual([
      { name: NAME, sourceId: source, replica: { id: replica, region: 'eu-west-1', host: 'ferry@efs-b', name: REPLICA }, status: 'ENABLING', createdAt: expect.any(String) },
    ]);
    expect(await other.shareReplications()).toEqual([]);
    fake.failNext('DeleteReplicationConfiguration', efsError('ReplicationNotFound', 'gone'), { after: true });
    await untilReady(() => driver.deleteShareReplication(NAME));
    expect(fake.replication.replications.size).toBe(0);
    await driver.deleteShareReplication(NAME);
    await untilReady(() => other.deleteShare(REPLICA));
    expect(fake.fileSystemNamed(REPLICA)).toBeUndefined();
  });
});
