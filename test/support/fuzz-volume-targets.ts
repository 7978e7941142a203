/**
 * The endpoints fuzzed by test/integration/fuzz.test.ts: for every Cinder endpoint that takes a body,
 * and every list endpoint, who may call it, at which microversions, the arbitraries of its bodies or
 * query strings (built from test/support/fuzz-arbitraries.ts), how many runs, and the fixtures a 2xx
 * may consume. Paths hold `$FIXTURE` placeholders the test resolves to fresh fixtures.
 */
import fc from 'fast-check';
import { ADMIN, DEMO, OTHER, type Caller } from './events.js';
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
  type SentRequest,
} from './fuzz-arbitraries.js';

/** FERRY_FUZZ_RUNS scales the run counts. */
export const SCALE = Number(process.env.FERRY_FUZZ_RUNS ?? 1);
export const runs = (n: number) => Math.max(1, Math.round(n * SCALE));

/** The fixtures a path or body may name as `$NAME`. */
export type FixtureName = 'VOLUME' | 'IN_USE' | 'DETACHING' | 'ATT_RESERVED' | 'ATT_ATTACHING' | 'LEGACY' | 'TYPE' | 'DEFAULT_TYPE';

export interface Case {
  caller: Caller;
  version: string;
  body?: BodyCase;
  query?: string;
  /** Substituted for `{name}` in the target's path (URL-encoded). */
  vars?: Record<string, string>;
}

export interface Target {
  name: string;
  method: 'GET' | 'POST' | 'PUT';
  /** With `$FIXTURE` placeholders and `{var}`s from the case. */
  path: string;
  cases: fc.Arbitrary<Case>;
  numRuns: number;
  /** Fixtures a 2xx may have consumed (made afresh before the next run). */
  consumes?: FixtureName[];
}

export type Sent = SentRequest;

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

export const volumeActions: Record<string, { body: fc.Arbitrary<unknown>; path: string; who: fc.Arbitrary<Caller> }> = {
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

export const TARGETS: Target[] = [
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
