/**
 * The reconciler on aws-efs share backends (functions/audit/share-backends.ts and
 * share-backend-repairs.ts), on the embedded stack with EFS and EC2 mocked (test/support/efs-stack.ts):
 * - the quota: a share EFS meters over its size is found, and the reconciler withholds its writes
 *   (the policy's Deny of ClientWrite, its rules kept) behind a recorded intent; a pass that could
 *   not finish (EFS throttled throughout, or it failed after the block) leaves the intent, which
 *   the next pass finishes; once the share is within its size again its writes come back; an
 *   access change made while the enforcement runs is kept;
 * - a replication no migration holds, from a share to a Ferry file system no record holds: found,
 *   left while younger than the grace cut-off, then deleted with its replica; the audit ends clean.
 */
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { reconcile } from '../../functions/audit/reconciler.js';
import { getShareRepair } from '../../functions/audit/share-repair-record.js';
import type { ShareBackendConfig } from '../../functions/drivers/share/driver.js';
import { shareDriverFor } from '../../functions/drivers/share/registry.js';
import { clearFault, faultCalls, injectFault } from '../../functions/core/faults.js';
import { getShare } from '../../functions/shares/repo.js';
import { EFS_BACKENDS, useEfsStack, type EfsStack } from '../support/efs-stack.js';
import { untilReady, type FakeEfs } from '../support/fake-efs.js';
import { efsThrottle } from '../support/fake-efs-replication.js';
import { eventually } from '../support/poll.js';

const GIB = 1024 ** 3;
const region = 'eu-west-1';
const stack = useEfsStack();
let efs: EfsStack;
let fake: FakeEfs;
beforeAll(() => {
  ({ fake } = (efs = stack()));
});

/** A pass past every grace period (the test's records are all fresh). */
const pass = () => reconcile({ before: new Date(Date.now() + 60_000) });
const kinds = async () => (await runAudit()).findings.map((f) => f.kind).sort();

