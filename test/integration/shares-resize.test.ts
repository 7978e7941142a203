/**
 * Share extend and shrink through the API on the embedded local stack (functions/shares/resize.ts):
 * the happy path (the backend's recorded size, the quota usage and the pool allocation follow the
 * share), each refusal with upstream's status and body and nothing changed, an extend the pool
 * cannot hold (accepted, nothing changed, message 008/002), a shrink the driver
 * refuses for possible data loss (available, message 009/018), a driver failure of extend half-way
 * (extending_error, the charge given back, the backend put back to the old size, message
 * 008/015), and an extend whose API call died
 * after recording its intent, finished by the reconciler.
 */
import { readFile, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { clearFaults, faultCalls, injectFault } from '../../functions/core/faults.js';
import { GIB } from '../../functions/drivers/share/local-size.js';
import { allocatedOnSharePool, getShare } from '../../functions/shares/repo.js';
import { recoverPendingResizes } from '../../functions/shares/resize-recovery.js';
import { manilaClient } from '../support/manila.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
const m = manilaClient(() => stack.url);
const POOL = 'ferry@nfs-a#pool0';
const PROJECT = 'rsz';
const member = { token: `demo:${PROJECT}` };

beforeAll(async () => {
  stack = await useLocalStack();
  await m.typePinnedTo('nfs-a');
}, 60_000);
afterAll(async () => stack?.stop());
afterEach(async () => {
  clearFaults();
  await m.api('DELETE', `/quota-sets/${PROJECT}`);
});

/** A new available share of the project, with the pool's allocation and the project's gigabytes in use once it is made. */
async function memberShare(size: number): Promise<{ id: string; path: string; pool0: number; used0: number }> {
  const created = await m.api('POST', '/shares', { share: { share_proto: 'NFS', size, share_type: 'on-nfs-a' } }, member);
  expect(created.status).toBe(202);
  const id = created.body.share.id;
  expect((await m.statusBecomes(id, ['available', 'error'])).status).toBe('available');
  const els = await m.api('GET', `/shares/${id}/export_locations`);
  return { id, path: els.body.export_locations[0].path, pool0: await allocatedOnSharePool(POOL), used0: await gigabytesInUse() };
}

const recordedSize = async (path: string) => (JSON.parse(await readFile(`${path}.size.json`, 'utf8')) as { sizeGb: number }).sizeGb;
const gigabytesInUse = async () => (await m.api('GET', `/quota-sets/${PROJECT}/detail`, undefined, member)).body.quota_set.gigabytes.in_use as number;
const messagesOf = async (id: string) => ((await m.api('GET', `/messages?resource_id=${id}`, undefined, { ...member, version: '2.37' })).body.messages as Record<string, string>[]);

describe('extend and shrink', () => {
  test('extend, then a shrink refused for possible data loss, then a shrink: size, backend record, quota and pool follow', async () => {
    // Prepare
    const { id, path, pool0, used0 } = await memberShare(1);
    // Act: extend 1 -> 3
    expect((await m.action(id, { extend: { new_size: 3 } }, member)).status).toBe(202);
    // Assess
    expect(await m.share(id)).toMatchObject({ status: 'available', size: 3 });
    expect(await recordedSize(path)).toBe(3);
    expect(await gigabytesInUse()).toBe(used0 + 2);
    expect(await allocatedOnSharePool(POOL)).toBe(pool0 + 2);

    // 1.5 GiB in the share (sparse: its apparent size is what the driver meters, as EFS does).
    await writeFile(join(path, 'data'), '');
    await truncate(join(path, 'data'), Math.floor(1.5 * GIB));
    expect((await m.action(id, { shrink: { new_size: 1 } }, member)).status).toBe(202);
    expect(await m.share(id)).toMatchObject({ status: 'available', size: 3 });
    expect(await recordedSize(path)).toBe(3);
    const refused = await messagesOf(id);
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ action_id: '009', detail_id: '018', resource_type: 'SHARE' });
    expect(refused[0]!.user_message).toBe(
      'shrink: Share Driver refused to shrink the share. The size to be shrunk is smaller than the current used space. The share status has been set to available. Please select a size greater than the current used space.',
    );

    // The legacy action name at 2.6 (os-shrink) does the same as shrink.
    expect((await m.action(id, { 'os-shrink': { new_size: 2 } }, { ...member, version: '2.6' })).status).toBe(202);
    expect(await m.share(id)).toMatchObject({ status: 'available', size: 2 });
    expect(await recordedSize(path)).toBe(2);
    expect(await gigabytesInUse()).toBe(used0 + 1);
    expect(await allocatedOnSharePool(POOL)).toBe(pool0 + 1);
    expect((await runAudit()).findings).toEqual([]);

    expect((await m.api('DELETE', `/shares/${id}`, undefined, member)).status).toBe(202);
    await eventually(async () => ((await m.api('GET', `/shares/${id}`)).status === 404 ? true : undefined), 'share deleted');
    expect(await gigabytesInUse()).toBe(used0 - 1);
    expect(await allocatedOnSharePool(POOL)).toBe(pool0 - 1);
  });

  test("refusals: upstream's status and body, and nothing changes", async () => {
    const { id, path, used0 } = await memberShare(2);
    const before = await getShare(id);
    const bad = (message: string) => ({ badRequest: { code: 400, message } });
    const cases: [unknown, Parameters<typeof m.action>[2], number, unknown][] = [
      [{ extend: { new_size: 'x' } }, member, 400, bad('New share size must be specified as an integer.')],
      [{ extend: {} }, member, 400, bad('New share size must be specified as an integer.')],
      [{ shrink: { new_size: null } }, member, 400, bad('New share size must be specified as an integer.')],
      [{ extend: { new_size: 2 } }, member, 400, bad('Invalid input received: New size for extend must be greater than current size. (current: 2, extended: 2).')],
      [{ shrink: { new_size: 0 } }, member, 400, bad('Invalid input received: New size for shrink must be less than current size and greater than 0 (current: 2, new: 0)')],
      [{ shrink: { new_size: 3 } }, member, 400, bad('Invalid input received: New size for shrink must be less than current size and greater than 0 (current: 2, new: 3)')],
      [{ extend: { new_size: 3, force: 'maybe' } }, { ...member, version: '2.64' }, 400, bad('Invalid boolean force : maybe')],
      // force needs an admin (share:force_extend)...
      [{ extend: { new_size: 3, force: true } }, { ...member, version: '2.64' }, 403, { forbidden: { code: 403, message: 'Policy doesn\'t allow share:force_extend to be performed.' } }],
      // ...and before 2.64 extend takes no force (upstream drops it), and os-extend is the name up to 2.6.
      [{ extend: { new_size: 3 } }, { ...member, version: '2.6' }, 404, undefined],
    ];
    for (const [body, opts, status, expected] of cases) {
      const res = await m.action(id, body, opts);
      expect({ body, status: res.status }).toEqual({ body, status });
      if (expected !== undefined) expect(res.body).toEqual(expected);
    }
    // Quota: over the project's gigabytes is 403 (the controller's answer to ShareSizeExceedsAvailableQuota), over per_share_gigabytes 413.
    expect((await m.api('PUT', `/quota-sets/${PROJECT}`, { quota_set: { gigabytes: used0 + 1 } })).status).toBe(200);
    const overQuota = await m.action(id, { extend: { new_size: 4 } }, member);
    expect(overQuota.status).toBe(403);
    expect(overQuota.body).toEqual({ forbidden: { code: 403, message: 'Requested share exceeds allowed project/user or share type gigabytes quota.' } });
    expect((await m.api('PUT', `/quota-sets/${PROJECT}`, { quota_set: { gigabytes: -1, per_share_gigabytes: 3 } }, { version: '2.62' })).status).toBe(200);
    const overPerShare = await m.action(id, { extend: { new_size: 4 } }, member);
    expect(overPerShare.status).toBe(413);
    expect(overPerShare.body).toEqual({ overLimit: { code: 413, message: 'Requested share size 4 is larger than maximum allowed limit 3.' } });
    // Status: only available extends.
    expect((await m.action(id, { reset_status: { status: 'error' } })).status).toBe(202);
    const wrongStatus = await m.action(id, { extend: { new_size: 3 } }, member);
    expect(wrongStatus.body).toEqual(bad(`Invalid share: Share ${id} status must be 'available' to extend, but current status is: error.`));
    const wrongShrink = await m.action(id, { shrink: { new_size: 1 } }, member);
    expect(wrongShrink.body).toEqual(bad(`Invalid share: Share ${id} status must in (available, shrinking_possible_data_loss_error) to shrink, but current status is: error.`));
    expect((await m.action(id, { reset_status: { status: 'available' } })).status).toBe(202);
    // Nothing changed by any refusal: size, record, quota, backend.
    const after = await getShare(id);
    expect({ size: after!.size, quota: after!.quota, capacity: after!.capacity, resize: after!.resize ?? null }).toEqual({ size: before!.size, quota: before!.quota, capacity: before!.capacity, resize: null });
    expect(await gigabytesInUse()).toBe(used0);
    expect(await recordedSize(path)).toBe(2);
    expect(await messagesOf(id)).toEqual([]);
  });

  test("an extend past the pool's free capacity: accepted, the share left available at its size, message 008/002 (the scheduler's NoValidHost)", async () => {
    const { id, path, pool0, used0 } = await memberShare(1);
    expect((await m.action(id, { extend: { new_size: 5000 } }, member)).status).toBe(202);
    expect(await m.share(id)).toMatchObject({ status: 'available', size: 1 });
    expect(await recordedSize(path)).toBe(1);
    expect(await allocatedOnSharePool(POOL)).toBe(pool0);
    expect(await gigabytesInUse()).toBe(used0);
    expect(await messagesOf(id)).toMatchObject([{ action_id: '008', detail_id: '002' }]);
  });

  test('a driver failure of extend: extending_error at the old size, the charge given back, message 008/015', async () => {
    const { id, path, pool0, used0 } = await memberShare(1);
    // The driver fails after it recorded the new size (a half-done extend): Ferry puts the backend back.
    injectFault({ kind: 'share', backend: 'ferry@nfs-a', method: 'extendShare', mode: 'fail-after', times: 1, message: 'injected: the backend failed' });
    expect((await m.action(id, { extend: { new_size: 5 } }, member)).status).toBe(202);
    expect(await m.share(id)).toMatchObject({ status: 'extending_error', size: 1 });
    expect(await recordedSize(path)).toBe(1);
    expect((await getShare(id))!.errorReason).toBe('injected: the backend failed The backend was put back to 1 GiB.');
    expect(await gigabytesInUse()).toBe(used0);
    expect(await allocatedOnSharePool(POOL)).toBe(pool0);
    expect(await messagesOf(id)).toMatchObject([{ action_id: '008', detail_id: '015', user_message: expect.stringMatching(/^extend: Share Driver failed to extend share/) }]);
    // Upstream's way out: an admin resets the status; then it extends.
    expect((await m.action(id, { reset_status: { status: 'available' } })).status).toBe(202);
    expect((await m.action(id, { extend: { new_size: 2, force: 'True' } }, { version: '2.64' })).status).toBe(202);
    expect(await m.share(id)).toMatchObject({ status: 'available', size: 2 });
    expect((await runAudit()).findings).toEqual([]);
  });

  test('an extend whose call died after recording its intent is finished by the reconciler, once', async () => {
    const { id, path, used0 } = await memberShare(1);
    // The API call hangs in the driver: as far as the record shows, it died there.
    const hang = injectFault({ kind: 'share', backend: 'ferry@nfs-a', method: 'extendShare', mode: 'hang', times: 1 });
    const call = m.action(id, { extend: { new_size: 4 } }, member);
    await eventually(async () => (faultCalls().some((c) => c.faultId === hang && c.hanging) ? true : undefined), 'the extend to reach the driver');
    expect(await m.share(id)).toMatchObject({ status: 'extending', size: 1 });
    // A recovery pass over what is older than now (the live call's resize is younger than the grace otherwise).
    const recovered = await recoverPendingResizes({ before: new Date(Date.now() + 1000) });
    expect(recovered).toMatchObject([{ shareId: id, action: 'finished' }]);
    expect(await m.share(id)).toMatchObject({ status: 'available', size: 4 });
    // The first call wakes: its driver call is the same size (no change) and its settlement finds the resize settled.
    clearFaults();
    expect((await call).status).toBe(202);
    expect(await m.share(id)).toMatchObject({ status: 'available', size: 4 });
    expect(await recordedSize(path)).toBe(4);
    expect(await gigabytesInUse()).toBe(used0 + 3);
    expect(await messagesOf(id)).toEqual([]);
    expect((await runAudit()).findings).toEqual([]);
  });
});
