/**
 * What is EFS-specific in the aws-efs share driver (the contract it keeps with every share driver
 * is test/unit/share-driver-contract.test.ts): the calls it makes, idempotency under retries and
 * lost replies, BackendNotReady while AWS is still at work, the ingress and policy a rule set
 * becomes, the quota and usage (the error codes it acts on: share-driver-aws-efs-errors.test.ts). Against
 * test/support/fake-efs.ts behind mocked EFS and EC2 clients.
 */
import { EC2Client } from '@aws-sdk/client-ec2';
import { EFSClient } from '@aws-sdk/client-efs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, test } from 'vitest';
import { BackendNotReady, ConfigurationError, DriverError } from '../../functions/core/errors.js';
import { canonicalCidr } from '../../functions/drivers/share/aws-efs-access.js';
import { AwsEfsShareDriver, creationTokenFor } from '../../functions/drivers/share/aws-efs.js';
import { isShareQuotaDriver, type DriverAccessRule } from '../../functions/drivers/share/driver.js';
import { shareDriverFor } from '../../functions/drivers/share/registry.js';
import { awsError } from '../support/fake-ec2.js';
import { efsBackend, FAKE_EFS_ACCOUNT, FAKE_EFS_VPC, FakeEfs, untilReady, wireFakeEfs } from '../support/fake-efs.js';

const HOST = 'ferry@efs-a';
const NAME = 'share-11111111-1111-4111-a111-111111111111';
const OTHER = 'share-22222222-2222-4222-a222-222222222222';
const GIB = 1024 ** 3;
const MOUNT = 'elasticfilesystem:ClientMount';
const WRITE = 'elasticfilesystem:ClientWrite';
const ROOT = 'elasticfilesystem:ClientRootAccess';
const VIA_MOUNT_TARGET = { Bool: { 'elasticfilesystem:AccessedViaMountTarget': 'true' } };

const restores: (() => void)[] = [];
afterEach(() => {
  for (const r of restores.splice(0)) r();
});

function setup(options: { backend?: Parameters<typeof efsBackend>[1]; pollAttempts?: number; host?: string } = {}) {
  const efs = new EFSClient({ region: 'eu-west-1' });
  const ec2 = new EC2Client({ region: 'eu-west-1' });
  const efsMock = mockClient(efs);
  const ec2Mock = mockClient(ec2);
  restores.push(() => efsMock.restore(), () => ec2Mock.restore());
  const fake = new FakeEfs();
  wireFakeEfs(efsMock, ec2Mock, fake);
  const driver = new AwsEfsShareDriver(efsBackend(options.host ?? HOST, options.backend), { efs, ec2, pollIntervalMs: 0, pollAttempts: options.pollAttempts ?? 4 });
  const create = (name = NAME, sizeGb = 1) => driver.createShare({ name, sizeGb, proto: 'NFS', pool: 'pool0' });
  /** The commands that change something, in order (from `from` on). */
  const changes = (from = 0) => fake.calls.slice(from).filter((c) => !/^(Describe|List)/.test(c.command)).map((c) => c.command);
  const inputsOf = (command: string) => fake.calls.filter((c) => c.command === command).map((c) => c.input);
  return { fake, driver, create, changes, inputsOf };
}


const rule = (id: string, accessType: 'ip' | 'user', accessTo: string, accessLevel: 'ro' | 'rw'): DriverAccessRule => ({ id, accessType, accessTo, accessLevel });
const caught = async (p: Promise<unknown>) => p.then(() => undefined, (e: unknown) => e as DriverError);

