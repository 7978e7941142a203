/**
 * Crash scenarios of the server machines, through the Nova API of a local stack, fixtures as in
 * test/integration/servers-*.test.ts: a server booted from the seeded image with one volume
 * attached (the flows' attachment calls are crash points: kind cinder), a flavor with root_gb 0 so
 * moves and shelve copies stay small.
 */
import { findServer } from '../../../functions/servers/repo.js';
import { bootServer, cinderClient, createVolume, novaClient, putSmallRootFlavor, settled } from '../../support/nova.js';
import { eventually } from '../../support/poll.js';
import type { TestLocalStack } from '../../support/stack.js';
import type { CrashOutcome, CrashScenario } from '../../support/crash.js';

/** A flavor with root_gb 0 (the root disk is the image's size), as servers-evacuate-shelve uses. */
export const SMALL_ROOT_FLAVOR = '90';

export const ensureSmallRootFlavor = () => putSmallRootFlavor(SMALL_ROOT_FLAVOR, 'm1.tinyroot');

interface ServerFixture {
  id: string;
  host: string;
  volume?: string;
  newVolume?: string;
}

export function serverScenarios(stack: TestLocalStack): CrashScenario<any>[] {
  const nova = novaClient(stack);
  const cinder = cinderClient(stack);
  const name = () => `crash-${Math.random().toString(36).slice(2, 10)}`;

  const call = async (method: string, path: string, body: unknown, expected: number[]) => {
    const res = await nova(method, path, { body });
    if (!expected.includes(res.status)) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
    return res;
  };
  const act = (id: string, body: unknown, expected = [202]) => call('POST', `/servers/${id}/action`, body, expected);
  const volumeStatus = async (id: string) => (await cinder('GET', `/volumes/${id}`)).body.volume.status as string;

  /** The server once nothing runs on it: its status and host; undefined while an operation runs. */
  async function rest(id: string): Promise<{ status: string; host: string | null } | undefined> {
    const found = await findServer(id);
    if (found?.instance.operation) return undefined;
    const res = await nova('GET', `/servers/${id}`);
    if (res.status === 404) return { status: 'DELETED', host: null };
    const s = res.body.server;
    return s['OS-EXT-STS:task_state'] === null ? { status: s.status, host: s['OS-EXT-SRV-ATTR:host'] } : undefined;
  }

  /** Deletes a fixture's server, so the hosts do not fill up over hundreds of points. */
  async function deleteServer(id: string): Promise<void> {
    if ((await rest(id))?.status === 'DELETED') return;
    await call('DELETE', `/servers/${id}`, undefined, [204, 404]);
    await eventually(async () => ((await rest(id))?.status === 'DELETED' ? true : undefined), `server ${id} deleted`, 60_000);
  }

  async function server(opts: { volume?: boolean; newVolume?: boolean } = {}): Promise<ServerFixture> {
    await ensureSmallRootFlavor();
    const id = await bootServer(nova, { name: name(), flavor: SMALL_ROOT_FLAVOR });
    const host = (await rest(id))!.host!;
    const f: ServerFixture = { id, host };
    if (opts.volume) {
      f.volume = await createVolume(cinder, 1, 'crash-vol');
      await call('POST', `/servers/${id}/os-volume_attachments`, { volumeAttachment: { volumeId: f.volume } }, [200]);
      await settled(nova, id);
    }
    if (opts.newVolume) f.newVolume = await createVolume(cinder, 1, 'crash-new');
    return f;
  }

  /** A scenario on a server fixture: `done` maps the settled server to the outcome. */
  const on = (
    scenarioName: string,
    fixture: () => Promise<ServerFixture>,
    start: (f: ServerFixture) => Promise<unknown>,
    done: (f: ServerFixture, s: { status: string; host: string | null }) => Promise<CrashOutcome | undefined> | CrashOutcome | undefined,
  ): CrashScenario<ServerFixture> => ({
    name: scenarioName,
    timeoutMs: 120_000,
    setup: fixture,
    start,
    cleanup: (f) => deleteServer(f.id),
    async outcome(f) {
      const s = await rest(f.id);
      return s ? done(f, s) : undefined;
    },
  });

  const create: CrashScenario<{ name: string; id?: string }> = {
    name: 'server-create',
    timeoutMs: 120_000,
    setup: async () => {
      await ensureSmallRootFlavor();
      return { name: name() };
    },
    async start(f) {
      const res = await call('POST', '/servers', { server: { name: f.name, flavorRef: SMALL_ROOT_FLAVOR, imageRef: (await import('../../../functions/servers/images.js')).SANDBOX_IMAGES.cirrosTiny.id, networks: 'auto' } }, [202]);
      f.id = res.body.server.id;
    },
    cleanup: async (f) => (f.id ? deleteServer(f.id) : undefined),
    async outcome(f) {
      const id = f.id ?? (await nova('GET', `/servers?name=${f.name}`)).body.servers?.[0]?.id;
      if (!id) return 'rolled-back';
      f.id = id;
      const s = await rest(id);
      if (!s) return undefined;
      return s.status === 'ACTIVE' ? 'finished' : s.status === 'ERROR' ? 'rolled-back' : undefined;
    },
  };

  const migrated = async (f: ServerFixture) => {
    await act(f.id, { migrate: null });
    const s = await settled(nova, f.id, 120_000);
    if (s.status !== 'VERIFY_RESIZE') throw new Error(`migrate ended ${s.status}`);
    return f;
  };

  return [
    create,
    on('server-delete', () => server({ volume: true }), (f) => call('DELETE', `/servers/${f.id}`, undefined, [204]), async (f, s) =>
      s.status === 'DELETED' && (await volumeStatus(f.volume!)) === 'available' ? 'finished' : s.status === 'DELETED' ? undefined : 'rolled-back',
    ),
    on('server-power', () => server(), (f) => act(f.id, { 'os-stop': null }), (_f, s) => (s.status === 'SHUTOFF' ? 'finished' : s.status === 'ACTIVE' ? 'rolled-back' : undefined)),
    on('server-attach-volume', async () => ({ ...(await server()), volume: await createVolume(cinder, 1, 'crash-att') }),
      (f) => call('POST', `/servers/${f.id}/os-volume_attachments`, { volumeAttachment: { volumeId: f.volume } }, [200]),
      async (f) => ((await volumeStatus(f.volume!)) === 'in-use' ? 'finished' : (await volumeStatus(f.volume!)) === 'available' ? 'rolled-back' : undefined),
    ),
    on('server-detach-volume', () => server({ volume: true }), (f) => call('DELETE', `/servers/${f.id}/os-volume_attachments/${f.volume}`, undefined, [202]),
      async (f) => ((await volumeStatus(f.volume!)) === 'available' ? 'finished' : (await volumeStatus(f.volume!)) === 'in-use' ? 'rolled-back' : undefined),
    ),
    on('server-swap-volume', () => server({ volume: true, newVolume: true }),
      (f) => call('PUT', `/servers/${f.id}/os-volume_attachments/${f.volume}`, { volumeAttachment: { volumeId: f.newVolume } }, [202]),
      async (f) => ((await volumeStatus(f.newVolume!)) === 'in-use' && (await volumeStatus(f.volume!)) === 'available' ? 'finished' : (await volumeStatus(f.volume!)) === 'in-use' ? 'rolled-back' : undefined),
    ),
    on('server-live-migrate', () => server({ volume: true }), (f) => act(f.id, { 'os-migrateLive': { host: null, block_migration: 'auto' } }),
      (f, s) => (s.status !== 'ACTIVE' ? undefined : s.host !== f.host ? 'finished' : 'rolled-back'),
    ),
    on('server-resize', () => server({ volume: true }), (f) => act(f.id, { migrate: null }), (_f, s) => (s.status === 'VERIFY_RESIZE' ? 'finished' : s.status === 'ACTIVE' ? 'rolled-back' : undefined)),
    on('server-confirm-resize', async () => migrated(await server({ volume: true })), (f) => act(f.id, { confirmResize: null }, [204]),
      (_f, s) => (s.status === 'ACTIVE' ? 'finished' : s.status === 'VERIFY_RESIZE' ? 'rolled-back' : undefined),
    ),
    on('server-revert-resize', async () => migrated(await server({ volume: true })), (f) => act(f.id, { revertResize: null }),
      (f, s) => (s.status === 'ACTIVE' && s.host === f.host ? 'finished' : s.status === 'VERIFY_RESIZE' ? 'rolled-back' : undefined),
    ),
    on('server-shelve', () => server({ volume: true }), (f) => act(f.id, { shelve: null }),
      (_f, s) => (s.status === 'SHELVED_OFFLOADED' ? 'finished' : s.status === 'ACTIVE' ? 'rolled-back' : undefined),
    ),
    on('server-unshelve', async () => {
      const f = await server({ volume: true });
      await act(f.id, { shelve: null });
      const s = await settled(nova, f.id, 120_000);
      if (s.status !== 'SHELVED_OFFLOADED') throw new Error(`shelve ended ${s.status}`);
      return f;
    }, (f) => act(f.id, { unshelve: null }), (_f, s) => (s.status === 'ACTIVE' ? 'finished' : s.status === 'SHELVED_OFFLOADED' ? 'rolled-back' : undefined)),
  ];
}

export const SERVER_SCENARIOS = [
  'server-create',
  'server-delete',
  'server-power',
  'server-attach-volume',
  'server-detach-volume',
  'server-swap-volume',
  'server-live-migrate',
  'server-resize',
  'server-confirm-resize',
  'server-revert-resize',
  'server-shelve',
  'server-unshelve',
];
