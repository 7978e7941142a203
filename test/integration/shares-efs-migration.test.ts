/**
 * Driver-assisted share migration between two aws-efs backends through the Manila API, on the
 * embedded stack (DynamoDB Local, the ASL files run by the local interpreter) with EFS and EC2
 * mocked by the fake with replication (test/support/efs-stack.ts): the full two phases
 * (migration_start, migration_get_progress while EFS replicates, migration_complete), a
 * migration_cancel after phase 1, and a replication in ERROR that ends in migration_error with its
 * reason. Before and after each: the export location, the access rules through the API and what
 * the backends hold for them (security group ingress, file system policy); after each, nothing
 * left: no replica, no replication, no stray security group or mount target, a clean audit.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { getShare } from '../../functions/shares/repo.js';
import type { FakeEfs } from '../support/fake-efs.js';
import { startEfsStack, type EfsStack } from '../support/efs-stack.js';
import { migrationStartBody } from '../support/manila.js';
import { eventually } from '../support/poll.js';

let efs: EfsStack;
let fake: FakeEfs;
const m = () => efs.manila;
const region = 'eu-west-1';

beforeAll(async () => {
  efs = await startEfsStack();
  fake = efs.fake;
}, 180_000);
afterAll(async () => {
  await efs?.stop();
});

/** What the fake account holds: live file systems by share name, security groups by share name, mount targets per file system, replications. */
function holdings() {
  const live = [...fake.fileSystems.values()].filter((f) => f.LifeCycleState !== 'deleting');
  const nameOf = (tags?: { Key?: string; Value?: string }[]) => tags?.find((t) => t.Key === 'ferry:share-name')?.Value;
  return {
    fileSystems: live.map((f) => nameOf(f.Tags)).sort(),
    groups: [...fake.groups.values()].map((g) => nameOf(g.Tags)).sort(),
    mountTargets: Object.fromEntries(live.map((f) => [nameOf(f.Tags), [...fake.mountTargets.values()].filter((mt) => mt.FileSystemId === f.FileSystemId && mt.LifeCycleState !== 'deleting').map((mt) => mt.SubnetId).sort()])),
    replications: fake.replication.replications.size,
  };
}
const backendName = async (id: string) => `share-${(await getShare(id))!.instanceId}`;
const exportOf = async (id: string) => (await m().api('GET', `/shares/${id}/export_locations`)).body.export_locations.map((e: { path: string }) => e.path);
const rulesOf = async (id: string) =>
  ((await m().api('GET', `/share-access-rules?share_id=${id}`)).body.access_list as Record<string, string>[]).map((r) => [r.access_type, r.access_to, r.access_level, r.state]).sort();
/** The NFS ingress of a share's security group and the Sids of its file system policy. */
function enforced(name: string) {
  const fs = fake.fileSystemNamed(name)!;
  const group = fake.groupNamed(name)!;
  return {
    ingress: group.IpPermissions!.flatMap((p) => (p.IpRanges ?? []).map((r) => `${p.FromPort}:${r.CidrIp}`)),
    policy: fake.policyOf(fs.FileSystemId!)!.Statement.map((s) => s.Sid!),
  };
}
async function auditClean(): Promise<void> {
  expect((await runAudit()).findings).toEqual([]);
}

/** An available share on efs-a with an ip rule and a user rule, and a file in it. */
async function shareWithRules(name: string): Promise<{ id: string; backend: string }> {
  const { id } = await m().availableShare('efs-a', { name });
  for (const rule of [{ access_type: 'ip', access_to: '10.0.0.0/24', access_level: 'rw' }, { access_type: 'user', access_to: 'analyst', access_level: 'ro' }]) {
    expect((await m().action(id, { allow_access: rule })).status).toBe(200);
  }
  await eventually(async (note) => (note(await rulesOf(id)).every((r) => r[3] === 'active') ? true : undefined), `rules of ${id} active`);
  const backend = await backendName(id);
  fake.replication.write(region, fake.fileSystemNamed(backend)!.FileSystemId!, 'before', 'written before the migration');
  return { id, backend };
}

const RULES = [
  ['ip', '10.0.0.0/24', 'rw', 'active'],
  ['user', 'analyst', 'ro', 'active'],
];

