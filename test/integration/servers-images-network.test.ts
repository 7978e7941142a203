/**
 * Images in S3 with their records, and ports with fixed IPs and per-host bindings, on the local
 * stack (DynamoDB Local + s3rver): byte-identical round trips, idempotent seed and delete, fixed-IP
 * uniqueness under concurrent creates, and Neutron's binding rules (at most one ACTIVE binding).
 */
import { createHash, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { GetCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { HeadObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { db } from '../../functions/core/db.js';
import { Conflict, NotFound } from '../../functions/core/errors.js';
import { bucket, s3 } from '../../functions/core/s3.js';
import { tableName } from '../../functions/core/tables.js';
import { SANDBOX_NETWORK } from '../../functions/compute/seed.js';
import { fixedIpKey, imageKey, type Port } from '../../functions/servers/model.js';
import {
  createImageRecord,
  deleteImage,
  deterministicBytes,
  getImage,
  imageSourceFor,
  listImages,
  openImage,
  SANDBOX_IMAGES,
  seedImages,
  uploadImage,
} from '../../functions/servers/images.js';
import {
  activatePortBinding,
  addressesOf,
  assignableAddresses,
  bindPortToHost,
  createPort,
  deletePortBinding,
  deletePortsOf,
  getPort,
  listPortsOf,
  macFor,
  scanAllPorts,
} from '../../functions/servers/network.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
beforeAll(async () => {
  stack = await useLocalStack();
});
afterAll(async () => stack?.stop());

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c as Uint8Array));
  return Buffer.concat(chunks);
}

/** Only S3's own "not found" (HeadObject answers 404 NotFound) means absent; any other error fails the test. */
async function objectExists(key: string): Promise<boolean> {
  try {
    await (await s3()).send(new HeadObjectCommand({ Bucket: bucket(), Key: key }));
    return true;
  } catch (e) {
    const err = e as { name?: string; $metadata?: { httpStatusCode?: number } };
    if (err.name === 'NotFound' || err.$metadata?.httpStatusCode === 404) return false;
    throw e;
  }
}

async function fixedIpItems(networkId: string): Promise<Record<string, unknown>[]> {
  const out = await db().send(
    new ScanCommand({ TableName: tableName('compute-api'), ConsistentRead: true, FilterExpression: 'begins_with(pk, :p)', ExpressionAttributeValues: { ':p': `IP#${networkId}#` } }),
  );
  expect(out.LastEvaluatedKey).toBeUndefined();
  return out.Items ?? [];
}

function activeBindings(port: Port): string[] {
  return Object.values(port.bindings)
    .filter((b) => b.status === 'ACTIVE')
    .map((b) => b.host);
}

