/**
 * Small file helpers of the local drivers (volume, compute): errno checks, tolerant stat and
 * listing, whole-file writes (temp + fsync + rename), and positional reads/writes that loop until
 * done. Names starting with '.' are the drivers' temp files and own trees, never listed.
 */
import { randomBytes } from 'node:crypto';
import { constants, existsSync } from 'node:fs';
import { copyFile, mkdir, open, readFile, readdir, rename, stat, unlink, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { DriverError } from '../core/errors.js';
import { logger } from '../core/logger.js';

export function isErrno(e: unknown, ...codes: string[]): boolean {
  return typeof e === 'object' && e !== null && codes.includes((e as NodeJS.ErrnoException).code ?? '');
}

export async function statOrUndefined(path: string) {
  try {
    return await stat(path);
  } catch (e) {
    if (isErrno(e, 'ENOENT', 'ENOTDIR')) return undefined;
    throw e;
  }
}

export async function isDirectory(path: string): Promise<boolean> {
  return (await statOrUndefined(path))?.isDirectory() ?? false;
}

/** Visible entries of a directory, sorted; [] when it is missing. */
export async function listVisible(path: string): Promise<string[]> {
  try {
    return (await readdir(path)).filter((n) => !n.startsWith('.')).sort();
  } catch (e) {
    if (isErrno(e, 'ENOENT', 'ENOTDIR')) return [];
    throw e;
  }
}

export const tempName = (name: string) => `.tmp-${name}-${process.pid}-${randomBytes(4).toString('hex')}`;

export async function unlinkIfPresent(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch (e) {
    if (!isErrno(e, 'ENOENT', 'ENOTDIR')) throw e;
  }
}

/** Writes a small file whole: temp, fsync, rename. */
export async function writeFileAtomic(path: string, data: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const temp = join(dirname(path), tempName(basename(path)));
  try {
    const fh = await open(temp, 'wx');
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(temp, path);
  } finally {
    await unlinkIfPresent(temp);
  }
}

/**
 * fsyncs a directory: the names created, renamed or removed in it are on disk when it returns (a
 * file's own fsync makes its bytes durable, not its name; ext4 may persist a rename or a create
 * after the data, or lose it at a power loss).
 */
export async function fsyncDirectory(path: string): Promise<void> {
  const dir = await open(path, 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}

export async function readJson<T>(path: string): Promise<T | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    if (isErrno(e, 'ENOENT', 'ENOTDIR')) return undefined;
    throw e;
  }
  return JSON.parse(text) as T;
}

/** Reads `len` bytes at `pos` into `buf`; what lies past the end of the file reads as zeros. */
export async function readChunk(fh: FileHandle, buf: Buffer, len: number, pos: number): Promise<Buffer> {
  let got = 0;
  while (got < len) {
    const { bytesRead } = await fh.read(buf, got, len - got, pos + got);
    if (bytesRead === 0) break;
    got += bytesRead;
  }
  if (got < len) buf.fill(0, got, len);
  return buf.subarray(0, len);
}

export async function writeFully(fh: FileHandle, data: Uint8Array, pos: number): Promise<void> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await fh.write(data, done, data.length - done, pos + done);
    done += bytesWritten;
  }
}

/**
 * A writeback sync that returned in less than this found (almost) nothing dirty: the writer is not
 * ahead of the disk (starting, or stalled), and the loop waits WRITEBACK_IDLE_PAUSE_MS before the
 * next, so it never spins on a clean file (and, however slow the machine, makes at most one sync a
 * millisecond while the writer stands still).
 */
export const WRITEBACK_IDLE_SYNC_MS = 1;
/** The pause after an idle writeback sync. */
export const WRITEBACK_IDLE_PAUSE_MS = 5;

