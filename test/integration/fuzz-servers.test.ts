/**
 * Fuzzed requests against the composed Nova handler (functions/api/compute.ts), run in-process
 * against the embedded local stack (DynamoDB Local, local compute hosts and volume backends, the
 * server and volume machines running): `POST /servers/{id}/action` for every registered action
 * (arbitrary and near-valid arguments at several microversions, bodies with 0 or 2 keys, unknown
 * action names), `POST /servers/{id}/os-volume_attachments`, `PUT` and `DELETE
 * /servers/{id}/os-volume_attachments/{volume}` and `POST /servers`.
 *
 * Properties, per request (as test/integration/fuzz.test.ts for Cinder):
 * - never a 5xx (nor a response without a status), and every 4xx is a fault body
 *   `{"<fault>": {"code": <status>, "message": ...}}`;
 * - a request answered 4xx changes nothing: the compute-api, cell1, cell2 and volume tables
 *   (Scan) and every compute host's guests (driver) are the same before and after (with every
 *   machine's executions settled).
 * A 2xx may change state: it is let settle, and the fixtures (one ACTIVE server of demo's with an
 * attached volume, one available volume of demo's) are brought back to what the next run needs.
 *
 * Deterministic: FERRY_FUZZ_SEED (default below) seeds every property; FERRY_FUZZ_RUNS scales the
 * run counts.
 */
import fc from 'fast-check';
import type { APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, onTestFinished, test } from 'vitest';
import { handler } from '../../functions/api/compute.js';
import { tableName, type TableKey } from '../../functions/core/tables.js';
import { listInstances } from '../../functions/servers/repo.js';
import { settleExecutions, type Snapshot, diffSnapshots } from '../support/api-state.js';
import { ADMIN, apiEvent, DEMO, lambdaContext, type Caller } from '../support/events.js';
import { bodyCases, weirdValue, withOwnKeys, wrap, type BodyCase, describeRequest, isFaultBody, type SentRequest } from '../support/fuzz-arbitraries.js';
import { bootServer, cinderClient, createVolume, novaClient, serverState, settled, volumeStatus, type Cinder, type Nova } from '../support/nova.js';
import { ACTIONS, admins, owners, serverCreateBody, volumeAttachBody, volumeSwapBody, type Desired } from '../support/fuzz-server-actions.js';
import { serverWorldSnapshot } from '../support/server-state.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const SEED = Number(process.env.FERRY_FUZZ_SEED ?? 737373);
const SCALE = Number(process.env.FERRY_FUZZ_RUNS ?? 1);
const runs = (n: number) => Math.max(1, Math.round(n * SCALE));
const BASE = '/compute/v2.1';
const VERSIONS = ['2.1', '2.25', '2.30', '2.56', '2.68', '2.77', '2.91', '2.93'] as const;
/** A machine that moves a server runs several steps on two hosts: room for a loaded machine. */
const LONG = 180_000;

let stack: TestLocalStack;
let nova: Nova; // admin
let demoNova: Nova;
let demoCinder: Cinder;

// ---------------------------------------------------------------------------------------------
// Fixtures: SERVER (demo's, image-backed, one data volume ATTACHED), AVAILABLE (demo's volume)

type FixtureName = 'SERVER' | 'ATTACHED' | 'AVAILABLE';

const fixtures = {} as Record<FixtureName, string>;
/** Set after a 2xx (or at a target's start): the fixtures are checked and repaired before the next request. */
let dirty = true;
const timing = { setup: 0, request: 0, snapshot: 0 };
const repairs: string[] = [];

async function act(body: unknown, version = '2.93'): Promise<void> {
  const res = await nova('POST', `/servers/${fixtures.SERVER}/action`, { body, version });
  if (res.status >= 300) throw new Error(`fixture repair ${JSON.stringify(body)} -> ${res.status} ${JSON.stringify(res.body)}`);
  repairs.push(Object.keys(body as object)[0]!);
  const s = await settled(nova, fixtures.SERVER, LONG);
  if (s.status === 'ERROR') throw new Error(`fixture repair ${JSON.stringify(body)} left the server in ERROR: ${JSON.stringify(s.fault)}`);
}

