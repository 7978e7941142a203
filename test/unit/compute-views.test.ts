/**
 * The Nova view builders and service transitions, per microversion: flavors (description 2.55,
 * extra_specs 2.61, integer swap 2.75), services (forced_down 2.11, uuid ids 2.53), hypervisors
 * (uuid ids 2.53, usage fields until 2.87, the reduced view with uptime from 2.88), and the pure
 * os-services update rules.
 */
import { describe, expect, test } from 'vitest';
import { ApiVersion } from '../../functions/core/microversion.js';
import { BadRequest } from '../../functions/core/errors.js';
import { applyServiceUpdate, isUuidLike, parseStrictBool, serviceIsUp, stableUuid, usageOf, type ComputeNode, type ComputeService, type Flavor } from '../../functions/compute/model.js';
import { flavorBasic, flavorDetail, formatUptime, hypervisorStatistics, hypervisorView, novaTime, resourceLinks, serviceView } from '../../functions/compute/views.js';

const v = (s: string) => new ApiVersion(2, Number(s.split('.')[1]));
const LINKS = { baseUrl: 'http://h/compute/v2.1' };

const flavor: Flavor = {
  flavorid: '1', id: 1, name: 'm1.small', memoryMb: 2048, vcpus: 1, rootGb: 20, ephemeralGb: 0, swap: 0, rxtxFactor: 1, isPublic: true, disabled: false,
  description: 'generation 1 hardware', extraSpecs: { 'hw:generation': '1' }, createdAt: '2024-01-01T00:00:00.000Z',
};

const service: ComputeService = {
  uuid: '50284dad-1e6c-562f-ae88-048fe5fa956f', id: 3, host: 'cmp1', binary: 'nova-compute', topic: 'compute', disabled: false, disabledReason: null, forcedDown: false,
  createdAt: '2024-01-01T00:00:00.000Z', updatedAt: '2024-01-02T03:04:05.678Z', version: 1,
};

const node: ComputeNode = {
  uuid: 'eab9082c-bdca-5030-8db8-9185f097ed52', id: 1, host: 'cmp1', hypervisorHostname: 'cmp1', hypervisorType: 'ferry-local', hypervisorVersion: 1000, hostIp: '127.0.0.1',
  vcpus: 8, memoryMb: 16384, localGb: 200, cpuInfo: { arch: 'x86_64' }, config: { host: 'cmp1', driver: 'local', root: '/tmp/x', vcpus: 8, memoryMb: 16384, diskGb: 200 },
  serviceUuid: service.uuid, createdAt: '2024-01-01T00:00:00.000Z',
};

describe('flavor views', () => {
  test('links: self under the version, bookmark without; the project only when the URL had one', () => {
    expect(resourceLinks('http://h/compute/v2.1', undefined, 'flavors', '1')).toEqual([
      { rel: 'self', href: 'http://h/compute/v2.1/flavors/1' },
      { rel: 'bookmark', href: 'http://h/compute/flavors/1' },
    ]);
    expect(resourceLinks('http://h/compute/v2.1', 'p1', 'flavors', '1')[1]!.href).toBe('http://h/compute/p1/flavors/1');
  });

  test('basic view: id, name, links; description from 2.55', () => {
    expect(Object.keys(flavorBasic(flavor, v('2.54'), LINKS)).sort()).toEqual(['id', 'links', 'name']);
    expect(flavorBasic(flavor, v('2.55'), LINKS).description).toBe('generation 1 hardware');
  });

  test('detail at 2.1: the legacy fields, swap "" for none, no description or extra_specs', () => {
    const d = flavorDetail(flavor, v('2.1'), LINKS);
    expect(d).toMatchObject({ id: '1', name: 'm1.small', ram: 2048, disk: 20, swap: '', 'OS-FLV-EXT-DATA:ephemeral': 0, 'OS-FLV-DISABLED:disabled': false, vcpus: 1, 'os-flavor-access:is_public': true, rxtx_factor: 1 });
    expect(d).not.toHaveProperty('description');
    expect(d).not.toHaveProperty('extra_specs');
  });

  test('extra_specs from 2.61 (when the policy allows), integer swap from 2.75', () => {
    expect(flavorDetail(flavor, v('2.60'), LINKS)).not.toHaveProperty('extra_specs');
    expect(flavorDetail(flavor, v('2.61'), LINKS).extra_specs).toEqual({ 'hw:generation': '1' });
    expect(flavorDetail(flavor, v('2.61'), LINKS, false)).not.toHaveProperty('extra_specs');
    expect(flavorDetail(flavor, v('2.74'), LINKS).swap).toBe('');
    expect(flavorDetail(flavor, v('2.75'), LINKS).swap).toBe(0);
    expect(flavorDetail({ ...flavor, swap: 512 }, v('2.1'), LINKS).swap).toBe(512);
  });
});

