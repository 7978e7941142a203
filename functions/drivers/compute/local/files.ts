/**
 * File helpers of the local compute driver: whole-file JSON writes, chunked sparse copies with
 * progress and abort (live migration), a changed-chunks pass (the live migration's stop-and-copy),
 * and an in-process lock per host directory.
 */
import { mkdir, open, rename, rm, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { DriverError } from '../../../core/errors.js';
import { logger } from '../../../core/logger.js';
import { isErrno, readChunk, tempName, unlinkIfPresent, writeFileAtomic, writeFully } from '../../files.js';

// The compute driver takes the small helpers from here too.
export { isErrno, listVisible, readJson, statOrUndefined, tempName, unlinkIfPresent, writeFully } from '../../files.js';

export const DEFAULT_CHUNK_BYTES = 1024 * 1024;

/** Removes a directory tree so that it disappears at once: renamed to a temp name first, then removed. */
export async function removeTree(path: string): Promise<void> {
  const doomed = join(dirname(path), tempName(`rm-${basename(path)}`));
  try {
    await rename(path, doomed);
  } catch (e) {
    if (isErrno(e, 'ENOENT', 'ENOTDIR')) return;
    throw e;
  }
  await rm(doomed, { recursive: true, force: true });
}

/** Writes a small JSON file whole: temp, fsync, rename. */
export async function writeJsonAtomic(path: string, value: unknown): Promise<void> {
  await writeFileAtomic(path, `${JSON.stringify(value, null, 2)}\n`);
}

export class CopyAborted extends Error {
  constructor() {
    super('copy aborted');
    this.name = 'CopyAborted';
  }
}

export interface CopyOptions {
  chunkBytes?: number;
  /** Called after each chunk with the bytes processed so far (strictly increasing). */
  onChunk?: (processed: number, total: number) => void;
  signal?: AbortSignal;
}

/**
 * Copies `src` to a new file `dst` keeping it sparse (chunks of zeros stay holes). The destination
 * is created with 'wx' (never overwrites); on any failure or abort it is removed.
 */
export async function sparseCopy(src: string, dst: string, options: CopyOptions = {}): Promise<number> {
  const chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
  if (!Number.isInteger(chunkBytes) || chunkBytes <= 0) throw new DriverError(`invalid chunk size ${chunkBytes}`, { context: { chunkBytes } });
  await mkdir(dirname(dst), { recursive: true });
  const input = await open(src, 'r');
  let output: FileHandle | undefined;
  try {
    output = await open(dst, 'wx');
    const { size } = await input.stat();
    await output.truncate(size);
    const buf = Buffer.alloc(chunkBytes);
    const zeros = Buffer.alloc(chunkBytes);
    for (let off = 0; off < size; off += chunkBytes) {
      if (options.signal?.aborted) throw new CopyAborted();
      const len = Math.min(chunkBytes, size - off);
      const chunk = await readChunk(input, buf, len, off);
      if (!chunk.equals(zeros.subarray(0, len))) await writeFully(output, chunk, off);
      options.onChunk?.(off + len, size);
    }
    if (options.signal?.aborted) throw new CopyAborted();
    await output.sync();
    return size;
  } catch (e) {
    const failed = output;
    output = undefined;
    // The copy's own error is what the caller needs; a handle that also fails to close is logged.
    await failed?.close().catch((closeError: unknown) => logger.warn('sparse copy: closing the destination failed after an error', { dst, error: closeError as Error }));
    await unlinkIfPresent(dst);
    throw e;
  } finally {
    await output?.close();
    await input.close();
  }
}

/** Makes `dst` equal `src` by rewriting the chunks that differ (and the size); returns the bytes written. */
export async function syncChangedChunks(src: string, dst: string, chunkBytes = DEFAULT_CHUNK_BYTES): Promise<number> {
  const input = await open(src, 'r');
  try {
    const output = await open(dst, 'r+');
    try {
      const { size } = await input.stat();
      if ((await output.stat()).size !== size) await output.truncate(size);
      const a = Buffer.alloc(chunkBytes);
      const b = Buffer.alloc(chunkBytes);
      let written = 0;
      for (let off = 0; off < size; off += chunkBytes) {
        const len = Math.min(chunkBytes, size - off);
        const want = await readChunk(input, a, len, off);
        const have = await readChunk(output, b, len, off);
        if (!want.equals(have)) {
          await writeFully(output, want, off);
          written += len;
        }
      }
      await output.sync();
      return written;
    } finally {
      await output.close();
    }
  } finally {
    await input.close();
  }
}

const ignoreOutcome = (): void => {};

/** In-process serialization per key (a host directory): one mutation of a host at a time. */
const queues = new Map<string, Promise<unknown>>();
export function serialized<T>(key: string, fn: () => Promise<T>): Promise<T> {
  const previous = queues.get(key) ?? Promise.resolve();
  const run = previous.then(fn, fn);
  // The caller gets `run` with its outcome (error included); the queue only orders the next call after it.
  const tail = run.then(ignoreOutcome, ignoreOutcome);
  queues.set(key, tail);
  void tail.then(() => {
    if (queues.get(key) === tail) queues.delete(key);
  });
  return run;
}