describe('aws-efs createShare', () => {
  test('an encrypted file system by creation token, a security group in the VPC, a mount target per subnet; the export is its DNS name', async () => {
    const { fake, create, changes, inputsOf } = setup();
    const share = await create(NAME, 3);
    const fs = fake.fileSystemNamed(NAME)!;
    expect(share).toEqual({ name: NAME, exportLocation: `${fs.FileSystemId}.efs.eu-west-1.amazonaws.com:/` });
    expect(changes()).toEqual(['CreateFileSystem', 'CreateSecurityGroup', 'CreateMountTarget', 'CreateMountTarget']);
    expect(inputsOf('CreateFileSystem')[0]).toMatchObject({ CreationToken: creationTokenFor(HOST, NAME), Encrypted: true, PerformanceMode: 'generalPurpose', ThroughputMode: 'elastic' });
    expect(fs.Tags).toEqual(
      expect.arrayContaining([
        { Key: 'Name', Value: NAME },
        { Key: 'ferry:backend', Value: HOST },
        { Key: 'ferry:share-name', Value: NAME },
        { Key: 'ferry:pool', Value: 'pool0' },
        { Key: 'ferry:quota-gb', Value: '3' },
      ]),
    );
    const group = fake.groupNamed(NAME)!;
    expect(group).toMatchObject({ VpcId: FAKE_EFS_VPC, IpPermissions: [] });
    expect(inputsOf('CreateMountTarget')).toEqual([
      { FileSystemId: fs.FileSystemId, SubnetId: 'subnet-0a1', SecurityGroups: [group.GroupId] },
      { FileSystemId: fs.FileSystemId, SubnetId: 'subnet-0b2', SecurityGroups: [group.GroupId] },
    ]);
    // A retry makes nothing and answers the same.
    const before = fake.calls.length;
    expect(await create(NAME, 3)).toEqual(share);
    expect(changes(before)).toEqual([]);
  });

  test('BackendNotReady while the file system or its mount targets are creating; later calls carry on, one of each', async () => {
    const { fake, create, inputsOf } = setup({ pollAttempts: 2 });
    fake.settleLooks = 5;
    const first = await caught(create());
    expect(first).toBeInstanceOf(BackendNotReady);
    expect(first).not.toBeInstanceOf(DriverError);
    const { value, notReady } = await untilReady(() => create());
    expect(notReady).toBeGreaterThan(0);
    expect(value.exportLocation).toContain(fake.fileSystemNamed(NAME)!.FileSystemId);
    expect(inputsOf('CreateFileSystem')).toHaveLength(1);
    expect(inputsOf('CreateSecurityGroup')).toHaveLength(1);
    expect(inputsOf('CreateMountTarget')).toHaveLength(2);
  });

  test('a CreateFileSystem whose reply is lost: the retry finds it by its creation token', async () => {
    const { fake, create, inputsOf } = setup();
    fake.failNext('CreateFileSystem', awsError('TimeoutError', 'socket hang up'), { after: true });
    const lost = await caught(create());
    expect(lost).toBeInstanceOf(DriverError);
    expect(lost!.context.code).toBe('TimeoutError');
    await create();
    expect(fake.fileSystems.size).toBe(1);
    expect(inputsOf('CreateFileSystem')).toHaveLength(1);
  });

  test('the token’s file system not visible yet: FileSystemAlreadyExists names it and the create carries on with it', async () => {
    const { fake, create, inputsOf } = setup();
    fake.failNext('CreateFileSystem', awsError('TimeoutError', 'socket hang up'), { after: true });
    await caught(create());
    fake.hiddenFileSystems.add([...fake.fileSystems.keys()][0]!);
    await create();
    expect(inputsOf('CreateFileSystem')).toHaveLength(2);
    expect(fake.fileSystems.size).toBe(1);
  });

  test('a lost CreateSecurityGroup reply with its tags not visible yet, a lost CreateMountTarget reply: one of each', async () => {
    const { fake, create, inputsOf } = setup();
    fake.failNext('CreateSecurityGroup', awsError('TimeoutError', 'socket hang up'), { after: true });
    await caught(create());
    fake.untaggedGroups.add([...fake.groups.keys()][0]!);
    fake.failNext('CreateMountTarget', awsError('TimeoutError', 'socket hang up'), { after: true });
    await caught(create());
    fake.untaggedGroups.clear();
    await create();
    expect(fake.groups.size).toBe(1);
    expect(inputsOf('CreateSecurityGroup')).toHaveLength(2); // the second answered InvalidGroup.Duplicate
    expect(fake.mountTargets.size).toBe(2);
  });

  test('a mount target made by a racing call (MountTargetConflict) is found; a second subnet of one zone is a DriverError', async () => {
    const { fake, create } = setup();
    const describe = fake.describeMountTargets.bind(fake);
    let blind = 1;
    // The first look misses the mount targets a racing call made: its creates answer MountTargetConflict.
    fake.describeMountTargets = (i) => (blind-- > 0 ? { MountTargets: [] } : describe(i));
    await caught(create());
    fake.describeMountTargets = describe;
    await create();
    expect(fake.mountTargets.size).toBe(2);

    const two = setup({ backend: { subnetIds: ['subnet-0a1', 'subnet-0b2', 'subnet-0c3'] } });
    two.fake.subnets['subnet-0c3'] = 'eu-west-1a';
    const e = await caught(two.create());
    expect(e).toBeInstanceOf(DriverError);
    expect(e!.message).toMatch(/subnet-0c3.*same availability zone/);
  });

  test('refused before anything is made: CIFS, an unknown pool, more than the pool has free', async () => {
    const { fake, driver, create } = setup();
    await expect(driver.createShare({ name: NAME, sizeGb: 1, proto: 'CIFS', pool: 'pool0' })).rejects.toThrow(/NFS only/);
    await expect(driver.createShare({ name: NAME, sizeGb: 1, proto: 'NFS', pool: 'gold' })).rejects.toThrow(/no pool gold/);
    await create(NAME, 8);
    await expect(create(OTHER, 3)).rejects.toThrow(/pool0 has 2 GiB free/);
    expect(fake.fileSystems.size).toBe(1);
  });
});

