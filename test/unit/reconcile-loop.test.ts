/**
 * The local stack's reconciler schedule (infra/local/reconcile-loop.ts): the settings, one run at a
 * time, a failed run logged and retried at the next tick, stop() interrupting the run in flight
 * and waiting for it, an interrupted run told from a failed one.
 */
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import { ConfigurationError } from '../../functions/core/errors.js';
import { ReconcileInterrupted } from '../../functions/audit/interrupted.js';
import { LISTED_FINDINGS } from '../../functions/audit/last-audit.js';
import { listedForLog, reconcileOnce, reconcileSchedule, startReconcileLoop, type ReconcileEvent, type ReconcileOutcome } from '../../infra/local/reconcile-loop.js';

const NOW = Date.parse('2026-11-24T05:00:00.000Z');
const EMPTY: ReconcileOutcome = { repaired: [], left: [], remaining: [] };

describe('reconcileSchedule', () => {
  test('defaults to every 300 s with a 600 s grace; the environment and the options override', () => {
    expect(reconcileSchedule({}, {})).toEqual({ intervalSeconds: 300, graceSeconds: 600 });
    expect(reconcileSchedule({}, { FERRY_RECONCILE_INTERVAL: '0', FERRY_RECONCILE_GRACE: '30' })).toEqual({ intervalSeconds: 0, graceSeconds: 30 });
    expect(reconcileSchedule({ intervalSeconds: 5 }, { FERRY_RECONCILE_INTERVAL: '0' })).toEqual({ intervalSeconds: 5, graceSeconds: 600 });
  });

  test('a value that is not a number of seconds is a configuration error naming the variable', () => {
    expect(() => reconcileSchedule({}, { FERRY_RECONCILE_INTERVAL: '5m' })).toThrow(ConfigurationError);
    expect(() => reconcileSchedule({}, { FERRY_RECONCILE_GRACE: '-1' })).toThrow(/FERRY_RECONCILE_GRACE must be a number of seconds >= 0, not "-1"/);
  });
});

describe('reconcileOnce', () => {
  test('a failed run is logged with its error and does not throw', async () => {
    const events: ReconcileEvent[] = [];
    const failure = new Error('DynamoDB went away');

    const event = await reconcileOnce(() => Promise.reject(failure), 'start', new Date(NOW), (e) => events.push(e));

    expect(event).toEqual({ trigger: 'start', before: new Date(NOW), durationMs: expect.any(Number), error: failure });
    expect(events).toEqual([event]);
  });

  test('a run its signal stopped is logged as interrupted, not as an error, and does not throw', async () => {
    const events: ReconcileEvent[] = [];
    const stopping = new AbortController();
    const seen: (AbortSignal | undefined)[] = [];
    const reconcile = async (o: { signal?: AbortSignal }) => {
      seen.push(o.signal);
      stopping.abort();
      if (o.signal?.aborted) throw new ReconcileInterrupted(3);
      return EMPTY;
    };

    const event = await reconcileOnce(reconcile, 'start', new Date(NOW), (e) => events.push(e), stopping.signal);

    expect(seen).toEqual([stopping.signal]);
    expect(event).toMatchObject({ trigger: 'start', interrupted: { repairsMade: 3 } });
    expect('error' in event).toBe(false);
    expect(events).toEqual([event]);
  });
});

describe('listedForLog', () => {
  test('a short list is logged whole; a long one as its first LISTED_FINDINGS and how many more', () => {
    const few = Array.from({ length: LISTED_FINDINGS }, (_, i) => i);
    const many = Array.from({ length: 10_000 }, (_, i) => i);
    expect(listedForLog(few)).toEqual(few);
    expect(listedForLog(many)).toEqual({ first: many.slice(0, LISTED_FINDINGS), more: 10_000 - LISTED_FINDINGS });
  });
});

describe('startReconcileLoop', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: NOW });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  test('runs every interval with before = now - grace, one run at a time, and stop() waits for the run in flight', async () => {
    const calls: Date[] = [];
    const signals: (AbortSignal | undefined)[] = [];
    let finish: (() => void) | undefined;
    const reconcile = (o: { before: Date; signal?: AbortSignal }) => {
      calls.push(o.before);
      signals.push(o.signal);
      return new Promise<ReconcileOutcome>((done) => (finish = () => done(EMPTY)));
    };
    const loop = startReconcileLoop(reconcile, { intervalSeconds: 300, graceSeconds: 600 }, { log: () => undefined });

    await vi.advanceTimersByTimeAsync(299_000);
    expect(calls).toEqual([]);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toEqual([new Date(NOW + 300_000 - 600_000)]);
    expect(signals[0]?.aborted).toBe(false);
    // The first run is still going: no second one however long it takes.
    await vi.advanceTimersByTimeAsync(900_000);
    expect(calls).toHaveLength(1);
    finish!();
    await vi.advanceTimersByTimeAsync(300_000);
    expect(calls).toHaveLength(2);

    let stopped = false;
    const stopping = loop.stop().then(() => (stopped = true));
    await vi.advanceTimersByTimeAsync(0);
    expect(stopped).toBe(false);
    // The run in flight was told to stop (its signal), and is waited for.
    expect(signals[1]?.aborted).toBe(true);
    finish!();
    await stopping;
    await vi.advanceTimersByTimeAsync(3_000_000);
    expect(calls).toHaveLength(2);
  });

  test('a failed run is logged and the next tick tries again', async () => {
    const events: ReconcileEvent[] = [];
    let attempt = 0;
    const reconcile = async () => {
      attempt++;
      if (attempt === 1) throw new Error('not yet');
      return { repaired: ['an orphan export'], remaining: [] };
    };
    const loop = startReconcileLoop(reconcile, { intervalSeconds: 60, graceSeconds: 0 }, { log: (e) => events.push(e) });

    await vi.advanceTimersByTimeAsync(120_000);
    await loop.stop();

    expect(events.map((e) => ('error' in e ? `error: ${(e.error as Error).message}` : 'outcome' in e ? `repaired ${e.outcome.repaired.length}` : 'interrupted'))).toEqual(['error: not yet', 'repaired 1']);
  });

  test('interval 0: never runs', async () => {
    const reconcile = vi.fn(async () => EMPTY);
    const loop = startReconcileLoop(reconcile, { intervalSeconds: 0, graceSeconds: 600 });

    await vi.advanceTimersByTimeAsync(10_000_000);
    await loop.stop();

    expect(reconcile).not.toHaveBeenCalled();
  });
});
