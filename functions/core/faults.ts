/**
 * Fault injection for any driver kind (volume, share, compute): a test, or an operator rehearsing
 * a failure, makes a named driver call fail, hang, or succeed-then-fail at a named point.
 *
 * The registry wraps every driver it builds in `withFaults`, so a fault reaches the driver no matter
 * which function calls it. Faults live in this process; a child process (the copy worker) gets them
 * through the FERRY_FAULTS environment variable, read when this module loads.
 */
import { randomUUID } from 'node:crypto';
import { BackendNotReady, DriverError } from './errors.js';

export const FAULTS_ENV = 'FERRY_FAULTS';

/** The call log is for tests and short rehearsals; a long-running stack must not grow it without bound. */
export const MAX_LOGGED_CALLS = 10_000;

/**
 * fail: refused before the real call; hang: held until the fault is cleared, then the real call
 * runs; fail-after: the real call runs, then an error; crash: the process "dies" before the real
 * call (the call never returns, even after the fault is cleared); crash-after: the real call
 * runs, then the process "dies" (its effect is made, nothing after it runs). The crash modes
 * model a kill -9 at that instant: a test stops the stack after one and starts it again.
 * not-ready-after: the real call runs (its work is started), then BackendNotReady, as a cloud
 * backend answers while a change is still in progress (the state machine waits and calls again).
 */
const FAULT_MODES = ['fail', 'hang', 'fail-after', 'crash', 'crash-after', 'not-ready-after'] as const;
export type FaultMode = (typeof FAULT_MODES)[number];

export interface FaultSpec {
  kind: string;
  /** The backend host (`host@backend`) the fault applies to; any backend when omitted. */
  backend?: string;
  /** Method name, or `*` for every method. */
  method: string;
  mode: FaultMode;
  /** How many calls the fault applies to; unlimited when omitted. */
  times?: number;
  /** How many matching calls pass untouched (and uncounted) before the fault applies: a crash test aims at the n-th call. */
  skip?: number;
  message?: string;
}

/**
 * A fault as given (a test's object, or one of FERRY_FAULTS), checked and with only its own fields.
 * Checked by hand, not by a schema library: every function that calls a driver imports this module,
 * and zod's import was most of what those bundles evaluated at a cold start (bench:imports).
 */
function checkFaultSpec(value: unknown, at: string): FaultSpec {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TypeError(`${at}: a fault must be an object`);
  const v = value as Record<string, unknown>;
  const problems: string[] = [];
  const text = (key: string, required: boolean, nonEmpty: boolean) => {
    if (v[key] === undefined) {
      if (required) problems.push(`${key}: required`);
    } else if (typeof v[key] !== 'string' || (nonEmpty && v[key] === '')) problems.push(`${key}: must be a${nonEmpty ? ' non-empty' : ''} string`);
  };
  const count = (key: string, least: number) => {
    if (v[key] !== undefined && !(Number.isInteger(v[key]) && (v[key] as number) >= least)) problems.push(`${key}: must be an integer >= ${least}`);
  };
  text('kind', true, true);
  text('backend', false, true);
  text('method', true, true);
  if (!FAULT_MODES.includes(v.mode as FaultMode)) problems.push(`mode: must be one of ${FAULT_MODES.join(', ')}`);
  count('times', 1);
  count('skip', 0);
  text('message', false, false);
  if (problems.length) throw new TypeError(`${at}: ${problems.join('; ')}`);
  const keys = ['kind', 'backend', 'method', 'mode', 'times', 'skip', 'message'] as const;
  return Object.fromEntries(keys.filter((k) => v[k] !== undefined).map((k) => [k, v[k]])) as unknown as FaultSpec;
}

export interface Fault extends FaultSpec {
  id: string;
  /** Calls left before the fault removes itself; undefined = unlimited. */
  remaining?: number;
  /** Matching calls still to let pass before the fault applies. */
  skipping?: number;
}

export type FaultCallOutcome =
  /** The call is still running (or held by a hang fault: see `hanging`). */
  | 'pending'
  | 'ok'
  | 'error'
  /** Refused by a 'fail' fault; the real method was not called. */
  | 'injected-fail'
  /** The real method ran and succeeded, then a 'fail-after' fault threw. */
  | 'injected-fail-after'
  /** The real method ran, then a 'not-ready-after' fault answered BackendNotReady. */
  | 'injected-not-ready'
  /** A crash fault stopped the caller here for good (before the call, or after it for 'crash-after'). */
  | 'crashed';

