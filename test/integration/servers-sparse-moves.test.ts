/**
 * Sparse moves of a server (issue 17): a 1 GiB root disk with 4 KiB written at 0, 300 MiB and
 * 900 MiB is moved by every flow of the local compute driver that carries its disk — live
 * migration, cold migration + confirm, evacuation, shelve-offload + unshelve, cross-cell resize +
 * confirm — and after each the guest reads the same bytes, its disk is sparse (a few MiB allocated),
 * and what the move copied (localCopyStats) and stored as image data (imageBytesStored) is counted
 * and a few MiB, not the 900 MiB up to the last data. The shelved image is what a user downloading
 * it gets: a qcow2 image (qemu-img checks it) whose bytes match the checksum Glance shows.
 */
import { createHash } from 'node:crypto';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { LocalComputeDriver, localCopyStats, resetLocalCopyStats, setHostDown } from '../../functions/drivers/compute/local.js';
import { nodeOfHost } from '../../functions/servers/engine.js';
import { cleanupEvacuatedGuests } from '../../functions/servers/flows/evacuate/host-restart.js';
import '../../functions/servers/flows/shelve/api.js';
import { getImage, imageBytesStored, resetImageBytesStored } from '../../functions/servers/images.js';
import { allowCrossCell, driverOf, LONG } from '../support/cross-cell.js';
import { action, assertCleanAudit, bootServer, novaClient, patternBytes, serverState, settled, type Nova } from '../support/nova.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const MIB = 1024 * 1024;
const GIB = 1024 * MIB;
/** Where the guest writes 4 KiB each: its first block, the middle, near the end. */
const SCATTERED = [0, 300 * MIB, 900 * MIB];
const PIECE = 4096;
/** What a move of this disk may copy or store: the image (256 KiB) and the pieces, in 64 KiB clusters, and qcow2's tables. */
const BOUND = 8 * MIB;
const execFileP = promisify(execFile);

let stack: TestLocalStack;
let nova: Nova;
let restorePolicy: () => void;
let tmp: string;

