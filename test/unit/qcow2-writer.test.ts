/**
 * The qcow2 images Ferry writes itself (functions/drivers/qcow2-writer.ts) are what qemu-img, the
 * format's reference implementation, reads: `qemu-img check` finds no error or leak, `qemu-img
 * compare` finds the same bytes as the raw disk, and only the clusters that hold data are stored.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdtemp, open, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QCOW2_CLUSTER_BYTES, qcow2Layout, qcow2Stream } from '../../functions/drivers/qcow2-writer.js';
import { dataExtents } from '../../functions/drivers/sparse.js';

const execFileP = promisify(execFile);
const MIB = 1024 * 1024;
const GIB = 1024 * MIB;

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'ferry-qcow2-writer-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

/** A sparse raw disk of `size` with `writes` (offset, length) of random bytes. */
async function rawDisk(name: string, size: number, writes: [number, number][]): Promise<string> {
  const path = join(tmp, `${name}.raw`);
  await writeFile(path, '');
  await truncate(path, size);
  const fh = await open(path, 'r+');
  try {
    for (const [offset, length] of writes) await fh.write(randomBytes(length), 0, length, offset);
  } finally {
    await fh.close();
  }
  return path;
}

/** The disk written as qcow2 by the writer; its layout and path. */
async function imageOf(raw: string): Promise<{ path: string; imageBytes: number; dataClusters: number }> {
  const size = (await stat(raw)).size;
  const fh = await open(raw, 'r');
  const { layout, stream } = qcow2Stream(fh, size, await dataExtents(raw, size));
  const path = raw.replace(/\.raw$/, '.qcow2');
  await pipeline(stream, createWriteStream(path));
  return { path, imageBytes: layout.imageBytes, dataClusters: layout.dataClusters };
}

const qemuImg = async (...args: string[]) => (await execFileP('qemu-img', args)).stdout;

describe('qcow2 writer', () => {
  it.each([
    ['1 GiB holding 10 MiB scattered (the bench server)', GIB, Array.from({ length: 10 }, (_, k): [number, number] => [k * 100 * MIB, MIB])],
    ['unaligned writes across clusters and L2 tables, the last byte of the disk', GIB, [[7, 10], [512 * MIB - 3, 9], [GIB - 1, 1]] as [number, number][]],
    ['an empty disk', GIB, [] as [number, number][]],
    ['a disk that is not a whole number of clusters, written to its end', 3 * MIB + 4096, [[3 * MIB, 4096]] as [number, number][]],
    ['a fully written small disk', 2 * MIB, [[0, 2 * MIB]] as [number, number][]],
  ])('%s: qemu-img checks it clean and reads the same bytes', async (name, size, writes) => {
    // Prepare
    const raw = await rawDisk(name.replace(/\W+/g, '-'), size, writes);

    // Act
    const image = await imageOf(raw);

    // Assess: the stream is as long as announced; qemu-img finds no error, the same bytes, the size.
    expect((await stat(image.path)).size).toBe(image.imageBytes);
    const check = JSON.parse(await qemuImg('check', '--output=json', '-f', 'qcow2', image.path)) as Record<string, unknown>;
    expect(check).toMatchObject({ format: 'qcow2', 'check-errors': 0 });
    expect(check.leaks ?? 0).toBe(0);
    expect(check.corruptions ?? 0).toBe(0);
    await qemuImg('compare', '-f', 'raw', '-F', 'qcow2', raw, image.path);
    const info = JSON.parse(await qemuImg('info', '--output=json', '-f', 'qcow2', image.path)) as Record<string, unknown>;
    expect(info['virtual-size']).toBe(size);
    // Only the clusters the writes touch are stored.
    const touched = new Set(writes.flatMap(([o, l]) => Array.from({ length: Math.floor((o + l - 1) / QCOW2_CLUSTER_BYTES) - Math.floor(o / QCOW2_CLUSTER_BYTES) + 1 }, (_, k) => Math.floor(o / QCOW2_CLUSTER_BYTES) + k)));
    expect(image.dataClusters).toBe(touched.size);
  });

  it('plans one refcount block per 2 GiB of image and one L2 table per 512 MiB of data', () => {
    // Act: a 3 TiB disk whose every cluster holds data (planned only, nothing written).
    const layout = qcow2Layout(3 * 1024 * GIB, [{ offset: 0, length: 3 * 1024 * GIB }]);

    // Assess
    expect(layout.dataClusters).toBe((3 * 1024 * GIB) / QCOW2_CLUSTER_BYTES);
    expect(layout.l2Indexes.length).toBe(6 * 1024);
    expect(layout.refcountBlocks).toBe(Math.ceil(layout.totalClusters / 32768));
    expect(layout.refcountTableClusters).toBe(Math.ceil((layout.refcountBlocks * 8) / QCOW2_CLUSTER_BYTES));
    expect(layout.imageBytes).toBe(layout.totalClusters * QCOW2_CLUSTER_BYTES);
  });

  it('a stream destroyed before its first read closes the disk', async () => {
    // Prepare
    const raw = await rawDisk('destroyed', MIB, [[0, 4096]]);
    const fh = await open(raw, 'r');
    const { stream } = qcow2Stream(fh, MIB, [{ offset: 0, length: 4096 }]);

    // Act
    stream.destroy();
    await new Promise((r) => stream.once('close', r));

    // Assess: the handle is closed (a read on it fails).
    await expect(fh.read(Buffer.alloc(1), 0, 1, 0)).rejects.toThrow(/closed/);
  });
});
