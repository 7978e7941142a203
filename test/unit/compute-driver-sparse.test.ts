/**
 * Sparse-aware copies of the local compute driver (issue 17): only the data extents of a disk are
 * read (lseek SEEK_DATA/SEEK_HOLE), holes stay holes at the destination, and what arrives is byte
 * for byte the source (content hash) with no more blocks allocated than the source has.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdtemp, open, rm, stat, truncate } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { copyBlockData } from '../../functions/drivers/compute/block-copy.js';
import { snapshotDataStream } from '../../functions/drivers/compute/snapshot-data.js';
import { sparseCopy, syncChangedChunks } from '../../functions/drivers/compute/local/files.js';
import { sparseFileStream } from '../../functions/drivers/compute/local/sparse-stream.js';
import { dataExtents, extentBytes, type DataExtent } from '../../functions/drivers/sparse.js';

const MIB = 1024 * 1024;
const SIZE = 64 * MIB;
/** Data at the start, in the middle and at the very end, holes between. */
const WRITES: [number, number][] = [
  [0, 100 * 1024],
  [32 * MIB + 12_345, 10_000],
  [SIZE - 5000, 5000],
];

let tmp: string;

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'ferry-compute-sparse-'));
});

afterEach(async () => {
  vi.restoreAllMocks();
  await rm(tmp, { recursive: true, force: true });
});

async function writeAt(path: string, pos: number, data: Buffer): Promise<void> {
  const fh = await open(path, 'r+');
  try {
    await fh.write(data, 0, data.length, pos);
  } finally {
    await fh.close();
  }
}

/** A sparse file of `size` bytes with random data at `writes`. */
async function sparseFile(name: string, size: number, writes: [number, number][]): Promise<string> {
  const path = join(tmp, name);
  await (await open(path, 'wx')).close();
  await truncate(path, size);
  for (const [pos, len] of writes) await writeAt(path, pos, randomBytes(len));
  return path;
}

async function sha256(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const c of createReadStream(path, { highWaterMark: 8 * MIB })) h.update(c as Buffer);
  return h.digest('hex');
}

const allocated = async (path: string) => (await stat(path)).blocks * 512;

const covers = (extents: DataExtent[], pos: number, len: number) => extents.some((e) => e.offset <= pos && pos + len <= e.offset + e.length);

describe('data extents', () => {
  it('finds the data at the start, middle and end of a sparse file, and none in an all-hole file', async () => {
    // Prepare
    const path = await sparseFile('disk', SIZE, WRITES);
    const empty = await sparseFile('empty', SIZE, []);

    // Act
    const extents = await dataExtents(path, SIZE);

    // Assess
    for (const [pos, len] of WRITES) expect(covers(extents, pos, len)).toBe(true);
    expect(extentBytes(extents)).toBeLessThan(MIB);
    expect(extents.at(-1)!.offset + extents.at(-1)!.length).toBe(SIZE);
    expect(await dataExtents(empty, SIZE)).toEqual([]);
    expect(await dataExtents(empty, 0)).toEqual([]);
  });

  it('counts the whole file as data when perl cannot be run (the copy is only slower)', async () => {
    // Prepare
    const path = await sparseFile('disk', 8 * MIB, [[MIB, 10]]);
    const PATH = process.env.PATH;

    // Act
    process.env.PATH = join(tmp, 'no-such-bin');
    let extents: DataExtent[];
    let copy: Awaited<ReturnType<typeof sparseCopy>>;
    try {
      extents = await dataExtents(path, 8 * MIB);
      copy = await sparseCopy(path, join(tmp, 'copy'));
    } finally {
      process.env.PATH = PATH;
    }

    // Assess
    expect(extents).toEqual([{ offset: 0, length: 8 * MIB }]);
    expect(copy.readBytes).toBe(8 * MIB);
    expect(copy.writtenBytes).toBe(MIB);
    expect(await sha256(join(tmp, 'copy'))).toBe(await sha256(path));
    expect(await allocated(join(tmp, 'copy'))).toBeLessThanOrEqual(MIB);
  });
});

