/**
 * On the embedded local stack: Manila's quota-sets (upstream's bodies and 4xx, a create over quota
 * refused with 413 and nothing written, a delete giving the quota back), and the user messages the
 * real CLIs read: a share migration that ends in migration_error leaves a message whose reason
 * `manila message-list` shows, and a volume no backend could place one `cinder message-list` shows.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { clearFaultCalls, clearFaults, injectFault } from '../../functions/core/faults.js';
import { getShare } from '../../functions/shares/repo.js';
import { cinderCli, manilaCli, parseListTable } from '../support/cli.js';
import { manilaClient, migrationStartBody } from '../support/manila.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
const m = manilaClient(() => stack.url);

beforeAll(async () => {
  // Upstream's defaults (10 volumes, 1000 GB, 50 shares), not the test tiers' unlimited ones (test/support/setup.ts). quota-defaults-cleared
  delete process.env.FERRY_QUOTA_DEFAULTS;
  stack = await useLocalStack();
}, 60_000);
afterAll(async () => {
  clearFaults();
  clearFaultCalls();
  await stack?.stop();
});

describe('manila quota-sets', () => {
  test("defaults, update, detail with usage; over quota: 413 with Manila's message, nothing written; delete gives it back", async () => {
    const demo = { token: 'demo:qshare' };
    const defaults = await m.api('GET', '/quota-sets/qshare/defaults', undefined, demo);
    expect(defaults.body.quota_set).toEqual({
      id: 'qshare', shares: 50, gigabytes: 1000, snapshots: 50, snapshot_gigabytes: 1000, share_networks: 10,
      share_groups: 50, share_group_snapshots: 50, share_replicas: 100, replica_gigabytes: 1000, per_share_gigabytes: -1,
    });
    // A member may not change its quotas; bad input changes nothing.
    expect((await m.api('PUT', '/quota-sets/qshare', { quota_set: { shares: 1 } }, demo)).status).toBe(403);
    expect((await m.api('PUT', '/quota-sets/qshare', { quota_set: { bogus: 1 } })).body).toEqual({ badRequest: { code: 400, message: 'Must supply at least one quota field to update.' } });
    expect((await m.api('PUT', '/quota-sets/qshare', { quota_set: { shares: 1, bogus: 1 } })).body).toEqual({ badRequest: { code: 400, message: 'Bad key(s) bogus in quota_set.' } });
    expect((await m.api('PUT', '/quota-sets/qshare', { quota_set: { shares: 'x' } })).body).toEqual({ badRequest: { code: 400, message: "Quota 'x' for shares should be integer." } });
    expect((await m.api('GET', '/quota-sets/qshare', undefined, demo)).body.quota_set.shares).toBe(50);
    expect((await m.api('GET', '/quota-sets/other', undefined, demo)).status).toBe(403);

    const up = await m.api('PUT', '/quota-sets/qshare', { quota_set: { shares: 1 } });
    expect(up.status).toBe(200);
    expect(up.body.quota_set).toMatchObject({ shares: 1, gigabytes: 1000 });
    await m.typePinnedTo('nfs-a');
    const create = () => m.api('POST', '/shares', { share: { share_proto: 'NFS', size: 1, share_type: 'on-nfs-a' } }, demo);
    const first = await create();
    expect(first.status).toBe(202);
    await m.statusBecomes(first.body.share.id, ['available']);
    const second = await create();
    expect(second.status).toBe(413);
    expect(second.body).toEqual({ overLimit: { code: 413, message: 'Maximum number of shares allowed (1) either per project/user or share type quota is exceeded.' } });
    const listed = await m.api('GET', '/shares', undefined, demo);
    expect(listed.body.shares).toHaveLength(1);
    const detail = await m.api('GET', '/quota-sets/qshare/detail', undefined, demo);
    expect(detail.body.quota_set).toMatchObject({ id: 'qshare', shares: { limit: 1, in_use: 1, reserved: 0 }, gigabytes: { limit: 1000, in_use: 1, reserved: 0 } });

    expect((await m.api('DELETE', `/shares/${first.body.share.id}`, undefined, demo)).status).toBe(202);
    await eventually(async () => ((await getShare(first.body.share.id)) ? undefined : true), 'share deleted', 60_000);
    expect((await m.api('GET', '/quota-sets/qshare/detail', undefined, demo)).body.quota_set.shares).toEqual({ limit: 1, in_use: 0, reserved: 0 });
    expect((await m.api('DELETE', '/quota-sets/qshare')).status).toBe(202);
    expect((await m.api('GET', '/quota-sets/qshare', undefined, demo)).body.quota_set.shares).toBe(50);

    // The real CLI: quota-update and quota-show (it prints Property/Value rows).
    const endpoint = `${stack.url}/share/v2`;
    const updated = await manilaCli(endpoint, 'admin:admin', ['quota-update', 'qshare', '--shares', '7', '--gigabytes', '70']);
    expect(updated.stderr).not.toMatch(/ERROR/);
    expect(updated.code).toBe(0);
    const shown = await manilaCli(endpoint, 'demo:qshare', ['quota-show', '--tenant', 'qshare']);
    expect(shown.code).toBe(0);
    const rows = parseListTable(shown.stdout);
    expect(rows.find((r) => r.Property === 'shares')).toMatchObject({ Value: '7' });
    expect(rows.find((r) => r.Property === 'gigabytes')).toMatchObject({ Value: '70' });
  }, 120_000);
});

describe('user messages through the real CLIs', () => {
  test('a share migration that ends in migration_error: manila message-list shows why', async () => {
    const { id } = await m.availableShare('nfs-a');
    const newType = await m.typePinnedTo('nfs-b');
    // The source driver refuses migration_start on every try; writable=True rules out the host-assisted fallback.
    injectFault({ kind: 'share', backend: 'ferry@nfs-a', method: 'migrationStart', mode: 'fail', times: 4 });
    expect((await m.action(id, migrationStartBody('ferry@nfs-b#pool0', { writable: true }, { new_share_type_id: newType }))).status).toBe(202);
    await m.taskStateBecomes(id, ['migration_error']);
    const reason = (await getShare(id))!.errorReason!;

    const cli = await manilaCli(`${stack.url}/share/v2`, 'admin:admin', ['message-list', '--resource-id', id]);
    expect(cli.stderr).not.toMatch(/ERROR/);
    expect(cli.code).toBe(0);
    const rows = parseListTable(cli.stdout);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ 'Resource Type': 'SHARE', 'Resource ID': id, 'Action ID': '901', 'Detail ID': '901' });
    expect(rows[0]!['User Message']).toContain('migrate: Share migration failed.');
    const shown = await manilaCli(`${stack.url}/share/v2`, 'admin:admin', ['message-show', rows[0]!.ID!]);
    expect(shown.stdout.replace(/\s+/g, ' ')).toContain(reason.slice(0, 40).replace(/\s+/g, ' '));
    // The share's own project sees it too, another does not.
    expect((await m.api('GET', '/messages', undefined, { token: 'x:elsewhere', version: '2.37' })).body.messages).toEqual([]);
    expect((await m.api('GET', '/messages', undefined, { version: '2.36' })).status).toBe(404);
  }, 180_000);

  test('a volume no backend can hold: cinder message-list shows the scheduler message', async () => {
    const endpoint = `${stack.url}/volume/v3`;
    // Past the default gigabytes quota (1000) first: the quota would refuse it before any scheduler could.
    const refused = await cinderCli(endpoint, 'demo', 'cmsg', ['create', '--name', 'toolarge', '5000']);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('Requested volume or snapshot exceeds allowed gigabytes quota. Requested 5000G, quota is 1000G and 0G has been consumed. (HTTP 413)');
    const raised = await cinderCli(endpoint, 'admin', 'admin', ['quota-update', '--gigabytes', '100000', 'cmsg']);
    expect(raised.code).toBe(0);
    expect(parseListTable(raised.stdout).find((r) => r.Property === 'gigabytes')).toMatchObject({ Value: '100000' });
    const usage = await cinderCli(endpoint, 'demo', 'cmsg', ['quota-usage', 'cmsg']);
    expect(parseListTable(usage.stdout).find((r) => r.Type === 'volumes')).toMatchObject({ In_use: '0', Limit: '10' });
    const created = await cinderCli(endpoint, 'demo', 'cmsg', ['create', '--name', 'toolarge', '5000']);
    expect(created.code).toBe(0);
    await eventually(async () => {
      const shown = await cinderCli(endpoint, 'demo', 'cmsg', ['show', 'toolarge']);
      return /\|\s*status\s*\|\s*error\s*\|/.test(shown.stdout) ? true : undefined;
    }, 'volume in error', 60_000);
    const list = await cinderCli(endpoint, 'demo', 'cmsg', ['--os-volume-api-version', '3.3', 'message-list']);
    expect(list.stderr).not.toMatch(/ERROR/);
    expect(list.code).toBe(0);
    const rows = parseListTable(list.stdout);
    expect(rows.some((r) => r['Event ID'] === 'VOLUME_VOLUME_001_003' && r['User Message'] === 'schedule allocate volume:Could not find any available weighted backend.')).toBe(true);
    const del = await cinderCli(endpoint, 'demo', 'cmsg', ['delete', 'toolarge']);
    expect(del.code).toBe(0);
  }, 120_000);
});
