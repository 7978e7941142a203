/**
 * The Manila share flow through the embedded local stack over HTTP: POST /shares runs share-create
 * (schedule with a capacity reservation, a real directory on the backend, available), data written
 * into the export path reads back, access allow/deny reach the driver's rules file, DELETE runs
 * share-delete (directory gone, capacity released); a driver failure on create ends in `error`
 * with capacity released and no directory. Every scenario ends with a clean audit.
 */
import { existsSync } from 'node:fs';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { clearFaults, injectFault } from '../../functions/core/faults.js';
import { allocatedOnSharePool, getShare } from '../../functions/shares/repo.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
beforeAll(async () => {
  stack = await useLocalStack();
});
afterAll(async () => stack?.stop());
afterEach(async () => {
  clearFaults();
  expect((await runAudit()).findings).toEqual([]);
});

async function api(method: string, path: string, body?: unknown, token = 'demo:demo', version = '2.72', extra: Record<string, string> = {}) {
  const res = await fetch(`${stack.url}/share/v2${path}`, {
    method,
    headers: { 'X-Auth-Token': token, 'X-OpenStack-Manila-API-Version': version, Accept: 'application/json', ...(body === undefined ? {} : { 'Content-Type': 'application/json' }), ...extra },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

async function statusBecomes(id: string, wanted: string[]): Promise<Record<string, any>> {
  return eventually(async () => {
    const res = await api('GET', `/shares/${id}`, undefined, 'admin:admin');
    return wanted.includes(res.body?.share?.status) ? res.body.share : undefined;
  }, `share ${id} to become ${wanted.join('|')}`);
}

async function gone(id: string): Promise<void> {
  await eventually(async () => ((await api('GET', `/shares/${id}`)).status === 404 ? true : undefined), `share ${id} to be deleted`);
}

describe('version discovery and headers', () => {
  test('GET /share/ is 300 with CURRENT 2.72; GET /share/v2/ lists v2 (200); the version, experimental and Vary echoes', async () => {
    const root = await fetch(`${stack.url}/share/`);
    expect(root.status).toBe(300);
    const doc = (await root.json()) as any;
    expect(doc.versions[0]).toMatchObject({ id: 'v2.0', status: 'CURRENT', version: '2.72', min_version: '2.0' });
    const v2 = await fetch(`${stack.url}/share/v2/`);
    expect(v2.status).toBe(200);
    expect(((await v2.json()) as any).versions[0].version).toBe('2.72');

    const res = await api('GET', '/shares', undefined, 'demo:demo', '2.50', { 'X-OpenStack-Manila-API-Experimental': 'True' });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-openstack-manila-api-version')).toBe('2.50');
    expect(res.headers.get('x-openstack-manila-api-experimental')).toBe('True');
    expect(res.headers.get('vary')).toBe('X-OpenStack-Manila-API-Version');
    expect((await api('GET', '/shares', undefined, 'demo:demo', '2.73')).status).toBe(406);
    // With the project id in the path, as older clients send it.
    expect((await fetch(`${stack.url}/share/v2/demo/shares`, { headers: { 'X-Auth-Token': 'demo:demo' } })).status).toBe(200);
  });
});

describe('create, use and delete a share', () => {
  test('create -> available with a real directory; data round-trips; access rules reach the driver; delete removes the directory', async () => {
    // Act
    const created = await api('POST', '/shares', { share: { share_proto: 'NFS', size: 1, name: 'flow', metadata: { a: 'b' } } });
    // Assess
    expect(created.status).toBe(202);
    expect(created.body.share).toMatchObject({ status: 'creating', name: 'flow', task_state: null, share_proto: 'NFS', volume_type: 'default' });
    const id = created.body.share.id;
    const share = await statusBecomes(id, ['available', 'error']);
    expect(share.status).toBe('available');
    expect(share.host).toMatch(/^ferry@nfs-[abc]#pool0$/);
    const els = await api('GET', `/shares/${id}/export_locations`);
    expect(els.status).toBe(200);
    const path: string = els.body.export_locations[0].path;
    expect(path.startsWith(join(stack.dataDir, 'shares'))).toBe(true);
    expect((await stat(path)).isDirectory()).toBe(true);
    await writeFile(join(path, 'hello.txt'), 'ferry');
    expect(await readFile(join(path, 'hello.txt'), 'utf8')).toBe('ferry');
    const record = (await getShare(id))!;
    expect(await allocatedOnSharePool(record.host!)).toBeGreaterThanOrEqual(1);

    const allowed = await api('POST', `/shares/${id}/action`, { allow_access: { access_type: 'ip', access_to: '10.0.0.0/24', access_level: 'ro' } });
    expect(allowed.status).toBe(200);
    expect(allowed.body.access).toMatchObject({ access_type: 'ip', access_to: '10.0.0.0/24', access_level: 'ro', state: 'active' });
    const rules = JSON.parse(await readFile(`${path}.access.json`, 'utf8'));
    expect(rules).toEqual([{ id: allowed.body.access.id, accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'ro' }]);
    expect((await stat(path)).mode & 0o777).toBe(0o555);
    const dup = await api('POST', `/shares/${id}/action`, { allow_access: { access_type: 'ip', access_to: '10.0.0.0/24' } });
    expect(dup.status).toBe(400);
    const list = await api('GET', `/share-access-rules?share_id=${id}`);
    expect(list.body.access_list.map((r: any) => r.id)).toEqual([allowed.body.access.id]);
    const legacy = await api('POST', `/shares/${id}/action`, { access_list: null }, 'demo:demo', '2.44');
    expect(legacy.body.access_list).toHaveLength(1);

    const denied = await api('POST', `/shares/${id}/action`, { deny_access: { access_id: allowed.body.access.id } });
    expect(denied.status).toBe(202);
    expect(JSON.parse(await readFile(`${path}.access.json`, 'utf8'))).toEqual([]);
    expect((await stat(path)).mode & 0o777).toBe(0o755);
    expect((await runAudit()).findings).toEqual([]);

    const deleted = await api('DELETE', `/shares/${id}`);
    expect(deleted.status).toBe(202);
    await gone(id);
    expect(existsSync(path)).toBe(false);
    expect(await allocatedOnSharePool(record.host!)).toBe(0);
  });

  test('a share type naming a backend places the share there', async () => {
    const type = await api('POST', '/types', { share_type: { name: 'on-c', extra_specs: { driver_handles_share_servers: 'False', share_backend_name: 'nfs-c' } } }, 'admin:admin');
    expect(type.status).toBe(200);
    const created = await api('POST', '/shares', { share: { share_proto: 'CIFS', size: 2, share_type: 'on-c' } });
    const share = await statusBecomes(created.body.share.id, ['available', 'error']);
    expect(share.host).toBe('ferry@nfs-c#pool0');
    expect((await api('DELETE', `/types/${type.body.share_type.id}`, undefined, 'admin:admin')).status).toBe(400);
    await api('DELETE', `/shares/${share.id}`);
    await gone(share.id);
    expect((await api('DELETE', `/types/${type.body.share_type.id}`, undefined, 'admin:admin')).status).toBe(202);
  });

  test('concurrent creates never over-allocate a pool: one of three 600 GiB shares fits on nfs-a', async () => {
    const type = await api('POST', '/types', { share_type: { name: 'only-a', extra_specs: { driver_handles_share_servers: 'False', share_backend_name: 'nfs-a' } } }, 'admin:admin');
    expect(type.status).toBe(200);
    const created = await Promise.all([1, 2, 3].map((n) => api('POST', '/shares', { share: { share_proto: 'NFS', size: 600, name: `big-${n}`, share_type: 'only-a' } })));
    const ids: string[] = created.map((c) => c.body.share.id);
    const final = await Promise.all(ids.map((id) => statusBecomes(id, ['available', 'error'])));
    expect(final.map((f) => f.status).sort()).toEqual(['available', 'error', 'error']);
    expect(await allocatedOnSharePool('ferry@nfs-a#pool0')).toBe(600);
    expect((await getShare(final.find((f) => f.status === 'error')!.id))!.errorReason).toContain('No valid host was found');
    for (const id of ids) expect((await api('DELETE', `/shares/${id}`)).status).toBe(202);
    for (const id of ids) await gone(id);
    expect(await allocatedOnSharePool('ferry@nfs-a#pool0')).toBe(0);
    expect((await api('DELETE', `/types/${type.body.share_type.id}`, undefined, 'admin:admin')).status).toBe(202);
  });

  test('a driver failure on create: error, capacity released, no directory', async () => {
    injectFault({ kind: 'share', method: 'createShare', mode: 'fail-after', message: 'disk on fire' });
    const created = await api('POST', '/shares', { share: { share_proto: 'NFS', size: 3, name: 'doomed' } });
    const share = await statusBecomes(created.body.share.id, ['error']);
    expect(share.status).toBe('error');
    const record = (await getShare(share.id))!;
    expect(record.capacity).toBeNull();
    expect(record.errorReason).toContain('disk on fire');
    expect(await allocatedOnSharePool(record.host!)).toBe(0);
    expect(existsSync(join(stack.dataDir, 'shares', record.host!.slice('ferry@'.length, record.host!.indexOf('#')), `share-${record.instanceId}`))).toBe(false);
    clearFaults();
    expect((await api('DELETE', `/shares/${share.id}`)).status).toBe(202);
    await gone(share.id);
  });

  test('delete is refused while a migration task runs', async () => {
    const created = await api('POST', '/shares', { share: { share_proto: 'NFS', size: 1 } });
    const id = created.body.share.id;
    await statusBecomes(id, ['available']);
    const { updateShare } = await import('../../functions/shares/repo.js');
    await updateShare(id, { type: 'set-task-state', at: new Date().toISOString(), taskState: 'migration_in_progress' });
    const refused = await api('DELETE', `/shares/${id}`);
    expect(refused.status).toBe(400);
    expect(refused.body.badRequest.message).toContain('busy');
    await updateShare(id, { type: 'set-task-state', at: new Date().toISOString(), taskState: null });
    expect((await api('DELETE', `/shares/${id}`)).status).toBe(202);
    await gone(id);
  });
});

describe('API rules', () => {
  test('microversion floors, action dispatch, experimental actions, scoping and admin-only writes', async () => {
    const created = await api('POST', '/shares', { share: { share_proto: 'NFS', size: 1, name: 'rules' } });
    const id = created.body.share.id;
    await statusBecomes(id, ['available']);
    expect((await api('GET', `/shares/${id}/export_locations`, undefined, 'demo:demo', '2.8')).status).toBe(404);
    expect((await api('GET', `/shares/${id}`, undefined, 'demo:demo', '2.8')).body.share.export_locations).toHaveLength(1);
    expect((await api('GET', `/share-access-rules?share_id=${id}`, undefined, 'demo:demo', '2.44')).status).toBe(404);
    expect((await api('POST', `/shares/${id}/action`, { a: 1, b: 2 })).body.badRequest.message).toBe('Malformed request body');
    expect((await api('POST', `/shares/${id}/action`, { migration_frobnicate: null })).body.badRequest.message).toBe('There is no such action: migration_frobnicate');
    expect((await api('POST', `/shares/${id}/action`, { constructor: null })).status).toBe(400);
    // The contract the migration work uses: an experimental action is a bare 404 without the header.
    const { registerShareAction } = await import('../../functions/shares/actions.js');
    registerShareAction('ferry_probe', { minVersion: '2.22', experimental: true, handler: async () => ({ status: 200, body: { ok: true } }) });
    expect((await api('POST', `/shares/${id}/action`, { ferry_probe: null })).status).toBe(404);
    const probed = await api('POST', `/shares/${id}/action`, { ferry_probe: null }, 'demo:demo', '2.72', { 'X-OpenStack-Manila-API-Experimental': 'true' });
    expect(probed.status).toBe(200);
    expect(probed.headers.get('x-openstack-manila-api-experimental')).toBe('True');
    // Another project's share does not exist for it.
    expect((await api('GET', `/shares/${id}`, undefined, 'other:other')).status).toBe(404);
    expect((await api('DELETE', `/shares/${id}`, undefined, 'other:other')).status).toBe(404);
    expect((await api('POST', '/types', { share_type: { name: 'nope', extra_specs: { driver_handles_share_servers: false } } })).status).toBe(403);
    expect((await api('POST', '/types', { share_type: { name: 'nodhss', extra_specs: {} } }, 'admin:admin')).status).toBe(400);
    expect((await api('POST', '/types', { share_type: { name: 'default', extra_specs: { driver_handles_share_servers: false } } }, 'admin:admin')).status).toBe(409);
    expect((await api('POST', '/shares', { share: { share_proto: 'NFS', size: 1, share_type: 'missing' } })).status).toBe(404);
    const renamed = await api('PUT', `/shares/${id}`, { share: { display_name: 'renamed', display_description: 'd' } });
    expect(renamed.body.share).toMatchObject({ name: 'renamed', description: 'd' });
    expect((await api('DELETE', `/shares/${id}`)).status).toBe(202);
    await gone(id);
  });
});

describe('operator views', () => {
  test('services, pools, share networks, instances', async () => {
    const services = await api('GET', '/services', undefined, 'admin:admin');
    expect(services.body.services.map((s: any) => `${s.binary} ${s.host}`)).toEqual(['manila-scheduler ferry', 'manila-share ferry@nfs-a', 'manila-share ferry@nfs-b', 'manila-share ferry@nfs-c']);
    expect((await api('GET', '/services')).status).toBe(403);
    const pools = await api('GET', '/scheduler-stats/pools/detail', undefined, 'admin:admin');
    expect(pools.body.pools.map((p: any) => p.name)).toEqual(['ferry@nfs-a#pool0', 'ferry@nfs-b#pool0', 'ferry@nfs-c#pool0']);
    expect(pools.body.pools[0].capabilities).toMatchObject({ total_capacity_gb: 1000, driver_handles_share_servers: false, share_backend_name: 'nfs-a' });
    const net = await api('POST', '/share-networks', { share_network: { name: 'n1' } });
    expect(net.status).toBe(200);
    expect((await api('GET', '/share-networks')).body.share_networks.map((n: any) => n.name)).toContain('n1');
    expect((await api('DELETE', `/share-networks/${net.body.share_network.id}`)).status).toBe(202);
    const created = await api('POST', '/shares', { share: { share_proto: 'NFS', size: 1 } });
    await statusBecomes(created.body.share.id, ['available']);
    const instances = await api('GET', '/share_instances', undefined, 'admin:admin');
    expect(instances.body.share_instances.find((i: any) => i.share_id === created.body.share.id)).toMatchObject({ status: 'available' });
    await api('DELETE', `/shares/${created.body.share.id}`);
    await gone(created.body.share.id);
  });

  test('a share network in use by a share cannot be deleted; once the share is gone it can', async () => {
    const type = await api('POST', '/types', { share_type: { name: 'with-servers', extra_specs: { driver_handles_share_servers: true } } }, 'admin:admin');
    expect(type.status).toBe(200);
    const net = (await api('POST', '/share-networks', { share_network: { name: 'in-use' } })).body.share_network;
    const created = await api('POST', '/shares', { share: { share_proto: 'NFS', size: 1, share_type: 'with-servers', share_network_id: net.id } });
    expect(created.status).toBe(202);
    // No backend handles share servers: the share ends in error, still naming its network.
    await statusBecomes(created.body.share.id, ['error']);
    const refused = await api('DELETE', `/share-networks/${net.id}`);
    expect(refused.status).toBe(400);
    expect(refused.body.badRequest.message).toBe(`Network ${net.id} is in use by shares.`);
    expect((await api('GET', `/share-networks/${net.id}`)).status).toBe(200);
    await api('DELETE', `/shares/${created.body.share.id}`);
    await gone(created.body.share.id);
    expect((await api('DELETE', `/share-networks/${net.id}`)).status).toBe(202);
    expect((await api('DELETE', `/share-networks/${net.id}`)).status).toBe(404);
    // A share naming a network that is gone is refused.
    expect((await api('POST', '/shares', { share: { share_proto: 'NFS', size: 1, share_type: 'with-servers', share_network_id: net.id } })).status).toBe(404);
    expect((await api('DELETE', `/types/${type.body.share_type.id}`, undefined, 'admin:admin')).status).toBe(202);
  });
});
