/**
 * The identity API's resources as Tempest's identity tests use them, against DynamoDB Local:
 * domains (names unique per domain, delete only when disabled, cascade), Keystone's name limits,
 * renames, list filters, project tags and parents, user extras, the password change, and the
 * revocation of a project's or a domain's tokens. (identity-api.test.ts has tokens and policy.)
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { handler as authorizer } from '../../functions/auth/authorizer.js';
import { handler } from '../../functions/api/identity.js';
import { ensureUser } from '../../functions/identity/seed.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';
import { call as callHandler } from '../support/events.js';

let ddb: LocalDynamo;
let token: string;
let memberRole: string;
const savedMode = process.env.FERRY_AUTH_MODE;

const call = (method: string, path: string, opts: { token?: string; body?: unknown; query?: string } = {}) =>
  callHandler(handler as never, { method, path: `/identity/v3${path}`, query: opts.query, body: opts.body, caller: null, headers: opts.token ? { 'X-Auth-Token': opts.token } : {} });
const admin = (method: string, path: string, body?: unknown, query?: string) => call(method, path, { token, body, query });

const auth = (user: Record<string, unknown>, scope?: unknown) => ({ auth: { identity: { methods: ['password'], password: { user } }, ...(scope === undefined ? {} : { scope }) } });
async function issue(body: unknown): Promise<{ token: string; body: any }> {
  const res = await call('POST', '/auth/tokens', { body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { token: res.headers['X-Subject-Token']!, body: res.body };
}
const expectError = (res: { status: number; body: any }, code: number, title: string, message: string | RegExp = /./) => {
  expect(res.status, JSON.stringify(res.body)).toBe(code);
  expect(res.body).toEqual({ error: { code, title, message: expect.stringMatching(message) } });
};
const authorized = async (t: string) => (await authorizer({ headers: { 'X-Auth-Token': t } })).isAuthorized;

/** A user with the member role on a new project, both in `domainId`. */
async function memberOf(domainId: string, name: string, pw: string) {
  const project = (await admin('POST', '/projects', { project: { name, domain_id: domainId } })).body.project;
  const user = (await admin('POST', '/users', { user: { name, domain_id: domainId, password: pw } })).body.user;
  expect((await admin('PUT', `/projects/${project.id}/users/${user.id}/roles/${memberRole}`)).status).toBe(204);
  return { project, user };
}

beforeAll(async () => {
  ddb = await useLocalDynamo();
  process.env.FERRY_AUTH_MODE = 'token';
  await ensureUser({ name: 'admin', password: 'admin-pw', project: 'admin', roles: ['admin'] });
  token = (await issue(auth({ name: 'admin', domain: { id: 'default' }, password: 'admin-pw' }, { project: { name: 'admin', domain: { id: 'default' } } }))).token;
  memberRole = (await admin('GET', '/roles', undefined, 'name=member')).body.roles[0].id;
});
afterAll(async () => {
  if (savedMode === undefined) delete process.env.FERRY_AUTH_MODE;
  else process.env.FERRY_AUTH_MODE = savedMode;
  await ddb?.stop();
});

