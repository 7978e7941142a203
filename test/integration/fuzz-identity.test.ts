/**
 * Fuzzed requests against the identity API (functions/api/identity.ts) against DynamoDB Local:
 * token requests with every method and scope, near-valid and hostile; the admin writes (projects,
 * users, roles, grants, application credentials) as an admin and as a member; list queries.
 *
 * Properties, per request:
 * - never a 5xx, and every 4xx is Keystone's body `{"error": {"code": <status>, "message", "title"}}`;
 * - a 4xx, and any GET, changes nothing: the token table (where the identity API keeps everything)
 *   is the same before and after. A 2xx may write (valid bodies are generated too): the snapshot is
 *   retaken after it.
 *
 * Deterministic: FERRY_FUZZ_SEED seeds it; FERRY_FUZZ_RUNS scales the run count (1,000 at 1, as
 * `npm run test:fuzz` runs it; `npm test` runs fewer).
 */
import fc from 'fast-check';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { handler } from '../../functions/api/identity.js';
import { scanAll } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { ensureUser } from '../../functions/identity/seed.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { diffSnapshots, stableJson, type Snapshot } from '../support/api-state.js';
import { apiEvent, lambdaContext } from '../support/events.js';
import { bodyCases, describeRequest, field, queryStrings, struct, TRICKY_STRINGS, weirdValue, wrap, type BodyCase } from '../support/fuzz-arbitraries.js';
import { useLocalDynamo } from '../support/dynamo.js';

const SEED = Number(process.env.FERRY_FUZZ_SEED ?? 424242);
const SCALE = Number(process.env.FERRY_FUZZ_RUNS ?? 1);
const RUNS = Math.max(1, Math.round(1000 * SCALE));

let ddb: LocalDynamo;
let ids: { admin: { userId: string; projectId: string }; demo: { userId: string; projectId: string }; roles: string[] };
const tokens: Record<'admin' | 'demo' | 'none' | 'bogus', string | undefined> = { admin: undefined, demo: undefined, none: undefined, bogus: 'notused' };
const savedMode = process.env.FERRY_AUTH_MODE;

async function send(method: string, path: string, opts: { token?: string; body?: BodyCase; query?: string }) {
  const b = opts.body ?? {};
  const text = b.raw ?? (b.value === undefined ? undefined : JSON.stringify(b.value));
  const event = apiEvent({
    method,
    path,
    query: opts.query,
    caller: null,
    headers: { ...(opts.token ? { 'X-Auth-Token': opts.token } : {}), ...(b.contentType ? { 'Content-Type': b.contentType } : {}) },
    ...(text === undefined ? {} : { body: text }),
  });
  if (b.base64 && text !== undefined) Object.assign(event, { body: text, isBase64Encoded: true });
  const res = await handler(event);
  return { status: res.statusCode ?? 0, body: res.body ?? '', headers: (res.headers ?? {}) as Record<string, string>, sent: describeRequest({ method, path, query: opts.query, caller: opts.token ?? 'none', version: '-', contentType: b.contentType, base64: b.base64, body: text }) };
}

async function snapshot(): Promise<Snapshot> {
  const snap: Snapshot = new Map();
  for (const item of await scanAll({ TableName: tableName('tokens'), ConsistentRead: true })) snap.set(`${String(item.pk)}|${String(item.sk)}`, stableJson(item));
  return snap;
}

beforeAll(async () => {
  ddb = await useLocalDynamo();
  process.env.FERRY_AUTH_MODE = 'token';
  const admin = await ensureUser({ name: 'admin', password: 'admin-pw', project: 'admin', roles: ['admin'] });
  const demo = await ensureUser({ name: 'demo', password: 'demo-pw', project: 'demo', roles: ['member', 'reader'] });
  const roles = (await scanAll({ TableName: tableName('tokens') })).filter((i) => String(i.pk).startsWith('ROLE#')).map((i) => String(i.id));
  ids = { admin, demo, roles };
  for (const who of ['admin', 'demo'] as const) {
    const res = await send('POST', '/identity/v3/auth/tokens', {
      body: { value: { auth: { identity: { methods: ['password'], password: { user: { name: who, domain: { id: 'default' }, password: `${who}-pw` } } }, scope: { project: { name: who, domain: { name: 'Default' } } } } } },
    });
    expect(res.status).toBe(201);
    tokens[who] = res.headers['X-Subject-Token'];
  }
}, 60_000);
afterAll(async () => {
  if (savedMode === undefined) delete process.env.FERRY_AUTH_MODE;
  else process.env.FERRY_AUTH_MODE = savedMode;
  await ddb?.stop();
});

