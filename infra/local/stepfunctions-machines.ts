/**
 * Loading a state machine for the local Step Functions: the ASL file with its `${Fn<Name>}`
 * placeholders replaced by Lambda ARNs (and CDK's other substitutions), refused when it leaves the
 * subset the interpreter runs faithfully (infra/asl/subset.ts), and each Task bound to what runs it
 * here: a wiring function in-process, `lambda:invoke`, or an integration such as the copy task.
 */
import { StateMachine, type StateMachineDefinition } from 'aws-local-stepfunctions';
import { substitutionKey, type FunctionWiring, type StateMachineWiring } from '../../functions/wiring.js';
import { unsupportedFeatures } from '../asl/subset.js';
import type { AslValidationCache } from './asl-validation-cache.js';
import { DEFAULT_FUNCTION_TIMEOUT_SECONDS, lambdaArn, lambdaName } from './http.js';

export const LAMBDA_INVOKE = 'arn:aws:states:::lambda:invoke';
/** "No timeout" for a Task: 24 days, the longest timer Node can set (AWS's own 99999999 s would overflow it and fire at once). */
const NO_TASK_TIMEOUT_SECONDS = 24 * 24 * 3600;

/** What runs a Task locally. */
export type TaskBinding = { kind: 'lambda'; fn: FunctionWiring } | { kind: 'lambda-invoke' } | { kind: 'integration'; resource: string };

export interface LoadedMachine {
  wiring: StateMachineWiring;
  arn: string;
  /** `ferry-volume-create`, the last segment of the ARN. */
  fullName: string;
  definitionText: string;
  stateMachine: StateMachine;
  tasks: Map<string, TaskBinding>;
  /** Wait states with a fixed `Seconds`, which FERRY_LOCAL_WAIT_SCALE can shorten. */
  waitSeconds: Map<string, number>;
  /** Each Retry's IntervalSeconds by state, which FERRY_LOCAL_WAIT_SCALE can shorten. */
  retryIntervals: Map<string, number[]>;
  creationDate: Date;
}

export interface MachineLoadContext {
  functions: readonly FunctionWiring[];
  /** Resources of the Task integrations other than Lambda. */
  integrationResources: readonly string[];
  /** Definition substitutions other than the `${Fn...}` ones (CDK's DefinitionSubstitutions). */
  substitutions?: Record<string, string>;
  /** Definitions asl-validator passed before (asl-validation-cache.ts); without it every load validates. */
  validated?: AslValidationCache;
}

/** Parses, checks and binds one machine; throws, naming the file, on anything the local stack cannot run. */
export function loadMachine(wiring: StateMachineWiring, arn: string, asl: string, ctx: MachineLoadContext): LoadedMachine {
  const where = wiring.file;
  const byKey = new Map(ctx.functions.map((f) => [substitutionKey(f.name), f]));
  const definitionText = asl.replace(/\$\{([A-Za-z0-9_]+)\}/g, (_, key: string) => {
    const fn = byKey.get(key);
    if (fn) return lambdaArn(fn);
    const value = ctx.substitutions?.[key];
    if (value !== undefined) return value;
    throw new Error(`${where}: no function or substitution for \${${key}} (functions are named \${Fn<PascalName>}, see substitutionKey() in functions/wiring.ts)`);
  });
  const definition = JSON.parse(definitionText) as StateMachineDefinition;
  const problems = unsupportedFeatures(definition);
  if (problems.length > 0) throw new Error(`${where}: outside what the local interpreter runs faithfully: ${problems.join('; ')}`);

  const tasks = new Map<string, TaskBinding>();
  const waitSeconds = new Map<string, number>();
  const retryIntervals = new Map<string, number[]>();
  const seen = new Set<string>();
  for (const [stateName, state] of allStates(definition)) {
    // Overrides are keyed by state name, so a name must mean one state in the whole machine.
    if (seen.has(stateName)) throw new Error(`${where}: state name "${stateName}" is used twice (names must be unique across nested Map/Parallel states)`);
    seen.add(stateName);
    const s = state as unknown as Record<string, unknown>;
    if (state.Type === 'Task') {
      const binding = bindTask(ctx, where, stateName, s);
      tasks.set(stateName, binding);
      // The interpreter's own default Task timeout is 60 s; on AWS a Task has none, and a Lambda
      // stops at its function timeout. Give each Task the limit it has on AWS.
      if (s.TimeoutSeconds === undefined && s.TimeoutSecondsPath === undefined) s.TimeoutSeconds = taskTimeoutSeconds(ctx.functions, binding, s);
    }
    if (state.Type === 'Wait' && typeof s.Seconds === 'number') waitSeconds.set(stateName, s.Seconds);
    if (Array.isArray(s.Retry)) retryIntervals.set(stateName, (s.Retry as { IntervalSeconds?: number }[]).map((r) => r.IntervalSeconds ?? 1));
  }

  // The constructor validates the definition (asl-validator), so a broken file fails at start; a
  // definition that passed before, to the byte, is not validated again (asl-validation-cache.ts).
  const validatedText = JSON.stringify(definition);
  const passedBefore = ctx.validated?.passed(validatedText) ?? false;
  const stateMachine = new StateMachine(definition, passedBefore ? { validationOptions: { noValidate: true } } : undefined);
  if (!passedBefore) ctx.validated?.pass(validatedText);

  return {
    wiring,
    arn,
    fullName: arn.slice(arn.lastIndexOf(':') + 1),
    definitionText,
    stateMachine,
    tasks,
    waitSeconds,
    retryIntervals,
    creationDate: new Date(),
  };
}