export interface FaultCall {
  /** Order of the calls, strictly increasing (times can tie). */
  seq: number;
  kind: string;
  backend: string;
  method: string;
  /** Epoch milliseconds when the call was intercepted. */
  time: number;
  outcome: FaultCallOutcome;
  /** The fault that applied, if any. */
  faultId?: string;
  mode?: FaultMode;
  /** True while the call waits on a hang fault. */
  hanging?: boolean;
}

const faults: Fault[] = [];
/** Calls held by a hang fault, released when that fault is cleared (even after `times` ran out). */
const hangReleases = new Map<string, { promise: Promise<void>; release: () => void }>();
const calls: FaultCall[] = [];
let nextSeq = 1;

export function injectFault(spec: FaultSpec): string {
  const parsed = checkFaultSpec(spec, 'fault');
  const id = randomUUID();
  faults.push({ ...parsed, id, remaining: parsed.times, skipping: parsed.skip });
  return id;
}

export function clearFault(id: string): void {
  const i = faults.findIndex((f) => f.id === id);
  if (i >= 0) faults.splice(i, 1);
  const hold = hangReleases.get(id);
  if (hold) {
    hangReleases.delete(id);
    hold.release();
  }
}

export function clearFaults(): void {
  faults.splice(0);
  for (const id of [...hangReleases.keys()]) clearFault(id);
}

export function listFaults(): Fault[] {
  return faults.map((f) => ({ ...f }));
}

export function faultCalls(): FaultCall[] {
  return calls.map((c) => ({ ...c }));
}

export function clearFaultCalls(): void {
  calls.splice(0);
}

/** The active faults as a FERRY_FAULTS value, to hand to a child process. */
export function faultsForEnv(): string {
  return JSON.stringify(
    faults.map(({ kind, backend, method, mode, remaining, skipping, message }) => ({ kind, backend, method, mode, times: remaining, skip: skipping, message })),
  );
}

/**
 * The active faults of one kind as a FERRY_FAULTS value (e.g. the copy faults for a copy worker
 * child process); '[]' when there are none. The child gets copies: its calls do not count down
 * this process's faults.
 */
export function faultsOfKindForEnv(kind: string): string {
  return JSON.stringify(
    faults
      .filter((f) => f.kind === kind)
      .map(({ kind, backend, method, mode, remaining, skipping, message }) => ({ kind, backend, method, mode, times: remaining, skip: skipping, message })),
  );
}

/** True when any fault of this kind is active: a cheap guard before intercepting a hot path. */
export function hasFaultsOfKind(kind: string): boolean {
  return faults.some((f) => f.kind === kind);
}

/** Takes the first matching fault and counts it down; a fault that reaches 0 stops matching. */
function takeFault(kind: string, backend: string, method: string): Fault | undefined {
  const i = faults.findIndex(
    (f) => f.kind === kind && (f.backend === undefined || f.backend === backend) && (f.method === '*' || f.method === method),
  );
  if (i < 0) return undefined;
  const fault = faults[i];
  if (fault.skipping) {
    fault.skipping -= 1;
    return undefined;
  }
  if (fault.remaining !== undefined) {
    fault.remaining -= 1;
    if (fault.remaining <= 0) faults.splice(i, 1);
  }
  return { ...fault };
}

function hangFor(id: string): Promise<void> {
  let hold = hangReleases.get(id);
  if (!hold) {
    let release!: () => void;
    const promise = new Promise<void>((resolve) => (release = resolve));
    hold = { promise, release };
    hangReleases.set(id, hold);
  }
  return hold.promise;
}

function logCall(kind: string, backend: string, method: string, fault: Fault | undefined): FaultCall {
  const entry: FaultCall = { seq: nextSeq++, kind, backend, method, time: Date.now(), outcome: 'pending' };
  if (fault) {
    entry.faultId = fault.id;
    entry.mode = fault.mode;
  }
  calls.push(entry);
  if (calls.length > MAX_LOGGED_CALLS) calls.splice(0, calls.length - MAX_LOGGED_CALLS);
  return entry;
}

function injectedError(kind: string, backend: string, method: string, fault: Fault): DriverError {
  return new DriverError(fault.message ?? `injected fault: ${kind}.${method} on ${backend}`, {
    context: { kind, backend, method, faultId: fault.id, mode: fault.mode },
  });
}