describe('service view', () => {
  test('2.1: integer id, no forced_down; zone nova for compute, internal otherwise; Nova time format', () => {
    const s = serviceView(service, true, v('2.1'));
    expect(s).toEqual({ id: 3, binary: 'nova-compute', disabled_reason: null, host: 'cmp1', state: 'up', status: 'enabled', updated_at: '2024-01-02T03:04:05.678000', zone: 'nova' });
    expect(serviceView({ ...service, binary: 'nova-conductor' }, true, v('2.1')).zone).toBe('internal');
  });

  test('forced_down from 2.11, uuid ids from 2.53', () => {
    expect(serviceView(service, true, v('2.11')).forced_down).toBe(false);
    expect(serviceView(service, true, v('2.52')).id).toBe(3);
    expect(serviceView(service, false, v('2.53'))).toMatchObject({ id: service.uuid, state: 'down' });
  });

  test('novaTime', () => {
    expect(novaTime('2024-01-02T03:04:05.678Z')).toBe('2024-01-02T03:04:05.678000');
    expect(novaTime(null)).toBeNull();
  });
});

describe('service transitions', () => {
  const at = '2024-02-02T00:00:00.000Z';
  test('forced_down is set and the rest kept', () => {
    const next = applyServiceUpdate(service, { forcedDown: true }, at);
    expect(next).toEqual({ ...service, forcedDown: true, updatedAt: at });
    expect(service.forcedDown).toBe(false); // pure
  });
  test('disabling records the reason; enabling clears it', () => {
    const off = applyServiceUpdate(service, { status: 'disabled', disabledReason: 'maintenance' }, at);
    expect(off).toMatchObject({ disabled: true, disabledReason: 'maintenance' });
    expect(applyServiceUpdate(off, { status: 'enabled' }, at)).toMatchObject({ disabled: false, disabledReason: null });
  });
  test('a reason with status enabled is a 400', () => {
    expect(() => applyServiceUpdate(service, { status: 'enabled', disabledReason: 'x' }, at)).toThrow(BadRequest);
  });
  test('a forced-down service is down whatever its host reports', () => {
    expect(serviceIsUp({ forcedDown: true }, true)).toBe(false);
    expect(serviceIsUp({ forcedDown: false }, true)).toBe(true);
    expect(serviceIsUp({ forcedDown: false }, false)).toBe(false);
  });
  test('strict booleans as oslo parses them', () => {
    for (const t of [true, 'true', 'True', 'yes', '1', 'on', 1]) expect(parseStrictBool(t, 'f')).toBe(true);
    for (const f of [false, 'false', 'No', '0', 'off', 0]) expect(parseStrictBool(f, 'f')).toBe(false);
    for (const bad of ['maybe', 2, null, {}]) expect(() => parseStrictBool(bad, 'f')).toThrow(BadRequest);
  });
  test('stable uuids are uuid-like and deterministic', () => {
    expect(stableUuid('a')).toBe(stableUuid('a'));
    expect(stableUuid('a')).not.toBe(stableUuid('b'));
    expect(isUuidLike(stableUuid('a'))).toBe(true);
    expect(isUuidLike('cmp1')).toBe(false);
    expect(isUuidLike('EAB9082CBDCA50308DB89185F097ED52')).toBe(true);
  });
});

