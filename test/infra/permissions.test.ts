/**
 * Permissions proven, not guessed: every path of each AWS driver (aws-ebs, aws-efs) runs against its
 * mocked clients (test/support/driver-tours.ts); each call it makes becomes the IAM requests AWS
 * authorizes (test/support/iam-requests.ts); each request is simulated against the synthesized role
 * of every function whose bundle contains the driver. A call no role allows fails here; so does an
 * EC2 or EFS grant no call needs, a function that bundles a driver without the wiring's
 * `callsVolumeDrivers` / `callsShareDrivers` (or the reverse), and a driver command a tour never made.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Stack } from 'aws-cdk-lib';
import type { IRole } from 'aws-cdk-lib/aws-iam';
import { testApp } from '../support/cdk-app.js';
import { lambdaBundle, lambdaBundleInputs } from '../support/bundle.js';
import { beforeAll, describe, expect, test } from 'vitest';
import { FUNCTIONS, type FunctionWiring } from '../../functions/wiring.js';
import { REPO_ROOT, buildFerryApp, type FerryStack } from '../../infra/aws/ferry-stack.js';
import { ebsDriverStatements } from '../../infra/aws/driver-permissions.js';
import { efsDriverStatements } from '../../infra/aws/share-driver-permissions.js';
import { REGION, recordEbsCalls, recordEbsReplicationCalls, recordEfsCalls, recordEfsMigrationCalls, type Recorded } from '../support/driver-tours.js';
import { STACK_REGION, ecsRequests, resolveIntrinsics, s3GetObjectRequest, simulate, type IamRequest, type PolicyStatementJson } from '../support/iam-requests.js';
import { imageDownloadUrl, setPresigner } from '../../functions/images/download.js';
import { IMAGE_IMPORT_COMMANDS, TOUR_BUCKET, TOUR_IMAGE_ID, TOUR_TABLE_ARN, recordImageImportCalls } from '../support/image-import-tour.js';

/** Each AWS driver: its sources, the module whose presence in a bundle means the function runs it, the wiring flag that says so. */
const DRIVERS = {
  'aws-ebs': { sources: ['aws-ebs.ts', 'aws-ebs-volumes.ts', 'aws-ebs-replication.ts', 'aws-ebs-failback.ts', 'aws-ebs-sites.ts'].map((f) => `functions/drivers/volume/${f}`), module: 'functions/drivers/volume/aws-ebs-volumes.ts', flag: 'callsVolumeDrivers' },
  'aws-efs': { sources: ['aws-efs.ts', 'aws-efs-backend.ts', 'aws-efs-migration.ts'].map((f) => `functions/drivers/share/${f}`), module: 'functions/drivers/share/aws-efs.ts', flag: 'callsShareDrivers' },
} as const satisfies Record<string, { sources: string[]; module: string; flag: keyof FunctionWiring }>;
type Driver = keyof typeof DRIVERS;
const KINDS = Object.keys(DRIVERS) as Driver[];

