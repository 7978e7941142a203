/**
 * The reconciler's repair of copy task definitions no migration holds (functions/audit/copy-task-repairs.ts),
 * on the embedded stack with EFS/EC2 mocked (test/support/efs-stack.ts) and ECS mocked
 * (test/support/fake-ecs.ts, whose ListTaskDefinitionFamilies pages two families at a time):
 * - a revision of a migration no share holds (gone), one registered late for a migration that ended,
 *   and one a failed cleanup left on a migration_error record: deregistered behind a recorded
 *   intent (the last also cleared from the record), and the audit ends clean;
 * - the family of a migration in flight (its copy task running) is no finding and stays ACTIVE; a
 *   stray younger than the grace cut-off is left;
 * - a throttled deregister leaves the intent (reported `left`), which the next pass finishes; a
 *   refused one (AccessDeniedException) is a failed repair, reported, and the intent stays;
 * - a throttled listing is reported as a finding, not passed over.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { reconcile } from '../../functions/audit/reconciler.js';
import { getShareRepair } from '../../functions/audit/share-repair-record.js';
import { claimCopyOperation, finishCopyOperation } from '../../functions/copy/progress.js';
import { getShare } from '../../functions/shares/repo.js';
import { startEfsStackWithEcs, type EfsStack } from '../support/efs-stack.js';
import { awsError } from '../support/fake-ec2.js';
import { COPY_FAMILY, COPY_TASK_ROLE, FAKE_ECS_REGION, type FakeEcs } from '../support/fake-ecs.js';
import { FAKE_EFS_VPC } from '../support/fake-efs.js';
import { migrationStartBody } from '../support/manila.js';
import { eventually } from '../support/poll.js';

const ENV = { FERRY_COPY_CLUSTER: `arn:aws:ecs:${FAKE_ECS_REGION}:111122223333:cluster/ferry-copy`, FERRY_COPY_TASK_ROLE: COPY_TASK_ROLE, FERRY_COPY_VPC_ID: FAKE_EFS_VPC, FERRY_COPY_SUBNETS: 'subnet-0a1', FERRY_COPY_SECURITY_GROUPS: 'sg-0copytask' };
let efs: EfsStack & { ecs: FakeEcs };
let ecs: { fake: FakeEcs };
/** With `hold`, the stand-in copy task waits here until released: a migration in flight. */
let release: (() => void) | undefined;
let hold = true;

/** The copy task as Fargate would run it, minus the mounts (shares-efs-host-migration.test.ts checks those): it finishes the copy record. */
async function fargate(input: unknown): Promise<any> {
  const params = input as Record<string, any>;
  const env = Object.fromEntries((params.Overrides.ContainerOverrides[0].Environment as { Name: string; Value: string }[]).map((e) => [e.Name, e.Value]));
  if (hold) await new Promise<void>((resolve) => (release = resolve));
  const claim = await claimCopyOperation({ operationId: env.FERRY_COPY_OPERATION_ID!, source: env.FERRY_COPY_SOURCE!, destination: env.FERRY_COPY_DESTINATION! });
  if (claim.claimed) await finishCopyOperation(env.FERRY_COPY_OPERATION_ID!, claim.record.generation, { status: 'completed', progress: { bytesTotal: 0, filesTotal: 0, bytesDone: 0, filesDone: 0, filesResumed: 0 } });
  return { LastStatus: 'STOPPED', TaskDefinitionArn: params.TaskDefinition, Containers: [{ Name: 'copy-worker', ExitCode: 0 }] };
}

beforeAll(async () => {
  efs = await startEfsStackWithEcs(ENV, fargate);
  ecs = { fake: efs.ecs };
}, 180_000);
afterAll(async () => {
  release?.();
  await efs?.stop();
});

