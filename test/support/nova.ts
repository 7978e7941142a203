/**
 * Helpers for server tests on the local stack: Nova and Cinder over real HTTP, waiting for a
 * server to settle, volumes with known bytes (written and read through a compute host's
 * connection, the way a guest would see them), and the invariants every flow test ends with.
 */
import { createHash } from 'node:crypto';
import { expect } from 'vitest';
import { nodeOfHost } from '../../functions/servers/engine.js';
import { computeDriverFor } from '../../functions/drivers/compute/registry.js';
import { findServer, loadPartition } from '../../functions/servers/repo.js';
import type { BlockDeviceMapping, Instance } from '../../functions/servers/model.js';
import { SANDBOX_IMAGES } from '../../functions/servers/images.js';
import { flavorKey, GSI } from '../../functions/compute/model.js';
import { putIfAbsent } from '../../functions/compute/repo.js';
import { tableName } from '../../functions/core/tables.js';
import { eventually } from './poll.js';
import type { TestLocalStack } from './stack.js';

export interface Res {
  status: number;
  body: any;
  headers: Headers;
}

export function novaClient(stack: Pick<TestLocalStack, 'url'>, defaults: { token?: string; version?: string } = {}) {
  return async (method: string, path: string, opts: { version?: string; token?: string; body?: unknown } = {}): Promise<Res> => {
    const headers: Record<string, string> = { Accept: 'application/json', 'X-Auth-Token': opts.token ?? defaults.token ?? 'admin:admin' };
    const version = opts.version ?? defaults.version ?? '2.93';
    headers['OpenStack-API-Version'] = `compute ${version}`;
    if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(`${stack.url}/compute/v2.1${path}`, { method, headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
  };
}

export function cinderClient(stack: Pick<TestLocalStack, 'url'>, token = 'admin:admin') {
  return async (method: string, path: string, body?: unknown, version = '3.70'): Promise<Res> => {
    const headers: Record<string, string> = { Accept: 'application/json', 'X-Auth-Token': token, 'OpenStack-API-Version': `volume ${version}` };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const project = token.split(':')[1] ?? token;
    const res = await fetch(`${stack.url}/volume/v3/${project}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
  };
}

export type Nova = ReturnType<typeof novaClient>;
export type Cinder = ReturnType<typeof cinderClient>;

/** A volume, waited until available. */
export async function createVolume(cinder: Cinder, size = 1, name = 'vol'): Promise<string> {
  const res = await cinder('POST', '/volumes', { volume: { size, name } });
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  const id = res.body.volume.id as string;
  await eventually(async (note) => (note((await cinder('GET', `/volumes/${id}`)).body.volume.status) === 'available' ? true : undefined), `volume ${id} available`);
  return id;
}

export async function volumeStatus(cinder: Cinder, id: string): Promise<{ status: string; attachments: { attachment_id: string; server_id: string; host_name: string | null }[] }> {
  const v = (await cinder('GET', `/volumes/${id}`)).body.volume;
  return { status: v.status, attachments: v.attachments };
}

/** Boots a server (from the first seeded image unless a boot volume is given) and waits until it settles. */
export async function bootServer(nova: Nova, opts: { name?: string; flavor?: string; bootVolume?: string; host?: string; token?: string } = {}): Promise<string> {
  const server: Record<string, unknown> = { name: opts.name ?? 'vm', flavorRef: opts.flavor ?? '1', networks: 'auto' };
  if (opts.bootVolume) server.block_device_mapping_v2 = [{ boot_index: 0, uuid: opts.bootVolume, source_type: 'volume', destination_type: 'volume' }];
  else server.imageRef = SANDBOX_IMAGES.cirrosTiny.id;
  if (opts.host) server.host = opts.host;
  const res = await nova('POST', '/servers', { body: { server }, token: opts.token });
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  const id = res.body.server.id as string;
  const s = await settled(nova, id);
  expect(s.status, JSON.stringify(s.fault ?? s)).toBe('ACTIVE');
  return id;
}

/** The server once no operation is in flight (task_state None and no machine behind it). */
export async function settled(nova: Nova, id: string, timeoutMs = 60_000): Promise<any> {
  return eventually(
    async (note) => {
      const found = await findServer(id);
      if (found && found.instance.operation) {
        note({ operation: found.instance.operation });
        return undefined;
      }
      const res = await nova('GET', `/servers/${id}`);
      if (res.status === 404) return { status: 'DELETED' };
      return note(res.body.server)['OS-EXT-STS:task_state'] === null ? res.body.server : undefined;
    },
    `server ${id} to settle`,
    timeoutMs,
  );
}

export async function serverState(id: string): Promise<{ instance: Instance; bdms: BlockDeviceMapping[] }> {
  const found = await findServer(id);
  if (!found) throw new Error(`server ${id} not found`);
  const { instance, bdms } = await loadPartition(found.cell, id);
  return { instance: instance!, bdms };
}

/** Writes a deterministic pattern into a volume through the guest's device, returns the sha-256 of the first `bytes`. */
export async function writeThroughGuest(serverId: string, device: string, seed: string, bytes = 256 * 1024): Promise<string> {
  const { instance } = await serverState(serverId);
  const driver = computeDriverFor((await nodeOfHost(instance.host!)).node.config);
  const handle = await driver.openGuestDevice(serverId, device);
  try {
    const data = patternBytes(seed, bytes);
    await handle.write(0, data);
    return createHash('sha256').update(data).digest('hex');
  } finally {
    await handle.close();
  }
}

/** The sha-256 of the first `bytes` of a guest device, as the guest on its current host reads it. */
export async function readThroughGuest(serverId: string, device: string, bytes = 256 * 1024): Promise<string> {
  const { instance } = await serverState(serverId);
  const driver = computeDriverFor((await nodeOfHost(instance.host!)).node.config);
  const handle = await driver.openGuestDevice(serverId, device);
  try {
    return createHash('sha256').update(await handle.read(0, bytes)).digest('hex');
  } finally {
    await handle.close();
  }
}

export function patternBytes(seed: string, size: number): Buffer {
  const out = Buffer.alloc(size);
  let block = createHash('sha256').update(seed).digest();
  for (let pos = 0; pos < size; pos += block.length) {
    block.copy(out, pos);
    block = createHash('sha256').update(block).digest();
  }
  return out;
}

/** Starts an action and expects the status. */
export async function action(nova: Nova, id: string, body: unknown, expected = 202, version?: string): Promise<Res> {
  const res = await nova('POST', `/servers/${id}/action`, { body, ...(version ? { version } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(expected);
  return res;
}

/** The audit every server scenario ends with: no findings. */
export async function assertCleanAudit(): Promise<void> {
  const { runAudit } = await import('../../functions/audit/audit.js');
  const findings = (await runAudit()).findings;
  expect(findings, JSON.stringify(findings, null, 1)).toEqual([]);
}

/** A flavor with root_gb 0 (the root disk is the image's size), so moves, evacuations and shelve snapshots copy little. */
export async function putSmallRootFlavor(flavorid: string, name: string): Promise<void> {
  const at = new Date().toISOString();
  await putIfAbsent(tableName('compute-api'), {
    ...flavorKey(flavorid),
    gsi1pk: GSI.flavors,
    gsi1sk: flavorid,
    flavorid,
    id: Number(flavorid),
    name,
    memoryMb: 512,
    vcpus: 1,
    rootGb: 0,
    ephemeralGb: 0,
    swap: 0,
    rxtxFactor: 1.0,
    isPublic: true,
    disabled: false,
    description: 'root disk of the image size',
    extraSpecs: {},
    createdAt: at,
  });
}
