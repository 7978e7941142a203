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
 * Rows of §1.3 Ferry cannot reach, so they have no test here:
 *  - 3 (soft-deleted share): Ferry has no soft delete (2.69); no share is ever soft-deleted.
 *  - 7b (share network not `active`): share networks are records only and always `active`.
 *  - 10 (replicas): Ferry's shares have no replicas.
 *  - 11 (share groups): share groups are not built (create refuses share_group_id).
 *  - 15 (host-assisted with snapshots): Ferry's shares have no snapshots.
 *  - 16b (destination service down): a share backend's service is always up (no daemons).
 *  - 21 (HostBinaryNotFound): row 16 already found the backend's one `manila-share` service;
 *    the second lookup cannot fail.
 */
import { randomUUID } from 'node:crypto';
import { DescribeExecutionCommand, ListExecutionsCommand } from '@aws-sdk/client-sfn';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { sfn, stateMachineArn } from '../../functions/core/executions.js';
import { clearFault, clearFaults, faultCalls, injectFault } from '../../functions/core/faults.js';
import type { StateMachineName } from '../../functions/wiring.js';
import { getShare } from '../../functions/shares/repo.js';
import { manilaClient, migrationStartBody, type ManilaResponse, useFastMigrationEnv } from '../support/manila.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
const m = manilaClient(() => stack.url);
let restoreEnv: (() => void) | undefined;

const A = 'ferry@nfs-a#pool0';
const B = 'ferry@nfs-b#pool0';
const NO_SUCH = '3f1c2b7e-0000-4000-8000-00000000dead';
const BARE_404 = { itemNotFound: { code: 404, message: 'The resource could not be found.' } };
const FAULTS: Record<number, string> = { 400: 'badRequest', 403: 'forbidden', 404: 'itemNotFound', 409: 'conflictingRequest' };
const ACTIONS = ['migration_start', 'migration_complete', 'migration_cancel', 'migration_get_progress', 'reset_task_state'] as const;
/** constants.TASK_STATE_STATUSES without None (reference §1.4): every §1.6 value but migration_driver_starting and migration_cancel_in_progress. */
const RESETTABLE = [
  'migration_starting',
  'migration_in_progress',
  'migration_driver_in_progress',
  'migration_driver_phase1_done',
  'data_copying_starting',
  'data_copying_in_progress',
  'data_copying_completing',
  'data_copying_completed',
  'data_copying_cancelled',
  'data_copying_error',
  'migration_completing',
  'migration_success',
  'migration_error',
  'migration_cancelled',
];
const PROGRESS_100 = ['migration_success', 'data_copying_error', 'migration_cancelled', 'migration_completing', 'migration_driver_phase1_done', 'data_copying_completed', 'data_copying_completing', 'data_copying_cancelled', 'migration_error'];
const PROGRESS_0 = ['migration_starting', 'data_copying_starting', 'migration_in_progress'];

/** The share every refusal is tried on (an available share on nfs-a); refusals leave it as it is. */
let base: string;

beforeAll(async () => {
  restoreEnv = useFastMigrationEnv([]);
  stack = await useLocalStack();
  base = (await m.availableShare('nfs-a', { name: 'base' })).id;
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  restoreEnv?.();
});
afterEach(async () => {
  clearFaults();
  const b = await getShare(base);
  expect(b).toMatchObject({ status: 'available', taskState: null, migration: null });
  expect((await runAudit()).findings).toEqual([]);
});

// ---- helpers ---------------------------------------------------------------------------------

const start = (host: string, extra: Record<string, unknown> = {}, flags: Parameters<typeof migrationStartBody>[1] = {}) => migrationStartBody(host, flags, extra);

/** Sends the action, expects the fault and message, and that the share record did not change at all (version included). */
async function refused(id: string, body: unknown, status: number, message: string | RegExp, opts?: Parameters<typeof m.action>[2]): Promise<ManilaResponse> {
  const before = await getShare(id);
  const res = await m.action(id, body, opts);
  expect({ status: res.status, body: res.body }).toMatchObject({ status, body: { [FAULTS[status]!]: { code: status } } });
  expect(Object.keys(res.body)).toEqual([FAULTS[status]]);
  const msg = res.body[FAULTS[status]!].message;
  if (typeof message === 'string') expect(msg).toBe(message);
  else expect(msg).toMatch(message);
  expect(await getShare(id)).toEqual(before);
  return res;
}

