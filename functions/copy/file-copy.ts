/**
 * Copies one regular file and verifies it, synchronously, inside a copy thread (thread.ts).
 *
 * Synchronous calls are deliberate: a copy thread does one thing at a time, and a sync call costs
 * one syscall where an async one costs a hop through libuv's pool and a promise. Parallelism comes
 * from running several threads (worker.ts), not from async I/O inside one.
 *
 * Each chunk is read once from the source, written, then read back from the destination while it
 * is still in the page cache (and in the CPU cache), compared byte for byte with the source chunk
 * (memcmp) and hashed. The SHA-256 is of the destination's content as read back, and since every
 * read-back byte equals the source byte it was written from, it is the source's SHA-256 too: the
 * same verification as hashing both sides and comparing the digests, for one SHA-256 pass instead
 * of two (SHA-256 was the largest CPU cost of a copy). The source is read exactly once and the
 * destination exactly once, where upstream (cp, then sha256sum of both files) reads the source
 * twice. On a mismatch both files are hashed in full for the error.
 */
import { closeSync, constants, fchmodSync, fchownSync, futimesSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { logger } from '../core/logger.js';
import { CopyFailed, CopyVerificationFailed } from './errors.js';

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
  /** Test hook: flip the first byte of the destination between writing and verifying. */
  corruptBeforeVerify?: boolean;
}

export interface FileCopied {
  index: number;
  bytes: number;
  sha256: string;
  /** False when the owner could not be set (not root): the file keeps the worker's owner. */
  ownerKept: boolean;
}

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
  state.current[state.slot] = task.index;
  state.progress[state.slot] = 0;
  try {
    try {
      outFd = createDestination(task.dst);
    } catch (e) {
      throw new CopyFailed(`Cannot create ${task.rel} on the destination: ${errnoMessage(e)}`, { cause: e, context: { file: task.rel } });
    }
    const destinationHash = createHash('sha256');
    let position = 0;
    let mismatch = false;
    for (;;) {
      if (Atomics.load(state.stop, 0) !== 0) throw new CopyInterrupted();
      let n: number;
      try {
        n = readSync(inFd, data, 0, data.length, position);
      } catch (e) {
        throw new CopyFailed(`Cannot read ${task.rel} on the source: ${errnoMessage(e)}`, { cause: e, context: { file: task.rel } });
      }
      if (n === 0) break;
      try {
        writeFully(outFd, data, n, position);
        if (task.corruptBeforeVerify && position === 0) writeSync(outFd, Buffer.from([data[0]! ^ 0xff]), 0, 1, 0);
        const back = readFully(outFd, check, n, position);
        // memcmp in C++, no copy; then the one SHA-256 pass, over the destination's bytes.
        if (back !== n || check.compare(data, 0, n, 0, n) !== 0) {
          mismatch = true;
          break;
        }
        destinationHash.update(back === check.length ? check : check.subarray(0, back));
      } catch (e) {
        throw new CopyFailed(`Cannot write ${task.rel} on the destination: ${errnoMessage(e)}`, { cause: e, context: { file: task.rel } });
      }
      position += n;
      state.progress[state.slot] = position;
      throttle(state, n);
    }
    if (mismatch) throw new CopyVerificationFailed(task.rel, hashFile(inFd, data), hashFile(outFd, check));
    const sha256 = destinationHash.digest('hex');
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
    return { index: task.index, bytes: position, sha256, ownerKept: state.chownAllowed };
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
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') logger.warn('copy: a partial file could not be removed', { file: task.rel, error: errnoMessage(e) });
      }
    }
    state.current[state.slot] = -1;
    state.progress[state.slot] = 0;
  }
}
