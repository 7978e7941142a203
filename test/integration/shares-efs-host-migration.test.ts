/**
 * Host-assisted share migration to and from aws-efs backends through the Manila API, on the
 * embedded stack with EFS/EC2 mocked (test/support/efs-stack.ts) and ECS mocked
 * (test/support/fake-ecs.ts). The copy task's Fargate run is a stand-in integration for
 * `ecs:runTask.sync` that does what Fargate would with the RunTask it got: it mounts the volumes of
 * the task definition named (which must be ACTIVE), only through the security groups and the file
 * system policy that admit the copy task's role, copies, and finishes the copy record. Checked:
 * which task definition RunTask got (a revision of the migration's own family, with the source
 * and destination file systems as its volumes), where the task ran, and that after success, after
 * an error and after a cancel the revision is deregistered and the data node's rule is gone from
 * both shares' policies; the lost reply of RegisterTaskDefinition, a throttle, and ECS refusing the
 * registration (ClientException).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { claimCopyOperation, finishCopyOperation } from '../../functions/copy/progress.js';
import { getShare } from '../../functions/shares/repo.js';
import { runAudit } from '../../functions/audit/audit.js';
import { startEfsStackWithEcs, type EfsStack } from '../support/efs-stack.js';
import { awsError } from '../support/fake-ec2.js';
import { COPY_TASK_ROLE, FAKE_ECS_REGION, type FakeEcs } from '../support/fake-ecs.js';
import { FAKE_EFS_VPC, type FakeEfs } from '../support/fake-efs.js';
import { migrationStartBody } from '../support/manila.js';
import { eventually } from '../support/poll.js';

const TASK_GROUP = 'sg-0copytask';
const ENV = {
  FERRY_COPY_CLUSTER: `arn:aws:ecs:${FAKE_ECS_REGION}:111122223333:cluster/ferry-copy`,
  FERRY_COPY_TASK_ROLE: COPY_TASK_ROLE,
  FERRY_COPY_VPC_ID: FAKE_EFS_VPC,
  FERRY_COPY_SUBNETS: 'subnet-0a1,subnet-0b2',
  FERRY_COPY_SECURITY_GROUPS: TASK_GROUP,
};

let efs: EfsStack & { ecs: FakeEcs };
let fake: FakeEfs;
/** What each RunTask asked, and how the stand-in task ends: copy (the default) or fail. */
const runs: Record<string, any>[] = [];
let taskOutcome: 'copy' | 'fail' = 'copy';

