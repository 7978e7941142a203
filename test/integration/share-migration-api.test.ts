/**
 * The migration actions of `POST /shares/{id}/action` over real HTTP on the embedded local stack,
 * against reference §1.1-§1.6: every reachable row of the migration_start validation table (§1.3)
 * in its order with its status code and message, the complete / cancel / get_progress /
 * reset_task_state validations (§1.4), the transport rules (§1.1: experimental header, version
 * ranges, one-key bodies, response headers, paths with and without the project id), the admin
 * policy checked before the share is looked up, the get_progress shapes (§1.5), and that every
 * refusal changes nothing on the share record. Then 100 concurrent migration_start requests on one
 * share: one is accepted, one execution runs, and the migration completes. Every test ends with a
 * clean audit and no share left busy.
 *
 * The stack, the helpers, the refusal tables and the rows of §1.3 Ferry cannot reach are in
 * test/support/share-migration-api.ts.
 */
import { beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { clearFault, faultCalls, injectFault } from '../../functions/core/faults.js';
import { getShare } from '../../functions/shares/repo.js';
import { eventually } from '../support/poll.js';
import { A, ACTION_BODIES, ACTION_REFUSAL_ROWS, ACTIONS, B, BARE_404, cancelRefusals, completeRefusals, executionsFor, NO_SUCH, PROGRESS_0, PROGRESS_100, RESETTABLE, start, startRefusalRows, useShareMigrationApiStack, type RefusalRow } from '../support/share-migration-api.js';

const { m, shares, refused, resetTaskState, makeType, raw } = useShareMigrationApiStack();
/** The share every refusal is tried on (an available share on nfs-a); refusals leave it as it is. */
let base: string;
beforeAll(() => {
  base = shares.base;
});

/** One test per row of a refusal table, each refusal expected as `refused` does. */
function refusalTests(rows: RefusalRow[]): void {
  for (const row of rows) test(row.title, async () => {
    for (const [id, body, status, message, opts] of await row.refusals(base, { m, makeType })) await refused(id, body, status, message, opts);
  });
}

describe('transport (§1.1)', () => {
  test('no experimental header: every migration action is a bare 404, the share unchanged', async () => {
    const bodies = [start(B), { migration_complete: null }, { migration_cancel: null }, { migration_get_progress: null }, { reset_task_state: { task_state: null } }];
    for (const body of bodies) {
      const res = await refused(base, body, 404, 'The resource could not be found.', { experimental: false });
      expect(res.body).toEqual(BARE_404);
    }
    // A value strutils.bool_from_string rejects is no experimental request either; any accepted one is.
    expect((await raw(`/shares/${base}/action`, { migration_get_progress: null }, { 'X-OpenStack-Manila-API-Version': '2.72', 'X-OpenStack-Manila-API-Experimental': 'false' })).body).toEqual(BARE_404);
    for (const v of ['True', 'yes', '1', 'on']) {
      const res = await raw(`/shares/${base}/action`, { migration_get_progress: null }, { 'X-OpenStack-Manila-API-Version': '2.72', 'X-OpenStack-Manila-API-Experimental': v });
      expect(res.status).toBe(400); // reached the handler: task_state null
    }
  });

  test('a non-admin without the experimental header also gets the bare 404 (version matching comes before policy)', async () => {
    const res = await m.action(NO_SUCH, { migration_cancel: null }, { token: 'demo:demo', experimental: false });
    expect(res).toMatchObject({ status: 404, body: BARE_404 });
  });

  test('migration_start needs 2.29: 2.28 and 2.0 are a bare 404, 2.29 reaches the handler', async () => {
    for (const version of ['2.28', '2.22', '2.0']) expect((await refused(base, start(B), 404, 'The resource could not be found.', { version })).body).toEqual(BARE_404);
    await refused(base, { migration_start: {} }, 400, 'Request is missing body.', { version: '2.29' });
  });

  test('complete / cancel / get_progress / reset_task_state from 2.22 (2.21 is a bare 404)', async () => {
    const noMigration = `Invalid share: There is no migration being performed for share ${base} at this moment.`;
    for (const action of ['migration_complete', 'migration_cancel', 'migration_get_progress']) {
      expect((await refused(base, { [action]: null }, 404, 'The resource could not be found.', { version: '2.21' })).body).toEqual(BARE_404);
      await refused(base, { [action]: null }, 400, noMigration, { version: '2.22' });
    }
    expect((await refused(base, { reset_task_state: { task_state: null } }, 404, 'The resource could not be found.', { version: '2.21' })).body).toEqual(BARE_404);
    expect((await m.action(base, { reset_task_state: { task_state: null } }, { version: '2.22' })).status).toBe(202);
  });

  test('a body with two keys -> 400 Malformed request body; an unknown key -> no such action', async () => {
    await refused(base, { migration_complete: null, migration_cancel: null }, 400, 'Malformed request body');
    await refused(base, {}, 400, 'Malformed request body');
    await refused(base, { 'os-reset_task_state': { task_state: null } }, 400, 'There is no such action: os-reset_task_state');
    await refused(base, { 'os-migration_start': {} }, 400, 'There is no such action: os-migration_start');
  });

  test('the response echoes X-OpenStack-Manila-API-Experimental: True and the version, on success and on error', async () => {
    const ok = await m.action(base, { reset_task_state: { task_state: null } }, { version: '2.30' });
    expect(ok.status).toBe(202);
    const err = await m.action(base, { migration_complete: null }, { version: '2.30' });
    expect(err.status).toBe(400);
    for (const res of [ok, err]) {
      expect(res.headers.get('x-openstack-manila-api-experimental')).toBe('True');
      expect(res.headers.get('x-openstack-manila-api-version')).toBe('2.30');
      expect(res.headers.get('vary')).toContain('X-OpenStack-Manila-API-Version');
    }
    const plain = await m.action(base, { migration_complete: null }, { experimental: false });
    expect(plain.headers.get('x-openstack-manila-api-experimental')).toBeNull();
  });

  test('paths with and without the project id', async () => {
    for (const path of [`/shares/${base}/action`, `/admin/shares/${base}/action`]) {
      const res = await m.api('POST', path, { migration_get_progress: null }, { version: '2.59' });
      expect(res.status).toBe(400);
      expect(res.body.badRequest.message).toBe(`Invalid share: There is no migration being performed for share ${base} at this moment.`);
      expect((await m.api('POST', path, { reset_task_state: { task_state: null } })).status).toBe(202);
    }
    const missing = await m.api('POST', `/admin/shares/${NO_SUCH}/action`, { migration_complete: null });
    expect(missing).toMatchObject({ status: 404, body: { itemNotFound: { message: `Share ${NO_SUCH} not found.` } } });
  });
});

// ---- policy ------------------------------------------------------------------------------------

describe('policy (§1.1): admin only, checked before the share is looked up', () => {
  test('demo:demo gets 403 for every migration action, on an existing share and on one that does not exist', async () => {
    for (const action of ACTIONS) {
      for (const id of [base, NO_SUCH]) {
        const res = await refused(id, ACTION_BODIES[action], 403, /./, { token: 'demo:demo' });
        expect(res.body.forbidden.code).toBe(403);
      }
    }
    // Invalid bodies too: policy comes before any validation.
    await refused(NO_SUCH, { migration_start: {} }, 403, /./, { token: 'demo:demo' });
    await refused(NO_SUCH, { reset_task_state: {} }, 403, /./, { token: 'demo:demo' });
  });

  test("a demo user's own share: still 403 (the policy is admin_api, not admin_or_owner)", async () => {
    const created = await m.api('POST', '/shares', { share: { share_proto: 'NFS', size: 1, name: 'own', share_type: 'default' } }, { token: 'demo:demo' });
    expect(created.status).toBe(202);
    const id = created.body.share.id;
    await m.statusBecomes(id, ['available']);
    for (const body of [start(B), { migration_get_progress: null }, { reset_task_state: { task_state: null } }]) await refused(id, body, 403, /./, { token: 'demo:demo' });
  });
});

// ---- §1.3 migration_start --------------------------------------------------------------------

describe('migration_start validation (§1.3), in order', () => {
  for (const row of startRefusalRows()) {
    test(row.title, async () => {
      for (const [id, body, status, message] of await row.refusals(base, { m, makeType })) await refused(id, body, status, message);
    });
  }

  test('row 12: share instance not available -> 400 status must be available (here: creating)', async () => {
    const fault = injectFault({ kind: 'share', method: 'createShare', mode: 'hang' });
    try {
      const created = await m.api('POST', '/shares', { share: { share_proto: 'NFS', size: 1, name: 'creating', share_type: 'on-nfs-a' } });
      expect(created.status).toBe(202);
      const id = created.body.share.id;
      await eventually(async () => (faultCalls().some((c) => c.method === 'createShare' && c.hanging) ? true : undefined), 'createShare held');
      const s = (await getShare(id))!;
      expect(s.status).toBe('creating');
      await refused(id, start(B), 400, `Invalid share: Share instance ${s.instanceId} status must be available, but current status is: creating.`);
      // Row 12 comes after row 9.
      await refused(id, start(B, {}, { force_host_assisted_migration: true, writable: true }), 400, /^Invalid input received: Invalid parameter combination/);
      clearFault(fault);
      await m.statusBecomes(id, ['available']);
    } finally {
      clearFault(fault);
    }
  });

  test('row 13: access rules status error -> 400', async () => {
    const { id } = await m.availableShare('nfs-a', { name: 'rules-error' });
    injectFault({ kind: 'share', method: 'updateAccess', mode: 'fail', times: 1 });
    const rule = await m.action(id, { allow_access: { access_type: 'ip', access_to: '10.9.0.0/16', access_level: 'rw' } });
    expect(rule.status).toBe(200);
    expect(rule.body.access.state).toBe('error');
    const s = (await getShare(id))!;
    await refused(id, start(B), 400, `Invalid share: Share instance ${s.instanceId} access rules status must not be in error when attempting to start a migration.`);
    expect((await m.action(id, { deny_access: { access_id: rule.body.access.id } })).status).toBe(202);
  });

  test('row 14: busy task_state -> 400 ShareBusyException (400, not 409), for every busy state', async () => {
    const busy = ['migration_starting', 'migration_in_progress', 'migration_completing', 'migration_driver_in_progress', 'migration_driver_phase1_done', 'data_copying_starting', 'data_copying_in_progress', 'data_copying_completing', 'data_copying_completed'];
    for (const state of busy) {
      await resetTaskState(base, state);
      await refused(base, start(B), 400, `Share is busy with an active task: Share ${base} is busy as part of an active task: ${state}.`);
    }
    // Not busy: the terminal states and the copy's transient ones do not block a start (checked up to row 16).
    for (const state of ['migration_success', 'migration_error', 'migration_cancelled', 'data_copying_cancelled', 'data_copying_error']) {
      await resetTaskState(base, state);
      await refused(base, start('ferry@nowhere#pool0'), 404, 'ServiceNotFound: Service ferry@nowhere could not be found.');
    }
    await resetTaskState(base, null);
  });

  test('row 16: no manila-share service for host@backend -> 404 ServiceNotFound', async () => {
    await refused(base, start('ferry@nfs-z#pool0'), 404, 'ServiceNotFound: Service ferry@nfs-z could not be found.');
    await refused(base, start('other@nfs-b#pool0'), 404, 'ServiceNotFound: Service other@nfs-b could not be found.');
    // Row 16 after row 14.
    await resetTaskState(base, 'migration_in_progress');
    await refused(base, start('ferry@nfs-z#pool0'), 400, /^Share is busy with an active task/);
    await resetTaskState(base, null);
  });

  test('row 20: destination equals the source -> 200, task_state migration_success and nothing else', async () => {
    const { id } = await m.availableShare('nfs-a', { name: 'noop' });
    const before = (await getShare(id))!;
    const typeA = await m.typePinnedTo('nfs-a');
    const res = await m.action(id, start(A));
    expect(res.status).toBe(200);
    expect(res.body).toBeUndefined();
    const after = (await getShare(id))!;
    expect(after).toEqual({ ...before, taskState: 'migration_success', version: before.version + 1, updatedAt: after.updatedAt });
    // The share's own type named as the new one is the same destination; migration_success is not busy.
    const again = await m.action(id, start(A, { new_share_type_id: typeA }));
    expect(again.status).toBe(200);
    const after2 = (await getShare(id))!;
    expect(after2).toEqual({ ...after, version: after2.version, updatedAt: after2.updatedAt });
    expect(await executionsFor('share-migration-start', id)).toEqual([]);
    await resetTaskState(id, null);
  });

  test('row 23: accepted -> 202, share migrating with a phase-1 task_state, one execution; the migration then cancels cleanly', async () => {
    const { id } = await m.availableShare('nfs-a', { name: 'row23' });
    const before = (await getShare(id))!;
    // Hold the driver's first poll so phase 1 cannot race past what is checked here.
    const hold = injectFault({ kind: 'share', method: 'migrationContinue', mode: 'hang' });
    const typeB = await m.typePinnedTo('nfs-b');
    const res = await m.action(id, start(B, { new_share_type_id: typeB }));
    expect(res.status).toBe(202);
    expect(res.body).toBeUndefined();
    const s = (await getShare(id))!;
    expect(s.status).toBe('migrating');
    expect(['migration_starting', 'migration_in_progress', 'migration_driver_starting', 'migration_driver_in_progress']).toContain(s.taskState);
    expect(s.migration).toMatchObject({ destinationHost: B, newShareTypeId: typeB, newShareNetworkId: null, writable: false, forceHostAssisted: false, cancelRequested: false });
    expect(s).toMatchObject({ host: before.host, instanceId: before.instanceId, shareTypeId: before.shareTypeId });
    expect((await m.share(id)).status).toBe('migrating');
    await m.taskStateBecomes(id, ['migration_driver_in_progress']);
    // The machine is now held in its first poll and writes nothing more until it is released.
    await eventually(async () => (faultCalls().some((c) => c.method === 'migrationContinue' && c.hanging) ? true : undefined), 'migrationContinue held');
    expect(await executionsFor('share-migration-start', id)).toEqual([`migrate-${s.migration!.id}`]);
    // While it runs: get_progress asks the driver; a second start is refused (status first: row 12).
    const p = await m.action(id, { migration_get_progress: null });
    expect(p).toMatchObject({ status: 200, body: { task_state: 'migration_driver_in_progress' } });
    expect(typeof p.body.total_progress).toBe('number');
    await refused(id, start(B, { new_share_type_id: typeB }), 400, `Invalid share: Share instance ${s.instanceId} status must be available, but current status is: migrating.`);
    await refused(id, { migration_complete: null }, 400, `Invalid share: First migration phase of share ${id} not completed yet.`);

    expect((await m.action(id, { migration_cancel: null })).status).toBe(202);
    // A second cancel while the first is under way: accepted, nothing new.
    expect((await m.action(id, { migration_cancel: null })).status).toBe(202);
    clearFault(hold);
    const done = await m.taskStateBecomes(id, ['migration_cancelled']);
    expect(done).toMatchObject({ status: 'available', host: A });
    const after = (await getShare(id))!;
    expect(after).toMatchObject({ migration: null, host: before.host, instanceId: before.instanceId, shareTypeId: before.shareTypeId, capacity: before.capacity });
  }, 180_000);
});

// ---- §1.4 complete / cancel / get_progress / reset_task_state ----------------------------------

describe('migration_complete (§1.4)', () => {
  refusalTests(ACTION_REFUSAL_ROWS.complete);

  test('each _migration_validate_error_message, by task_state', async () => {
    for (const [state, msg] of completeRefusals(base)) {
      await resetTaskState(base, state);
      await refused(base, { migration_complete: null }, 400, `Invalid share: ${msg}`);
      // The body's value is ignored.
      await refused(base, { migration_complete: { anything: 1 } }, 400, `Invalid share: ${msg}`);
    }
    await resetTaskState(base, null);
  });

  test('a completable task_state with no migrating instances (set by reset_task_state) -> 400 (upstream: 500 ShareMigrationFailed)', async () => {
    const s = (await getShare(base))!;
    for (const state of ['migration_driver_phase1_done', 'data_copying_completed']) {
      await resetTaskState(base, state);
      await refused(base, { migration_complete: null }, 400, `Invalid share: Share instances ${s.instanceId} and None in inconsistent states, cannot continue share migration for share ${base}.`);
    }
    await resetTaskState(base, null);
  });
});

describe('migration_cancel (§1.4)', () => {
  refusalTests(ACTION_REFUSAL_ROWS.cancel);

  test('outside the cancellable states: the validate message, else cannot be cancelled at this moment', async () => {
    for (const [state, msg] of cancelRefusals(base)) {
      await resetTaskState(base, state);
      await refused(base, { migration_cancel: null }, 400, `Invalid share: ${msg}`);
    }
    await resetTaskState(base, null);
  });
});

describe('migration_get_progress (§1.4, §1.5)', () => {
  refusalTests(ACTION_REFUSAL_ROWS.progress);

  test('the state table: 100 for the done/error states, 0 for the starting ones; details only from 2.59', async () => {
    for (const [states, progress] of [[PROGRESS_100, 100], [PROGRESS_0, 0]] as const) {
      for (const state of states) {
        await resetTaskState(base, state);
        const before = await getShare(base);
        const old = await m.action(base, { migration_get_progress: null }, { version: '2.58' });
        expect(old).toMatchObject({ status: 200 });
        expect(old.body).toEqual({ total_progress: progress, task_state: state });
        const v22 = await m.action(base, { migration_get_progress: null }, { version: '2.22' });
        expect(v22.body).toEqual({ total_progress: progress, task_state: state });
        const now = await m.action(base, { migration_get_progress: null }, { version: '2.59' });
        expect(now.body).toEqual({ total_progress: progress, task_state: state, details: {} });
        expect(await getShare(base)).toEqual(before);
      }
    }
    await resetTaskState(base, null);
  });

  test('migration_driver_in_progress with no migration to ask the driver about -> 400 cannot be obtained (upstream: 500)', async () => {
    await resetTaskState(base, 'migration_driver_in_progress');
    await refused(base, { migration_get_progress: null }, 400, `Invalid share: Migration progress of share ${base} cannot be obtained at this moment.`);
    await resetTaskState(base, null);
  });
});

describe('reset_task_state (§1.4)', () => {
  refusalTests(ACTION_REFUSAL_ROWS.reset);

  test('every valid state and null -> 202; only task_state changes (no side effects)', async () => {
    for (const state of [...RESETTABLE, null]) {
      const before = (await getShare(base))!;
      const res = await m.action(base, { reset_task_state: { task_state: state } });
      expect(res.status).toBe(202);
      expect(res.body).toBeUndefined();
      const after = (await getShare(base))!;
      expect(after).toEqual({ ...before, taskState: state, version: after.version, updatedAt: after.updatedAt });
      expect(after.version).toBe(before.version + 1);
      expect((await m.share(base)).task_state).toBe(state);
    }
    // The same state again writes nothing.
    const before = await getShare(base);
    expect((await m.action(base, { reset_task_state: { task_state: null } })).status).toBe(202);
    expect(await getShare(base)).toEqual(before);
  });
});

// ---- concurrency -------------------------------------------------------------------------------

describe('concurrency', () => {
  test('100 concurrent migration_start on one share: exactly one 202, 99 × 400, one execution; the one migration completes', async () => {
    const { id } = await m.availableShare('nfs-a', { name: 'race' });
    const typeB = await m.typePinnedTo('nfs-b');
    const s0 = (await getShare(id))!;
    const results = await Promise.all(Array.from({ length: 100 }, () => m.action(id, start(B, { new_share_type_id: typeB }))));
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((c) => c === 202)).toHaveLength(1);
    expect(statuses.filter((c) => c === 400)).toHaveLength(99);
    for (const r of results.filter((x) => x.status === 400)) {
      expect(r.body.badRequest.message).toMatch(
        new RegExp(`^(Invalid share: Share instance ${s0.instanceId} status must be available, but current status is: migrating\\.|Share is busy with an active task: .*)$`),
      );
    }
    const accepted = (await getShare(id))!.migration!;
    expect(await executionsFor('share-migration-start', id)).toEqual([`migrate-${accepted.id}`]);

    await m.taskStateBecomes(id, ['migration_driver_phase1_done'], 150_000);
    expect((await getShare(id))!.migration!.id).toBe(accepted.id);
    expect((await m.action(id, { migration_complete: null })).status).toBe(202);
    const done = await m.taskStateBecomes(id, ['migration_success'], 150_000);
    expect(done).toMatchObject({ status: 'available', host: B, share_type: typeB });
    expect((await getShare(id))!.migration).toBeNull();
    expect(await executionsFor('share-migration-start', id)).toHaveLength(1);
    expect(await executionsFor('share-migration-complete', id)).toHaveLength(1);
    expect(await executionsFor('share-migration-cancel', id)).toHaveLength(0);
  }, 300_000);

  test('concurrent migration_complete and migration_cancel on a phase-1-done migration: exactly one wins', async () => {
    const { id } = await m.availableShare('nfs-a', { name: 'race2' });
    const typeB = await m.typePinnedTo('nfs-b');
    expect((await m.action(id, start(B, { new_share_type_id: typeB }))).status).toBe(202);
    await m.taskStateBecomes(id, ['migration_driver_phase1_done'], 150_000);
    const results = await Promise.all([
      ...Array.from({ length: 10 }, () => m.action(id, { migration_complete: null })),
      ...Array.from({ length: 10 }, () => m.action(id, { migration_cancel: null })),
    ]);
    const completes = results.slice(0, 10).filter((r) => r.status === 202).length;
    const cancels = results.slice(10).filter((r) => r.status === 202).length;
    // One complete wins and no cancel runs, or a cancel wins (repeats of it answer 202) and no complete does.
    expect(completes + cancels).toBeGreaterThan(0);
    expect(completes === 1 ? cancels : completes).toBe(0);
    for (const r of results.filter((x) => x.status !== 202)) expect(r.status).toBe(400);
    const done = await m.taskStateBecomes(id, completes ? ['migration_success'] : ['migration_cancelled'], 150_000);
    expect(done.status).toBe('available');
    expect((await getShare(id))!.migration).toBeNull();
  }, 300_000);
});

describe('the audit and a migration that stopped moving', () => {
  test('a working task_state with no progress past the threshold is reported; the phase-1-done states wait without a finding', async () => {
    // reset_task_state leaves a share "working" with no machine behind it: what a lost execution would leave.
    expect((await m.action(base, { reset_task_state: { task_state: 'migration_in_progress' } })).status).toBe(202);
    await new Promise((r) => setTimeout(r, 20));
    const stuck = (await runAudit({ stuckAfterSeconds: 0.01 })).findings;
    expect(stuck).toEqual([{ kind: 'stuck-share-migration', resource: `share ${base}`, detail: expect.stringContaining('migration_in_progress with no progress since') }]);
    expect((await runAudit()).findings).toEqual([]); // within the default hour it is not stuck yet

    expect((await m.action(base, { reset_task_state: { task_state: 'data_copying_completed' } })).status).toBe(202);
    await new Promise((r) => setTimeout(r, 20));
    expect((await runAudit({ stuckAfterSeconds: 0.01 })).findings).toEqual([]);
    expect((await m.action(base, { reset_task_state: { task_state: null } })).status).toBe(202);
  });
});
