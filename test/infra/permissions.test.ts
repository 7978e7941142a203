/**
 * Permissions proven, not guessed: every path of the aws-ebs volume driver runs against a mocked
 * EC2 client; each call it makes becomes the IAM requests EC2 authorizes (test/support/iam-requests.ts);
 * each request is simulated against the synthesized role of every function whose bundle contains
 * the driver. A call no role allows fails here; so does an EC2 grant no call needs, a function
 * that bundles the driver without the wiring's `callsVolumeDrivers` (or the reverse), and a driver
 * command this tour never made.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { EC2Client } from '@aws-sdk/client-ec2';
import { App, Stack } from 'aws-cdk-lib';
import { mockClient } from 'aws-sdk-client-mock';
import { build } from 'esbuild';
import { beforeAll, describe, expect, test } from 'vitest';
import { AwsEbsVolumeDriver } from '../../functions/drivers/volume/aws-ebs.js';
import { FUNCTIONS } from '../../functions/wiring.js';
import { REPO_ROOT, buildFerryApp, type FerryStack } from '../../infra/aws/ferry-stack.js';
import { ebsDriverStatements } from '../../infra/aws/driver-permissions.js';
import { FAKE_EC2_BACKEND, FakeEc2, awsError, fakeRegions, wireFakeEc2 } from '../support/fake-ec2.js';
import { ec2Requests, resolveIntrinsics, simulate, type IamRequest, type PolicyStatementJson } from '../support/iam-requests.js';

const DRIVER_SOURCES = ['aws-ebs.ts', 'aws-ebs-volumes.ts', 'aws-ebs-replication.ts', 'aws-ebs-failback.ts'].map((f) => `functions/drivers/volume/${f}`);
const DRIVER_MODULE = 'functions/drivers/volume/aws-ebs-volumes.ts';
const REGION = 'eu-west-1';

interface Recorded {
  command: string;
  requests: IamRequest[];
}

/** Every operation of the driver, including the paths a lost reply and a delete of an attached volume take. */
async function recordDriverCalls(): Promise<Recorded[]> {
  const client = new EC2Client({ region: REGION });
  const ec2 = mockClient(client);
  const fake = new FakeEc2(FAKE_EC2_BACKEND);
  const calls: { command: string; input: Record<string, unknown>; tags: Map<string, { Key?: string; Value?: string }[] | undefined> }[] = [];
  wireFakeEc2(ec2, fake, (command, input) => {
    // The tags each named resource has at the moment of the call: IAM evaluates aws:ResourceTag then.
    const i = input as Record<string, string | undefined>;
    const tags = new Map<string, { Key?: string; Value?: string }[] | undefined>();
    if (i.VolumeId) tags.set(`volume/${i.VolumeId}`, fake.volumes.get(i.VolumeId)?.Tags);
    if (i.SnapshotId) tags.set(`snapshot/${i.SnapshotId}`, fake.snapshots.get(i.SnapshotId)?.Tags);
    for (const id of (input as { Resources?: string[] }).Resources ?? []) tags.set(`volume/${id}`, structuredClone(fake.volumes.get(id)?.Tags));
    calls.push({ command, input: structuredClone(input) as Record<string, unknown>, tags });
  });
  const driver = new AwsEbsVolumeDriver(
    { host: FAKE_EC2_BACKEND, driver: 'aws-ebs', availabilityZone: `${REGION}a`, ebsVolumeType: 'io2', pools: [{ name: 'gp', totalCapacityGb: 40 }], serviceUuid: '22222222-2222-4222-8222-222222222222', volumeBackendName: 'ebs-a' },
    { client, pollIntervalMs: 0, pollAttempts: 5 },
  );
  await driver.capabilities();
  await driver.createVolume({ backendName: 'volume-1', sizeGb: 4, pool: 'gp', multiattach: true });
  await driver.getVolume('volume-1');
  await driver.extendVolume('volume-1', 5);
  // Manage of a volume Ferry did not make: adopted (tagged), and released again as a failed manage does.
  const legacy = fake.add('legacy', 4, 'gp', { Tags: [{ Key: 'Name', Value: 'legacy' }] }).VolumeId!;
  await driver.listAdoptable();
  await driver.getVolume(legacy);
  await driver.adoptVolume(legacy, 'gp');
  await driver.releaseAdopted(legacy);
  await driver.initializeConnection('volume-1', { host: 'i-1' });
  await driver.listConnections();
  await driver.terminateConnection('volume-1', { host: 'i-1' });
  await driver.createSnapshot('volume-1', 'snapshot-1');
  await driver.listSnapshots();
  await driver.deleteSnapshot('volume-1', 'snapshot-1');
  // A lost AttachVolume reply: the attach happened, the driver looks before failing.
  fake.devices.set('i-2', ['/dev/sda1']);
  const attach = fake.attachVolume.bind(fake);
  fake.attachVolume = (input) => {
    attach(input);
    throw awsError('RequestTimeout');
  };
  await driver.initializeConnection('volume-1', { host: 'i-2' });
  // Deleting a volume still attached detaches it first.
  await driver.listVolumes();
  await driver.deleteVolume('volume-1');
  ec2.restore();

  const out: Recorded[] = [];
  for (const c of calls) {
    const known = { tagsOf: (type: string, id: string) => c.tags.get(`${type}/${id}`) };
    out.push({ command: c.command, requests: await ec2Requests(REGION, c.command, c.input, known) });
  }
  return out;
}