function bindTask(ctx: MachineLoadContext, where: string, stateName: string, state: Record<string, unknown>): TaskBinding {
  const resource = String(state.Resource);
  const fn = ctx.functions.find((f) => lambdaArn(f) === resource);
  if (fn) return { kind: 'lambda', fn };
  if (resource === LAMBDA_INVOKE) {
    const name = (state.Parameters as Record<string, unknown> | undefined)?.FunctionName;
    if (typeof name === 'string' && !functionNamed(ctx.functions, name)) throw new Error(`${where}: Task "${stateName}" invokes ${name}, which is not a function of the wiring table`);
    return { kind: 'lambda-invoke' };
  }
  if (ctx.integrationResources.includes(resource)) return { kind: 'integration', resource };
  throw new Error(`${where}: Task "${stateName}" has Resource ${resource}, which the local stack cannot run (Lambda functions via \${Fn...} or ${LAMBDA_INVOKE}, or: ${ctx.integrationResources.join(', ')})`);
}

function taskTimeoutSeconds(functions: readonly FunctionWiring[], binding: TaskBinding, state: Record<string, unknown>): number {
  const fn =
    binding.kind === 'lambda'
      ? binding.fn
      : binding.kind === 'lambda-invoke'
        ? functionNamed(functions, String((state.Parameters as Record<string, unknown> | undefined)?.FunctionName ?? ''))
        : undefined;
  if (fn) return fn.timeoutSeconds ?? DEFAULT_FUNCTION_TIMEOUT_SECONDS;
  return NO_TASK_TIMEOUT_SECONDS;
}

/** A function by ARN (optionally qualified), physical name or wiring name, as lambda:invoke accepts. */
export function functionNamed(functions: readonly FunctionWiring[], name: string): FunctionWiring | undefined {
  return functions.find((f) => name === lambdaName(f) || name === f.name || name === lambdaArn(f) || name.startsWith(lambdaArn(f) + ':'));
}

type AnyState = StateMachineDefinition['States'][string];

/** Every state of a definition, including those inside Map and Parallel states. */
function* allStates(def: Pick<StateMachineDefinition, 'States'>): Generator<[string, AnyState]> {
  for (const [name, state] of Object.entries(def.States)) {
    yield [name, state];
    if (state.Type === 'Map') {
      const inner = state.ItemProcessor ?? state.Iterator;
      if (inner) yield* allStates(inner);
    }
    if (state.Type === 'Parallel') for (const branch of state.Branches) yield* allStates(branch);
  }
}