/** The copy task as Fargate runs it: the task definition's volumes, mounted only if the network and the policy admit the task role. */
async function fargate(input: unknown): Promise<any> {
  const params = input as Record<string, any>;
  runs.push(params);
  const env = Object.fromEntries((params.Overrides.ContainerOverrides[0].Environment as { Name: string; Value: string }[]).map((e) => [e.Name, e.Value]));
  const definition = ecs.fake.describe({ taskDefinition: params.TaskDefinition }).taskDefinition;
  const failed = (reason: string) => Object.assign(new Error(JSON.stringify({ StopCode: 'TaskFailedToStart', StoppedReason: reason })), { name: 'States.TaskFailed' });
  if (definition.status !== 'ACTIVE') throw failed('TaskDefinition is inactive');
  if (taskOutcome === 'fail') throw failed('ResourceInitializationError: failed to invoke EFS utils commands to set up EFS volumes');
  const container = definition.containerDefinitions![0]!;
  const fsAt = (path: string) => {
    const mount = container.mountPoints!.find((m) => path.startsWith(m.containerPath!));
    return definition.volumes!.find((v) => v.name === mount?.sourceVolume)?.efsVolumeConfiguration?.fileSystemId;
  };
  const admits = (fileSystemId: string, write: boolean) => {
    const group = [...fake.groups.values()].find((g) => g.GroupName?.endsWith(fake.fileSystems.get(fileSystemId)!.Tags!.find((t) => t.Key === 'ferry:share-name')!.Value!));
    const members = group?.IpPermissions?.some((p) => p.FromPort === 2049 && p.UserIdGroupPairs?.some((u) => u.GroupId === group.GroupId));
    if (!members || !params.NetworkConfiguration.AwsvpcConfiguration.SecurityGroups.includes(group!.GroupId)) throw failed(`NFS to ${fileSystemId} not admitted`);
    const role = fake.policyOf(fileSystemId)!.Statement.find((st) => st.Effect === 'Allow' && [(st.Principal as { AWS?: string | string[] } | undefined)?.AWS].flat().includes(COPY_TASK_ROLE));
    const actions = [role?.Action].flat();
    if (!actions.includes('elasticfilesystem:ClientMount') || write !== actions.includes('elasticfilesystem:ClientWrite')) throw failed(`the policy of ${fileSystemId} gives the copy role ${actions.join(' ') || 'nothing'}`);
  };
  const [src, dst] = [fsAt(env.FERRY_COPY_SOURCE!), fsAt(env.FERRY_COPY_DESTINATION!)];
  if (src) admits(src, false);
  if (dst) admits(dst, true);
  const files: [string, string][] = src
    ? [...(fake.replication.files.get(src) ?? new Map()).entries()].map(([k, v]) => [k, v.content])
    : readdirSync(env.FERRY_COPY_SOURCE!).filter((f) => !f.startsWith('.')).map((f) => [f, readFileSync(join(env.FERRY_COPY_SOURCE!, f), 'utf8')]);
  for (const [path, content] of files) fake.replication.write(FAKE_ECS_REGION, dst!, path, content);
  const claim = await claimCopyOperation({ operationId: env.FERRY_COPY_OPERATION_ID!, source: env.FERRY_COPY_SOURCE!, destination: env.FERRY_COPY_DESTINATION! });
  const progress = { bytesTotal: 1, filesTotal: files.length, bytesDone: 1, filesDone: files.length, filesResumed: 0 };
  if (claim.claimed) await finishCopyOperation(env.FERRY_COPY_OPERATION_ID!, claim.record.generation, { status: 'completed', progress });
  return { LastStatus: 'STOPPED', TaskDefinitionArn: params.TaskDefinition, Containers: [{ Name: 'copy-worker', ExitCode: 0 }] };
}

let ecs: { fake: FakeEcs };
beforeAll(async () => {
  efs = await startEfsStackWithEcs(ENV, fargate);
  ({ fake } = efs);
  ecs = { fake: efs.ecs };
}, 180_000);
afterAll(async () => efs?.stop());

const m = () => efs.manila;
const nameOf = async (id: string) => `share-${(await getShare(id))!.instanceId}`;
const fsOf = (name: string) => fake.fileSystemNamed(name)!.FileSystemId!;
/** The principals the policy of a share's file system names. */
const principals = (name: string) => fake.policyOf(fsOf(name))!.Statement.flatMap((st) => [(st.Principal as { AWS?: string | string[] } | undefined)?.AWS].flat());
const migrationFamily = (migrationId: string) => `ferry-copy-worker-m-${migrationId}`;

async function efsShareWithFile(backend: string, file: string): Promise<{ id: string; name: string }> {
  const { id } = await m().availableShare(backend, { name: file });
  expect((await m().action(id, { allow_access: { access_type: 'ip', access_to: '10.0.0.0/24', access_level: 'rw' } })).status).toBe(200);
  const name = await nameOf(id);
  fake.replication.write(FAKE_ECS_REGION, fsOf(name), file, `the content of ${file}`);
  return { id, name };
}

