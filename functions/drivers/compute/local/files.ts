/**
 * File helpers of the local compute driver: whole-file JSON writes, sparse copies that read only
 * the source's data extents (with progress and abort: the live migration), a changed-chunks pass
 * (the live migration's stop-and-copy), and an in-process lock per host directory.
 */
import { mkdir, open, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { DriverError } from '../../../core/errors.js';
import { logger } from '../../../core/logger.js';
import { copyFileInKernel, isErrno, readChunk, tempName, unlinkIfPresent, writeFileAtomic, writeFully } from '../../files.js';
import { chunkPieces, dataExtentsOf, extentBytes, unionExtents, wholeFile, type DataExtent } from '../../sparse.js';

// The compute driver takes the small helpers from here too.
export { fsyncDirectory, isErrno, listVisible, readChunk, readJson, statOrUndefined, tempName, unlinkIfPresent, writeFully } from '../../files.js';

export const DEFAULT_CHUNK_BYTES = 1024 * 1024;

/** Bytes the disk copies of this process read and wrote, since the start or the last reset (tests and benches count a move's cost). */
const copied = { readBytes: 0, writtenBytes: 0 };
export const localCopyStats = (): { readBytes: number; writtenBytes: number } => ({ ...copied });
export function resetLocalCopyStats(): void {
  copied.readBytes = 0;
  copied.writtenBytes = 0;
}
/** Counts bytes a copy made outside this file (qemu-img's conversions of images) read and wrote. */
export function countCopied(readBytes: number, writtenBytes: number): void {
  copied.readBytes += readBytes;
  copied.writtenBytes += writtenBytes;
}

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
  /**
   * Called after each chunk of data, and after each hole skipped, with the position reached in the
   * file (strictly increasing, the holes count as done) and the file's size.
   */
  onChunk?: (processed: number, total: number) => void;
  signal?: AbortSignal;
  /** At most this many data bytes read per second (a live migration's bandwidth cap); unlimited when absent. */
  bytesPerSecond?: number;
  /**
   * The blocks (aligned in the file) whose zeros stay holes: a block of a chunk that reads all zeros
   * is not written. Default: the chunk (a snapshot's copy asks for qcow2's 64 KiB clusters).
   */
  zeroBlockBytes?: number;
  /**
   * fsync the destination before it is returned (default). A snapshot's copy, unlinked once open and
   * never read after a crash, skips it.
   */
  durable?: boolean;
}

/** What a copy did: the file's size, the bytes it read (the data extents) and wrote (their non-zero chunks). */
export interface CopyResult {
  sizeBytes: number;
  readBytes: number;
  writtenBytes: number;
  /** Where the copy holds data: outside these ranges it is a hole. */
  extents: DataExtent[];
}

function checkChunkBytes(chunkBytes: number): void {
  if (!Number.isInteger(chunkBytes) || chunkBytes <= 0) throw new DriverError(`invalid chunk size ${chunkBytes}`, { context: { chunkBytes } });
}

/** Waits until `done` bytes since `started` (performance.now()) are within `bytesPerSecond`. */
async function keepUnder(bytesPerSecond: number, done: number, started: number): Promise<void> {
  const ahead = (done / bytesPerSecond) * 1000 - (performance.now() - started);
  if (ahead > 0) await new Promise((r) => setTimeout(r, ahead));
}

/**
 * A dense source at least this large is copied by the kernel (sparseCopy); a smaller one by the
 * chunk loop, whose cost is small there and whose progress comes chunk by chunk.
 */
export const KERNEL_COPY_MIN_BYTES = 32 * 1024 * 1024;
/** How often a kernel copy's progress is read from its destination's size. */
const KERNEL_COPY_PROGRESS_MS = 200;

/**
 * Reports a kernel copy's progress (it writes its destination in order, so the size reached is the
 * bytes done) every KERNEL_COPY_PROGRESS_MS, strictly increasing, until stopped.
 */
function reportGrowth(dst: string, size: number, onChunk: (processed: number, total: number) => void): { stop(): void } {
  let reached = 0;
  let stopped = false;
  const timer = setInterval(() => {
    stat(dst).then(
      (st) => {
        if (stopped || st.size <= reached || st.size >= size) return;
        reached = st.size;
        onChunk(reached, size);
      },
      (e: unknown) => {
        // Before the copy made its destination there is nothing to report yet.
        if (!isErrno(e, 'ENOENT')) logger.warn('sparse copy: reading the progress of a kernel copy failed', { dst, error: e as Error });
      },
    );
  }, KERNEL_COPY_PROGRESS_MS);
  return {
    stop() {
      stopped = true;
      clearInterval(timer);
    },
  };
}