async function newServer(): Promise<void> {
  repairs.push('boot');
  fixtures.SERVER = await bootServer(demoNova, { name: 'fuzz-target' });
  fixtures.ATTACHED = await createVolume(demoCinder, 1, 'fuzz-attached');
  const res = await demoNova('POST', `/servers/${fixtures.SERVER}/os-volume_attachments`, { body: { volumeAttachment: { volumeId: fixtures.ATTACHED } } });
  if (res.status !== 200) throw new Error(`attach: ${res.status} ${JSON.stringify(res.body)}`);
  await settled(nova, fixtures.SERVER, LONG);
}

const dataVolumes = async () => (await serverState(fixtures.SERVER)).bdms.filter((b) => b.volumeId && b.bootIndex !== 0).map((b) => b.volumeId!);

/** Brings the server (made afresh if gone or broken) to ACTIVE with exactly one data volume, AVAILABLE available, then to `desired`. */
async function ensureFixtures(desired: Desired): Promise<void> {
  await settleExecutions(LONG);
  let s = fixtures.SERVER ? await settled(nova, fixtures.SERVER, LONG) : { status: 'DELETED' };
  if (s.status === 'DELETED' || s.status === 'ERROR') {
    if (s.status === 'ERROR') {
      await nova('DELETE', `/servers/${fixtures.SERVER}`);
      await settled(nova, fixtures.SERVER, LONG);
    }
    await newServer();
    s = await settled(nova, fixtures.SERVER, LONG);
  }
  // A lock (a lock target's 2xx) would refuse the owner's requests: lifted first.
  if ((await serverState(fixtures.SERVER)).instance.locked) await act({ unlock: null });
  if (s.status !== desired) {
    if (s.status === 'SHUTOFF') await act({ 'os-start': null });
    else if (s.status === 'PAUSED') await act({ unpause: null });
    else if (s.status === 'SUSPENDED') await act({ resume: null });
    else if (s.status === 'VERIFY_RESIZE') await act({ confirmResize: null });
    else if (s.status === 'SHELVED' || s.status === 'SHELVED_OFFLOADED') await act({ unshelve: null });
    s = await settled(nova, fixtures.SERVER, LONG);
  }
  if (s.status === 'ACTIVE') {
    // Exactly one data volume attached (a 2xx may have attached, detached or swapped one).
    let attached = await dataVolumes();
    for (const v of attached.slice(1)) {
      repairs.push('detach');
      const res = await nova('DELETE', `/servers/${fixtures.SERVER}/os-volume_attachments/${v}`);
      if (res.status !== 202) throw new Error(`detach: ${res.status} ${JSON.stringify(res.body)}`);
      await settled(nova, fixtures.SERVER, LONG);
    }
    attached = await dataVolumes();
    if (attached.length === 0) {
      repairs.push('attach');
      const vol = fixtures.ATTACHED && (await volumeStatus(demoCinder, fixtures.ATTACHED).catch(() => undefined))?.status === 'available' ? fixtures.ATTACHED : await createVolume(demoCinder, 1, 'fuzz-attached');
      const res = await demoNova('POST', `/servers/${fixtures.SERVER}/os-volume_attachments`, { body: { volumeAttachment: { volumeId: vol } } });
      if (res.status !== 200) throw new Error(`attach: ${res.status} ${JSON.stringify(res.body)}`);
      await settled(nova, fixtures.SERVER, LONG);
      attached = [vol];
    }
    fixtures.ATTACHED = attached[0]!;
  }
  const avail = fixtures.AVAILABLE ? await volumeStatus(demoCinder, fixtures.AVAILABLE).catch(() => undefined) : undefined;
  if (avail?.status !== 'available' || fixtures.AVAILABLE === fixtures.ATTACHED) {
    repairs.push('volume');
    fixtures.AVAILABLE = await createVolume(demoCinder, 1, 'fuzz-available');
  }
  if (s.status !== desired) {
    if (desired === 'SHUTOFF') await act({ 'os-stop': null });
    // A cold migration within the cell (its other host): a resize may not shrink the root disk, and
    // a generation change needs a cross-cell move, which the default policy denies.
    else if (desired === 'VERIFY_RESIZE') await act({ migrate: null });
    else if (desired === 'SHELVED' || desired === 'SHELVED_OFFLOADED') await act({ shelve: null });
    else if (desired === 'PAUSED') await act({ pause: null });
    else if (desired === 'SUSPENDED') await act({ suspend: null });
    s = await settled(nova, fixtures.SERVER, LONG);
    if (s.status !== desired) throw new Error(`fixture server is ${s.status}, not ${desired}`);
  }
  await settleExecutions(LONG);
}

