/**
 * A local Step Functions: the same ASL files CDK deploys, run by aws-local-stepfunctions, behind
 * the Step Functions API (AWS JSON 1.0) so functions start executions with the ordinary SFNClient
 * (FERRY_SFN_ENDPOINT) and people use `aws stepfunctions --endpoint-url <url>/_aws/stepfunctions`.
 *
 * Each `${Fn<Name>}` placeholder becomes a Lambda ARN; every Task state (also inside Map and
 * Parallel) is overridden, by state name, with the wiring function's handler run in-process.
 * Anything the interpreter would run wrongly or send to real AWS (task tokens, JSONata, Assign,
 * distributed Map, unknown resources) is refused when the machine is loaded.
 *
 * Every execution is one JSON file under `<dataDir>/stepfunctions/executions/`, written atomically.
 * `stop()` aborts running executions without closing them, and `resumeRunning()` (on the next start)
 * runs each again from the start with the same input: step handlers are idempotent by contract,
 * and they read their progress from DynamoDB, not from the execution.
 */
import { mkdirSync, readFileSync, readdirSync, renameSync, writeFileSync, existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomUUID } from 'node:crypto';
import './polyfills.js';
import { unsupportedFeatures } from './asl-subset.js';
import { ExecutionAbortedError, ExecutionError, ExecutionTimeoutError, StateMachine, type StateMachineDefinition, type RunOptions } from 'aws-local-stepfunctions';
import { FUNCTIONS, STATE_MACHINES, substitutionKey, type FunctionWiring, type StateMachineName, type StateMachineWiring } from '../../functions/wiring.js';
import { stateMachineArn } from '../../functions/core/executions.js';
import { DEFAULT_FUNCTION_TIMEOUT_SECONDS, LOCAL_ACCOUNT, REPO_ROOT, invokeFunction, lambdaArn, lambdaName, type StepFunctionsEndpoint } from './http.js';

type JSONValue = Parameters<StateMachine['run']>[0];
type Overrides = NonNullable<RunOptions['overrides']>;

export const LAMBDA_INVOKE = 'arn:aws:states:::lambda:invoke';
export const ECS_RUN_TASK_SYNC = 'arn:aws:states:::ecs:runTask.sync';
export const LOCAL_ROLE_ARN = `arn:aws:iam::${LOCAL_ACCOUNT}:role/ferry-local-stepfunctions`;
/** How long stop() lets in-flight step handlers finish before DynamoDB Local goes away. */
const STOP_GRACE_MS = 10_000;
const MAX_INPUT_BYTES = 256 * 1024;
/** "No timeout" for a Task: 24 days, the longest timer Node can set (AWS's own 99999999 s would overflow it and fire at once). */
const NO_TASK_TIMEOUT_SECONDS = 24 * 24 * 3600;

export type ExecutionStatus = 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'TIMED_OUT' | 'ABORTED';

/** One execution as persisted (dates ISO 8601). */
export interface ExecutionRecord {
  executionArn: string;
  stateMachineArn: string;
  /** The wiring name (`volume-create`), to find the machine again after a restart. */
  machine: string;
  name: string;
  input: string;
  status: ExecutionStatus;
  output?: string;
  error?: string;
  cause?: string;
  startDate: string;
  stopDate?: string;
}

/**
 * Runs a Task whose Resource is a service integration other than Lambda. Extension point: the copy
 * worker (a later issue) registers `arn:aws:states:::ecs:runTask.sync` here, running the worker as
 * a child process and resolving when it exits, as `.sync` does on AWS.
 */
export type TaskIntegration = (input: JSONValue, task: { stateName: string; executionArn: string }) => Promise<JSONValue>;

export interface LocalStepFunctionsOptions {
  dataDir: string;
  /** Default: STATE_MACHINES of the wiring table. */
  machines?: readonly StateMachineWiring[];
  /** Default: FUNCTIONS of the wiring table. */
  functions?: readonly FunctionWiring[];
  /** Task resources other than Lambda, by resource ARN. */
  integrations?: Record<string, TaskIntegration>;
  /** Definition substitutions other than the `${Fn...}` ones (CDK's DefinitionSubstitutions). */
  substitutions?: Record<string, string>;
  quiet?: boolean;
}

type TaskBinding = { kind: 'lambda'; fn: FunctionWiring } | { kind: 'lambda-invoke' } | { kind: 'integration'; resource: string };