describe('aws-efs deleteShare', () => {
  test('mount targets first (BackendNotReady until they are gone), then the file system, then the security group; absent is success', async () => {
    const { fake, driver, create, changes } = setup({ pollAttempts: 2 });
    await create();
    const from = fake.calls.length;
    fake.settleLooks = 4;
    expect(await caught(driver.deleteShare(NAME))).toBeInstanceOf(BackendNotReady);
    expect(fake.fileSystemNamed(NAME)).toBeDefined();
    await untilReady(() => driver.deleteShare(NAME));
    expect(changes(from)).toEqual(['DeleteMountTarget', 'DeleteMountTarget', 'DeleteFileSystem', 'DeleteSecurityGroup']);
    expect(fake.groups.size).toBe(0);
    expect(await driver.getShare(NAME)).toBeUndefined();
    await driver.deleteShare(NAME);
    await driver.deleteShare(OTHER);
  });

  test('a security group its mount targets still hold (DependencyViolation) is looked at again; FileSystemInUse is BackendNotReady', async () => {
    const { fake, driver, create } = setup();
    await create();
    fake.failNext('DeleteSecurityGroup', awsError('DependencyViolation', 'resource has a dependent object'));
    await driver.deleteShare(NAME);
    expect(fake.groups.size).toBe(0);
    await create(OTHER);
    fake.failNext('DeleteFileSystem', Object.assign(awsError('FileSystemInUse', 'has mount targets'), { ErrorCode: 'FileSystemInUse' }));
    expect(await caught(driver.deleteShare(OTHER))).toBeInstanceOf(BackendNotReady);
    await driver.deleteShare(OTHER);
    expect(await driver.getShare(OTHER)).toBeUndefined();
  });
});