/** Replaces `$NAME` placeholders (whole string values, and inside paths) with the fixtures' current ids. */
function resolve(text: string): string {
  return text.replace(/\$(SERVER|ATTACHED|AVAILABLE)/g, (_, n: FixtureName) => fixtures[n]);
}
function resolveValue(v: unknown): unknown {
  if (typeof v === 'string' && /^\$(SERVER|ATTACHED|AVAILABLE)$/.test(v)) return fixtures[v.slice(1) as FixtureName];
  if (Array.isArray(v)) return v.map(resolveValue);
  if (v && typeof v === 'object') return withOwnKeys({}, Object.fromEntries(Object.entries(v).map(([k, x]) => [k, resolveValue(x)])));
  return v;
}

// ---------------------------------------------------------------------------------------------
// State: the four tables and every compute host's guests

/** The tables and guests (test/support/server-state.ts), at rest. */
async function snapshot(): Promise<Snapshot> {
  return serverWorldSnapshot(LONG);
}

let baseline: Snapshot | undefined;
const stats = new Map<string, number>();

// ---------------------------------------------------------------------------------------------
// One request

interface Case {
  caller: Caller;
  version: string;
  body?: BodyCase;
  /** Substituted for `{name}` in the target's path (placeholders resolved, URL-encoded). */
  vars?: Record<string, string>;
}

interface Target {
  name: string;
  method: 'POST' | 'PUT' | 'DELETE';
  path: string;
  cases: fc.Arbitrary<Case>;
  numRuns: number;
  desired?: Desired;
  /** No 2xx is reachable from the fixtures (e.g. evacuate needs a host down). */
  no2xx?: boolean;
  env?: Record<string, string>;
}

function prepare(target: Target, c: Case): { sent: SentRequest; event: ReturnType<typeof apiEvent> } {
  let path = BASE + resolve(target.path);
  for (const [k, v] of Object.entries(c.vars ?? {})) path = path.replaceAll(`{${k}}`, encodeURIComponent(resolve(v)));
  let body: string | undefined;
  if (c.body?.raw !== undefined) body = c.body.raw;
  else if (c.body && 'value' in c.body) body = JSON.stringify(resolveValue(c.body.value)) ?? 'null';
  if (c.body?.base64 && body !== undefined && !body.startsWith('!')) body = Buffer.from(resolve(Buffer.from(body, 'base64').toString('utf8'))).toString('base64');
  const headers: Record<string, string> = { 'OpenStack-API-Version': `compute ${c.version}` };
  if (c.body?.contentType) headers['content-type'] = c.body.contentType;
  const event = apiEvent({ method: target.method, path, headers, body, caller: c.caller });
  if (c.body?.base64) event.isBase64Encoded = true;
  const shown = c.body?.base64 && body && !body.startsWith('!') ? Buffer.from(body, 'base64').toString('utf8') : body;
  return { event, sent: { method: target.method, path, caller: c.caller.userId, version: c.version, contentType: c.body?.contentType, base64: c.body?.base64, body: shown } };
}

