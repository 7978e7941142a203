/**
 * The real nova CLI (Debian python3-novaclient 18.1.0) against the local stack, the Keystone-free
 * way reference §3.4 verified: `--os-auth-type admin_token --os-endpoint <url>/compute/v2.1
 * --os-token admin:admin` with OS_PROJECT_ID and any OS_AUTH_URL. Every invocation discovers the
 * version first (GET /compute/v2.1) and settles on 2.92, the client's maximum.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { nodeUuid, serviceUuid } from '../../functions/compute/seed.js';
import { novaCli as runNova, parseListTable, parsePropertyTable, type CliResult } from '../support/cli.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

/** Each CLI call starts a Python interpreter and rediscovers the version. */
const SCENARIO_TIMEOUT_MS = 240_000;

let stack: TestLocalStack;
let endpoint: string;

async function novaCli(args: string[], version?: string): Promise<CliResult> {
  return runNova(endpoint, args, { version });
}

const nova = async (args: string[], version?: string) => {
  const r = await novaCli(args, version);
  if (r.code !== 0) throw new Error(`nova ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
};

beforeAll(async () => {
  stack = await useLocalStack();
  endpoint = `${stack.url}/compute/v2.1`;
});
afterAll(async () => stack?.stop());

describe('nova CLI against the local stack', () => {
  test('version-list, flavor-list and flavor-show', async () => {
    const versions = await nova(['version-list']);
    expect(versions).toContain('Server supported API versions:');
    expect(parseListTable(versions)).toEqual([{ Id: 'v2.1', Status: 'CURRENT', Updated: '2013-07-23T11:33:21Z', 'Min Version': '2.1', Version: '2.93' }]);

    const flavors = parseListTable(await nova(['flavor-list']));
    expect(flavors.map((f) => [f.ID, f.Name, f.Memory_MiB, f.VCPUs, f.Is_Public])).toEqual([
      ['1', 'm1.small', '2048', '1', 'True'],
      ['2', 'm1.large', '8192', '4', 'True'],
      ['3', 'm2.small', '2048', '1', 'True'],
      ['4', 'm2.large', '8192', '4', 'True'],
    ]);
    const withSpecs = parseListTable(await nova(['flavor-list', '--extra-specs']));
    // The list prints the dict as Python shows it; flavor-show prints it as JSON.
    expect(withSpecs.find((f) => f.Name === 'm2.large')?.extra_specs).toBe("{'hw:generation': '2'}");

    // By name: GET /flavors/m1.small is a 404, then the CLI finds it in /flavors/detail?is_public=None.
    const show = parsePropertyTable(await nova(['flavor-show', 'm1.small']));
    expect(show).toMatchObject({ id: '1', name: 'm1.small', ram: '2048', disk: '1', vcpus: '1', swap: '0', extra_specs: '{"hw:generation": "1"}' });
    // At 2.60 the CLI reads the extra specs from os-extra_specs.
    expect(parsePropertyTable(await nova(['flavor-show', '3'], '2.60')).extra_specs).toBe('{"hw:generation": "2"}');

    const missing = await novaCli(['flavor-show', 'm9.huge']);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain("No flavor with a name or ID of 'm9.huge' exists.");
  }, SCENARIO_TIMEOUT_MS);

  test('service-list, service-force-down (2.53 form) and back, the 2.11 form', async () => {
    // Prepare
    const before = parseListTable(await nova(['service-list']));
    expect(before.map((s) => `${s.Binary}@${s.Host}`).sort()).toEqual([
      'nova-compute@cmp1',
      'nova-compute@cmp2',
      'nova-compute@cmp3',
      'nova-compute@cmp4',
      'nova-conductor@cell2-conductor',
      'nova-conductor@controller',
      'nova-scheduler@controller',
    ]);
    const cmp1 = before.find((s) => s.Host === 'cmp1')!;
    expect(cmp1).toMatchObject({ Id: serviceUuid('cmp1', 'nova-compute'), Zone: 'nova', Status: 'enabled', State: 'up', 'Forced down': 'False' });

    // Act: the CLI at 2.92 sends PUT /os-services/<uuid> {"forced_down": true}
    const forced = parseListTable(await nova(['service-force-down', cmp1.Id!]));

    // Assess
    expect(forced).toEqual([{ ID: cmp1.Id, Host: 'cmp1', Binary: 'nova-compute', 'Forced down': 'True' }]);
    const after = parseListTable(await nova(['service-list', '--host', 'cmp1']));
    expect(after).toHaveLength(1);
    expect(after[0]).toMatchObject({ State: 'down', 'Forced down': 'True' });
    expect(parseListTable(await nova(['hypervisor-list'])).find((h) => h['Hypervisor hostname'] === 'cmp1')?.State).toBe('down');

    await nova(['service-force-down', '--unset', cmp1.Id!]);
    expect(parseListTable(await nova(['service-list', '--host', 'cmp1']))[0]).toMatchObject({ State: 'up', 'Forced down': 'False' });

    // The pre-2.53 form: by host, binary nova-compute.
    const old = parseListTable(await nova(['service-force-down', 'cmp3'], '2.11'));
    expect(old).toEqual([{ Host: 'cmp3', Binary: 'nova-compute', 'Forced down': 'True' }]);
    const oldList = parseListTable(await nova(['service-list', '--host', 'cmp3'], '2.11'));
    expect(oldList[0]).toMatchObject({ Id: expect.stringMatching(/^\d+$/), 'Forced down': 'True', State: 'down' });
    await nova(['service-force-down', '--unset', 'cmp3'], '2.11');
  }, SCENARIO_TIMEOUT_MS);

  test('hypervisor-list and hypervisor-show (by hostname, at 2.92 and at 2.87)', async () => {
    const list = parseListTable(await nova(['hypervisor-list']));
    expect(list).toEqual(['cmp1', 'cmp2', 'cmp3', 'cmp4'].map((h) => ({ ID: nodeUuid(h), 'Hypervisor hostname': h, State: 'up', Status: 'enabled' })));

    const show = parsePropertyTable(await nova(['hypervisor-show', 'cmp1']));
    expect(show).toMatchObject({ id: nodeUuid('cmp1'), hypervisor_hostname: 'cmp1', hypervisor_type: 'ferry-local', host_ip: '127.0.0.1', service_host: 'cmp1', state: 'up', status: 'enabled' });
    expect(show).not.toHaveProperty('vcpus_used');

    const older = parsePropertyTable(await nova(['hypervisor-show', 'cmp4'], '2.87'));
    expect(older).toMatchObject({ hypervisor_hostname: 'cmp4', vcpus: '8', memory_mb: '16384', local_gb: '200', vcpus_used: '0', memory_mb_used: '0', local_gb_used: '0', running_vms: '0' });
  }, SCENARIO_TIMEOUT_MS);
});
