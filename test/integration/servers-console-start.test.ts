/**
 * Console starts of the server machines on the local stack: each machine started through the local
 * Step Functions endpoint (the SDK's SFN client, as `aws stepfunctions start-execution` against it)
 * with the API request it stands for (docs/state-machines.md "Server machines"). Its Record step
 * runs the API's validation, policy checks and conditional write under this execution, and the
 * server ends as when the API did it: state, host, attachments, the instance action (under the
 * request id derived from the execution name). The same name started twice, or its Record run
 * twice, changes things once; a refused request fails with ServerRequestRefused and writes nothing.
 */
import { DescribeExecutionCommand, SFNClient, StartExecutionCommand } from '@aws-sdk/client-sfn';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { main as ferry } from '../../bin/ferry.js';
import { stateMachineArn } from '../../functions/core/executions.js';
import { clearFaults, injectFault } from '../../functions/core/faults.js';
import type { StateMachineName } from '../../functions/core/machines.js';
import { consoleRequestId, consoleServerId } from '../../functions/servers/engine.js';
import { listMigrations } from '../../functions/servers/migrations.js';
import { handler as serverSteps } from '../../functions/servers/steps.js';
import { SANDBOX_IMAGES } from '../../functions/servers/images.js';
import { action, bootServer, cinderClient, createVolume, novaClient, putSmallRootFlavor, readThroughGuest, serverState, settled, volumeStatus, writeThroughGuest, type Cinder, type Nova } from '../support/nova.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
let nova: Nova;
let cinder: Cinder;
let sfn: SFNClient;
/** root_gb 0: shelve snapshots and moves copy little. */
const SMALL_ROOT_FLAVOR = '91';

