/**
 * The policy of infra/asl/policy.ts applied to one ASL definition: what drifts from it
 * (`policyDrift`, the test's check), the definition rewritten to follow it (`applyPolicy`, what
 * `npm run asl:policy` writes), and the longest a legitimate run can take (`worstCaseSeconds`),
 * which every machine's overall timeout must cover.
 */
import { FUNCTIONS, substitutionKey, type FunctionWiring } from '../../functions/wiring.js';
import { BACKEND_WAIT, CATCH_ERRORS, CATCH_RESULT_PATHS, COPY_TASK_RESOURCE, COPY_TASK_TIMEOUT_SECONDS, LAMBDA_INVOKE_MARGIN_SECONDS, RETRIERS, type MachinePolicy, type Retrier, type RetrierName } from './policy.js';
import { allStates, isObject, type Json, type JsonObject } from './subset.js';

/** A function's timeout when its wiring entry sets none (as in infra/aws and infra/local). */
const DEFAULT_FUNCTION_TIMEOUT_SECONDS = 30;

/** A state's own name (allStates() gives nested states as `Map/Inner`). */
const leaf = (path: string) => path.slice(path.lastIndexOf('/') + 1);

/** The Lambda function a Task's Resource names (`${FnVolumeSteps}`), if it names one. */
function functionOf(state: JsonObject, functions: readonly FunctionWiring[]): FunctionWiring | undefined {
  const m = typeof state.Resource === 'string' ? /^\$\{([A-Za-z0-9_]+)\}$/.exec(state.Resource) : null;
  return m ? functions.find((f) => substitutionKey(f.name) === m[1]) : undefined;
}

/** The retrier a Task must have under the policy. */
export function retrierOf(policy: MachinePolicy, stateName: string, state: JsonObject): RetrierName {
  if (state.Resource === COPY_TASK_RESOURCE) return 'copyTaskLaunch';
  return policy.tasks?.[stateName] ?? policy.retrier;
}

/** The Retry a Task must have: BACKEND_WAIT first when the machine lists it in `waits`, then its retrier. */
export function retryOf(policy: MachinePolicy, stateName: string, state: JsonObject): Retrier[] {
  const own = RETRIERS[retrierOf(policy, stateName, state)];
  return policy.waits?.includes(stateName) ? [policy.waitRetrier ?? BACKEND_WAIT, own] : [own];
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/**
 * Everything in the definition that is not the policy: each message names the state and what the
 * policy wants. Empty when the machine follows it.
 */
export function policyDrift(definition: JsonObject, policy: MachinePolicy, functions: readonly FunctionWiring[] = FUNCTIONS): string[] {
  const problems: string[] = [];
  if (definition.TimeoutSeconds !== policy.timeoutSeconds) {
    problems.push(`the machine's TimeoutSeconds is ${JSON.stringify(definition.TimeoutSeconds)}, the policy's is ${policy.timeoutSeconds}`);
  }
  const tasks = new Set<string>();
  for (const { name, state } of allStates(definition)) {
    if (state.Catch !== undefined) {
      const catchers = Array.isArray(state.Catch) ? state.Catch : [];
      const catcher = catchers.length === 1 && isObject(catchers[0]) ? catchers[0] : undefined;
      if (!catcher || !same(catcher.ErrorEquals, CATCH_ERRORS) || !(CATCH_RESULT_PATHS as readonly Json[]).includes(catcher.ResultPath ?? null)) {
        problems.push(`${name}: Catch must be one catcher of ${JSON.stringify(CATCH_ERRORS)} with ResultPath ${CATCH_RESULT_PATHS.join(' or ')}`);
      }
    }
    if (state.Type !== 'Task') {
      if (state.Retry !== undefined) problems.push(`${name}: a ${String(state.Type)} state has a Retry; only Tasks retry (a retried Map or Parallel runs every item again)`);
      continue;
    }
    tasks.add(leaf(name));
    const retrier = retrierOf(policy, leaf(name), state);
    const want = retryOf(policy, leaf(name), state);
    if (!same(state.Retry, want)) problems.push(`${name}: Retry is ${JSON.stringify(state.Retry ?? null)}, the policy's ${want.length > 1 ? 'BackendNotReady wait and ' : ''}${retrier} retrier is ${JSON.stringify(want)}`);
    for (const field of ['HeartbeatSeconds', 'HeartbeatSecondsPath', 'TimeoutSecondsPath']) {
      if (field in state) problems.push(`${name}: ${field} is not in the policy; a Task has a fixed TimeoutSeconds`);
    }
    if (state.Resource === COPY_TASK_RESOURCE) {
      if (state.TimeoutSeconds !== COPY_TASK_TIMEOUT_SECONDS) problems.push(`${name}: TimeoutSeconds of the copy task is ${JSON.stringify(state.TimeoutSeconds)}, the policy's is ${COPY_TASK_TIMEOUT_SECONDS}`);
      continue;
    }
    const fn = functionOf(state, functions);
    if (!fn) {
      problems.push(`${name}: Resource ${JSON.stringify(state.Resource)} is neither a function of the wiring table (\${Fn...}) nor ${COPY_TASK_RESOURCE}`);
      continue;
    }
    const limit = (fn.timeoutSeconds ?? DEFAULT_FUNCTION_TIMEOUT_SECONDS) + LAMBDA_INVOKE_MARGIN_SECONDS;
    const t = state.TimeoutSeconds;
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 1 || t > limit) {
      problems.push(`${name}: TimeoutSeconds is ${JSON.stringify(t ?? null)}; a Lambda Task needs a whole number of seconds from 1 to ${limit} (${fn.name}'s timeout + ${LAMBDA_INVOKE_MARGIN_SECONDS} s)`);
    }
  }
  for (const named of Object.keys(policy.tasks ?? {})) {
    if (!tasks.has(named)) problems.push(`the policy names Task ${named}, which the machine does not have`);
  }
  if (typeof definition.TimeoutSeconds === 'number') {
    const { seconds, unsized } = worstCaseSeconds(definition, policy);
    for (const u of unsized) problems.push(u);
    if (seconds > definition.TimeoutSeconds) {
      problems.push(`the machine's TimeoutSeconds ${definition.TimeoutSeconds} is below its worst case, ${seconds} s: raise it in infra/asl/policy.ts`);
    }
  }
  return problems;
}

