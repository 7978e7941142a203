/**
 * Driver-assisted migration of the aws-efs share driver by EFS replication (aws-efs-migration.ts),
 * against the fake EFS with replication (test/support/fake-efs-replication.ts) behind mocked EFS and
 * EC2 clients: phase 1 leaves the source writable and the replica read-only, progress comes from the
 * replica's size and the replication's last sync; phase 2 waits while the replica is behind, casts
 * the source read-only (policy, mount targets), waits for everything written before the cast, cuts
 * over and retires the source; cancel leaves nothing but the source as it was; a replication in
 * ERROR, a throttle, a lost reply, and a destination in another region.
 */
import { EC2Client } from '@aws-sdk/client-ec2';
import { EFSClient } from '@aws-sdk/client-efs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, test } from 'vitest';
import { BackendNotReady } from '../../functions/core/errors.js';
import { AwsEfsShareDriver } from '../../functions/drivers/share/aws-efs.js';
import type { MigrationRequest } from '../../functions/drivers/share/driver.js';
import { awsError } from '../support/fake-ec2.js';
import { efsBackend, FakeEfs, untilReady, wireFakeEfs } from '../support/fake-efs.js';
import { efsError, efsThrottle, linkEfsRegions } from '../support/fake-efs-replication.js';

/** The driver's looks per call, and so its tries of a throttled call. */
const ATTEMPTS = 3;

const SRC = 'share-11111111-1111-4111-a111-111111111111';
const DST = 'share-22222222-2222-4222-a222-222222222222';
const restores: (() => void)[] = [];
afterEach(() => {
  for (const r of restores.splice(0)) r();
});

function world(region = 'eu-west-1') {
  const efs = new EFSClient({ region });
  const ec2 = new EC2Client({ region });
  const efsMock = mockClient(efs);
  const ec2Mock = mockClient(ec2);
  restores.push(() => efsMock.restore(), () => ec2Mock.restore());
  const fake = new FakeEfs(region);
  fake.replication.tickMs = 1000;
  wireFakeEfs(efsMock, ec2Mock, fake);
  return { efs, ec2, fake };
}

/** Two backends of one account and region (b: bursting throughput, one zone), a share with a rule and a file on a. */
async function setup(options: { destRegion?: string } = {}) {
  const a = world();
  const b = options.destRegion ? world(options.destRegion) : a;
  if (b !== a) linkEfsRegions([a.fake, b.fake]);
  const clock = () => a.fake.replication.time;
  const destConfig = efsBackend('ferry@efs-b', { throughputMode: 'bursting', subnetIds: ['subnet-0a1'], ...(options.destRegion ? { region: options.destRegion } : {}) });
  const opts = { pollIntervalMs: 0, pollAttempts: ATTEMPTS, now: clock, clientsFor: () => ({ efs: b.efs, ec2: b.ec2 }) };
  const src = new AwsEfsShareDriver(efsBackend('ferry@efs-a'), { efs: a.efs, ec2: a.ec2, ...opts });
  const dst = new AwsEfsShareDriver(destConfig, { efs: b.efs, ec2: b.ec2, ...opts });
  const made = await src.createShare({ name: SRC, sizeGb: 2, proto: 'NFS', pool: 'pool0' });
  await src.updateAccess(SRC, [{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'rw' }]);
  const sourceId = a.fake.fileSystemNamed(SRC)!.FileSystemId!;
  a.fake.replication.write('eu-west-1', sourceId, 'before-start', 'one');
  const req: MigrationRequest = { source: { name: SRC, sizeGb: 2, proto: 'NFS' }, destination: { name: DST, host: 'ferry@efs-b#pool0', backend: destConfig } };
  const replication = a.fake.replication;
  const replicaId = () => b.fake.fileSystemNamed(DST)?.FileSystemId;
  return { a, b, src, dst, made, req, sourceId, replication, replicaId };
}

const phase1 = async (src: AwsEfsShareDriver, req: MigrationRequest) => {
  for (let i = 0; i < 20; i++) if (await src.migrationContinue(req)) return;
  throw new Error('phase 1 did not finish');
};
const tagsOf = (fake: FakeEfs, id: string) => Object.fromEntries((fake.fileSystems.get(id)?.Tags ?? []).map((t) => [t.Key, t.Value]));