/**
 * The parts of `chunk` (read at `offset`) to write: its blocks of `blockBytes` (aligned in the
 * file) that are not all zeros, consecutive ones as one run.
 */
function* nonZeroRuns(chunk: Buffer, offset: number, blockBytes: number, zeros: Buffer): Generator<DataExtent> {
  let run: DataExtent | undefined;
  for (let pos = offset; pos < offset + chunk.length; ) {
    const next = Math.min(offset + chunk.length, (Math.floor(pos / blockBytes) + 1) * blockBytes);
    const block = chunk.subarray(pos - offset, next - offset);
    if (block.equals(zeros.subarray(0, block.length))) {
      if (run) yield run;
      run = undefined;
    } else if (run) run.length += block.length;
    else run = { offset: pos, length: block.length };
    pos = next;
  }
  if (run) yield run;
}

/**
 * Copies `src` to a new file `dst` keeping it sparse: only the source's data extents are read, and
 * only their blocks that are not all zeros are written (a hole or a block of zeros stays a hole).
 * A source of KERNEL_COPY_MIN_BYTES or more with no hole at all (a fully written disk) is copied
 * whole by the kernel instead (copyFileInKernel): nothing to skip, and the chunk loop's read,
 * compare and write of every chunk through this process's event loop cost 4x `cp` and more on a
 * busy machine (docs/full-disk-moves.md). Such a copy is aborted before
 * or after it, not within it (1 GiB takes 0.5-2 s here), reports progress from its destination's
 * size, and is not held to `bytesPerSecond` (a capped copy keeps the chunk loop).
 * The destination is created new (never overwrites), fsynced unless `durable: false`; on any
 * failure or abort it is removed.
 */
export async function sparseCopy(src: string, dst: string, options: CopyOptions = {}): Promise<CopyResult> {
  const chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
  const zeroBlockBytes = options.zeroBlockBytes ?? chunkBytes;
  checkChunkBytes(chunkBytes);
  checkChunkBytes(zeroBlockBytes);
  await mkdir(dirname(dst), { recursive: true });
  const input = await open(src, 'r');
  let output: FileHandle | undefined;
  let created = false;
  try {
    const { size, extents, dense } = await dataExtentsOf(input, src);
    if (dense && size >= KERNEL_COPY_MIN_BYTES && !options.bytesPerSecond) {
      if (options.signal?.aborted) throw new CopyAborted();
      const progress = options.onChunk ? reportGrowth(dst, size, options.onChunk) : undefined;
      try {
        // Durable unless asked otherwise: fsynced inside, its writeback overlapped with the copy.
        await copyFileInKernel(input, src, dst, { durable: options.durable ?? true });
      } catch (e) {
        // EEXIST: nothing was made (the file is someone else's); anything else may have left a part.
        if (!isErrno(e, 'EEXIST')) await unlinkIfPresent(dst);
        throw e;
      } finally {
        progress?.stop();
      }
      created = true;
      copied.readBytes += size;
      copied.writtenBytes += size;
      options.onChunk?.(size, size);
      if (options.signal?.aborted) throw new CopyAborted();
      return { sizeBytes: size, readBytes: size, writtenBytes: size, extents: wholeFile(size) };
    }
    output = await open(dst, 'wx');
    created = true;
    await output.truncate(size);
    const buf = Buffer.alloc(Math.min(chunkBytes, Math.max(size, 1)));
    const zeros = Buffer.alloc(buf.length);
    const written: DataExtent[] = [];
    let readBytes = 0;
    let reached = 0;
    const started = performance.now();
    for (const piece of chunkPieces(extents, chunkBytes)) {
      if (options.signal?.aborted) throw new CopyAborted();
      if (piece.offset > reached) options.onChunk?.(piece.offset, size);
      if (options.bytesPerSecond) await keepUnder(options.bytesPerSecond, readBytes, started);
      const chunk = await readChunk(input, buf, piece.length, piece.offset);
      readBytes += piece.length;
      copied.readBytes += piece.length;
      for (const run of nonZeroRuns(chunk, piece.offset, zeroBlockBytes, zeros)) {
        await writeFully(output, chunk.subarray(run.offset - piece.offset, run.offset - piece.offset + run.length), run.offset);
        written.push(run);
        copied.writtenBytes += run.length;
      }
      reached = piece.offset + piece.length;
      options.onChunk?.(reached, size);
    }
    if (reached < size) options.onChunk?.(size, size);
    if (options.signal?.aborted) throw new CopyAborted();
    if (options.durable ?? true) await output.sync();
    const extentsWritten = unionExtents(written, []);
    return { sizeBytes: size, readBytes, writtenBytes: extentBytes(extentsWritten), extents: extentsWritten };
  } catch (e) {
    const failed = output;
    output = undefined;
    // The copy's own error is what the caller needs; a handle that also fails to close is logged.
    await failed?.close().catch((closeError: unknown) => logger.warn('sparse copy: closing the destination failed after an error', { dst, error: closeError as Error }));
    // Only what this copy created: a destination that existed already (EEXIST) is someone else's.
    if (created) await unlinkIfPresent(dst);
    throw e;
  } finally {
    await output?.close();
    await input.close();
  }
}

