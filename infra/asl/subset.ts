/**
 * The subset of Amazon States Language that aws-local-stepfunctions runs faithfully. The local
 * stack refuses to load a machine outside it, and test/infra fails on one, so an ASL file can never
 * behave one way on AWS and another on a laptop.
 *
 * Outside the subset (see TOOLCHAIN.md and what was found here):
 * - JSONata (`QueryLanguage: JSONata`, `Arguments`, `Output`): silently ignored locally.
 * - `Assign` variables, `.waitForTaskToken`: not supported.
 * - Map tolerated failures and Distributed Map (`ItemReader`, `ItemBatcher`, `ResultWriter`, `DISTRIBUTED`).
 * - `"ResultPath": "$"`: valid on AWS (replace the state), but the interpreter writes a key named
 *   "$" instead; leave ResultPath out to get the same effect on both.
 * - `HeartbeatSeconds` / `HeartbeatSecondsPath`: ignored locally (no heartbeat clock), so a Task
 *   that would time out on AWS for want of a heartbeat would run on here.
 * - A `TimeoutSeconds` (of the machine or of a state) above MAX_LOCAL_TIMEOUT_SECONDS: the
 *   interpreter sets a Node timer, which fires at once past 2^31-1 ms (24.8 days).
 *
 * Inside it, and checked to run (test/integration/local-stepfunctions.test.ts): the machine's
 * TimeoutSeconds (the execution ends TIMED_OUT), a Task's TimeoutSeconds (States.Timeout, which
 * Retry and Catch see), Retry with IntervalSeconds, MaxAttempts and BackoffRate.
 */
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type JsonObject = { [k: string]: Json };
export const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Every state of a machine, with its path, including those inside Parallel branches and Map processors. */
export function* allStates(machine: JsonObject, path = ''): Generator<{ name: string; state: JsonObject }> {
  const states = machine.States;
  if (!isObject(states)) return;
  for (const [name, state] of Object.entries(states)) {
    if (!isObject(state)) continue;
    const here = path ? `${path}/${name}` : name;
    yield { name: here, state };
    if (Array.isArray(state.Branches)) for (const b of state.Branches) if (isObject(b)) yield* allStates(b, here);
    const processor = state.ItemProcessor ?? state.Iterator;
    if (isObject(processor)) yield* allStates(processor, here);
  }
}

/** Every key anywhere in the document, with its value (for rules that apply at any depth). */
function* allEntries(v: Json, path = '$'): Generator<{ path: string; key: string; value: Json }> {
  if (Array.isArray(v)) for (const [i, x] of v.entries()) yield* allEntries(x, `${path}[${i}]`);
  else if (isObject(v)) {
    for (const [key, value] of Object.entries(v)) {
      yield { path: `${path}.${key}`, key, value };
      yield* allEntries(value, `${path}.${key}`);
    }
  }
}

/** The longest timeout the interpreter can count: Node's timers hold at most 2^31-1 ms. */
export const MAX_LOCAL_TIMEOUT_SECONDS = Math.floor((2 ** 31 - 1) / 1000);

/** State fields that only exist with JSONata / variables, which the local interpreter ignores. */
const JSONATA_STATE_FIELDS = ['Assign', 'Arguments', 'Output'];
/** Map fields the local interpreter does not honour (tolerated failures, Distributed Map I/O). */
const UNSUPPORTED_MAP_FIELDS = ['ToleratedFailurePercentage', 'ToleratedFailurePercentagePath', 'ToleratedFailureCount', 'ToleratedFailureCountPath', 'ItemReader', 'ItemBatcher', 'ResultWriter'];

/** Everything in the definition outside the subset. Each message names the state and the fix. */
export function unsupportedFeatures(definition: unknown): string[] {
  const problems: string[] = [];
  for (const { path, key, value } of allEntries(definition as Json)) {
    if (key === 'QueryLanguage' && value === 'JSONata') problems.push(`${path}: JSONata is ignored by the local interpreter; use JSONPath`);
  }
  if (!isObject(definition)) return [...problems, 'definition is not an object'];
  if (typeof definition.TimeoutSeconds === 'number' && definition.TimeoutSeconds > MAX_LOCAL_TIMEOUT_SECONDS) {
    problems.push(`TimeoutSeconds ${definition.TimeoutSeconds} of the machine is above ${MAX_LOCAL_TIMEOUT_SECONDS} s, which a local timer cannot count`);
  }
  for (const { name, state } of allStates(definition)) {
    for (const field of ['HeartbeatSeconds', 'HeartbeatSecondsPath']) {
      if (field in state) problems.push(`${name}: ${field} is ignored by the local interpreter (no heartbeat clock); bound the Task with TimeoutSeconds`);
    }
    if (typeof state.TimeoutSeconds === 'number' && state.TimeoutSeconds > MAX_LOCAL_TIMEOUT_SECONDS) {
      problems.push(`${name}: TimeoutSeconds ${state.TimeoutSeconds} is above ${MAX_LOCAL_TIMEOUT_SECONDS} s, which a local timer cannot count`);
    }
    for (const field of JSONATA_STATE_FIELDS) {
      if (field in state) problems.push(`${name}: ${field} (JSONata/variables) is not supported locally; use Parameters/ResultSelector/ResultPath`);
    }
    if (typeof state.Resource === 'string' && state.Resource.includes('.waitForTaskToken')) {
      problems.push(`${name}: .waitForTaskToken cannot run locally (no task token); use .sync or a bounded Wait/poll loop`);
    }
    if (state.ResultPath === '$') problems.push(`${name}: "ResultPath": "$" writes a key named "$" locally; leave ResultPath out to replace the state`);
    if (state.Type === 'Map') {
      for (const field of UNSUPPORTED_MAP_FIELDS) if (field in state) problems.push(`${name}: Map ${field} is not supported locally`);
      const processor = state.ItemProcessor;
      if (isObject(processor) && isObject(processor.ProcessorConfig) && processor.ProcessorConfig.Mode === 'DISTRIBUTED') {
        problems.push(`${name}: Distributed Map runs inline locally; use an INLINE Map`);
      }
    }
  }
  return problems;
}
