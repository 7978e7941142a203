/**
 * Copies one regular file and verifies it, synchronously, inside a copy thread (thread.ts).
 *
 * Synchronous calls are deliberate: a copy thread does one thing at a time, and a sync call costs
 * one syscall where an async one costs a hop through libuv's pool and a promise. Parallelism comes
 * from running several threads (worker.ts), not from async I/O inside one.
 *
 * Each chunk is read once from the source, written, then read back from the destination while it
 * is still in the page cache (and in the CPU cache) and compared byte for byte with the source
 * chunk (memcmp, ~20 GB/s): that comparison is the verification, stronger than comparing two
 * digests, and the only pass over the bytes besides the copy itself. No digest is computed on the
 * way: nothing reads one (the journal's resume check is size and mtime), and a CRC-32 of every
 * byte cost a third of the copy's user-space CPU. SHA-256 is computed only on a mismatch, of both
 * files in full, for the error. The source is read exactly once and the destination exactly once,
 * where upstream (cp, then sha256sum of both files) reads the source twice. The source's size,
 * mtime and ctime are checked before and after: a file written while it was copied fails the copy
 * (CopySourceChanged) rather than pass as verified.
 */
import { appendFileSync, closeSync, constants, fchmodSync, fchownSync, fstatSync, ftruncateSync, futimesSync, openSync, readSync, unlinkSync, writeSync, type BigIntStats } from 'node:fs';
import { createHash } from 'node:crypto';
import { CopyFailed, CopySourceChanged, CopyVerificationFailed } from './errors.js';

/** Measured on a 2-core machine: 256 KiB keeps the chunk and its read-back in the CPU cache. */
export const DEFAULT_CHUNK_BYTES = 256 * 1024;

/** One file for a copy thread: everything it needs, as plain data (it crosses a thread boundary). */
export interface FileTask {
  /** Position in the plan; results and progress refer to it. */
  index: number;
  /** Path relative to the share root, for messages. */
  rel: string;
  src: string;
  dst: string;
  mode: number;
  uid: number;
  gid: number;
  /** Seconds since the epoch, fractional (what fs.futimes takes). */
  atime: number;
  mtime: number;
  /** The source's size and mtime (ns, decimal) when the tree was walked: a file that differs has changed since. */
  size: number;
  mtimeNs: string;
  /**
   * Test hooks, after the first chunk is written: `corrupt` flips the destination's first byte,
   * `truncate` cuts the destination one byte short, `change-source` appends to the source.
   */
  testHook?: 'corrupt' | 'truncate' | 'change-source';
}

export interface FileCopied {
  index: number;
  bytes: number;
  /** False when the owner could not be set (not root): the file keeps the worker's owner. */
  ownerKept: boolean;
}

/**
 * Where a copy says what it leaves behind (a partial file it could not remove). Not the logger
 * itself: a copy thread that imported it would load Powertools at every start (file-copy.ts is
 * the thread's whole import graph), so the thread hands its warnings to the engine.
 */
export type CopyWarn = (message: string, context: Record<string, unknown>) => void;

/** State a copy thread shares with the engine. */
export interface CopyThreadState {
  /** Scratch buffers, reused for every file: one for the source chunk, one for the read-back. */
  data: Buffer;
  check: Buffer;
  /** Non-zero when the engine wants every thread to stop (cancel, lease lost, another thread failed). */
  stop: Int32Array;
  /** progress[slot] = bytes of the current file done, read by the engine for current-file progress. */
  progress: Float64Array;
  /** current[slot] = index of the file being copied, -1 when idle. */
  current: Int32Array;
  slot: number;
  /** Starts true; turned off at the first EPERM so an unprivileged worker stops trying. */
  chownAllowed: boolean;
  /** Bytes per second this thread may copy; 0 = unlimited. */
  bytesPerSecond: number;
  throttle: { startedAt: number; bytes: number };
  warn: CopyWarn;
}

