/**
 * The Nova API's version and header rules, through the composed handler alone (no DynamoDB: every
 * request here is answered before a table is read): version documents as novaclient discovers
 * them, microversion negotiation from both headers, the echo and Vary headers, 406 as Nova's
 * computeFault, fault bodies, routes outside their version range, and policy before any read.
 */
import { describe, expect, test } from 'vitest';
import { handler, novaFaultBody } from '../../functions/api/compute.js';
import { call, DEMO } from '../support/events.js';

const compute = (v: string) => ({ 'OpenStack-API-Version': `compute ${v}` });
const legacy = (v: string) => ({ 'X-OpenStack-Nova-API-Version': v });
const UUID = '6f1c2f0e-6a53-4b9e-9d43-0a1b2c3d4e5f';

describe('version discovery', () => {
  test('GET /compute/v2.1/ is the v2.1 document novaclient reads (version, min_version)', async () => {
    // Act
    const res = await call(handler, { method: 'GET', path: '/compute/v2.1/', caller: null });
    // Assess
    expect(res.status).toBe(200);
    expect(res.body.version).toMatchObject({ id: 'v2.1', status: 'CURRENT', version: '2.93', min_version: '2.1', updated: '2013-07-23T11:33:21Z' });
    expect(res.body.version.links[0]).toEqual({ rel: 'self', href: 'http://127.0.0.1:8780/compute/v2.1/' });
    expect(res.body.version['media-types']).toEqual([{ base: 'application/json', type: 'application/vnd.openstack.compute+json;version=2.1' }]);
    // The version documents are not versioned responses.
    expect(res.headers['OpenStack-API-Version']).toBeUndefined();
  });

  test('GET /compute and /compute/v2.1 without the slash answer the same, with 200 for the list', async () => {
    const list = await call(handler, { method: 'GET', path: '/compute', caller: null });
    expect(list.status).toBe(200);
    expect(list.body.versions).toEqual([
      { id: 'v2.1', status: 'CURRENT', version: '2.93', min_version: '2.1', updated: '2013-07-23T11:33:21Z', links: [{ rel: 'self', href: 'http://127.0.0.1:8780/compute/v2.1/' }] },
    ]);
    expect((await call(handler, { method: 'GET', path: '/compute/', caller: null })).body).toEqual(list.body);
    expect((await call(handler, { method: 'GET', path: '/compute/v2.1', caller: null })).body.version.version).toBe('2.93');
  });
});

