/**
 * How a live migration's progress reaches its Migration record: the newest report wins. At most one
 * write is in flight, at most one starts per PROGRESS_WRITE_INTERVAL_MS, and a report that arrives
 * meanwhile replaces the one waiting; flush() writes the waiting one at once and waits for it.
 *
 * Why: every write is a conditional put on the migration (its updatedAt), so they cannot overlap,
 * and chained one per 10 % they queued behind a fast copy: a 10 MiB disk of 1 GiB moved in ~0.3 s
 * and the step then waited for nine puts (~40 ms each on a busy machine) before the switch-over.
 * Nova's own monitor records progress every half second (libvirt driver, _live_migration_monitor).
 */

/** The shortest time between two starts of a progress write. */
export const PROGRESS_WRITE_INTERVAL_MS = 500;

export interface LatestWins<T> {
  /** A new value: written now, or when the interval allows, unless a newer one comes first. */
  offer(value: T): void;
  /** Writes the value waiting (if any) without waiting for the interval; resolves when no write is in flight. */
  flush(): Promise<void>;
}

/**
 * `write` must not reject (it records its own failure: progress is informative, the copy goes on);
 * `intervalMs` and `now` are parameters for tests.
 */
export function latestWins<T>(write: (value: T) => Promise<void>, intervalMs = PROGRESS_WRITE_INTERVAL_MS, now: () => number = () => performance.now()): LatestWins<T> {
  let waiting: { value: T } | undefined;
  let inFlight: Promise<void> | undefined;
  let lastStart = Number.NEGATIVE_INFINITY;
  let timer: NodeJS.Timeout | undefined;
  let flushing = false;

  const pump = (): void => {
    if (inFlight || !waiting) return;
    const wait = flushing ? 0 : lastStart + intervalMs - now();
    if (wait > 0) {
      timer ??= setTimeout(() => {
        timer = undefined;
        pump();
      }, wait);
      return;
    }
    const { value } = waiting;
    waiting = undefined;
    lastStart = now();
    inFlight = write(value).finally(() => {
      inFlight = undefined;
      pump();
    });
  };

  return {
    offer(value) {
      waiting = { value };
      pump();
    },
    async flush() {
      flushing = true;
      clearTimeout(timer);
      timer = undefined;
      try {
        pump();
        while (inFlight) await inFlight;
      } finally {
        flushing = false;
      }
    },
  };
}
