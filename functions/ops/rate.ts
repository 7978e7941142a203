/**
 * Rate and ETA of an operation's progress: from its record's timestamps (done since it started),
 * or, better, from successive samples of the same operation (what `ferry watch` and the console
 * see), over a sliding window so that a stall shows as a falling rate rather than an old average.
 */

export interface Sample {
  /** Epoch milliseconds when it was read. */
  at: number;
  done: number;
}

/** How far back the samples that make a rate reach. */
export const RATE_WINDOW_MS = 10_000;

/** Units per second from `done` units between two ISO times; null when no time passed or nothing was done. */
export function rateFromTimestamps(done: number, startedAt: string, updatedAt: string): number | null {
  const seconds = (Date.parse(updatedAt) - Date.parse(startedAt)) / 1000;
  if (!(seconds > 0) || !(done > 0)) return null;
  return done / seconds;
}

/**
 * Units per second over the samples of the last `windowMs` (the newest sample's time back), from
 * the first to the last of them (the two newest when they are further apart than that); null with
 * fewer than two, or when no time passed between them.
 */
export function rateFromSamples(samples: readonly Sample[], windowMs = RATE_WINDOW_MS): number | null {
  if (samples.length < 2) return null;
  const last = samples[samples.length - 1]!;
  let first = last;
  let i = samples.length - 2;
  for (; i >= 0 && last.at - samples[i]!.at <= windowMs; i--) first = samples[i]!;
  // Samples further apart than the window: the two newest still make a rate.
  if (first === last) first = samples[i]!;
  const seconds = (last.at - first.at) / 1000;
  if (!(seconds > 0)) return null;
  return Math.max(0, (last.done - first.done) / seconds);
}

/** Seconds to finish at `rate`; 0 when done; null when the rate says nothing (none, or zero with work left). */
export function etaSeconds(done: number, total: number, rate: number | null): number | null {
  if (done >= total) return 0;
  if (rate === null || !(rate > 0)) return null;
  return Math.ceil((total - done) / rate);
}

/** done / total within [0, 1]; null when the total is not known yet. */
export function fractionOf(done: number, total: number): number | null {
  if (!(total > 0)) return null;
  return Math.max(0, Math.min(1, done / total));
}
