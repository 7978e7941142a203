/**
 * The pure parts of the identity API: the token body and catalog the OpenStack clients parse,
 * Keystone's error body, implied roles, and the default policies.
 */
import { describe, expect, test } from 'vitest';
import { catalog, forbidden, keystoneTime, SERVICES, tokenBody, unauthorized, versionDoc, withImplied, type TokenSubject } from '../../functions/identity/model.js';
import { identityAllowed, IDENTITY_POLICY, type Caller } from '../../functions/identity/policy.js';

const subject: TokenSubject = {
  userId: 'u1',
  userName: 'demo',
  userDomainId: 'default',
  project: { id: 'p1', name: 'demo', domainId: 'default' },
  roles: [{ id: 'r1', name: 'member' }],
  methods: ['password'],
  auditIds: ['a1'],
  issuedAt: '2026-01-01T00:00:00.000000Z',
  expiresAt: '2026-01-01T01:00:00.000000Z',
};

describe('token body', () => {
  test('a project-scoped token has Keystone fields and, when asked, the catalog', () => {
    const body = tokenBody(subject, { baseUrl: 'https://x.example' });
    expect(body.token).toMatchObject({
      methods: ['password'],
      user: { id: 'u1', name: 'demo', domain: { id: 'default', name: 'Default' } },
      project: { id: 'p1', name: 'demo', domain: { id: 'default', name: 'Default' } },
      roles: [{ id: 'r1', name: 'member' }],
      audit_ids: ['a1'],
      expires_at: subject.expiresAt,
      issued_at: subject.issuedAt,
      is_domain: false,
    });
    expect(body.token.catalog).toHaveLength(SERVICES.length);
  });

  test('without a base URL (nocatalog) there is no catalog; unscoped has no project, roles or catalog', () => {
    expect(tokenBody(subject).token).not.toHaveProperty('catalog');
    const { project: _p, ...unscoped } = subject;
    const body = tokenBody(unscoped, { baseUrl: 'http://h' }).token;
    expect(body).not.toHaveProperty('project');
    expect(body).not.toHaveProperty('roles');
    expect(body).not.toHaveProperty('catalog');
  });

  test("Keystone's time format has microseconds", () => {
    expect(keystoneTime(Date.UTC(2026, 0, 2, 3, 4, 5, 678))).toBe('2026-01-02T03:04:05.678000Z');
  });
});

describe('catalog', () => {
  const cat = catalog('http://127.0.0.1:8780');
  test.each([
    ['identity', 'http://127.0.0.1:8780/identity'],
    ['volumev3', 'http://127.0.0.1:8780/volume/v3'],
    ['block-storage', 'http://127.0.0.1:8780/volume/v3'],
    ['sharev2', 'http://127.0.0.1:8780/share/v2'],
    ['shared-file-system', 'http://127.0.0.1:8780/share/v2'],
    ['compute', 'http://127.0.0.1:8780/compute/v2.1'],
    ['image', 'http://127.0.0.1:8780/image'],
    ['network', 'http://127.0.0.1:8780/network'],
  ])('%s answers at %s on every interface in RegionOne', (type, url) => {
    const entry = cat.find((c) => c.type === type)!;
    expect(entry.endpoints.map((e) => e.interface).sort()).toEqual(['admin', 'internal', 'public']);
    for (const e of entry.endpoints) expect(e).toMatchObject({ url, region: 'RegionOne', region_id: 'RegionOne' });
  });

  test('endpoint ids are unique', () => {
    const ids = cat.flatMap((c) => c.endpoints.map((e) => e.id));
    expect(new Set(ids).size).toBe(ids.length);
  });
});

test('version document links to the versioned root', () => {
  expect(versionDoc('http://h')).toMatchObject({ status: 'stable', links: [{ rel: 'self', href: 'http://h/identity/v3/' }] });
});

test("errors carry Keystone's body", () => {
  expect(unauthorized().body()).toEqual({ error: { code: 401, message: 'The request you have made requires authentication.', title: 'Unauthorized' } });
  expect(forbidden('identity:list_users').body().error).toMatchObject({ code: 403, title: 'Forbidden' });
});

test('admin implies member implies reader', () => {
  const all = [
    { id: 'a', name: 'admin', domainId: null, description: '' },
    { id: 'm', name: 'member', domainId: null, description: '' },
    { id: 'r', name: 'reader', domainId: null, description: '' },
  ];
  expect(withImplied([all[0]!], all).map((r) => r.name)).toEqual(['admin', 'member', 'reader']);
  expect(withImplied([all[1]!], all).map((r) => r.name)).toEqual(['member', 'reader']);
  expect(withImplied([all[2]!], all).map((r) => r.name)).toEqual(['reader']);
});

describe('policy', () => {
  const admin: Caller = { userId: 'root', projectId: 'pa', roles: ['admin', 'member', 'reader'] };
  const member: Caller = { userId: 'u1', projectId: 'p1', roles: ['member', 'reader'] };

  test('an admin may do everything', () => {
    for (const action of Object.keys(IDENTITY_POLICY).filter((a) => a !== 'identity:create_application_credential')) {
      expect(identityAllowed(admin, action, { userId: 'someone', projectId: 'px' }), action).toBe(true);
    }
  });

  test.each([
    ['identity:list_projects', {}, false],
    ['identity:create_project', {}, false],
    ['identity:list_users', {}, false],
    ['identity:get_project', { projectId: 'p1' }, true],
    ['identity:get_project', { projectId: 'p2' }, false],
    ['identity:get_user', { userId: 'u1' }, true],
    ['identity:get_user', { userId: 'u2' }, false],
    ['identity:list_user_projects', { userId: 'u1' }, true],
    ['identity:create_application_credential', { userId: 'u1' }, true],
    ['identity:create_application_credential', { userId: 'u2' }, false],
    ['identity:validate_token', { userId: 'u1' }, true],
    ['identity:revoke_token', { userId: 'u2' }, false],
    ['identity:no_such_action', {}, false],
  ])('a member: %s on %j is %s', (action, target, expected) => {
    expect(identityAllowed(member, action, target)).toBe(expected);
  });
});