describe('images', () => {
  test('upload then download is byte-identical, with the sha-256 and size recorded', async () => {
    const bytes = deterministicBytes('round-trip', 300 * 1024 + 7);
    const created = await createImageRecord({ name: 'rt', ownerProjectId: 'p1', visibility: 'private', properties: { image_type: 'snapshot' } });
    expect(created).toMatchObject({ status: 'queued', sha256: null, objectKey: `images/${created.id}`, diskFormat: 'raw' });

    const active = await uploadImage(created.id, Readable.from([bytes.subarray(0, 1000), bytes.subarray(1000)]), bytes.byteLength);
    expect(active).toMatchObject({ status: 'active', sizeBytes: bytes.byteLength, sha256: sha256(bytes) });
    expect(await getImage(created.id)).toEqual(active);

    const back = await readAll(await openImage(created.id));
    expect(back.byteLength).toBe(bytes.byteLength);
    expect(sha256(back)).toBe(sha256(bytes));
    expect(Buffer.compare(back, Buffer.from(bytes))).toBe(0);

    const source = imageSourceFor(active);
    expect(sha256(await readAll(await source.stream()))).toBe(sha256(bytes));

    // The same bytes again: no-op. Other bytes: refused, the data unchanged.
    expect(await uploadImage(created.id, bytes)).toEqual(active);
    await expect(uploadImage(created.id, deterministicBytes('other', 10))).rejects.toBeInstanceOf(Conflict);
    expect(sha256(await readAll(await openImage(created.id)))).toBe(sha256(bytes));
  });

  test('a stream of unknown size uploads too', async () => {
    const bytes = deterministicBytes('unsized', 70_000);
    const { id } = await createImageRecord({ name: 'unsized', ownerProjectId: 'p1', visibility: 'private', properties: {} });
    const active = await uploadImage(id, Readable.from([bytes]));
    expect(active).toMatchObject({ status: 'active', sizeBytes: 70_000, sha256: sha256(bytes) });
    expect(sha256(await readAll(await openImage(id)))).toBe(sha256(bytes));
  });

  test('a stream shorter or longer than announced fails the upload and leaves the image queued', async () => {
    const { id } = await createImageRecord({ name: 'short', ownerProjectId: 'p1', visibility: 'private', properties: {} });
    await expect(uploadImage(id, Readable.from([new Uint8Array(10)]), 20)).rejects.toThrow('10 bytes received, 20 expected');
    expect((await getImage(id)).status).toBe('queued');
    await expect(openImage(id)).rejects.toBeInstanceOf(Conflict);
    await expect(uploadImage(id, Readable.from([new Uint8Array(10), new Uint8Array(10)]), 15)).rejects.toThrow('expected');
    expect((await getImage(id)).status).toBe('queued');
    // A retry with the right bytes succeeds.
    const bytes = deterministicBytes('short', 20);
    expect(await uploadImage(id, Readable.from([bytes]), 20)).toMatchObject({ status: 'active', sha256: sha256(bytes) });
  }, 20_000);

  test('a duplicate id is refused; a missing image is NotFound with Nova-style message', async () => {
    const { id } = await createImageRecord({ name: 'dup', ownerProjectId: null, visibility: 'public', properties: {} });
    await expect(createImageRecord({ id, name: 'dup2', ownerProjectId: null, visibility: 'public', properties: {} })).rejects.toBeInstanceOf(Conflict);
    const missing = randomUUID();
    await expect(getImage(missing)).rejects.toThrow(new NotFound(`Image ${missing} could not be found.`));
    await expect(openImage(missing)).rejects.toBeInstanceOf(NotFound);
    await expect(uploadImage(missing, new Uint8Array(1))).rejects.toBeInstanceOf(NotFound);
  });

  test('seed is idempotent: two runs, same two active public images, bytes unchanged', async () => {
    const first = await seedImages();
    const second = await seedImages();
    expect(second).toEqual(first);
    expect(first.map((i) => i.id)).toEqual([SANDBOX_IMAGES.cirrosTiny.id, SANDBOX_IMAGES.ferryTiny.id]);
    for (const [image, seed] of [
      [first[0]!, SANDBOX_IMAGES.cirrosTiny],
      [first[1]!, SANDBOX_IMAGES.ferryTiny],
    ] as const) {
      expect(image).toMatchObject({ status: 'active', visibility: 'public', ownerProjectId: null, sizeBytes: seed.sizeBytes, diskFormat: 'raw' });
      expect(image.sha256).toBe(sha256(deterministicBytes(seed.name, seed.sizeBytes)));
      expect(sha256(await readAll(await openImage(image.id)))).toBe(image.sha256);
    }
    expect(first[0]!.sha256).not.toBe(first[1]!.sha256);
  });

  test('listing shows public and own images; an admin sees all', async () => {
    await seedImages();
    const mine = await createImageRecord({ name: 'mine', ownerProjectId: 'alpha', visibility: 'private', properties: {} });
    const theirs = await createImageRecord({ name: 'theirs', ownerProjectId: 'beta', visibility: 'private', properties: {} });
    const alpha = (await listImages('alpha', false)).map((i) => i.id);
    expect(alpha).toContain(mine.id);
    expect(alpha).toContain(SANDBOX_IMAGES.cirrosTiny.id);
    expect(alpha).not.toContain(theirs.id);
    const admin = (await listImages('admin', true)).map((i) => i.id);
    expect(admin).toEqual(expect.arrayContaining([mine.id, theirs.id, SANDBOX_IMAGES.ferryTiny.id]));
  });

  test('delete removes the object and the record, and is idempotent', async () => {
    const bytes = deterministicBytes('to-delete', 4096);
    const { id } = await createImageRecord({ name: 'to-delete', ownerProjectId: 'p1', visibility: 'private', properties: {} });
    await uploadImage(id, bytes);
    expect(await objectExists(`images/${id}`)).toBe(true);

    await deleteImage(id);
    expect(await objectExists(`images/${id}`)).toBe(false);
    const record = await db().send(new GetCommand({ TableName: tableName('compute-api'), Key: imageKey(id), ConsistentRead: true }));
    expect(record.Item).toBeUndefined();
    await expect(getImage(id)).rejects.toBeInstanceOf(NotFound);

    await deleteImage(id);
    await deleteImage(randomUUID());
  });
});