describe('driver-assisted migration between aws-efs backends, through the Manila API (EFS mocked)', () => {
  test('a share is made while EFS is still making its file system and mount targets (the machine waits), with its own group and mount targets', async () => {
    fake.settleLooks = 4; // more looks than one driver call makes: share-create's CreateOnBackend answers BackendNotReady and runs again
    const from = fake.calls.length;
    const { id, backend } = await shareWithRules('slow');
    fake.settleLooks = 1;
    const token = fake.fileSystemNamed(backend)!.CreationToken;
    const runs = fake.calls.slice(from).filter((c) => c.command === 'DescribeFileSystems' && c.input.CreationToken === token);
    expect(runs.length).toBeGreaterThanOrEqual(2); // each CreateOnBackend run starts by looking the file system up by its token
    expect(fake.calls.slice(from).filter((c) => c.command === 'CreateFileSystem')).toHaveLength(1);
    expect(await exportOf(id)).toEqual([`${fake.fileSystemNamed(backend)!.FileSystemId}.efs.${region}.amazonaws.com:/`]);
    expect(holdings().mountTargets[backend]).toEqual(['subnet-0a1', 'subnet-0b2']);
    expect(enforced(backend)).toEqual({ ingress: ['2049:10.0.0.0/24'], policy: ['ferry-ip-clients', expect.stringMatching(/^ferry-rule-1-r-/)] });
    expect((await m().api('DELETE', `/shares/${id}`)).status).toBe(202);
    await eventually(async () => ((await m().api('GET', `/shares/${id}`)).status === 404 ? true : undefined), `share ${id} deleted`);
    expect(holdings()).toMatchObject({ fileSystems: [], groups: [] });
    await auditClean();
  });

  test('phase 1 replicates while the source stays writable, progress from EFS; phase 2 moves the export and the rules; nothing is left of the source', async () => {
    const { id, backend } = await shareWithRules('moves');
    const sourceId = fake.fileSystemNamed(backend)!.FileSystemId!;
    const before = await exportOf(id);
    expect(before).toEqual([`${sourceId}.efs.${region}.amazonaws.com:/`]);
    const typeB = await m().typePinnedTo('efs-b');
    fake.replication.initialSyncLooks = 1_000_000; // the first sync runs until the test lets it finish

    const started = await m().action(id, migrationStartBody('ferry@efs-b#pool0', { writable: true, preserve_metadata: true }, { new_share_type_id: typeB }));
    expect(started.status).toBe(202);
    await m().taskStateBecomes(id, ['migration_driver_in_progress']);
    const replicaName = `share-${(await getShare(id))!.migration!.destination!.id}`;
    await eventually(async () => (fake.replication.replications.size === 1 ? true : undefined), 'the replication');
    const replicaId = fake.fileSystemNamed(replicaName)!.FileSystemId!;
    fake.setUsage(sourceId, 10_000);
    fake.setUsage(replicaId, 2_500);
    const progress = await m().action(id, { migration_get_progress: null });
    expect(progress.status).toBe(200);
    expect(progress.body).toMatchObject({ total_progress: 25, task_state: 'migration_driver_in_progress' });
    // The source takes writes during phase 1; the replica takes none of its own.
    fake.replication.write(region, sourceId, 'during', 'written during phase 1');
    expect(fake.replication.canWrite(region, replicaId)).toBe(false);
    expect((await m().share(id)).status).toBe('migrating');

    fake.replication.initialSyncLooks = 1;
    await m().taskStateBecomes(id, ['migration_driver_phase1_done']);
    expect(await exportOf(id)).toEqual(before);
    expect(await rulesOf(id)).toEqual(RULES);

    // The replication lags from here; a write before the cast must still reach the replica.
    fake.replication.fallBehind(sourceId);
    fake.replication.write(region, sourceId, 'late', 'written after phase 1, before the cast');
    expect((await m().action(id, { migration_complete: null })).status).toBe(202);
    // Phase 2 casts the source read-only (no new write, no mount target) and waits for the replica.
    await eventually(async (note) => (!fake.replication.canWrite(region, sourceId) && note(holdings().mountTargets[backend])?.length === 0 ? true : undefined), 'the source cast read-only');
    expect((await m().share(id)).task_state).toBe('migration_completing');
    expect(() => fake.replication.write(region, sourceId, 'too-late', 'x')).toThrow(/unreachable|denies ClientWrite/);
    fake.replication.fallBehind(sourceId, false);
    const done = await m().taskStateBecomes(id, ['migration_success']);
    expect(done).toMatchObject({ status: 'available', host: 'ferry@efs-b#pool0', share_type_name: 'on-efs-b' });
    // The export is the replica's; the rules are the same, enforced by the replica's own group and policy.
    expect(await exportOf(id)).toEqual([`${replicaId}.efs.${region}.amazonaws.com:/`]);
    expect(await rulesOf(id)).toEqual(RULES);
    expect(enforced(replicaName)).toEqual({ ingress: ['2049:10.0.0.0/24'], policy: ['ferry-ip-clients', expect.stringMatching(/^ferry-rule-1-r-/)] });
    // Everything written before the cast is on the replica, which is now writable; the source is gone.
    expect(fake.replication.read(replicaId, 'before')).toBe('written before the migration');
    expect(fake.replication.read(replicaId, 'during')).toBe('written during phase 1');
    expect(fake.replication.read(replicaId, 'late')).toBe('written after phase 1, before the cast');
    expect(fake.replication.canWrite(region, replicaId)).toBe(true);
    expect(holdings()).toEqual({ fileSystems: [replicaName], groups: [replicaName], mountTargets: { [replicaName]: ['subnet-0a1'] }, replications: 0 });
    await auditClean();
  });

  test('migration_cancel after phase 1: the replication and the replica are deleted, the share stays as it was', async () => {
    const { id, backend } = await shareWithRules('stays');
    const before = { export: await exportOf(id), rules: await rulesOf(id), enforced: enforced(backend), holdings: holdings() };
    const typeB = await m().typePinnedTo('efs-b');
    expect((await m().action(id, migrationStartBody('ferry@efs-b#pool0', {}, { new_share_type_id: typeB }))).status).toBe(202);
    await m().taskStateBecomes(id, ['migration_driver_phase1_done']);
    expect(holdings().replications).toBe(1);

    expect((await m().action(id, { migration_cancel: null })).status).toBe(202);
    const cancelled = await m().taskStateBecomes(id, ['migration_cancelled']);
    expect(cancelled).toMatchObject({ status: 'available', host: 'ferry@efs-a#pool0' });
    expect({ export: await exportOf(id), rules: await rulesOf(id), enforced: enforced(backend), holdings: holdings() }).toEqual(before);
    expect(fake.replication.canWrite(region, fake.fileSystemNamed(backend)!.FileSystemId!)).toBe(true);
    await auditClean();
  });

  test('a replication in ERROR ends phase 1 in migration_error with EFS\'s reason; nothing is left and the share is whole', async () => {
    const { id, backend } = await shareWithRules('fails');
    const before = { export: await exportOf(id), rules: await rulesOf(id), holdings: holdings() };
    fake.replication.initialSyncLooks = 1_000_000;
    const typeB = await m().typePinnedTo('efs-b');
    expect((await m().action(id, migrationStartBody('ferry@efs-b#pool0', {}, { new_share_type_id: typeB }))).status).toBe(202);
    const sourceId = fake.fileSystemNamed(backend)!.FileSystemId!;
    await eventually(async () => (fake.replication.replications.has(sourceId) ? true : undefined), 'the replication');
    fake.replication.setStatus(sourceId, 'ERROR', 'The destination file system was deleted outside the replication');

    const failed = await m().taskStateBecomes(id, ['migration_error']);
    fake.replication.initialSyncLooks = 1;
    expect(failed).toMatchObject({ status: 'available', host: 'ferry@efs-a#pool0' });
    expect((await getShare(id))!.errorReason).toMatch(/replication of share-.* is ERROR: The destination file system was deleted outside the replication/);
    expect({ export: await exportOf(id), rules: await rulesOf(id), holdings: holdings() }).toEqual(before);
    await auditClean();
  });
});