async function resetTaskState(id: string, state: string | null): Promise<void> {
  const res = await m.action(id, { reset_task_state: { task_state: state } });
  expect(res.status).toBe(202);
  expect((await getShare(id))!.taskState).toBe(state);
}

async function makeType(extraSpecs: Record<string, string>): Promise<{ id: string; name: string }> {
  const name = `t-${randomUUID().slice(0, 8)}`;
  const res = await m.api('POST', '/types', { share_type: { name, extra_specs: { driver_handles_share_servers: 'False', ...extraSpecs } } });
  expect(res.status).toBe(200);
  return { id: res.body.share_type.id, name };
}

/** A raw request, for headers the client helper does not vary. */
async function raw(path: string, body: unknown, headers: Record<string, string>): Promise<ManilaResponse> {
  const res = await fetch(`${stack.url}/share/v2${path}`, {
    method: 'POST',
    headers: { 'X-Auth-Token': 'admin:admin', 'Content-Type': 'application/json', Accept: 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

/** Executions of a machine whose input names this share. */
async function executionsFor(machine: StateMachineName, shareId: string): Promise<string[]> {
  const out: string[] = [];
  let nextToken: string | undefined;
  do {
    const page = await (await sfn()).send(new ListExecutionsCommand({ stateMachineArn: stateMachineArn(machine), maxResults: 1000, nextToken }));
    for (const e of page.executions ?? []) {
      const d = await (await sfn()).send(new DescribeExecutionCommand({ executionArn: e.executionArn! }));
      if (JSON.parse(d.input ?? '{}').shareId === shareId) out.push(e.name!);
    }
    nextToken = page.nextToken;
  } while (nextToken);
  return out;
}

// ---- §1.1 transport --------------------------------------------------------------------------

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
    const bodies: Record<(typeof ACTIONS)[number], unknown> = {
      migration_start: start(B),
      migration_complete: { migration_complete: null },
      migration_cancel: { migration_cancel: null },
      migration_get_progress: { migration_get_progress: null },
      reset_task_state: { reset_task_state: { task_state: 'migration_error' } },
    };
    for (const action of ACTIONS) {
      for (const id of [base, NO_SUCH]) {
        const res = await refused(id, bodies[action], 403, /./, { token: 'demo:demo' });
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
  test('row 2: share not found -> 404 Share <id> not found.', async () => {
    await refused(NO_SUCH, start(B), 404, `Share ${NO_SUCH} not found.`);
    // Before any body validation.
    await refused(NO_SUCH, { migration_start: null }, 404, `Share ${NO_SUCH} not found.`);
  });

  test('row 4: body missing or empty -> 400 Request is missing body.', async () => {
    for (const value of [null, {}, false, '', 0]) await refused(base, { migration_start: value }, 400, 'Request is missing body.');
  });

  test('row 5: any mandatory parameter missing -> 400 Must specify all mandatory parameters', async () => {
    const msg = "Must specify all mandatory parameters: ['preserve_metadata', 'writable', 'nondisruptive', 'preserve_snapshots', 'host']";
    for (const key of ['preserve_metadata', 'writable', 'nondisruptive', 'preserve_snapshots', 'host']) {
      const body = start(B);
      delete (body.migration_start as Record<string, unknown>)[key];
      await refused(base, body, 400, msg);
    }
    // Row 5 before row 6: a missing flag wins over an invalid one.
    await refused(base, { migration_start: { host: B, writable: 'maybe' } }, 400, msg);
  });

  test('row 6: a flag that is not a boolean -> 400 Invalid value X for <key>. Expecting a boolean.', async () => {
    for (const key of ['preserve_metadata', 'writable', 'nondisruptive', 'preserve_snapshots', 'force_host_assisted_migration']) {
      await refused(base, start(B, { [key]: 'maybe' }), 400, `Invalid value maybe for ${key}. Expecting a boolean.`);
    }
    await refused(base, start(B, { writable: 2 }), 400, 'Invalid value 2 for writable. Expecting a boolean.');
    await refused(base, start(B, { writable: null }), 400, 'Invalid value None for writable. Expecting a boolean.');
    // Row 6 before row 7.
    await refused(base, start(B, { nondisruptive: 'sure', new_share_network_id: NO_SUCH }), 400, 'Invalid value sure for nondisruptive. Expecting a boolean.');
  });

  test('row 7: new_share_network_id not found -> 400 Share network <id> not found.', async () => {
    await refused(base, start(B, { new_share_network_id: NO_SUCH }), 400, `Share network ${NO_SUCH} not found.`);
    // Row 7 before row 8.
    await refused(base, start(B, { new_share_network_id: NO_SUCH, new_share_type_id: NO_SUCH }), 400, `Share network ${NO_SUCH} not found.`);
  });

  test('row 8: new_share_type_id not found -> 400 Share type <id> not found.', async () => {
    await refused(base, start(B, { new_share_type_id: NO_SUCH }), 400, `Share type ${NO_SUCH} not found.`);
    // Row 8 before row 9.
    await refused(base, start(B, { new_share_type_id: NO_SUCH }, { force_host_assisted_migration: true, writable: true }), 400, `Share type ${NO_SUCH} not found.`);
  });

  test('row 9: force_host_assisted_migration with any driver-assisted flag -> 400 Invalid parameter combination', async () => {
    const msg =
      'Invalid input received: Invalid parameter combination. Cannot set parameters "nondisruptive", "writable", "preserve_snapshots" or "preserve_metadata" to True when enabling the "force_host_assisted_migration" option.';
    for (const flag of ['preserve_metadata', 'writable', 'nondisruptive', 'preserve_snapshots'] as const) {
      await refused(base, start(B, {}, { force_host_assisted_migration: true, [flag]: true }), 400, msg);
    }
    // Strings as the CLI sends them ("yes" is a boolean too).
    await refused(base, start(B, { force_host_assisted_migration: 'True', writable: 'yes' }), 400, msg);
  });

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

  test('row 17: the new type sets a size range the share is outside -> 400 InvalidInput', async () => {
    const min = await makeType({ share_backend_name: 'nfs-b', 'provisioning:min_share_size': '5' });
    await refused(base, start(B, { new_share_type_id: min.id }), 400, `Invalid input received: Specified share size of '1' is less than the minimum required size of '5' for share type '${min.name}'.`);
    const { id } = await m.availableShare('nfs-a', { size: 3, name: 'big' });
    const max = await makeType({ share_backend_name: 'nfs-b', 'provisioning:max_share_size': '2' });
    await refused(id, start(B, { new_share_type_id: max.id }), 400, `Invalid input received: Specified share size of '3' is greater than the maximum allowable size of '2' for share type '${max.name}'.`);
    // Row 17 after row 16.
    await refused(base, start('ferry@nfs-z#pool0', { new_share_type_id: min.id }), 404, 'ServiceNotFound: Service ferry@nfs-z could not be found.');
  });

  test('row 18: new type with driver_handles_share_servers=True, no network anywhere -> 400 InvalidInput', async () => {
    const dhss = await makeType({ driver_handles_share_servers: 'True' });
    await refused(
      base,
      start(B, { new_share_type_id: dhss.id }),
      400,
      `Invalid input received: New share network must be provided when share type of given share ${base} has extra_spec 'driver_handles_share_servers' as True.`,
    );
  });

  test('row 19: driver_handles_share_servers=False and a new share network -> 400 InvalidInput', async () => {
    const net = await m.api('POST', '/share-networks', { share_network: { name: 'n19' } });
    expect(net.status).toBe(200);
    const msg = `Invalid input received: New share network must not be provided when share type of given share ${base} has extra_spec 'driver_handles_share_servers' as False.`;
    await refused(base, start(B, { new_share_network_id: net.body.share_network.id }), 400, msg);
    // With a new DHSS=False type too.
    const typeB = await m.typePinnedTo('nfs-b');
    await refused(base, start(B, { new_share_network_id: net.body.share_network.id, new_share_type_id: typeB }), 400, msg);
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

  test('row 22: the type\'s availability_zones exclude the destination\'s zone -> 400 InvalidShare', async () => {
    const t = await makeType({ share_backend_name: 'nfs-b', availability_zones: 'zone-x,zone-y' });
    await refused(base, start(B, { new_share_type_id: t.id }), 400, `Invalid share: Share ${base} cannot be migrated to host ${B} because share type ${t.name}(ID: ${t.id}) is not supported within the availability zone (nova) that the host is in.`);
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
  test('share not found -> 404 Share <id> not found.', async () => {
    await refused(NO_SUCH, { migration_complete: null }, 404, `Share ${NO_SUCH} not found.`);
  });

  test('each _migration_validate_error_message, by task_state', async () => {
    const cases: [string | null, string][] = [
      [null, `There is no migration being performed for share ${base} at this moment.`],
      ['migration_error', `There is no migration being performed for share ${base} at this moment.`],
      ['migration_success', `Migration of share ${base} has already completed.`],
      ['migration_cancelled', `Migration of share ${base} was already cancelled.`],
      ['migration_starting', `First migration phase of share ${base} not completed yet.`],
      ['migration_in_progress', `First migration phase of share ${base} not completed yet.`],
      ['migration_driver_in_progress', `First migration phase of share ${base} not completed yet.`],
      ['data_copying_in_progress', `First migration phase of share ${base} not completed yet.`],
      ['migration_completing', `First migration phase of share ${base} not completed yet.`],
      ['data_copying_error', `First migration phase of share ${base} not completed yet.`],
    ];
    for (const [state, msg] of cases) {
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
  test('share not found -> 404 Share <id> not found.', async () => {
    await refused(NO_SUCH, { migration_cancel: null }, 404, `Share ${NO_SUCH} not found.`);
  });

  test('outside the cancellable states: the validate message, else cannot be cancelled at this moment', async () => {
    const cannot = `Migration of share ${base} cannot be cancelled at this moment.`;
    const cases: [string | null, string][] = [
      [null, `There is no migration being performed for share ${base} at this moment.`],
      ['migration_error', `There is no migration being performed for share ${base} at this moment.`],
      ['migration_success', `Migration of share ${base} has already completed.`],
      ['migration_cancelled', `Migration of share ${base} was already cancelled.`],
      ['migration_starting', cannot],
      ['migration_in_progress', cannot],
      ['data_copying_starting', cannot],
      ['data_copying_completing', cannot],
      ['migration_completing', cannot],
      ['data_copying_error', cannot],
      // Cancellable states, but no migration on the share (reset_task_state): upstream's get_migrating_instances is a 500.
      ['migration_driver_phase1_done', cannot],
      ['migration_driver_in_progress', cannot],
      ['data_copying_completed', cannot],
    ];
    for (const [state, msg] of cases) {
      await resetTaskState(base, state);
      await refused(base, { migration_cancel: null }, 400, `Invalid share: ${msg}`);
    }
    await resetTaskState(base, null);
  });
});

describe('migration_get_progress (§1.4, §1.5)', () => {
  test('share not found -> 404; task_state null -> 400', async () => {
    await refused(NO_SUCH, { migration_get_progress: null }, 404, `Share ${NO_SUCH} not found.`);
    await refused(base, { migration_get_progress: null }, 400, `Invalid share: There is no migration being performed for share ${base} at this moment.`);
    await refused(base, { migration_get_progress: null }, 400, `Invalid share: There is no migration being performed for share ${base} at this moment.`, { version: '2.59' });
  });

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
  test('share not found -> 404 ShareNotFound: Share <id> could not be found.', async () => {
    await refused(NO_SUCH, { reset_task_state: { task_state: null } }, 404, `ShareNotFound: Share ${NO_SUCH} could not be found.`);
  });

  test("no task_state -> 400 Must specify 'task_state'", async () => {
    for (const value of [null, {}, { state: 'migration_error' }, 'migration_error', ['task_state'], 1]) {
      await refused(base, { reset_task_state: value }, 400, "Must specify 'task_state'");
    }
  });

  test('a value outside TASK_STATE_STATUSES -> 400 Invalid state. Valid states: ...', async () => {
    const msg = `Invalid state. Valid states: ${[...RESETTABLE, 'None'].join(', ')}.`;
    for (const value of ['migration_driver_starting', 'migration_cancel_in_progress', 'bogus', '', 'None', 'MIGRATION_ERROR', 3, true, { a: 1 }]) {
      await refused(base, { reset_task_state: { task_state: value } }, 400, msg);
    }
  });

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