describe('ports and fixed IPs', () => {
  test('the assignable addresses skip network, gateway and broadcast', () => {
    const all = [...assignableAddresses('10.0.0.0/24')];
    expect(all).toHaveLength(253);
    expect(all[0]).toBe('10.0.0.2');
    expect(all.at(-1)).toBe('10.0.0.254');
    expect([...assignableAddresses('192.168.1.0/29')]).toEqual(['192.168.1.2', '192.168.1.3', '192.168.1.4', '192.168.1.5', '192.168.1.6']);
  });

  test('a port is created DOWN, unbound, with a deterministic MAC; a retry returns it', async () => {
    const instance = randomUUID();
    const portId = randomUUID();
    const port = await createPort({ networkId: SANDBOX_NETWORK.id, instanceUuid: instance, projectId: 'p1', portId });
    expect(port).toMatchObject({ id: portId, status: 'DOWN', bindingHostId: null, bindings: {}, deviceId: instance, macAddress: macFor(portId), projectId: 'p1' });
    expect(port.macAddress).toMatch(/^fa:16:3e(:[0-9a-f]{2}){3}$/);
    expect(port.fixedIps).toHaveLength(1);
    expect(await createPort({ networkId: SANDBOX_NETWORK.id, instanceUuid: instance, projectId: 'p1', portId })).toEqual(port);
    await expect(createPort({ networkId: SANDBOX_NETWORK.id, instanceUuid: randomUUID(), projectId: 'p1', portId })).rejects.toBeInstanceOf(Conflict);
    expect(await listPortsOf(instance)).toEqual([port]);
    expect(await addressesOf([port])).toEqual({
      private: [{ version: 4, addr: port.fixedIps[0]!.ipAddress, 'OS-EXT-IPS:type': 'fixed', 'OS-EXT-IPS-MAC:mac_addr': port.macAddress }],
    });
    const claim = await db().send(new GetCommand({ TableName: tableName('compute-api'), Key: fixedIpKey(SANDBOX_NETWORK.id, port.fixedIps[0]!.ipAddress), ConsistentRead: true }));
    expect(claim.Item?.portId).toBe(portId);
    await deletePortsOf(instance);
    expect(await listPortsOf(instance)).toEqual([]);
  });

  test('an unknown network is NotFound', async () => {
    await expect(createPort({ networkId: randomUUID(), instanceUuid: randomUUID(), projectId: 'p1' })).rejects.toBeInstanceOf(NotFound);
  });

  test('50 concurrent creates on one network get 50 distinct IPs, one claim each; deleting frees them for reuse', async () => {
    const before = await fixedIpItems(SANDBOX_NETWORK.id);
    const instances: string[] = Array.from({ length: 5 }, () => randomUUID());
    const ports = await Promise.all(
      Array.from({ length: 50 }, (_, n) => createPort({ networkId: SANDBOX_NETWORK.id, instanceUuid: instances[n % 5]!, projectId: 'p1' })),
    );
    const ips = ports.map((p) => p.fixedIps[0]!.ipAddress);
    expect(new Set(ips).size).toBe(50);
    expect(ips.every((ip) => /^10\.0\.0\.(\d+)$/.test(ip) && !['10.0.0.0', '10.0.0.1', '10.0.0.255'].includes(ip))).toBe(true);

    const claims = await fixedIpItems(SANDBOX_NETWORK.id);
    expect(claims.length - before.length).toBe(50);
    const claimedBy = new Map(claims.map((c) => [c.ipAddress as string, c.portId as string]));
    for (const p of ports) expect(claimedBy.get(p.fixedIps[0]!.ipAddress)).toBe(p.id);
    const all = await scanAllPorts();
    expect(all.filter((p) => instances.includes(p.deviceId))).toHaveLength(50);
    for (const i of instances) expect(await listPortsOf(i)).toHaveLength(10);

    // The lowest addresses are the ones used: nothing below the highest is left unclaimed.
    const used = new Set(claims.map((c) => c.ipAddress as string));
    const highest = Math.max(...ips.map((ip) => Number(ip.split('.')[3])));
    for (let n = 2; n <= highest; n++) expect(used.has(`10.0.0.${n}`)).toBe(true);

    await deletePortsOf(instances[0]!);
    await deletePortsOf(instances[0]!);
    const freed = ports.filter((p) => p.deviceId === instances[0]).map((p) => p.fixedIps[0]!.ipAddress);
    expect(await fixedIpItems(SANDBOX_NETWORK.id)).toHaveLength(claims.length - 10);
    expect(await listPortsOf(instances[0]!)).toEqual([]);

    // A new port takes the lowest freed address.
    const lowestFreed = freed.sort((a, b) => Number(a.split('.')[3]) - Number(b.split('.')[3]))[0]!;
    const reused = await createPort({ networkId: SANDBOX_NETWORK.id, instanceUuid: randomUUID(), projectId: 'p1' });
    expect(reused.fixedIps[0]!.ipAddress).toBe(lowestFreed);

    for (const i of [...instances, reused.deviceId]) await deletePortsOf(i);
    expect(await fixedIpItems(SANDBOX_NETWORK.id)).toHaveLength(before.length);
  }, 120_000);
});

