/**
 * The identity API (functions/api/identity.ts) against DynamoDB Local, called as API Gateway calls
 * it (no authorizer: it checks tokens itself), with the authorizer of the other APIs alongside:
 * tokens by every method and scope, validation, revocation, and every refusal Keystone answers.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { handler as authorizer } from '../../functions/auth/authorizer.js';
import { createIdentityToken } from '../../functions/auth/tokens.js';
import { handler } from '../../functions/api/identity.js';
import { keystoneTime, type TokenSubject } from '../../functions/identity/model.js';
import { ensureUser } from '../../functions/identity/seed.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';
import { call as callHandler } from '../support/events.js';

let ddb: LocalDynamo;
let admin: { userId: string; projectId: string };
let demo: { userId: string; projectId: string };
const savedMode = process.env.FERRY_AUTH_MODE;

beforeAll(async () => {
  ddb = await useLocalDynamo();
  process.env.FERRY_AUTH_MODE = 'token';
  admin = await ensureUser({ name: 'admin', password: 'admin-pw', project: 'admin', roles: ['admin'] });
  demo = await ensureUser({ name: 'demo', password: 'demo-pw', project: 'demo', roles: ['member', 'reader'] });
});
afterAll(async () => {
  if (savedMode === undefined) delete process.env.FERRY_AUTH_MODE;
  else process.env.FERRY_AUTH_MODE = savedMode;
  await ddb?.stop();
});

const call = (method: string, path: string, opts: { token?: string; subject?: string; body?: unknown; query?: string } = {}) =>
  callHandler(handler as never, {
    method,
    path: `/identity${path}`,
    query: opts.query,
    body: opts.body,
    caller: null,
    headers: { ...(opts.token ? { 'X-Auth-Token': opts.token } : {}), ...(opts.subject ? { 'X-Subject-Token': opts.subject } : {}) },
  });

const password = (user: Record<string, unknown>, scope?: unknown) => ({
  auth: { identity: { methods: ['password'], password: { user } }, ...(scope === undefined ? {} : { scope }) },
});
const byName = (name: string, pw: string) => ({ name, domain: { name: 'Default' }, password: pw });
const projectScope = (name: string) => ({ project: { name, domain: { id: 'default' } } });

async function issue(body: unknown): Promise<{ token: string; body: any }> {
  const res = await call('POST', '/v3/auth/tokens', { body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { token: res.headers['X-Subject-Token']!, body: res.body };
}
const expectKeystoneError = (res: { status: number; body: any }, code: number, title: string) => {
  expect(res.status, JSON.stringify(res.body)).toBe(code);
  expect(res.body).toEqual({ error: { code, title, message: expect.any(String) } });
};

describe('version discovery (no token)', () => {
  test('GET /identity is 300 with the v3 document, GET /identity/v3 is 200', async () => {
    const root = await call('GET', '');
    expect(root.status).toBe(300);
    expect(root.body.versions.values[0]).toMatchObject({ id: 'v3.14', status: 'stable', links: [{ rel: 'self', href: 'http://127.0.0.1:8780/identity/v3/' }] });
    const v3 = await call('GET', '/v3/');
    expect(v3.status).toBe(200);
    expect(v3.body.version.id).toBe('v3.14');
  });
});

describe('behind API Gateway', () => {
  // An HTTP API's $default stage hands the function its own host and x-forwarded-proto https.
  const gateway = { host: 'a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com', 'x-forwarded-proto': 'https' };
  test('version links and every catalog URL name the API Gateway endpoint over https', async () => {
    const root = await callHandler(handler as never, { method: 'GET', path: '/identity', caller: null, headers: gateway });
    expect(root.body.versions.values[0].links).toEqual([{ rel: 'self', href: `https://${gateway.host}/identity/v3/` }]);
    const res = await callHandler(handler as never, { method: 'POST', path: '/identity/v3/auth/tokens', caller: null, headers: gateway, body: password(byName('demo', 'demo-pw'), projectScope('demo')) });
    expect(res.status).toBe(201);
    const urls = (res.body.token.catalog as { endpoints: { url: string }[] }[]).flatMap((c) => c.endpoints.map((e) => e.url));
    expect(urls.length).toBeGreaterThanOrEqual(8 * 3);
    for (const url of urls) expect(url).toMatch(new RegExp(`^https://${gateway.host.replaceAll('.', '\\.')}/(volume|share|compute|image|network|identity)`));
  });
});

describe('issuing tokens', () => {
  test('password by name and domain, scoped by project name: 201, X-Subject-Token, the token body with the catalog', async () => {
    const { token, body } = await issue(password(byName('demo', 'demo-pw'), projectScope('demo')));
    expect(token).toMatch(/^[\w-]{40,}$/);
    expect(body.token).toMatchObject({ methods: ['password'], user: { id: demo.userId, name: 'demo' }, project: { id: demo.projectId, name: 'demo' } });
    expect(body.token.roles.map((r: { name: string }) => r.name).sort()).toEqual(['member', 'reader']);
    expect(body.token.catalog.find((c: { type: string }) => c.type === 'volumev3').endpoints[0].url).toBe('http://127.0.0.1:8780/volume/v3');
    expect(Date.parse(body.token.expires_at) - Date.parse(body.token.issued_at)).toBe(3600_000);
  });

  test('password by user id, scoped by project id; admin gets the implied roles', async () => {
    const { body } = await issue(password({ id: admin.userId, password: 'admin-pw' }, { project: { id: admin.projectId } }));
    expect(body.token.roles.map((r: { name: string }) => r.name).sort()).toEqual(['admin', 'member', 'reader']);
  });

  test('no scope: the default project; ?nocatalog leaves the catalog out', async () => {
    const res = await call('POST', '/v3/auth/tokens', { body: password(byName('demo', 'demo-pw')), query: 'nocatalog' });
    expect(res.status).toBe(201);
    expect(res.body.token.project.id).toBe(demo.projectId);
    expect(res.body.token).not.toHaveProperty('catalog');
  });

  test('unscoped when asked: no project, and the other APIs refuse it', async () => {
    const { token, body } = await issue(password(byName('demo', 'demo-pw'), 'unscoped'));
    expect(body.token).not.toHaveProperty('project');
    expect(await authorizer({ headers: { 'X-Auth-Token': token } })).toEqual({ isAuthorized: false });
    // It still lists the projects it may scope to, and rescopes by the token method.
    expect((await call('GET', '/v3/auth/projects', { token })).body.projects.map((p: { name: string }) => p.name)).toEqual(['demo']);
    const rescoped = await issue({ auth: { identity: { methods: ['token'], token: { id: token } }, scope: { project: { id: demo.projectId } } } });
    expect(rescoped.body.token.methods).toEqual(['token', 'password']);
    expect(rescoped.body.token.audit_ids[1]).toBe(body.token.audit_ids[0]);
    expect(rescoped.body.token.expires_at).toBe(body.token.expires_at);
  });

  test('an application credential, by id and by name + user, is scoped to its project', async () => {
    const { token } = await issue(password(byName('demo', 'demo-pw'), projectScope('demo')));
    const made = await call('POST', `/v3/users/${demo.userId}/application_credentials`, { token, body: { application_credential: { name: 'ci' } } });
    expect(made.status).toBe(201);
    const { id, secret } = made.body.application_credential;
    const byId = await issue({ auth: { identity: { methods: ['application_credential'], application_credential: { id, secret } } } });
    expect(byId.body.token).toMatchObject({ methods: ['application_credential'], project: { id: demo.projectId }, application_credential: { id } });
    const byUser = await issue({ auth: { identity: { methods: ['application_credential'], application_credential: { name: 'ci', secret, user: { name: 'demo', domain: { id: 'default' } } } } } });
    expect(byUser.body.token.user.id).toBe(demo.userId);
    expectKeystoneError(await call('POST', '/v3/auth/tokens', { body: { auth: { identity: { methods: ['application_credential'], application_credential: { id, secret: 'wrong' } } } } }), 401, 'Unauthorized');
  });
});

describe('validating and revoking', () => {
  test('GET validates (with the catalog unless nocatalog), HEAD checks, DELETE revokes at once', async () => {
    const { token: caller } = await issue(password(byName('demo', 'demo-pw'), projectScope('demo')));
    const { token: subject } = await issue(password(byName('demo', 'demo-pw'), projectScope('demo')));
    const got = await call('GET', '/v3/auth/tokens', { token: caller, subject });
    expect(got.status).toBe(200);
    expect(got.headers['X-Subject-Token']).toBe(subject);
    expect(got.body.token.catalog.length).toBeGreaterThan(0);
    expect((await call('GET', '/v3/auth/tokens', { token: caller, subject, query: 'nocatalog' })).body.token).not.toHaveProperty('catalog');
    expect((await call('HEAD', '/v3/auth/tokens', { token: caller, subject })).status).toBe(200);
    expect((await authorizer({ headers: { 'X-Auth-Token': subject } })).isAuthorized).toBe(true);

    expect((await call('DELETE', '/v3/auth/tokens', { token: caller, subject })).status).toBe(204);
    expectKeystoneError(await call('GET', '/v3/auth/tokens', { token: caller, subject }), 404, 'Not Found');
    expectKeystoneError(await call('GET', '/v3/auth/catalog', { token: subject }), 401, 'Unauthorized');
    expect(await authorizer({ headers: { 'X-Auth-Token': subject } })).toEqual({ isAuthorized: false });
    expectKeystoneError(await call('POST', '/v3/auth/tokens', { body: { auth: { identity: { methods: ['token'], token: { id: subject } } } } }), 401, 'Unauthorized');
  });

  test('an expired token: 404 when validated, 401 when used', async () => {
    const now = Date.now();
    const expired: TokenSubject = {
      userId: demo.userId,
      userName: 'demo',
      userDomainId: 'default',
      project: { id: demo.projectId, name: 'demo', domainId: 'default' },
      roles: [{ id: 'x', name: 'member' }],
      methods: ['password'],
      auditIds: ['old'],
      issuedAt: keystoneTime(now - 7200_000),
      expiresAt: keystoneTime(now - 3600_000),
    };
    const token = await createIdentityToken(expired);
    const { token: caller } = await issue(password(byName('admin', 'admin-pw'), projectScope('admin')));
    expectKeystoneError(await call('GET', '/v3/auth/tokens', { token: caller, subject: token }), 404, 'Not Found');
    expectKeystoneError(await call('GET', '/v3/auth/projects', { token }), 401, 'Unauthorized');
    expect(await authorizer({ headers: { 'X-Auth-Token': token } })).toEqual({ isAuthorized: false });
  });

  test("a member may not validate another user's token (403)", async () => {
    const { token: demoToken } = await issue(password(byName('demo', 'demo-pw'), projectScope('demo')));
    const { token: adminToken } = await issue(password(byName('admin', 'admin-pw'), projectScope('admin')));
    expectKeystoneError(await call('GET', '/v3/auth/tokens', { token: demoToken, subject: adminToken }), 403, 'Forbidden');
    expect((await call('GET', '/v3/auth/tokens', { token: adminToken, subject: demoToken })).status).toBe(200);
  });
});

describe('refusals', () => {
  test.each([
    ['a wrong password', password(byName('demo', 'nope'), projectScope('demo'))],
    ['an unknown user', password(byName('nobody', 'demo-pw'))],
    ['an unknown user id', password({ id: 'ffff', password: 'demo-pw' })],
    ['another domain', password({ name: 'demo', domain: { id: 'elsewhere' }, password: 'demo-pw' })],
    ['a project the user has no role on', password(byName('demo', 'demo-pw'), projectScope('admin'))],
    ['an unknown project', password(byName('demo', 'demo-pw'), projectScope('nowhere'))],
    ['an unsupported method', { auth: { identity: { methods: ['totp'], totp: {} } } }],
  ])('%s: 401', async (_what, body) => {
    expectKeystoneError(await call('POST', '/v3/auth/tokens', { body }), 401, 'Unauthorized');
  });

  test.each([
    ['no body', undefined],
    ['not JSON', '{'],
    ['no identity', { auth: {} }],
    ['methods not a list', { auth: { identity: { methods: 'password' } } }],
    ['a user with neither id nor name', password({ password: 'x' })],
  ])('%s: 400', async (_what, body) => {
    expectKeystoneError(await call('POST', '/v3/auth/tokens', { body }), 400, 'Bad Request');
  });

  test('no token or an unknown one on a protected call: 401', async () => {
    expectKeystoneError(await call('GET', '/v3/projects'), 401, 'Unauthorized');
    expectKeystoneError(await call('GET', '/v3/projects', { token: 'notused' }), 401, 'Unauthorized');
  });

  test('a member asking for admin actions: 403; for another project: 403; its own: 200', async () => {
    const { token } = await issue(password(byName('demo', 'demo-pw'), projectScope('demo')));
    expectKeystoneError(await call('GET', '/v3/users', { token }), 403, 'Forbidden');
    expectKeystoneError(await call('GET', '/v3/projects', { token }), 403, 'Forbidden');
    expectKeystoneError(await call('POST', '/v3/projects', { token, body: { project: { name: 'x' } } }), 403, 'Forbidden');
    expectKeystoneError(await call('GET', `/v3/projects/${admin.projectId}`, { token }), 403, 'Forbidden');
    expectKeystoneError(await call('GET', `/v3/users/${admin.userId}`, { token }), 403, 'Forbidden');
    expect((await call('GET', `/v3/projects/${demo.projectId}`, { token })).status).toBe(200);
    expect((await call('GET', `/v3/users/${demo.userId}/projects`, { token })).body.projects).toHaveLength(1);
  });
});

describe('admin management', () => {
  test('create a project and a user, grant a role, the user gets a token; duplicates 409; delete', async () => {
    const { token } = await issue(password(byName('admin', 'admin-pw'), projectScope('admin')));
    const project = await call('POST', '/v3/projects', { token, body: { project: { name: 'p2', description: 'second' } } });
    expect(project.status).toBe(201);
    expect(project.body.project.id).toMatch(/^[0-9a-f]{32}$/);
    expectKeystoneError(await call('POST', '/v3/projects', { token, body: { project: { name: 'p2' } } }), 409, 'Conflict');
    const user = await call('POST', '/v3/users', { token, body: { user: { name: 'u2', password: 'u2-pw', default_project_id: project.body.project.id } } });
    expect(user.status).toBe(201);
    expect(user.body.user).not.toHaveProperty('password');
    const member = (await call('GET', '/v3/roles', { token, query: 'name=member' })).body.roles[0];
    expect((await call('PUT', `/v3/projects/${project.body.project.id}/users/${user.body.user.id}/roles/${member.id}`, { token })).status).toBe(204);
    const assignments = await call('GET', '/v3/role_assignments', { token, query: `user.id=${user.body.user.id}&include_names=1` });
    expect(assignments.body.role_assignments).toEqual([expect.objectContaining({ role: { id: member.id, name: 'member' } })]);
    const u2 = await issue(password(byName('u2', 'u2-pw')));
    expect(u2.body.token.project.name).toBe('p2');

    expect((await authorizer({ headers: { 'X-Auth-Token': u2.token } })).isAuthorized).toBe(true);

    expect((await call('DELETE', `/v3/users/${user.body.user.id}`, { token })).status).toBe(204);
    expectKeystoneError(await call('POST', '/v3/auth/tokens', { body: password(byName('u2', 'u2-pw')) }), 401, 'Unauthorized');
    // Deleting the user revoked its tokens at once.
    expect(await authorizer({ headers: { 'X-Auth-Token': u2.token } })).toEqual({ isAuthorized: false });
    expect((await call('DELETE', `/v3/projects/${project.body.project.id}`, { token })).status).toBe(204);
    expectKeystoneError(await call('GET', `/v3/projects/${project.body.project.id}`, { token }), 404, 'Not Found');
  });

  test("disabling a user or changing its password ends its tokens; the new password works", async () => {
    const { token } = await issue(password(byName('admin', 'admin-pw'), projectScope('admin')));
    const made = await call('POST', '/v3/users', { token, body: { user: { name: 'u3', password: 'old-pw', default_project_id: demo.projectId } } });
    const reader = (await call('GET', '/v3/roles', { token, query: 'name=reader' })).body.roles[0];
    await call('PUT', `/v3/projects/${demo.projectId}/users/${made.body.user.id}/roles/${reader.id}`, { token });
    const before = await issue(password(byName('u3', 'old-pw')));
    expect((await call('PATCH', `/v3/users/${made.body.user.id}`, { token, body: { user: { password: 'new-pw' } } })).status).toBe(200);
    expect(await authorizer({ headers: { 'X-Auth-Token': before.token } })).toEqual({ isAuthorized: false });
    expectKeystoneError(await call('POST', '/v3/auth/tokens', { body: password(byName('u3', 'old-pw')) }), 401, 'Unauthorized');
    const after = await issue(password(byName('u3', 'new-pw')));
    expect((await call('PATCH', `/v3/users/${made.body.user.id}`, { token, body: { user: { enabled: false } } })).status).toBe(200);
    expect(await authorizer({ headers: { 'X-Auth-Token': after.token } })).toEqual({ isAuthorized: false });
    expectKeystoneError(await call('POST', '/v3/auth/tokens', { body: password(byName('u3', 'new-pw')) }), 401, 'Unauthorized');
  });

  test('seeding again keeps every id', async () => {
    expect(await ensureUser({ name: 'demo', password: 'demo-pw', project: 'demo', roles: ['member', 'reader'] })).toEqual(demo);
  });
});

describe('the authorizer beside it', () => {
  test('token mode: an identity token is its user, project and roles; noauth forms are refused', async () => {
    const { token } = await issue(password(byName('demo', 'demo-pw'), projectScope('demo')));
    expect(await authorizer({ headers: { 'X-Auth-Token': token } })).toEqual({ isAuthorized: true, context: { userId: demo.userId, projectId: demo.projectId, roles: 'member,reader' } });
    for (const t of ['demo:demo', 'notused', 'admin']) expect(await authorizer({ headers: { 'X-Auth-Token': t } })).toEqual({ isAuthorized: false });
  });

  test('noauth mode: user:project and identity tokens work; colon-less others are refused', async () => {
    const { token } = await issue(password(byName('admin', 'admin-pw'), projectScope('admin')));
    process.env.FERRY_AUTH_MODE = 'noauth';
    try {
      expect((await authorizer({ headers: { 'X-Auth-Token': token } })).context).toEqual({ userId: admin.userId, projectId: admin.projectId, roles: 'admin,member,reader' });
      expect((await authorizer({ headers: { 'X-Auth-Token': 'demo:demo' } })).isAuthorized).toBe(true);
      for (const t of ['notused', 'admin']) expect(await authorizer({ headers: { 'X-Auth-Token': t } })).toEqual({ isAuthorized: false });
    } finally {
      process.env.FERRY_AUTH_MODE = 'token';
    }
  });
});
