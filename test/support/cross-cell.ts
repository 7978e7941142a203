/**
 * Shared fixtures of the cross-cell resize tests (reference §1): the policy switch, a cell1 server
 * with known root-disk and volume bytes, and readers of both copies, attachments, guests and images.
 */
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { clearFaults } from '../../functions/core/faults.js';
import { resetPolicyCache } from '../../functions/core/policy.js';
import { computeDriverFor } from '../../functions/drivers/compute/registry.js';
import { nodeOfHost } from '../../functions/servers/engine.js';
import { allocationsOf } from '../../functions/compute/placement.js';
import { listMigrations } from '../../functions/servers/migrations.js';
import { findCopies, loadPartition } from '../../functions/servers/repo.js';
import { listImages } from '../../functions/servers/images.js';
import type { Migration } from '../../functions/servers/model.js';
import { createHash } from 'node:crypto';
import { assertCleanAudit, bootServer, cinderClient, createVolume, novaClient, patternBytes, settled, volumeStatus, writeThroughGuest, readThroughGuest, type Cinder, type Nova } from './nova.js';
import { useLocalStack, type TestLocalStack } from './stack.js';

export const HOSTS = ['cmp1', 'cmp2', 'cmp3', 'cmp4'] as const;
export const CELL1_HOSTS = ['cmp1', 'cmp2'];
export const CELL2_HOSTS = ['cmp3', 'cmp4'];
/** A move is several machine steps on two hosts in two cells: room for a loaded 2-core machine. */
export const LONG = 300_000;
export const TEST = { timeout: 900_000 };
/**
 * Past the image's data (256-384 KiB), so the bytes there exist only because the guest wrote them.
 * (A cross-cell resize snapshots the root disk as a qcow2 image of its data clusters, so the offset
 * no longer costs the move anything: test/integration/servers-sparse-moves.test.ts writes at 900 MiB.)
 */
export const ROOT_OFFSET = 8 * 1024 * 1024;
const ROOT_BYTES = 256 * 1024;

/** Allows cross-cell moves (default '!'); call before useLocalStack so the stack sees it. */
export function allowCrossCell(): () => void {
  const saved = process.env.FERRY_POLICY;
  process.env.FERRY_POLICY = JSON.stringify({ 'compute:servers:resize:cross_cell': 'admin_or_owner' });
  resetPolicyCache();
  return () => {
    if (saved === undefined) delete process.env.FERRY_POLICY;
    else process.env.FERRY_POLICY = saved;
    resetPolicyCache();
  };
}

/**
 * The hooks of a cross-cell test file: the policy allowed and a local stack started before its
 * tests; after each test the faults cleared, every server it pushed onto `servers` deleted with
 * nothing of it left on any host, and a clean audit. `nova` and `cinder` reach the file's stack.
 */
export function crossCellSuite(): { nova: Nova; cinder: Cinder; servers: string[] } {
  let stack: TestLocalStack | undefined;
  let clients: { nova: Nova; cinder: Cinder } | undefined;
  let restorePolicy: (() => void) | undefined;
  const servers: string[] = [];
  beforeAll(async () => {
    restorePolicy = allowCrossCell();
    stack = await useLocalStack();
    clients = { nova: novaClient(stack), cinder: cinderClient(stack) };
  }, 120_000);
  afterAll(async () => {
    restorePolicy?.();
    await stack?.stop();
  });
  afterEach(async () => {
    clearFaults();
    for (const id of servers.splice(0)) {
      await clients!.nova('DELETE', `/servers/${id}`);
      expect((await settled(clients!.nova, id, LONG)).status).toBe('DELETED');
      expect(await guestsOn(id), `nothing of ${id} on any host`).toEqual({});
    }
    await assertCleanAudit();
  }, 600_000);
  const nova = ((...args: Parameters<Nova>) => clients!.nova(...args)) as Nova;
  const cinder = ((...args: Parameters<Cinder>) => clients!.cinder(...args)) as Cinder;
  return { nova, cinder, servers };
}

export const driverOf = async (host: string) => computeDriverFor((await nodeOfHost(host)).node.config);

/** Writes a pattern into the root disk past the image, returns its sha-256. */
export async function writeRoot(id: string, host: string, seed: string): Promise<string> {
  const handle = await (await driverOf(host)).openGuestDevice(id, '/dev/vda');
  try {
    const data = patternBytes(seed, ROOT_BYTES);
    await handle.write(ROOT_OFFSET, data);
    return createHash('sha256').update(data).digest('hex');
  } finally {
    await handle.close();
  }
}

/** The sha-256 of the root-disk bytes written by writeRoot, as the guest on `host` reads them. */
export async function readRoot(id: string, host: string): Promise<string> {
  const handle = await (await driverOf(host)).openGuestDevice(id, '/dev/vda');
  try {
    return createHash('sha256').update(await handle.read(ROOT_OFFSET, ROOT_BYTES)).digest('hex');
  } finally {
    await handle.close();
  }
}

export interface XServer { id: string; vol: string; volDigest: string; rootDigest?: string }