/**
 * The definition with the policy written in: the machine's TimeoutSeconds, every Task's Retry, the
 * copy task's TimeoutSeconds. Keys keep their order; new ones go before Catch/Next/End (and the
 * machine's after StartAt), so the files diff only where the policy changed.
 */
export function applyPolicy(definition: JsonObject, policy: MachinePolicy): JsonObject {
  const withMachineTimeout = insertBefore(definition, { TimeoutSeconds: policy.timeoutSeconds }, ['States']);
  return mapStates(withMachineTimeout, (name, state) => {
    if (state.Type !== 'Task') return state;
    const fields: JsonObject = {};
    if (state.Resource === COPY_TASK_RESOURCE) fields.TimeoutSeconds = COPY_TASK_TIMEOUT_SECONDS;
    fields.Retry = retryOf(policy, name, state) as unknown as Json;
    return insertBefore(state, fields, ['Catch', 'Next', 'End']);
  });
}

/** `fields` set on `obj`: existing keys keep their place, new ones go before the first of `before`. */
function insertBefore(obj: JsonObject, fields: JsonObject, before: readonly string[]): JsonObject {
  const out: JsonObject = {};
  const fresh = Object.entries(fields).filter(([k]) => !(k in obj));
  let placed = false;
  for (const [k, v] of Object.entries(obj)) {
    if (!placed && before.includes(k)) {
      for (const [fk, fv] of fresh) out[fk] = fv;
      placed = true;
    }
    out[k] = k in fields ? fields[k]! : v;
  }
  if (!placed) for (const [fk, fv] of fresh) out[fk] = fv;
  return out;
}

/** The definition with each state (nested ones too) replaced by `f(name, state)`. */
function mapStates(machine: JsonObject, f: (name: string, state: JsonObject) => JsonObject): JsonObject {
  if (!isObject(machine.States)) return machine;
  const states: JsonObject = {};
  for (const [name, raw] of Object.entries(machine.States)) {
    if (!isObject(raw)) {
      states[name] = raw;
      continue;
    }
    let state = f(name, raw);
    if (Array.isArray(state.Branches)) state = { ...state, Branches: state.Branches.map((b) => (isObject(b) ? mapStates(b, f) : b)) };
    for (const key of ['ItemProcessor', 'Iterator']) {
      const inner = state[key];
      if (isObject(inner)) state = { ...state, [key]: mapStates(inner, f) };
    }
    states[name] = state;
  }
  return { ...machine, States: states };
}

/** The longest one Task can take: its timeout on every attempt, plus the waits between attempts. */
export function taskBudgetSeconds(state: JsonObject): number {
  const timeout = typeof state.TimeoutSeconds === 'number' ? state.TimeoutSeconds : 0;
  let seconds = timeout;
  for (const r of Array.isArray(state.Retry) ? state.Retry : []) {
    if (!isObject(r)) continue;
    const retrier = r as unknown as Partial<Retrier>;
    const attempts = retrier.MaxAttempts ?? 3;
    const interval = retrier.IntervalSeconds ?? 1;
    const rate = retrier.BackoffRate ?? 2;
    for (let k = 0; k < attempts; k++) seconds += interval * rate ** k;
    // A refused launch fails at once; any other retried error may come at the end of a full run.
    if (!same(r.ErrorEquals, RETRIERS.copyTaskLaunch.ErrorEquals)) seconds += attempts * timeout;
  }
  return seconds;
}

/**
 * The longest a run can take: the longest path from StartAt to an end, each Task at its budget
 * (taskBudgetSeconds), each Wait its Seconds, a Map its rounds (items from `sizing.mapItems` over
 * MaxConcurrency) times its processor's worst case, a Parallel its slowest branch. A path visits a
 * state once; a state in a loop counts `sizing.runs` times. `unsized` lists what it could not size.
 */
