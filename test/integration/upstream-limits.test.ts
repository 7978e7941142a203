/**
 * The small upstream APIs the openstack CLI / openstacksdk asked for and found missing (issue 15),
 * on the local stack: Nova's limits and os-quota-sets, Neutron's quotas, Cinder's limits and
 * os-availability-zone, Manila's share-access-rules show; upstream's bodies and statuses, then the
 * real clients (`openstack limits show --absolute`, `openstack quota show`, `openstack availability
 * zone list --volume` through the stack's clouds.yaml, `manila access-show`).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { manilaCli, openstackCli, parsePropertyTable } from '../support/cli.js';
import { manilaClient } from '../support/manila.js';
import { bootServer, novaClient } from '../support/nova.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const CLI_TIMEOUT_MS = 240_000;
let stack: TestLocalStack;
const url = (path: string) => `${stack.url}${path}`;

async function get(path: string, token: string, headers: Record<string, string> = {}, method = 'GET') {
  const res = await fetch(url(path), { method, headers: { 'X-Auth-Token': token, Accept: 'application/json', ...headers } });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function openstack(cloud: 'ferry-demo' | 'ferry-admin', args: string[]): Promise<any> {
  const r = await openstackCli(stack.cloudsYaml, cloud, [...args, '-f', 'json']);
  if (r.code !== 0) throw new Error(`openstack ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return JSON.parse(r.stdout);
}

beforeAll(async () => {
  stack = await useLocalStack();
});
afterAll(async () => {
  await stack?.stop();
});

describe('Nova limits and os-quota-sets', () => {
  test('limits: -1 for every limit, usage from the project\'s servers; the microversions drop what upstream drops', async () => {
    const nova = novaClient(stack, { token: 'lim:lim' });
    const flavor = (await nova('GET', '/flavors/1')).body.flavor;
    await bootServer(nova, { name: 'lim-1' });

    const latest = await nova('GET', '/limits');
    expect(latest.status).toBe(200);
    expect(latest.body).toEqual({
      limits: {
        rate: [],
        absolute: {
          maxTotalRAMSize: -1,
          maxTotalInstances: -1,
          maxTotalCores: -1,
          maxTotalKeypairs: -1,
          maxServerMeta: -1,
          maxServerGroups: -1,
          maxServerGroupMembers: -1,
          totalRAMUsed: flavor.ram,
          totalCoresUsed: flavor.vcpus,
          totalInstancesUsed: 1,
          totalServerGroupsUsed: 0,
        },
      },
    });
    const v21 = (await nova('GET', '/limits', { version: '2.1' })).body.limits.absolute;
    expect(v21).toMatchObject({ maxImageMeta: -1, maxPersonality: -1, maxPersonalitySize: -1, maxTotalFloatingIps: -1, maxSecurityGroups: -1, maxSecurityGroupRules: -1, totalFloatingIpsUsed: 0, totalSecurityGroupsUsed: 0 });
    const v238 = (await nova('GET', '/limits', { version: '2.38' })).body.limits.absolute;
    expect(v238).toHaveProperty('maxImageMeta');
    expect(v238).toHaveProperty('maxPersonality');
    expect(v238).not.toHaveProperty('maxTotalFloatingIps');
    // Another project's usage is not this one's; asking for it (tenant_id) is admin only.
    expect((await novaClient(stack, { token: 'other:other' })('GET', '/limits')).body.limits.absolute.totalInstancesUsed).toBe(0);
    expect((await nova('GET', '/limits?tenant_id=other')).status).toBe(403);
    expect((await novaClient(stack)('GET', '/limits?tenant_id=lim')).body.limits.absolute.totalInstancesUsed).toBe(1);
  });

  test('os-quota-sets show, detail, defaults; a member only its own; PUT and DELETE refused (400), admin only', async () => {
    const nova = novaClient(stack, { token: 'lim:lim' });
    const show = await nova('GET', '/os-quota-sets/lim');
    expect(show.status).toBe(200);
    expect(show.body).toEqual({ quota_set: { id: 'lim', cores: -1, instances: -1, key_pairs: -1, metadata_items: -1, ram: -1, server_groups: -1, server_group_members: -1 } });
    expect(Object.keys((await nova('GET', '/os-quota-sets/lim', { version: '2.1' })).body.quota_set).sort()).toEqual(
      ['id', 'cores', 'injected_files', 'injected_file_content_bytes', 'injected_file_path_bytes', 'instances', 'key_pairs', 'metadata_items', 'ram', 'server_groups', 'server_group_members', 'fixed_ips', 'floating_ips', 'security_groups', 'security_group_rules'].sort(),
    );
    const detail = await nova('GET', '/os-quota-sets/lim/detail');
    expect(detail.body.quota_set.instances).toEqual({ limit: -1, in_use: 1, reserved: 0 });
    expect(detail.body.quota_set.key_pairs).toEqual({ limit: -1, in_use: 0, reserved: 0 });
    expect((await nova('GET', '/os-quota-sets/lim/defaults')).body).toEqual(show.body);
    expect((await nova('GET', '/os-quota-sets/other')).status).toBe(403);
    expect((await nova('PUT', '/os-quota-sets/lim', { body: { quota_set: { instances: 5 } } })).status).toBe(403);
    const put = await novaClient(stack)('PUT', '/os-quota-sets/lim', { body: { quota_set: { instances: 5 } } });
    expect(put.status).toBe(400);
    expect(put.body.badRequest.code).toBe(400);
    expect((await novaClient(stack)('DELETE', '/os-quota-sets/lim')).status).toBe(400);
    expect((await nova('GET', '/os-quota-sets/lim')).body).toEqual(show.body);
  });
});

describe('Neutron quotas', () => {
  test('show, default, details (usage: the project\'s ports); another project 403; PUT refused', async () => {
    const show = await get('/network/v2.0/quotas/lim', 'lim:lim');
    expect(show).toEqual({ status: 200, body: { quota: { network: -1, subnet: -1, port: -1 } } });
    expect((await get('/network/v2.0/quotas/lim/default', 'lim:lim')).body).toEqual(show.body);
    const details = await get('/network/v2.0/quotas/lim/details', 'lim:lim');
    // The server booted above has one port on the auto-allocated network.
    expect(details.body.quota.port).toEqual({ limit: -1, used: 1, reserved: 0 });
    expect(details.body.quota.network).toEqual({ limit: -1, used: 0, reserved: 0 });
    const other = await get('/network/v2.0/quotas/other', 'lim:lim');
    expect(other.status).toBe(403);
    expect(other.body.NeutronError.type).toBe('PolicyNotAuthorized');
    expect((await get('/network/v2.0/quotas/lim', 'admin:admin', {}, 'PUT')).status).toBe(405);
  });
});

describe('Cinder limits and os-availability-zone', () => {
  test('limits: the quotas in force and the usage; an admin names another project from 3.39', async () => {
    const headers = { 'OpenStack-API-Version': 'volume 3.70' };
    const res = await get('/volume/v3/lim/limits', 'lim:lim', headers);
    expect(res.status).toBe(200);
    // The test tiers run with unlimited quota defaults (test/support/setup.ts), so set one to see it.
    const put = await fetch(url('/volume/v3/admin/os-quota-sets/lim'), { method: 'PUT', headers: { 'X-Auth-Token': 'admin:admin', 'Content-Type': 'application/json', ...headers }, body: JSON.stringify({ quota_set: { volumes: 7, gigabytes: 70 } }) });
    expect(put.status).toBe(200);
    const after = await get('/volume/v3/lim/limits', 'lim:lim', headers);
    // The limits, and the usage the used_limits extension adds (C/api/contrib/used_limits.py).
    expect(Object.keys(after.body.limits.absolute).sort()).toEqual([
      'maxTotalBackupGigabytes', 'maxTotalBackups', 'maxTotalSnapshots', 'maxTotalVolumeGigabytes', 'maxTotalVolumes',
      'totalBackupGigabytesUsed', 'totalBackupsUsed', 'totalGigabytesUsed', 'totalSnapshotsUsed', 'totalVolumesUsed',
    ]);
    expect(after.body).toMatchObject({ limits: { rate: [], absolute: { maxTotalVolumes: 7, maxTotalVolumeGigabytes: 70, totalVolumesUsed: 0, totalGigabytesUsed: 0 } } });
    // A volume is charged when it is created: the limits show it at once.
    const created = await fetch(url('/volume/v3/lim/volumes'), { method: 'POST', headers: { 'X-Auth-Token': 'lim:lim', 'Content-Type': 'application/json', ...headers }, body: JSON.stringify({ volume: { size: 2 } }) });
    expect(created.status).toBe(202);
    expect((await get('/volume/v3/lim/limits', 'lim:lim', headers)).body.limits.absolute).toMatchObject({ totalVolumesUsed: 1, totalGigabytesUsed: 2 });
    expect((await get('/volume/v3/admin/limits?project_id=lim', 'admin:admin', headers)).body.limits.absolute.maxTotalVolumes).toBe(7);
    // Before 3.39, and for a non-admin, project_id is ignored: the caller's own project.
    expect((await get('/volume/v3/admin/limits?project_id=lim', 'admin:admin', { 'OpenStack-API-Version': 'volume 3.38' })).body.limits.absolute.maxTotalVolumes).not.toBe(7);
    expect((await get('/volume/v3/other/limits?project_id=lim', 'other:other', headers)).body.limits.absolute.maxTotalVolumes).not.toBe(7);
  });

  test('os-hosts (admin): the scheduler and each backend; a host shows its volumes and snapshots in total and per project', async () => {
    const headers = { 'OpenStack-API-Version': 'volume 3.70' };
    const { listBackends } = await import('../../functions/volumes/backends.js');
    const backends = (await listBackends()).map((b) => b.host).sort();
    const list = await get('/volume/v3/admin/os-hosts', 'admin:admin', headers);
    expect(list.status).toBe(200);
    expect(list.body.hosts.filter((h: { service: string }) => h.service === 'cinder-volume').map((h: { host_name: string }) => h.host_name)).toEqual(backends);
    expect(list.body.hosts[0]).toMatchObject({ service: 'cinder-scheduler', 'service-status': 'available', 'service-state': 'enabled' });
    expect((await get('/volume/v3/hosts/os-hosts', 'hosts:hosts', headers)).status).toBe(403);
    expect((await get('/volume/v3/admin/os-hosts/nohost@x', 'admin:admin', headers)).status).toBe(404);
    // A volume of project `hosts` on its backend: counted in the total and in its project's row.
    const created = await fetch(url('/volume/v3/hosts/volumes'), { method: 'POST', headers: { 'X-Auth-Token': 'hosts:hosts', 'Content-Type': 'application/json', ...headers }, body: JSON.stringify({ volume: { size: 3 } }) });
    const id = ((await created.json()) as { volume: { id: string } }).volume.id;
    const host = await eventually(async () => ((await get(`/volume/v3/admin/volumes/${id}`, 'admin:admin', headers)).body.volume['os-vol-host-attr:host'] as string | null) ?? false, 'volume scheduled');
    const backend = host.split('#')[0]!;
    const shown = await get(`/volume/v3/admin/os-hosts/${encodeURIComponent(backend)}`, 'admin:admin', headers);
    expect(shown.status).toBe(200);
    const rows = shown.body.host.map((r: { resource: Record<string, string> }) => r.resource);
    expect(rows[0]).toMatchObject({ host: backend, project: '(total)' });
    expect(rows.find((r: { project: string }) => r.project === 'hosts')).toEqual({ host: backend, project: 'hosts', volume_count: '1', total_volume_gb: '3', snapshot_count: '0', total_snapshot_gb: '0' });
    expect(Number(rows[0].volume_count)).toBeGreaterThanOrEqual(1);
  });

  test('extensions: what Ferry serves, os-hosts among them', async () => {
    const res = await get('/volume/v3/lim/extensions', 'lim:lim', { 'OpenStack-API-Version': 'volume 3.70' });
    expect(res.status).toBe(200);
    const aliases = res.body.extensions.map((e: { alias: string }) => e.alias);
    expect(aliases).toEqual(expect.arrayContaining(['os-hosts', 'os-quota-sets', 'os-volume-transfer', 'qos-specs']));
    for (const e of res.body.extensions) expect(Object.keys(e).sort()).toEqual(['alias', 'description', 'links', 'name', 'updated']);
  });

  test('os-availability-zone: the zones of the volume backends, available', async () => {
    const res = await get('/volume/v3/lim/os-availability-zone', 'lim:lim', { 'OpenStack-API-Version': 'volume 3.70' });
    expect(res.status).toBe(200);
    const { listBackends } = await import('../../functions/volumes/backends.js');
    const zones = [...new Set((await listBackends()).map((b) => b.availabilityZone ?? 'nova'))].sort();
    expect(zones.length).toBeGreaterThan(0);
    expect(res.body.availabilityZoneInfo.map((z: { zoneName: string }) => z.zoneName).sort()).toEqual(zones);
    for (const z of res.body.availabilityZoneInfo) expect(z).toEqual({ zoneName: z.zoneName, zoneState: { available: true } });
  });
});

describe('Manila share-access-rules show', () => {
  test('GET /share-access-rules/{id} (2.45+): the rule with its metadata; 404 for an unknown or another project\'s rule', async () => {
    const m = manilaClient(() => stack.url);
    const created = await m.api('POST', '/shares', { share: { share_proto: 'NFS', size: 1, name: 'acl', share_type: 'default' } }, { token: 'lim:lim' });
    expect(created.status, JSON.stringify(created.body)).toBe(202);
    const id = created.body.share.id as string;
    await eventually(async (note) => note((await m.api('GET', `/shares/${id}`, undefined, { token: 'lim:lim' })).body.share.status) === 'available' || undefined, 'share available');
    const allowed = await m.action(id, { allow_access: { access_type: 'ip', access_to: '10.7.0.0/16', access_level: 'ro' } }, { token: 'lim:lim' });
    expect(allowed.status).toBe(200);
    const rule = allowed.body.access.id as string;

    const shown = await m.api('GET', `/share-access-rules/${rule}`, undefined, { token: 'lim:lim', version: '2.45' });
    expect(shown.status).toBe(200);
    expect(shown.body.access).toEqual({
      id: rule,
      share_id: id,
      access_type: 'ip',
      access_to: '10.7.0.0/16',
      access_level: 'ro',
      state: 'active',
      access_key: null,
      metadata: {},
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
    expect((await m.api('GET', `/share-access-rules/${rule}`, undefined, { token: 'lim:lim', version: '2.44' })).status).toBe(404);
    const other = await m.api('GET', `/share-access-rules/${rule}`, undefined, { token: 'other:other', version: '2.45' });
    expect(other.status).toBe(404);
    expect(other.body.itemNotFound.message).toBe(`Share access rule ${rule} not found.`);
    expect((await m.api('GET', `/share-access-rules/${rule}`, undefined, { version: '2.45' })).status).toBe(200);
    const unknown = await m.api('GET', '/share-access-rules/00000000-0000-0000-0000-000000000000', undefined, { version: '2.45' });
    expect(unknown.status).toBe(404);
    expect(unknown.body.itemNotFound.message).toBe('Share access rule 00000000-0000-0000-0000-000000000000 not found.');

    const cli = await manilaCli(`${stack.url}/share/v2`, 'lim:lim', ['--os-share-api-version', '2.45', 'access-show', rule]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(parsePropertyTable(cli.stdout)).toMatchObject({ id: rule, access_to: '10.7.0.0/16', access_level: 'ro', state: 'active' });
  }, CLI_TIMEOUT_MS);
});

describe('the openstack CLI through the generated clouds.yaml', () => {
  test('limits show --absolute', async () => {
    const rows: { Name: string; Value: number }[] = await openstack('ferry-demo', ['limits', 'show', '--absolute']);
    const byName = Object.fromEntries(rows.map((r) => [r.Name, r.Value]));
    expect(byName).toMatchObject({ maxTotalInstances: -1, maxTotalCores: -1, totalInstancesUsed: 0 });
    // The volume limits come from Cinder in the same command.
    expect(byName).toHaveProperty('maxTotalVolumes');
  }, CLI_TIMEOUT_MS);

  test('quota show: Nova, Cinder and Neutron', async () => {
    const q = await openstack('ferry-demo', ['quota', 'show']);
    expect(q).toMatchObject({ instances: -1, cores: -1, ram: -1, networks: -1, subnets: -1, ports: -1 });
    expect(q).toHaveProperty('volumes');
  }, CLI_TIMEOUT_MS);

  test('availability zone list --volume', async () => {
    const rows: { 'Zone Name': string; 'Zone Status': string }[] = await openstack('ferry-demo', ['availability', 'zone', 'list', '--volume']);
    expect(rows.length).toBeGreaterThan(0);
    for (const r of rows) expect(r['Zone Status']).toBe('available');
  }, CLI_TIMEOUT_MS);
});