describe('domains', () => {
  test('create, show, list, 409 on a taken name, 400 on a name over 64, 404 on an unknown one; the default stays', async () => {
    const made = await admin('POST', '/domains', { domain: { name: 'd1', description: 'first' } });
    expect(made.status).toBe(201);
    expect(made.body.domain).toMatchObject({ id: expect.stringMatching(/^[0-9a-f]{32}$/), name: 'd1', description: 'first', enabled: true, tags: [], links: { self: expect.stringContaining(`/domains/${made.body.domain.id}`) } });
    expect((await admin('GET', `/domains/${made.body.domain.id}`)).body.domain).toEqual(made.body.domain);
    const ids = (await admin('GET', '/domains')).body.domains.map((d: { id: string }) => d.id);
    expect(ids).toEqual(expect.arrayContaining(['default', made.body.domain.id]));
    expect((await admin('GET', '/domains', undefined, 'name=d1')).body.domains).toHaveLength(1);
    expectError(await admin('POST', '/domains', { domain: { name: 'd1' } }), 409, 'Conflict');
    expectError(await admin('POST', '/domains', { domain: { name: 'Default' } }), 409, 'Conflict');
    expectError(await admin('POST', '/domains', { domain: { name: 'x'.repeat(65) } }), 400, 'Bad Request');
    expectError(await admin('GET', '/domains/nope'), 404, 'Not Found', 'Could not find domain: nope.');
    expectError(await admin('PATCH', '/domains/default', { domain: { enabled: false } }), 403, 'Forbidden');
    expectError(await admin('DELETE', '/domains/default'), 403, 'Forbidden');
    expectError(await admin('POST', '/projects', { project: { name: 'px', domain_id: 'nope' } }), 404, 'Not Found', 'Could not find domain: nope.');
  });

  test('names are unique per domain; a token for a user and project of another domain names that domain', async () => {
    const d = (await admin('POST', '/domains', { domain: { name: 'd2' } })).body.domain;
    const { project, user } = await memberOf(d.id, 'same', 'same-pw');
    // The same names in the default domain are another user and project.
    const other = await memberOf('default', 'same', 'other-pw');
    expect(other.user.id).not.toBe(user.id);
    expectError(await admin('POST', '/users', { user: { name: 'same', domain_id: d.id } }), 409, 'Conflict');
    const t = await issue(auth({ name: 'same', domain: { name: 'd2' }, password: 'same-pw' }, { project: { name: 'same', domain: { name: 'd2' } } }));
    expect(t.body.token.user).toMatchObject({ id: user.id, domain: { id: d.id, name: 'd2' } });
    expect(t.body.token.project).toEqual({ id: project.id, name: 'same', domain: { id: d.id, name: 'd2' } });
    // A member sees its project's domain (Keystone's get_domain default), not another one.
    expect((await call('GET', `/domains/${d.id}`, { token: t.token })).body.domain.name).toBe('d2');
    expectError(await call('GET', '/domains/default', { token: t.token }), 403, 'Forbidden');
    expectError(await call('GET', '/domains', { token: t.token }), 403, 'Forbidden');
    expect((await admin('GET', '/users', undefined, `domain_id=${d.id}`)).body.users.map((u: { id: string }) => u.id)).toEqual([user.id]);
  });

  test('delete: 403 while enabled; disabling revokes its tokens and refuses new ones; delete removes its users and projects', async () => {
    const d = (await admin('POST', '/domains', { domain: { name: 'd3' } })).body.domain;
    const { project, user } = await memberOf(d.id, 'm3', 'm3-pw');
    const body = auth({ id: user.id, password: 'm3-pw' }, { project: { id: project.id } });
    const t = await issue(body);
    expect(await authorized(t.token)).toBe(true);
    expectError(await admin('DELETE', `/domains/${d.id}`), 403, 'Forbidden', 'Cannot delete a domain that is enabled, please disable it first.');
    expect((await admin('PATCH', `/domains/${d.id}`, { domain: { enabled: false } })).body.domain.enabled).toBe(false);
    expect(await authorized(t.token)).toBe(false);
    expectError(await call('POST', '/auth/tokens', { body }), 401, 'Unauthorized');
    expect((await admin('GET', '/domains', undefined, 'enabled=false')).body.domains.map((x: { id: string }) => x.id)).toEqual([d.id]);
    expect((await admin('DELETE', `/domains/${d.id}`)).status).toBe(204);
    expectError(await admin('GET', `/domains/${d.id}`), 404, 'Not Found');
    expectError(await admin('GET', `/projects/${project.id}`), 404, 'Not Found');
    expectError(await admin('GET', `/users/${user.id}`), 404, 'Not Found');
    // Its name is free again.
    expect((await admin('POST', '/domains', { domain: { name: 'd3' } })).status).toBe(201);
  });
});