export function worstCaseSeconds(machine: JsonObject, policy: Pick<MachinePolicy, 'sizing'>): { seconds: number; unsized: string[] } {
  const { total, unsized } = longestPath(machine, policy, (_name, state, inner) => {
    switch (state.Type) {
      case 'Task':
        return taskBudgetSeconds(state);
      case 'Wait':
        return typeof state.Seconds === 'number' ? state.Seconds : undefined;
      case 'Map':
        return Math.ceil(inner.items / inner.concurrency) * inner.processor();
      case 'Parallel':
        return Math.max(0, ...inner.branches());
      default:
        return 0;
    }
  });
  return { seconds: total, unsized };
}

/**
 * The most history events a run writes on its longest path (AWS ends an execution at 25,000;
 * infra/local/history-count.ts counts what a local run really wrote, the same way): 2 for the
 * execution, Entered and Exited for every state visit, 3 per attempt of a Task (4 for a `.sync`
 * one), a Map's or Parallel's own 4 plus 2 per iteration. Every Task makes one attempt, a Task the
 * policy lists in `waits` also every attempt of its BackendNotReady wait (those are the runs that
 * happen); a state in a loop counts `sizing.runs` times, as worstCaseSeconds counts them.
 */
export function worstCaseHistoryEvents(machine: JsonObject, policy: Pick<MachinePolicy, 'sizing' | 'waits' | 'waitRetrier'>): number {
  const { total } = longestPath(machine, policy, (name, state, inner) => {
    switch (state.Type) {
      case 'Task': {
        const attempts = 1 + (policy.waits?.includes(name) ? (policy.waitRetrier ?? BACKEND_WAIT).MaxAttempts : 0);
        return 2 + attempts * (state.Resource === COPY_TASK_RESOURCE ? 4 : 3);
      }
      case 'Map':
        return 4 + inner.items * (2 + inner.processor());
      case 'Parallel':
        return 4 + inner.branches().reduce((a, b) => a + b, 0);
      default:
        return 2;
    }
  });
  return 2 + total;
}

interface Inner {
  items: number;
  concurrency: number;
  processor: () => number;
  branches: () => number[];
}

/** The most `cost` adds up to from StartAt to an end (a path visits a state once; `sizing.runs` multiplies); undefined costs are unsized. */
function longestPath(machine: JsonObject, policy: Pick<MachinePolicy, 'sizing'>, costOf: (name: string, state: JsonObject, inner: Inner) => number | undefined): { total: number; unsized: string[] } {
  const unsized: string[] = [];
  const states = isObject(machine.States) ? machine.States : {};
  const cost = (name: string, state: JsonObject): number => {
    const runs = policy.sizing?.runs?.[name] ?? 1;
    const items = policy.sizing?.mapItems?.[name];
    if (state.Type === 'Map' && items === undefined) unsized.push(`${name}: a Map needs sizing.mapItems in infra/asl/policy.ts`);
    const sub = (m: unknown) => {
      const r = isObject(m) ? longestPath(m, policy, costOf) : { total: 0, unsized: [] };
      unsized.push(...r.unsized);
      return r.total;
    };
    const inner: Inner = {
      items: items ?? 0,
      concurrency: typeof state.MaxConcurrency === 'number' && state.MaxConcurrency > 0 ? state.MaxConcurrency : (items ?? 1),
      processor: () => sub(state.ItemProcessor ?? state.Iterator),
      branches: () => (Array.isArray(state.Branches) ? state.Branches : []).filter(isObject).map(sub),
    };
    const c = costOf(name, state, inner);
    if (c === undefined) unsized.push(`${name}: a Wait without fixed Seconds cannot be sized`);
    return runs * (c ?? 0);
  };
  const nextOf = (state: JsonObject): string[] => {
    const next: string[] = [];
    if (typeof state.Next === 'string') next.push(state.Next);
    if (typeof state.Default === 'string') next.push(state.Default);
    for (const c of [...(Array.isArray(state.Choices) ? state.Choices : []), ...(Array.isArray(state.Catch) ? state.Catch : [])]) {
      if (isObject(c) && typeof c.Next === 'string') next.push(c.Next);
    }
    return next;
  };
  const costs = new Map<string, number>();
  for (const [name, state] of Object.entries(states)) if (isObject(state)) costs.set(name, cost(name, state));
  const longest = (name: string, visited: Set<string>): number => {
    const state = states[name];
    if (!isObject(state) || visited.has(name)) return 0;
    visited.add(name);
    let tail = 0;
    for (const n of nextOf(state)) tail = Math.max(tail, longest(n, visited));
    visited.delete(name);
    return (costs.get(name) ?? 0) + tail;
  };
  return { total: typeof machine.StartAt === 'string' ? longest(machine.StartAt, new Set()) : 0, unsized };
}