/** Attaches a new volume and writes known bytes into it through the guest (device `device`). */
export async function attachNewVolume(nova: Nova, cinder: Cinder, id: string, name: string, device = '/dev/vdb'): Promise<{ vol: string; digest: string }> {
  const vol = await createVolume(cinder, 1, name);
  const res = await nova('POST', `/servers/${id}/os-volume_attachments`, { body: { volumeAttachment: { volumeId: vol } } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  await settled(nova, id, LONG);
  return { vol, digest: await writeThroughGuest(id, device, `${name}-bytes`) };
}

/** An m1.small server on cmp1 (cell1), image-backed unless bootVolume, with a data volume holding known bytes. */
export async function cell1Server(nova: Nova, cinder: Cinder, name: string, opts: { bootVolume?: boolean } = {}): Promise<XServer & { bootVolume?: string }> {
  let bootVolume: string | undefined;
  if (opts.bootVolume) {
    bootVolume = await createVolume(cinder, 1, `${name}-boot`);
  }
  const id = await bootServer(nova, { name, host: 'cmp1', flavor: '1', ...(bootVolume ? { bootVolume } : {}) });
  const { vol, digest } = await attachNewVolume(nova, cinder, id, `${name}-data`);
  const rootDigest = opts.bootVolume ? undefined : await writeRoot(id, 'cmp1', `${name}-root`);
  return { id, vol, volDigest: digest, ...(rootDigest ? { rootDigest } : {}), ...(bootVolume ? { bootVolume } : {}) };
}

/** Every copy of the server (mapped one first) with its BDMs and actions. */
export async function copies(id: string) {
  return Promise.all((await findCopies(id)).map(async (c) => ({ cell: c.cell, ...(await loadPartition(c.cell, id)) })));
}

/** Every migration record of the instance in every cell. */
export async function migrationRecords(id: string): Promise<{ cell: string; migration: Migration }[]> {
  return (await listMigrations()).filter((m) => m.migration.instanceUuid === id).map((m) => ({ cell: m.cell.name, migration: m.migration }));
}

/** The newest migration of the server as /os-migrations shows it (admin). */
export async function apiMigrations(nova: Nova, id: string): Promise<any[]> {
  const res = await nova('GET', `/os-migrations?instance_uuid=${id}`, { version: '2.80' });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.migrations.filter((m: { instance_uuid: string }) => m.instance_uuid === id);
}

/** Cinder's attachments of a volume. */
export async function attachmentsOf(cinder: Cinder, vol: string) {
  return (await volumeStatus(cinder, vol)).attachments;
}

/** The attachment records themselves (3.27), with attach status and connector presence. */
export async function attachmentRecords(cinder: Cinder, vol: string): Promise<{ id: string; status: string; instance: string }[]> {
  const res = await cinder('GET', `/attachments/detail?volume_id=${vol}`, undefined, '3.27');
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.attachments.map((a: any) => ({ id: a.id, status: a.attach_status ?? a.status, instance: a.instance }));
}

/** Which hosts hold a defined guest, and which kept disks, of the server. */
export async function guestsOn(id: string): Promise<Record<string, string[]>> {
  const out: Record<string, string[]> = {};
  for (const host of HOSTS) {
    const d = await driverOf(host);
    const here: string[] = [];
    if ((await d.listGuests()).some((g) => g.uuid === id)) here.push('guest');
    if ((await d.listKeptDisks()).some((g) => g.uuid === id)) here.push('kept');
    if (here.length) out[host] = here;
  }
  return out;
}

/** Allocations of a consumer as host -> vcpus. */
export async function allocsByHost(consumer: string): Promise<Record<string, number>> {
  const byNode = new Map<string, string>();
  for (const h of HOSTS) byNode.set((await nodeOfHost(h)).node.uuid, h);
  const out: Record<string, number> = {};
  for (const a of await allocationsOf(consumer)) out[byNode.get(a.nodeUuid) ?? a.nodeUuid] = a.vcpus;
  return out;
}

/** The `-resize-temp` snapshot images (none may outlive a move). */
export async function resizeTempImages(name: string) {
  return (await listImages('admin', true)).filter((i) => i.name === `${name}-resize-temp`);
}

/** The server's volume bytes as its guest reads them now. */
export const readVolume = (id: string, device = '/dev/vdb') => readThroughGuest(id, device);

/**
 * Nothing of the move is left: one copy, one attachment per volume (connected to `host`),
 * no -resize-temp image, no guest or kept disk outside `host`.
 */
export async function expectSettledOn(cinder: Cinder, s: { id: string; name: string; vols: string[] }, host: string): Promise<void> {
  const cs = await copies(s.id);
  expect(cs.map((c) => c.instance?.hidden ?? false), 'one shown copy').toEqual([false]);
  expect(cs[0]!.instance!.host).toBe(host);
  for (const vol of s.vols) {
    const atts = await attachmentsOf(cinder, vol);
    expect(atts, `attachments of ${vol}`).toHaveLength(1);
    expect(atts[0]).toMatchObject({ server_id: s.id, host_name: host });
    expect(cs[0]!.bdms.find((b) => b.volumeId === vol)?.attachmentId).toBe(atts[0]!.attachment_id);
  }
  expect(await resizeTempImages(s.name)).toEqual([]);
  expect(await guestsOn(s.id)).toEqual({ [host]: ['guest'] });
}