beforeAll(async () => {
  restorePolicy = allowCrossCell();
  stack = await useLocalStack();
  nova = novaClient(stack);
  tmp = await mkdtemp(join(tmpdir(), 'ferry-sparse-moves-'));
}, 120_000);
afterAll(async () => {
  restorePolicy?.();
  await stack?.stop();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

const piece = (id: string, at: number) => patternBytes(`${id}@${at}`, PIECE);
const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

async function writeScattered(id: string): Promise<void> {
  const handle = await (await driverOf((await serverState(id)).instance.host!)).openGuestDevice(id, '/dev/vda');
  try {
    for (const at of SCATTERED) await handle.write(at, piece(id, at));
  } finally {
    await handle.close();
  }
}

/** The guest reads every piece back where it is now, and its root disk is 1 GiB with few blocks allocated. */
async function expectScatteredBytes(id: string, move: string): Promise<string> {
  const host = (await serverState(id)).instance.host!;
  const driver = await driverOf(host);
  const handle = await driver.openGuestDevice(id, '/dev/vda');
  try {
    for (const at of SCATTERED) expect(sha(await handle.read(at, PIECE)), `${move}: bytes at ${at} on ${host}`).toBe(sha(piece(id, at)));
  } finally {
    await handle.close();
  }
  const disk = await stat(join((driver as LocalComputeDriver).dir, 'guests', id, 'disk'));
  expect(disk.size, `${move}: root disk size`).toBe(GIB);
  expect(disk.blocks * 512, `${move}: blocks allocated on ${host}`).toBeLessThan(BOUND);
  return host;
}

/** Runs a move and returns what it copied and stored. */
async function counted(move: () => Promise<void>): Promise<{ read: number; written: number; stored: number }> {
  resetLocalCopyStats();
  resetImageBytesStored();
  await move();
  const { readBytes, writtenBytes } = localCopyStats();
  return { read: readBytes, written: writtenBytes, stored: imageBytesStored() };
}

const expectBounded = (move: string, c: { read: number; written: number; stored: number }) => {
  expect(c.read, `${move}: bytes read`).toBeLessThan(BOUND);
  expect(c.written, `${move}: bytes written`).toBeLessThan(BOUND);
  expect(c.stored, `${move}: image bytes stored`).toBeLessThan(BOUND);
};

async function settledAs(id: string, status: string): Promise<void> {
  const s = await settled(nova, id, LONG);
  expect(s.status, JSON.stringify(s.fault ?? s)).toBe(status);
}

async function setComputeDown(host: string, down: boolean): Promise<void> {
  const svc = (await nova('GET', `/os-services?host=${host}&binary=nova-compute`, { version: '2.53' })).body.services[0];
  expect((await nova('PUT', `/os-services/${svc.id}`, { version: '2.53', body: { forced_down: down } })).status).toBe(200);
  await setHostDown((await nodeOfHost(host)).node.config, down);
}

/** A user's download of the image (Glance v2): its bytes, which must match the checksum shown. */
async function downloadImage(imageId: string): Promise<Buffer> {
  const headers = { 'X-Auth-Token': 'admin:admin' };
  const shown = (await (await fetch(`${stack.url}/image/v2/images/${imageId}`, { headers })).json()) as { checksum: string; os_hash_value: string; disk_format: string; size: number };
  const res = await fetch(`${stack.url}/image/v2/images/${imageId}/file`, { headers });
  expect(res.status).toBe(200);
  const bytes = Buffer.from(await res.arrayBuffer());
  expect(shown).toMatchObject({ disk_format: 'qcow2', size: bytes.length, checksum: createHash('md5').update(bytes).digest('hex'), os_hash_value: createHash('sha512').update(bytes).digest('hex') });
  return bytes;
}

test('every move of a server with data at 0, 300 MiB and 900 MiB of its 1 GiB disk copies only the data and reads the same bytes back', { timeout: 900_000 }, async () => {
  // Prepare
  const id = await bootServer(nova, { name: 'sparse', host: 'cmp1', flavor: '1' });
  await writeScattered(id);
  await expectScatteredBytes(id, 'boot');

  // Act + assess, move by move.
  const live = await counted(async () => {
    await action(nova, id, { 'os-migrateLive': { host: null, block_migration: 'auto' } });
    await settledAs(id, 'ACTIVE');
  });
  expect(await expectScatteredBytes(id, 'live migration')).toBe('cmp2');
  expectBounded('live migration', live);

  const cold = await counted(async () => {
    await action(nova, id, { migrate: null });
    await settledAs(id, 'VERIFY_RESIZE');
    await action(nova, id, { confirmResize: null }, 204);
    await settledAs(id, 'ACTIVE');
  });
  expect(await expectScatteredBytes(id, 'cold migration')).toBe('cmp1');
  expectBounded('cold migration', cold);

  const evacuated = await counted(async () => {
    await setComputeDown('cmp1', true);
    try {
      await action(nova, id, { evacuate: {} }, 200);
      await settledAs(id, 'ACTIVE');
    } finally {
      await setComputeDown('cmp1', false);
    }
    expect(await cleanupEvacuatedGuests('cmp1')).toEqual([id]);
  });
  expect(await expectScatteredBytes(id, 'evacuation')).toBe('cmp2');
  expectBounded('evacuation', evacuated);

  const shelve = await counted(async () => {
    await action(nova, id, { shelve: null });
    await settledAs(id, 'SHELVED_OFFLOADED');
  });
  expectBounded('shelve', shelve);
  const imageId = (await serverState(id)).instance.systemMetadata.shelved_image_id!;
  expect(await getImage(imageId)).toMatchObject({ diskFormat: 'qcow2', status: 'active' });
  const imageFile = join(tmp, 'shelved.qcow2');
  await writeFile(imageFile, await downloadImage(imageId));
  await execFileP('qemu-img', ['check', '-q', '-f', 'qcow2', imageFile]);
  const info = JSON.parse((await execFileP('qemu-img', ['info', '-f', 'qcow2', '--output=json', imageFile])).stdout) as { 'virtual-size': number };
  expect(info['virtual-size']).toBe(GIB);

  const unshelve = await counted(async () => {
    await action(nova, id, { unshelve: null });
    await settledAs(id, 'ACTIVE');
  });
  await expectScatteredBytes(id, 'unshelve');
  expectBounded('unshelve', unshelve);

  const crossCell = await counted(async () => {
    await action(nova, id, { resize: { flavorRef: '3' } });
    await settledAs(id, 'VERIFY_RESIZE');
    await action(nova, id, { confirmResize: null }, 204);
    await settledAs(id, 'ACTIVE');
  });
  expect(await expectScatteredBytes(id, 'cross-cell resize')).toMatch(/^cmp[34]$/);
  expectBounded('cross-cell resize', crossCell);
  expect(crossCell.stored, 'the cross-cell snapshot was stored').toBeGreaterThan(0);

  // Cleanup
  await nova('DELETE', `/servers/${id}`);
  await settledAs(id, 'DELETED');
  await assertCleanAudit();
});