describe('sparse copy', () => {
  it('copies data at the start, middle and end byte-identical, holes kept, reading only the data', async () => {
    // Prepare
    const src = await sparseFile('disk', SIZE, WRITES);
    const dst = join(tmp, 'copy');

    // Act
    const result = await sparseCopy(src, dst);

    // Assess
    expect(await sha256(dst)).toBe(await sha256(src));
    expect((await stat(dst)).size).toBe(SIZE);
    expect(await allocated(dst)).toBeLessThanOrEqual(await allocated(src));
    expect(await allocated(dst)).toBeLessThan(MIB);
    expect(result.sizeBytes).toBe(SIZE);
    expect(result.readBytes).toBeLessThan(MIB);
    expect(result.writtenBytes).toBeLessThanOrEqual(result.readBytes);
    for (const [pos, len] of WRITES) expect(covers(result.extents, pos, len)).toBe(true);
  });

  it('copies an all-hole disk without reading or writing a byte', async () => {
    // Prepare
    const src = await sparseFile('disk', 1024 * MIB, []);
    const dst = join(tmp, 'copy');
    const progress: number[] = [];

    // Act
    const result = await sparseCopy(src, dst, { onChunk: (done) => progress.push(done) });

    // Assess
    expect(result).toEqual({ sizeBytes: 1024 * MIB, readBytes: 0, writtenBytes: 0, extents: [] });
    expect((await stat(dst)).size).toBe(1024 * MIB);
    expect(await allocated(dst)).toBe(0);
    expect(progress).toEqual([1024 * MIB]);
  });

  it('reports strictly increasing progress across data and holes, ending at the size', async () => {
    // Prepare
    const src = await sparseFile('disk', SIZE, WRITES);
    const progress: number[] = [];

    // Act
    await sparseCopy(src, join(tmp, 'copy'), { chunkBytes: 16 * 1024, onChunk: (done, total) => progress.push(done / total) });

    // Assess
    expect(progress.length).toBeGreaterThan(WRITES.length);
    for (let i = 1; i < progress.length; i++) expect(progress[i]).toBeGreaterThan(progress[i - 1]!);
    expect(progress.at(-1)).toBe(1);
  });
});

describe('stop-and-copy (changed chunks)', () => {
  it('ends identical to a source written after the pre-copy: in a hole, over data, data zeroed, data gone to a hole', async () => {
    // Prepare: the pre-copy, then the guest writes; its last MiB becomes a hole where the copy has data.
    const src = await sparseFile('disk', SIZE, WRITES);
    const dst = join(tmp, 'copy');
    await sparseCopy(src, dst);
    await writeAt(src, 48 * MIB, randomBytes(3000));
    await writeAt(src, 10, randomBytes(20));
    await writeAt(src, WRITES[1]![0], Buffer.alloc(WRITES[1]![1]));
    await truncate(src, SIZE - MIB);
    await truncate(src, SIZE);

    // Act
    const written = await syncChangedChunks(src, dst, 64 * 1024);

    // Assess
    expect(await sha256(dst)).toBe(await sha256(src));
    expect(written).toBeGreaterThan(0);
    expect(written).toBeLessThanOrEqual(3 * 64 * 1024);
    expect(await allocated(dst)).toBeLessThan(MIB);
    expect(await syncChangedChunks(src, dst, 64 * 1024)).toBe(0);
  });
});

describe('stop-and-copy fsyncs', () => {
  it('fsyncs once after a pass that wrote, and not at all after a pass that found nothing changed', async () => {
    // Prepare: a durable pre-copy; then every fsync of the process counted.
    const src = await sparseFile('disk', SIZE, WRITES);
    const dst = join(tmp, 'copy');
    await sparseCopy(src, dst);
    const probe = await open(src, 'r');
    const proto = Object.getPrototypeOf(probe) as { sync(): Promise<void> };
    await probe.close();
    const sync = vi.spyOn(proto, 'sync');

    // Act
    const unchanged = await syncChangedChunks(src, dst, 64 * 1024);
    const syncsUnchanged = sync.mock.calls.length;
    await writeAt(src, 10, randomBytes(20));
    const changed = await syncChangedChunks(src, dst, 64 * 1024);

    // Assess
    expect(unchanged).toBe(0);
    expect(syncsUnchanged).toBe(0);
    expect(changed).toBe(64 * 1024);
    expect(sync.mock.calls.length).toBe(1);
    expect(await sha256(dst)).toBe(await sha256(src));
  });
});