/**
 * Replication across two regions: passes (snapshot, copy, prune), a drill, failover with the
 * primary region's client, failback until done, disable. Each call recorded with its region.
 */
async function recordReplicationCalls(): Promise<Recorded[]> {
  const target = 'eu-central-1';
  const fakes = fakeRegions(FAKE_EC2_BACKEND, [`${REGION}a`, `${target}a`]);
  const calls: { region: string; command: string; input: Record<string, unknown>; tags: Map<string, { Key?: string; Value?: string }[] | undefined> }[] = [];
  const clients = new Map<string, EC2Client>();
  const mocks = [];
  for (const [region, fake] of fakes) {
    const client = new EC2Client({ region });
    clients.set(region, client);
    const mock = mockClient(client);
    mocks.push(mock);
    wireFakeEc2(mock, fake, (command, input) => {
      const i = input as Record<string, string | string[] | undefined>;
      const tags = new Map<string, { Key?: string; Value?: string }[] | undefined>();
      const snapshotTags = (id: string) => [...fakes.values()].map((f) => f.snapshots.get(id)?.Tags).find(Boolean);
      if (typeof i.VolumeId === 'string') tags.set(`volume/${i.VolumeId}`, structuredClone(fake.volumes.get(i.VolumeId)?.Tags));
      for (const id of [i.SnapshotId, i.SourceSnapshotId]) if (typeof id === 'string') tags.set(`snapshot/${id}`, structuredClone(snapshotTags(id)));
      for (const id of (i.Resources as string[] | undefined) ?? []) tags.set(`volume/${id}`, structuredClone(fake.volumes.get(id)?.Tags));
      calls.push({ region, command, input: structuredClone(input) as Record<string, unknown>, tags });
    });
  }
  const config = {
    host: FAKE_EC2_BACKEND,
    driver: 'aws-ebs' as const,
    availabilityZone: `${REGION}a`,
    ebsVolumeType: 'gp3',
    pools: [{ name: 'gp', totalCapacityGb: 40 }],
    serviceUuid: '22222222-2222-4222-8222-222222222222',
    volumeBackendName: 'ebs-a',
    replicationDevices: [{ backend_id: 'fra', availability_zone: `${target}a` }],
  };
  const on = (activeBackendId = '') => new AwsEbsVolumeDriver(config, { clientFor: (r) => clients.get(r)!, pollIntervalMs: 0, pollAttempts: 5, activeBackendId });
  const ref = { volumeId: 'id-1', backendName: 'volume-r', sizeGb: 1 };
  await on().createVolume({ backendName: 'volume-r', sizeGb: 1, pool: 'gp' });
  await on().enableReplication('volume-r');
  for (let i = 0; i < 6; i++) await on().syncNow(0);
  await on().replicationStatus('volume-r');
  await on().endDrill(await on().startDrill([ref], 'fra'));
  await on().failoverHost([ref], 'fra');
  for (let i = 0; i < 6; i++) if (await on('fra').failoverHost([ref], 'default').catch(() => undefined)) break;
  await on().enableReplication('volume-r');
  for (let i = 0; i < 3; i++) await on().syncNow(0);
  await on().disableReplication('volume-r');
  for (const m of mocks) m.restore();
  const out: Recorded[] = [];
  for (const c of calls) {
    const known = { tagsOf: (type: string, id: string) => c.tags.get(`${type}/${id}`) };
    out.push({ command: c.command, requests: await ec2Requests(c.region, c.command, c.input, known) });
  }
  return out;
}

