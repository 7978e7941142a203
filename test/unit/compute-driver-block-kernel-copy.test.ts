/**
 * The swap's block copy of a fully written volume by the kernel (issue 17, "a fully written disk
 * moves at the machine's file copy speed"): between two files of the host, a source with no hole is
 * written into the existing destination with a ranged copy_file_range (functions/drivers/range-copy.ts),
 * no byte through the process; the destination keeps its inode and its size. A sparse source, or a
 * machine without the kernel copy, keeps the chunk loop (holes stay holes).
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, open, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { copyBlockData } from '../../functions/drivers/compute/block-copy.js';
import { FileBlockHandle } from '../../functions/drivers/compute/local/block-handle.js';
import { KERNEL_COPY_MIN_BYTES } from '../../functions/drivers/compute/local/files.js';
import { copyRangeInKernel } from '../../functions/drivers/range-copy.js';
import { dataExtents } from '../../functions/drivers/sparse.js';

const MIB = 1024 * 1024;
/** Just over the size from which a dense source is copied by the kernel. */
const DENSE_BYTES = KERNEL_COPY_MIN_BYTES + MIB;

let tmp: string;
const opened: FileBlockHandle[] = [];
beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'ferry-block-kernel-copy-'));
});
afterEach(async () => {
  vi.restoreAllMocks();
  for (const h of opened.splice(0)) await h.close();
  await rm(tmp, { recursive: true, force: true });
});

const sha = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/** A device handle on the file at `name`, as the local driver opens a volume (r+, its size now). */
async function handleOf(name: string): Promise<FileBlockHandle> {
  const path = join(tmp, name);
  const fh = await open(path, 'r+');
  const handle = new FileBlockHandle(fh, (await fh.stat()).size, name, path);
  opened.push(handle);
  return handle;
}

/** A new volume: a sparse file of `bytes`, all hole. */
async function emptyVolume(name: string, bytes: number): Promise<FileBlockHandle> {
  await writeFile(join(tmp, name), '');
  await truncate(join(tmp, name), bytes);
  return handleOf(name);
}

describe('copyBlockData of a fully written volume', () => {
  it('is copied by the kernel into the existing destination: same bytes, no read through the process, inode and size kept', async () => {
    // Prepare: the destination is larger than the source (a swap onto a bigger volume).
    const data = randomBytes(DENSE_BYTES);
    await writeFile(join(tmp, 'old'), data);
    const from = await handleOf('old');
    const to = await emptyVolume('new', DENSE_BYTES + 2 * MIB);
    const inode = (await stat(join(tmp, 'new'))).ino;
    const read = vi.spyOn(from, 'read');

    // Act
    const result = await copyBlockData(from, to);

    // Assess
    const copy = await readFile(join(tmp, 'new'));
    expect(result).toEqual({ readBytes: DENSE_BYTES, writtenBytes: DENSE_BYTES });
    expect(read.mock.calls.length).toBe(0);
    expect(sha(copy.subarray(0, DENSE_BYTES))).toBe(sha(data));
    expect(copy.length).toBe(DENSE_BYTES + 2 * MIB);
    expect(copy.subarray(DENSE_BYTES).equals(Buffer.alloc(2 * MIB))).toBe(true);
    expect((await stat(join(tmp, 'new'))).ino).toBe(inode);
    expect(await dataExtents(join(tmp, 'new'), copy.length)).toEqual([{ offset: 0, length: DENSE_BYTES }]);
  });

  it('a source with holes keeps the chunk loop: its holes stay holes', async () => {
    // Prepare: data at the start and the end, a hole between.
    await writeFile(join(tmp, 'old'), '');
    await truncate(join(tmp, 'old'), DENSE_BYTES);
    const head = randomBytes(MIB);
    const tail = randomBytes(MIB);
    const fh = await open(join(tmp, 'old'), 'r+');
    await fh.write(head, 0, MIB, 0);
    await fh.write(tail, 0, MIB, DENSE_BYTES - MIB);
    await fh.close();
    const from = await handleOf('old');
    const to = await emptyVolume('new', DENSE_BYTES);
    const read = vi.spyOn(from, 'read');

    // Act
    const result = await copyBlockData(from, to);

    // Assess
    expect(result).toEqual({ readBytes: 2 * MIB, writtenBytes: 2 * MIB });
    expect(read.mock.calls.length).toBeGreaterThan(0);
    expect((await readFile(join(tmp, 'new'))).equals(await readFile(join(tmp, 'old')))).toBe(true);
    expect(await dataExtents(join(tmp, 'new'), DENSE_BYTES)).toEqual([
      { offset: 0, length: MIB },
      { offset: DENSE_BYTES - MIB, length: MIB },
    ]);
  });

  it('without perl the chunk loop copies it, the same bytes', async () => {
    // Prepare: no perl on PATH (no data-extent helper, no kernel range copy).
    const data = randomBytes(DENSE_BYTES);
    await writeFile(join(tmp, 'old'), data);
    const from = await handleOf('old');
    const to = await emptyVolume('new', DENSE_BYTES);
    const read = vi.spyOn(from, 'read');
    vi.stubEnv('PATH', join(tmp, 'no-such-bin'));

    // Act
    let result;
    try {
      result = await copyBlockData(from, to);
    } finally {
      vi.unstubAllEnvs();
    }

    // Assess
    expect(result).toEqual({ readBytes: DENSE_BYTES, writtenBytes: DENSE_BYTES });
    expect(read.mock.calls.length).toBeGreaterThan(0);
    expect(sha(await readFile(join(tmp, 'new')))).toBe(sha(data));
  });
});

describe('copyRangeInKernel', () => {
  it('a source shorter than the range is a DriverError', async () => {
    // Prepare
    await writeFile(join(tmp, 'old'), randomBytes(MIB));
    await writeFile(join(tmp, 'new'), Buffer.alloc(2 * MIB));
    const input = await open(join(tmp, 'old'), 'r');
    const output = await open(join(tmp, 'new'), 'r+');

    // Act
    const copying = copyRangeInKernel(input, output, 2 * MIB);

    // Assess
    try {
      await expect(copying).rejects.toMatchObject({ name: 'DriverError', message: expect.stringContaining(`the source ended after ${MIB} of ${2 * MIB} bytes`) });
    } finally {
      await input.close();
      await output.close();
    }
  });
});
