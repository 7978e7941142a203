/**
 * Writeback overlapped with a full disk's copy (issue 17, "a fully written disk moves at the
 * machine's file copy speed"): the destination's dirty pages are synced while the copy runs, and a
 * sync that fails on the way fails the copy (Linux reports a failed writeback to one fsync only, so
 * the closing fsync could succeed over lost pages). In UNIT_ISOLATED: one case spies on FileHandle's
 * datasync, which every file handle of the process shares.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, open, readdir, rm, writeFile, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { copyBlockData } from '../../functions/drivers/compute/block-copy.js';
import { KERNEL_COPY_MIN_BYTES, sparseCopy } from '../../functions/drivers/compute/local/files.js';
import { WRITEBACK_IDLE_PAUSE_MS, writebackWhileWriting } from '../../functions/drivers/files.js';

const MIB = 1024 * 1024;
const eio = () => Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

let tmp: string;
beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'ferry-writeback-'));
});
afterEach(async () => {
  vi.restoreAllMocks();
  await rm(tmp, { recursive: true, force: true });
});

describe('writebackWhileWriting', () => {
  it('syncs the file again and again while the writer runs, and no more once stopped', async () => {
    // Prepare
    let syncs = 0;
    const fh = { datasync: async () => void syncs++ } as unknown as FileHandle;

    // Act
    const writeback = writebackWhileWriting(fh);
    await pause(150);
    await writeback.stop();
    const atStop = syncs;
    await pause(60);

    // Assess
    expect(atStop).toBeGreaterThanOrEqual(2);
    expect(syncs).toBe(atStop);
  });

  it('starts the next sync at once after one that had pages to write, and pauses only after an idle one', async () => {
    // Prepare: fake clocks; a sync takes 10 ms while the writer is ahead (pages to write), no time once it is not.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    try {
      const starts: number[] = [];
      let busy = true;
      const fh = {
        datasync: () => {
          starts.push(performance.now());
          // A loop that spins on idle syncs fails here instead of hanging the test.
          if (starts.length > 1000) return Promise.reject(new Error('the loop spins on idle syncs'));
          return busy ? new Promise<void>((resolve) => setTimeout(resolve, 10)) : Promise.resolve();
        },
      } as unknown as FileHandle;

      // Act: 100 ms of busy syncs, then 50 ms of idle ones.
      const writeback = writebackWhileWriting(fh);
      await vi.advanceTimersByTimeAsync(95);
      const busyStarts = starts.length;
      busy = false;
      await vi.advanceTimersByTimeAsync(55);
      const stopping = writeback.stop();
      await vi.runAllTimersAsync();
      await stopping;

      // Assess: busy syncs back to back (a pause between them leaves the disk idle while the copy
      // dirties more); idle ones WRITEBACK_IDLE_PAUSE_MS apart, never a spin.
      const gaps = starts.slice(1).map((t, k) => t - starts[k]!);
      expect(gaps.slice(0, busyStarts - 1)).toEqual(Array(busyStarts - 1).fill(10));
      expect(busyStarts).toBe(10);
      const idleGaps = gaps.slice(busyStarts);
      expect(idleGaps.length).toBeGreaterThanOrEqual(5);
      expect(idleGaps.every((g) => g === WRITEBACK_IDLE_PAUSE_MS)).toBe(true);
    } finally {
      vi.useRealTimers();
    }
  });

  it('a sync that failed on the way is thrown by stop()', async () => {
    // Prepare
    let syncs = 0;
    const fh = {
      datasync: async () => {
        if (++syncs === 2) throw eio();
      },
    } as unknown as FileHandle;

    // Act
    const writeback = writebackWhileWriting(fh);
    await pause(100);

    // Assess
    await expect(writeback.stop()).rejects.toMatchObject({ code: 'EIO' });
    expect(syncs).toBe(2);
  });
});

describe('a dense kernel copy whose writeback fails', () => {
  it('fails with the sync error and leaves no destination', async () => {
    // Prepare: every datasync of the process fails (the writeback's; the closing fsync is sync()).
    const src = join(tmp, 'disk');
    await writeFile(src, randomBytes(KERNEL_COPY_MIN_BYTES + MIB));
    const probe = await open(src, 'r');
    const proto = Object.getPrototypeOf(probe) as { datasync(): Promise<void> };
    await probe.close();
    const datasync = vi.spyOn(proto, 'datasync').mockRejectedValue(eio());

    // Act
    const copying = sparseCopy(src, join(tmp, 'copy'));

    // Assess
    await expect(copying).rejects.toMatchObject({ code: 'EIO' });
    expect(datasync).toHaveBeenCalled();
    expect((await readdir(tmp)).sort()).toEqual(['disk']);
  });
});

describe('copyBlockData flushes beside the copy', () => {
  /** A source of `bytes` random bytes in memory; a destination recording writes and flushes, whose `failFlush`-th flush fails. */
  function handles(bytes: number, failFlush?: number) {
    const data = randomBytes(bytes);
    const into = Buffer.alloc(bytes);
    const asked: string[] = [];
    let flushes = 0;
    const from = { sizeBytes: bytes, read: async (p: number, n: number) => Buffer.from(data.subarray(p, p + n)) };
    const to = {
      sizeBytes: bytes,
      write: async (p: number, d: Uint8Array) => {
        await pause(2);
        Buffer.from(d).copy(into, p);
        asked.push('write');
      },
      flush: async () => {
        asked.push('flush');
        await pause(5);
        if (++flushes === failFlush) throw eio();
      },
    };
    return { data, into, asked, from, to };
  }

  it('starts a flush every writebackBytes while it copies, and flushes once more at the end', async () => {
    // Prepare
    const { data, into, asked, from, to } = handles(16 * MIB);

    // Act: 1 MiB chunks, a flush started after every 4 MiB written.
    await copyBlockData(from, to, MIB, 4 * MIB);

    // Assess
    expect(into.equals(data)).toBe(true);
    expect(asked.indexOf('flush')).toBe(4);
    expect(asked.filter((a) => a === 'flush').length).toBeGreaterThanOrEqual(3);
    // The closing flush comes after the last write.
    expect(asked.at(-1)).toBe('flush');
    expect(asked.lastIndexOf('write')).toBeLessThan(asked.length - 1);
  });

  it('a flush that fails during the copy fails the copy with its error', async () => {
    // Prepare
    const { asked, from, to } = handles(16 * MIB, 1);

    // Act
    const copying = copyBlockData(from, to, MIB, 4 * MIB);

    // Assess: the copy stops at the failure; no closing flush stands for it.
    await expect(copying).rejects.toMatchObject({ code: 'EIO' });
    expect(asked.filter((a) => a === 'flush')).toEqual(['flush']);
    expect(asked.filter((a) => a === 'write').length).toBeLessThan(16);
  });
});