describe('streams and block copies', () => {
  it('streams a sparse copy as raw bytes, holes as zeros, and closes the file', async () => {
    // Prepare
    const src = await sparseFile('disk', SIZE, WRITES);
    const copy = await sparseCopy(src, join(tmp, 'copy'));
    const fh = await open(join(tmp, 'copy'), 'r');

    // Act
    const h = createHash('sha256');
    let length = 0;
    for await (const c of sparseFileStream(fh, copy.sizeBytes, copy.extents)) {
      h.update(c as Buffer);
      length += (c as Buffer).length;
    }

    // Assess
    expect(length).toBe(SIZE);
    expect(h.digest('hex')).toBe(await sha256(src));
    await expect(fh.stat()).rejects.toThrow();
  });

  it('a stream destroyed before any read closes its file', async () => {
    // Prepare
    const src = await sparseFile('disk', SIZE, WRITES);
    const fh = await open(src, 'r');
    const stream = sparseFileStream(fh, SIZE, await dataExtents(src, SIZE));

    // Act
    stream.destroy();
    await new Promise((resolve) => stream.once('close', resolve));

    // Assess
    await expect(fh.stat()).rejects.toThrow();
  });

  it('a snapshot cut at its last data extent yields the data prefix and closes the file', async () => {
    // Prepare: data only in the first 100 KiB of 64 MiB.
    const src = await sparseFile('disk', SIZE, [WRITES[0]!]);
    const copy = await sparseCopy(src, join(tmp, 'copy'));
    const fh = await open(join(tmp, 'copy'), 'r');
    const stream = sparseFileStream(fh, copy.sizeBytes, copy.extents);

    // Act
    const chunks: Buffer[] = [];
    for await (const c of snapshotDataStream({ imageId: 'i', sizeBytes: copy.sizeBytes, diskFormat: 'raw', imageBytes: copy.sizeBytes, extents: copy.extents, stream })) chunks.push(c as Buffer);
    await new Promise((resolve) => (stream.closed ? resolve(undefined) : stream.once('close', resolve)));

    // Assess
    const prefix = Buffer.concat(chunks);
    expect(prefix.length).toBe(100 * 1024);
    const whole = await open(src, 'r');
    const want = Buffer.alloc(prefix.length);
    await whole.read(want, 0, want.length, 0);
    await whole.close();
    expect(prefix.equals(want)).toBe(true);
    await expect(fh.stat()).rejects.toThrow();
  });

  it('copies between block handles only where the source holds data', async () => {
    // Prepare
    const src = await sparseFile('from', SIZE, WRITES);
    const dst = await sparseFile('to', SIZE, []);
    const reads: number[] = [];
    const from = await open(src, 'r');
    const to = await open(dst, 'r+');
    try {
      const handleFrom = {
        sizeBytes: SIZE,
        read: async (p: number, n: number) => {
          reads.push(n);
          const b = Buffer.alloc(n);
          await from.read(b, 0, n, p);
          return b;
        },
        dataExtents: () => dataExtents(src, SIZE),
      };
      const handleTo = { sizeBytes: SIZE, write: async (p: number, d: Uint8Array) => void (await to.write(d, 0, d.length, p)) };

      // Act
      const result = await copyBlockData(handleFrom, handleTo);

      // Assess
      expect(result.readBytes).toBe(reads.reduce((a, b) => a + b, 0));
      expect(result.readBytes).toBeLessThan(MIB);
    } finally {
      await from.close();
      await to.close();
    }
    expect(await sha256(dst)).toBe(await sha256(src));
    expect(await allocated(dst)).toBeLessThan(MIB);
  });
});