async function callWithFault(
  kind: string,
  backend: string,
  method: string,
  fault: Fault,
  entry: FaultCall,
  call: () => unknown,
): Promise<unknown> {
  if (fault.mode === 'fail') {
    entry.outcome = 'injected-fail';
    throw injectedError(kind, backend, method, fault);
  }
  if (fault.mode === 'crash') return crashHere(entry);
  if (fault.mode === 'hang') {
    entry.hanging = true;
    await hangFor(fault.id);
    entry.hanging = false;
  }
  let result: unknown;
  try {
    result = await call();
  } catch (e) {
    entry.outcome = 'error';
    throw e;
  }
  if (fault.mode === 'fail-after') {
    entry.outcome = 'injected-fail-after';
    throw injectedError(kind, backend, method, fault);
  }
  if (fault.mode === 'crash-after') return crashHere(entry);
  if (fault.mode === 'not-ready-after') {
    entry.outcome = 'injected-not-ready';
    throw new BackendNotReady(fault.message ?? `injected: ${kind}.${method} on ${backend} is not finished yet`, { context: { kind, backend, method, faultId: fault.id } });
  }
  entry.outcome = 'ok';
  return result;
}

/** Crashes observed since the last clearFaultCalls(): what a crash test waits for before it restarts the stack. */
export function crashedCalls(): FaultCall[] {
  return calls.filter((c) => c.outcome === 'crashed').map((c) => ({ ...c }));
}

const crashListeners = new Set<(call: FaultCall) => void>();

/**
 * Calls `listener` synchronously, in the crashing caller's async context, whenever a crash fault
 * stops a caller: the local Step Functions runner uses it to stop waiting for a step that will never
 * return. Returns the function that removes the listener.
 */
export function onCrash(listener: (call: FaultCall) => void): () => void {
  crashListeners.add(listener);
  return () => crashListeners.delete(listener);
}

/** A promise that never settles: the caller is as dead as after kill -9 (nothing after this point runs). */
function crashHere(entry: FaultCall): Promise<never> {
  entry.outcome = 'crashed';
  for (const listener of crashListeners) listener({ ...entry });
  return new Promise<never>(() => undefined);
}

let tracingPoints = false;

/**
 * While on, every faultPoint passed is logged (outcome 'ok') even without a fault, as driver calls
 * always are: a crash test's clean run records the points it can then crash at, one by one.
 */
export function tracePoints(on: boolean): void {
  tracingPoints = on;
}

/**
 * A named point outside any driver where a test can inject a fault (a step boundary of a state
 * machine, an in-process call to another service): `await faultPoint('step', machine, state)`.
 * Without a matching fault it returns at once and logs nothing (it is on hot paths) unless
 * tracePoints(true).
 */
export async function faultPoint(kind: string, backend: string, method: string): Promise<void> {
  const fault = hasFaultsOfKind(kind) ? takeFault(kind, backend, method) : undefined;
  if (!fault) {
    if (tracingPoints) logCall(kind, backend, method, undefined).outcome = 'ok';
    return;
  }
  const entry = logCall(kind, backend, method, fault);
  await callWithFault(kind, backend, method, fault, entry, () => undefined);
}

/**
 * Wraps a driver so each method call first consults the faults. Methods run with the real driver as
 * `this`, so a driver's calls to its own methods are neither intercepted nor logged.
 */
export function withFaults<T extends object>(kind: string, backend: string, impl: T): T {
  return new Proxy(impl, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function' || typeof prop !== 'string' || prop === 'constructor') return value;
      return function intercepted(...args: unknown[]): unknown {
        const fault = takeFault(kind, backend, prop);
        const entry = logCall(kind, backend, prop, fault);
        const call = () => (value as (...a: unknown[]) => unknown).apply(target, args);
        if (fault) return callWithFault(kind, backend, prop, fault, entry, call);
        // No fault: keep the method's own shape (a sync method stays sync); only record the outcome.
        let result: unknown;
        try {
          result = call();
        } catch (e) {
          entry.outcome = 'error';
          throw e;
        }
        if (result instanceof Promise) {
          return result.then(
            (v) => {
              entry.outcome = 'ok';
              return v;
            },
            (e) => {
              entry.outcome = 'error';
              throw e;
            },
          );
        }
        entry.outcome = 'ok';
        return result;
      };
    },
  });
}

function loadFaultsFromEnv(): void {
  const raw = process.env[FAULTS_ENV];
  if (!raw) return;
  let specs: unknown;
  try {
    specs = JSON.parse(raw);
  } catch (e) {
    throw new Error(`${FAULTS_ENV} is not valid JSON (expected an array of faults): ${(e as Error).message}`);
  }
  const shape = `${FAULTS_ENV} must be an array of {kind, backend?, method, mode, times?, skip?, message?}`;
  if (!Array.isArray(specs)) throw new Error(`${shape}: not an array`);
  let checked: FaultSpec[];
  try {
    checked = specs.map((spec, i) => checkFaultSpec(spec, `[${i}]`));
  } catch (e) {
    throw new Error(`${shape}: ${(e as Error).message}`, { cause: e });
  }
  for (const spec of checked) injectFault(spec);
}

loadFaultsFromEnv();