describe('names, renames, filters, tags, parents, extras', () => {
  test("Keystone's limits: user names up to 255, project names up to 64", async () => {
    expect((await admin('POST', '/users', { user: { name: 'u'.repeat(255) } })).status).toBe(201);
    expectError(await admin('POST', '/users', { user: { name: 'u'.repeat(256) } }), 400, 'Bad Request');
    expect((await admin('POST', '/roles', { role: { name: 'r'.repeat(255) } })).status).toBe(201);
    expect((await admin('POST', '/projects', { project: { name: 'p'.repeat(64) } })).status).toBe(201);
    expectError(await admin('POST', '/projects', { project: { name: 'p'.repeat(65) } }), 400, 'Bad Request');
  });

  test('a user renamed authenticates by the new name only; a taken name is 409 and changes nothing', async () => {
    const { user, project } = await memberOf('default', 'before', 'r-pw');
    await admin('POST', '/users', { user: { name: 'taken' } });
    expectError(await admin('PATCH', `/users/${user.id}`, { user: { name: 'taken' } }), 409, 'Conflict');
    const renamed = await admin('PATCH', `/users/${user.id}`, { user: { name: 'after', email: 'a@example.org' } });
    expect(renamed.body.user).toMatchObject({ id: user.id, name: 'after', email: 'a@example.org' });
    const scope = { project: { id: project.id } };
    await issue(auth({ name: 'after', domain: { id: 'default' }, password: 'r-pw' }, scope));
    expectError(await call('POST', '/auth/tokens', { body: auth({ name: 'before', domain: { id: 'default' }, password: 'r-pw' }, scope) }), 401, 'Unauthorized');
    // The old name is free again.
    expect((await admin('POST', '/users', { user: { name: 'before' } })).status).toBe(201);
  });

  test('projects: rename, tags, parent, enabled filter; show equals the list entry', async () => {
    const p = (await admin('POST', '/projects', { project: { name: 'tagged', tags: ['a', 'c', 'b'], enabled: false } })).body.project;
    expect(p).toMatchObject({ tags: ['a', 'c', 'b'], parent_id: 'default', is_domain: false, enabled: false });
    expectError(await admin('POST', '/projects', { project: { name: 'bad', tags: ['a/b'] } }), 400, 'Bad Request');
    const child = (await admin('POST', '/projects', { project: { name: 'child', parent_id: p.id } })).body.project;
    expect(child).toMatchObject({ parent_id: p.id, domain_id: 'default' });
    expect((await admin('GET', '/projects', undefined, `parent_id=${p.id}`)).body.projects.map((x: { id: string }) => x.id)).toEqual([child.id]);
    const disabled = (await admin('GET', '/projects', undefined, 'enabled=False')).body.projects.map((x: { id: string }) => x.id);
    expect(disabled).toContain(p.id);
    expect(disabled).not.toContain(child.id);
    const renamed = (await admin('PATCH', `/projects/${p.id}`, { project: { name: 'tagged2', tags: ['d'] } })).body.project;
    expect(renamed).toMatchObject({ name: 'tagged2', tags: ['d'] });
    const listed = (await admin('GET', '/projects')).body.projects.find((x: { id: string }) => x.id === p.id);
    expect((await admin('GET', `/projects/${p.id}`)).body.project).toEqual(listed);
    // Not a leaf: Keystone's 403, and nothing deleted; once the child is gone the parent goes too.
    expectError(await admin('DELETE', `/projects/${p.id}`), 403, 'Forbidden');
    expect((await admin('GET', `/projects/${p.id}`)).body.project).toEqual(listed);
    expect((await admin('DELETE', `/projects/${child.id}`)).status).toBe(204);
    expect((await admin('DELETE', `/projects/${p.id}`)).status).toBe(204);
    expect((await admin('GET', `/projects/${p.id}`)).status).toBe(404);
  });

  test('a domain\'s delete takes its nested projects with it, children before parents', async () => {
    const d = (await admin('POST', '/domains', { domain: { name: 'nested-dom' } })).body.domain;
    const top = (await admin('POST', '/projects', { project: { name: 'top', domain_id: d.id } })).body.project;
    const mid = (await admin('POST', '/projects', { project: { name: 'mid', parent_id: top.id } })).body.project;
    const leaf = (await admin('POST', '/projects', { project: { name: 'leaf', parent_id: mid.id } })).body.project;
    expect(leaf).toMatchObject({ domain_id: d.id, parent_id: mid.id });
    expect((await admin('PATCH', `/domains/${d.id}`, { domain: { enabled: false } })).status).toBe(200);
    expect((await admin('DELETE', `/domains/${d.id}`)).status).toBe(204);
    for (const x of [top, mid, leaf]) expect((await admin('GET', `/projects/${x.id}`)).status).toBe(404);
  });

  test('users: the enabled filter, and attributes Keystone does not know are kept (tempest sends project_id)', async () => {
    const u = (await admin('POST', '/users', { user: { name: 'extra', enabled: false, project_id: 'p-1' } })).body.user;
    expect(u).toMatchObject({ project_id: 'p-1', enabled: false });
    expect((await admin('GET', `/users/${u.id}`)).body.user.project_id).toBe('p-1');
    const off = (await admin('GET', '/users', undefined, 'enabled=false')).body.users.map((x: { id: string }) => x.id);
    expect(off).toContain(u.id);
    expect((await admin('GET', '/users', undefined, 'enabled=true')).body.users.map((x: { id: string }) => x.id)).not.toContain(u.id);
  });
});

