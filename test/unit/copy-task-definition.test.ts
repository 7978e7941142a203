/**
 * A host-assisted migration's own copy task definition (functions/migration/copy-task-definition.ts)
 * against the mocked ECS of test/support/fake-ecs.ts, whose replies follow the ECS API reference:
 * the registration built from the stack's definition, a lost RegisterTaskDefinition reply found
 * again by DescribeTaskDefinition, throttling and server errors answered BackendNotReady, what ECS
 * refuses (ClientException) answered ShareMigrationFailed, and the undo across pages, of this
 * family only. Also the aws-efs driver's side: dataNodeMount (the share's group admits its members
 * once, and updateAccess keeps that rule).
 */
import { afterEach, describe, expect, test } from 'vitest';
import { BackendNotReady, DriverError } from '../../functions/core/errors.js';
import { AwsEfsShareDriver } from '../../functions/drivers/share/aws-efs.js';
import { activeCopyTaskDefinition, copyTaskFamily, copyTaskRegistration, deregisterCopyTaskDefinitions, familyOf, registerCopyTaskDefinition } from '../../functions/migration/copy-task-definition.js';
import { ShareMigrationFailed } from '../../functions/migration/flow.js';
import { awsError } from '../support/fake-ec2.js';
import { COPY_FAMILY, mockedEcs } from '../support/fake-ecs.js';
import { efsBackend, untilReady } from '../support/fake-efs.js';
import { mockedEfsClients } from '../support/fake-efs-clients.js';

const MIGRATION = '0b3f4c6e-1d2a-4f5b-8c7d-9e0f1a2b3c4d';
const FAMILY = `${COPY_FAMILY}-m-${MIGRATION}`;
const DESTINATION = [{ name: 'destination' as const, fileSystemId: 'fs-0dest', readOnly: false }];

const restores: (() => void)[] = [];
afterEach(() => {
  for (const r of restores.splice(0)) r();
});
function ecs() {
  const mocked = mockedEcs();
  restores.push(mocked.restore);
  return mocked.fake;
}
const caught = (p: Promise<unknown>) => p.then(() => undefined, (e: unknown) => e as Error);

describe('the family and the registration', () => {
  test('the family is the stack\'s copy family and the migration id, from an ARN, family:revision or family; one ECS would refuse is refused before any call', () => {
    expect(familyOf(`arn:aws:ecs:eu-west-1:111122223333:task-definition/${COPY_FAMILY}:7`)).toBe(COPY_FAMILY);
    expect(familyOf(`${COPY_FAMILY}:7`)).toBe(COPY_FAMILY);
    expect(copyTaskFamily(COPY_FAMILY, MIGRATION)).toBe(FAMILY);
    expect(() => copyTaskFamily('x'.repeat(220), MIGRATION)).toThrow(ShareMigrationFailed);
    expect(() => copyTaskFamily(COPY_FAMILY, 'a b')).toThrow(/not one ECS takes/);
  });

  test('the stack\'s definition with the migration\'s file systems as volumes (source read-only); its share storage only where a side is a folder', () => {
    const base = ecs().definitions[0]!;
    const both = copyTaskRegistration(base, FAMILY, [{ name: 'source', fileSystemId: 'fs-0src', readOnly: true }, ...DESTINATION], false);
    expect(both).toMatchObject({ family: FAMILY, taskRoleArn: base.taskRoleArn, executionRoleArn: base.executionRoleArn, networkMode: 'awsvpc', cpu: '2048', memory: '4096', requiresCompatibilities: ['FARGATE'] });
    expect(both.volumes).toEqual([
      { name: 'source', efsVolumeConfiguration: { fileSystemId: 'fs-0src', rootDirectory: '/', transitEncryption: 'ENABLED', authorizationConfig: { iam: 'ENABLED' } } },
      { name: 'destination', efsVolumeConfiguration: { fileSystemId: 'fs-0dest', rootDirectory: '/', transitEncryption: 'ENABLED', authorizationConfig: { iam: 'ENABLED' } } },
    ]);
    expect(both.containerDefinitions![0]).toMatchObject({ name: 'copy-worker', image: base.containerDefinitions![0]!.image, readonlyRootFilesystem: true });
    expect(both.containerDefinitions![0]!.mountPoints).toEqual([
      { sourceVolume: 'source', containerPath: '/mnt/ferry-copy/source', readOnly: true },
      { sourceVolume: 'destination', containerPath: '/mnt/ferry-copy/destination', readOnly: false },
    ]);
    const withStorage = copyTaskRegistration(base, FAMILY, DESTINATION, true);
    expect(withStorage.volumes!.map((v) => v.name)).toEqual(['shares', 'destination']);
    expect(withStorage.containerDefinitions![0]!.mountPoints!.map((m) => m.containerPath)).toEqual(['/mnt/ferry-shares', '/mnt/ferry-copy/destination']);
  });
});

