/**
 * Every disk move of the local compute driver on a 1 GiB sparse root disk with data scattered at
 * its start, middle and end (issue 17): the destination reads the same bytes, keeps the holes
 * (few blocks allocated), and the move reads about the data, not the device.
 */
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, openSync, writeSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, open, readFile, rm, stat, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ComputeHostConfig, Flavor, ImageSource } from '../../functions/drivers/compute/driver.js';
import { GIB, LocalComputeDriver, localCopyStats, resetLocalCopyStats, setHostDown } from '../../functions/drivers/compute/local.js';
import { SETTLED_MS } from '../../functions/drivers/compute/local/files.js';
import { dataExtents, extentBytes, unionExtents, type DataExtent } from '../../functions/drivers/sparse.js';
import { writeDevice } from '../contracts/compute-driver.js';

const UUID_A = '5a5a5a5a-0000-4000-8000-00000000000a';
const ONE_GIB: Flavor = { vcpus: 1, memoryMb: 512, rootGb: 1 };
const MIB = 1024 * 1024;
const CHUNK = 8 * MIB;
const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
/** Offsets the guest writes at, beyond its image at 0. */
const SCATTERED = [300 * MIB + 7, 512 * MIB, GIB - 4096];
const execFileP = promisify(execFile);

let tmp: string;
let root: string;
let cmp1: LocalComputeDriver;
let cmp2: LocalComputeDriver;
let cfg1: ComputeHostConfig;

const hostConfig = (host: string): ComputeHostConfig => ({ host, driver: 'local', root, vcpus: 8, memoryMb: 16384, diskGb: 200 });
const diskPath = (host: string, uuid = UUID_A) => join(root, host, 'guests', uuid, 'disk');

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'ferry-compute-sparse-moves-'));
  root = join(tmp, 'compute');
  cfg1 = hostConfig('cmp1');
  cmp1 = new LocalComputeDriver(cfg1);
  cmp2 = new LocalComputeDriver(hostConfig('cmp2'));
  await cmp2.getHostInfo();
});

afterEach(async () => {
  await rm(tmp, { recursive: true, force: true });
});

/** A 1 GiB guest on cmp1: a 64 KiB image at 0, then 4 KiB written at each scattered offset. */
async function scatteredGuest(): Promise<void> {
  await cmp1.spawn({ uuid: UUID_A, flavor: ONE_GIB, image: { data: randomBytes(64 * 1024) } });
  for (const pos of SCATTERED) await writeDevice(cmp1, UUID_A, '/dev/vda', pos, randomBytes(4096));
}

/**
 * Reading 1 GiB of holes costs seconds on a busy host, so the disks are compared where either holds
 * data (SEEK_DATA, checked against known writes by compute-driver-sparse.test.ts): everywhere else
 * both are holes, which read as zeros.
 */
async function expectSameSparseDisk(dst: string, src: string): Promise<void> {
  const [d, s] = [await stat(dst), await stat(src)];
  expect(d.size).toBe(GIB);
  expect(d.size).toBe(s.size);
  expect(d.blocks).toBeLessThanOrEqual(s.blocks);
  expect(d.blocks * 512).toBeLessThan(MIB);
  const ranges = unionExtents(await dataExtents(src, GIB), await dataExtents(dst, GIB));
  for (const pos of [0, ...SCATTERED]) expect(ranges.some((e) => e.offset <= pos && pos < e.offset + e.length)).toBe(true);
  expect(extentBytes(ranges)).toBeLessThan(MIB);
  for (const e of ranges) expect(sha(await readRange(dst, e)), `bytes at ${e.offset}`).toBe(sha(await readRange(src, e)));
}

async function readRange(path: string, e: DataExtent): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(e.length);
    await fh.read(buf, 0, e.length, e.offset);
    return buf;
  } finally {
    await fh.close();
  }
}

/** Checks a raw stream against a sparse file: its data where the file has extents, zeros elsewhere. */
async function expectStreamOf(stream: AsyncIterable<unknown>, path: string): Promise<void> {
  const extents = await dataExtents(path, GIB);
  let pos = 0;
  let zeros = Buffer.alloc(0);
  for await (const c of stream) {
    const chunk = c as Buffer;
    if (zeros.length < chunk.length) zeros = Buffer.alloc(chunk.length);
    const overlapping = extents.filter((e) => e.offset < pos + chunk.length && pos < e.offset + e.length);
    // Most of the stream is holes: compared with zeros, without allocating per chunk.
    let want = zeros.subarray(0, chunk.length);
    if (overlapping.length > 0) {
      want = Buffer.alloc(chunk.length);
      for (const e of overlapping) {
        const from = Math.max(e.offset, pos);
        const to = Math.min(e.offset + e.length, pos + chunk.length);
        (await readRange(path, { offset: from, length: to - from })).copy(want, from - pos);
      }
    }
    expect(chunk.equals(want), `stream bytes at ${pos}`).toBe(true);
    pos += chunk.length;
  }
  expect(pos).toBe(GIB);
}