describe('hypervisor view', () => {
  const usage = usageOf([
    { consumer: 'a', nodeUuid: node.uuid, vcpus: 2, memoryMb: 4096, diskGb: 40 },
    { consumer: 'b', nodeUuid: node.uuid, vcpus: 1, memoryMb: 2048, diskGb: 20 },
  ]);
  const input = { node, service, up: true, usage, uptime: ' 01:02:03 up 5 min,  0 users,  load average: 0.00, 0.00, 0.00' };

  test('usage is the sum of allocations (none yet: zero)', () => {
    expect(usage).toEqual({ vcpusUsed: 3, memoryMbUsed: 6144, localGbUsed: 60, consumers: 2 });
    expect(usageOf([])).toEqual({ vcpusUsed: 0, memoryMbUsed: 0, localGbUsed: 0, consumers: 0 });
  });

  test('list entry: id, hostname, state, status; integer id before 2.53', () => {
    expect(hypervisorView(input, false, v('2.1'))).toEqual({ id: 1, hypervisor_hostname: 'cmp1', state: 'up', status: 'enabled' });
    expect(hypervisorView({ ...input, up: false, service: { ...service, disabled: true } }, false, v('2.53'))).toEqual({ id: node.uuid, hypervisor_hostname: 'cmp1', state: 'down', status: 'disabled' });
  });

  test('detail before 2.88: usage fields computed from allocations; cpu_info a string before 2.28', () => {
    const d = hypervisorView(input, true, v('2.87'));
    expect(d).toMatchObject({ vcpus: 8, memory_mb: 16384, local_gb: 200, vcpus_used: 3, memory_mb_used: 6144, local_gb_used: 60, free_ram_mb: 10240, free_disk_gb: 140, running_vms: 2, current_workload: 0, disk_available_least: 140, cpu_info: { arch: 'x86_64' } });
    expect(d.service).toEqual({ id: service.uuid, host: 'cmp1', disabled_reason: null });
    expect(d).not.toHaveProperty('uptime');
    expect(hypervisorView(input, true, v('2.27')).cpu_info).toBe('{"arch":"x86_64"}');
    expect((hypervisorView(input, true, v('2.52')).service as { id: unknown }).id).toBe(3);
  });

  test('2.88+: the reduced view, with uptime', () => {
    const d = hypervisorView(input, true, v('2.88'));
    expect(Object.keys(d).sort()).toEqual(['host_ip', 'hypervisor_hostname', 'hypervisor_type', 'hypervisor_version', 'id', 'service', 'state', 'status', 'uptime']);
    expect(d.uptime).toBe(input.uptime);
  });

  test('with_servers: an empty servers list from 2.75 only', () => {
    expect(hypervisorView(input, false, v('2.74'), true)).not.toHaveProperty('servers');
    expect(hypervisorView(input, false, v('2.75'), true).servers).toEqual([]);
    expect(hypervisorView({ ...input, servers: [{ name: 's', uuid: 'u' }] }, false, v('2.53'), true).servers).toEqual([{ name: 's', uuid: 'u' }]);
  });

  test('statistics sum the nodes', () => {
    const s = hypervisorStatistics([{ node, usage }, { node, usage: usageOf([]) }]);
    expect(s).toMatchObject({ count: 2, vcpus: 16, vcpus_used: 3, memory_mb: 32768, free_disk_gb: 340, running_vms: 2 });
  });

  test('uptime reads like uptime(1)', () => {
    const now = new Date('2024-01-01T08:32:11Z');
    expect(formatUptime(now, 93 * 86400 + 18 * 3600 + 25 * 60, [0.2, 0.12, 0.14])).toBe(' 08:32:11 up 93 days, 18:25,  0 users,  load average: 0.20, 0.12, 0.14');
    expect(formatUptime(now, 300, [0, 0, 0])).toBe(' 08:32:11 up 5 min,  0 users,  load average: 0.00, 0.00, 0.00');
  });
});