/**
 * How long a file must have been left alone before a copy starts from it for its timestamps to
 * prove, after the copy, that nothing wrote it meanwhile (markBeforeCopy, unchangedSince).
 */
export const SETTLED_MS = 1000;

/** A source file as a copy starts from it: its identity, size and change times. */
export interface CopyStartMark {
  ino: bigint;
  size: bigint;
  mtimeNs: bigint;
  ctimeNs: bigint;
  /** Last changed at least SETTLED_MS before the mark: only then can its times tell (unchangedSince). */
  settled: boolean;
}

/** Marks `path` before a copy reads it (the live migration's pre-copy). */
export async function markBeforeCopy(path: string): Promise<CopyStartMark> {
  const st = await stat(path, { bigint: true });
  return { ino: st.ino, size: st.size, mtimeNs: st.mtimeNs, ctimeNs: st.ctimeNs, settled: BigInt(Date.now()) * 1_000_000n - st.ctimeNs >= BigInt(SETTLED_MS) * 1_000_000n };
}

/**
 * True only when nothing can have written `path` since `mark`: the same file, size and times, and
 * the mark settled. Every write sets the file's ctime (the file system's clock, which no call can
 * set back); it could leave it equal to the mark's only if the file was written within the same
 * clock tick just before the mark, or if a write in flight at the mark had stamped the time before
 * its bytes landed: neither when the file had been left alone SETTLED_MS before the mark. The local
 * driver's files are on a local file system, whose clock is this host's. A false is never wrong:
 * the caller then compares the bytes.
 */
export async function unchangedSince(path: string, mark: CopyStartMark): Promise<boolean> {
  if (!mark.settled) return false;
  const st = await stat(path, { bigint: true });
  return st.ino === mark.ino && st.size === mark.size && st.mtimeNs === mark.mtimeNs && st.ctimeNs === mark.ctimeNs;
}

/**
 * Makes `dst` equal `src` by rewriting the chunks that differ (and the size); returns the bytes
 * written. Only the data extents of either file are compared: outside both, both read as zeros.
 * What it changed is fsynced before it returns; a pass that changed nothing does not fsync: `dst`
 * must be durable already (the live migration's pre-copy fsynced it), and a second fsync of a file
 * nobody wrote since is one journal commit for nothing.
 */
export async function syncChangedChunks(src: string, dst: string, chunkBytes = DEFAULT_CHUNK_BYTES): Promise<number> {
  checkChunkBytes(chunkBytes);
  const input = await open(src, 'r');
  try {
    const output = await open(dst, 'r+');
    try {
      const want = await dataExtentsOf(input, src);
      const size = want.size;
      const have = await dataExtentsOf(output, dst);
      const resized = have.size !== size;
      if (resized) await output.truncate(size);
      const a = Buffer.alloc(Math.min(chunkBytes, Math.max(size, 1)));
      const b = Buffer.alloc(a.length);
      let written = 0;
      for (const piece of chunkPieces(unionExtents(want.extents, have.extents), chunkBytes)) {
        if (piece.offset >= size) break;
        const len = Math.min(piece.length, size - piece.offset);
        const fresh = await readChunk(input, a, len, piece.offset);
        const old = await readChunk(output, b, len, piece.offset);
        copied.readBytes += 2 * len;
        if (!fresh.equals(old)) {
          await writeFully(output, fresh, piece.offset);
          written += len;
          copied.writtenBytes += len;
        }
      }
      if (written > 0 || resized) await output.sync();
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