// ---------------------------------------------------------------------------------------------
// Bodies: near-valid structures whose every field is sometimes valid, sometimes anything

const known = () => ({
  userNames: fc.constantFrom('admin', 'demo', 'nobody', ...TRICKY_STRINGS),
  userIds: fc.constantFrom(ids.admin.userId, ids.demo.userId, 'ffff', ''),
  projectIds: fc.constantFrom(ids.admin.projectId, ids.demo.projectId, '0'.repeat(32)),
  projectNames: fc.constantFrom('admin', 'demo', 'nowhere'),
  passwords: fc.constantFrom('admin-pw', 'demo-pw', 'wrong', ''),
  domains: fc.oneof(fc.constant({ id: 'default' }), fc.constant({ name: 'Default' }), fc.constant({ id: 'other' }), fc.constant({}), weirdValue),
});

function authBody() {
  const k = known();
  const user = struct({ id: field(k.userIds), name: field(k.userNames), domain: field(k.domains), password: field(k.passwords) });
  const identity = struct(
    {
      methods: field(fc.array(fc.constantFrom('password', 'token', 'application_credential', 'totp', 'oauth1'), { minLength: 1, maxLength: 2 })),
      password: field(struct({ user: field(user) })),
      token: field(struct({ id: field(fc.constantFrom(tokens.admin!, tokens.demo!, 'notused', '')) })),
      application_credential: field(struct({ id: field(fc.constantFrom('ffff', '')), name: field(fc.string({ maxLength: 8 })), secret: field(fc.string({ maxLength: 8 })), user: field(user) })),
    },
    { required: ['methods'] },
  );
  const scope = fc.oneof(
    fc.constant('unscoped'),
    struct({ project: field(struct({ id: field(k.projectIds), name: field(k.projectNames), domain: field(k.domains) })) }, { required: ['project'] }),
    struct({ domain: field(k.domains) }),
    struct({ system: field(fc.constant({ all: true })) }),
    weirdValue,
  );
  return wrap('auth', struct({ identity: field(identity), scope: field(scope) }, { required: ['identity'] }));
}

const name = fc.oneof(fc.string({ minLength: 1, maxLength: 12 }), fc.constantFrom(...TRICKY_STRINGS), fc.constantFrom('admin', 'demo', 'member'));
const entityBodies = () => {
  const k = known();
  return {
    project: wrap('project', struct({ name: field(name), description: field(fc.string({ maxLength: 20 })), enabled: field(fc.boolean()), domain_id: field(fc.constantFrom('default', 'other')) })),
    user: wrap('user', struct({ name: field(name), password: field(fc.string({ maxLength: 12 })), default_project_id: field(k.projectIds), enabled: field(fc.boolean()), email: field(fc.string({ maxLength: 12 })) })),
    role: wrap('role', struct({ name: field(name), description: field(fc.string({ maxLength: 12 })) })),
    appcred: wrap(
      'application_credential',
      struct({ name: field(name), roles: field(fc.array(fc.oneof(fc.constant({ name: 'member' }), fc.constant({ name: 'admin' }), fc.constant({ id: 'x' })), { maxLength: 2 })), expires_at: field(fc.constantFrom('2099-01-01T00:00:00Z', '2000-01-01T00:00:00Z', 'soon')), secret: field(fc.string({ maxLength: 12 })) }),
    ),
  };
};