/** The state of a copy run on the calling thread alone (no engine: the local driver's migration passes). */
export function singleThreadState(warn: CopyWarn, chownAllowed = true, chunkBytes = DEFAULT_CHUNK_BYTES): CopyThreadState {
  return {
    data: Buffer.allocUnsafe(chunkBytes),
    check: Buffer.allocUnsafe(chunkBytes),
    stop: new Int32Array(1),
    progress: new Float64Array(1),
    current: new Int32Array([-1]),
    slot: 0,
    chownAllowed,
    bytesPerSecond: 0,
    throttle: { startedAt: performance.now(), bytes: 0 },
    warn,
  };
}

/** Thrown inside a copy thread when `stop` is set; not a failure of the file. */
export class CopyInterrupted extends Error {
  constructor() {
    super('copy interrupted');
    this.name = 'CopyInterrupted';
  }
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** Sleeps this thread (never the engine's) until the thread is back under its byte budget. */
function throttle(state: CopyThreadState, bytes: number): void {
  if (state.bytesPerSecond <= 0) return;
  state.throttle.bytes += bytes;
  const dueMs = (state.throttle.bytes / state.bytesPerSecond) * 1000 - (performance.now() - state.throttle.startedAt);
  if (dueMs > 1) Atomics.wait(sleeper, 0, 0, dueMs);
}

/** Creates the destination exclusively; a leftover from an interrupted run is removed first. */
function createDestination(dst: string): number {
  const flags = constants.O_RDWR | constants.O_CREAT | constants.O_EXCL;
  try {
    // 0o600 until the content is complete and verified; the real mode is set at the end.
    return openSync(dst, flags, 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    // Never open an existing file for writing: it may be a hard link whose other names are done.
    unlinkSync(dst);
    return openSync(dst, flags, 0o600);
  }
}

function writeFully(fd: number, buf: Buffer, length: number, position: number): void {
  let done = 0;
  while (done < length) done += writeSync(fd, buf, done, length - done, position + done);
}

function readFully(fd: number, buf: Buffer, length: number, position: number): number {
  let done = 0;
  while (done < length) {
    const n = readSync(fd, buf, done, length - done, position + done);
    if (n === 0) break;
    done += n;
  }
  return done;
}

/** SHA-256 of a whole open file (the error path of a mismatch: both sides, for the message). */
function hashFile(fd: number, buf: Buffer): string {
  const hash = createHash('sha256');
  for (let position = 0; ; ) {
    const n = readSync(fd, buf, 0, buf.length, position);
    if (n === 0) break;
    hash.update(buf.subarray(0, n));
    position += n;
  }
  return hash.digest('hex');
}

/**
 * Fails when the source is not the file the plan walked (size, mtime), or changed while it was read
 * (size, mtime or ctime moved, or the bytes read are not its size). A write within the same clock
 * tick that keeps the size leaves mtime and ctime equal: that one only the read-only source excludes.
 */
function assertSourceUnchanged(task: FileTask, before: BigIntStats, after: BigIntStats, bytesRead: number): void {
  const planned = BigInt(task.size) === before.size && task.mtimeNs === String(before.mtimeNs);
  const steady = after.size === before.size && after.mtimeNs === before.mtimeNs && after.ctimeNs === before.ctimeNs && BigInt(bytesRead) === after.size;
  if (planned && steady) return;
  throw new CopySourceChanged(task.rel, {
    plannedSize: task.size,
    plannedMtimeNs: task.mtimeNs,
    size: String(after.size),
    mtimeNs: String(after.mtimeNs),
    bytesRead,
  });
}

function applyTestHook(task: FileTask, outFd: number, data: Buffer, n: number): void {
  if (task.testHook === 'corrupt') writeSync(outFd, Buffer.from([data[0]! ^ 0xff]), 0, 1, 0);
  if (task.testHook === 'truncate') ftruncateSync(outFd, Math.max(0, n - 1));
  if (task.testHook === 'change-source') appendFileSync(task.src, 'written during the copy');
}

function errnoMessage(e: unknown): string {
  return (e as Error)?.message ?? String(e);
}

export function copyFileVerified(task: FileTask, state: CopyThreadState): FileCopied {
  const { data, check } = state;
  let inFd: number;
  try {
    inFd = openSync(task.src, 'r');
  } catch (e) {
    throw new CopyFailed(`Cannot read ${task.rel} on the source: ${errnoMessage(e)}`, { cause: e, context: { file: task.rel } });
  }
  let outFd = -1;
  let complete = false;
  let opened: BigIntStats;
  state.current[state.slot] = task.index;
  state.progress[state.slot] = 0;
  try {
    opened = fstatSync(inFd, { bigint: true });
    assertSourceUnchanged(task, opened, opened, task.size);
    try {
      outFd = createDestination(task.dst);
    } catch (e) {
      throw new CopyFailed(`Cannot create ${task.rel} on the destination: ${errnoMessage(e)}`, { cause: e, context: { file: task.rel } });
    }
    let position = 0;
    let mismatch = false;
    // Reading stops at the size fstat gave, not at a read that returns 0: one read fewer per file.
    // A source that grew meanwhile fails the fstat after the loop (its size moved).
    const size = Number(opened.size);
    for (;;) {
      if (Atomics.load(state.stop, 0) !== 0) throw new CopyInterrupted();
      if (position >= size) break;
      let n: number;
      try {
        n = readSync(inFd, data, 0, data.length, position);
      } catch (e) {
        throw new CopyFailed(`Cannot read ${task.rel} on the source: ${errnoMessage(e)}`, { cause: e, context: { file: task.rel } });
      }
      if (n === 0) break;
      try {
        writeFully(outFd, data, n, position);
        if (task.testHook && position === 0) applyTestHook(task, outFd, data, n);
        const back = readFully(outFd, check, n, position);
        // memcmp in C++, no copy.
        if (back !== n || check.compare(data, 0, n, 0, n) !== 0) {
          mismatch = true;
          break;
        }
      } catch (e) {
        throw new CopyFailed(`Cannot write ${task.rel} on the destination: ${errnoMessage(e)}`, { cause: e, context: { file: task.rel } });
      }
      position += n;
      state.progress[state.slot] = position;
      throttle(state, n);
    }
    if (mismatch) throw new CopyVerificationFailed(task.rel, hashFile(inFd, data), hashFile(outFd, check));
    // Every byte written was read back equal, but equal to what the source held while it was read:
    // a source written meanwhile (the share is read-only while copied, so something is wrong)
    // fails the copy rather than leave a file that is neither the old content nor the new.
    assertSourceUnchanged(task, opened, fstatSync(inFd, { bigint: true }), position);
    try {
      // Owner before mode: chown clears setuid/setgid, chmod puts them back.
      if (state.chownAllowed) {
        try {
          fchownSync(outFd, task.uid, task.gid);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EPERM') throw e;
          state.chownAllowed = false;
        }
      }
      fchmodSync(outFd, task.mode & 0o7777);
      // Times last: nothing touches the file's content after this.
      futimesSync(outFd, task.atime, task.mtime);
    } catch (e) {
      throw new CopyFailed(`Cannot set metadata of ${task.rel} on the destination: ${errnoMessage(e)}`, { cause: e, context: { file: task.rel } });
    }
    complete = true;
    return { index: task.index, bytes: position, ownerKept: state.chownAllowed };
  } finally {
    closeSync(inFd);
    if (outFd >= 0) closeSync(outFd);
    // A partial file is never left looking like a finished one: the next run would redo it
    // anyway, and a caller deleting the destination has one file fewer to find.
    if (!complete && outFd >= 0) {
      try {
        unlinkSync(task.dst);
      } catch (e) {
        // The destination unreachable: the next run removes it before writing; say what is left.
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') state.warn('copy: a partial file could not be removed', { file: task.rel, error: errnoMessage(e) });
      }
    }
    state.current[state.slot] = -1;
    state.progress[state.slot] = 0;
  }
}
