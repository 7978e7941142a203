import { describe, expect, test } from 'vitest';
import { createApiHandler, json } from '../../functions/core/api.js';
import { BadRequest } from '../../functions/core/errors.js';
import { VOLUME_VERSIONS } from '../../functions/core/microversion.js';
import { registerPolicies } from '../../functions/core/policy.js';
import { call, cinder, DEMO } from '../support/events.js';

registerPolicies({ 'thing:get': 'admin_or_owner', 'thing:admin': 'admin_api' });

const handler = createApiHandler({
  service: VOLUME_VERSIONS,
  rootPath: '/volume',
  versionPath: '/v3',
  routes: [
    { method: 'GET', path: '/things/{id}', action: 'thing:get', handler: async (r) => json(200, { id: r.params.id, project: r.urlProjectId ?? null, v: r.version.toString() }) },
    { method: 'GET', path: '/things/{id}/new', action: 'thing:get', minVersion: '3.27', handler: async () => json(200, { new: true }) },
    { method: 'POST', path: '/things', action: 'thing:admin', handler: async (r) => json(202, { got: r.body }) },
    { method: 'GET', path: '/boom', action: 'thing:get', handler: async () => { throw new Error('secret internals'); } },
    { method: 'GET', path: '/bad', action: 'thing:get', handler: async () => { throw new BadRequest('nope'); } },
  ],
  unversioned: [{ method: 'GET', path: '/', handler: async () => json(300, { versions: [] }) }],
});

describe('createApiHandler', () => {
  test('accepts paths with and without the project id', async () => {
    const a = await call(handler, { method: 'GET', path: '/volume/v3/things/x1', headers: cinder('3.27'), caller: DEMO });
    const b = await call(handler, { method: 'GET', path: '/volume/v3/demo/things/x1', headers: cinder('3.27'), caller: DEMO });
    expect(a).toMatchObject({ status: 200, body: { id: 'x1', project: null, v: '3.27' } });
    expect(b).toMatchObject({ status: 200, body: { id: 'x1', project: 'demo' } });
  });

  test("a URL project that is not the caller's is refused for non-admins", async () => {
    const r = await call(handler, { method: 'GET', path: '/volume/v3/other/things/x1', caller: DEMO });
    expect(r.status).toBe(400);
    expect(r.body.badRequest.message).toMatch(/doesn't match Context's project_id/);
  });

  test('a route below its minimum microversion answers 404', async () => {
    const r = await call(handler, { method: 'GET', path: '/volume/v3/things/x1/new', headers: cinder('3.26'), caller: DEMO });
    expect(r).toMatchObject({ status: 404, body: { itemNotFound: { code: 404 } } });
    const ok = await call(handler, { method: 'GET', path: '/volume/v3/things/x1/new', headers: cinder('3.27'), caller: DEMO });
    expect(ok.status).toBe(200);
  });

  test('echoes the negotiated version and a request id', async () => {
    const r = await call(handler, { method: 'GET', path: '/volume/v3/things/x1', headers: cinder('3.44'), caller: DEMO });
    expect(r.headers['OpenStack-API-Version']).toBe('volume 3.44');
    expect(r.headers['x-openstack-request-id']).toMatch(/^req-/);
  });

  test('policy denial is 403 in the upstream fault shape', async () => {
    const r = await call(handler, { method: 'POST', path: '/volume/v3/things', body: {}, caller: DEMO });
    expect(r).toEqual(expect.objectContaining({ status: 403, body: { forbidden: { code: 403, message: "Policy doesn't allow thing:admin to be performed." } } }));
  });

  test('no caller is 401', async () => {
    const r = await call(handler, { method: 'GET', path: '/volume/v3/things/x1', caller: null });
    expect(r.status).toBe(401);
  });

  test('malformed JSON is 400, typed errors keep their status, unknown errors are 500 without internals', async () => {
    const malformed = await call(handler, { method: 'POST', path: '/volume/v3/things', body: '{"a":', });
    expect(malformed).toMatchObject({ status: 400, body: { badRequest: { message: 'Malformed request body' } } });
    const bad = await call(handler, { method: 'GET', path: '/volume/v3/bad', caller: DEMO });
    expect(bad).toMatchObject({ status: 400, body: { badRequest: { code: 400, message: 'nope' } } });
    const boom = await call(handler, { method: 'GET', path: '/volume/v3/boom', caller: DEMO });
    expect(boom.status).toBe(500);
    expect(JSON.stringify(boom.body)).not.toContain('secret internals');
  });

  test('out-of-range microversion is 406; unknown route is 404; unversioned routes need no caller', async () => {
    expect((await call(handler, { method: 'GET', path: '/volume/v3/things/x1', headers: cinder('3.99'), caller: DEMO })).status).toBe(406);
    expect((await call(handler, { method: 'GET', path: '/volume/v3/nothing/here/at/all', caller: DEMO })).status).toBe(404);
    expect((await call(handler, { method: 'GET', path: '/volume/', caller: null })).status).toBe(300);
  });
});