test(`${RUNS} fuzzed identity requests: no 5xx, Keystone error bodies, a refused request writes nothing`, async () => {
  const e = entityBodies();
  const caller = fc.constantFrom<keyof typeof tokens>('admin', 'demo', 'demo', 'none', 'bogus');
  const anyId = fc.oneof(fc.constantFrom(ids.admin.userId, ids.demo.userId, ids.admin.projectId, ids.demo.projectId, ...ids.roles), fc.constantFrom(...TRICKY_STRINGS.filter((t) => !t.includes('/'))), fc.stringMatching(/^[0-9a-f]{0,32}$/));
  const request = fc.oneof(
    { weight: 6, arbitrary: fc.record({ method: fc.constant('POST'), path: fc.constant('/identity/v3/auth/tokens'), caller: fc.constant<keyof typeof tokens>('none'), body: bodyCases(authBody()) }) },
    { weight: 2, arbitrary: fc.record({ method: fc.constant('POST'), path: fc.constant('/identity/v3/projects'), caller, body: bodyCases(e.project) }) },
    { weight: 2, arbitrary: fc.record({ method: fc.constant('POST'), path: fc.constant('/identity/v3/users'), caller, body: bodyCases(e.user) }) },
    { weight: 1, arbitrary: fc.record({ method: fc.constant('POST'), path: fc.constant('/identity/v3/roles'), caller, body: bodyCases(e.role) }) },
    { weight: 1, arbitrary: fc.record({ method: fc.constant('PATCH'), path: fc.constantFrom(`/identity/v3/users/${ids.demo.userId}`, `/identity/v3/projects/${ids.demo.projectId}`, '/identity/v3/users/ffff'), caller, body: bodyCases(fc.oneof(e.user, e.project)) }) },
    { weight: 2, arbitrary: fc.record({ method: fc.constant('POST'), path: fc.constantFrom(`/identity/v3/users/${ids.demo.userId}/application_credentials`, `/identity/v3/users/${ids.admin.userId}/application_credentials`), caller, body: bodyCases(e.appcred) }) },
    { weight: 1, arbitrary: fc.record({ method: fc.constantFrom('PUT', 'HEAD', 'GET'), path: fc.tuple(anyId, anyId, anyId).map(([p, u, r]) => `/identity/v3/projects/${encodeURIComponent(p)}/users/${encodeURIComponent(u)}/roles/${encodeURIComponent(r)}`), caller }) },
    {
      weight: 2,
      arbitrary: fc.record({
        method: fc.constantFrom('GET', 'HEAD'),
        path: fc.oneof(
          fc.constantFrom('/identity', '/identity/v3', '/identity/v3/projects', '/identity/v3/users', '/identity/v3/roles', '/identity/v3/role_assignments', '/identity/v3/auth/tokens', '/identity/v3/auth/catalog', '/identity/v3/auth/projects', '/identity/v3/domains', '/identity/v3/nothing', '/identity/v3/%zz'),
          anyId.map((id) => `/identity/v3/users/${encodeURIComponent(id)}/projects`),
        ),
        caller,
        query: queryStrings(['name', 'user.id', 'scope.project.id', 'role.id', 'include_names', 'nocatalog'], fc.oneof(anyId, fc.constantFrom('1', 'true', 'demo'))),
      }),
    },
  );

  const statuses = new Map<number, number>();
  let before = await snapshot();
  await fc.assert(
    fc.asyncProperty(request, async (r) => {
      const res = await send(r.method, r.path, { token: tokens[r.caller], body: 'body' in r ? r.body : undefined, query: 'query' in r ? r.query : undefined });
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      expect(res.status, res.sent).toBeGreaterThanOrEqual(200);
      expect(res.status, `${res.sent} -> ${res.body}`).toBeLessThan(500);
      if (res.status >= 400 && r.method !== 'HEAD') {
        const err = JSON.parse(res.body).error;
        expect(err, `${res.sent} -> ${res.body}`).toMatchObject({ code: res.status, title: expect.any(String), message: expect.any(String) });
      }
      const after = await snapshot();
      if (res.status >= 400 || r.method === 'GET' || r.method === 'HEAD') expect(diffSnapshots(before, after), `${res.sent} -> ${res.status} changed state`).toEqual([]);
      before = after;
    }),
    { seed: SEED, numRuns: RUNS, endOnFailure: true },
  );
  // The generators reach both sides: requests that succeed (and write) and every kind of refusal.
  const seen = [...statuses.keys()];
  if (RUNS >= 200) expect(seen.filter((st) => st < 300).length, JSON.stringify([...statuses])).toBeGreaterThan(0);
  if (RUNS >= 200) expect([400, 401, 403, 404].filter((st) => seen.includes(st)), JSON.stringify([...statuses])).toEqual([400, 401, 403, 404]);
}, 600_000);