async function drain(stream: AsyncIterable<unknown>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** The host's files other than its own records (guests, snapshots, incoming). */
const filesOf = async (driver: LocalComputeDriver) => (await driver.listFiles()).filter((f) => /^(guests|snapshots|incoming)\//.test(f));

/** An empty qcow2 image of `virtualBytes`. */
async function qcow2Of(virtualBytes: number): Promise<Buffer> {
  const path = join(tmp, `empty-${virtualBytes}.qcow2`);
  await execFileP('qemu-img', ['create', '-q', '-f', 'qcow2', path, String(virtualBytes)]);
  return readFile(path);
}

/** A move reads about what the disk holds (image + scattered writes, block-rounded), not the 1 GiB. */
const expectReadOnlyTheData = (factor = 1) => expect(localCopyStats().readBytes).toBeLessThan(factor * MIB);

describe('sparse moves of a 1 GiB disk', () => {
  it('cold migration copies only the data; the arrived disk is the source', async () => {
    // Prepare
    await scatteredGuest();
    resetLocalCopyStats();

    // Act
    await cmp1.migrateDiskAndPowerOff(UUID_A, 'cmp2', ONE_GIB);
    await cmp2.finishMigration({ uuid: UUID_A, flavor: ONE_GIB }, 'cmp1');

    // Assess
    expectReadOnlyTheData();
    await expectSameSparseDisk(diskPath('cmp2'), diskPath('cmp1'));
  });

  it('live migration: a guest writing during the pre-copy (in a hole, over data) ends identical', async () => {
    // Prepare
    await scatteredGuest();
    await cmp2.preLiveMigration({ uuid: UUID_A, flavor: ONE_GIB }, 'cmp1');
    const fd = openSync(diskPath('cmp1'), 'r+');
    let dirtied = false;
    resetLocalCopyStats();

    // Act: after the first chunk, the guest writes into a hole, over copied data and over data not yet copied.
    try {
      await cmp1.liveMigration(UUID_A, 'cmp2', {
        chunkBytes: CHUNK,
        onProgress: () => {
          if (dirtied) return;
          dirtied = true;
          writeSync(fd, randomBytes(5000), 0, 5000, 700 * MIB);
          writeSync(fd, randomBytes(100), 0, 100, 10);
          writeSync(fd, randomBytes(100), 0, 100, SCATTERED[1]!);
        },
      });
    } finally {
      // Flushed, so that the source's blocks count what the guest wrote (delayed allocation).
      fsyncSync(fd);
      closeSync(fd);
    }

    // Assess: the source's disk is kept until post_live_migration.
    expect(dirtied).toBe(true);
    expectReadOnlyTheData(2);
    await expectSameSparseDisk(diskPath('cmp2'), diskPath('cmp1'));
  });

  it('live migration of a disk left alone since before it: the stop-and-copy reads nothing again', async () => {
    // Prepare: the disk's last write SETTLED_MS and more before the migration starts.
    await scatteredGuest();
    await cmp2.preLiveMigration({ uuid: UUID_A, flavor: ONE_GIB }, 'cmp1');
    await new Promise((r) => setTimeout(r, SETTLED_MS + 100));
    resetLocalCopyStats();

    // Act
    await cmp1.liveMigration(UUID_A, 'cmp2', { chunkBytes: CHUNK });

    // Assess: one pass over the data (the pre-copy), not a second over both disks.
    const onePass = localCopyStats().readBytes;
    expect(onePass).toBeLessThan(MIB);
    expect(onePass).toBe(extentBytes(await dataExtents(diskPath('cmp1'), GIB)));
    await expectSameSparseDisk(diskPath('cmp2'), diskPath('cmp1'));
  });

  it('live migration of a disk left alone, then written during the pre-copy: the change is copied', async () => {
    // Prepare
    await scatteredGuest();
    await cmp2.preLiveMigration({ uuid: UUID_A, flavor: ONE_GIB }, 'cmp1');
    await new Promise((r) => setTimeout(r, SETTLED_MS + 100));
    let dirtied = false;

    // Act: one write over data the pre-copy has read already (its first chunk).
    await cmp1.liveMigration(UUID_A, 'cmp2', {
      chunkBytes: CHUNK,
      onProgress: () => {
        if (dirtied) return;
        dirtied = true;
        const fd = openSync(diskPath('cmp1'), 'r+');
        writeSync(fd, randomBytes(100), 0, 100, 10);
        closeSync(fd);
      },
    });

    // Assess
    expect(dirtied).toBe(true);
    await expectSameSparseDisk(diskPath('cmp2'), diskPath('cmp1'));
  });

  it('evacuation copies only the data from the down host', async () => {
    // Prepare
    await scatteredGuest();
    await setHostDown(cfg1, true);
    resetLocalCopyStats();

    // Act
    await cmp2.spawnEvacuated({ uuid: UUID_A, flavor: ONE_GIB }, { host: 'cmp1' });

    // Assess
    expectReadOnlyTheData();
    await expectSameSparseDisk(diskPath('cmp2'), diskPath('cmp1'));
  });

  it('a snapshot streams the raw 1 GiB with its extents, reading only the data', async () => {
    // Prepare
    await scatteredGuest();
    resetLocalCopyStats();

    // Act
    const snap = await cmp1.snapshot(UUID_A, 'image-1');

    // Assess
    expectReadOnlyTheData();
    expect(snap.sizeBytes).toBe(GIB);
    for (const pos of [0, ...SCATTERED]) expect(snap.extents!.some((e) => e.offset <= pos && pos < e.offset + e.length)).toBe(true);
    await expectStreamOf(snap.stream, diskPath('cmp1'));
  });

  it('a qcow2 snapshot holds only the data; a guest spawned from it has the same sparse disk', async () => {
    // Prepare
    await scatteredGuest();
    resetLocalCopyStats();

    // Act
    const snap = await cmp1.snapshot(UUID_A, 'image-1', { diskFormat: 'qcow2' });
    const image = await drain(snap.stream);
    await cmp2.spawn({ uuid: UUID_A, flavor: ONE_GIB, image: { data: image, diskFormat: 'qcow2' } });

    // Assess: the image is the data (64 KiB + 3 x 4 KiB in 64 KiB clusters) and qcow2's tables, not the 1 GiB.
    expect(snap).toMatchObject({ diskFormat: 'qcow2', sizeBytes: GIB, imageBytes: image.length });
    expect(image.subarray(0, 4).toString('latin1')).toBe('QFI\xfb');
    expect(image.length).toBeLessThan(MIB);
    expect(localCopyStats().readBytes).toBeLessThan(2 * MIB);
    expect(localCopyStats().writtenBytes).toBeLessThan(2 * MIB);
    await expectSameSparseDisk(diskPath('cmp2'), diskPath('cmp1'));
    expect((await filesOf(cmp1)).filter((f) => f.startsWith('snapshots/'))).toEqual([]);
  });

  it('a qcow2 image that is not one, has a backing file or is larger than the flavor is refused, leaving nothing', async () => {
    // Prepare: an image pointing at a file of the host (its backing file), and one of 2 GiB.
    await scatteredGuest();
    const backed = join(tmp, 'backed.qcow2');
    await execFileP('qemu-img', ['create', '-q', '-f', 'qcow2', '-F', 'raw', '-b', diskPath('cmp1'), backed]);
    const twoGib = await qcow2Of(2 * GIB);

    // Act
    const spawnFrom = (image: ImageSource) => cmp2.spawn({ uuid: UUID_A, flavor: ONE_GIB, image });
    const refusals = [
      await spawnFrom({ path: backed, diskFormat: 'qcow2' }).catch((e: Error) => e.message),
      await spawnFrom({ data: randomBytes(4096), diskFormat: 'qcow2' }).catch((e: Error) => e.message),
      await spawnFrom({ data: twoGib, diskFormat: 'qcow2' }).catch((e: Error) => e.message),
    ];

    // Assess
    expect(refusals[0]).toMatch(/has a backing file/);
    expect(refusals[1]).toMatch(/not in qcow2 format/);
    expect(refusals[2]).toMatch(/virtual size 2147483648 bytes is larger than the 1073741824 bytes allowed/);
    expect(await filesOf(cmp2)).toEqual([]);
  });

  it('a qcow2 snapshot needs no qemu-img; a spawn from it without qemu-img fails saying what to install, and leaves nothing', async () => {
    // Prepare: a PATH with perl (the data extents' helper) and no qemu-img.
    await scatteredGuest();
    const bin = join(tmp, 'bin');
    await mkdir(bin);
    await symlink('/usr/bin/perl', join(bin, 'perl'));
    const path = process.env.PATH;
    process.env.PATH = bin;

    // Act
    let spawned: string;
    let image: Buffer;
    try {
      const snap = await cmp1.snapshot(UUID_A, 'image-1', { diskFormat: 'qcow2' });
      image = await drain(snap.stream);
      spawned = await cmp2.spawn({ uuid: UUID_A, flavor: ONE_GIB, image: { data: image, diskFormat: 'qcow2' } }).then(
        () => 'succeeded',
        (e: Error) => e.message,
      );
    } finally {
      process.env.PATH = path;
    }

    // Assess
    expect(image.subarray(0, 4).toString('latin1')).toBe('QFI\xfb');
    expect(spawned).toMatch(/qemu-img is not installed.*apt-get install qemu-utils/);
    expect((await filesOf(cmp1)).filter((f) => !f.startsWith('guests/'))).toEqual([]);
    expect(await filesOf(cmp2)).toEqual([]);
  });

  it('a root disk handle tells its data extents (what a volume swap copies)', async () => {
    // Prepare
    await scatteredGuest();
    const handle = await cmp1.openGuestDevice(UUID_A, '/dev/vda');

    // Act
    const extents = await handle.dataExtents!().finally(() => handle.close());

    // Assess
    for (const pos of [0, ...SCATTERED]) expect(extents.some((e) => e.offset <= pos && pos + 1 <= e.offset + e.length)).toBe(true);
    expect(extents.reduce((n, e) => n + e.length, 0)).toBeLessThan(MIB);
  });
});
