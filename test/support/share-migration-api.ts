/**
 * The local stack, helpers and refusal tables of the share migration API tests
 * (test/integration/share-migration-api.test.ts): the stack with fast migration settings and one
 * available share on nfs-a that every refusal is tried on (after each test: faults cleared, that
 * share available with no task_state and no migration, the audit clean); `refused` (the fault,
 * its message, and the share record unchanged to its version); reset_task_state, share types,
 * raw requests, the executions of a share; and the migration_start rows of reference §1.3 and the
 * migration_complete / migration_cancel messages of §1.4 that are refusals of one body each.
 *
 * Rows of §1.3 Ferry cannot reach, so they have no test:
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
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { sfn, stateMachineArn } from '../../functions/core/executions.js';
import { clearFaults } from '../../functions/core/faults.js';
import type { StateMachineName } from '../../functions/wiring.js';
import { getShare } from '../../functions/shares/repo.js';
import { manilaClient, migrationStartBody, type ManilaResponse, useFastMigrationEnv } from './manila.js';
import { useLocalStack, type TestLocalStack } from './stack.js';

export const A = 'ferry@nfs-a#pool0';
export const B = 'ferry@nfs-b#pool0';
export const NO_SUCH = '3f1c2b7e-0000-4000-8000-00000000dead';
export const BARE_404 = { itemNotFound: { code: 404, message: 'The resource could not be found.' } };
const FAULTS: Record<number, string> = { 400: 'badRequest', 403: 'forbidden', 404: 'itemNotFound', 409: 'conflictingRequest' };
export const ACTIONS = ['migration_start', 'migration_complete', 'migration_cancel', 'migration_get_progress', 'reset_task_state'] as const;
/** constants.TASK_STATE_STATUSES without None (reference §1.4): every §1.6 value but migration_driver_starting and migration_cancel_in_progress. */
export const RESETTABLE = [
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
export const PROGRESS_100 = ['migration_success', 'data_copying_error', 'migration_cancelled', 'migration_completing', 'migration_driver_phase1_done', 'data_copying_completed', 'data_copying_completing', 'data_copying_cancelled', 'migration_error'];
export const PROGRESS_0 = ['migration_starting', 'data_copying_starting', 'migration_in_progress'];

/** A migration_start body to `host`, with `extra` keys over the CLI's defaults and `flags` as booleans. */
export const start = (host: string, extra: Record<string, unknown> = {}, flags: Parameters<typeof migrationStartBody>[1] = {}) => migrationStartBody(host, flags, extra);

/**
 * Starts the local stack for the calling test file and returns its Manila client, the id of the
 * share refusals are tried on (once beforeAll has run) and the helpers over them.
 */
export function useShareMigrationApiStack() {
  let stack: TestLocalStack;
  const m = manilaClient(() => stack.url);
  let restoreEnv: (() => void) | undefined;
  const shares = { base: '' };

  beforeAll(async () => {
    restoreEnv = useFastMigrationEnv([]);
    stack = await useLocalStack();
    shares.base = (await m.availableShare('nfs-a', { name: 'base' })).id;
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
    restoreEnv?.();
  });
  afterEach(async () => {
    clearFaults();
    expect(await getShare(shares.base)).toMatchObject({ status: 'available', taskState: null, migration: null });
    expect((await runAudit()).findings).toEqual([]);
  });

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

  return { m, shares, refused, resetTaskState, makeType, raw };
}

/** A body for each migration action, valid but for who sends it. */
export const ACTION_BODIES: Record<(typeof ACTIONS)[number], unknown> = {
  migration_start: start(B),
  migration_complete: { migration_complete: null },
  migration_cancel: { migration_cancel: null },
  migration_get_progress: { migration_get_progress: null },
  reset_task_state: { reset_task_state: { task_state: 'migration_error' } },
};

export type ShareMigrationApi = ReturnType<typeof useShareMigrationApiStack>;

/** Executions of a machine whose input names this share. */
export async function executionsFor(machine: StateMachineName, shareId: string): Promise<string[]> {
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

/** One refusal: the share it is sent to, the body, the fault's status, its message and the request's options. */
export type Refusal = [id: string, body: unknown, status: number, message: string, opts?: { version?: string }];

/** A test that sends refusals (made when it runs, on the base share or others) and expects each. */
export interface RefusalRow {
  title: string;
  refusals: (base: string, api: Pick<ShareMigrationApi, 'm' | 'makeType'>) => Promise<Refusal[]>;
}

/**
 * The migration_start rows of §1.3 that are refusals of the base share (or of none) with fixed
 * bodies, each with the row that must win over the next one. Rows that need a share in some state
 * (12, 13, 14, 16, 20, 23) stay tests of their own.
 */
export function startRefusalRows(): RefusalRow[] {
  const mandatory = "Must specify all mandatory parameters: ['preserve_metadata', 'writable', 'nondisruptive', 'preserve_snapshots', 'host']";
  const without = (key: string) => {
    const body = start(B);
    delete (body.migration_start as Record<string, unknown>)[key];
    return body;
  };
  const combination =
    'Invalid input received: Invalid parameter combination. Cannot set parameters "nondisruptive", "writable", "preserve_snapshots" or "preserve_metadata" to True when enabling the "force_host_assisted_migration" option.';
  const mandatoryKeys = ['preserve_metadata', 'writable', 'nondisruptive', 'preserve_snapshots', 'host'];
  const flags = ['preserve_metadata', 'writable', 'nondisruptive', 'preserve_snapshots'] as const;
  const rows: { title: string; refusals: (base: string, api: Pick<ShareMigrationApi, 'm' | 'makeType'>) => Refusal[] | Promise<Refusal[]> }[] = [
    {
      title: 'row 2: share not found -> 404 Share <id> not found.',
      // The second: before any body validation.
      refusals: (base) => [[NO_SUCH, start(B), 404, `Share ${NO_SUCH} not found.`], [NO_SUCH, { migration_start: null }, 404, `Share ${NO_SUCH} not found.`]],
    },
    {
      title: 'row 4: body missing or empty -> 400 Request is missing body.',
      refusals: (base) => [null, {}, false, '', 0].map((value): Refusal => [base, { migration_start: value }, 400, 'Request is missing body.']),
    },
    {
      title: 'row 5: any mandatory parameter missing -> 400 Must specify all mandatory parameters',
      // The last: row 5 before row 6, a missing flag wins over an invalid one.
      refusals: (base) => [...mandatoryKeys.map((key): Refusal => [base, without(key), 400, mandatory]), [base, { migration_start: { host: B, writable: 'maybe' } }, 400, mandatory]],
    },
    {
      title: 'row 6: a flag that is not a boolean -> 400 Invalid value X for <key>. Expecting a boolean.',
      refusals: (base) => [
        ...[...flags, 'force_host_assisted_migration'].map((key): Refusal => [base, start(B, { [key]: 'maybe' }), 400, `Invalid value maybe for ${key}. Expecting a boolean.`]),
        [base, start(B, { writable: 2 }), 400, 'Invalid value 2 for writable. Expecting a boolean.'],
        [base, start(B, { writable: null }), 400, 'Invalid value None for writable. Expecting a boolean.'],
        // Row 6 before row 7.
        [base, start(B, { nondisruptive: 'sure', new_share_network_id: NO_SUCH }), 400, 'Invalid value sure for nondisruptive. Expecting a boolean.'],
      ],
    },
    {
      title: 'row 7: new_share_network_id not found -> 400 Share network <id> not found.',
      // The second: row 7 before row 8.
      refusals: (base) => [
        [base, start(B, { new_share_network_id: NO_SUCH }), 400, `Share network ${NO_SUCH} not found.`],
        [base, start(B, { new_share_network_id: NO_SUCH, new_share_type_id: NO_SUCH }), 400, `Share network ${NO_SUCH} not found.`],
      ],
    },
    {
      title: 'row 8: new_share_type_id not found -> 400 Share type <id> not found.',
      // The second: row 8 before row 9.
      refusals: (base) => [
        [base, start(B, { new_share_type_id: NO_SUCH }), 400, `Share type ${NO_SUCH} not found.`],
        [base, start(B, { new_share_type_id: NO_SUCH }, { force_host_assisted_migration: true, writable: true }), 400, `Share type ${NO_SUCH} not found.`],
      ],
    },
    {
      title: 'row 9: force_host_assisted_migration with any driver-assisted flag -> 400 Invalid parameter combination',
      refusals: (base) => [
        ...flags.map((flag): Refusal => [base, start(B, {}, { force_host_assisted_migration: true, [flag]: true }), 400, combination]),
        // Strings as the CLI sends them ("yes" is a boolean too).
        [base, start(B, { force_host_assisted_migration: 'True', writable: 'yes' }), 400, combination],
      ],
    },
    {
      title: 'row 17: the new type sets a size range the share is outside -> 400 InvalidInput',
      refusals: async (base, { m, makeType }) => {
        const min = await makeType({ share_backend_name: 'nfs-b', 'provisioning:min_share_size': '5' });
        const { id } = await m.availableShare('nfs-a', { size: 3, name: 'big' });
        const max = await makeType({ share_backend_name: 'nfs-b', 'provisioning:max_share_size': '2' });
        return [
          [base, start(B, { new_share_type_id: min.id }), 400, `Invalid input received: Specified share size of '1' is less than the minimum required size of '5' for share type '${min.name}'.`],
          [id, start(B, { new_share_type_id: max.id }), 400, `Invalid input received: Specified share size of '3' is greater than the maximum allowable size of '2' for share type '${max.name}'.`],
          // Row 17 after row 16.
          [base, start('ferry@nfs-z#pool0', { new_share_type_id: min.id }), 404, 'ServiceNotFound: Service ferry@nfs-z could not be found.'],
        ];
      },
    },
    {
      title: 'row 18: new type with driver_handles_share_servers=True, no network anywhere -> 400 InvalidInput',
      refusals: async (base, { makeType }) => {
        const dhss = await makeType({ driver_handles_share_servers: 'True' });
        const msg = `Invalid input received: New share network must be provided when share type of given share ${base} has extra_spec 'driver_handles_share_servers' as True.`;
        return [[base, start(B, { new_share_type_id: dhss.id }), 400, msg]];
      },
    },
    {
      title: 'row 19: driver_handles_share_servers=False and a new share network -> 400 InvalidInput',
      refusals: async (base, { m }) => {
        const net = await m.api('POST', '/share-networks', { share_network: { name: 'n19' } });
        expect(net.status).toBe(200);
        const msg = `Invalid input received: New share network must not be provided when share type of given share ${base} has extra_spec 'driver_handles_share_servers' as False.`;
        const networkId = net.body.share_network.id;
        // The second: with a new DHSS=False type too.
        return [[base, start(B, { new_share_network_id: networkId }), 400, msg], [base, start(B, { new_share_network_id: networkId, new_share_type_id: await m.typePinnedTo('nfs-b') }), 400, msg]];
      },
    },
    {
      title: "row 22: the type's availability_zones exclude the destination's zone -> 400 InvalidShare",
      refusals: async (base, { makeType }) => {
        const t = await makeType({ share_backend_name: 'nfs-b', availability_zones: 'zone-x,zone-y' });
        const msg = `Invalid share: Share ${base} cannot be migrated to host ${B} because share type ${t.name}(ID: ${t.id}) is not supported within the availability zone (nova) that the host is in.`;
        return [[base, start(B, { new_share_type_id: t.id }), 400, msg]];
      },
    },
  ];
  return rows.map((r) => ({ title: r.title, refusals: async (base, api) => r.refusals(base, api) }));
}

/** The action on a share that does not exist: a 404 before anything else. */
const notFound = (body: unknown, message = `Share ${NO_SUCH} not found.`): RefusalRow => ({
  title: `share not found -> 404 ${message.replace(NO_SUCH, '<id>')}`,
  refusals: async () => [[NO_SUCH, body, 404, message]],
});

/** The §1.4 refusals of one body each that open the tests of complete, cancel, get_progress and reset_task_state. */
export const ACTION_REFUSAL_ROWS: Record<'complete' | 'cancel' | 'progress' | 'reset', RefusalRow[]> = {
  complete: [notFound({ migration_complete: null })],
  cancel: [notFound({ migration_cancel: null })],
  progress: [
    {
      title: 'share not found -> 404; task_state null -> 400',
      refusals: async (base) => {
        const none = `Invalid share: There is no migration being performed for share ${base} at this moment.`;
        return [[NO_SUCH, { migration_get_progress: null }, 404, `Share ${NO_SUCH} not found.`], [base, { migration_get_progress: null }, 400, none], [base, { migration_get_progress: null }, 400, none, { version: '2.59' }]];
      },
    },
  ],
  reset: [
    notFound({ reset_task_state: { task_state: null } }, `ShareNotFound: Share ${NO_SUCH} could not be found.`),
    {
      title: "no task_state -> 400 Must specify 'task_state'",
      refusals: async (base) => [null, {}, { state: 'migration_error' }, 'migration_error', ['task_state'], 1].map((value): Refusal => [base, { reset_task_state: value }, 400, "Must specify 'task_state'"]),
    },
    {
      title: 'a value outside TASK_STATE_STATUSES -> 400 Invalid state. Valid states: ...',
      refusals: async (base) => {
        const msg = `Invalid state. Valid states: ${[...RESETTABLE, 'None'].join(', ')}.`;
        return ['migration_driver_starting', 'migration_cancel_in_progress', 'bogus', '', 'None', 'MIGRATION_ERROR', 3, true, { a: 1 }].map((value): Refusal => [base, { reset_task_state: { task_state: value } }, 400, msg]);
      },
    },
  ],
};

/** migration_complete's _migration_validate_error_message by task_state (§1.4), on the base share. */
export function completeRefusals(base: string): [state: string | null, message: string][] {
  const none = `There is no migration being performed for share ${base} at this moment.`;
  const notYet = `First migration phase of share ${base} not completed yet.`;
  return [
    [null, none],
    ['migration_error', none],
    ['migration_success', `Migration of share ${base} has already completed.`],
    ['migration_cancelled', `Migration of share ${base} was already cancelled.`],
    ...['migration_starting', 'migration_in_progress', 'migration_driver_in_progress', 'data_copying_in_progress', 'migration_completing', 'data_copying_error'].map((s): [string, string] => [s, notYet]),
  ];
}

/**
 * migration_cancel outside the cancellable states (§1.4), on the base share: the validate message,
 * else "cannot be cancelled at this moment". The last three are cancellable states with no
 * migration on the share (reset_task_state): upstream's get_migrating_instances is a 500 there.
 */
export function cancelRefusals(base: string): [state: string | null, message: string][] {
  const cannot = `Migration of share ${base} cannot be cancelled at this moment.`;
  const [none, error, success, cancelled] = completeRefusals(base);
  return [
    none!,
    error!,
    success!,
    cancelled!,
    ...['migration_starting', 'migration_in_progress', 'data_copying_starting', 'data_copying_completing', 'migration_completing', 'data_copying_error'].map((s): [string, string] => [s, cannot]),
    ...['migration_driver_phase1_done', 'migration_driver_in_progress', 'data_copying_completed'].map((s): [string, string] => [s, cannot]),
  ];
}