const familyOf = (migrationId: string) => `${COPY_FAMILY}-m-${migrationId}`;
/** A revision of a migration's family registered by hand (as a lost or late RegisterTaskDefinition would), `ageMs` ago. */
function strayRevision(migrationId: string = randomUUID(), ageMs = 3_600_000): string {
  const family = familyOf(migrationId);
  const made = ecs.fake.register({ ...structuredClone(ecs.fake.definitions[0]!), family }).taskDefinition;
  made.registeredAt = new Date(Date.now() - ageMs);
  return family;
}
/** A share on efs-a in a forced host-assisted migration to efs-b, once it reached `state`. */
async function forcedMigration(name: string, state: string): Promise<{ id: string; migrationId: string; family: string }> {
  const { id } = await efs.manila.availableShare('efs-a', { name });
  const type = await efs.manila.typePinnedTo('efs-b');
  expect((await efs.manila.action(id, migrationStartBody('ferry@efs-b#pool0', { force_host_assisted_migration: true }, { new_share_type_id: type }))).status).toBe(202);
  await efs.manila.taskStateBecomes(id, [state]);
  const migrationId = (await getShare(id))!.migration!.id;
  return { id, migrationId, family: familyOf(migrationId) };
}
/** A pass with the grace cut-off at `before` (default: 10 minutes ago, as on AWS). */
const pass = (before = new Date(Date.now() - 600_000)) => reconcile({ before });
const strays = async () => (await runAudit()).findings.filter((f) => f.kind.includes('copy-task')).map((f) => f.resource).sort();

