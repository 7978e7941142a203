/**
 * Fuzzed requests against the composed Cinder handler (functions/api/volume.ts), run in-process
 * against the embedded local stack (DynamoDB Local, local backends, the volume machines running):
 * every endpoint that takes a body gets arbitrary JSON, near-valid bodies with wrong types and
 * values, malformed text and wrong content types; every list endpoint gets hostile query strings.
 *
 * Properties, per request:
 * - never a 5xx (nor a response without a status), and every 4xx is a fault body
 *   `{"<fault>": {"code": <status>, "message": ...}}`;
 * - a request answered 4xx changes nothing: the whole volume table (Scan), every backend's volumes
 *   and connections (driver) and the backends' directories are the same before and after (with
 *   the volume machines' executions settled); so does any GET, whatever its answer.
 * A 2xx may change state (valid bodies are generated too): the snapshot is retaken after it, and
 * the fixtures it may have consumed are made afresh.
 *
 * Deterministic: FERRY_FUZZ_SEED (default below) seeds every property; a failure prints the seed,
 * the shrunk counterexample and the request as sent. FERRY_FUZZ_RUNS scales the run counts. The
 * endpoints, their arbitraries and run counts: test/support/fuzz-volume-targets.ts.
 */
import fc from 'fast-check';
import type { APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { afterAll, afterEach, beforeAll, describe, expect, onTestFinished, test } from 'vitest';
import { getAttachmentRecord } from '../../functions/attachments/repo.js';
import { handler } from '../../functions/api/volume.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { getVolume, updateVolume } from '../../functions/volumes/repo.js';
import { createVolumeType, getVolumeTypeByName } from '../../functions/volumes/types.js';
import { attachedVolume, availableVolume, cleanUp, diffSnapshots, settleExecutions, snapshotState, volumeIs, type Snapshot } from '../support/api-state.js';
import { apiEvent, lambdaContext } from '../support/events.js';
import { describeRequest, isFaultBody } from '../support/fuzz-arbitraries.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';
import { TARGETS, volumeActions, type Case, type FixtureName, type Sent, type Target } from '../support/fuzz-volume-targets.js';

const SEED = Number(process.env.FERRY_FUZZ_SEED ?? 424242);
const BASE = '/volume/v3';

let stack: TestLocalStack;

// ---------------------------------------------------------------------------------------------
// Fixtures, made afresh when a 2xx may have used them up

let legacyCount = 0;
const makers: Record<FixtureName, () => Promise<string>> = {
  VOLUME: async () => (await availableVolume({ name: 'fuzz-target', metadata: { a: 'b' } })).id,
  IN_USE: async () => (await attachedVolume('attached')).volume.id,
  DETACHING: async () => {
    const { volume } = await attachedVolume('attached');
    await updateVolume(volume.id, { type: 'begin-detaching', at: new Date().toISOString() });
    return volume.id;
  },
  ATT_RESERVED: async () => (await attachedVolume('reserved')).attachmentId,
  ATT_ATTACHING: async () => (await attachedVolume('attaching')).attachmentId,
  LEGACY: async () => {
    const name = `legacy-fuzz-${++legacyCount}`;
    await (await driverForHost('ferry@lvm-b')).createVolume({ backendName: name, sizeGb: 1, pool: 'pool0' });
    return name;
  },
  TYPE: async () => (await createVolumeType({ name: `fuzz-type-${Date.now()}`, description: 'fuzzed', extraSpecs: { k1: 'v1' } })).id,
  DEFAULT_TYPE: async () => (await getVolumeTypeByName('default')).id,
};
const fixtures = new Map<FixtureName, string>();

const at = () => new Date().toISOString();
/**
 * After a 2xx that may have changed a fixture: put it back where the next run needs it if that is
 * one cheap write, and report whether it is usable (otherwise a new one is made).
 */
const restorers: Partial<Record<FixtureName, (id: string) => Promise<boolean>>> = {
  VOLUME: async (id) => {
    const v = await getVolume(id);
    if (!v || Object.keys(v.attachments ?? {}).length > 0) return false;
    if (v.status !== 'available' || v.attachStatus !== 'detached' || v.migrationStatus !== null) {
      await updateVolume(id, { type: 'reset-status', at: at(), status: 'available', attachStatus: 'detached', migrationStatus: null });
    }
    return true;
  },
  IN_USE: async (id) => {
    const v = await getVolume(id);
    if (v?.status === 'detaching') await updateVolume(id, { type: 'roll-detaching', at: at() });
    return volumeIs(id, (x) => x.status === 'in-use' && x.attachStatus === 'attached');
  },
  DETACHING: async (id) => {
    const v = await getVolume(id);
    if (v?.status === 'in-use') await updateVolume(id, { type: 'begin-detaching', at: at() });
    return volumeIs(id, (x) => x.status === 'detaching');
  },
};

async function fixture(name: FixtureName): Promise<string> {
  let id = fixtures.get(name);
  if (id === undefined) {
    id = await makers[name]();
    fixtures.set(name, id);
    baseline = undefined;
  }
  return id;
}

/** Replaces `$NAME` placeholders (whole string values, and inside paths) with the fixtures' current ids. */
async function resolve(text: string): Promise<string> {
  let out = text;
  for (const m of text.match(/\$[A-Z_]+/g) ?? []) {
    if (m.slice(1) in makers) out = out.replaceAll(m, encodeURIComponent(await fixture(m.slice(1) as FixtureName)));
  }
  return out;
}

async function resolveValue(v: unknown): Promise<unknown> {
  if (typeof v === 'string' && /^\$[A-Z_]+$/.test(v) && v.slice(1) in makers) return fixture(v.slice(1) as FixtureName);
  if (Array.isArray(v)) return Promise.all(v.map(resolveValue));
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) Object.defineProperty(out, k, { value: await resolveValue(x), enumerable: true, writable: true, configurable: true });
    return out;
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// The state before each request

let baseline: Snapshot | undefined;
/** Answers by status for the current target, printed after it (so a person sees the fuzz reached past validation). */
const stats = new Map<string, number>();
const timing = { setup: 0, request: 0, snapshot: 0 };

async function currentState(): Promise<Snapshot> {
  await settleExecutions();
  return snapshotState(stack.dataDir);
}

// ---------------------------------------------------------------------------------------------
// One request

/** The event for a case, with every placeholder resolved (so fixtures are made before the baseline is taken). */
async function prepare(target: Target, c: Case): Promise<{ sent: Sent; event: ReturnType<typeof apiEvent> }> {
  let path = BASE + (await resolve(target.path));
  for (const [k, v] of Object.entries(c.vars ?? {})) path = path.replaceAll(`{${k}}`, encodeURIComponent(v));
  let body: string | undefined;
  if (c.body?.raw !== undefined) body = c.body.raw;
  else if (c.body && 'value' in c.body) body = JSON.stringify(await resolveValue(c.body.value)) ?? 'null';
  if (c.body?.base64 && body !== undefined && !body.startsWith('!')) {
    body = Buffer.from(await resolve(Buffer.from(body, 'base64').toString('utf8'))).toString('base64');
  }
  const query = await resolve(c.query ?? '');
  const headers: Record<string, string> = { 'OpenStack-API-Version': `volume ${c.version}` };
  if (c.body?.contentType) headers['content-type'] = c.body.contentType;
  const event = apiEvent({ method: target.method, path, query, headers, body, caller: c.caller });
  if (c.body?.base64) event.isBase64Encoded = true;
  const shown = c.body?.base64 && body && !body.startsWith('!') ? Buffer.from(body, 'base64').toString('utf8') : body;
  return { event, sent: { method: target.method, path, query, caller: c.caller.userId, version: c.version, contentType: c.body?.contentType, base64: c.body?.base64, body: shown } };
}

const show = describeRequest;

const isFault = isFaultBody;

/** One property run: the request, then the checks. Throws (with the request and the answer) on a violation. */
async function check(target: Target, c: Case): Promise<void> {
  let t = Date.now();
  const { sent, event } = await prepare(target, c);
  baseline ??= await currentState();
  timing.setup += Date.now() - t;

  t = Date.now();
  const res = (await handler(event, lambdaContext)) as APIGatewayProxyStructuredResultV2;
  timing.request += Date.now() - t;
  const status = res.statusCode;
  const text = typeof res.body === 'string' ? res.body : '';
  stats.set(String(status), (stats.get(String(status)) ?? 0) + 1);
  if (process.env.FERRY_FUZZ_TRACE) console.log(`${status} ${show(sent).slice(0, 400)} -> ${text.slice(0, 200)}`);
  const answer = `${status} ${text.slice(0, 600)}`;
  if (typeof status !== 'number' || status < 200 || status >= 500) {
    baseline = undefined; // whatever it changed is not the next run's doing
    throw new Error(`server error or no status: ${show(sent)}\n  -> ${answer}`);
  }
  if (status >= 400 && !isFault(text, status)) {
    baseline = undefined;
    throw new Error(`a ${status} without a fault body: ${show(sent)}\n  -> ${answer}`);
  }

  t = Date.now();
  const after = await currentState();
  timing.snapshot += Date.now() - t;
  if (status >= 400 || target.method === 'GET') {
    const diff = diffSnapshots(baseline, after);
    baseline = after;
    if (diff.length) throw new Error(`${target.method === 'GET' ? 'a GET' : `a refused request (${status})`} changed state: ${show(sent)}\n  -> ${answer}\n  ${diff.join('\n  ')}`);
  } else {
    t = Date.now();
    for (const f of target.consumes ?? []) {
      const id = fixtures.get(f);
      if (id !== undefined && !(await restorers[f]?.(id).catch(() => false))) fixtures.delete(f);
    }
    baseline = target.consumes?.length ? undefined : after;
    timing.setup += Date.now() - t;
  }
}

// ---------------------------------------------------------------------------------------------

const baseVolumes = new Set<string>();

beforeAll(async () => {
  stack = await useLocalStack();
  // A few volumes of demo's and one of admin's, so lists sort and page over more than one.
  for (let i = 0; i < 3; i++) baseVolumes.add((await availableVolume({ name: `listed-${i}`, metadata: { n: String(i) } })).id);
  baseVolumes.add((await availableVolume({ name: 'admins', auth: { userId: 'admin', projectId: 'admin', isAdmin: true, roles: ['admin'] } })).id);
  baseVolumes.add((await attachedVolume('attached')).volume.id);
});

/** After each endpoint: everything its 2xx made, and the fixtures it used up, removed (the snapshot stays small). */
afterEach(async () => {
  const volumes = new Set(baseVolumes);
  for (const f of ['VOLUME', 'IN_USE', 'DETACHING'] as const) if (fixtures.has(f)) volumes.add(fixtures.get(f)!);
  for (const f of ['ATT_RESERVED', 'ATT_ATTACHING'] as const) {
    const a = fixtures.has(f) ? await getAttachmentRecord(fixtures.get(f)!) : undefined;
    if (a) volumes.add(a.volumeId);
  }
  const types = new Set((await Promise.all(['default', 'multiattach'].map(getVolumeTypeByName))).map((t) => t.id));
  if (fixtures.has('TYPE')) types.add(fixtures.get('TYPE')!);
  await cleanUp({ volumes, types, backendNames: new Set(fixtures.has('LEGACY') ? [fixtures.get('LEGACY')!] : []) });
  baseline = undefined;
});
afterAll(async () => {
  await settleExecutions().catch(() => undefined);
  await stack?.stop();
});

describe('fuzzed requests: no 5xx, and a refused request changes nothing', () => {
  test('every endpoint with a body and every list endpoint is fuzzed', () => {
    const names = TARGETS.map((t) => t.name);
    for (const route of ['POST /volumes', 'PUT /volumes/{id}', 'POST /types', 'PUT /types/{id}', 'POST /types/{id}/extra_specs', 'PUT /types/{id}/extra_specs/{key}', 'POST /manageable_volumes', 'POST /attachments', 'PUT /attachments/{id}', 'POST /attachments/{id}/action', 'GET /volumes', 'GET /attachments', 'GET /manageable_volumes']) {
      expect(names).toContain(route);
    }
    for (const action of Object.keys(volumeActions)) expect(names).toContain(`POST /volumes/{id}/action ${action}`);
  });

  test.each(TARGETS.map((t) => [t.name, t] as const))('%s', async (_name, target) => {
    stats.clear();
    Object.assign(timing, { setup: 0, request: 0, snapshot: 0 });
    onTestFinished(() =>
      console.log(`fuzz ${target.name}: ${[...stats].sort().map(([s, n]) => `${s}×${n}`).join(' ')} (ms: fixtures+baseline ${timing.setup}, requests ${timing.request}, snapshots ${timing.snapshot})`),
    );
    await fc.assert(
      fc.asyncProperty(target.cases, (c) => check(target, c)),
      { seed: SEED, numRuns: target.numRuns, endOnFailure: process.env.FERRY_FUZZ_SHRINK === '0' },
    );
    // Not vacuous: some generated requests were valid and went all the way through.
    expect([...stats.keys()].some((s) => s.startsWith('2')), `no 2xx among ${JSON.stringify([...stats])}`).toBe(true);
  }, 120_000);
});