interface LoadedMachine {
  wiring: StateMachineWiring;
  arn: string;
  /** `ferry-volume-create`, the last segment of the ARN. */
  fullName: string;
  definitionText: string;
  stateMachine: StateMachine;
  tasks: Map<string, TaskBinding>;
  /** Wait states with a fixed `Seconds`, which FERRY_LOCAL_WAIT_SCALE can shorten. */
  waitSeconds: Map<string, number>;
  retryIntervals: Map<string, number[]>;
  creationDate: Date;
}

/** A Step Functions API error: `{"__type": type, "message": ...}` with status 400. */
export class StepFunctionsApiError extends Error {
  constructor(
    readonly type: string,
    message: string,
    readonly status = 400,
  ) {
    super(message);
    this.name = type;
  }
}

/** A Lambda function's failure as Step Functions reports it: Error = errorType, Cause = Lambda's JSON. */
class LambdaFunctionError extends Error {
  constructor(e: unknown) {
    const errorType = e instanceof Error ? e.name : 'Error';
    const errorMessage = e instanceof Error ? e.message : String(e);
    const trace = e instanceof Error && e.stack ? e.stack.split('\n') : [];
    super(JSON.stringify({ errorType, errorMessage, trace }));
    this.name = errorType;
  }
}

const epochSeconds = (iso: string | undefined) => (iso === undefined ? undefined : Date.parse(iso) / 1000);

/** The local Step Functions service. */
export class LocalStepFunctions implements StepFunctionsEndpoint {
  private readonly executionsDir: string;
  private readonly machines = new Map<string, LoadedMachine>();
  /** Machines of the wiring whose ASL could not be found, with why (StartExecution says so). */
  private readonly unavailable = new Map<string, string>();
  private readonly records = new Map<string, ExecutionRecord>();
  private readonly running = new Map<string, { abort(): void }>();
  private readonly inflight = new Set<Promise<unknown>>();
  private readonly functions: readonly FunctionWiring[];
  private readonly integrations: Record<string, TaskIntegration>;
  private closed = false;
  private tempCounter = 0;

  constructor(private readonly options: LocalStepFunctionsOptions) {
    this.functions = options.functions ?? FUNCTIONS;
    this.integrations = { [ECS_RUN_TASK_SYNC]: ecsRunTaskNotWired, ...options.integrations };
    for (const wiring of options.machines ?? STATE_MACHINES) {
      const file = resolve(REPO_ROOT, wiring.file);
      const arn = stateMachineArn(wiring.name as StateMachineName);
      if (!existsSync(file)) {
        this.unavailable.set(arn, `${wiring.file} not found`);
        if (!options.quiet) console.warn(`ferry local: state machine ${wiring.name} unavailable: ${wiring.file} not found`);
        continue;
      }
      this.machines.set(arn, this.loadMachine(wiring, arn, readFileSync(file, 'utf8')));
    }
    this.executionsDir = join(options.dataDir, 'stepfunctions', 'executions');
    mkdirSync(this.executionsDir, { recursive: true });
    for (const f of readdirSync(this.executionsDir)) {
      if (!f.endsWith('.json')) continue;
      const rec = JSON.parse(readFileSync(join(this.executionsDir, f), 'utf8')) as ExecutionRecord;
      this.records.set(rec.executionArn, rec);
    }
  }

  // ---- loading ASL ----