describe('the reconciler and copy task definitions no migration holds', () => {
  test('strays of gone migrations (three families: the listing pages) are deregistered behind an intent; one younger than the grace period is left', async () => {
    const gone = [strayRevision(), strayRevision(), strayRevision()];
    const young = strayRevision(randomUUID(), 60_000);
    expect(await strays()).toEqual([...gone, young].map((f) => `copy task definition ${f}`).sort());
    expect(ecs.fake.calls.filter((c) => c.command === 'ListTaskDefinitionFamilies').at(-1)!.input).toMatchObject({ familyPrefix: `${COPY_FAMILY}-m-`, status: 'ACTIVE', nextToken: '2' });

    const result = await pass();
    expect(result.repaired.map((r) => r.resource).sort()).toEqual(gone.map((f) => `copy task definition ${f}`).sort());
    expect(result.repaired[0]).toMatchObject({ kind: 'stray-copy-task-definition', saw: expect.stringMatching(/no share record holds migration/), did: expect.stringMatching(/^deregistered arn:aws:ecs:.*:1$/) });
    expect(result.left).toEqual([expect.objectContaining({ resource: `copy task definition ${young}`, outcome: 'left', saw: expect.stringMatching(/not older than the grace cut-off/) })]);
    for (const f of gone) expect(ecs.fake.active(f)).toEqual([]);
    expect(ecs.fake.active(young)).toHaveLength(1);
    expect(await getShareRepair(`copy-task-${gone[0]}`)).toMatchObject({ kind: 'copy-task-definition', state: 'done', target: { family: gone[0] } });
    expect(result.remaining.map((f) => f.resource)).toEqual([`copy task definition ${young}`]);

    // Past its grace period it goes too.
    expect((await pass(new Date(Date.now() + 60_000))).repaired.map((r) => r.resource)).toEqual([`copy task definition ${young}`]);
    expect(await strays()).toEqual([]);
  });

  test('the family of a migration in flight is no finding and stays; once the migration ended, a revision registered late for it is deregistered', async () => {
    const { id, migrationId, family } = await forcedMigration('in-flight', 'data_copying_in_progress');
    await eventually(async () => (release ? true : undefined), 'the copy task running');
    // Registered an hour ago, as far as the grace period can tell: only the migration record keeps it.
    ecs.fake.active(family)[0]!.registeredAt = new Date(Date.now() - 3_600_000);
    expect(await strays()).toEqual([]);
    const during = await pass(new Date(Date.now() + 60_000));
    expect([...during.repaired, ...during.left].filter((r) => r.resource.includes(family))).toEqual([]);
    expect(ecs.fake.active(family)).toHaveLength(1);

    release!();
    release = undefined;
    await efs.manila.taskStateBecomes(id, ['data_copying_completed']);
    expect((await efs.manila.action(id, { migration_cancel: null })).status).toBe(202);
    await efs.manila.taskStateBecomes(id, ['migration_cancelled']);
    expect(ecs.fake.active(family)).toEqual([]);
    // A Lambda retry of the registration that lands after the cleanup: a revision of an ended migration.
    strayRevision(migrationId);
    expect(await strays()).toEqual([`copy task definition ${family}`]);
    expect((await pass(new Date(Date.now() + 60_000))).repaired).toEqual([expect.objectContaining({ resource: `copy task definition ${family}`, saw: expect.stringMatching(new RegExp(`no share record holds migration ${migrationId}`)) })]);
    expect(ecs.fake.active(family)).toEqual([]);
    expect((await runAudit()).findings).toEqual([]);
  });

  test('a migration whose cleanup could not deregister its family ends in migration_error naming it; the repair deregisters it and clears it from the record', async () => {
    hold = false;
    const { id, migrationId, family } = await forcedMigration('cleanup-failed', 'data_copying_completed');
    for (let n = 0; n < 10; n++) ecs.fake.failNext('DeregisterTaskDefinition', awsError('AccessDeniedException', 'User is not authorized to perform: ecs:DeregisterTaskDefinition'));
    expect((await efs.manila.action(id, { migration_cancel: null })).status).toBe(202);
    await efs.manila.taskStateBecomes(id, ['migration_error', 'migration_cancelled']);
    const failed = (await getShare(id))!;
    expect(failed.migration?.copyTaskDefinition?.family).toBe(family);
    expect(ecs.fake.active(family)).toHaveLength(1);
    ecs.fake.active(family)[0]!.registeredAt = new Date(Date.now() - 3_600_000);
    ecs.fake.clearFailures();
    expect(await strays()).toEqual([`copy task definition ${family}`]);

    const result = await pass(new Date(Date.now() + 60_000));
    expect(result.repaired).toContainEqual(expect.objectContaining({ resource: `copy task definition ${family}`, saw: expect.stringMatching(/ended \(migration_error\) and its record still names it/), did: expect.stringMatching(new RegExp(`cleared it from migration ${migrationId} of share ${id}$`)) }));
    expect(ecs.fake.active(family)).toEqual([]);
    expect((await getShare(id))!.migration?.copyTaskDefinition ?? null).toBeNull();
    // The record itself is the operator's: migration_cancel runs the cleanup again and ends it.
    expect((await runAudit()).findings).toEqual([expect.objectContaining({ kind: 'migration-leftovers', resource: `share ${id}` })]);
    expect((await efs.manila.action(id, { migration_cancel: null })).status).toBe(202);
    await eventually(async () => ((await getShare(id))!.migration === null ? true : undefined), 'the cleanup run again');
    expect((await getShare(id))!.taskState).toBe('migration_cancelled');
    expect((await runAudit()).findings).toEqual([]);
    hold = true;
  });

  test('a throttled deregister leaves the intent, which the next pass finishes; a refused one is a failed repair, reported; a throttled listing is a finding', async () => {
    const throttled = strayRevision();
    ecs.fake.failNext('DeregisterTaskDefinition', awsError('ThrottlingException', 'Rate exceeded.'));
    const first = await pass();
    expect(first.left).toEqual([expect.objectContaining({ resource: `copy task definition ${throttled}`, outcome: 'left', did: expect.stringMatching(/^in progress .*ThrottlingException.*the next pass finishes it$/) })]);
    expect(await getShareRepair(`copy-task-${throttled}`)).toMatchObject({ state: 'intent' });
    expect(ecs.fake.active(throttled)).toHaveLength(1);
    // The next pass finishes the intent in its first step (before the audit).
    const second = await pass();
    expect(second.repaired).toEqual([expect.objectContaining({ kind: 'stray-copy-task-definition', resource: `copy task definition ${throttled}`, did: expect.stringMatching(/^deregistered /) })]);
    expect(ecs.fake.active(throttled)).toEqual([]);
    expect(await getShareRepair(`copy-task-${throttled}`)).toMatchObject({ state: 'done' });

    const refused = strayRevision();
    ecs.fake.failNext('DeregisterTaskDefinition', awsError('AccessDeniedException', 'User is not authorized to perform: ecs:DeregisterTaskDefinition'));
    const denied = await pass();
    expect(denied.left).toEqual([expect.objectContaining({ resource: `copy task definition ${refused}`, outcome: 'failed', did: expect.stringMatching(/AccessDeniedException/) })]);
    expect(ecs.fake.active(refused)).toHaveLength(1);
    expect(await getShareRepair(`copy-task-${refused}`)).toMatchObject({ state: 'intent' });
    expect((await pass()).repaired).toEqual([expect.objectContaining({ resource: `copy task definition ${refused}` })]);

    ecs.fake.failNext('ListTaskDefinitionFamilies', awsError('ThrottlingException', 'Rate exceeded.'));
    expect((await runAudit()).findings).toEqual([expect.objectContaining({ kind: 'copy-task-definitions-unreadable', detail: expect.stringMatching(/ThrottlingException/) })]);
    expect(await strays()).toEqual([]);
  });
});