async function check(target: Target, c: Case): Promise<void> {
  let t = Date.now();
  if (dirty) {
    await ensureFixtures(target.desired ?? 'ACTIVE');
    dirty = false;
    baseline = undefined;
  }
  const { sent, event } = prepare(target, c);
  baseline ??= await snapshot();
  timing.setup += Date.now() - t;

  t = Date.now();
  const res = (await handler(event, lambdaContext)) as APIGatewayProxyStructuredResultV2;
  timing.request += Date.now() - t;
  const status = res.statusCode;
  const text = typeof res.body === 'string' ? res.body : '';
  stats.set(String(status), (stats.get(String(status)) ?? 0) + 1);
  if (process.env.FERRY_FUZZ_TRACE) console.log(`${status} ${describeRequest(sent).slice(0, 400)} -> ${text.slice(0, 200)}`);
  const answer = `${status} ${text.slice(0, 600)}`;
  if (typeof status !== 'number' || status < 200 || status >= 500) {
    dirty = true;
    throw new Error(`server error or no status: ${describeRequest(sent)}\n  -> ${answer}`);
  }
  if (status >= 400 && !isFaultBody(text, status)) {
    dirty = true;
    throw new Error(`a ${status} without a fault body: ${describeRequest(sent)}\n  -> ${answer}`);
  }
  if (status >= 400) {
    t = Date.now();
    const after = await snapshot();
    timing.snapshot += Date.now() - t;
    const diff = diffSnapshots(baseline, after);
    baseline = after;
    if (diff.length) {
      dirty = true;
      throw new Error(`a refused request (${status}) changed state: ${describeRequest(sent)}\n  -> ${answer}\n  ${diff.join('\n  ')}`);
    }
    return;
  }
  // A 2xx: let it finish; a server it booted is deleted again; the fixtures are repaired before the next run.
  t = Date.now();
  if (target.method === 'POST' && target.path === '/servers') {
    // One server or several (max_count; with return_reservation_id the answer names none): every server but the fixture goes.
    for (const { instance } of await listInstances()) {
      if (instance.uuid === fixtures.SERVER) continue;
      await settled(nova, instance.uuid, LONG);
      await nova('DELETE', `/servers/${instance.uuid}`);
      await settled(nova, instance.uuid, LONG);
    }
  } else {
    await settled(nova, fixtures.SERVER, LONG);
  }
  dirty = true;
  timing.setup += Date.now() - t;
}

// ---------------------------------------------------------------------------------------------
// The requests

const V = fc.constantFrom(...VERSIONS);

/** Cases whose body is built for the case's microversion. */
function versionedTarget(t: Omit<Target, 'cases'> & { body: (version: string) => fc.Arbitrary<unknown>; who: fc.Arbitrary<Caller> }): Target {
  return { ...t, cases: fc.record({ caller: t.who, version: V }).chain(({ caller, version }) => bodyCases(t.body(version)).map((body): Case => ({ caller, version, body }))) };
}

function bodyTarget(t: Omit<Target, 'cases'> & { body: fc.Arbitrary<unknown>; who: fc.Arbitrary<Caller> }): Target {
  return { ...t, cases: fc.record({ caller: t.who, version: V, body: bodyCases(t.body) }) };
}


const TARGETS: Target[] = [
  ...Object.entries(ACTIONS).map(([action, a]) =>
    versionedTarget({
      name: `POST /servers/{id}/action ${action}`,
      method: 'POST',
      path: '/servers/$SERVER/action',
      who: a.who,
      body: (v) => wrap(action, a.args(v)),
      numRuns: runs(a.numRuns),
      desired: a.desired,
      no2xx: a.no2xx,
      env: a.env,
    }),
  ),
  bodyTarget({
    name: 'POST /servers/{id}/action (no, several or unknown actions)',
    method: 'POST',
    path: '/servers/$SERVER/action',
    who: admins,
    numRuns: runs(40),
    no2xx: true,
    body: fc
      .array(
        fc.tuple(
          fc.oneof(
            fc.constantFrom(...Object.keys(ACTIONS), 'os-resetState', 'createImage', 'rebuild', 'os-getConsoleOutput', '__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf', ''),
            fc.string({ maxLength: 10 }),
          ),
          fc.oneof(fc.constant(null), weirdValue),
        ),
        { maxLength: 3 },
      )
      // One key only when it is not an action (a lone known action is its own target's business).
      .filter((pairs) => new Set(pairs.map(([k]) => k)).size !== 1 || !(pairs[0]![0] in ACTIONS))
      .map((pairs) => withOwnKeys({}, Object.fromEntries(pairs))),
  }),
  versionedTarget({
    name: 'POST /servers/{id}/action (any action, server SHUTOFF)',
    method: 'POST',
    path: '/servers/$SERVER/action',
    who: admins,
    desired: 'SHUTOFF',
    numRuns: runs(20),
    // Not shelve: a 2xx there costs a shelve, an unshelve and a stop (its own target covers it).
    body: (v) => fc.constantFrom(...Object.keys(ACTIONS).filter((a) => a !== 'shelve')).chain((action) => wrap(action, ACTIONS[action]!.args(v))),
  }),
  bodyTarget({
    name: 'POST /servers/{id}/os-volume_attachments',
    method: 'POST',
    path: '/servers/$SERVER/os-volume_attachments',
    who: owners,
    numRuns: runs(24),
    body: volumeAttachBody,
  }),
  versionedTarget({
    name: 'PUT /servers/{id}/os-volume_attachments/{volume}',
    method: 'PUT',
    path: '/servers/$SERVER/os-volume_attachments/$ATTACHED',
    who: admins,
    numRuns: runs(24),
    body: volumeSwapBody,
  }),
  {
    name: 'DELETE /servers/{id}/os-volume_attachments/{volume}',
    method: 'DELETE',
    path: '/servers/$SERVER/os-volume_attachments/{volume}',
    numRuns: runs(16),
    cases: fc.record({
      caller: owners,
      version: V,
      body: fc.oneof({ weight: 3, arbitrary: fc.constant<BodyCase>({}) }, { weight: 1, arbitrary: bodyCases(weirdValue) }),
      vars: fc.record({ volume: fc.oneof({ weight: 4, arbitrary: fc.constant('$ATTACHED') }, { weight: 2, arbitrary: fc.constantFrom('$AVAILABLE', '$SERVER', '00000000-0000-0000-0000-000000000000', 'not-a-uuid', ' ', '__proto__', 'x'.repeat(3000), '..') }) }),
    }),
  },
  versionedTarget({
    name: 'POST /servers',
    method: 'POST',
    path: '/servers',
    who: owners,
    numRuns: runs(40),
    body: serverCreateBody,
  }),
];