/**
 * Keeps the dirty pages of `fh` going to disk while a long write into it runs (a kernel copy, a
 * block copy): fdatasync after fdatasync on libuv's pool beside the writer, so the closing fsync
 * finds little left instead of the whole file (a GiB's writeback here took as long as its copy, and
 * Node has no sync_file_range to start writeback without waiting). After a sync that had pages to
 * write the next starts at once: a pause there left the disk idle while the copy dirtied more, and
 * the sync in flight when the copy ended then had that much more to write before the closing fsync
 * (a 20 ms pause: 52-67 ms after a cached GiB's copy ended, against 11-16 ms without it; the copy
 * and its fsync 425-472 ms against 350-442, cp 377-384; docs/full-disk-moves.md). Only after an idle
 * sync (WRITEBACK_IDLE_SYNC_MS) does it pause. Not a durability point: the
 * caller's closing fsync is. `stop()` ends the loop and throws the first failed sync's error: Linux
 * reports a failed writeback to one fsync only, so a later fsync may succeed over the lost pages and
 * that error must reach the caller here.
 */
export function writebackWhileWriting(fh: FileHandle): { stop(): Promise<void> } {
  let stopped = false;
  let wake: (() => void) | undefined;
  // A failed sync ends the loop and is kept here until stop() throws it to the caller.
  let failed: Error | undefined;
  const loop = (async () => {
    try {
      while (!stopped) {
        const started = performance.now();
        await fh.datasync();
        if (stopped) break;
        if (performance.now() - started >= WRITEBACK_IDLE_SYNC_MS) continue;
        await new Promise<void>((resolve) => {
          wake = resolve;
          setTimeout(resolve, WRITEBACK_IDLE_PAUSE_MS);
        });
      }
    } catch (e) {
      failed = e as Error;
    }
  })();
  return {
    async stop() {
      stopped = true;
      wake?.();
      await loop;
      if (failed) throw failed;
    },
  };
}

/**
 * Copies the open file `input` (opened at `src`) to a new file `dst` (never overwritten) inside the
 * kernel: Node's copyFile, which libuv runs as a copy_file_range loop (sendfile where that is
 * missing), so no byte passes through this process and no chunk waits on its event loop. Every
 * byte is written, a hole as zeros: only for a source that has none. Through /proc/<pid>/fd where
 * Linux offers it, so the file copied is the one open, even if renamed since. `dst` takes the
 * source's mode.
 * `durable` (default): `dst` is created here first (exclusively) and held open, the copy writes into
 * that same file (checked after), its writeback runs during the copy (writebackWhileWriting), and it
 * is fsynced before this returns. Otherwise it is not fsynced.
 */
export async function copyFileInKernel(input: FileHandle, src: string, dst: string, options: { durable?: boolean } = {}): Promise<void> {
  const from = pathOfOpenFile(input, src);
  if (!(options.durable ?? true)) {
    await copyFile(from, dst, constants.COPYFILE_EXCL);
    return;
  }
  const output = await open(dst, 'wx');
  try {
    const writeback = writebackWhileWriting(output);
    let copying: Error | undefined;
    try {
      // Into the file just made (copyFile opens `dst` by name without O_EXCL, then truncates it).
      await copyFile(from, dst);
    } catch (e) {
      copying = e as Error;
    }
    try {
      await writeback.stop();
    } catch (e) {
      if (!copying) throw e;
      // The copy's own failure is the one reported (the file is removed); the writeback's beside it is logged.
      logger.warn('kernel copy: a writeback sync failed too, after the copy failed', { dst, error: e as Error });
    }
    if (copying) throw copying;
    const [held, named] = await Promise.all([output.stat({ bigint: true }), stat(dst, { bigint: true })]);
    if (held.ino !== named.ino || held.dev !== named.dev) throw new DriverError(`kernel copy: ${dst} was replaced during the copy`, { context: { dst } });
    await output.sync();
  } finally {
    await output.close();
  }
}

/**
 * A path to the file open as `fh` (opened at `path`): its descriptor (/proc/<pid>/fd/<fd>) where
 * Linux offers it, so a file renamed or removed since it was opened still answers; else `path`.
 */
export function pathOfOpenFile(fh: FileHandle, path: string): string {
  const viaFd = `/proc/${process.pid}/fd/${fh.fd}`;
  return existsSync(viaFd) ? viaFd : path;
}
