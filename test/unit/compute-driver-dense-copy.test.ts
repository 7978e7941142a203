/**
 * Copies of a fully written disk by the local compute driver (issue 17, "a fully written disk
 * moves at the machine's file copy speed"): a source with no hole is copied by the kernel
 * (sparseCopy's dense path), and a block copy syncs its destination once, not per chunk.
 */
import { createHash, randomBytes } from 'node:crypto';
import { chmod, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { copyBlockData } from '../../functions/drivers/compute/block-copy.js';
import { CopyAborted, KERNEL_COPY_MIN_BYTES, localCopyStats, resetLocalCopyStats, sparseCopy } from '../../functions/drivers/compute/local/files.js';

const MIB = 1024 * 1024;
/** Just over the size from which a dense file is copied by the kernel. */
const DENSE_BYTES = KERNEL_COPY_MIN_BYTES + MIB;

let tmp: string;
beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'ferry-dense-copy-'));
});
afterEach(async () => {
  await rm(tmp, { recursive: true, force: true });
});

/** A file written whole with random bytes, mode 0600 (a copy by the kernel takes its source's mode; the chunk loop's new file does not). */
async function denseFile(bytes: number): Promise<string> {
  const path = join(tmp, 'disk');
  await writeFile(path, randomBytes(bytes));
  await chmod(path, 0o600);
  return path;
}

const sha = async (path: string) => createHash('sha256').update(await readFile(path)).digest('hex');

describe('sparseCopy of a source with no hole', () => {
  it('is copied by the kernel: the same bytes, the whole file as data, progress to the end', async () => {
    // Prepare
    const src = await denseFile(DENSE_BYTES);
    const dst = join(tmp, 'copy');
    const progress: number[] = [];
    resetLocalCopyStats();

    // Act
    const result = await sparseCopy(src, dst, { onChunk: (done) => progress.push(done) });

    // Assess
    expect(await sha(dst)).toBe(await sha(src));
    expect(result).toEqual({ sizeBytes: DENSE_BYTES, readBytes: DENSE_BYTES, writtenBytes: DENSE_BYTES, extents: [{ offset: 0, length: DENSE_BYTES }] });
    expect((await stat(dst)).mode & 0o777).toBe(0o600);
    expect(progress.at(-1)).toBe(DENSE_BYTES);
    for (let i = 1; i < progress.length; i++) expect(progress[i]).toBeGreaterThan(progress[i - 1]!);
    expect(localCopyStats()).toEqual({ readBytes: DENSE_BYTES, writtenBytes: DENSE_BYTES });
  });

  it('a smaller dense file, or a copy held to a rate, keeps the chunk loop', async () => {
    // Prepare
    const small = await denseFile(MIB);

    // Act
    await sparseCopy(small, join(tmp, 'small-copy'), { chunkBytes: 64 * 1024 });

    // Assess: the chunk loop's new file has the default mode, not the source's.
    expect((await stat(join(tmp, 'small-copy'))).mode & 0o777).not.toBe(0o600);
    expect(await sha(join(tmp, 'small-copy'))).toBe(await sha(small));
  });

  it('aborted while it copies: the copy is removed and CopyAborted is thrown', async () => {
    // Prepare
    const src = await denseFile(DENSE_BYTES);
    const abort = new AbortController();

    // Act: the abort comes with the progress, during the kernel copy; it takes effect when that ends.
    const copying = sparseCopy(src, join(tmp, 'copy'), { signal: abort.signal, onChunk: () => abort.abort() });

    // Assess
    await expect(copying).rejects.toBeInstanceOf(CopyAborted);
    expect((await readdir(tmp)).sort()).toEqual(['disk']);
  });

  it('onto a file that exists: refused, and that file is left as it was', async () => {
    // Prepare
    const src = await denseFile(DENSE_BYTES);
    const dst = join(tmp, 'theirs');
    await writeFile(dst, 'not yours');

    // Act
    const copying = sparseCopy(src, dst);

    // Assess
    await expect(copying).rejects.toMatchObject({ code: 'EEXIST' });
    expect(await readFile(dst, 'utf8')).toBe('not yours');
  });
});

describe('copyBlockData onto a handle that can defer its syncs', () => {
  /** A source handle of `bytes` random bytes held in memory, and a destination that records what it is asked. */
  function handles(bytes: number, failWriteAt?: number) {
    const data = randomBytes(bytes);
    const into = Buffer.alloc(bytes);
    const asked: string[] = [];
    const from = { sizeBytes: bytes, read: async (p: number, n: number) => Buffer.from(data.subarray(p, p + n)) };
    const to = {
      sizeBytes: bytes,
      write: async (p: number, d: Uint8Array, options?: { deferSync?: boolean }) => {
        if (p === failWriteAt) throw new Error('disk full');
        Buffer.from(d).copy(into, p);
        asked.push(options?.deferSync ? 'write' : 'write+sync');
      },
      flush: async () => void asked.push('flush'),
    };
    return { data, into, asked, from, to };
  }

  it('writes every chunk unsynced, then flushes once', async () => {
    // Prepare
    const { data, into, asked, from, to } = handles(10 * MIB);

    // Act
    const result = await copyBlockData(from, to, MIB);

    // Assess
    expect(into.equals(data)).toBe(true);
    expect(result).toEqual({ readBytes: 10 * MIB, writtenBytes: 10 * MIB });
    expect(asked).toEqual([...Array(10).fill('write'), 'flush']);
  });

  it('a failed write fails the copy with its error, and nothing is flushed', async () => {
    // Prepare
    const { asked, from, to } = handles(10 * MIB, 3 * MIB);

    // Act
    const copying = copyBlockData(from, to, MIB);

    // Assess
    await expect(copying).rejects.toThrow('disk full');
    expect(asked).toEqual(['write', 'write', 'write']);
  });
});