describe('aws-efs migration, phase 1', () => {
  test('the replica is the destination backend\'s share (its modes, subnets), read-only; the source stays writable; progress from sizes, then the last sync', async () => {
    const { a, b, src, req, sourceId, replication, replicaId } = await setup();
    replication.initialSyncLooks = 6; // the first full sync takes a while
    expect(await src.migrationCheckCompatibility(req)).toEqual({ compatible: true, writable: true, preserve_metadata: true, nondisruptive: false, preserve_snapshots: false });
    await untilReady(() => src.migrationStart(req));
    await src.migrationStart(req); // a retried start makes nothing twice
    expect(a.fake.calls.filter((c) => c.command === 'CreateReplicationConfiguration')).toHaveLength(1);
    const replica = b.fake.fileSystems.get(replicaId()!)!;
    expect(replica).toMatchObject({ ThroughputMode: 'bursting', Encrypted: true, FileSystemProtection: { ReplicationOverwriteProtection: 'REPLICATING' } });
    expect([...b.fake.mountTargets.values()].filter((m) => m.FileSystemId === replica.FileSystemId).map((m) => m.SubnetId)).toEqual(['subnet-0a1']);
    expect(a.fake.calls.find((c) => c.command === 'CreateReplicationConfiguration')!.input).toEqual({ SourceFileSystemId: sourceId, Destinations: [{ Region: 'eu-west-1', FileSystemId: replica.FileSystemId }] });
    expect(() => replication.write('eu-west-1', replica.FileSystemId!, 'x', 'y')).toThrow(/read-only/);
    replication.write('eu-west-1', sourceId, 'during-phase-1', 'two');

    a.fake.setUsage(sourceId, 1000);
    b.fake.setUsage(replica.FileSystemId!, 400);
    expect(await src.migrationGetProgress(req)).toMatchObject({ total_progress: 40, bytes_done: 400, bytes_total: 1000 });
    expect(await src.migrationContinue(req)).toBe(false); // ENABLING -> ENABLED, the first sync running
    await phase1(src, req);
    const progress = await src.migrationGetProgress(req);
    expect(progress).toMatchObject({ total_progress: 100, replication_status: 'ENABLED', bytes_done: 1000 });
    expect(typeof progress.last_replicated_at).toBe('string');
    expect(replication.read(replica.FileSystemId!, 'before-start')).toBe('one');
  });

  test('a replication in ERROR fails phase 1 with EFS\'s reason; a throttled look is looked at again, throttled throughout it is BackendNotReady carrying the code; cancel still leaves nothing', async () => {
    const { a, b, src, req, sourceId, replicaId, made } = await setup();
    await untilReady(() => src.migrationStart(req));
    a.fake.failNext('DescribeReplicationConfigurations', efsThrottle());
    await src.migrationContinue(req);
    for (let n = 0; n < ATTEMPTS; n++) a.fake.failNext('DescribeReplicationConfigurations', efsThrottle());
    const throttled = await src.migrationContinue(req).catch((e: unknown) => e as BackendNotReady);
    expect(throttled).toBeInstanceOf(BackendNotReady);
    expect((throttled as BackendNotReady).context).toMatchObject({ code: 'ThrottlingException', operation: 'DescribeReplicationConfigurations' });
    a.fake.replication.setStatus(sourceId, 'ERROR', 'Unable to access the destination file system');
    await expect(src.migrationContinue(req)).rejects.toThrow(/replication of .* is ERROR: Unable to access the destination file system/);
    await expect(src.migrationComplete(req)).rejects.toThrow(/is ERROR/);
    await untilReady(() => src.migrationCancel(req));
    expect(a.fake.replication.replications.size).toBe(0);
    expect(replicaId()).toBeUndefined();
    expect([...b.fake.groups.values()].filter((g) => g.Tags?.some((t) => t.Value === DST))).toEqual([]);
    expect(await src.getShare(SRC)).toEqual(made);
  });

  test('"later" answers at the start: UpdateFileSystemProtection\'s TooManyRequests and CreateReplicationConfiguration\'s InsufficientThroughputCapacity are sent again; throughout, BackendNotReady carrying the code; one replication in the end', async () => {
    const { a, src, req } = await setup();
    const later = { TooManyRequests: 429, InsufficientThroughputCapacity: 503 };
    const refusal = (code: keyof typeof later) => efsError(code, `${code}: try again later`, { $metadata: { httpStatusCode: later[code] } });
    a.fake.failNext('UpdateFileSystemProtection', refusal('TooManyRequests'));
    a.fake.failNext('CreateReplicationConfiguration', refusal('InsufficientThroughputCapacity'));
    await untilReady(() => src.migrationStart(req));
    expect(a.fake.calls.filter((c) => c.command === 'UpdateFileSystemProtection')).toHaveLength(2);
    expect(a.fake.calls.filter((c) => c.command === 'CreateReplicationConfiguration')).toHaveLength(2);
    expect(a.fake.replication.replications.size).toBe(1);

    // Refused at every try: the step's wait, with the code (a new migration of another share, so a new start).
    const second = await setup();
    /** The start's answers until one is BackendNotReady with this code (the mount targets' waits come first). */
    const refusedWith = async (code: string) => {
      for (let i = 0; i < 30; i++) {
        const e = await second.src.migrationStart(second.req).then(() => undefined, (x: unknown) => x);
        if (!(e instanceof BackendNotReady) || e.context.code === code) return e;
      }
    };
    for (const [command, code] of [['UpdateFileSystemProtection', 'TooManyRequests'], ['CreateReplicationConfiguration', 'InsufficientThroughputCapacity']] as const) {
      for (let n = 0; n < ATTEMPTS; n++) second.a.fake.failNext(command, refusal(code));
      const e = await refusedWith(code);
      expect(e).toBeInstanceOf(BackendNotReady);
      expect((e as BackendNotReady).context).toMatchObject({ operation: command, code });
    }
    expect(second.a.fake.replication.replications.size).toBe(0);
    await untilReady(() => second.src.migrationStart(second.req));
    expect(second.a.fake.replication.replications.size).toBe(1);
  });

  test('a lost CreateReplicationConfiguration reply: the retry finds the replication and makes no second one', async () => {
    const { a, src, req } = await setup();
    a.fake.failNext('CreateReplicationConfiguration', awsError('RequestTimeout', 'lost'), { after: true });
    await untilReady(() => src.migrationStart(req));
    await src.migrationStart(req);
    expect(a.fake.replication.replications.size).toBe(1);
    expect(a.fake.calls.filter((c) => c.command === 'CreateReplicationConfiguration')).toHaveLength(1);
  });
});