  private loadMachine(wiring: StateMachineWiring, arn: string, asl: string): LoadedMachine {
    const where = wiring.file;
    const byKey = new Map(this.functions.map((f) => [substitutionKey(f.name), f]));
    const definitionText = asl.replace(/\$\{([A-Za-z0-9_]+)\}/g, (_, key: string) => {
      const fn = byKey.get(key);
      if (fn) return lambdaArn(fn);
      const value = this.options.substitutions?.[key];
      if (value !== undefined) return value;
      throw new Error(`${where}: no function or substitution for \${${key}} (functions are named \${Fn<PascalName>}, see substitutionKey() in functions/wiring.ts)`);
    });
    const definition = JSON.parse(definitionText) as StateMachineDefinition;
    refuseUnsupported(definition, where);

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
        const binding = this.bindTask(where, stateName, s);
        tasks.set(stateName, binding);
        // The interpreter's own default Task timeout is 60 s; on AWS a Task has none, and a Lambda
        // stops at its function timeout. Give each Task the limit it has on AWS.
        if (s.TimeoutSeconds === undefined && s.TimeoutSecondsPath === undefined) s.TimeoutSeconds = this.taskTimeoutSeconds(binding, s);
      }
      if (state.Type === 'Wait' && typeof s.Seconds === 'number') waitSeconds.set(stateName, s.Seconds);
      if (Array.isArray(s.Retry)) retryIntervals.set(stateName, (s.Retry as { IntervalSeconds?: number }[]).map((r) => r.IntervalSeconds ?? 1));
    }

    return {
      wiring,
      arn,
      fullName: arn.slice(arn.lastIndexOf(':') + 1),
      definitionText,
      // The constructor validates the definition (asl-validator), so a broken file fails at start.
      stateMachine: new StateMachine(definition),
      tasks,
      waitSeconds,
      retryIntervals,
      creationDate: new Date(),
    };
  }

  private bindTask(where: string, stateName: string, state: Record<string, unknown>): TaskBinding {
    const resource = String(state.Resource);
    const fn = this.functions.find((f) => lambdaArn(f) === resource);
    if (fn) return { kind: 'lambda', fn };
    if (resource === LAMBDA_INVOKE) {
      const name = (state.Parameters as Record<string, unknown> | undefined)?.FunctionName;
      if (typeof name === 'string' && !this.functionNamed(name)) throw new Error(`${where}: Task "${stateName}" invokes ${name}, which is not a function of the wiring table`);
      return { kind: 'lambda-invoke' };
    }
    if (this.integrations[resource]) return { kind: 'integration', resource };
    throw new Error(`${where}: Task "${stateName}" has Resource ${resource}, which the local stack cannot run (Lambda functions via \${Fn...} or ${LAMBDA_INVOKE}, or: ${Object.keys(this.integrations).join(', ')})`);
  }

  private taskTimeoutSeconds(binding: TaskBinding, state: Record<string, unknown>): number {
    const fn =
      binding.kind === 'lambda'
        ? binding.fn
        : binding.kind === 'lambda-invoke'
          ? this.functionNamed(String((state.Parameters as Record<string, unknown> | undefined)?.FunctionName ?? ''))
          : undefined;
    if (fn) return fn.timeoutSeconds ?? DEFAULT_FUNCTION_TIMEOUT_SECONDS;
    return NO_TASK_TIMEOUT_SECONDS;
  }

  /** A function by ARN (optionally qualified), physical name or wiring name, as lambda:invoke accepts. */
  private functionNamed(name: string): FunctionWiring | undefined {
    return this.functions.find((f) => name === lambdaName(f) || name === f.name || name === lambdaArn(f) || name.startsWith(lambdaArn(f) + ':'));
  }

  // ---- running ----

  /** Runs again every execution left RUNNING by a previous process (from the start, same input). */
  resumeRunning(): number {
    let resumed = 0;
    for (const rec of this.records.values()) {
      if (rec.status !== 'RUNNING' || this.running.has(rec.executionArn)) continue;
      if (!this.machines.has(rec.stateMachineArn)) {
        if (!this.options.quiet) console.warn(`ferry local: cannot resume ${rec.executionArn}: its state machine is not loaded`);
        continue;
      }
      this.launch(rec);
      resumed++;
    }
    return resumed;
  }

  private launch(rec: ExecutionRecord): void {
    const machine = this.machines.get(rec.stateMachineArn)!;
    const execution = machine.stateMachine.run(JSON.parse(rec.input) as JSONValue, {
      overrides: this.overridesFor(machine, rec.executionArn),
      context: {
        Execution: { Id: rec.executionArn, Name: rec.name, RoleArn: LOCAL_ROLE_ARN, StartTime: rec.startDate },
        StateMachine: { Id: machine.arn, Name: machine.fullName },
      },
    });
    this.running.set(rec.executionArn, execution);
    // The event log queues every event until read; drain it so long executions do not grow memory.
    void (async () => {
      for await (const _event of execution.eventLogs) {
        /* not kept */
      }
    })().catch(() => undefined);
    execution.result.then(
      (output) => this.finish(rec.executionArn, { status: 'SUCCEEDED', output: JSON.stringify(output ?? null) }),
      (e: unknown) => this.finish(rec.executionArn, outcomeOfFailure(e)),
    );
  }

  private overridesFor(machine: LoadedMachine, executionArn: string): Overrides {
    const taskResourceLocalHandlers: NonNullable<Overrides['taskResourceLocalHandlers']> = {};
    for (const [stateName, binding] of machine.tasks) {
      taskResourceLocalHandlers[stateName] = (input) => this.track(this.runTask(binding, input, { stateName, executionArn }));
    }
    // Wait states really wait; FERRY_LOCAL_WAIT_SCALE shortens fixed `Seconds` waits and Retry
    // intervals (tests). Waits by SecondsPath/Timestamp cannot be known ahead, so they wait in full.
    const scale = waitScale();
    if (scale === 1) return { taskResourceLocalHandlers };
    const waitTimeOverrides: Record<string, number> = {};
    for (const [stateName, seconds] of machine.waitSeconds) waitTimeOverrides[stateName] = seconds * 1000 * scale;
    const retryIntervalOverrides: Record<string, number[]> = {};
    for (const [stateName, intervals] of machine.retryIntervals) retryIntervalOverrides[stateName] = intervals.map((s) => s * 1000 * scale);
    return { taskResourceLocalHandlers, waitTimeOverrides, retryIntervalOverrides };
  }

  private async runTask(binding: TaskBinding, input: JSONValue, task: { stateName: string; executionArn: string }): Promise<JSONValue> {
    switch (binding.kind) {
      case 'lambda':
        return this.invoke(binding.fn, input);
      case 'lambda-invoke': {
        // The optimized integration: Parameters give FunctionName and Payload; the result wraps the
        // function's output in Payload, as on AWS.
        const params = (input ?? {}) as { FunctionName?: string; Payload?: JSONValue };
        const fn = params.FunctionName ? this.functionNamed(params.FunctionName) : undefined;
        if (!fn) throw Object.assign(new Error(`Function not found: ${params.FunctionName}`), { name: 'Lambda.ResourceNotFoundException' });
        const payload = await this.invoke(fn, params.Payload ?? {});
        return { ExecutedVersion: '$LATEST', Payload: payload, StatusCode: 200 };
      }
      case 'integration':
        return this.integrations[binding.resource]!(input, task);
    }
  }

  private async invoke(fn: FunctionWiring, event: JSONValue): Promise<JSONValue> {
    try {
      return (await invokeFunction(fn, event)) as JSONValue;
    } catch (e) {
      throw new LambdaFunctionError(e);
    }
  }

  /** Remembers a step handler call, so stop() can let it finish before DynamoDB goes away. */
  private track<T>(p: Promise<T>): Promise<T> {
    this.inflight.add(p);
    const forget = () => this.inflight.delete(p);
    p.then(forget, forget);
    return p;
  }

  private finish(executionArn: string, outcome: Partial<ExecutionRecord> & { status: ExecutionStatus } | undefined): void {
    this.running.delete(executionArn);
    const rec = this.records.get(executionArn);
    // After stop() an execution stays RUNNING on disk (it resumes on the next start); after
    // StopExecution it is already ABORTED.
    if (this.closed || !outcome || rec?.status !== 'RUNNING') return;
    this.save({ ...rec, ...outcome, stopDate: new Date().toISOString() });
  }

  private save(rec: ExecutionRecord): void {
    this.records.set(rec.executionArn, rec);
    const file = join(this.executionsDir, `${rec.machine}@${rec.name}.json`);
    const temp = `${file}.${process.pid}.${++this.tempCounter}.tmp`;
    writeFileSync(temp, JSON.stringify(rec, null, 2));
    renameSync(temp, file);
  }

  /** Aborts running executions without closing them (they resume on the next start). */
  async stop(): Promise<void> {
    this.closed = true;
    for (const execution of this.running.values()) execution.abort();
    this.running.clear();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.inflight]),
      new Promise((r) => {
        timer = setTimeout(r, STOP_GRACE_MS);
      }),
    ]);
    clearTimeout(timer);
  }

  // ---- the API ----

  async handle(target: string | undefined, body: string): Promise<{ status: number; body: unknown }> {
    try {
      const op = target?.startsWith('AWSStepFunctions.') ? target.slice('AWSStepFunctions.'.length) : undefined;
      let request: Record<string, unknown>;
      try {
        request = (body ? JSON.parse(body) : {}) as Record<string, unknown>;
      } catch {
        throw new StepFunctionsApiError('SerializationException', 'Request body is not valid JSON');
      }
      return { status: 200, body: this.call(op, request) };
    } catch (e) {
      if (e instanceof StepFunctionsApiError) return { status: e.status, body: { __type: e.type, message: e.message } };
      return { status: 500, body: { __type: 'InternalFailure', message: (e as Error).message } };
    }
  }

  private call(op: string | undefined, req: Record<string, unknown>): unknown {
    switch (op) {
      case 'StartExecution':
        return this.startExecution(req);
      case 'DescribeExecution':
        return this.describeExecution(req);
      case 'ListExecutions':
        return this.listExecutions(req);
      case 'StopExecution':
        return this.stopExecution(req);
      case 'ListStateMachines':
        return this.listStateMachines(req);
      case 'DescribeStateMachine':
        return this.describeStateMachine(req);
      default:
        throw new StepFunctionsApiError('UnknownOperationException', `Operation ${op ?? '(none)'} is not supported by the local Step Functions`);
    }
  }

  private machineOf(arn: unknown): LoadedMachine {
    if (typeof arn !== 'string' || !arn.startsWith('arn:aws:states:')) throw new StepFunctionsApiError('InvalidArn', `Invalid Arn: '${String(arn)}'`);
    const machine = this.machines.get(arn);
    if (machine) return machine;
    const why = this.unavailable.get(arn);
    throw new StepFunctionsApiError('StateMachineDoesNotExist', `State Machine Does Not Exist: '${arn}'${why ? ` (local: ${why})` : ''}`);
  }

  private executionOf(arn: unknown): ExecutionRecord {
    if (typeof arn !== 'string' || !arn.startsWith('arn:aws:states:')) throw new StepFunctionsApiError('InvalidArn', `Invalid Arn: '${String(arn)}'`);
    const rec = this.records.get(arn);
    if (!rec) throw new StepFunctionsApiError('ExecutionDoesNotExist', `Execution Does Not Exist: '${arn}'`);
    return rec;
  }

  /**
   * As on AWS for STANDARD machines: the same name and input as a RUNNING execution returns that
   * execution; a name already used by a closed execution, or with other input, is refused.
   */
  private startExecution(req: Record<string, unknown>) {
    if (this.closed) throw new StepFunctionsApiError('ServiceUnavailable', 'The local stack is stopping', 503);
    const machine = this.machineOf(req.stateMachineArn);
    const name = req.name === undefined ? randomUUID() : req.name;
    if (typeof name !== 'string' || !/^[A-Za-z0-9_.-]{1,80}$/.test(name)) {
      throw new StepFunctionsApiError('InvalidName', `Invalid Name: '${String(name)}' (1-80 of A-Z a-z 0-9 - _ .)`);
    }
    const input = req.input === undefined ? '{}' : req.input;
    if (typeof input !== 'string' || Buffer.byteLength(input) > MAX_INPUT_BYTES) throw new StepFunctionsApiError('InvalidExecutionInput', 'Invalid execution input');
    try {
      JSON.parse(input);
    } catch {
      throw new StepFunctionsApiError('InvalidExecutionInput', `Invalid State Machine Execution Input: 'input is not valid JSON'`);
    }
    const executionArn = `arn:aws:states:${machine.arn.split(':')[3]}:${LOCAL_ACCOUNT}:execution:${machine.fullName}:${name}`;
    const existing = this.records.get(executionArn);
    if (existing) {
      if (existing.status === 'RUNNING' && existing.input === input) return { executionArn, startDate: epochSeconds(existing.startDate) };
      throw new StepFunctionsApiError('ExecutionAlreadyExists', `Execution Already Exists: '${executionArn}'`);
    }
    const rec: ExecutionRecord = {
      executionArn,
      stateMachineArn: machine.arn,
      machine: machine.wiring.name,
      name,
      input,
      status: 'RUNNING',
      startDate: new Date().toISOString(),
    };
    this.save(rec);
    this.launch(rec);
    return { executionArn, startDate: epochSeconds(rec.startDate) };
  }

  private describeExecution(req: Record<string, unknown>) {
    const rec = this.executionOf(req.executionArn);
    return {
      executionArn: rec.executionArn,
      stateMachineArn: rec.stateMachineArn,
      name: rec.name,
      status: rec.status,
      startDate: epochSeconds(rec.startDate),
      stopDate: epochSeconds(rec.stopDate),
      input: rec.input,
      inputDetails: { included: true },
      ...(rec.output !== undefined ? { output: rec.output, outputDetails: { included: true } } : {}),
      error: rec.error,
      cause: rec.cause,
    };
  }

  private listExecutions(req: Record<string, unknown>) {
    const machine = this.machineOf(req.stateMachineArn);
    const all = [...this.records.values()]
      .filter((r) => r.stateMachineArn === machine.arn && (req.statusFilter === undefined || r.status === req.statusFilter))
      .sort((a, b) => b.startDate.localeCompare(a.startDate) || a.name.localeCompare(b.name));
    const pageSize = typeof req.maxResults === 'number' && req.maxResults > 0 ? Math.min(req.maxResults, 1000) : 100;
    const from = typeof req.nextToken === 'string' ? Number(Buffer.from(req.nextToken, 'base64').toString('utf8')) || 0 : 0;
    const page = all.slice(from, from + pageSize);
    return {
      executions: page.map((r) => ({
        executionArn: r.executionArn,
        stateMachineArn: r.stateMachineArn,
        name: r.name,
        status: r.status,
        startDate: epochSeconds(r.startDate),
        stopDate: epochSeconds(r.stopDate),
      })),
      ...(from + pageSize < all.length ? { nextToken: Buffer.from(String(from + pageSize)).toString('base64') } : {}),
    };
  }

  private stopExecution(req: Record<string, unknown>) {
    const rec = this.executionOf(req.executionArn);
    if (rec.status === 'RUNNING') {
      this.save({
        ...rec,
        status: 'ABORTED',
        ...(typeof req.error === 'string' ? { error: req.error } : {}),
        ...(typeof req.cause === 'string' ? { cause: req.cause } : {}),
        stopDate: new Date().toISOString(),
      });
      this.running.get(rec.executionArn)?.abort();
      this.running.delete(rec.executionArn);
    }
    return { stopDate: epochSeconds(this.records.get(rec.executionArn)!.stopDate) };
  }

  private listStateMachines(_req: Record<string, unknown>) {
    return {
      stateMachines: [...this.machines.values()].map((m) => ({
        stateMachineArn: m.arn,
        name: m.fullName,
        type: 'STANDARD',
        creationDate: m.creationDate.getTime() / 1000,
      })),
    };
  }

  private describeStateMachine(req: Record<string, unknown>) {
    const m = this.machineOf(req.stateMachineArn);
    return {
      stateMachineArn: m.arn,
      name: m.fullName,
      status: 'ACTIVE',
      definition: m.definitionText,
      roleArn: LOCAL_ROLE_ARN,
      type: 'STANDARD',
      creationDate: m.creationDate.getTime() / 1000,
      description: m.wiring.description,
    };
  }
}

