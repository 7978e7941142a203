/**
 * Manila extend and shrink of a share on an aws-efs backend, through the API (functions/shares/resize.ts
 * calling the aws-efs driver's extendShare/shrinkShare), on the embedded stack with EFS and EC2
 * mocked (test/support/efs-stack.ts). EFS has no size: the share's size is the `ferry:quota-gb` tag
 * of its file system, counted against the pool, and a share over it has a Deny of ClientWrite in its
 * policy. Checked after each call: the share's status and size, the tag, the policy (writes withheld
 * or allowed), the project's gigabytes and the pool's allocation, the user messages; an extend the
 * pool cannot hold, a shrink below what EFS meters, an extend whose tag change lost its reply, and
 * one EFS throttles past the driver's tries (extending_error at the old size, the tag put back), and
 * one whose later step fails on a share EFS meters above its old size (the tag put back all the same).
 */
import { beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { reconcile } from '../../functions/audit/reconciler.js';
import { allocatedOnSharePool, getShare } from '../../functions/shares/repo.js';
import { useEfsStack, type EfsStack } from '../support/efs-stack.js';
import type { FakeEfs } from '../support/fake-efs.js';
import { efsError, efsThrottle } from '../support/fake-efs-replication.js';

const GIB = 1024 ** 3;
const REGION = 'eu-west-1';
const POOL = 'ferry@efs-a#pool0';
const PROJECT = 'efsrsz';
const member = { token: `demo:${PROJECT}` };
const stack = useEfsStack();
let efs: EfsStack;
let fake: FakeEfs;
beforeAll(async () => {
  ({ fake } = (efs = stack()));
  await efs.manila.typePinnedTo('efs-a');
});

const m = () => efs.manila;
/** A new available share of the project on efs-a with an rw ip rule, and the pool's allocation and project's gigabytes once it is made. */
async function memberShare(size: number): Promise<{ id: string; fsId: string; pool0: number; used0: number }> {
  const created = await m().api('POST', '/shares', { share: { share_proto: 'NFS', size, share_type: 'on-efs-a' } }, member);
  expect(created.status).toBe(202);
  const id = created.body.share.id;
  expect((await m().statusBecomes(id, ['available', 'error'])).status).toBe('available');
  expect((await m().action(id, { allow_access: { access_type: 'ip', access_to: '10.0.0.0/24', access_level: 'rw' } }, member)).status).toBe(200);
  const fsId = fake.fileSystemNamed(`share-${(await getShare(id))!.instanceId}`)!.FileSystemId!;
  return { id, fsId, pool0: await allocatedOnSharePool(POOL), used0: await gigabytesInUse() };
}

const quotaTag = (fsId: string) => fake.fileSystems.get(fsId)!.Tags!.find((t) => t.Key === 'ferry:quota-gb')?.Value;
const policySids = (fsId: string) => fake.policyOf(fsId)!.Statement.map((s) => s.Sid);
const gigabytesInUse = async () => (await m().api('GET', `/quota-sets/${PROJECT}/detail`, undefined, member)).body.quota_set.gigabytes.in_use as number;
const messagesOf = async (id: string) => (await m().api('GET', `/messages?resource_id=${id}`, undefined, { ...member, version: '2.37' })).body.messages as Record<string, string>[];

describe('extend and shrink of an aws-efs share through the API', () => {
  test('extend of a share over its size gives writes back at once; a shrink below what EFS meters is refused (009/018); a shrink within it moves the quota, the pool and the project', async () => {
    // Prepare: a 1 GiB share EFS meters at 1.5 GiB, its writes withheld by the reconciler.
    const { id, fsId, pool0, used0 } = await memberShare(1);
    expect(quotaTag(fsId)).toBe('1');
    fake.setUsage(fsId, 1.5 * GIB);
    expect((await reconcile({ before: new Date(Date.now() + 60_000) })).repaired).toEqual([expect.objectContaining({ kind: 'share-quota-unenforced', did: expect.stringMatching(/^withheld writes/) })]);
    expect(fake.replication.canWrite(REGION, fsId)).toBe(false);

    // Act: extend 1 -> 3.
    expect((await m().action(id, { extend: { new_size: 3 } }, member)).status).toBe(202);
    // Assess: the size, the tag, writes back (the Deny gone, the rule kept), the project and the pool charged.
    expect(await m().share(id)).toMatchObject({ status: 'available', size: 3 });
    expect(quotaTag(fsId)).toBe('3');
    expect(fake.replication.canWrite(REGION, fsId)).toBe(true);
    expect(policySids(fsId)).toEqual(['ferry-ip-clients']);
    expect(await gigabytesInUse()).toBe(used0 + 2);
    expect(await allocatedOnSharePool(POOL)).toBe(pool0 + 2);

    // Act: shrink 3 -> 2 while EFS meters 2.5 GiB.
    fake.setUsage(fsId, 2.5 * GIB);
    expect((await m().action(id, { shrink: { new_size: 2 } }, member)).status).toBe(202);
    // Assess: refused for possible data loss; nothing moved.
    expect(await m().share(id)).toMatchObject({ status: 'available', size: 3 });
    expect(quotaTag(fsId)).toBe('3');
    expect(await messagesOf(id)).toMatchObject([{ action_id: '009', detail_id: '018', resource_type: 'SHARE' }]);
    expect(await allocatedOnSharePool(POOL)).toBe(pool0 + 2);

    // Act: shrink 3 -> 2 once EFS meters 1.5 GiB.
    fake.setUsage(fsId, 1.5 * GIB);
    expect((await m().action(id, { shrink: { new_size: 2 } }, member)).status).toBe(202);
    expect(await m().share(id)).toMatchObject({ status: 'available', size: 2 });
    expect(quotaTag(fsId)).toBe('2');
    expect(fake.replication.canWrite(REGION, fsId)).toBe(true);
    expect(await gigabytesInUse()).toBe(used0 + 1);
    expect(await allocatedOnSharePool(POOL)).toBe(pool0 + 1);
    expect((await runAudit()).findings).toEqual([]);
  });

  test("an extend past the pool's free capacity: accepted, the share left at its size and its tag, message 008/002", async () => {
    const { id, fsId, pool0, used0 } = await memberShare(1);
    expect((await m().action(id, { extend: { new_size: 5000 } }, member)).status).toBe(202);
    expect(await m().share(id)).toMatchObject({ status: 'available', size: 1 });
    expect(quotaTag(fsId)).toBe('1');
    expect(await allocatedOnSharePool(POOL)).toBe(pool0);
    expect(await gigabytesInUse()).toBe(used0);
    expect(await messagesOf(id)).toMatchObject([{ action_id: '008', detail_id: '002' }]);
  });

  test('the raised tag\'s reply lost (EFS InternalServerError after the change): extending_error at the old size, the tag put back, the charge given back, message 008/015', async () => {
    const { id, fsId, pool0, used0 } = await memberShare(1);
    fake.failNext('TagResource', efsError('InternalServerError', 'We encountered an internal error. Please try again.', { $metadata: { httpStatusCode: 500 } }), { after: true });
    expect((await m().action(id, { extend: { new_size: 2 } }, member)).status).toBe(202);
    expect(await m().share(id)).toMatchObject({ status: 'extending_error', size: 1 });
    expect((await getShare(id))!.errorReason).toMatch(/InternalServerError.*The backend was put back to 1 GiB\.$/s);
    expect(quotaTag(fsId)).toBe('1');
    expect(fake.replication.canWrite(REGION, fsId)).toBe(true);
    expect(await gigabytesInUse()).toBe(used0);
    expect(await allocatedOnSharePool(POOL)).toBe(pool0);
    expect(await messagesOf(id)).toMatchObject([{ action_id: '008', detail_id: '015' }]);
    // Upstream's way out: an admin resets the status; the extend then goes through.
    expect((await m().action(id, { reset_status: { status: 'available' } })).status).toBe(202);
    expect((await m().action(id, { extend: { new_size: 2 } }, member)).status).toBe(202);
    expect(await m().share(id)).toMatchObject({ status: 'available', size: 2 });
    expect(quotaTag(fsId)).toBe('2');
  });

  test('an extend whose later step fails on a share EFS meters above its old size: the undo puts the quota tag back all the same (a compensation, not a user shrink), writes stay withheld, the audit is clean', async () => {
    // Prepare: a 1 GiB share EFS meters at 1.5 GiB, its writes withheld by the reconciler.
    const { id, fsId, pool0, used0 } = await memberShare(1);
    fake.setUsage(fsId, 1.5 * GIB);
    await reconcile({ before: new Date(Date.now() + 60_000) });
    expect(fake.replication.canWrite(REGION, fsId)).toBe(false);
    // Act: extend 1 -> 3; the tag is raised, then lifting the Deny (PutFileSystemPolicy) fails.
    fake.failNext('PutFileSystemPolicy', efsError('InternalServerError', 'We encountered an internal error. Please try again.', { $metadata: { httpStatusCode: 500 } }));
    expect((await m().action(id, { extend: { new_size: 3 } }, member)).status).toBe(202);
    // Assess: extending_error at the old size, the tag back at 1 (a shrink to 1 would refuse: 1.5 GiB metered), writes still withheld, nothing charged.
    expect(await m().share(id)).toMatchObject({ status: 'extending_error', size: 1 });
    expect((await getShare(id))!.errorReason).toMatch(/PutFileSystemPolicy.*InternalServerError.*The backend was put back to 1 GiB\.$/s);
    expect(quotaTag(fsId)).toBe('1');
    expect(fake.replication.canWrite(REGION, fsId)).toBe(false);
    expect(await gigabytesInUse()).toBe(used0);
    expect(await allocatedOnSharePool(POOL)).toBe(pool0);
    expect((await runAudit()).findings).toEqual([]);
  });

  test('EFS throttles the tag on every try: extending_error at the old size (BackendNotReady is the driver\'s answer), nothing charged', async () => {
    const { id, fsId, pool0, used0 } = await memberShare(1);
    for (let n = 0; n < 3; n++) fake.failNext('TagResource', efsThrottle());
    expect((await m().action(id, { extend: { new_size: 3 } }, member)).status).toBe(202);
    expect(await m().share(id)).toMatchObject({ status: 'extending_error', size: 1 });
    expect((await getShare(id))!.errorReason).toMatch(/TagResource was refused for now \(ThrottlingException\)/);
    expect(quotaTag(fsId)).toBe('1');
    expect(await gigabytesInUse()).toBe(used0);
    expect(await allocatedOnSharePool(POOL)).toBe(pool0);
  });
});
