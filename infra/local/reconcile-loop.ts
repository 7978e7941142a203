/**
 * The local stack's reconciler schedule (functions/audit/reconciler.ts does the work; on AWS an
 * EventBridge schedule runs it): once at start, in the background once the HTTP server answers
 * (stack.ts says why that is safe) and before the previous process's executions resume, with
 * `before` = the start time — the lock on the data directory proves nothing of the previous
 * process is alive, so everything older than this start is fair game; then every
 * FERRY_RECONCILE_INTERVAL seconds (default 300, 0 = never) with `before` = now minus
 * FERRY_RECONCILE_GRACE seconds (default 600), so a live operation's fresh intents are left alone.
 * One run at a time; a failed run is logged and the next tick tries again: the stack never stops
 * for it.
 */
import { ConfigurationError } from '../../functions/core/errors.js';
import { LISTED_FINDINGS } from '../../functions/audit/last-audit.js';
import { ReconcileInterrupted } from '../../functions/audit/interrupted.js';
import { logger } from '../../functions/core/logger.js';

export const DEFAULT_RECONCILE_INTERVAL_SECONDS = 300;
export const DEFAULT_RECONCILE_GRACE_SECONDS = 600;

export interface ReconcileOutcome {
  repaired: readonly unknown[];
  /** Repairs refused by their re-check, or failed. */
  left?: readonly unknown[];
  /** Findings after the repairs: an operator's. */
  remaining: readonly unknown[];
}
/**
 * functions/audit/reconciler.ts `reconcile`, as the schedule calls it. Once `signal` is aborted (the
 * stack stops) it throws ReconcileInterrupted between two repairs.
 */
export type Reconcile = (options: { before: Date; signal?: AbortSignal }) => Promise<ReconcileOutcome>;

export interface ReconcileSchedule {
  /** Seconds between runs while the stack runs; 0: only the run at start. */
  intervalSeconds: number;
  /** A timer run repairs only what is older than this many seconds. */
  graceSeconds: number;
}

/** What a run did, for the log (and tests): its outcome, its failure, or that the stack's stop interrupted it. */
export type ReconcileEvent = { trigger: 'start' | 'timer'; before: Date; durationMs: number } & ({ outcome: ReconcileOutcome } | { error: unknown } | { interrupted: ReconcileInterrupted });

export type ReconcileLog = (event: ReconcileEvent) => void;

/** The schedule from FERRY_RECONCILE_INTERVAL and FERRY_RECONCILE_GRACE, overridden by `given`. */
export function reconcileSchedule(given: Partial<ReconcileSchedule> = {}, env: NodeJS.ProcessEnv = process.env): ReconcileSchedule {
  return {
    intervalSeconds: given.intervalSeconds ?? seconds(env, 'FERRY_RECONCILE_INTERVAL', DEFAULT_RECONCILE_INTERVAL_SECONDS),
    graceSeconds: given.graceSeconds ?? seconds(env, 'FERRY_RECONCILE_GRACE', DEFAULT_RECONCILE_GRACE_SECONDS),
  };
}

function seconds(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0) throw new ConfigurationError(`${name} must be a number of seconds >= 0, not "${raw}"`);
  return value;
}

/** Logs a run (the reconciler logs each repair itself): counts and the operator's findings at info, a failure at error. */
export const logReconcile: ReconcileLog = (event) => {
  const at = { trigger: event.trigger, before: event.before.toISOString(), durationMs: event.durationMs };
  if ('interrupted' in event) {
    // A stop, not a fault: the repairs made are logged each, the rest is the next pass's.
    logger.info(`reconcile (${event.trigger}) interrupted by the stop; the next run does the rest`, { ...at, repairsMade: event.interrupted.repairsMade });
    return;
  }
  if ('error' in event) {
    const e = event.error as Error;
    logger.error('reconcile failed; the next run tries again', { ...at, error: { name: e?.name, message: e?.message } });
    return;
  }
  const { repaired, left = [], remaining } = event.outcome;
  logger.info(`reconcile (${event.trigger}): ${repaired.length} repaired, ${left.length} left, ${remaining.length} finding(s) for an operator`, {
    ...at,
    repaired: listedForLog(repaired),
    left: listedForLog(left),
    remaining: listedForLog(remaining),
  });
};

/**
 * A list as one log line carries it: the first LISTED_FINDINGS (as the stored last audit keeps
 * them, `ferry audit` shows them all) and how many more. A pass over 10,000 volumes once logged
 * 10,000 findings in one line of megabytes.
 */
export function listedForLog<T>(list: readonly T[]): readonly T[] | { first: T[]; more: number } {
  return list.length <= LISTED_FINDINGS ? list : { first: list.slice(0, LISTED_FINDINGS), more: list.length - LISTED_FINDINGS };
}

/** One run; its failure (or its interruption by `signal`) is logged, never thrown. */
export async function reconcileOnce(
  reconcile: Reconcile,
  trigger: 'start' | 'timer',
  before: Date,
  log: ReconcileLog = logReconcile,
  signal?: AbortSignal,
): Promise<ReconcileEvent> {
  const started = performance.now();
  let result: { outcome: ReconcileOutcome } | { error: unknown } | { interrupted: ReconcileInterrupted };
  try {
    result = { outcome: await reconcile({ before, ...(signal ? { signal } : {}) }) };
  } catch (error) {
    result = error instanceof ReconcileInterrupted ? { interrupted: error } : { error };
  }
  const event: ReconcileEvent = { trigger, before, durationMs: Math.round(performance.now() - started), ...result };
  log(event);
  return event;
}

export interface ReconcileLoop {
  /** Stops the timer and interrupts a run in flight (between two repairs), waiting for it. */
  stop(): Promise<void>;
}

/** Runs `reconcile` every `intervalSeconds` (none when 0), each run after the previous one ended. */
export function startReconcileLoop(
  reconcile: Reconcile,
  schedule: ReconcileSchedule,
  options: { log?: ReconcileLog; now?: () => number } = {},
): ReconcileLoop {
  const now = options.now ?? Date.now;
  const stopping = new AbortController();
  let stopped = schedule.intervalSeconds === 0;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;
  const tick = () => {
    timer = undefined;
    running = reconcileOnce(reconcile, 'timer', new Date(now() - schedule.graceSeconds * 1000), options.log, stopping.signal).then(() => {
      running = undefined;
      scheduleNext();
    });
  };
  const scheduleNext = () => {
    if (stopped) return;
    timer = setTimeout(tick, schedule.intervalSeconds * 1000);
    // The stack's server keeps the process up; this timer alone must not.
    timer.unref();
  };
  scheduleNext();
  return {
    async stop() {
      stopped = true;
      stopping.abort();
      if (timer) clearTimeout(timer);
      timer = undefined;
      await running;
    },
  };
}
