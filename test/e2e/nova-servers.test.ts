/**
 * The real nova CLI (Debian python3-novaclient, microversion 2.92 after discovery) drives every
 * server operation of issue 5 against the local stack, the Keystone-free way of reference §3.4.
 * Each command ends in the reference's states with the server's volume attachments matching
 * Cinder's, and the bytes written through the guest before a move read back after it.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { novaCli, parsePropertyTable } from '../support/cli.js';
import { bootServer, cinderClient, createVolume, novaClient, readThroughGuest, serverState, settled, volumeStatus, writeThroughGuest, type Cinder, type Nova } from '../support/nova.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

/** Each CLI call starts a Python interpreter and rediscovers the version. */
const SCENARIO_TIMEOUT_MS = 300_000;

let stack: TestLocalStack;
let endpoint: string;
let api: Nova;
let cinder: Cinder;

beforeAll(async () => {
  stack = await useLocalStack();
  endpoint = `${stack.url}/compute/v2.1`;
  api = novaClient(stack);
  cinder = cinderClient(stack);
}, 120_000);
afterAll(async () => stack?.stop());

async function nova(...args: string[]): Promise<string> {
  const r = await novaCli(endpoint, args);
  if (r.code !== 0) throw new Error(`nova ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** Every BDM's attachment is the volume's one live attachment, connected on the server's host. */
async function attachmentsMatch(serverId: string): Promise<void> {
  const { instance, bdms } = await serverState(serverId);
  for (const b of bdms.filter((x) => x.volumeId)) {
    const v = await volumeStatus(cinder, b.volumeId!);
    expect(v.attachments.map((a) => [a.attachment_id, a.server_id])).toEqual([[b.attachmentId, serverId]]);
    if (instance.host) expect(v.attachments[0]!.host_name).toBe(instance.host);
  }
}

async function cleanAudit(): Promise<void> {
  expect((await runAudit()).findings).toEqual([]);
}

describe('volume-attach, volume-update, volume-detach', () => {
  test(
    'attach prints the attachment; swap keeps the bytes; detach leaves the volume available',
    async () => {
      const server = await bootServer(api, { name: 'cli-vols' });
      const a = await createVolume(cinder, 1, 'a');
      const b = await createVolume(cinder, 1, 'b');
      const attached = parsePropertyTable(await nova('volume-attach', server, a));
      expect(attached).toMatchObject({ volumeId: a, serverId: server, device: '/dev/vdb' });
      await settled(api, server);
      expect((await volumeStatus(cinder, a)).status).toBe('in-use');
      await attachmentsMatch(server);
      const digest = await writeThroughGuest(server, '/dev/vdb', 'cli-swap');

      await nova('volume-update', server, a, b);
      await settled(api, server);
      expect((await volumeStatus(cinder, a)).status).toBe('available');
      expect((await volumeStatus(cinder, b)).status).toBe('in-use');
      await attachmentsMatch(server);
      expect(await readThroughGuest(server, '/dev/vdb')).toBe(digest);

      await nova('volume-detach', server, b);
      await settled(api, server);
      expect(await volumeStatus(cinder, b)).toMatchObject({ status: 'available', attachments: [] });
      expect((await serverState(server)).bdms).toEqual([]);
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );
});

/** A server with one attached data volume holding known bytes. */
async function serverWithData(name: string): Promise<{ server: string; volume: string; digest: string }> {
  const server = await bootServer(api, { name });
  const volume = await createVolume(cinder, 1, `${name}-data`);
  await nova('volume-attach', server, volume);
  await settled(api, server);
  const digest = await writeThroughGuest(server, '/dev/vdb', name);
  return { server, volume, digest };
}

async function migrationsOf(server: string): Promise<{ migration_type: string; status: string; source_compute: string; dest_compute: string }[]> {
  return (await api('GET', `/os-migrations?instance_uuid=${server}`)).body.migrations;
}

describe('live-migration', () => {
  test(
    'moves the server to the other host of its cell; the volume follows with its bytes',
    async () => {
      const { server, volume, digest } = await serverWithData('cli-live');
      const before = (await serverState(server)).instance.host!;
      await nova('live-migration', server);
      const after = await settled(api, server);
      expect(after.status).toBe('ACTIVE');
      expect(after['OS-EXT-SRV-ATTR:host']).not.toBe(before);
      expect((await migrationsOf(server))[0]).toMatchObject({ migration_type: 'live-migration', status: 'completed', source_compute: before });
      expect((await volumeStatus(cinder, volume)).status).toBe('in-use');
      await attachmentsMatch(server);
      expect(await readThroughGuest(server, '/dev/vdb')).toBe(digest);
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );
});

describe('evacuate', () => {
  test(
    'after service-force-down the server is rebuilt on another host; --unset cleans the old host',
    async () => {
      const { server, volume, digest } = await serverWithData('cli-evac');
      const source = (await serverState(server)).instance.host!;
      const svc = (await api('GET', `/os-services?host=${source}&binary=nova-compute`)).body.services[0];
      // Still up: evacuate is refused with upstream's message.
      const refused = await novaCli(endpoint, ['evacuate', server]);
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toContain(`Compute service of ${source} is still in use.`);
      await nova('service-force-down', svc.id);
      await nova('evacuate', server);
      const after = await settled(api, server);
      expect(after.status).toBe('ACTIVE');
      expect(after['OS-EXT-SRV-ATTR:host']).not.toBe(source);
      expect((await migrationsOf(server))[0]).toMatchObject({ migration_type: 'evacuation', status: 'done', source_compute: source });
      await attachmentsMatch(server);
      expect((await volumeStatus(cinder, volume)).status).toBe('in-use');
      expect(await readThroughGuest(server, '/dev/vdb')).toBe(digest);
      // The source comes back: its stale guest is destroyed (Nova's _destroy_evacuated_instances).
      await nova('service-force-down', '--unset', svc.id);
      expect((await migrationsOf(server))[0]!.status).toBe('completed');
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );
});

describe('shelve, shelve-offload, unshelve', () => {
  test(
    'shelve keeps it on its host (shelved_offload_time -1), shelve-offload frees the host, unshelve brings it back with its volume',
    async () => {
      const { server, volume, digest } = await serverWithData('cli-shelve');
      process.env.FERRY_SHELVED_OFFLOAD_TIME = '-1';
      try {
        await nova('shelve', server);
        const shelved = await settled(api, server);
        expect(shelved.status).toBe('SHELVED');
        expect(shelved['OS-EXT-SRV-ATTR:host']).toBeTruthy();
      } finally {
        delete process.env.FERRY_SHELVED_OFFLOAD_TIME;
      }
      await nova('shelve-offload', server);
      const offloaded = await settled(api, server);
      expect(offloaded.status).toBe('SHELVED_OFFLOADED');
      expect(offloaded['OS-EXT-SRV-ATTR:host']).toBeNull();
      // Offloaded: the volume keeps one attachment, reserved with no connector (reference §2.1, vol_test_09).
      const { bdms } = await serverState(server);
      const atts = (await cinder('GET', `/attachments?volume_id=${volume}`)).body.attachments;
      expect(atts.map((a: { id: string }) => a.id)).toEqual([bdms[0]!.attachmentId]);
      expect(atts[0]).toMatchObject({ status: 'reserved', instance: server });
      expect((await volumeStatus(cinder, volume)).status).toBe('reserved');
      await nova('unshelve', server);
      const back = await settled(api, server);
      expect(back.status).toBe('ACTIVE');
      await attachmentsMatch(server);
      expect(await readThroughGuest(server, '/dev/vdb')).toBe(digest);
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );
});

describe('migrate, resize, resize-confirm, resize-revert', () => {
  test(
    'migrate then resize-confirm: the server runs on the other host; resize then resize-revert: back on its host with its flavor',
    async () => {
      const { server, volume, digest } = await serverWithData('cli-resize');
      const first = (await serverState(server)).instance.host!;

      await nova('migrate', server);
      const verify = await settled(api, server);
      expect(verify.status).toBe('VERIFY_RESIZE');
      expect(verify['OS-EXT-SRV-ATTR:host']).not.toBe(first);
      await attachmentsMatch(server);
      await nova('resize-confirm', server);
      const confirmed = await settled(api, server);
      expect(confirmed.status).toBe('ACTIVE');
      const second = confirmed['OS-EXT-SRV-ATTR:host'] as string;
      expect(second).not.toBe(first);
      expect((await migrationsOf(server))[0]).toMatchObject({ migration_type: 'migration', status: 'confirmed', source_compute: first, dest_compute: second });
      expect(await readThroughGuest(server, '/dev/vdb')).toBe(digest);
      await cleanAudit();

      await nova('resize', server, 'm1.large');
      const resized = await settled(api, server);
      expect(resized.status).toBe('VERIFY_RESIZE');
      expect(resized.flavor.original_name).toBe('m1.large');
      await nova('resize-revert', server);
      const reverted = await settled(api, server);
      expect(reverted.status).toBe('ACTIVE');
      expect(reverted['OS-EXT-SRV-ATTR:host']).toBe(second);
      expect(reverted.flavor.original_name).toBe('m1.small');
      expect((await migrationsOf(server))[0]).toMatchObject({ migration_type: 'resize', status: 'reverted' });
      await attachmentsMatch(server);
      expect((await volumeStatus(cinder, volume)).status).toBe('in-use');
      expect(await readThroughGuest(server, '/dev/vdb')).toBe(digest);

      // What novaclient shows of it all.
      const actions = await nova('instance-action-list', server);
      for (const a of ['create', 'attach_volume', 'migrate', 'confirmResize', 'resize', 'revertResize']) expect(actions).toContain(a);
      expect(await nova('migration-list')).toContain(server);
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );
});