describe('aws-efs access rules', () => {
  const rules = [
    rule('r1', 'ip', '10.0.0.0/24', 'rw'),
    rule('r2', 'ip', '10.0.1.9', 'rw'),
    rule('r3', 'user', 'alice', 'ro'),
    rule('r4', 'user', 'arn:aws:iam::444455556666:role/ops', 'rw'),
    rule('r5', 'ip', '2001:DB8::1', 'rw'),
  ];

  test('ip rules are NFS ingress from each CIDR; the level of ip clients and the user rules are the file system policy', async () => {
    const { fake, driver, create, changes } = setup();
    await create();
    await driver.updateAccess(NAME, rules);
    const fs = fake.fileSystemNamed(NAME)!;
    expect(fake.groupNamed(NAME)!.IpPermissions).toEqual([
      {
        IpProtocol: 'tcp',
        FromPort: 2049,
        ToPort: 2049,
        IpRanges: [
          { CidrIp: '10.0.0.0/24', Description: 'ferry 0:r1:10.0.0.0/24' },
          { CidrIp: '10.0.1.9/32', Description: 'ferry 1:r2:10.0.1.9' },
        ],
        Ipv6Ranges: [{ CidrIpv6: '2001:db8::1/128', Description: 'ferry 4:r5:2001:DB8::1' }],
        UserIdGroupPairs: [],
        PrefixListIds: [],
      },
    ]);
    const resource = fs.FileSystemArn;
    expect(fake.policyOf(fs.FileSystemId!)!.Statement).toEqual([
      { Sid: 'ferry-ip-clients', Effect: 'Allow', Principal: { AWS: '*' }, Action: [MOUNT, ROOT, WRITE], Resource: resource, Condition: VIA_MOUNT_TARGET },
      { Sid: 'ferry-rule-2-r-r3', Effect: 'Allow', Principal: { AWS: `arn:aws:iam::${FAKE_EFS_ACCOUNT}:role/alice` }, Action: [MOUNT, ROOT], Resource: resource, Condition: VIA_MOUNT_TARGET },
      { Sid: 'ferry-rule-3-a-r4', Effect: 'Allow', Principal: { AWS: 'arn:aws:iam::444455556666:role/ops' }, Action: [MOUNT, ROOT, WRITE], Resource: resource, Condition: VIA_MOUNT_TARGET },
    ]);
    expect(await driver.getAccess(NAME)).toEqual(rules);
    // The same set again changes nothing.
    const from = fake.calls.length;
    await driver.updateAccess(NAME, rules);
    expect(changes(from)).toEqual([]);
  });

  test('a new set: what is no longer wanted is revoked first, then the policy, then what is new; ingress not made by a rule goes too', async () => {
    const { fake, driver, create, changes, inputsOf } = setup();
    await create();
    await driver.updateAccess(NAME, rules.slice(0, 2));
    const group = fake.groupNamed(NAME)!;
    // An operator opened NFS (and everything) by hand, and SSH, which is not NFS and stays.
    fake.authorizeSecurityGroupIngress({ GroupId: group.GroupId!, IpPermissions: [{ IpProtocol: '-1', IpRanges: [{ CidrIp: '0.0.0.0/0' }] }, { IpProtocol: 'tcp', FromPort: 22, ToPort: 22, IpRanges: [{ CidrIp: '10.9.0.0/16' }] }] });
    const from = fake.calls.length;
    const next = [rule('r2', 'ip', '10.0.1.9', 'ro'), rule('r6', 'ip', '10.0.2.0/24', 'ro')];
    await driver.updateAccess(NAME, next);
    expect(changes(from)).toEqual(['RevokeSecurityGroupIngress', 'RevokeSecurityGroupIngress', 'UpdateSecurityGroupRuleDescriptionsIngress', 'PutFileSystemPolicy', 'AuthorizeSecurityGroupIngress']);
    expect(inputsOf('RevokeSecurityGroupIngress').map((i) => (i.IpPermissions as { IpRanges: { CidrIp: string }[] }[])[0]!.IpRanges[0]!.CidrIp).sort()).toEqual(['0.0.0.0/0', '10.0.0.0/24']);
    expect(fake.groupNamed(NAME)!.IpPermissions!.find((p) => p.FromPort === 22)).toBeDefined();
    expect(fake.policyOf(fake.fileSystemNamed(NAME)!.FileSystemId!)!.Statement).toEqual([expect.objectContaining({ Sid: 'ferry-ip-clients', Action: [MOUNT, ROOT] })]);
    expect(await driver.getAccess(NAME)).toEqual(next);
  });

  test('two spellings of one address share a range; no rules at all deny every client', async () => {
    const { fake, driver, create } = setup();
    await create();
    const both = [rule('a', 'ip', '10.0.0.1', 'ro'), rule('b', 'ip', '10.0.0.1/32', 'ro')];
    await driver.updateAccess(NAME, both);
    expect(fake.groupNamed(NAME)!.IpPermissions![0]!.IpRanges).toEqual([{ CidrIp: '10.0.0.1/32', Description: 'ferry 0:a:10.0.0.1 1:b:10.0.0.1/32' }]);
    expect(await driver.getAccess(NAME)).toEqual(both);
    await driver.updateAccess(NAME, []);
    expect(fake.groupNamed(NAME)!.IpPermissions).toEqual([]);
    expect(fake.policyOf(fake.fileSystemNamed(NAME)!.FileSystemId!)!.Statement).toEqual([expect.objectContaining({ Sid: 'ferry-no-access', Effect: 'Deny', Principal: { AWS: '*' } })]);
    expect(await driver.getAccess(NAME)).toEqual([]);
  });

  test('refused, nothing changed: ip rules of mixed levels, a user that is no role name, an address that is none', async () => {
    const { fake, driver, create } = setup();
    await create();
    await driver.updateAccess(NAME, [rule('r1', 'ip', '10.0.0.1', 'rw')]);
    const from = fake.calls.length;
    await expect(driver.updateAccess(NAME, [rule('r1', 'ip', '10.0.0.1', 'rw'), rule('r2', 'ip', '10.0.0.2', 'ro')])).rejects.toThrow(/mix ro and rw/);
    await expect(driver.updateAccess(NAME, [rule('r1', 'user', "bob's{}", 'rw')])).rejects.toThrow(/neither an IAM role name/);
    await expect(driver.updateAccess(NAME, [rule('r1', 'ip', '10.0.0.300', 'rw')])).rejects.toThrow(/not an IPv4 or IPv6/);
    expect(fake.calls.slice(from).filter((c) => !c.command.startsWith('Describe'))).toEqual([]);
    expect(await driver.getAccess(NAME)).toEqual([rule('r1', 'ip', '10.0.0.1', 'rw')]);
  });

  test('a role IAM does not know: PutFileSystemPolicy is refused (InvalidPolicyException) as a DriverError carrying the code', async () => {
    const { fake, driver, create } = setup();
    fake.knownRoles = new Set(['alice']);
    await create();
    const e = await caught(driver.updateAccess(NAME, [rule('r1', 'user', 'mallory', 'rw')]));
    expect(e).toBeInstanceOf(DriverError);
    expect(e!.context).toMatchObject({ operation: 'PutFileSystemPolicy', code: 'InvalidPolicyException' });
  });

  test('a share being created is BackendNotReady; a share not there is a DriverError', async () => {
    const { fake, driver, create } = setup({ pollAttempts: 1 });
    fake.settleLooks = 3;
    await caught(create());
    expect(await caught(driver.updateAccess(NAME, []))).toBeInstanceOf(BackendNotReady);
    expect(await driver.getAccess(NAME)).toEqual([]);
    expect(await caught(driver.updateAccess(OTHER, []))).toBeInstanceOf(DriverError);
  });
});