beforeAll(async () => {
  stack = await useLocalStack();
  nova = novaClient(stack);
  cinder = cinderClient(stack);
  sfn = new SFNClient({ region: 'us-east-1', endpoint: `${stack.url}/_aws/stepfunctions`, credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
  await putSmallRootFlavor(SMALL_ROOT_FLAVOR, 'm1.console');
}, 120_000);
afterAll(async () => stack?.stop());

// Each test's servers are deleted after it (two hosts hold only a few), then `ferry audit` must be clean.
const servers: string[] = [];
afterEach(async () => {
  clearFaults();
  for (const id of servers.splice(0)) {
    await nova('DELETE', `/servers/${id}`);
    await settled(nova, id, LONG);
  }
  const out: string[] = [];
  const code = await ferry(['audit'], { out: (l) => out.push(l), err: (l) => out.push(l) });
  expect(code, out.join('\n')).toBe(0);
}, 300_000);

const LONG = 240_000;
const TEST = { timeout: 600_000 };
let names = 0;
/** A fresh execution name for this run of the file. */
const nextName = (what: string) => `console-${what}-${Date.now().toString(36)}-${++names}`;

async function boot(name: string, opts: { host?: string; flavor?: string } = {}): Promise<string> {
  const id = await bootServer(nova, { name, host: opts.host ?? 'cmp1', flavor: opts.flavor ?? SMALL_ROOT_FLAVOR });
  servers.push(id);
  return id;
}

interface Ended {
  status: string;
  error?: string;
  cause?: string;
  output?: unknown;
}

/** StartExecution on the local endpoint, as an operator does; the execution's ARN. */
async function start(machine: StateMachineName, name: string, input: unknown): Promise<string> {
  const out = await sfn.send(new StartExecutionCommand({ stateMachineArn: stateMachineArn(machine), name, input: JSON.stringify(input) }));
  return out.executionArn!;
}

async function ended(executionArn: string): Promise<Ended> {
  return eventually(
    async (note) => {
      const d = note(await sfn.send(new DescribeExecutionCommand({ executionArn })));
      if (d.status === 'RUNNING') return undefined;
      return { status: d.status!, error: d.error, cause: d.cause, output: d.output ? JSON.parse(d.output) : undefined };
    },
    `execution ${executionArn} to end`,
    LONG,
  );
}

/** A console start run to its end; expects SUCCEEDED unless told. */
async function consoleRun(machine: StateMachineName, input: unknown, opts: { name?: string; status?: string } = {}): Promise<Ended & { name: string; requestId: string }> {
  const name = opts.name ?? nextName(machine);
  const end = await ended(await start(machine, name, input));
  expect(end.status, `${end.error}: ${end.cause}`).toBe(opts.status ?? 'SUCCEEDED');
  return { ...end, name, requestId: consoleRequestId({ machine, executionName: name }) };
}

/** The instance actions (oldest first) with their events. */
async function actionsOf(id: string): Promise<{ action: string; requestId: string; events: { event: string; result: string | null }[] }[]> {
  const list = (await nova('GET', `/servers/${id}/os-instance-actions`)).body.instanceActions as { action: string; request_id: string }[];
  const out = [];
  for (const a of list.reverse()) {
    const detail = (await nova('GET', `/servers/${id}/os-instance-actions/${a.request_id}`)).body.instanceAction;
    out.push({ action: a.action, requestId: a.request_id, events: detail.events.map((e: { event: string; result: string | null }) => ({ event: e.event, result: e.result })) });
  }
  return out;
}

/** The action the console run recorded: under its derived request id, every event a success. */
async function expectAction(id: string, requestId: string, name: string): Promise<void> {
  const mine = (await actionsOf(id)).filter((a) => a.requestId === requestId);
  expect(mine.map((a) => a.action)).toEqual([name]);
  expect(mine[0]!.events.length).toBeGreaterThan(0);
  expect(mine[0]!.events.filter((e) => e.result !== 'Success')).toEqual([]);
}

/** A refusal: FAILED with ServerRequestRefused, the API's message in the cause (Lambda's error JSON). */
function expectRefused(end: Ended, message: string | RegExp): void {
  expect(end.error).toBe('ServerRequestRefused');
  const cause = JSON.parse(end.cause!) as { errorMessage: string };
  expect(cause.errorMessage).toMatch(message);
}

describe('the console input of each machine, run to the end', () => {
  test('server-create boots the server named after the execution; stop and start through server-power', async () => {
    const run = await consoleRun('server-create', {
      request: { server: { name: 'from-console', flavorRef: SMALL_ROOT_FLAVOR, imageRef: SANDBOX_IMAGES.cirrosTiny.id, networks: 'auto' } },
      projectId: 'demo',
      userId: 'demo',
    });
    const id = consoleServerId({ machine: 'server-create', executionName: run.name });
    servers.push(id);
    expect(run.output).toEqual({ serverId: id, requestId: run.requestId, cellUuid: expect.any(String) });
    expect(await settled(nova, id)).toMatchObject({ status: 'ACTIVE', name: 'from-console', tenant_id: 'demo', user_id: 'demo' });
    await expectAction(id, run.requestId, 'create');

    const stop = await consoleRun('server-power', { serverId: id, request: { 'os-stop': null }, projectId: 'demo', userId: 'demo' });
    expect((await settled(nova, id)).status).toBe('SHUTOFF');
    await expectAction(id, stop.requestId, 'stop');
    const started = await consoleRun('server-power', { serverId: id, request: { 'os-start': null } });
    expect((await settled(nova, id)).status).toBe('ACTIVE');
    await expectAction(id, started.requestId, 'start');
    expect((await serverState(id)).instance).toMatchObject({ vmState: 'active', taskState: null, operation: null, powerState: 1 });
  }, TEST.timeout);

  test('server-live-migrate: to the other host with its volume and bytes; the same name twice migrates once', async () => {
    const id = await boot('lm');
    const vol = await createVolume(cinder, 1, 'lm-data');
    expect((await nova('POST', `/servers/${id}/os-volume_attachments`, { body: { volumeAttachment: { volumeId: vol } } })).status).toBe(200);
    await settled(nova, id);
    const digest = await writeThroughGuest(id, '/dev/vdb', 'lm-bytes');

    const name = nextName('lm');
    const input = { serverId: id, request: { 'os-migrateLive': { host: null, block_migration: 'auto' } }, projectId: 'admin', userId: 'admin' };
    const arn = await start('server-live-migrate', name, input);
    // Started again while it runs (same input): the same execution, as on AWS; once it has ended, refused.
    const again = await sfn.send(new StartExecutionCommand({ stateMachineArn: stateMachineArn('server-live-migrate'), name, input: JSON.stringify(input) })).then(
      (out) => out.executionArn,
      (e: Error) => e.name,
    );
    expect([arn, 'ExecutionAlreadyExists']).toContain(again);
    expect((await ended(arn)).status).toBe('SUCCEEDED');
    await expect(start('server-live-migrate', name, input)).rejects.toMatchObject({ name: 'ExecutionAlreadyExists' });

    const { instance, bdms } = await serverState(id);
    expect(instance).toMatchObject({ host: 'cmp2', vmState: 'active', taskState: null, operation: null });
    const v = await volumeStatus(cinder, vol);
    expect(v).toMatchObject({ status: 'in-use', attachments: [expect.objectContaining({ server_id: id, host_name: 'cmp2', attachment_id: bdms[0]!.attachmentId })] });
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
    const requestId = consoleRequestId({ machine: 'server-live-migrate', executionName: name });
    await expectAction(id, requestId, 'live-migration');
    expect((await actionsOf(id)).filter((a) => a.action === 'live-migration')).toHaveLength(1);
    const migrations = (await listMigrations()).map((m) => m.migration).filter((m) => m.instanceUuid === id);
    expect(migrations.map((m) => [m.migrationType, m.status, m.sourceCompute, m.destCompute])).toEqual([['live-migration', 'completed', 'cmp1', 'cmp2']]);
  }, TEST.timeout);

  test('server-resize (migrate) then server-confirm-resize: on the other host, ACTIVE, the migration confirmed', async () => {
    const id = await boot('cold');
    const move = await consoleRun('server-resize', { serverId: id, request: { migrate: null } });
    expect(await settled(nova, id, LONG)).toMatchObject({ status: 'VERIFY_RESIZE', 'OS-EXT-SRV-ATTR:host': 'cmp2' });
    await expectAction(id, move.requestId, 'migrate');
    // The same-cell confirm is server-confirm-resize's: its cross-cell machine refuses it and writes nothing.
    const version = (await serverState(id)).instance.version;
    const wrong = await consoleRun('server-cross-cell-confirm', { serverId: id, request: { confirmResize: null } }, { status: 'FAILED' });
    expectRefused(wrong, /run by the state machine server-confirm-resize, not server-cross-cell-confirm/);
    expect((await serverState(id)).instance.version).toBe(version);

    const confirm = await consoleRun('server-confirm-resize', { serverId: id, request: { confirmResize: null } });
    expect(await settled(nova, id, LONG)).toMatchObject({ status: 'ACTIVE', 'OS-EXT-SRV-ATTR:host': 'cmp2' });
    await expectAction(id, confirm.requestId, 'confirmResize');
    const migration = (await listMigrations()).map((m) => m.migration).find((m) => m.instanceUuid === id)!;
    expect([migration.migrationType, migration.status]).toEqual(['migration', 'confirmed']);
  }, TEST.timeout);

  test('server-attach-volume and server-detach-volume: in-use on the host, then available and the BDM gone', async () => {
    const id = await boot('vols');
    const vol = await createVolume(cinder, 1, 'vols-data');
    const attach = await consoleRun('server-attach-volume', { serverId: id, request: { volumeAttachment: { volumeId: vol, device: '/dev/vdb' } } });
    await settled(nova, id);
    const { instance, bdms } = await serverState(id);
    expect(bdms.map((b) => [b.volumeId, b.deviceName])).toEqual([[vol, '/dev/vdb']]);
    expect(await volumeStatus(cinder, vol)).toMatchObject({ status: 'in-use', attachments: [expect.objectContaining({ host_name: instance.host, attachment_id: bdms[0]!.attachmentId })] });
    await expectAction(id, attach.requestId, 'attach_volume');
    const digest = await writeThroughGuest(id, '/dev/vdb', 'vols');
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);

    const detach = await consoleRun('server-detach-volume', { serverId: id, request: { volumeId: vol } });
    await settled(nova, id);
    expect((await serverState(id)).bdms).toEqual([]);
    expect(await volumeStatus(cinder, vol)).toMatchObject({ status: 'available', attachments: [] });
    await expectAction(id, detach.requestId, 'detach_volume');
  }, TEST.timeout);

  test('server-shelve then server-unshelve: SHELVED_OFFLOADED with nothing on a host, then ACTIVE again', async () => {
    const id = await boot('shelf');
    const shelve = await consoleRun('server-shelve', { serverId: id, request: { shelve: null } });
    expect(await settled(nova, id, LONG)).toMatchObject({ status: 'SHELVED_OFFLOADED', 'OS-EXT-SRV-ATTR:host': null });
    await expectAction(id, shelve.requestId, 'shelve');
    const unshelve = await consoleRun('server-unshelve', { serverId: id, request: { unshelve: null } });
    const back = await settled(nova, id, LONG);
    expect(back.status).toBe('ACTIVE');
    expect(['cmp1', 'cmp2']).toContain(back['OS-EXT-SRV-ATTR:host']);
    await expectAction(id, unshelve.requestId, 'unshelve');
  }, TEST.timeout);

  test('server-delete with only the server id: the server and its volume attachment are gone', async () => {
    const id = await bootServer(nova, { name: 'doomed', host: 'cmp1', flavor: SMALL_ROOT_FLAVOR });
    const vol = await createVolume(cinder, 1, 'doomed-data');
    expect((await nova('POST', `/servers/${id}/os-volume_attachments`, { body: { volumeAttachment: { volumeId: vol } } })).status).toBe(200);
    await settled(nova, id);
    await consoleRun('server-delete', { serverId: id });
    expect((await nova('GET', `/servers/${id}`)).status).toBe(404);
    expect(await volumeStatus(cinder, vol)).toMatchObject({ status: 'available', attachments: [] });
  }, TEST.timeout);
});

describe('twice, refused, failed part-way', () => {
  test('Record run twice for one execution name records once; the execution then follows what it recorded', async () => {
    const id = await boot('twice');
    const name = nextName('twice');
    const input = { serverId: id, request: { 'os-stop': null } };
    const step = { step: 'record' as const, machine: 'server-power', executionName: name, input };
    const first = await serverSteps(step);
    const recorded = (await serverState(id)).instance;
    const requestId = consoleRequestId({ machine: 'server-power', executionName: name });
    expect(first).toEqual({ serverId: id, requestId, cellUuid: expect.any(String) });
    expect(recorded).toMatchObject({ taskState: 'powering-off', operation: { kind: 'stop', requestId, executionName: name } });
    // A re-run (a Retry, a resumed execution): the same answer, nothing written.
    expect(await serverSteps(step)).toEqual(first);
    expect((await serverState(id)).instance.version).toBe(recorded.version);
    // The execution of that name records nothing more and runs the recorded operation.
    await consoleRun('server-power', input, { name });
    expect((await settled(nova, id)).status).toBe('SHUTOFF');
    expect((await actionsOf(id)).filter((a) => a.action === 'stop').map((a) => a.requestId)).toEqual([requestId]);
    await action(nova, id, { 'os-start': null });
    await settled(nova, id);
  }, TEST.timeout);

  test('refused requests fail with ServerRequestRefused and the API message, and write nothing', async () => {
    const id = await boot('refused');
    await action(nova, id, { 'os-stop': null });
    await settled(nova, id);
    const before = (await serverState(id)).instance;
    const actionsBefore = (await actionsOf(id)).length;
    const refusals: [StateMachineName, unknown, RegExp][] = [
      // Invalid state: live migration of a SHUTOFF server (Nova's InstanceInvalidState).
      ['server-live-migrate', { serverId: id, request: { 'os-migrateLive': { host: null, block_migration: 'auto' } } }, new RegExp(`Cannot 'live-migration' instance ${id} while it is in vm_state stopped`)],
      // An invalid body, as the API's schema words it.
      ['server-live-migrate', { serverId: id, request: { 'os-migrateLive': { host: null } } }, /'block_migration' is a required property/],
      // Another machine's action.
      ['server-live-migrate', { serverId: id, request: { 'os-start': null } }, /server-live-migrate takes as request the body of POST \/servers\/\{id\}\/action with one of "os-migrateLive"/],
      // Another project's user does not see the server (404), as through the API.
      ['server-power', { serverId: id, request: { 'os-start': null }, projectId: 'demo', userId: 'demo' }, /could not be found/],
      // A policy the user does not pass: evacuate is admin_api (the owner is admin; a member of admin's project is not).
      ['server-evacuate', { serverId: id, request: { evacuate: {} }, projectId: 'admin', userId: 'someone' }, /Policy doesn't allow os_compute_api:os-evacuate/],
      // Input a console start does not take.
      ['server-delete', { serverId: id, request: { force: true } }, /server-delete takes no request/],
      ['server-power', { serverId: id, requests: { 'os-start': null } }, /Unknown field\(s\) requests/],
    ];
    for (const [machine, input, message] of refusals) expectRefused(await consoleRun(machine, input, { status: 'FAILED' }), message);
    const after = (await serverState(id)).instance;
    expect(after.version).toBe(before.version);
    expect(after).toMatchObject({ vmState: 'stopped', taskState: null, operation: null, host: before.host });
    expect(await actionsOf(id)).toHaveLength(actionsBefore);
    expect((await listMigrations()).map((m) => m.migration).filter((m) => m.instanceUuid === id)).toEqual([]);
    await action(nova, id, { 'os-start': null });
    await settled(nova, id);
  }, TEST.timeout);

  test('a failure after the write (attachment_create fails in the API part) is undone: no BDM, the volume available', async () => {
    const id = await boot('undone');
    const vol = await createVolume(cinder, 1, 'undone-data');
    injectFault({ kind: 'cinder', backend: 'nova', method: 'attachment_create', mode: 'fail-after', times: 1, message: 'injected: attachment_create lost' });
    const end = await consoleRun('server-attach-volume', { serverId: id, request: { volumeAttachment: { volumeId: vol } } }, { status: 'FAILED' });
    expectRefused(end, /The request was recorded, then undone: injected: attachment_create lost/);
    expect((await serverState(id)).instance).toMatchObject({ vmState: 'active', taskState: null, operation: null });
    expect((await serverState(id)).bdms).toEqual([]);
    expect(await volumeStatus(cinder, vol)).toMatchObject({ status: 'available', attachments: [] });
  }, TEST.timeout);
});
