/**
 * The one way tests wait for something to happen: `eventually(probe, what, options)`.
 *
 * `probe` is called, then again every `intervalMs`, until it returns a value other than
 * `undefined` or `false`; that value is returned. A probe that throws stops the wait at once
 * (that is how a probe reports a terminal state that will never become the wanted one). After
 * `timeoutMs` the wait fails with a message naming what it waited for and the last value seen:
 * what the probe last passed to `note`, or else what it last returned.
 *
 *   await eventually(async (note) => {
 *     const status = note((await api('GET', `/volumes/${id}`)).body.volume.status);
 *     return status === 'available' ? true : undefined;
 *   }, `volume ${id} available`);
 */

export interface PollOptions {
  /** How long to wait before failing (default 30 s). */
  timeoutMs?: number;
  /** The pause between two calls of the probe (default 50 ms). */
  intervalMs?: number;
}

/** Records what the probe saw this round (for the failure message); returns it unchanged. */
export type Note = <V>(seen: V) => V;

export type Probe<T> = (note: Note) => T | undefined | false | Promise<T | undefined | false>;

export const DEFAULT_TIMEOUT_MS = 30_000;
export const DEFAULT_INTERVAL_MS = 50;

export async function eventually<T>(probe: Probe<T>, what: string, options: number | PollOptions = {}): Promise<T> {
  const { timeoutMs = DEFAULT_TIMEOUT_MS, intervalMs = DEFAULT_INTERVAL_MS } = typeof options === 'number' ? { timeoutMs: options } : options;
  const started = Date.now();
  // What the probe noted in the current round (a holder: `note` writes it from inside the probe).
  const round: { noted?: { value: unknown } } = {};
  const note: Note = (seen) => {
    round.noted = { value: seen };
    return seen;
  };
  for (let attempts = 1; ; attempts++) {
    round.noted = undefined;
    const value = await probe(note);
    if (value !== undefined && value !== false) return value as T;
    const elapsed = Date.now() - started;
    if (elapsed >= timeoutMs) {
      const noted = round.noted as { value: unknown } | undefined; // set by the probe's note(): not visible to narrowing
      const last = noted ? noted.value : value;
      throw new Error(`timed out after ${elapsed} ms (${attempts} tries) waiting for ${what}; last value seen: ${describe(last)}`);
    }
    await new Promise((r) => setTimeout(r, Math.min(intervalMs, Math.max(0, timeoutMs - elapsed))));
  }
}

/** A short, readable rendering of a value for a failure message. */
function describe(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (typeof value === 'string') return JSON.stringify(value.length > 500 ? `${value.slice(0, 500)}...` : value);
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 800 ? `${text.slice(0, 800)}... (${text.length} chars)` : text;
}