describe('registered once, whatever ECS answers', () => {
  test('a family with no revision is none; one registered is found by family', async () => {
    const fake = ecs();
    expect(await activeCopyTaskDefinition(FAMILY)).toBeUndefined();
    const arn = await registerCopyTaskDefinition(fake.baseArn, FAMILY, DESTINATION, false);
    expect(arn).toMatch(new RegExp(`:task-definition/${FAMILY}:1$`));
    expect(await activeCopyTaskDefinition(FAMILY)).toBe(arn);
  });

  test('a lost RegisterTaskDefinition reply is BackendNotReady, and the retry\'s look finds the revision it made: one revision', async () => {
    const fake = ecs();
    fake.failNext('RegisterTaskDefinition', Object.assign(new Error('socket hang up'), { name: 'TimeoutError' }), true);
    expect(await caught(registerCopyTaskDefinition(fake.baseArn, FAMILY, DESTINATION, false))).toBeInstanceOf(BackendNotReady);
    expect(await activeCopyTaskDefinition(FAMILY)).toMatch(/:1$/);
    expect(fake.active(FAMILY)).toHaveLength(1);
  });

  test('throttling and server errors are BackendNotReady carrying the code; nothing is registered by a call that failed before its effect', async () => {
    const fake = ecs();
    fake.failNext('DescribeTaskDefinition', awsError('ThrottlingException', 'Rate exceeded'));
    const throttled = await caught(activeCopyTaskDefinition(FAMILY));
    expect(throttled).toBeInstanceOf(BackendNotReady);
    expect(throttled!.message).toMatch(/ECS DescribeTaskDefinition .*ThrottlingException: Rate exceeded/);
    fake.failNext('RegisterTaskDefinition', awsError('ServerException', 'Service unavailable'));
    expect(await caught(registerCopyTaskDefinition(fake.baseArn, FAMILY, DESTINATION, false))).toBeInstanceOf(BackendNotReady);
    expect(fake.active(FAMILY)).toEqual([]);
  });

  test('what ECS refuses is ShareMigrationFailed: a family it does not take, a base definition it cannot describe, another ClientException on a look', async () => {
    const fake = ecs();
    const refused = await caught(registerCopyTaskDefinition(fake.baseArn, `${FAMILY}.bad`, DESTINATION, false));
    expect(refused).toBeInstanceOf(ShareMigrationFailed);
    expect(refused!.message).toMatch(/RegisterTaskDefinition.*ClientException: Family contains invalid characters/);
    expect(await caught(registerCopyTaskDefinition('ferry-gone:3', FAMILY, DESTINATION, false))).toBeInstanceOf(ShareMigrationFailed);
    fake.failNext('DescribeTaskDefinition', awsError('ClientException', 'You are not authorized to perform this operation.'));
    expect(await caught(activeCopyTaskDefinition(FAMILY))).toBeInstanceOf(ShareMigrationFailed);
    expect(fake.runFamilies()).toEqual([]);
  });
});