describe('the reconciler on aws-efs backends', () => {
  test('a share over its size has its writes withheld behind a recorded intent, kept through a throttled pass, given back once within its size', async () => {
    const { id } = await efs.manila.availableShare('efs-a', { name: 'full', size: 1 });
    expect((await efs.manila.action(id, { allow_access: { access_type: 'ip', access_to: '10.0.0.0/24', access_level: 'rw' } })).status).toBe(200);
    const name = `share-${(await getShare(id))!.instanceId}`;
    const fsId = fake.fileSystemNamed(name)!.FileSystemId!;
    expect(fake.replication.canWrite(region, fsId)).toBe(true);

    fake.setUsage(fsId, 1.5 * GIB);
    const audit = await runAudit();
    expect(audit.findings).toEqual([expect.objectContaining({ kind: 'share-quota-unenforced', resource: `share ${id}`, detail: expect.stringMatching(/meters 1\.50 GiB used of its 1 GiB: writes are still allowed/) })]);
    // EFS throttles every try of the policy: the pass leaves the intent recorded, nothing withheld yet.
    for (let n = 0; n < 3; n++) fake.failNext('PutFileSystemPolicy', efsThrottle());
    const throttled = await pass();
    expect(throttled.left).toEqual([expect.objectContaining({ kind: 'share-quota-unenforced', outcome: 'left', did: expect.stringMatching(/in progress .*ThrottlingException/) })]);
    expect(await getShareRepair(`quota-${name}`)).toMatchObject({ kind: 'quota', state: 'intent', target: { shareId: id, host: 'ferry@efs-a', name } });
    expect(fake.replication.canWrite(region, fsId)).toBe(true);

    const finished = await pass();
    expect(finished.repaired).toEqual([expect.objectContaining({ kind: 'share-quota-unenforced', did: expect.stringMatching(/^withheld writes from/) })]);
    expect(await getShareRepair(`quota-${name}`)).toMatchObject({ state: 'done', did: expect.stringMatching(/^withheld writes/) });
    expect(fake.replication.canWrite(region, fsId)).toBe(false);
    expect(fake.policyOf(fsId)!.Statement.map((s) => s.Sid)).toEqual(['ferry-ip-clients', 'ferry-quota-exceeded']);
    expect(finished.remaining).toEqual([]);
    expect(finished.checked).toMatchObject({ 'shares over their size': 1 });

    fake.setUsage(fsId, 0.5 * GIB);
    expect(await kinds()).toEqual(['share-quota-unenforced']);
    expect((await pass()).repaired).toEqual([expect.objectContaining({ did: expect.stringMatching(/^gave writes back to/) })]);
    expect(fake.replication.canWrite(region, fsId)).toBe(true);
    expect(fake.policyOf(fsId)!.Statement.map((s) => s.Sid)).toEqual(['ferry-ip-clients']);
    expect(await kinds()).toEqual([]);

    // A pass that dies after the block is made but before it is recorded done: the next pass closes the intent.
    fake.setUsage(fsId, 1.5 * GIB);
    const fault = injectFault({ kind: 'share', backend: 'ferry@efs-a', method: 'enforceQuota', mode: 'fail-after', times: 1 });
    expect((await pass()).left).toEqual([expect.objectContaining({ kind: 'share-quota-unenforced', outcome: 'failed' })]);
    clearFault(fault);
    expect(fake.replication.canWrite(region, fsId)).toBe(false);
    expect(await getShareRepair(`quota-${name}`)).toMatchObject({ state: 'intent' });
    expect((await pass()).repaired).toEqual([expect.objectContaining({ kind: 'share-quota-unenforced', resource: `share ${id}`, did: expect.stringMatching(/^withheld writes/) })]);
    expect(await getShareRepair(`quota-${name}`)).toMatchObject({ state: 'done' });
  });

  test('an access change that races the enforcement is kept: the rules as recorded after it are pushed again', async () => {
    const { id } = await efs.manila.availableShare('efs-a', { name: 'raced', size: 1 });
    const name = `share-${(await getShare(id))!.instanceId}`;
    const fsId = fake.fileSystemNamed(name)!.FileSystemId!;
    fake.setUsage(fsId, 2 * GIB);
    const fault = injectFault({ kind: 'share', backend: 'ferry@efs-a', method: 'enforceQuota', mode: 'hang', times: 1 });
    const running = pass();
    await eventually(async () => (faultCalls().some((c) => c.faultId === fault && c.hanging) ? true : undefined), 'the enforcement held');
    // The pass read the share with no rule; a rule is added while its push waits.
    expect((await efs.manila.action(id, { allow_access: { access_type: 'ip', access_to: '10.0.1.0/24', access_level: 'ro' } })).status).toBe(200);
    clearFault(fault);
    expect((await running).repaired).toEqual([expect.objectContaining({ kind: 'share-quota-unenforced', resource: `share ${id}` })]);
    expect(fake.policyOf(fsId)!.Statement.map((s) => s.Sid)).toEqual(['ferry-ip-clients', 'ferry-quota-exceeded']);
    expect(fake.groupNamed(name)!.IpPermissions!.flatMap((p) => (p.IpRanges ?? []).map((r) => r.CidrIp))).toEqual(['10.0.1.0/24']);
    expect(await kinds()).toEqual([]);
  });

  test('a replication no migration holds is found, left within the grace period, then deleted with its replica', async () => {
    const { id } = await efs.manila.availableShare('efs-a', { name: 'strayed' });
    const source = fake.fileSystemNamed(`share-${(await getShare(id))!.instanceId}`)!.FileSystemId!;
    // A replica on efs-b that no record holds, replicated to by hand.
    const replicaName = `share-${randomUUID()}`;
    const efsB = shareDriverFor(EFS_BACKENDS.find((b) => b.host === 'ferry@efs-b') as ShareBackendConfig);
    await untilReady(() => efsB.createShare({ name: replicaName, sizeGb: 1, proto: 'NFS', pool: 'pool0' }));
    const replica = fake.fileSystemNamed(replicaName)!.FileSystemId!;
    fake.replication.updateProtection(region, { FileSystemId: replica, ReplicationOverwriteProtection: 'DISABLED' });
    fake.replication.create(region, { SourceFileSystemId: source, Destinations: [{ FileSystemId: replica }] });

    const stray = (await runAudit()).findings.find((f) => f.kind === 'stray-share-replication');
    expect(stray).toMatchObject({ detail: expect.stringContaining(`to ferry@efs-b ${replicaName} (${replica}); no migration holds it`), ref: { host: 'ferry@efs-a', sourceId: source, replicaId: replica, replicaHost: 'ferry@efs-b', replicaName } });
    expect(await kinds()).toEqual(['orphan-backend-share', 'stray-share-replication']);

    const young = await reconcile({ before: new Date(Date.now() - 3_600_000) });
    expect(young.left).toContainEqual(expect.objectContaining({ kind: 'stray-share-replication', outcome: 'left', saw: expect.stringMatching(/not older than the grace cut-off/) }));
    expect(fake.replication.replications.size).toBe(1);

    await eventually(async () => {
      await pass();
      return fake.replication.replications.size === 0 && !fake.fileSystemNamed(replicaName) ? true : undefined;
    }, 'the stray replication and its replica deleted');
    expect(await getShareRepair(`replication-${source}-${replica}`)).toMatchObject({ state: 'done', did: `deleted the replication of ${stray!.ref!.name} and its replica ferry@efs-b ${replicaName}` });
    expect(fake.fileSystems.get(source)!.LifeCycleState).toBe('available');
    expect(await kinds()).toEqual([]);
  });
});