describe('microversions', () => {
  // A request answered before any read: PUT /os-services/{id} with an id that is no uuid (400 at 2.53+).
  const badUuid = (headers: Record<string, string>) => call(handler, { method: 'PUT', path: '/compute/v2.1/os-services/not-a-uuid', headers, body: { forced_down: true } });

  test.each([
    ['generic header', compute('2.60'), '2.60'],
    ['legacy header', legacy('2.60'), '2.60'],
    ['generic wins over legacy', { ...compute('2.53'), ...legacy('2.90') }, '2.53'],
    ['latest', compute('latest'), '2.93'],
    ['legacy latest', legacy('latest'), '2.93'],
  ])('%s: negotiated and echoed in both headers with Vary', async (_name, headers, expected) => {
    const res = await badUuid(headers);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ badRequest: { code: 400, message: 'Invalid uuid not-a-uuid' } });
    expect(res.headers['OpenStack-API-Version']).toBe(`compute ${expected}`);
    expect(res.headers['X-OpenStack-Nova-API-Version']).toBe(expected);
    expect(res.headers['Vary']).toBe('OpenStack-API-Version, X-OpenStack-Nova-API-Version');
    expect(res.headers['x-compute-request-id']).toMatch(/^req-[0-9a-f-]{36}$/);
    expect(res.headers['x-openstack-request-id']).toBe(res.headers['x-compute-request-id']);
  });

  test('no header means 2.1: the pre-2.53 action form answers (unknown action: 404)', async () => {
    const res = await badUuid({});
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ itemNotFound: { code: 404, message: 'Unknown action' } });
    expect(res.headers['OpenStack-API-Version']).toBe('compute 2.1');
  });

  test('force-down exists from 2.11 only', async () => {
    const at210 = await call(handler, { method: 'PUT', path: '/compute/v2.1/os-services/force-down', headers: legacy('2.10'), body: { host: 'cmp1', binary: 'nova-compute', forced_down: true } });
    expect(at210.status).toBe(404);
    const bad = await call(handler, { method: 'PUT', path: '/compute/v2.1/os-services/force-down', headers: legacy('2.11'), body: { host: 'cmp1', binary: 'nova-compute' } });
    expect(bad.status).toBe(400);
    expect(bad.body.badRequest.message).toContain("'forced_down' is a required property");
  });

  test.each(['2.0', '2.94', '3.1', '1.1'])('%s is outside 2.1-2.93: 406 computeFault, no version echo', async (v) => {
    for (const headers of [compute(v), legacy(v)]) {
      const res = await call(handler, { method: 'GET', path: '/compute/v2.1/flavors', headers });
      expect(res.status).toBe(406);
      expect(res.body).toEqual({ computeFault: { code: 406, message: `Version ${v} is not supported by the API. Minimum is 2.1 and maximum is 2.93.` } });
      expect(res.headers['OpenStack-API-Version']).toBeUndefined();
      expect(res.headers['x-compute-request-id']).toMatch(/^req-/);
    }
  });

  test('a malformed version is 400', async () => {
    const res = await call(handler, { method: 'GET', path: '/compute/v2.1/flavors', headers: compute('2.x') });
    expect(res.status).toBe(400);
    expect(res.body.badRequest.message).toContain('is of invalid format');
  });

  test('routes removed at 2.88 answer 404 there (statistics, uptime)', async () => {
    for (const path of ['/compute/v2.1/os-hypervisors/statistics', `/compute/v2.1/os-hypervisors/${UUID}/uptime`]) {
      const res = await call(handler, { method: 'GET', path, headers: compute('2.88') });
      expect(res.status).toBe(404);
      expect(res.body.itemNotFound.code).toBe(404);
    }
  });

  test('the project id in the path is accepted and must be the caller\'s for non-admins', async () => {
    const res = await call(handler, { method: 'GET', path: '/compute/v2.1/admin/flavors', headers: compute('2.93'), caller: DEMO });
    expect(res.status).toBe(400);
    expect(res.body.badRequest.message).toBe("Malformed request URL: URL's project_id 'admin' doesn't match Context's project_id 'demo'");
  });
});

describe('policy and faults', () => {
  test.each([
    ['GET', '/os-services'],
    ['GET', '/os-hypervisors'],
    ['GET', '/os-hypervisors/detail'],
    ['GET', `/os-hypervisors/${UUID}`],
    ['GET', '/os-availability-zone/detail'],
  ])('%s %s is admin only: 403 forbidden for a member', async (method, path) => {
    const res = await call(handler, { method, path: `/compute/v2.1${path}`, headers: compute('2.93'), caller: DEMO });
    expect(res.status).toBe(403);
    expect(Object.keys(res.body)).toEqual(['forbidden']);
  });

  test('PUT /os-services/{id} validates the body before the policy, as Nova does', async () => {
    const invalid = await call(handler, { method: 'PUT', path: `/compute/v2.1/os-services/${UUID}`, headers: compute('2.53'), body: { forced_down: true, x: 1 }, caller: DEMO });
    expect(invalid.status).toBe(400);
    expect(invalid.body.badRequest.message).toContain("Additional properties are not allowed ('x' was unexpected)");
    const valid = await call(handler, { method: 'PUT', path: `/compute/v2.1/os-services/${UUID}`, headers: compute('2.53'), body: { forced_down: true }, caller: DEMO });
    expect(valid.status).toBe(403);
  });

  test('without an authorizer context: 401 unauthorized', async () => {
    const res = await call(handler, { method: 'GET', path: '/compute/v2.1/flavors', caller: null });
    expect(res.status).toBe(401);
    expect(res.body.unauthorized.code).toBe(401);
  });

  test('novaFaultBody renames only a lone notAcceptable fault', () => {
    expect(novaFaultBody('{"notAcceptable":{"code":406,"message":"m"}}')).toBe('{"computeFault":{"code":406,"message":"m"}}');
    expect(novaFaultBody('{"badRequest":{"code":400,"message":"m"}}')).toBe('{"badRequest":{"code":400,"message":"m"}}');
    expect(novaFaultBody('not json')).toBe('not json');
    expect(novaFaultBody(undefined)).toBeUndefined();
  });
});