describe('aws-efs quota and usage', () => {
  test('the size is a tag EFS does not enforce: the driver reports SizeInBytes, withholds writes over it, lifts that after an extend', async () => {
    const { fake, driver, create, inputsOf } = setup();
    expect(isShareQuotaDriver(driver)).toBe(true);
    await create(NAME, 2);
    await driver.updateAccess(NAME, [rule('r1', 'ip', '10.0.0.0/24', 'rw')]);
    const fsId = fake.fileSystemNamed(NAME)!.FileSystemId!;
    expect(await driver.shareUsage(NAME)).toEqual({ name: NAME, sizeGb: 2, usedBytes: 6144, overQuota: false, writesBlocked: false });
    fake.setUsage(fsId, 3 * GIB);
    expect(await driver.shareUsage(NAME)).toMatchObject({ usedBytes: 3 * GIB, overQuota: true, writesBlocked: false });
    expect(await driver.enforceQuota(NAME)).toMatchObject({ overQuota: true, writesBlocked: true });
    expect(fake.policyOf(fsId)!.Statement).toContainEqual(expect.objectContaining({ Sid: 'ferry-quota-exceeded', Effect: 'Deny', Principal: { AWS: '*' }, Action: [WRITE] }));
    // The rules read back as they were given; a new set keeps the block while it holds.
    expect(await driver.getAccess(NAME)).toEqual([rule('r1', 'ip', '10.0.0.0/24', 'rw')]);
    await driver.updateAccess(NAME, [rule('r1', 'ip', '10.0.0.0/24', 'rw'), rule('r2', 'user', 'alice', 'rw')]);
    expect((await driver.shareUsage(NAME))!.writesBlocked).toBe(true);
    await driver.extendShare(NAME, 4);
    expect(fake.fileSystemNamed(NAME)!.Tags).toContainEqual({ Key: 'ferry:quota-gb', Value: '4' });
    expect(await driver.shareUsage(NAME)).toEqual({ name: NAME, sizeGb: 4, usedBytes: 3 * GIB, overQuota: false, writesBlocked: false });
    expect(fake.policyOf(fsId)!.Statement.map((s) => s.Sid)).toEqual(['ferry-ip-clients', 'ferry-rule-1-r-r2']);
    // The same size again changes nothing; smaller, or more than the pool has, is refused.
    await driver.extendShare(NAME, 4);
    expect(inputsOf('TagResource')).toHaveLength(1);
    await expect(driver.extendShare(NAME, 3)).rejects.toThrow(/cannot shrink/);
    await expect(driver.extendShare(NAME, 11)).rejects.toThrow(/pool0 has 10 GiB free/);
    expect(await driver.shareUsage(OTHER)).toBeUndefined();
    await expect(driver.extendShare(OTHER, 2)).rejects.toBeInstanceOf(DriverError);
  });
});

