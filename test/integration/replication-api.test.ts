/**
 * The os-services replication actions, capabilities and snapshots through the composed Cinder
 * handler against DynamoDB Local, for everything decided before an execution starts: upstream's
 * validation order and messages (reference §2.1/§2.2), freeze/thaw, and the conditional service
 * update. Failovers that run are in test/integration/replication-failover.test.ts.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { handler } from '../../functions/api/volume.js';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import { getBackendItem } from '../../functions/replication/service-repo.js';
import { hostMatches } from '../../functions/replication/requests.js';
import { seedVolumeSandbox } from '../../functions/volumes/seed.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';
import { ADMIN, DEMO, call, cinder } from '../support/events.js';

let ddb: LocalDynamo;
let dataDir: string;
beforeAll(async () => {
  ddb = await useLocalDynamo();
  dataDir = await mkdtemp(join(tmpdir(), 'ferry-replapi-'));
  await seedVolumeSandbox({ dataDir });
}, 60_000);
afterAll(async () => {
  await ddb?.stop();
  clearDriverCache();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

const put = (action: string, body: unknown, version = '3.70', caller = ADMIN) => call(handler, { method: 'PUT', path: `/volume/v3/os-services/${action}`, headers: cinder(version), body, caller });
const bad = (message: string) => ({ badRequest: { code: 400, message } });

describe('PUT /os-services/{action}: validation in upstream order', () => {
  test('unknown action, and failover below 3.26, are "Unknown action"', async () => {
    expect((await put('explode', { host: 'ferry@lvm-r' })).body).toEqual(bad('Invalid input received: Unknown action'));
    expect((await put('failover', { host: 'ferry@lvm-r' }, '3.25')).body).toEqual(bad('Invalid input received: Unknown action'));
  });
  test('schema: extra keys, host type/pattern/length, backend_id type', async () => {
    expect((await put('freeze', { host: 'ferry@lvm-r', backend_id: 'x' })).body).toEqual(bad("Additional properties are not allowed ('backend_id' was unexpected)"));
    expect((await put('failover_host', { host: 'ferry@lvm-r', force: true })).body).toEqual(bad("Additional properties are not allowed ('force' was unexpected)"));
    expect((await put('failover_host', { host: 5 })).body).toEqual(bad("Invalid input for field/attribute host. Value: 5. 5 is not of type 'string'"));
    expect((await put('failover_host', { host: 'a b' })).body).toEqual(bad("Invalid input for field/attribute host. Value: a b. 'a b' does not match '^[a-zA-Z0-9-._#@:/+\\\\[\\\\]]*$'"));
    expect((await put('failover_host', { host: '' })).body).toEqual(bad("Invalid input for field/attribute host. Value: . '' is too short"));
    expect((await put('failover_host', { host: 'ferry@lvm-r', backend_id: 3 })).body).toEqual(bad("Invalid input for field/attribute backend_id. Value: 3. 3 is not of type 'string', 'null'"));
  });
  test('host presence: failover_host always needs host; at 3.26+ exactly one of host and cluster', async () => {
    expect((await put('failover_host', { backend_id: null })).body).toEqual(bad('Invalid input received: Host field is missing.'));
    expect((await put('freeze', {}, '3.25')).body).toEqual(bad('Invalid input received: Host field is missing.'));
    expect((await put('freeze', {})).body).toEqual(bad('Invalid input received: One and only one of cluster and host must be set.'));
    expect((await put('failover', { host: 'ferry@lvm-r', cluster: 'c' })).body).toEqual(bad('Invalid input received: One and only one of cluster and host must be set.'));
  });
  test('policy after schema: a non-admin with a valid body gets 403, with a bad body 400', async () => {
    expect(await put('freeze', { host: 'ferry@lvm-r' }, '3.70', DEMO)).toMatchObject({ status: 403, body: { forbidden: { message: "Policy doesn't allow volume:freeze_host to be performed." } } });
    expect((await put('freeze', { host: 5 }, '3.70', DEMO)).status).toBe(400);
  });
  test('service lookup: none, several (bare host), a cluster', async () => {
    expect((await put('failover_host', { host: 'nohost@x' })).body).toEqual(bad('No service found with host=nohost@x'));
    expect((await put('failover_host', { host: 'ferry@lvm-r#pool0' })).body).toEqual(bad('No service found with host=ferry@lvm-r#pool0'));
    expect((await put('failover_host', { host: 'ferry' })).body).toEqual(bad('Invalid input received: Services from different clusters found.'));
    expect((await put('failover', { cluster: 'c1' })).body).toEqual(bad('No service found with cluster=c1'));
  });
  test('failover of a backend without replication: the conditional update refuses with upstream\'s message', async () => {
    expect((await put('failover_host', { host: 'ferry@lvm-a', backend_id: null })).body).toEqual(
      bad("Invalid input received: No service could be changed: replication_status in ['ferry@lvm-a'] must be ['enabled', 'failed-over'] and must be up to failover."),
    );
    expect((await getBackendItem('ferry@lvm-a')).service.replicationStatus).toBe('disabled');
  });
  test('drill: "end" without a drill, a bad drill value, a drill to the failback sentinel', async () => {
    expect((await put('failover_host', { host: 'ferry@lvm-r', drill: 'end' })).body).toEqual(bad('Invalid input received: Backend ferry@lvm-r has no drill to end.'));
    expect((await put('failover_host', { host: 'ferry@lvm-r', drill: 'maybe' })).body).toEqual(bad("Invalid input for field/attribute drill. Value: maybe. 'maybe' is not one of [True, False, 'end']"));
    expect((await put('failover_host', { host: 'ferry@lvm-r', backend_id: 'default', drill: true })).body).toEqual(
      bad("Invalid input received: A drill needs a replication target of ferry@lvm-r, not 'default'."),
    );
  });
});

describe('freeze / thaw', () => {
  test('freeze 200 empty, frozen and disabled; thaw 200 empty, enabled again; each twice refused', async () => {
    expect(await put('freeze', { host: 'ferry@lvm-b' })).toMatchObject({ status: 200, body: undefined });
    expect((await getBackendItem('ferry@lvm-b')).service).toMatchObject({ frozen: true, disabled: true, disabledReason: 'frozen' });
    expect((await put('freeze', { host: 'ferry@lvm-b' })).body).toEqual(bad("Invalid input received: No service could be changed: frozen in ['ferry@lvm-b'] must be False to failover."));
    expect(await put('thaw', { host: 'ferry@lvm-b' })).toMatchObject({ status: 200, body: undefined });
    expect((await getBackendItem('ferry@lvm-b')).service).toMatchObject({ frozen: false, disabled: false, disabledReason: '' });
    expect((await put('thaw', { host: 'ferry@lvm-b' })).body).toEqual(bad("Invalid input received: No service could be changed: frozen in ['ferry@lvm-b'] must be True to failover."));
  });
  test('concurrent freezes: exactly one wins (the condition, not a read)', async () => {
    const results = await Promise.all(Array.from({ length: 6 }, () => put('freeze', { host: 'ferry@lvm-b' })));
    expect(results.filter((r) => r.status === 200)).toHaveLength(1);
    expect(results.filter((r) => r.status === 400)).toHaveLength(5);
    expect((await put('thaw', { host: 'ferry@lvm-b' })).status).toBe(200);
  });
});

describe('GET /os-services and /capabilities', () => {
  test('admin only; volume rows carry the replication fields', async () => {
    expect((await call(handler, { method: 'GET', path: '/volume/v3/os-services', headers: cinder(), caller: DEMO })).status).toBe(403);
    const res = await call(handler, { method: 'GET', path: '/volume/v3/os-services', headers: cinder(), caller: ADMIN });
    expect(res.body.services.map((s: { binary: string; host: string }) => `${s.binary} ${s.host}`)).toEqual([
      'cinder-scheduler ferry',
      'cinder-volume ferry@lvm-a',
      'cinder-volume ferry@lvm-b',
      'cinder-volume ferry@lvm-r',
    ]);
    expect(res.body.services[3]).toEqual({
      binary: 'cinder-volume', host: 'ferry@lvm-r', zone: 'nova', status: 'enabled', state: 'up', updated_at: expect.any(String), cluster: null,
      disabled_reason: null, replication_status: 'enabled', active_backend_id: null, frozen: false, backend_state: 'up',
    });
    const old = await call(handler, { method: 'GET', path: '/volume/v3/os-services', headers: cinder('3.0'), caller: ADMIN });
    expect(old.body.services[3]).not.toHaveProperty('cluster');
    expect(old.body.services[3]).not.toHaveProperty('backend_state');
  });
  test('capabilities of a non-replicated backend: no replication targets', async () => {
    const res = await call(handler, { method: 'GET', path: '/volume/v3/capabilities/ferry@lvm-a', headers: cinder(), caller: ADMIN });
    expect(res.body).toMatchObject({ replication_targets: [], volume_backend_name: 'lvm-a' });
    expect(Object.keys(res.body).sort()).toEqual(['description', 'display_name', 'driver_version', 'namespace', 'pool_name', 'properties', 'replication_targets', 'storage_protocol', 'vendor_name', 'visibility', 'volume_backend_name']);
  });
});

describe('host matching (_filter_host)', () => {
  test.each([
    ['ferry@lvm-r', 'ferry@lvm-r', true],
    ['ferry@lvm-r', 'ferry@lvm-r#pool0', true],
    ['ferry', 'ferry@lvm-r', true],
    ['ferry', 'ferry#p', true],
    ['ferry@lvm', 'ferry@lvm-r', false],
    ['ferry@lvm-r#pool0', 'ferry@lvm-r', false],
    ['fer', 'ferry@lvm-r', false],
  ])('%s matches %s: %s', (value, service, expected) => {
    expect(hostMatches(value, service)).toBe(expected);
  });
});

describe('snapshots: validation', () => {
  const post = (body: unknown, version = '3.70') => call(handler, { method: 'POST', path: '/volume/v3/snapshots', headers: cinder(version), body, caller: DEMO });
  test('schema and lookup', async () => {
    expect((await post({ snapshot: {} })).body).toEqual(bad("Invalid input for field/attribute snapshot. Value: {}. 'volume_id' is a required property"));
    expect((await post({ snapshot: { volume_id: 'x' } })).body).toEqual(bad("Invalid input for field/attribute volume_id. Value: x. 'x' is not a 'uuid'"));
    expect((await post({ snapshot: { volume_id: '11111111-1111-4111-8111-111111111111', size: 1 } })).body.badRequest.message).toMatch(/Additional properties are not allowed \('size' was unexpected\)/);
    expect((await post({ snapshot: { volume_id: '11111111-1111-4111-8111-111111111111', force: false } })).body.badRequest.message).toMatch(/Since microversion 3.66 the 'force' flag is invalid/);
    expect(await post({ snapshot: { volume_id: '11111111-1111-4111-8111-111111111111' } })).toMatchObject({ status: 404, body: { itemNotFound: { message: 'Volume 11111111-1111-4111-8111-111111111111 could not be found.' } } });
    expect((await call(handler, { method: 'GET', path: '/volume/v3/snapshots/11111111-1111-4111-8111-111111111111', headers: cinder(), caller: DEMO })).status).toBe(404);
  });
});