// ---------------------------------------------------------------------------------------------

beforeAll(async () => {
  stack = await useLocalStack();
  nova = novaClient(stack, { token: 'admin:admin' });
  demoNova = novaClient(stack, { token: 'demo:demo' });
  demoCinder = cinderClient(stack, 'demo:demo');
}, 180_000);
afterAll(async () => {
  await settleExecutions(LONG).catch(() => undefined);
  await stack?.stop();
});

describe('fuzzed server requests: no 5xx, and a refused request changes nothing', () => {
  test('every server action and every server route with a body is fuzzed', () => {
    const names = TARGETS.map((t) => t.name);
    for (const action of ['os-stop', 'os-start', 'reboot', 'os-migrateLive', 'migrate', 'resize', 'confirmResize', 'revertResize', 'evacuate', 'shelve', 'shelveOffload', 'unshelve', 'pause', 'unpause', 'suspend', 'resume', 'lock', 'unlock', 'rebuild']) {
      expect(names).toContain(`POST /servers/{id}/action ${action}`);
    }
    for (const route of ['POST /servers/{id}/os-volume_attachments', 'PUT /servers/{id}/os-volume_attachments/{volume}', 'DELETE /servers/{id}/os-volume_attachments/{volume}', 'POST /servers']) expect(names).toContain(route);
  });

  test.each(TARGETS.map((t) => [t.name, t] as const))('%s', async (_name, target) => {
    stats.clear();
    repairs.length = 0;
    Object.assign(timing, { setup: 0, request: 0, snapshot: 0 });
    const saved = Object.fromEntries(Object.keys(target.env ?? {}).map((k) => [k, process.env[k]]));
    Object.assign(process.env, target.env ?? {});
    onTestFinished(() => {
      for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k];
      else process.env[k] = v;
      console.log(
        `fuzz ${target.name}: ${[...stats].sort().map(([s, n]) => `${s}×${n}`).join(' ')} (ms: fixtures+baseline ${timing.setup}, requests ${timing.request}, snapshots ${timing.snapshot}; repairs ${repairs.join(',') || 'none'})`,
      );
    });
    dirty = true;
    await fc.assert(
      fc.asyncProperty(target.cases, (c) => check(target, c)),
      { seed: SEED, numRuns: target.numRuns, endOnFailure: process.env.FERRY_FUZZ_SHRINK === '0' },
    );
    if (!target.no2xx) expect([...stats.keys()].some((s) => s.startsWith('2')), `no 2xx among ${JSON.stringify([...stats])}`).toBe(true);
    // The next target starts from its own fixtures' state (a shelveOffload's SHELVED server is unshelved with the default offload time).
    dirty = true;
  }, 300_000);
});
