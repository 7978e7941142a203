/**
 * The real clients against Glance v2 (/image) and Neutron v2.0 (/network) on the local stack:
 * Debian's openstackclient 6.0 (openstacksdk 0.101) through a clouds.yaml whose `admin_token` entry
 * overrides each service's endpoint (what a Keystone catalog will give it), and glanceclient 4.1.
 * An image's whole life (create --file, list, show, save, set, delete), network/subnet/port lists,
 * and `server create --image NAME --network NAME --flavor NAME`, which resolves each name through
 * its own API before Nova sees the request; and novaclient's `nova boot --image NAME --nic
 * net-name=NAME` with a Keystone password login, finding Glance and Neutron in the catalog.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { createToken } from '../../functions/auth/tokens.js';
import { SANDBOX_NETWORK } from '../../functions/compute/seed.js';
import { clientEnv, glanceCli, openstackCli, parseListTable, parsePropertyTable } from '../support/cli.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const SCENARIO_TIMEOUT_MS = 300_000;

let stack: TestLocalStack;
let dir: string;
let clouds: string;

beforeAll(async () => {
  stack = await useLocalStack();
  dir = await mkdtemp(join(tmpdir(), 'ferry-osc-'));
  clouds = join(dir, 'clouds.yaml');
  const entry = (token: string) =>
    [
      '    auth_type: admin_token',
      '    auth:',
      `      endpoint: ${stack.url}/compute/v2.1`,
      `      token: ${token}`,
      `    compute_endpoint_override: ${stack.url}/compute/v2.1`,
      `    image_endpoint_override: ${stack.url}/image/v2`,
      `    network_endpoint_override: ${stack.url}/network`,
    ].join('\n');
  await writeFile(clouds, `clouds:\n  demo:\n${entry('demo:demo')}\n  other:\n${entry('other:other')}\n`);
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function osc(args: string[], cloud = 'demo'): Promise<string> {
  const r = await openstackCli(clouds, cloud, args);
  if (r.code !== 0) throw new Error(`openstack ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
}

describe('openstack and glance CLIs', () => {
  test('image create --file, list, show, save, set, delete; member vs other project', async () => {
    const data = Buffer.from(Array.from({ length: 200_000 }, (_, i) => (i * 31) % 256));
    const file = join(dir, 'in.img');
    await writeFile(file, data);
    // openstackclient prints the record as created (queued); show reads it after the upload.
    await osc(['image', 'create', '--file', file, '--disk-format', 'raw', '--private', 'osc-img']);
    const shown = parsePropertyTable(await osc(['image', 'show', 'osc-img']));
    expect(shown.status).toBe('active');
    expect(shown.checksum).toBe(createHash('md5').update(data).digest('hex'));
    expect(shown.size).toBe(String(data.length));
    expect(parseListTable(await osc(['image', 'list'])).map((r) => r.Name)).toEqual(expect.arrayContaining(['osc-img', 'cirros-tiny']));
    // Private: another project neither lists nor finds it.
    expect(parseListTable(await osc(['image', 'list'], 'other')).map((r) => r.Name)).not.toContain('osc-img');
    const hidden = await openstackCli(clouds, 'other', ['image', 'show', 'osc-img']);
    expect(hidden.code).not.toBe(0);
    expect(hidden.stderr).toMatch(/No Image found for osc-img/);

    const out = join(dir, 'out.img');
    await osc(['image', 'save', '--file', out, 'osc-img']);
    expect((await readFile(out)).equals(data)).toBe(true);

    await osc(['image', 'set', '--property', 'os_distro=cirros', '--name', 'osc-img2', 'osc-img']);
    expect(parsePropertyTable(await osc(['image', 'show', 'osc-img2'])).properties).toMatch(/os_distro='cirros'/);
    await osc(['image', 'delete', 'osc-img2']);
    expect((await openstackCli(clouds, 'demo', ['image', 'show', 'osc-img2'])).code).not.toBe(0);
  }, SCENARIO_TIMEOUT_MS);

  test('glance image-create, image-list, image-download (Content-MD5 checked by the client), image-delete', async () => {
    const { token } = await createToken({ userId: 'demo', projectId: 'demo', admin: false, ttlSeconds: 3600 });
    const imageUrl = `${stack.url}/image`;
    const glance = async (args: string[]) => {
      const r = await glanceCli(imageUrl, token, args);
      if (r.code !== 0) throw new Error(`glance ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
      return r.stdout;
    };
    const data = Buffer.from('ferry image bytes '.repeat(5000));
    const file = join(dir, 'g.img');
    await writeFile(file, data);
    const created = parsePropertyTable(await glance(['image-create', '--name', 'g-img', '--disk-format', 'qcow2', '--container-format', 'bare', '--file', file]));
    expect(created.status).toBe('active');
    // (os_hash_value is wrapped over two table lines by glanceclient; the MD5 fits one.)
    expect(created.checksum).toBe(createHash('md5').update(data).digest('hex'));
    expect(parseListTable(await glance(['image-list'])).map((r) => r.Name)).toEqual(expect.arrayContaining(['g-img', 'cirros-tiny']));
    const out = join(dir, 'g.out');
    await glance(['image-download', '--file', out, created.id!]);
    expect((await readFile(out)).equals(data)).toBe(true);
    await glance(['image-delete', created.id!]);
    const gone = await glanceCli(imageUrl, token, ['image-show', created.id!]);
    expect(gone.code).not.toBe(0);
    expect(gone.stderr).toMatch(/404|No image found/i);
  }, SCENARIO_TIMEOUT_MS);

  test('network list, subnet list; server create by names; port list --server', async () => {
    const networks = parseListTable(await osc(['network', 'list']));
    expect(networks).toEqual([expect.objectContaining({ ID: SANDBOX_NETWORK.id, Name: 'private' })]);
    const subnets = parseListTable(await osc(['subnet', 'list']));
    expect(subnets).toEqual([expect.objectContaining({ Network: SANDBOX_NETWORK.id, Subnet: SANDBOX_NETWORK.cidr })]);
    // Names resolved through /image and /network, then POST /compute/v2.1/servers.
    await osc(['server', 'create', '--image', 'cirros-tiny', '--network', 'private', '--flavor', 'm1.small', 'osc-vm']);
    const server = await eventually(
      async (note) => {
        const s = note(parsePropertyTable(await osc(['server', 'show', 'osc-vm'])));
        return (s.status === 'ACTIVE' || s.status === 'ERROR') && s;
      },
      'osc-vm ACTIVE or ERROR',
      { timeoutMs: 90_000, intervalMs: 1_000 },
    );
    expect(server.status).toBe('ACTIVE');
    expect(server.image).toMatch(/^cirros-tiny \(/);
    const ports = parseListTable(await osc(['port', 'list', '--server', 'osc-vm']));
    expect(ports).toHaveLength(1);
    expect(ports[0]!['Fixed IP Addresses']).toMatch(/ip_address='10\.0\.0\.\d+'/);
    expect(ports[0]!.Status).toBe('ACTIVE');
    // Another project sees none of its ports.
    expect(parseListTable(await osc(['port', 'list'], 'other'))).toEqual([]);
  }, SCENARIO_TIMEOUT_MS);

  test('nova boot --image NAME --nic net-name=private --poll with a Keystone login (the OS_* of clouds.yaml\'s ferry-demo): Glance and Neutron through the catalog', async () => {
    const { auth } = (parseYaml(await readFile(stack.cloudsYaml, 'utf8')) as { clouds: Record<string, { auth: Record<string, string> }> }).clouds['ferry-demo']!;
    const env = clientEnv({
      OS_AUTH_URL: auth.auth_url!,
      OS_USERNAME: auth.username!,
      OS_PASSWORD: auth.password!,
      OS_PROJECT_NAME: auth.project_name!,
      OS_USER_DOMAIN_NAME: auth.user_domain_name ?? 'Default',
      OS_PROJECT_DOMAIN_NAME: auth.project_domain_name ?? 'Default',
    });
    const nova = async (args: string[]) => (await promisify(execFile)('nova', args, { env, timeout: 120_000 })).stdout;
    // novaclient resolves the image by name through the catalog's image endpoint, the network through Neutron's.
    const booted = parsePropertyTable(await nova(['boot', '--image', 'cirros-tiny', '--flavor', 'm1.small', '--nic', 'net-name=private', '--poll', 'nova-img-vm']));
    expect(booted.image).toMatch(/^cirros-tiny \(/);
    const shown = parsePropertyTable(await nova(['show', 'nova-img-vm']));
    expect(shown.status).toBe('ACTIVE');
    expect(shown['private network']).toMatch(/^10\.0\.0\.\d+$/);
    await nova(['delete', 'nova-img-vm']);
  }, SCENARIO_TIMEOUT_MS);
});
