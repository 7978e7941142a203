/**
 * One lifecycle across every Ferry service with the unified `openstack` CLI (Debian
 * python3-openstackclient 6.0, its Manila commands from python3-manilaclient 4.1) and nothing but
 * the clouds.yaml the stack writes (OS_CLIENT_CONFIG_FILE; no token, no endpoint override): the
 * CLI authenticates at /identity/v3 and follows the catalog. An image uploaded with `image create
 * --file`, a volume, a server booted from that image on the `private` network, the volume
 * attached, the server cold-migrated (admin, then `server migration confirm`) and live-migrated,
 * the volume detached and deleted; a share with an access rule, migrated driver-assisted to
 * another backend with a new share type (admin, two phases); then everything deleted, the lists
 * empty and Ferry's audit clean. Where the CLI can wait (`--wait`) it does; elsewhere the test
 * polls with `show`, as a user would.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { openstackCli } from '../support/cli.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

/** Each CLI call starts a Python interpreter and authenticates against /identity. */
const STEP_TIMEOUT_MS = 240_000;
const WAIT = { timeoutMs: 120_000, intervalMs: 500 };

let stack: TestLocalStack;
let dir: string;

type Cloud = 'ferry-demo' | 'ferry-admin';
async function openstack(cloud: Cloud, args: string[]): Promise<string> {
  const r = await openstackCli(stack.cloudsYaml, cloud, args);
  if (r.code !== 0) throw new Error(`openstack --os-cloud ${cloud} ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
}
// `any`: the CLI's JSON, checked field by field below.
const json = async (cloud: Cloud, args: string[]): Promise<any> => JSON.parse(await openstack(cloud, [...args, '-f', 'json']));
const demo = (...args: string[]) => json('ferry-demo', args);
const admin = (...args: string[]) => json('ferry-admin', args);

/** Polls `show` until `field` is one of `wanted` or `failed` (then fails at once, naming it). */
async function waitFor(what: string, show: () => Promise<Record<string, unknown> | undefined>, field: string, wanted: string[], failed: string[] = ['error', 'ERROR']) {
  return eventually(
    async (note) => {
      const shown = note(await show());
      const value = String(shown?.[field]);
      if (failed.some((f) => value.includes(f))) throw new Error(`${what}: ${field} is ${value}: ${JSON.stringify(shown)}`);
      return wanted.includes(value) && shown!;
    },
    what,
    WAIT,
  );
}

// What the steps make, for the steps after them.
const ids: { image?: string; volume?: string; server?: string; share?: string; rule?: string } = {};
let host = '';

beforeAll(async () => {
  stack = await useLocalStack();
  dir = await mkdtemp(join(tmpdir(), 'ferry-lifecycle-'));
});
afterAll(async () => {
  await stack?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('openstack CLI lifecycle through the generated clouds.yaml', () => {
  test('image create --file, volume create, server create --image --network --flavor --wait', async () => {
    const bytes = Buffer.from(Array.from({ length: 128 * 1024 }, (_, i) => (i * 7) % 251));
    const file = join(dir, 'lc.img');
    await writeFile(file, bytes);
    ids.image = (await demo('image', 'create', '--file', file, '--disk-format', 'raw', '--container-format', 'bare', 'lc-img')).id;
    const image = await demo('image', 'show', ids.image!);
    expect(image).toMatchObject({ name: 'lc-img', status: 'active', size: bytes.length, checksum: createHash('md5').update(bytes).digest('hex') });

    const volume = await demo('volume', 'create', '--size', '1', 'lc-vol');
    ids.volume = volume.id;
    await waitFor('lc-vol available', () => demo('volume', 'show', ids.volume!), 'status', ['available']);

    const server = await demo('server', 'create', '--image', 'lc-img', '--network', 'private', '--flavor', 'm1.small', '--wait', 'lc-vm');
    ids.server = server.id;
    expect(server).toMatchObject({ name: 'lc-vm', status: 'ACTIVE', image: `lc-img (${ids.image})`, flavor: 'm1.small (1)' });
    expect(server.addresses).toMatchObject({ private: [expect.stringMatching(/^10\.0\.0\.\d+$/)] });
    host = (await admin('server', 'show', ids.server!))['OS-EXT-SRV-ATTR:host'];
    expect(host).toMatch(/^cmp[12]$/);
  }, STEP_TIMEOUT_MS);

  test('server add volume: the volume in-use, attached to the server', async () => {
    const attached = await demo('server', 'add', 'volume', 'lc-vm', 'lc-vol');
    expect(attached).toMatchObject({ 'Server ID': ids.server, 'Volume ID': ids.volume, Device: '/dev/vdb' });
    const volume = await waitFor('lc-vol in-use', () => demo('volume', 'show', 'lc-vol'), 'status', ['in-use']);
    expect(volume.attachments).toEqual([expect.objectContaining({ server_id: ids.server, device: '/dev/vdb' })]);
  }, STEP_TIMEOUT_MS);

  test('server migrate --wait (admin), server migration confirm: on the other host, still attached', async () => {
    const migrating = await openstack('ferry-admin', ['server', 'migrate', '--wait', ids.server!]);
    expect(migrating).toMatch(/Complete/);
    expect(await admin('server', 'show', ids.server!)).toMatchObject({ status: 'VERIFY_RESIZE' });
    await openstack('ferry-admin', ['server', 'migration', 'confirm', ids.server!]);
    const server = await waitFor('lc-vm ACTIVE after confirm', () => admin('server', 'show', ids.server!), 'status', ['ACTIVE']);
    expect(server['OS-EXT-SRV-ATTR:host']).not.toBe(host);
    expect(server['OS-EXT-SRV-ATTR:host']).toMatch(/^cmp[12]$/);
    host = String(server['OS-EXT-SRV-ATTR:host']);
    expect(server.volumes_attached).toEqual([expect.objectContaining({ id: ids.volume })]);
    expect(await demo('volume', 'show', 'lc-vol')).toMatchObject({ status: 'in-use' });
  }, STEP_TIMEOUT_MS);

  test('server migrate --live-migration --wait (admin): back on the first host, the volume following', async () => {
    await openstack('ferry-admin', ['server', 'migrate', '--live-migration', '--wait', ids.server!]);
    // --wait returns once the server is ACTIVE again: the move must be over by then.
    const server = await admin('server', 'show', ids.server!);
    expect(server).toMatchObject({ status: 'ACTIVE' });
    expect(server['OS-EXT-SRV-ATTR:host']).not.toBe(host);
    expect(await demo('volume', 'show', 'lc-vol')).toMatchObject({ status: 'in-use', attachments: [expect.objectContaining({ server_id: ids.server })] });
    const migrations = await admin('server', 'migration', 'list', '--server', ids.server!);
    expect(migrations.map((m: { Status: string }) => m.Status).sort()).toEqual(['completed', 'confirmed']);
  }, STEP_TIMEOUT_MS);

  test('server remove volume, volume delete: gone from volume list', async () => {
    await openstack('ferry-demo', ['server', 'remove', 'volume', 'lc-vm', 'lc-vol']);
    await waitFor('lc-vol available after detach', () => demo('volume', 'show', 'lc-vol'), 'status', ['available']);
    expect((await demo('server', 'show', 'lc-vm')).volumes_attached).toEqual([]);
    await openstack('ferry-demo', ['volume', 'delete', 'lc-vol']);
    await eventually(async () => (await demo('volume', 'list')).length === 0, 'volume list empty', WAIT);
  }, STEP_TIMEOUT_MS);

  test('share create --wait, share access create', async () => {
    const share = await demo('share', 'create', 'NFS', '1', '--name', 'lc-share', '--wait');
    ids.share = share.id;
    expect(share).toMatchObject({ name: 'lc-share', status: 'available', share_proto: 'NFS', size: 1, share_type_name: 'default' });
    const rule = await demo('share', 'access', 'create', 'lc-share', 'ip', '10.0.0.0/24');
    ids.rule = rule.id;
    expect(rule).toMatchObject({ access_type: 'ip', access_to: '10.0.0.0/24', access_level: 'rw' });
    await waitFor('the access rule active', async () => (await demo('share', 'access', 'list', 'lc-share')).find((r: { ID: string }) => r.ID === ids.rule), 'State', ['active']);
    expect(await admin('share', 'show', ids.share!)).toMatchObject({ host: 'ferry@nfs-a#pool0' });
  }, STEP_TIMEOUT_MS);

  test('share migration start (driver-assisted, new share type) + complete (admin): on nfs-b, the rule kept', async () => {
    await admin('share', 'type', 'create', 'lc-on-nfs-b', 'false', '--extra-specs', 'share_backend_name=nfs-b');
    await openstack('ferry-admin', [
      'share', 'migration', 'start', ids.share!, 'ferry@nfs-b#pool0',
      '--writable', 'True', '--preserve-metadata', 'True', '--preserve-snapshots', 'False', '--nondisruptive', 'False',
      '--new-share-type', 'lc-on-nfs-b',
    ]);
    // No --wait on migration commands: poll the progress, then the share.
    await waitFor('phase 1 done', () => admin('share', 'migration', 'show', ids.share!), 'task_state', ['migration_driver_phase1_done'], ['migration_error']);
    await openstack('ferry-admin', ['share', 'migration', 'complete', ids.share!]);
    const share = await waitFor('migration_success', () => admin('share', 'show', ids.share!), 'task_state', ['migration_success'], ['migration_error']);
    expect(share).toMatchObject({ status: 'available', host: 'ferry@nfs-b#pool0', share_type_name: 'lc-on-nfs-b' });
    expect((await demo('share', 'access', 'list', 'lc-share')).map((r: { ID: string; State: string }) => [r.ID, r.State])).toEqual([[ids.rule, 'active']]);
  }, STEP_TIMEOUT_MS);

  test('everything deleted: volume, server and share lists empty, only the seeded images, the audit clean', async () => {
    await openstack('ferry-demo', ['share', 'access', 'delete', 'lc-share', ids.rule!]);
    await openstack('ferry-demo', ['share', 'delete', '--wait', 'lc-share']);
    await openstack('ferry-demo', ['server', 'delete', '--wait', 'lc-vm']);
    await openstack('ferry-demo', ['image', 'delete', 'lc-img']);
    await openstack('ferry-admin', ['share', 'type', 'delete', 'lc-on-nfs-b']);

    expect(await demo('volume', 'list')).toEqual([]);
    expect(await demo('server', 'list')).toEqual([]);
    expect(await demo('share', 'list')).toEqual([]);
    expect((await demo('image', 'list')).map((i: { Name: string }) => i.Name).sort()).toEqual(['cirros-tiny', 'ferry-tiny']);
    // And nothing of another project's either (the admin sees them all).
    expect(await admin('server', 'list', '--all-projects')).toEqual([]);
    expect(await admin('volume', 'list', '--all-projects')).toEqual([]);
    expect(await admin('share', 'list', '--all-projects')).toEqual([]);
    expect((await runAudit()).findings).toEqual([]);
  }, STEP_TIMEOUT_MS);
});