/** Starts a forced host-assisted migration and waits for phase 1 to end in one of `states`. */
async function migrate(id: string, to: string, states: string[]): Promise<{ share: Record<string, any>; migrationId: string; destination: string }> {
  const type = await m().typePinnedTo(to.split('@')[1]!.split('#')[0]!);
  expect((await m().action(id, migrationStartBody(to, { force_host_assisted_migration: true }, { new_share_type_id: type }))).status).toBe(202);
  await eventually(async () => ((await getShare(id))?.migration?.destination?.id ? true : undefined), 'the destination recorded');
  const s = (await getShare(id))!;
  const migrationId = s.migration!.id;
  const destination = `share-${s.migration!.destination!.id}`;
  return { share: await m().taskStateBecomes(id, states), migrationId, destination };
}

describe('host-assisted migration with aws-efs shares (EFS, EC2 and ECS mocked)', () => {
  test('from the local backend to aws-efs: RunTask gets the migration\'s own revision; after migration_complete it is deregistered and no share names the copy role', async () => {
    const { id, path } = await m().availableShare('nfs-a', { name: 'to-efs' });
    const { writeFileSync } = await import('node:fs');
    writeFileSync(join(path, 'hello.txt'), 'hello from the folder backend');
    const from = runs.length;
    const { migrationId, destination } = await migrate(id, 'ferry@efs-a#pool0', ['data_copying_completed']);
    const run = runs[from]!;
    const family = migrationFamily(migrationId);
    expect(run.TaskDefinition).toBe(ecs.fake.active(family)[0]!.taskDefinitionArn);
    expect(run.TaskDefinition).toMatch(new RegExp(`:task-definition/${family}:1$`));
    const definition = ecs.fake.active(family)[0]!;
    // The share storage volume kept (the source is a folder on it) and the destination's file system added.
    expect(definition.volumes!.map((v) => [v.name, v.efsVolumeConfiguration?.fileSystemId])).toEqual([['shares', 'fs-0stack'], ['destination', fsOf(destination)]]);
    expect(definition.containerDefinitions![0]!.mountPoints).toEqual([
      { sourceVolume: 'shares', containerPath: '/mnt/ferry-shares', readOnly: false },
      { sourceVolume: 'destination', containerPath: '/mnt/ferry-copy/destination', readOnly: false },
    ]);
    expect(run.NetworkConfiguration.AwsvpcConfiguration).toMatchObject({ Subnets: ['subnet-0a1', 'subnet-0b2'], SecurityGroups: [fake.groupNamed(destination)!.GroupId, TASK_GROUP] });
    expect(fake.replication.read(fsOf(destination), 'hello.txt')).toBe('hello from the folder backend');
    // Phase 1 done: the data node's rule is gone from the destination (host-finish), the revision stays until the migration ends.
    expect(principals(destination)).not.toContain(COPY_TASK_ROLE);

    expect((await m().action(id, { migration_complete: null })).status).toBe(202);
    expect(await m().taskStateBecomes(id, ['migration_success'])).toMatchObject({ host: 'ferry@efs-a#pool0' });
    expect(ecs.fake.active(family)).toEqual([]);
    expect((await getShare(id))!.migration).toBeNull();
    expect((await runAudit()).findings).toEqual([]);
  });

  test('aws-efs to aws-efs (forced): both file systems are volumes (the source read-only), in the subnet both have; a lost RegisterTaskDefinition reply and a throttle register one revision; cancel deregisters it', async () => {
    const { id, name } = await efsShareWithFile('efs-a', 'efs-to-efs');
    ecs.fake.failNext('DescribeTaskDefinition', awsError('ThrottlingException', 'Rate exceeded'));
    ecs.fake.failNext('RegisterTaskDefinition', Object.assign(new Error('socket hang up'), { name: 'TimeoutError' }), true);
    const from = runs.length;
    const { migrationId, destination } = await migrate(id, 'ferry@efs-b#pool0', ['data_copying_completed']);
    const family = migrationFamily(migrationId);
    expect(ecs.fake.calls.filter((c) => c.command === 'RegisterTaskDefinition' && c.input.family === family)).toHaveLength(1);
    const definition = ecs.fake.active(family);
    expect(definition.map((d) => d.revision)).toEqual([1]);
    expect(runs.slice(from).map((r) => r.TaskDefinition)).toEqual([definition[0]!.taskDefinitionArn]);
    expect(definition[0]!.volumes!.map((v) => [v.name, v.efsVolumeConfiguration?.fileSystemId, v.efsVolumeConfiguration?.authorizationConfig?.iam])).toEqual([
      ['source', fsOf(name), 'ENABLED'],
      ['destination', fsOf(destination), 'ENABLED'],
    ]);
    expect(definition[0]!.containerDefinitions![0]!.mountPoints!.map((p) => [p.containerPath, p.readOnly])).toEqual([['/mnt/ferry-copy/source', true], ['/mnt/ferry-copy/destination', false]]);
    // efs-b has a mount target in subnet-0a1 only; no share storage, so not the stack's task group.
    expect(runs[from]!.NetworkConfiguration.AwsvpcConfiguration).toMatchObject({ Subnets: ['subnet-0a1'], SecurityGroups: [fake.groupNamed(name)!.GroupId, fake.groupNamed(destination)!.GroupId] });
    expect(fake.replication.read(fsOf(destination), 'efs-to-efs')).toBe('the content of efs-to-efs');

    expect((await m().action(id, { migration_cancel: null })).status).toBe(202);
    expect(await m().taskStateBecomes(id, ['migration_cancelled'])).toMatchObject({ status: 'available', host: 'ferry@efs-a#pool0' });
    expect(ecs.fake.active(family)).toEqual([]);
    expect(principals(name)).not.toContain(COPY_TASK_ROLE);
    expect(fake.fileSystemNamed(destination)).toBeUndefined();
    expect((await runAudit()).findings).toEqual([]);
  });

  test('a copy task that cannot start, every attempt: migration_error; the revision deregistered, the copy role out of the source policy, the destination gone', async () => {
    const { id, name } = await efsShareWithFile('efs-a', 'fails');
    taskOutcome = 'fail';
    const from = runs.length;
    const { migrationId, destination } = await migrate(id, 'ferry@nfs-b#pool0', ['migration_error']);
    taskOutcome = 'copy';
    expect(runs.length - from).toBe(3); // MAX_COPY_ATTEMPTS, each with the migration's one revision
    const family = migrationFamily(migrationId);
    expect(new Set(runs.slice(from).map((r) => r.TaskDefinition))).toEqual(new Set([`arn:aws:ecs:${FAKE_ECS_REGION}:111122223333:task-definition/${family}:1`]));
    expect(ecs.fake.active(family)).toEqual([]);
    expect(ecs.fake.definitions.filter((d) => d.family === family).map((d) => d.status)).toEqual(['INACTIVE']);
    expect(principals(name)).not.toContain(COPY_TASK_ROLE);
    expect((await getShare(id))!).toMatchObject({ status: 'available', host: 'ferry@efs-a#pool0', migration: null });
    expect(destination).toMatch(/^share-/);
    expect((await runAudit()).findings).toEqual([]);
  });

  test('ECS refuses the registration (ClientException): migration_error with ECS\'s reason, nothing registered or granted is left', async () => {
    const { id, name } = await efsShareWithFile('efs-a', 'refused');
    ecs.fake.failNext('RegisterTaskDefinition', awsError('ClientException', 'Family contains invalid characters or is too long.'));
    const from = runs.length;
    const { migrationId } = await migrate(id, 'ferry@efs-b#pool0', ['migration_error']);
    expect(runs.length).toBe(from);
    expect((await getShare(id))!.errorReason).toMatch(/RegisterTaskDefinition.*ClientException: Family contains invalid characters/);
    expect(ecs.fake.definitions.filter((d) => d.family === migrationFamily(migrationId))).toEqual([]);
    expect(principals(name)).not.toContain(COPY_TASK_ROLE);
    expect((await getShare(id))!.migration).toBeNull();
    expect((await runAudit()).findings).toEqual([]);
  });
});