describe('the undo', () => {
  test('every ACTIVE revision of the family is deregistered, across pages; a family that only starts with its name is left; again is nothing', async () => {
    const fake = ecs();
    for (let i = 0; i < 3; i++) await registerCopyTaskDefinition(fake.baseArn, FAMILY, DESTINATION, false);
    const other = await registerCopyTaskDefinition(fake.baseArn, `${FAMILY}-x`, DESTINATION, false);
    const deregistered = await deregisterCopyTaskDefinitions(FAMILY);
    expect(deregistered.map((a) => a.split(':').at(-1))).toEqual(['1', '2', '3']);
    expect(fake.active(FAMILY)).toEqual([]);
    expect(fake.active(`${FAMILY}-x`).map((d) => d.taskDefinitionArn)).toEqual([other]);
    expect(fake.calls.filter((c) => c.command === 'ListTaskDefinitions').length).toBeGreaterThan(1); // paged
    expect(await deregisterCopyTaskDefinitions(FAMILY)).toEqual([]);
  });

  test('a throttled deregistration is BackendNotReady; the next run deregisters what is still ACTIVE', async () => {
    const fake = ecs();
    await registerCopyTaskDefinition(fake.baseArn, FAMILY, DESTINATION, false);
    fake.failNext('DeregisterTaskDefinition', awsError('ThrottlingException', 'Rate exceeded'));
    expect(await caught(deregisterCopyTaskDefinitions(FAMILY))).toBeInstanceOf(BackendNotReady);
    expect(fake.active(FAMILY)).toHaveLength(1);
    expect(await deregisterCopyTaskDefinitions(FAMILY)).toHaveLength(1);
    expect(fake.active(FAMILY)).toEqual([]);
  });
});

describe('the aws-efs driver: where the copy task mounts a share (dataNodeMount)', () => {
  const NAME = 'share-11111111-1111-4111-a111-111111111111';
  function efs() {
    const { efs, ec2, fake, restore } = mockedEfsClients();
    restores.push(restore);
    return { fake, driver: new AwsEfsShareDriver(efsBackend('ferry@efs-a'), { efs, ec2, pollIntervalMs: 0, pollAttempts: 3 }) };
  }
  const members = (group: { GroupId?: string; IpPermissions?: { UserIdGroupPairs?: { GroupId?: string }[] }[] }) =>
    (group.IpPermissions ?? []).flatMap((p) => p.UserIdGroupPairs ?? []).filter((g) => g.GroupId === group.GroupId).length;

  test('the file system, VPC, subnets and the share\'s group, which admits NFS from its members once; updateAccess keeps that rule', async () => {
    const { fake, driver } = efs();
    await untilReady(() => driver.createShare({ name: NAME, sizeGb: 1, proto: 'NFS', pool: 'pool0' }));
    const group = fake.groupNamed(NAME)!;
    expect(members(group)).toBe(0);
    fake.failNext('AuthorizeSecurityGroupIngress', awsError('RequestLimitExceeded', 'Request limit exceeded.'));
    expect(await driver.dataNodeMount(NAME)).toEqual({ kind: 'efs', fileSystemId: fake.fileSystemNamed(NAME)!.FileSystemId, region: 'eu-west-1', vpcId: 'vpc-0feed', subnetIds: ['subnet-0a1', 'subnet-0b2'], securityGroupId: group.GroupId });
    expect(members(fake.groupNamed(NAME)!)).toBe(1);
    const authorized = fake.calls.filter((c) => c.command === 'AuthorizeSecurityGroupIngress').length;
    await driver.dataNodeMount(NAME);
    expect(fake.calls.filter((c) => c.command === 'AuthorizeSecurityGroupIngress').length).toBe(authorized);
    await driver.updateAccess(NAME, [{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'ro' }]);
    await driver.updateAccess(NAME, []);
    expect(members(fake.groupNamed(NAME)!)).toBe(1);
    expect(await driver.getAccess(NAME)).toEqual([]);
  });

  test('a share that is not there is a DriverError', async () => {
    const { driver } = efs();
    expect(await caught(driver.dataNodeMount(NAME))).toBeInstanceOf(DriverError);
  });
});
