/**
 * The Nova foundation over real HTTP on the local stack: version discovery (public), flavors,
 * os-services with forced_down persisted in the cell's table under a version condition, the
 * pre-2.53 force-down form, hypervisors (usage, reduced view, lookups), paths with and without the
 * project id, 406 and 404 bodies, the admin policies, and an idempotent seed.
 */
import { GetCommand, QueryCommand } from '@aws-sdk/lib-dynamodb';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { db } from '../../functions/core/db.js';
import { ConcurrentModification } from '../../functions/core/errors.js';
import { tableName } from '../../functions/core/tables.js';
import { serviceKey, type ComputeService } from '../../functions/compute/model.js';
import { findServiceByHostBinary, listCells, putService } from '../../functions/compute/repo.js';
import { nodeUuid, seedComputeSandbox, serviceUuid } from '../../functions/compute/seed.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
beforeAll(async () => {
  stack = await useLocalStack();
});
afterAll(async () => stack?.stop());

interface Res {
  status: number;
  body: any;
  headers: Headers;
}

async function nova(method: string, path: string, opts: { version?: string; token?: string | null; body?: unknown; legacy?: boolean } = {}): Promise<Res> {
  const token = opts.token === undefined ? 'admin:admin' : opts.token;
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (token) headers['X-Auth-Token'] = token;
  if (opts.version) headers[opts.legacy ? 'X-OpenStack-Nova-API-Version' : 'OpenStack-API-Version'] = opts.legacy ? opts.version : `compute ${opts.version}`;
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(`${stack.url}${path}`, { method, headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

const CMP1 = serviceUuid('cmp1', 'nova-compute');

async function storedService(table: 'cell1' | 'cell2', uuid: string): Promise<ComputeService & Record<string, unknown>> {
  const out = await db().send(new GetCommand({ TableName: tableName(table), Key: serviceKey(uuid), ConsistentRead: true }));
  return out.Item as ComputeService & Record<string, unknown>;
}

describe('version discovery and the paths', () => {
  test('GET /compute/ and /compute/v2.1/ need no token; everything else does', async () => {
    const list = await nova('GET', '/compute/', { token: null });
    expect(list.status).toBe(200);
    expect(list.body.versions.map((v: { id: string; version: string }) => [v.id, v.version])).toEqual([['v2.1', '2.93']]);
    const one = await nova('GET', '/compute/v2.1', { token: null });
    expect(one.status).toBe(200);
    expect(one.body.version).toMatchObject({ version: '2.93', min_version: '2.1' });
    expect(one.body.version.links[0].href).toBe(`${stack.url}/compute/v2.1/`);
    expect((await nova('GET', '/compute/v2.1/flavors', { token: null })).status).toBe(401);
  });

  test('with and without the project id in the path', async () => {
    const without = await nova('GET', '/compute/v2.1/flavors', { version: '2.93' });
    const withProject = await nova('GET', '/compute/v2.1/admin/flavors', { version: '2.93' });
    expect(without.status).toBe(200);
    expect(withProject.status).toBe(200);
    expect(withProject.body.flavors.map((f: { id: string }) => f.id)).toEqual(without.body.flavors.map((f: { id: string }) => f.id));
    expect(without.body.flavors[0].links[0].href).toBe(`${stack.url}/compute/v2.1/flavors/1`);
    expect(withProject.body.flavors[0].links[0].href).toBe(`${stack.url}/compute/v2.1/admin/flavors/1`);
    expect(withProject.body.flavors[0].links[1].href).toBe(`${stack.url}/compute/admin/flavors/1`);
    const demoOwn = await nova('GET', '/compute/v2.1/demo/os-availability-zone', { token: 'demo:demo' });
    expect(demoOwn.status).toBe(200);
    expect(demoOwn.body.availabilityZoneInfo).toEqual([{ zoneName: 'nova', zoneState: { available: true }, hosts: null }]);
  });

  test('406 outside 2.1-2.93 (computeFault), echo headers inside', async () => {
    const bad = await nova('GET', '/compute/v2.1/flavors', { version: '2.94' });
    expect(bad.status).toBe(406);
    expect(bad.body).toEqual({ computeFault: { code: 406, message: 'Version 2.94 is not supported by the API. Minimum is 2.1 and maximum is 2.93.' } });
    const legacyBad = await nova('GET', '/compute/v2.1/flavors', { version: '2.0', legacy: true });
    expect(legacyBad.status).toBe(406);
    const ok = await nova('GET', '/compute/v2.1/flavors', { version: '2.60', legacy: true });
    expect(ok.headers.get('openstack-api-version')).toBe('compute 2.60');
    expect(ok.headers.get('x-openstack-nova-api-version')).toBe('2.60');
    expect(ok.headers.get('vary')).toBe('OpenStack-API-Version, X-OpenStack-Nova-API-Version');
    expect(ok.headers.get('x-compute-request-id')).toMatch(/^req-/);
    const latest = await nova('GET', '/compute/v2.1/flavors', { version: 'latest' });
    expect(latest.headers.get('openstack-api-version')).toBe('compute 2.93');
    const none = await nova('GET', '/compute/v2.1/flavors');
    expect(none.headers.get('x-openstack-nova-api-version')).toBe('2.1');
  });
});

describe('flavors', () => {
  test('list, detail and show, with the two hardware generations in extra specs from 2.61', async () => {
    const list = await nova('GET', '/compute/v2.1/flavors', { token: 'demo:demo' });
    expect(list.body.flavors.map((f: { name: string }) => f.name)).toEqual(['m1.small', 'm1.large', 'm2.small', 'm2.large']);
    expect(Object.keys(list.body.flavors[0]).sort()).toEqual(['id', 'links', 'name']);

    const detail = await nova('GET', '/compute/v2.1/flavors/detail', { version: '2.61', token: 'demo:demo' });
    const gens = Object.fromEntries(detail.body.flavors.map((f: { name: string; extra_specs: Record<string, string> }) => [f.name, f.extra_specs['hw:generation']]));
    expect(gens).toEqual({ 'm1.small': '1', 'm1.large': '1', 'm2.small': '2', 'm2.large': '2' });
    expect((await nova('GET', '/compute/v2.1/flavors/detail', { version: '2.60' })).body.flavors[0]).not.toHaveProperty('extra_specs');

    const show = await nova('GET', '/compute/v2.1/flavors/4', { version: '2.75' });
    expect(show.body.flavor).toMatchObject({ id: '4', name: 'm2.large', vcpus: 4, ram: 8192, disk: 2, swap: 0, description: 'generation 2 hardware', extra_specs: { 'hw:generation': '2' } });
    expect((await nova('GET', '/compute/v2.1/flavors/4')).body.flavor.swap).toBe('');

    expect((await nova('GET', '/compute/v2.1/flavors/1/os-extra_specs')).body).toEqual({ extra_specs: { 'hw:generation': '1' } });
    expect((await nova('GET', '/compute/v2.1/flavors/3/os-extra_specs/hw:generation')).body).toEqual({ 'hw:generation': '2' });
  });

  test('filters, paging and 404 bodies', async () => {
    const big = await nova('GET', '/compute/v2.1/flavors/detail?minRam=4096&sort_key=name&sort_dir=desc');
    expect(big.body.flavors.map((f: { name: string }) => f.name)).toEqual(['m2.large', 'm1.large']);
    const page = await nova('GET', '/compute/v2.1/flavors?limit=2&marker=1');
    expect(page.body.flavors.map((f: { id: string }) => f.id)).toEqual(['2', '3']);
    expect(page.body.flavors_links[0]).toMatchObject({ rel: 'next' });
    expect((await nova('GET', '/compute/v2.1/flavors?marker=nope')).body).toEqual({ badRequest: { code: 400, message: 'marker [nope] not found' } });
    expect((await nova('GET', '/compute/v2.1/flavors?minRam=x')).status).toBe(400);

    const missing = await nova('GET', '/compute/v2.1/flavors/m1.small', { version: '2.93' });
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ itemNotFound: { code: 404, message: 'Flavor m1.small could not be found.' } });
    const noKey = await nova('GET', '/compute/v2.1/flavors/1/os-extra_specs/nokey');
    expect(noKey.body).toEqual({ itemNotFound: { code: 404, message: 'Flavor 1 has no extra specs with key nokey.' } });
    expect((await nova('GET', '/compute/v2.1/admin/nothing-here')).body).toEqual({ itemNotFound: { code: 404, message: 'The resource could not be found.' } });
  });
});

describe('os-services', () => {
  test('list: one nova-compute per host in both cells, the control services, admin only', async () => {
    const res = await nova('GET', '/compute/v2.1/os-services', { version: '2.93' });
    expect(res.status).toBe(200);
    const rows = res.body.services as Record<string, unknown>[];
    expect(rows.filter((s) => s.binary === 'nova-compute').map((s) => s.host)).toEqual(['cmp1', 'cmp2', 'cmp3', 'cmp4']);
    expect(rows.filter((s) => s.binary !== 'nova-compute').map((s) => `${s.binary}@${s.host}`).sort()).toEqual(['nova-conductor@cell2-conductor', 'nova-conductor@controller', 'nova-scheduler@controller']);
    expect(rows.find((s) => s.host === 'cmp1')).toMatchObject({ id: CMP1, zone: 'nova', status: 'enabled', state: 'up', forced_down: false, disabled_reason: null });
    expect(rows.find((s) => s.binary === 'nova-scheduler')).toMatchObject({ zone: 'internal' });
    const old = await nova('GET', '/compute/v2.1/os-services?host=cmp3', { version: '2.10' });
    expect(old.body.services).toHaveLength(1);
    expect(typeof old.body.services[0].id).toBe('number');
    expect(old.body.services[0]).not.toHaveProperty('forced_down');
    expect((await nova('GET', '/compute/v2.1/os-services', { token: 'demo:demo' })).status).toBe(403);
    expect((await nova('GET', '/compute/v2.1/admin/os-services?binary=nova-conductor')).body.services).toHaveLength(2);
  });

  test('2.53 PUT forced_down: persisted in the cell table with a version condition, then unset', async () => {
    // Prepare
    const before = await storedService('cell1', CMP1);
    expect(before.forcedDown).toBe(false);

    // Act: force down
    const down = await nova('PUT', `/compute/v2.1/os-services/${CMP1}`, { version: '2.53', body: { forced_down: true } });

    // Assess
    expect(down.status).toBe(200);
    expect(down.body.service).toMatchObject({ id: CMP1, host: 'cmp1', binary: 'nova-compute', forced_down: true, state: 'down', status: 'enabled' });
    const stored = await storedService('cell1', CMP1);
    expect(stored).toMatchObject({ forcedDown: true, version: before.version + 1 });
    // The service lives in its cell only.
    expect((await db().send(new GetCommand({ TableName: tableName('cell2'), Key: serviceKey(CMP1) }))).Item).toBeUndefined();
    const listed = (await nova('GET', '/compute/v2.1/os-services?host=cmp1', { version: '2.93' })).body.services[0];
    expect(listed).toMatchObject({ forced_down: true, state: 'down' });
    const hyp = (await nova('GET', `/compute/v2.1/os-hypervisors/${nodeUuid('cmp1')}`, { version: '2.93' })).body.hypervisor;
    expect(hyp.state).toBe('down');

    // A write from a stale read loses: the condition is on the version.
    const [cell1] = (await listCells()).filter((c) => c.name === 'cell1');
    await expect(putService(cell1!, { ...before, forcedDown: false, version: before.version + 1 }, before.version)).rejects.toBeInstanceOf(ConcurrentModification);
    expect((await storedService('cell1', CMP1)).forcedDown).toBe(true);

    // Unset, and disable/enable with a reason.
    const up = await nova('PUT', `/compute/v2.1/os-services/${CMP1}`, { version: '2.93', body: { forced_down: false } });
    expect(up.body.service).toMatchObject({ forced_down: false, state: 'up' });
    const disabled = await nova('PUT', `/compute/v2.1/os-services/${CMP1}`, { version: '2.93', body: { status: 'disabled', disabled_reason: 'maintenance' } });
    expect(disabled.body.service).toMatchObject({ status: 'disabled', disabled_reason: 'maintenance' });
    const enabled = await nova('PUT', `/compute/v2.1/os-services/${CMP1}`, { version: '2.93', body: { status: 'enabled' } });
    expect(enabled.body.service).toMatchObject({ status: 'enabled', disabled_reason: null });
    expect((await storedService('cell1', CMP1)).version).toBe(before.version + 4);
  });

  test('2.53 PUT refusals: bad uuid, unknown service, non-compute binary, no change, reason with enabled', async () => {
    const put = (id: string, body: unknown) => nova('PUT', `/compute/v2.1/os-services/${id}`, { version: '2.53', body });
    expect((await put('cmp1', { forced_down: true })).body).toEqual({ badRequest: { code: 400, message: 'Invalid uuid cmp1' } });
    const unknown = '00000000-0000-4000-8000-000000000000';
    expect((await put(unknown, { forced_down: true })).body).toEqual({ itemNotFound: { code: 404, message: `Service ${unknown} could not be found.` } });
    const conductor = serviceUuid('controller', 'nova-conductor');
    expect((await put(conductor, { forced_down: true })).body.badRequest.message).toBe('Updating a nova-conductor service is not supported. Only nova-compute services can be updated.');
    expect((await put(CMP1, {})).body.badRequest.message).toBe("No updates were requested. Fields 'status' or 'forced_down' should be specified.");
    expect((await put(CMP1, { status: 'enabled', disabled_reason: 'x' })).body.badRequest.message).toBe("Specifying 'disabled_reason' with status 'enabled' is invalid.");
    expect((await put(CMP1, { forced_down: 'maybe' })).status).toBe(400);
    expect((await nova('PUT', `/compute/v2.1/os-services/${CMP1}`, { version: '2.53', body: { forced_down: true }, token: 'demo:demo' })).status).toBe(403);
    expect((await storedService('cell1', CMP1)).forcedDown).toBe(false);
  });

  test('2.11 force-down by host and binary, in cell2 (through the host mapping)', async () => {
    const res = await nova('PUT', '/compute/v2.1/os-services/force-down', { version: '2.11', legacy: true, body: { host: 'cmp3', binary: 'nova-compute', forced_down: true } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ service: { host: 'cmp3', binary: 'nova-compute', forced_down: true } });
    expect((await storedService('cell2', serviceUuid('cmp3', 'nova-compute'))).forcedDown).toBe(true);
    const back = await nova('PUT', '/compute/v2.1/os-services/force-down', { version: '2.11', legacy: true, body: { host: 'cmp3', binary: 'nova-compute', forced_down: false } });
    expect(back.body.service.forced_down).toBe(false);
    const missing = await nova('PUT', '/compute/v2.1/os-services/force-down', { version: '2.11', legacy: true, body: { host: 'cmp9', binary: 'nova-compute', forced_down: true } });
    expect(missing.body).toEqual({ itemNotFound: { code: 404, message: 'Could not find binary nova-compute on host cmp9.' } });
    const disable = await nova('PUT', '/compute/v2.1/os-services/disable-log-reason', { version: '2.1', body: { host: 'cmp4', binary: 'nova-compute', disabled_reason: 'disk' } });
    expect(disable.body).toEqual({ service: { host: 'cmp4', binary: 'nova-compute', status: 'disabled', disabled_reason: 'disk' } });
    expect((await nova('PUT', '/compute/v2.1/os-services/enable', { body: { host: 'cmp4', binary: 'nova-compute' } })).body.service.status).toBe('enabled');
  });

  test('a compute host whose driver reports down is down (not forced)', async () => {
    const flag = join(stack.dataDir, 'compute', 'cmp2', 'down');
    await writeFile(flag, '');
    try {
      const svc = (await nova('GET', '/compute/v2.1/os-services?host=cmp2', { version: '2.93' })).body.services[0];
      expect(svc).toMatchObject({ state: 'down', forced_down: false });
    } finally {
      await rm(flag, { force: true });
    }
    expect((await nova('GET', '/compute/v2.1/os-services?host=cmp2', { version: '2.93' })).body.services[0].state).toBe('up');
  });
});

describe('os-hypervisors', () => {
  test('list and detail: capacity from the host config, usage 0 (no allocations yet); reduced at 2.88', async () => {
    const list = await nova('GET', '/compute/v2.1/os-hypervisors', { version: '2.93' });
    expect(list.body.hypervisors.map((h: { hypervisor_hostname: string }) => h.hypervisor_hostname)).toEqual(['cmp1', 'cmp2', 'cmp3', 'cmp4']);
    expect(list.body.hypervisors[0]).toEqual({ id: nodeUuid('cmp1'), hypervisor_hostname: 'cmp1', state: 'up', status: 'enabled' });

    const detail = await nova('GET', '/compute/v2.1/os-hypervisors/detail', { version: '2.87' });
    for (const h of detail.body.hypervisors) {
      expect(h).toMatchObject({ vcpus: 8, memory_mb: 16384, local_gb: 200, vcpus_used: 0, memory_mb_used: 0, local_gb_used: 0, free_ram_mb: 16384, free_disk_gb: 200, running_vms: 0, hypervisor_type: 'ferry-local' });
    }
    const reduced = await nova('GET', '/compute/v2.1/os-hypervisors/detail', { version: '2.88' });
    expect(reduced.body.hypervisors[0]).not.toHaveProperty('vcpus_used');
    expect(reduced.body.hypervisors[0].uptime).toMatch(/ up /);

    const stats = await nova('GET', '/compute/v2.1/os-hypervisors/statistics', { version: '2.87' });
    expect(stats.body.hypervisor_statistics).toMatchObject({ count: 4, vcpus: 32, vcpus_used: 0, memory_mb: 65536, local_gb: 800 });
    expect((await nova('GET', '/compute/v2.1/os-hypervisors/statistics', { version: '2.88' })).status).toBe(404);
    expect((await nova('GET', '/compute/v2.1/os-hypervisors', { token: 'demo:demo' })).status).toBe(403);
  });

  test('show by uuid (2.53+) or integer id (before); 404 otherwise; patterns and paging', async () => {
    const byUuid = await nova('GET', `/compute/v2.1/admin/os-hypervisors/${nodeUuid('cmp3')}`, { version: '2.93' });
    expect(byUuid.body.hypervisor).toMatchObject({ hypervisor_hostname: 'cmp3', service: { host: 'cmp3', id: serviceUuid('cmp3', 'nova-compute') } });
    const byId = await nova('GET', '/compute/v2.1/os-hypervisors/3', { version: '2.1' });
    expect(byId.body.hypervisor).toMatchObject({ id: 3, hypervisor_hostname: 'cmp3', cpu_info: expect.any(String) });
    expect((await nova('GET', '/compute/v2.1/os-hypervisors/cmp1', { version: '2.93' })).body).toEqual({ itemNotFound: { code: 404, message: "Hypervisor with ID 'cmp1' could not be found." } });
    expect((await nova('GET', '/compute/v2.1/os-hypervisors/99', { version: '2.1' })).status).toBe(404);

    const matching = await nova('GET', '/compute/v2.1/os-hypervisors?hypervisor_hostname_pattern=cmp2', { version: '2.53' });
    expect(matching.body.hypervisors.map((h: { hypervisor_hostname: string }) => h.hypervisor_hostname)).toEqual(['cmp2']);
    expect((await nova('GET', '/compute/v2.1/os-hypervisors?hypervisor_hostname_pattern=zzz', { version: '2.53' })).body.itemNotFound.message).toBe("No hypervisor matching 'zzz' could be found.");
    expect((await nova('GET', '/compute/v2.1/os-hypervisors/cmp/search', { version: '2.52' })).body.hypervisors).toHaveLength(4);
    const page = await nova('GET', `/compute/v2.1/os-hypervisors?limit=2&marker=${nodeUuid('cmp1')}`, { version: '2.93' });
    expect(page.body.hypervisors.map((h: { hypervisor_hostname: string }) => h.hypervisor_hostname)).toEqual(['cmp2', 'cmp3']);
    expect(page.body.hypervisors_links[0].rel).toBe('next');
  });
});

describe('cells and the seed', () => {
  test('the API table maps every host to its cell; each cell table holds its own hosts', async () => {
    const cells = await listCells();
    expect(cells.map((c) => [c.name, c.table])).toEqual([['cell1', 'cell1'], ['cell2', 'cell2']]);
    const mappings = await db().send(new QueryCommand({ TableName: tableName('compute-api'), IndexName: 'gsi1', KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': 'HOSTMAPPINGS' } }));
    expect(mappings.Items!.map((m) => `${m.host}->${m.cellName}`)).toEqual(['cmp1->cell1', 'cmp2->cell1', 'cmp3->cell2', 'cmp4->cell2']);
    const found = await findServiceByHostBinary('cmp4', 'nova-compute');
    expect(found?.cell.name).toBe('cell2');
    const net = await db().send(new QueryCommand({ TableName: tableName('compute-api'), IndexName: 'gsi1', KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': 'NETWORKS' } }));
    expect(net.Items!.map((n) => [n.name, n.cidr])).toEqual([['private', '10.0.0.0/24']]);
  });

  test('reseeding changes nothing: a forced-down service stays forced down', async () => {
    // Prepare
    await nova('PUT', `/compute/v2.1/os-services/${CMP1}`, { version: '2.53', body: { forced_down: true } });
    const before = await storedService('cell1', CMP1);
    // Act
    await seedComputeSandbox({ dataDir: stack.dataDir });
    // Assess
    expect(await storedService('cell1', CMP1)).toEqual(before);
    expect((await nova('GET', '/compute/v2.1/os-services', { version: '2.93' })).body.services).toHaveLength(7);
    expect((await nova('GET', '/compute/v2.1/flavors')).body.flavors).toHaveLength(4);
    await nova('PUT', `/compute/v2.1/os-services/${CMP1}`, { version: '2.53', body: { forced_down: false } });
  });
});
