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
 * the shrunk counterexample and the request as sent. FERRY_FUZZ_RUNS scales the run counts.
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
import { ADMIN, apiEvent, DEMO, lambdaContext, OTHER, type Caller } from '../support/events.js';
import {
  bigStringMap,
  bodyCases,
  connector,
  field,
  orInvalid,
  queryStrings,
  smallStringMap,
  specKey,
  specMap,
  struct,
  TRICKY_STRINGS,
  weirdValue,
  withOwnKeys,
  wrap,
  validOf,
  type BodyCase,
  describeRequest,
  isFaultBody,
  type SentRequest,
} from '../support/fuzz-arbitraries.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const SEED = Number(process.env.FERRY_FUZZ_SEED ?? 424242);
const SCALE = Number(process.env.FERRY_FUZZ_RUNS ?? 1);
const runs = (n: number) => Math.max(1, Math.round(n * SCALE));
const BASE = '/volume/v3';

let stack: TestLocalStack;

// ---------------------------------------------------------------------------------------------
// Fixtures, made afresh when a 2xx may have used them up

type FixtureName = 'VOLUME' | 'IN_USE' | 'DETACHING' | 'ATT_RESERVED' | 'ATT_ATTACHING' | 'LEGACY' | 'TYPE' | 'DEFAULT_TYPE';

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

interface Case {
  caller: Caller;
  version: string;
  body?: BodyCase;
  query?: string;
  /** Substituted for `{name}` in the target's path (URL-encoded). */
  vars?: Record<string, string>;
}

interface Target {
  name: string;
  method: 'GET' | 'POST' | 'PUT';
  /** With `$FIXTURE` placeholders and `{var}`s from the case. */
  path: string;
  cases: fc.Arbitrary<Case>;
  numRuns: number;
  /** Fixtures a 2xx may have consumed (made afresh before the next run). */
  consumes?: FixtureName[];
}

type Sent = SentRequest;

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
// The endpoints

const V = (...versions: string[]) => fc.constantFrom(...versions);
const callers = (...cs: Caller[]) => fc.constantFrom(...cs);
const owners = callers(DEMO, DEMO, ADMIN, OTHER);
const admins = callers(ADMIN, ADMIN, ADMIN, DEMO);

function bodyTarget(t: Omit<Target, 'cases'> & { body: fc.Arbitrary<unknown>; who: fc.Arbitrary<Caller>; versions?: fc.Arbitrary<string>; vars?: fc.Arbitrary<Record<string, string>> }): Target {
  return {
    ...t,
    cases: fc.record({ caller: t.who, version: t.versions ?? V('3.70', '3.70', '3.0', '3.59'), body: bodyCases(t.body), vars: t.vars ?? fc.constant({}) }),
  };
}

function queryTarget(t: Omit<Target, 'cases' | 'method'> & { names: string[]; values: fc.Arbitrary<string>; who: fc.Arbitrary<Caller>; versions?: fc.Arbitrary<string>; prefix?: fc.Arbitrary<[string, string][]> }): Target {
  return { ...t, method: 'GET', cases: fc.record({ caller: t.who, version: t.versions ?? V('3.70', '3.0', '3.45'), query: queryStrings(t.names, t.values, t.prefix) }) };
}

const name = field(fc.string({ maxLength: 20 }));
const metadata = orInvalid(smallStringMap, bigStringMap);
const size = field(fc.oneof(fc.integer({ min: 1, max: 3 }), fc.constantFrom('1', '2')));
const noneOr = (a: fc.Arbitrary<unknown>) => fc.oneof(fc.constant(null), a);