describe('tokens end with what they stand for', () => {
  test('POST /users/{id}/password: needs no token, 401 on a wrong original, 204 revokes the tokens; the new one works', async () => {
    const { user, project } = await memberOf('default', 'pwuser', 'one');
    const scope = { project: { id: project.id } };
    const t = await issue(auth({ id: user.id, password: 'one' }, scope));
    expectError(await call('POST', `/users/${user.id}/password`, { body: { user: { original_password: 'wrong', password: 'two' } } }), 401, 'Unauthorized');
    expectError(await call('POST', `/users/${user.id}/password`, { body: { user: { password: 'two' } } }), 400, 'Bad Request');
    expect(await authorized(t.token)).toBe(true);
    expect((await call('POST', `/users/${user.id}/password`, { body: { user: { original_password: 'one', password: 'two' } } })).status).toBe(204);
    expect(await authorized(t.token)).toBe(false);
    expectError(await call('POST', '/auth/tokens', { body: auth({ id: user.id, password: 'one' }, scope) }), 401, 'Unauthorized');
    await issue(auth({ id: user.id, password: 'two' }, scope));
  });

  test('deleting or disabling a project revokes the tokens scoped to it, not the others', async () => {
    const a = await memberOf('default', 'gone', 'g-pw');
    const b = await memberOf('default', 'off', 'o-pw');
    const ta = await issue(auth({ id: a.user.id, password: 'g-pw' }, { project: { id: a.project.id } }));
    const tb = await issue(auth({ id: b.user.id, password: 'o-pw' }, { project: { id: b.project.id } }));
    const unscoped = await issue(auth({ id: a.user.id, password: 'g-pw' }));
    expect((await admin('DELETE', `/projects/${a.project.id}`)).status).toBe(204);
    expect(await authorized(ta.token)).toBe(false);
    expect(await authorized(tb.token)).toBe(true);
    expect((await call('GET', '/auth/projects', { token: unscoped.token })).status).toBe(200);
    expect((await admin('PATCH', `/projects/${b.project.id}`, { project: { enabled: false } })).status).toBe(200);
    expect(await authorized(tb.token)).toBe(false);
  });
});
