/**
 * A live migration's progress writes (functions/servers/flows/live-migration/progress.ts): one in
 * flight at a time, at most one start per interval, the newest report replacing the one waiting,
 * and flush() writing what waits at once. A fast copy's reports no longer queue up a put each
 * before the switch-over; a slow copy's still reach the record every interval.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { latestWins } from '../../functions/servers/flows/live-migration/progress.js';

/** A write the test finishes by hand, recording what was written. */
function manualWrites() {
  const written: number[] = [];
  const finish: (() => void)[] = [];
  const write = (v: number) =>
    new Promise<void>((resolve) => {
      written.push(v);
      finish.push(resolve);
    });
  return { written, write, finishOne: () => finish.shift()!() };
}

describe('latestWins', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('writes the first report at once and, of the reports made meanwhile, only the newest at flush', async () => {
    // Prepare
    const w = manualWrites();
    const writer = latestWins(w.write, 500, () => Date.now());

    // Act: eleven reports while the first write is in flight, then the copy ends.
    for (let p = 0; p <= 100; p += 10) writer.offer(p);
    const flushed = writer.flush();
    w.finishOne();
    await vi.advanceTimersByTimeAsync(0);
    w.finishOne();
    await flushed;

    // Assess
    expect(w.written).toEqual([0, 100]);
  });

  it('starts at most one write per interval, the newest report waiting for it', async () => {
    // Prepare
    const w = manualWrites();
    const writer = latestWins(w.write, 500, () => Date.now());
    writer.offer(1);
    w.finishOne();
    await vi.advanceTimersByTimeAsync(0);

    // Act: two reports 100 ms after the first write, then the interval passes.
    await vi.advanceTimersByTimeAsync(100);
    writer.offer(2);
    writer.offer(3);
    const beforeInterval = [...w.written];
    await vi.advanceTimersByTimeAsync(400);
    const afterInterval = [...w.written];
    w.finishOne();
    await writer.flush();

    // Assess
    expect(beforeInterval).toEqual([1]);
    expect(afterInterval).toEqual([1, 3]);
    expect(w.written).toEqual([1, 3]);
  });

  it('flush writes the waiting report without waiting for the interval, and waits for it', async () => {
    // Prepare
    const written: number[] = [];
    const writer = latestWins(async (v: number) => void written.push(v), 60_000, () => Date.now());
    writer.offer(10);
    await vi.advanceTimersByTimeAsync(0);
    writer.offer(100);

    // Act
    await writer.flush();

    // Assess
    expect(written).toEqual([10, 100]);
    expect(vi.getTimerCount()).toBe(0);
  });
});