/** The EC2 commands the driver's source can send. */
function driverCommands(): Set<string> {
  const names = DRIVER_SOURCES.flatMap((f) => [...readFileSync(resolve(REPO_ROOT, f), 'utf8').matchAll(/(\w+)Command\(/g)].map((m) => m[1]!));
  return new Set(names);
}

/** Whether a function's bundle (esbuild, as CDK bundles it) contains the driver. */
async function bundlesDriver(entry: string): Promise<boolean> {
  const out = await build({
    entryPoints: [resolve(REPO_ROOT, entry)],
    bundle: true,
    write: false,
    metafile: true,
    platform: 'node',
    format: 'esm',
    target: 'node22',
    mainFields: ['module', 'main'],
    external: ['@aws-sdk/*'],
    outdir: '/tmp/ferry-permissions-bundle',
    logLevel: 'silent',
  });
  return Object.keys(out.metafile.inputs).some((input) => input.endsWith(DRIVER_MODULE));
}

let stack: FerryStack;
let resources: Record<string, { Type: string; Properties: Record<string, any> }>;
let recorded: Recorded[];
const reach = new Map<string, boolean>();

beforeAll(async () => {
  recorded = [...(await recordDriverCalls()), ...(await recordReplicationCalls())];
  for (const f of FUNCTIONS) reach.set(f.name, await bundlesDriver(f.entry));
  ({ stack } = buildFerryApp(new App(), { nag: false }));
  resources = (await import('aws-cdk-lib/assertions')).Template.fromStack(stack).toJSON().Resources;
}, 240_000);

/** Every statement of a function's execution role, with intrinsics resolved. */
function roleStatements(name: string): PolicyStatementJson[] {
  const role = stack.functions.get(name)!.role!;
  const roleId = Stack.of(role).resolve(Stack.of(role).getLogicalId(role.node.defaultChild as never)) as string;
  return Object.values(resources)
    .filter((r) => (r.Type === 'AWS::IAM::Policy' || r.Type === 'AWS::IAM::ManagedPolicy') && JSON.stringify(r.Properties.Roles).includes(`"${roleId}"`))
    .flatMap((r) => resolveIntrinsics(r.Properties.PolicyDocument.Statement) as PolicyStatementJson[]);
}

const ec2ActionsOf = (statements: PolicyStatementJson[]) =>
  new Set(statements.flatMap((s) => (Array.isArray(s.Action) ? s.Action : [s.Action])).filter((a) => a.startsWith('ec2:')));

describe('the aws-ebs driver against its roles', () => {
  test('the tour makes every EC2 command the driver source can send', () => {
    expect(new Set(recorded.map((r) => r.command))).toEqual(driverCommands());
  });

  test.each(FUNCTIONS.map((f) => f.name))('%s: callsVolumeDrivers in the wiring table is whether its bundle contains the driver', (name) => {
    expect(Boolean(FUNCTIONS.find((f) => f.name === name)!.callsVolumeDrivers)).toBe(reach.get(name));
  });

  test.each(FUNCTIONS.map((f) => f.name))('%s: its role allows every request the driver makes, and no EC2 action beyond them', async (name) => {
    const statements = roleStatements(name);
    if (!reach.get(name)) {
      expect([...ec2ActionsOf(statements)]).toEqual([]);
      return;
    }
    const denied: string[] = [];
    for (const r of recorded.flatMap((c) => c.requests)) {
      const { allowed, detail } = await simulate(statements, r);
      if (!allowed) denied.push(`${r.action} on ${r.resource} ${JSON.stringify(r.context)}: ${detail}`);
    }
    expect(denied).toEqual([]);
    expect(ec2ActionsOf(statements)).toEqual(new Set(recorded.flatMap((c) => c.requests.map((q) => q.action))));
  });
});

describe('the check can fail', () => {
  const statementsWithout = (sid: string) =>
    ebsDriverStatements().filter((s) => s.sid !== sid).map((s) => resolveIntrinsics(Stack.of(stack).resolve(s.toStatementJson())) as PolicyStatementJson);
  const deniedWith = async (statements: PolicyStatementJson[]) => {
    const out = new Set<string>();
    for (const r of recorded.flatMap((c) => c.requests)) if (!(await simulate(statements, r)).allowed) out.add(`${r.action} ${r.resource.replace(/\/[^/]+$/, '/…')}`);
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
});