describe('aws-efs: the rest', () => {
  test('listShares pages through DescribeFileSystems and keeps to its own backend', async () => {
    const mine = setup();
    const names = [NAME, OTHER, 'share-33333333-3333-4333-a333-333333333333'];
    for (const n of names) await mine.create(n);
    // Another backend's file system in the same account.
    mine.fake.createFileSystem({ CreationToken: 'x', Tags: [{ Key: 'ferry:backend', Value: 'ferry@efs-b' }, { Key: 'ferry:share-name', Value: NAME }] });
    expect((await mine.driver.listShares()).map((s) => s.name).sort()).toEqual(names.sort());
    expect(mine.inputsOf('DescribeFileSystems').some((i) => i.Marker)).toBe(true);
  });

  test('driver-assisted migration to aws-efs only: to a local kind it is not compatible and every step refuses; the NFS mount template', async () => {
    const { driver, create } = setup();
    await create();
    expect(driver.features).toMatchObject({ driverAssistedMigrationTo: ['aws-efs'], migrationPoll: 'backend' });
    const local = { host: 'ferry@nfs-b', driver: 'local-a' as const, root: '/tmp/x', pools: [{ name: 'pool0', totalCapacityGb: 1 }], shareBackendName: 'nfs-b', protocols: ['NFS'] };
    const req = { source: { name: NAME, sizeGb: 1, proto: 'NFS' }, destination: { name: OTHER, host: 'ferry@nfs-b#pool0', backend: local } };
    expect((await driver.migrationCheckCompatibility(req)).compatible).toBe(false);
    for (const call of [driver.migrationStart(req), driver.migrationContinue(req), driver.migrationComplete(req), driver.migrationCancel(req), driver.migrationGetProgress(req)]) {
      await expect(call).rejects.toThrow(/no driver-assisted migration/);
    }
    expect((await driver.connectionGetInfo(NAME)).mount).toBe('mount -t nfs4 -o nfsvers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport %(export)s %(path)s');
  });

  test('the registry builds it from its record; a record it cannot use is a ConfigurationError naming every problem', () => {
    expect(shareDriverFor(efsBackend('ferry@efs-registry')).kind).toBe('aws-efs');
    let error: unknown;
    try {
      shareDriverFor({ ...efsBackend('ferry@efs-bad'), subnetIds: [], protocols: ['NFS', 'CIFS'], performanceMode: 'maxIO' } as never);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigurationError);
    expect((error as Error).message).toMatch(/subnetIds.*maxIO.*NFS only/);
  });

  test('CIDRs as EC2 holds them', () => {
    expect(canonicalCidr('10.0.1.9/24')).toBe('10.0.1.0/24');
    expect(canonicalCidr('10.0.1.9')).toBe('10.0.1.9/32');
    expect(canonicalCidr('0.0.0.0/0')).toBe('0.0.0.0/0');
    expect(canonicalCidr('2001:DB8:0:0:0:0:0:1')).toBe('2001:db8::1/128');
    expect(canonicalCidr('fe80::1:2/64')).toBe('fe80::/64');
    expect(canonicalCidr('::')).toBe('::/128');
    expect(canonicalCidr('1:0:0:2:0:0:0:3')).toBe('1:0:0:2::3/128');
    for (const bad of ['10.0.0', '10.0.0.1/33', '::1/129', 'alice', '10.0.0.1/8/8']) expect(canonicalCidr(bad)).toBeUndefined();
  });
});