/** The commands a driver's source can send. */
function driverCommands(kind: Driver): Set<string> {
  return new Set(DRIVERS[kind].sources.flatMap((f) => [...readFileSync(resolve(REPO_ROOT, f), 'utf8').matchAll(/(\w+)Command\(/g)].map((m) => m[1]!)));
}

/** The modules each function's bundle (esbuild, as CDK bundles it) contains, by function name: one build for all (test/support/bundle.ts). */
const bundled = new Map<string, string[]>();
/** The drivers a function's bundle contains. */
const bundledDrivers = (name: string) => new Set(KINDS.filter((k) => bundled.get(name)!.some((input) => input.endsWith(DRIVERS[k].module))));

let stack: FerryStack;
let resources: Record<string, { Type: string; Properties: Record<string, any> }>;
const recorded = new Map<Driver, Recorded[]>();
const reach = new Map<string, Set<Driver>>();

beforeAll(async () => {
  recorded.set('aws-ebs', [...(await recordEbsCalls()), ...(await recordEbsReplicationCalls())]);
  recorded.set('aws-efs', [...(await recordEfsCalls()), ...(await recordEfsMigrationCalls())]);
  const inputs = await lambdaBundleInputs(FUNCTIONS.map((f) => f.entry), '/tmp/ferry-permissions-bundle');
  for (const f of FUNCTIONS) bundled.set(f.name, [...inputs.get(f.entry)!]);
  for (const f of FUNCTIONS) reach.set(f.name, bundledDrivers(f.name));
  ({ stack } = buildFerryApp(testApp(), { nag: false }));
  resources = (await import('aws-cdk-lib/assertions')).Template.fromStack(stack).toJSON().Resources;
}, 240_000);

/** Every statement of a function's execution role (or of `role`), with intrinsics resolved. */
function roleStatements(name: string, arns: Record<string, string> = {}, role: IRole = stack.functions.get(name)!.role!): PolicyStatementJson[] {
  const roleId = Stack.of(role).resolve(Stack.of(role).getLogicalId(role.node.defaultChild as never)) as string;
  return Object.values(resources)
    .filter((r) => (r.Type === 'AWS::IAM::Policy' || r.Type === 'AWS::IAM::ManagedPolicy') && JSON.stringify(r.Properties.Roles).includes(`"${roleId}"`))
    .flatMap((r) => resolveIntrinsics(r.Properties.PolicyDocument.Statement, arns) as PolicyStatementJson[]);
}

/** The drivers' actions a role holds: EC2's and EFS's, but the NFS client actions of the share storage's mount (copy-worker-app.test.ts's). */
const driverActionsOf = (statements: PolicyStatementJson[]) =>
  new Set(statements.flatMap((s) => (Array.isArray(s.Action) ? s.Action : [s.Action])).filter((a) => a.startsWith('ec2:') || (a.startsWith('elasticfilesystem:') && !a.startsWith('elasticfilesystem:Client'))));
const requestsOf = (kinds: Iterable<Driver>) => [...kinds].flatMap((k) => recorded.get(k)!.flatMap((c) => c.requests));

describe.each(KINDS)('the %s driver against its roles', (kind) => {
  test('the tour makes every command the driver source can send', () => {
    expect(new Set(recorded.get(kind)!.map((r) => r.command))).toEqual(driverCommands(kind));
  });

  test.each(FUNCTIONS.map((f) => f.name))(`%s: ${DRIVERS[kind].flag} in the wiring table is whether its bundle contains the driver`, (name) => {
    expect(Boolean(FUNCTIONS.find((f) => f.name === name)![DRIVERS[kind].flag])).toBe(reach.get(name)!.has(kind));
  });
});

describe('the roles', () => {
  test.each(FUNCTIONS.map((f) => f.name))('%s: its role allows every request of the drivers it runs, and no EC2 or EFS action beyond them', async (name) => {
    const statements = roleStatements(name);
    const requests = requestsOf(reach.get(name)!);
    const denied: string[] = [];
    for (const r of requests) {
      const { allowed, detail } = await simulate(statements, r);
      if (!allowed) denied.push(`${r.action} on ${r.resource} ${JSON.stringify(r.context)}: ${detail}`);
    }
    expect(denied).toEqual([]);
    expect(driverActionsOf(statements)).toEqual(new Set(requests.map((q) => q.action)));
  });
});

describe('the replication machine\'s steps', () => {
  test('replication-pass-steps runs the EBS driver, and its role allows the pass\'s snapshot, copy and prune in the primary and the target region', async () => {
    expect(reach.get('replication-pass-steps')).toEqual(new Set(['aws-ebs']));
    const pass = recorded.get('aws-ebs')!.filter((c) => ['CreateSnapshot', 'CopySnapshot', 'DeleteSnapshot'].includes(c.command)).flatMap((c) => c.requests);
    expect(new Set(pass.map((r) => r.resource.split(':')[3]))).toEqual(new Set([REGION, 'eu-central-1']));
    const verdicts = await Promise.all(pass.map(async (r) => ((await simulate(roleStatements('replication-pass-steps'), r)).allowed ? '' : `${r.action} ${r.resource}`)));
    expect(verdicts.filter(Boolean)).toEqual([]);
  });
});

describe('the check can fail', () => {
  const statementsWithout = (sid: string, of = ebsDriverStatements) =>
    of().filter((s) => s.sid !== sid).map((s) => resolveIntrinsics(Stack.of(stack).resolve(s.toStatementJson())) as PolicyStatementJson);
  const deniedWith = async (statements: PolicyStatementJson[], kind: Driver = 'aws-ebs') => {
    const out = new Set<string>();
    for (const r of requestsOf([kind])) if (!(await simulate(statements, r)).allowed) out.add(`${r.action} ${r.resource.replace(/\/[^/]+$/, '/…')}`);
    return [...out].sort();
  };

  test('the one build for every function lists what a build of a function alone lists (here the volume API, which bundles aws-ebs)', async () => {
    const alone = Object.keys((await lambdaBundle('functions/api/volume.ts', '/tmp/ferry-permissions-bundle')).inputs).sort();
    expect(alone.some((i) => i.endsWith(DRIVERS['aws-ebs'].module))).toBe(true);
    expect([...bundled.get(FUNCTIONS.find((f) => f.entry === 'functions/api/volume.ts')!.name)!].sort()).toEqual(alone);
  });

  test('all statements: nothing denied', async () => {
    expect(await deniedWith(statementsWithout('none'))).toEqual([]);
  });

  test('without the instance statement, attach and detach are denied on the instance', async () => {
    expect(await deniedWith(statementsWithout('EbsInstances'))).toEqual([
      `ec2:AttachVolume arn:aws:ec2:${REGION}:111122223333:instance/…`,
      `ec2:DetachVolume arn:aws:ec2:${REGION}:111122223333:instance/…`,
    ]);
  });

  test('without tag-on-create, CreateVolume, CreateSnapshot and CopySnapshot fail on their tags, in every region', async () => {
    expect(await deniedWith(statementsWithout('EbsTagOnCreate'))).toEqual([
      'ec2:CreateTags arn:aws:ec2:eu-central-1:111122223333:volume/…',
      'ec2:CreateTags arn:aws:ec2:eu-central-1::snapshot/…',
      `ec2:CreateTags arn:aws:ec2:${REGION}:111122223333:volume/…`,
      `ec2:CreateTags arn:aws:ec2:${REGION}::snapshot/…`,
    ]);
  });

  test('without the replication statements, copies and failover volumes are denied', async () => {
    expect(await deniedWith(statementsWithout('EbsMarkReplicated'))).toEqual([
      `ec2:CreateTags arn:aws:ec2:${REGION}:111122223333:volume/…`,
      `ec2:DeleteTags arn:aws:ec2:${REGION}:111122223333:volume/…`,
    ]);
    const denied = await deniedWith(statementsWithout('EbsFerrySnapshots'));
    expect(denied).toEqual(expect.arrayContaining(['ec2:CopySnapshot arn:aws:ec2:eu-west-1::snapshot/…', 'ec2:CreateVolume arn:aws:ec2:eu-central-1::snapshot/…']));
  });

  test('without the adoption statements, managing a volume Ferry did not make is denied', async () => {
    expect(await deniedWith(statementsWithout('EbsAdoptVolumes'))).toEqual([`ec2:CreateTags arn:aws:ec2:${REGION}:111122223333:volume/…`]);
    expect(await deniedWith(statementsWithout('EbsReleaseAdopted'))).toEqual([`ec2:DeleteTags arn:aws:ec2:${REGION}:111122223333:volume/…`]);
  });

  test('adoption cannot take another backend\'s volume, nor untag a volume Ferry made', async () => {
    const statements = statementsWithout('none');
    const volume = `arn:aws:ec2:${REGION}:111122223333:volume/vol-x`;
    const retag = { action: 'ec2:CreateTags', resource: volume, context: { 'aws:ResourceTag/ferry:backend': 'ferry@ebs-b', 'aws:RequestTag/ferry:backend': 'ferry@ebs-a', 'aws:TagKeys': ['ferry:backend'] } };
    const untagOwn = { action: 'ec2:DeleteTags', resource: volume, context: { 'aws:ResourceTag/ferry:backend': 'ferry@ebs-a', 'aws:TagKeys': ['ferry:backend'] } };
    const foreignKeys = { action: 'ec2:CreateTags', resource: volume, context: { 'aws:RequestTag/ferry:backend': 'ferry@ebs-a', 'aws:TagKeys': ['ferry:backend', 'Owner'] } };
    expect((await simulate(statements, retag)).allowed).toBe(false);
    expect((await simulate(statements, untagOwn)).allowed).toBe(false);
    expect((await simulate(statements, foreignKeys)).allowed).toBe(false);
  });

  test('a volume without the ferry:backend tag is not Ferry\'s to delete', async () => {
    const statements = statementsWithout('none');
    const untagged = { action: 'ec2:DeleteVolume', resource: `arn:aws:ec2:${REGION}:111122223333:volume/vol-someone-elses`, context: {} };
    expect((await simulate(statements, untagged)).allowed).toBe(false);
  });

  test.each(efsDriverStatements().map((st) => st.sid!))('aws-efs: without %s, some request of the driver is denied', async (sid) => {
    expect(await deniedWith(statementsWithout('none', efsDriverStatements), 'aws-efs')).toEqual([]);
    expect(await deniedWith(statementsWithout(sid, efsDriverStatements), 'aws-efs')).not.toEqual([]);
  });

  test('aws-efs: each statement is what its requests need, in every region the driver works in', async () => {
    const without = (sid: string) => deniedWith(statementsWithout(sid, efsDriverStatements), 'aws-efs');
    const inBoth = (action: string, type: string) => [`${action} arn:aws:${type.startsWith('file-system') ? 'elasticfilesystem' : 'ec2'}:eu-central-1:111122223333:${type}/…`, `${action} arn:aws:${type.startsWith('file-system') ? 'elasticfilesystem' : 'ec2'}:${REGION}:111122223333:${type}/…`];
    // Tagging on create in each region a file system or group is made in (the replica of a migration to another region too).
    expect(await without('EfsTagOnCreate')).toEqual(inBoth('elasticfilesystem:TagResource', 'file-system'));
    expect(await without('EfsGroupTagOnCreate')).toEqual(inBoth('ec2:CreateTags', 'security-group'));
    expect(await without('EfsGroupVpc')).toEqual(inBoth('ec2:CreateSecurityGroup', 'vpc'));
    expect(await without('EfsMountTargetSubnets')).toEqual(inBoth('ec2:CreateNetworkInterface', 'subnet'));
    expect(await without('EfsMountTargetLookups')).toEqual(['ec2:DescribeNetworkInterfaces *', 'ec2:DescribeSubnets *']);
    // Migration: the replication from a Ferry file system, the replica's protection in its own region, the cut-over marks.
    expect(await without('EfsFerryFileSystems')).toEqual(
      expect.arrayContaining([
        `elasticfilesystem:CreateReplicationConfiguration arn:aws:elasticfilesystem:${REGION}:111122223333:file-system/…`,
        `elasticfilesystem:DeleteReplicationConfiguration arn:aws:elasticfilesystem:${REGION}:111122223333:file-system/…`,
        'elasticfilesystem:UpdateFileSystemProtection arn:aws:elasticfilesystem:eu-central-1:111122223333:file-system/…',
        'elasticfilesystem:CreateMountTarget arn:aws:elasticfilesystem:eu-central-1:111122223333:file-system/…',
      ]),
    );
    expect(await without('EfsDriverTags')).toEqual([`elasticfilesystem:TagResource arn:aws:elasticfilesystem:${REGION}:111122223333:file-system/…`]);
    // A cancelled migration's cast mark removed, in the source's region.
    expect(await without('EfsDriverUntag')).toEqual([`elasticfilesystem:UntagResource arn:aws:elasticfilesystem:${REGION}:111122223333:file-system/…`]);
  });

  test('aws-efs: nothing without the backend tag is Ferry\'s, nothing unencrypted is made, no other tag is changed', async () => {
    const statements = statementsWithout('none', efsDriverStatements);
    const fs = `arn:aws:elasticfilesystem:${REGION}:111122223333:file-system/fs-someone-elses`;
    const group = `arn:aws:ec2:${REGION}:111122223333:security-group/sg-someone-elses`;
    const cases: IamRequest[] = [
      { action: 'elasticfilesystem:DeleteFileSystem', resource: fs, context: {} },
      { action: 'elasticfilesystem:PutFileSystemPolicy', resource: fs, context: {} },
      { action: 'ec2:AuthorizeSecurityGroupIngress', resource: group, context: {} },
      { action: 'ec2:DeleteSecurityGroup', resource: group, context: {} },
      { action: 'elasticfilesystem:CreateFileSystem', resource: '*', context: { 'aws:RequestTag/ferry:backend': 'ferry@efs-a', 'elasticfilesystem:Encrypted': 'false' } },
      { action: 'elasticfilesystem:TagResource', resource: fs.replace('fs-someone-elses', 'fs-1'), context: { 'aws:ResourceTag/ferry:backend': 'ferry@efs-a', 'aws:RequestTag/ferry:backend': 'ferry@efs-b', 'aws:TagKeys': ['ferry:backend'] } },
    ];
    for (const c of cases) expect((await simulate(statements, c)).allowed, `${c.action} ${c.resource}`).toBe(false);
  });
});

/**
 * A host-assisted migration that mounts aws-efs shares registers, looks up and deregisters its own
 * copy task definition (functions/migration/copy-task-definition.ts) and the machine runs it: each
 * ECS call of that path, against the mocked ECS, becomes its IAM requests (ecsRequests), simulated
 * against the role of every function whose bundle contains the module, and RunTask of the
 * registered revision against the phase 1 machine's role. The reconciler's repair of families no
 * migration holds (functions/audit/copy-task-repairs.ts) bundles only copy-task-ecs.ts: its path's
 * requests against its role (wiring `auditsCopyTasks`), and none of the registration's.
 */
describe('the copy task definitions of host-assisted migrations to and from aws-efs', () => {
  const MODULE = 'functions/migration/copy-task-definition.ts';
  const ECS_MODULE = 'functions/migration/copy-task-ecs.ts';
  let reconcilerRequests: IamRequest[] = [];
  const TASK_ROLE = 'arn:aws:iam::111122223333:role/ferry-copy-task';
  const EXECUTION_ROLE = 'arn:aws:iam::111122223333:role/ferry-copy-execution';
  let requests: IamRequest[] = [];
  let commands = new Set<string>();
  let registered = '';

  beforeAll(async () => {
    const { mockedEcs } = await import('../support/fake-ecs.js');
    const { activeCopyTaskDefinition, copyTaskFamily, deregisterCopyTaskDefinitions, registerCopyTaskDefinition } = await import('../../functions/migration/copy-task-definition.js');
    const { activeFamilies, familyOf, latestActiveRevision } = await import('../../functions/migration/copy-task-ecs.js');
    const ecs = mockedEcs();
    const base = ecs.fake.baseArn.replace('ferry-copy-worker', `${stack.copyWorker!.taskDefinition.family}`);
    ecs.fake.definitions[0]!.family = stack.copyWorker!.taskDefinition.family;
    Object.assign(ecs.fake.definitions[0]!, { taskDefinitionArn: base, taskRoleArn: TASK_ROLE, executionRoleArn: EXECUTION_ROLE });
    const family = copyTaskFamily(base, '0b3f4c6e-1d2a-4f5b-8c7d-9e0f1a2b3c4d');
    try {
      await activeCopyTaskDefinition(family);
      registered = await registerCopyTaskDefinition(base, family, [{ name: 'destination', fileSystemId: 'fs-0123', readOnly: false }], true);
      await deregisterCopyTaskDefinitions(family);
      // The reconciler's path (copy-task-repairs.ts): a stray family listed, looked up, deregistered.
      await registerCopyTaskDefinition(base, family, [{ name: 'destination', fileSystemId: 'fs-0123', readOnly: false }], true);
      ecs.fake.calls.push({ command: '--reconciler--', input: {} });
      for (const f of await activeFamilies(`${familyOf(base)}-m-`)) {
        await latestActiveRevision(f);
        await deregisterCopyTaskDefinitions(f);
      }
    } finally {
      ecs.restore();
    }
    const split = ecs.fake.calls.findIndex((c) => c.command === '--reconciler--');
    const [migration, reconciler] = [ecs.fake.calls.slice(0, split), ecs.fake.calls.slice(split + 1)];
    commands = new Set([...migration, ...reconciler].map((c) => c.command));
    // ECS is called in the stack's region (the functions' default).
    const requestsOf = async (calls: typeof migration) => {
      const out: IamRequest[] = [];
      for (const c of calls) out.push(...(await ecsRequests(STACK_REGION, c.command, c.input)));
      return [...new Map(out.map((r) => [JSON.stringify(r), r])).values()];
    };
    requests = await requestsOf(migration);
    reconcilerRequests = await requestsOf(reconciler);
  }, 60_000);

  const arns = () => Object.fromEntries([[stack.copyWorker!.taskDefinition.taskRole, TASK_ROLE], [stack.copyWorker!.taskDefinition.obtainExecutionRole(), EXECUTION_ROLE]].map(([r, arn]) => [stack.resolve(stack.getLogicalId((r as IRole).node.defaultChild as never)) as string, arn as string]));
  const denied = async (statements: PolicyStatementJson[], of = requests) => {
    const out: string[] = [];
    for (const r of of) if (!(await simulate(statements, r)).allowed) out.push(`${r.action} ${r.resource}`);
    return out;
  };

  test('the two paths make every ECS command the modules can send', () => {
    expect(commands).toEqual(new Set([MODULE, ECS_MODULE].flatMap((file) => [...readFileSync(resolve(REPO_ROOT, file), 'utf8').matchAll(/(\w+)Command\b/g)].map((m) => m[1]!))));
    expect(reconcilerRequests.map((r) => r.action).sort()).toEqual(['ecs:DeregisterTaskDefinition', 'ecs:DescribeTaskDefinition', 'ecs:ListTaskDefinitionFamilies', 'ecs:ListTaskDefinitions']);
  });

  test.each(FUNCTIONS.map((f) => f.name))('%s: auditsCopyTasks is whether its bundle contains only the listing module; then its role allows the reconciler\'s requests and no registration', async (name) => {
    const f = FUNCTIONS.find((x) => x.name === name)!;
    const inputs = bundled.get(name)!;
    expect(Boolean(f.auditsCopyTasks)).toBe(inputs.some((i) => i.endsWith(ECS_MODULE)) && !inputs.some((i) => i.endsWith(MODULE)));
    if (!f.auditsCopyTasks) return;
    const statements = roleStatements(name, arns());
    expect(await denied(statements, reconcilerRequests)).toEqual([]);
    // Exactly these: the registration's requests (RegisterTaskDefinition, iam:PassRole) are denied.
    const registration = requests.filter((r) => r.action === 'ecs:RegisterTaskDefinition' || r.action === 'iam:PassRole');
    expect(registration.length).toBeGreaterThan(0);
    expect(await denied(statements, registration)).toEqual(registration.map((r) => `${r.action} ${r.resource}`));
  });

  test.each(FUNCTIONS.map((f) => f.name))('%s: registersCopyTasks is whether its bundle contains the module; then its role allows every request', async (name) => {
    const f = FUNCTIONS.find((x) => x.name === name)!;
    const inputs = bundled.get(name)!;
    expect(Boolean(f.registersCopyTasks)).toBe(inputs.some((i) => i.endsWith(MODULE)));
    if (f.registersCopyTasks) expect(await denied(roleStatements(name, arns()))).toEqual([]);
  });

  test('the check can fail: a role without the grant, a role passed to another service, a family not a migration\'s', async () => {
    expect(await denied(roleStatements('share-steps', arns()))).toEqual(requests.map((r) => `${r.action} ${r.resource}`));
    expect(await denied(roleStatements('share-steps', arns()), reconcilerRequests)).toEqual(reconcilerRequests.map((r) => `${r.action} ${r.resource}`));
    const statements = roleStatements('migration-steps', arns());
    const pass = requests.find((r) => r.action === 'iam:PassRole')!;
    expect((await simulate(statements, { ...pass, context: { 'iam:PassedToService': 'lambda.amazonaws.com' } })).allowed).toBe(false);
    const register = requests.find((r) => r.action === 'ecs:RegisterTaskDefinition')!;
    expect((await simulate(statements, { ...register, resource: register.resource.replace(/task-definition\/.*/, 'task-definition/someone-elses') })).allowed).toBe(false);
  });

  test('the phase 1 machine may run the revision a migration registered (and pass its roles), not another family', async () => {
    const machine = stack.stateMachines.get('share-migration-start')!;
    const statements = roleStatements('', arns(), machine.role);
    const run = { action: 'ecs:RunTask', resource: registered.replace(/^arn:aws:ecs:[^:]+:/, `arn:aws:ecs:us-east-1:`), context: {} };
    expect(registered).toMatch(/task-definition\/.+-copy-worker-m-0b3f4c6e-1d2a-4f5b-8c7d-9e0f1a2b3c4d:1$/);
    expect(await denied(statements, [run, { action: 'iam:PassRole', resource: TASK_ROLE, context: {} }])).toEqual([]);
    expect((await simulate(statements, { ...run, resource: run.resource.replace('-copy-worker-m-', '-other-') })).allowed).toBe(false);
  });
});

/**
 * A presigned URL is authorized when it is used, as the role that signed it: the image API's
 * download URL (functions/images/download.ts) works only while that role may GetObject the key.
 */
describe('the image API\'s presigned downloads', () => {
  const BUCKET = 'ferry-images-test';
  /** The request S3 will authorize for the URL the image API signs (the signer records its input). */
  async function presignedRequest(): Promise<IamRequest> {
    const signed: { Bucket: string; Key: string }[] = [];
    const saved = process.env.FERRY_BUCKET;
    process.env.FERRY_BUCKET = BUCKET;
    setPresigner(undefined, async (_client, input) => (signed.push(input), 'https://signed.example/'));
    try {
      await imageDownloadUrl('0b3f4c6e-1d2a-4f5b-8c7d-9e0f1a2b3c4d');
    } finally {
      setPresigner(undefined);
      if (saved === undefined) delete process.env.FERRY_BUCKET;
      else process.env.FERRY_BUCKET = saved;
    }
    expect(signed).toHaveLength(1);
    return s3GetObjectRequest(signed[0]!);
  }
  const withBucket = (name: string) => roleStatements(name, { [stack.resolve(stack.getLogicalId(stack.bucket.node.defaultChild as never)) as string]: `arn:aws:s3:::${BUCKET}` });

  test('the image-api role allows the GetObject its download URL stands for, under images/ only', async () => {
    const request = await presignedRequest();
    expect(request.resource).toBe(`arn:aws:s3:::${BUCKET}/images/0b3f4c6e-1d2a-4f5b-8c7d-9e0f1a2b3c4d`);
    const statements = withBucket('image-api');
    expect(await simulate(statements, request)).toMatchObject({ allowed: true });
    expect((await simulate(statements, { ...request, resource: `arn:aws:s3:::${BUCKET}/tmp/snapshot` })).allowed).toBe(false);
  });

  test('the check can fail: a role without the bucket (network-api) is denied the same request', async () => {
    expect((await simulate(withBucket('network-api'), await presignedRequest())).allowed).toBe(false);
  });
});

/**
 * The image-import machine's steps (functions/images/import-steps.ts) run against mocked S3 and
 * DynamoDB (test/support/image-import-tour.ts): each call they make, simulated against the role of
 * image-import-steps and of the reconciler (which runs import-failed on an abandoned import).
 */
describe('the image import steps', () => {
  let calls: Awaited<ReturnType<typeof recordImageImportCalls>> = [];
  beforeAll(async () => {
    calls = await recordImageImportCalls();
  });
  const withResources = (name: string) =>
    roleStatements(name, {
      [stack.resolve(stack.getLogicalId(stack.bucket.node.defaultChild as never)) as string]: `arn:aws:s3:::${TOUR_BUCKET}`,
      [stack.resolve(stack.getLogicalId(stack.tables.get('compute-api')!.node.defaultChild as never)) as string]: TOUR_TABLE_ARN,
    });
  const denied = async (name: string, requests = calls.flatMap((c) => c.requests)) => {
    const statements = withResources(name);
    const out: string[] = [];
    for (const r of requests) if (!(await simulate(statements, r)).allowed) out.push(`${r.action} ${r.resource}`);
    return out;
  };

  test('the tour makes every S3 and DynamoDB command of the steps, PutObject and DeleteObject on images/<id>', () => {
    expect(new Set(calls.map((c) => c.command))).toEqual(IMAGE_IMPORT_COMMANDS);
    expect(calls.filter((c) => c.command.endsWith('ObjectCommand')).map((c) => c.requests[0]!.resource)).toEqual([`arn:aws:s3:::${TOUR_BUCKET}/images/${TOUR_IMAGE_ID}`, `arn:aws:s3:::${TOUR_BUCKET}/images/${TOUR_IMAGE_ID}`]);
  });

  test.each(['image-import-steps', 'reconciler'])('%s: its role allows every request', async (name) => {
    expect(await denied(name)).toEqual([]);
  });

  test.each([['reconciler', []], ['replication-steps', ['StartExecution', 'DescribeExecution']]])('%s: starting and describing volume-attach-wait (attach-wait-recovery.ts) is denied for %j', async (name, refused) => {
    const machine = resolveIntrinsics(stack.resolve(stack.stateMachineArn('volume-attach-wait'))) as string;
    const requests = [{ action: 'states:StartExecution', resource: machine, context: {} }, { action: 'states:DescribeExecution', resource: `${machine.replace(':stateMachine:', ':execution:')}:volume-attach-wait-a-1`, context: {} }];
    expect(await denied(name, requests)).toEqual(refused.map((a, i) => `states:${a} ${requests[i]!.resource}`));
  });
  test('the check can fail: a key outside images/, a role without the bucket that only reads its tables', async () => {
    const put = calls.find((c) => c.command === 'PutObjectCommand')!.requests[0]!;
    expect(await denied('image-import-steps', [{ ...put, resource: `arn:aws:s3:::${TOUR_BUCKET}/tmp/snapshot` }])).toHaveLength(1);
    expect(new Set(await denied('ops-api'))).toEqual(new Set([`s3:PutObject ${put.resource}`, `s3:DeleteObject ${put.resource}`, `dynamodb:UpdateItem ${TOUR_TABLE_ARN}`]));
  });
});