describe('port bindings', () => {
  test('first binding ACTIVE, later INACTIVE, activate swaps, delete rules; never two ACTIVE', async () => {
    const port = await createPort({ networkId: SANDBOX_NETWORK.id, instanceUuid: randomUUID(), projectId: 'p1' });
    const check = async (expected: { host: string | null; active: string[]; hosts: string[] }) => {
      const p = await getPort(port.id);
      expect(activeBindings(p).length).toBeLessThanOrEqual(1);
      expect(activeBindings(p)).toEqual(expected.active);
      expect(p.bindingHostId).toBe(expected.host);
      expect(Object.keys(p.bindings).sort()).toEqual(expected.hosts);
      expect(p.status).toBe(expected.host ? 'ACTIVE' : 'DOWN');
      return p;
    };

    expect(await bindPortToHost(port.id, 'cmp1', {})).toMatchObject({ host: 'cmp1', status: 'ACTIVE' });
    await check({ host: 'cmp1', active: ['cmp1'], hosts: ['cmp1'] });

    expect(await bindPortToHost(port.id, 'cmp2', { active: false })).toMatchObject({ host: 'cmp2', status: 'INACTIVE' });
    await check({ host: 'cmp1', active: ['cmp1'], hosts: ['cmp1', 'cmp2'] });

    // Re-binding a bound host returns its binding unchanged.
    expect(await bindPortToHost(port.id, 'cmp2', { active: true })).toMatchObject({ host: 'cmp2', status: 'INACTIVE' });
    await check({ host: 'cmp1', active: ['cmp1'], hosts: ['cmp1', 'cmp2'] });

    expect(await activatePortBinding(port.id, 'cmp2')).toMatchObject({ host: 'cmp2', status: 'ACTIVE' });
    const swapped = await check({ host: 'cmp2', active: ['cmp2'], hosts: ['cmp1', 'cmp2'] });
    expect(swapped.bindings.cmp1!.status).toBe('INACTIVE');

    // Activating the active one again changes nothing.
    await activatePortBinding(port.id, 'cmp2');
    expect(await getPort(port.id)).toEqual(swapped);

    await expect(activatePortBinding(port.id, 'cmp9')).rejects.toBeInstanceOf(NotFound);
    await expect(activatePortBinding(randomUUID(), 'cmp1')).rejects.toBeInstanceOf(NotFound);

    // A new binding asked to be active takes over.
    expect(await bindPortToHost(port.id, 'cmp3', { active: true })).toMatchObject({ status: 'ACTIVE' });
    await check({ host: 'cmp3', active: ['cmp3'], hosts: ['cmp1', 'cmp2', 'cmp3'] });

    // Deleting an inactive binding keeps the host; deleting the active one unbinds the port.
    await deletePortBinding(port.id, 'cmp1');
    await check({ host: 'cmp3', active: ['cmp3'], hosts: ['cmp2', 'cmp3'] });
    await deletePortBinding(port.id, 'cmp3');
    await check({ host: null, active: [], hosts: ['cmp2'] });
    await deletePortBinding(port.id, 'cmp3');
    await deletePortBinding(randomUUID(), 'cmp3');

    // With no ACTIVE binding left, the next binding is ACTIVE.
    expect(await bindPortToHost(port.id, 'cmp4')).toMatchObject({ status: 'ACTIVE' });
    await check({ host: 'cmp4', active: ['cmp4'], hosts: ['cmp2', 'cmp4'] });

    await deletePortsOf(port.deviceId);
    await expect(getPort(port.id)).rejects.toBeInstanceOf(NotFound);
  });

  test('concurrent activations and binds leave exactly one ACTIVE binding', async () => {
    const port = await createPort({ networkId: SANDBOX_NETWORK.id, instanceUuid: randomUUID(), projectId: 'p1' });
    const hosts = ['cmp1', 'cmp2', 'cmp3', 'cmp4'];
    await Promise.all(hosts.map((h) => bindPortToHost(port.id, h)));
    let p = await getPort(port.id);
    expect(Object.keys(p.bindings).sort()).toEqual(hosts);
    expect(activeBindings(p)).toHaveLength(1);

    await Promise.all([...hosts, ...hosts].map((h) => activatePortBinding(port.id, h)));
    p = await getPort(port.id);
    expect(activeBindings(p)).toHaveLength(1);
    expect(p.bindingHostId).toBe(activeBindings(p)[0]);
    await deletePortsOf(port.deviceId);
  });
});