const volumeActions: Record<string, { body: fc.Arbitrary<unknown>; path: string; who: fc.Arbitrary<Caller> }> = {
  'os-reset_status': {
    path: '/volumes/$VOLUME/action',
    who: admins,
    body: struct({
      status: field(fc.constantFrom('available', 'error', 'in-use', 'creating', 'AVAILABLE', 'deleting', 'bogus')),
      attach_status: field(fc.constantFrom('attached', 'detached', 'reserved', 'DETACHED')),
      migration_status: field(fc.constantFrom('migrating', 'none', 'error', 'success', 'bogus')),
    }),
  },
  'os-extend': { path: '/volumes/$VOLUME/action', who: owners, body: struct({ new_size: field(fc.integer({ min: 0, max: 4 })) }) },
  'os-begin_detaching': { path: '/volumes/$IN_USE/action', who: owners, body: field(fc.constantFrom({}, null)) },
  'os-roll_detaching': { path: '/volumes/$DETACHING/action', who: owners, body: field(fc.constantFrom({}, null)) },
  'os-unmanage': { path: '/volumes/$VOLUME/action', who: admins, body: field(fc.constantFrom({}, null)) },
};

const TARGETS: Target[] = [
  bodyTarget({
    name: 'POST /volumes',
    method: 'POST',
    path: '/volumes',
    who: owners,
    numRuns: runs(120),
    body: wrap(
      'volume',
      struct(
        {
          size,
          name,
          description: name,
          display_name: name,
          display_description: name,
          volume_type: orInvalid(fc.constantFrom('default', 'multiattach', '$DEFAULT_TYPE', '$TYPE'), fc.constantFrom('nonexistent', '00000000-0000-0000-0000-000000000000')),
          availability_zone: orInvalid(fc.constant('nova'), fc.constant('other')),
          metadata,
          multiattach: orInvalid(fc.constant(false), fc.constant(true)),
          server_id: field(fc.uuid()),
          snapshot_id: orInvalid(fc.constant(null), fc.uuid()),
          source_volid: orInvalid(fc.constant(null), fc.constant('$VOLUME')),
          imageRef: field(fc.constant(null)),
          group_id: field(fc.constant(null)),
          scheduler_hints: weirdValue,
        },
        { required: ['size'] },
      ),
    ),
  }),
  bodyTarget({
    name: 'PUT /volumes/{id}',
    method: 'PUT',
    path: '/volumes/$VOLUME',
    who: owners,
    numRuns: runs(120),
    body: wrap('volume', struct({ name, description: name, display_name: name, display_description: name, metadata, size })),
  }),
  ...Object.entries(volumeActions).map(([action, a]) =>
    bodyTarget({
      name: `POST /volumes/{id}/action ${action}`,
      method: 'POST',
      path: a.path,
      who: a.who,
      numRuns: runs(80),
      body: wrap(action, a.body),
      consumes: ['VOLUME', 'IN_USE', 'DETACHING'],
    }),
  ),
  bodyTarget({
    name: 'POST /volumes/{id}/action (several or unknown actions)',
    method: 'POST',
    path: '/volumes/$VOLUME/action',
    who: admins,
    // Few of these bodies are valid, so this target keeps its full run count at any FERRY_FUZZ_RUNS
    // below 1: the check that some request went through (2xx) needs them.
    numRuns: Math.max(runs(80), 80),
    body: fc
      .array(fc.tuple(fc.oneof(fc.constantFrom(...Object.keys(volumeActions), 'os-attach', 'os-detach', 'os-force_delete', '__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf'), fc.string({ maxLength: 10 })), weirdValue), { maxLength: 3 })
      .map((pairs) => withOwnKeys({}, Object.fromEntries(pairs))),
    consumes: ['VOLUME'],
  }),
  bodyTarget({
    name: 'POST /types',
    method: 'POST',
    path: '/types',
    who: admins,
    numRuns: runs(100),
    body: wrap(
      'volume_type',
      struct({
        name: field(fc.oneof(fc.string({ minLength: 1, maxLength: 16 }), fc.constantFrom('default', 'multiattach', ' ', 'x'.repeat(255), '名前'.repeat(127)))),
        description: name,
        extra_specs: fc.oneof({ weight: 6, arbitrary: field(specMap) }, { weight: 1, arbitrary: bigStringMap }),
        'os-volume-type-access:is_public': field(fc.oneof(fc.boolean(), fc.constantFrom('True', 'False', 'yes', 'off'))),
        is_public: weirdValue,
      }),
    ),
  }),
  bodyTarget({
    name: 'PUT /types/{id}',
    method: 'PUT',
    path: '/types/$TYPE',
    who: admins,
    numRuns: runs(100),
    body: wrap(
      'volume_type',
      struct({
        name: field(fc.oneof(fc.string({ minLength: 1, maxLength: 16 }), fc.constantFrom('default', 'multiattach', ' ', '', 'x'.repeat(256)))),
        description: name,
        is_public: field(fc.oneof(fc.boolean(), fc.constantFrom('True', 'False', 'yes', 'off'))),
      }),
    ),
  }),
  bodyTarget({
    name: 'POST /types/{id}/extra_specs',
    method: 'POST',
    path: '/types/$TYPE/extra_specs',
    who: admins,
    numRuns: runs(100),
    // A type holds at most 128 extra specs: after a 2xx, fuzz a fresh type so the limit does not turn every later valid body into a 400.
    consumes: ['TYPE'],
    body: fc.oneof(
      { weight: 6, arbitrary: wrap('extra_specs', specMap) },
      { weight: 1, arbitrary: bigStringMap.map((m) => ({ extra_specs: m })) },
      { weight: 2, arbitrary: specMap },
    ),
  }),
  {
    name: 'PUT /types/{id}/extra_specs/{key}',
    method: 'PUT',
    path: '/types/$TYPE/extra_specs/{key}',
    numRuns: runs(100),
    consumes: ['TYPE'],
    cases: fc.record({ caller: admins, version: V('3.70'), key: fc.oneof(specKey, fc.constantFrom(...TRICKY_STRINGS.filter((s) => s !== '' && s.length < 300))) }).chain(({ caller, version, key }) =>
      fc
        .oneof(
          { weight: 5, arbitrary: field(fc.string({ maxLength: 20 })).map((v) => withOwnKeys({}, { [key]: v })) },
          { weight: 2, arbitrary: fc.tuple(field(fc.string({ maxLength: 8 })), specMap).map(([v, more]) => withOwnKeys(more, { [key]: v })) },
          { weight: 1, arbitrary: specMap },
        )
        .chain((body) => bodyCases(fc.constant(body)))
        .map((body): Case => ({ caller, version, body, vars: { key } })),
    ),
  },
  bodyTarget({
    name: 'POST /manageable_volumes',
    method: 'POST',
    path: '/manageable_volumes',
    who: admins,
    versions: V('3.70', '3.8', '3.7'),
    numRuns: runs(100),
    consumes: ['LEGACY'],
    body: wrap(
      'volume',
      struct(
        {
          host: orInvalid(fc.constantFrom('ferry@lvm-b#pool0', 'ferry@lvm-b'), fc.constantFrom('ferry@lvm-b#nopool', 'ferry@lvm-a#pool0', 'nohost@x', '#', '')),
          cluster: orInvalid(fc.constant(null), fc.constant('ferry@lvm-b')),
          ref: field(struct({ 'source-name': orInvalid(fc.constant('$LEGACY'), fc.constantFrom('missing', '', 'legacy-fuzz-1')), 'source-id': weirdValue }, { required: ['source-name'] })),
          name,
          description: name,
          volume_type: orInvalid(fc.constantFrom('default', 'multiattach', '$TYPE'), fc.constant('nonexistent')),
          availability_zone: orInvalid(fc.constant('nova'), fc.constant('other')),
          metadata,
          bootable: orInvalid(fc.oneof(fc.boolean(), fc.constantFrom('True', 'False', 'yes')), fc.constant('maybe')),
        },
        { required: ['host', 'ref'] },
      ),
    ),
  }),
  bodyTarget({
    name: 'POST /attachments',
    method: 'POST',
    path: '/attachments',
    who: owners,
    versions: V('3.70', '3.27', '3.54', '3.26'),
    numRuns: runs(120),
    consumes: ['VOLUME', 'IN_USE'],
    body: wrap(
      'attachment',
      struct(
        {
          volume_uuid: orInvalid(fc.constant('$VOLUME'), fc.oneof(fc.uuid(), fc.constant('$IN_USE'))),
          instance_uuid: field(fc.uuid()),
          connector: orInvalid(fc.oneof(validOf(connector), fc.constant({}), fc.constant(null)), connector),
          mode: field(fc.constantFrom('rw', 'ro')),
        },
        { required: ['volume_uuid'] },
      ),
    ),
  }),
  bodyTarget({
    name: 'PUT /attachments/{id}',
    method: 'PUT',
    path: '/attachments/$ATT_RESERVED',
    who: owners,
    versions: V('3.70', '3.27'),
    numRuns: runs(120),
    consumes: ['ATT_RESERVED'],
    body: wrap('attachment', struct({ connector: orInvalid(validOf(connector), connector) }, { required: ['connector'] })),
  }),
  bodyTarget({
    name: 'POST /attachments/{id}/action',
    method: 'POST',
    path: '/attachments/$ATT_ATTACHING/action',
    who: owners,
    versions: V('3.70', '3.44', '3.43'),
    numRuns: runs(80),
    consumes: ['ATT_ATTACHING'],
    body: fc.oneof(wrap('os-complete', field(fc.constantFrom(null, {}))), fc.dictionary(fc.constantFrom('os-complete', 'os-extend', '__proto__', 'constructor', 'x'), weirdValue, { maxKeys: 2 })),
  }),

  // Query strings of the list endpoints
  ...['/volumes', '/volumes/detail'].map((path) =>
    queryTarget({
      name: `GET ${path}`,
      path,
      who: owners,
      numRuns: runs(path.endsWith('detail') ? 60 : 100),
      names: ['limit', 'marker', 'offset', 'sort', 'sort_key', 'sort_dir', 'all_tenants', 'with_count', 'name', 'status', 'metadata', 'bootable', 'size', 'project_id', 'host', 'group_id', 'created_at', 'availability_zone', 'migration_status'],
      values: fc.oneof(
        fc.constantFrom('1', '0', '-1', '1000', '1001', '2147483648', 'id:asc', 'name:desc,size', 'size:up', '__proto__', 'constructor:asc', 'hasOwnProperty', 'toString:desc', 'valueOf', "{'a': 'b'}", '{"a": 1}', 'available', 'demo', 'true', '$VOLUME'),
        fc.constantFrom('id', 'name', 'status', 'created_at').chain((k) => fc.constantFrom('asc', 'desc', 'ASC', 'sideways').map((d) => `${k}:${d}`)),
      ),
    }),
  ),
  queryTarget({ name: 'GET /types', path: '/types', who: owners, numRuns: runs(50), names: ['is_public', 'limit', 'sort'], values: fc.constantFrom('true', 'false', 'None', 'none', 'maybe', '1') }),
  ...['/manageable_volumes', '/manageable_volumes/detail'].map((path) =>
    queryTarget({
      name: `GET ${path}`,
      path,
      who: admins,
      versions: V('3.70', '3.8'),
      numRuns: runs(path.endsWith('detail') ? 40 : 60),
      names: ['host', 'cluster', 'sort_keys', 'sort_key', 'sort_dirs', 'sort_dir', 'marker', 'offset', 'limit'],
      values: fc.constantFrom('ferry@lvm-a', 'ferry@lvm-b#pool0', 'nohost', 'size', 'reference', '__proto__', 'asc', 'desc', 'up', '1', '-1', '1.5', '1e3', 'Infinity', 'legacy-fuzz-1', ''),
      prefix: fc.constantFrom<[string, string][]>([['host', 'ferry@lvm-b']], [['host', 'ferry@lvm-a#pool0']], [['cluster', 'ferry@lvm-b']], []),
    }),
  ),
  ...['/attachments', '/attachments/detail'].map((path) =>
    queryTarget({
      name: `GET ${path}`,
      path,
      who: owners,
      versions: V('3.70', '3.27'),
      numRuns: runs(path.endsWith('detail') ? 50 : 80),
      names: ['limit', 'marker', 'offset', 'sort', 'sort_key', 'sort_dir', 'all_tenants', 'volume_id', 'instance_id', 'instance_uuid', 'attach_status', 'status', 'id'],
      values: fc.constantFrom('1', '0', '-1', ' 2', '1001', 'id:asc', 'created_at:desc,id', 'volume_id:up', '__proto__', 'constructor', 'constructor:asc', 'hasOwnProperty', 'toString', 'attached', 'true', '$VOLUME'),
    }),
  ),
];

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
