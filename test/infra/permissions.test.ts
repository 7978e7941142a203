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
import { testApp } from '../support/cdk-app.js';
import { lambdaBundle } from '../support/bundle.js';
import { beforeAll, describe, expect, test } from 'vitest';
import { FUNCTIONS, type FunctionWiring } from '../../functions/wiring.js';
import { REPO_ROOT, buildFerryApp, type FerryStack } from '../../infra/aws/ferry-stack.js';
import { ebsDriverStatements } from '../../infra/aws/driver-permissions.js';
import { efsDriverStatements } from '../../infra/aws/share-driver-permissions.js';
import { REGION, recordEbsCalls, recordEbsReplicationCalls, recordEfsCalls, recordEfsMigrationCalls, type Recorded } from '../support/driver-tours.js';
import { resolveIntrinsics, s3GetObjectRequest, simulate, type IamRequest, type PolicyStatementJson } from '../support/iam-requests.js';
import { imageDownloadUrl, setPresigner } from '../../functions/images/download.js';

/** Each AWS driver: its sources, the module whose presence in a bundle means the function runs it, the wiring flag that says so. */
const DRIVERS = {
  'aws-ebs': {
    sources: ['aws-ebs.ts', 'aws-ebs-volumes.ts', 'aws-ebs-replication.ts', 'aws-ebs-failback.ts'].map((f) => `functions/drivers/volume/${f}`),
    module: 'functions/drivers/volume/aws-ebs-volumes.ts',
    flag: 'callsVolumeDrivers',
  },
  'aws-efs': {
    sources: ['aws-efs.ts', 'aws-efs-backend.ts', 'aws-efs-migration.ts'].map((f) => `functions/drivers/share/${f}`),
    module: 'functions/drivers/share/aws-efs.ts',
    flag: 'callsShareDrivers',
  },
} as const satisfies Record<string, { sources: string[]; module: string; flag: keyof FunctionWiring }>;
type Driver = keyof typeof DRIVERS;
const KINDS = Object.keys(DRIVERS) as Driver[];

/** The commands a driver's source can send. */
function driverCommands(kind: Driver): Set<string> {
  return new Set(DRIVERS[kind].sources.flatMap((f) => [...readFileSync(resolve(REPO_ROOT, f), 'utf8').matchAll(/(\w+)Command\(/g)].map((m) => m[1]!)));
}

/** The drivers a function's bundle (esbuild, as CDK bundles it) contains. */
async function bundledDrivers(entry: string): Promise<Set<Driver>> {
  const inputs = Object.keys((await lambdaBundle(entry, '/tmp/ferry-permissions-bundle')).inputs);
  return new Set(KINDS.filter((k) => inputs.some((input) => input.endsWith(DRIVERS[k].module))));
}

let stack: FerryStack;
let resources: Record<string, { Type: string; Properties: Record<string, any> }>;
const recorded = new Map<Driver, Recorded[]>();
const reach = new Map<string, Set<Driver>>();

beforeAll(async () => {
  recorded.set('aws-ebs', [...(await recordEbsCalls()), ...(await recordEbsReplicationCalls())]);
  recorded.set('aws-efs', [...(await recordEfsCalls()), ...(await recordEfsMigrationCalls())]);
  for (const f of FUNCTIONS) reach.set(f.name, await bundledDrivers(f.entry));
  ({ stack } = buildFerryApp(testApp(), { nag: false }));
  resources = (await import('aws-cdk-lib/assertions')).Template.fromStack(stack).toJSON().Resources;
}, 240_000);

/** Every statement of a function's execution role, with intrinsics resolved. */
function roleStatements(name: string, arns: Record<string, string> = {}): PolicyStatementJson[] {
  const role = stack.functions.get(name)!.role!;
  const roleId = Stack.of(role).resolve(Stack.of(role).getLogicalId(role.node.defaultChild as never)) as string;
  return Object.values(resources)
    .filter((r) => (r.Type === 'AWS::IAM::Policy' || r.Type === 'AWS::IAM::ManagedPolicy') && JSON.stringify(r.Properties.Roles).includes(`"${roleId}"`))
    .flatMap((r) => resolveIntrinsics(r.Properties.PolicyDocument.Statement, arns) as PolicyStatementJson[]);
}

/** The drivers' actions a role holds: EC2's and EFS's, but the NFS client actions of the share storage's mount (copy-worker.test.ts's). */
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

describe('the check can fail', () => {
  const statementsWithout = (sid: string, of = ebsDriverStatements) =>
    of().filter((s) => s.sid !== sid).map((s) => resolveIntrinsics(Stack.of(stack).resolve(s.toStatementJson())) as PolicyStatementJson);
  const deniedWith = async (statements: PolicyStatementJson[], kind: Driver = 'aws-ebs') => {
    const out = new Set<string>();
    for (const r of requestsOf([kind])) if (!(await simulate(statements, r)).allowed) out.add(`${r.action} ${r.resource.replace(/\/[^/]+$/, '/…')}`);
    return [...out].sort();
  };

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