/** The default for `ecs:runTask.sync` until the copy worker is wired in (see TaskIntegration). */
const ecsRunTaskNotWired: TaskIntegration = async (_input, task) => {
  throw Object.assign(new Error(`Task "${task.stateName}": ${ECS_RUN_TASK_SYNC} has no local integration yet`), { name: 'States.TaskFailed' });
};

function waitScale(): number {
  const raw = process.env.FERRY_LOCAL_WAIT_SCALE;
  const scale = raw === undefined || raw === '' ? 1 : Number(raw);
  return Number.isFinite(scale) && scale >= 0 ? scale : 1;
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

/** Refuses what aws-local-stepfunctions would run wrongly without saying so (see TOOLCHAIN.md). */
function refuseUnsupported(definition: StateMachineDefinition, where: string): void {
  const problems = unsupportedFeatures(definition);
  if (problems.length > 0) throw new Error(`${where}: outside what the local interpreter runs faithfully: ${problems.join('; ')}`);
}

function outcomeOfFailure(e: unknown): (Partial<ExecutionRecord> & { status: ExecutionStatus }) | undefined {
  if (e instanceof ExecutionAbortedError) return undefined; // StopExecution or stop() recorded it already
  if (e instanceof ExecutionTimeoutError) return { status: 'TIMED_OUT', error: 'States.Timeout', cause: 'The execution timed out (TimeoutSeconds)' };
  if (e instanceof ExecutionError) {
    const inner = e.cause as Error | undefined;
    return { status: 'FAILED', error: inner?.name ?? 'States.Runtime', cause: inner?.message ?? e.message };
  }
  return { status: 'FAILED', error: 'States.Runtime', cause: e instanceof Error ? e.message : String(e) };
}