describe('aws-efs migration, phase 2', () => {
  test('behind: the source stays writable; then the cast (policy, mount targets), the final sync, the cut-over; the source retired, the data before the cast on the replica', async () => {
    const { a, b, src, req, sourceId, replication, replicaId } = await setup();
    await untilReady(() => src.migrationStart(req));
    await phase1(src, req);
    // The replication falls behind: 20 minutes pass with no sync, and the source is not cast.
    replication.fallBehind(sourceId);
    replication.time += 20 * 60_000;
    await expect(src.migrationComplete(req)).rejects.toThrow(/is 20 minutes behind; the source keeps its mount targets/);
    expect(replication.canWrite('eu-west-1', sourceId)).toBe(true);
    replication.write('eu-west-1', sourceId, 'late', 'three');
    // It catches up; the cast comes, and then the replica must have the late write.
    replication.fallBehind(sourceId, false);
    await src.migrationContinue(req); // completes the sync begun before it fell behind
    await src.migrationContinue(req); // and the next, begun a second ago
    replication.fallBehind(sourceId);
    const waiting = await src.migrationComplete(req).catch((e: unknown) => e);
    expect(waiting).toBeInstanceOf(BackendNotReady);
    expect((waiting as Error).message).toMatch(/has not yet everything written before the read-only cast/);
    expect(replication.canWrite('eu-west-1', sourceId)).toBe(false);
    expect([...a.fake.mountTargets.values()].filter((m) => m.FileSystemId === sourceId)).toEqual([]);
    expect(a.fake.policyOf(sourceId)!.Statement.map((s) => s.Sid)).toEqual(['ferry-ip-clients', 'ferry-migration-read-only']);
    expect(tagsOf(a.fake, sourceId)['ferry:migration-cast-at']).toBeDefined();
    // The rules re-applied during phase 2 (the flow casts them read-only) keep the cast.
    await src.updateAccess(SRC, [{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'ro' }]);
    expect(a.fake.policyOf(sourceId)!.Statement.map((s) => s.Sid)).toContain('ferry-migration-read-only');

    replication.fallBehind(sourceId, false);
    const { value: locations, notReady } = await untilReady(() => src.migrationComplete(req));
    expect(notReady).toBeGreaterThanOrEqual(0);
    const replica = replicaId()!;
    expect(locations).toEqual([`${replica}.efs.eu-west-1.amazonaws.com:/`]);
    expect(replication.read(replica, 'late')).toBe('three');
    expect(replication.read(replica, 'before-start')).toBe('one');
    expect(a.fake.fileSystemNamed(SRC)).toBeUndefined();
    expect(a.fake.groupNamed(SRC)).toBeUndefined();
    expect(replication.replications.size).toBe(0);
    expect(b.fake.fileSystems.get(replica)!.FileSystemProtection).toEqual({ ReplicationOverwriteProtection: 'ENABLED' });
    expect(replication.canWrite('eu-west-1', replica)).toBe(true);
    // Retried after success: the same answer; cancel is refused.
    expect(await src.migrationComplete(req)).toEqual(locations);
    await expect(src.migrationCancel(req)).rejects.toThrow(/is complete: it cannot be cancelled/);
  });

  test('the cut-over is recorded before the replication is deleted; a retry after it carries on, and cancel is refused', async () => {
    const { a, src, req, replication, sourceId, replicaId } = await setup();
    await untilReady(() => src.migrationStart(req));
    await phase1(src, req);
    a.fake.settleLooks = 10; // the replication's deletion takes longer than one call's looks
    let waiting: unknown;
    for (let i = 0; i < 20 && !/replication of .* is being deleted/.test(String(waiting)); i++) waiting = await src.migrationComplete(req).catch((e: unknown) => e);
    expect(waiting).toBeInstanceOf(BackendNotReady);
    expect(String(waiting)).toMatch(/the replication of .* is being deleted/);
    expect(tagsOf(a.fake, sourceId)['ferry:migration-cutover']).toBe(replicaId());
    await expect(src.migrationCancel(req)).rejects.toThrow(/has cut over to .*: it can no longer be cancelled/);
    await expect(untilReady(() => src.migrationComplete(req).then(() => 'done'))).resolves.toMatchObject({ value: 'done' });
    expect(replication.replications.size).toBe(0);
    expect(a.fake.calls.filter((c) => c.command === 'DeleteReplicationConfiguration')).toHaveLength(1);
    const order = a.fake.calls.map((c) => c.command).filter((c) => ['TagResource', 'DeleteReplicationConfiguration', 'DeleteFileSystem'].includes(c));
    expect(order).toEqual(['TagResource', 'TagResource', 'DeleteReplicationConfiguration', 'DeleteFileSystem']);
    expect(a.fake.fileSystemNamed(SRC)).toBeUndefined();
    expect(a.fake.fileSystems.get(sourceId)?.LifeCycleState ?? 'gone').toMatch(/deleting|gone/);
  });

  test('cancel after a failed phase 2 (cast, not cut over) gives the source back: mount targets, policy, no mark; the replica gone', async () => {
    const { a, b, src, req, sourceId, replication, replicaId, made } = await setup();
    await untilReady(() => src.migrationStart(req));
    await phase1(src, req);
    replication.fallBehind(sourceId);
    await expect(src.migrationComplete(req)).rejects.toBeInstanceOf(BackendNotReady);
    expect(replication.canWrite('eu-west-1', sourceId)).toBe(false);
    await untilReady(() => src.migrationCancel(req));
    await src.migrationCancel(req); // idempotent
    expect(replicaId()).toBeUndefined();
    expect(replication.replications.size).toBe(0);
    expect(b.fake.groupNamed(DST)).toBeUndefined();
    expect(replication.canWrite('eu-west-1', sourceId)).toBe(true);
    expect(a.fake.policyOf(sourceId)!.Statement.map((s) => s.Sid)).toEqual(['ferry-ip-clients']);
    expect(tagsOf(a.fake, sourceId)['ferry:migration-cast-at']).toBeUndefined();
    expect(await src.getShare(SRC)).toEqual(made);
    expect(await src.getAccess(SRC)).toEqual([{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'rw' }]);
  });
});

describe('aws-efs migration to another region', () => {
  test('the replica is made in the destination\'s region by its clients; the replication names that region; complete and the data arrive', async () => {
    const { a, b, src, req, sourceId, replication, replicaId } = await setup({ destRegion: 'eu-central-1' });
    await untilReady(() => src.migrationStart(req));
    expect(b.fake.calls.some((c) => c.command === 'CreateFileSystem')).toBe(true);
    expect(a.fake.calls.filter((c) => c.command === 'CreateFileSystem')).toHaveLength(1); // the source's own
    expect(a.fake.calls.find((c) => c.command === 'CreateReplicationConfiguration')!.input).toMatchObject({ Destinations: [{ Region: 'eu-central-1' }] });
    await phase1(src, req);
    const { value } = await untilReady(() => src.migrationComplete(req));
    expect(value).toEqual([`${replicaId()}.efs.eu-central-1.amazonaws.com:/`]);
    expect(replication.read(replicaId()!, 'before-start')).toBe('one');
    expect(a.fake.fileSystemNamed(SRC)).toBeUndefined();
  });
});
