/**
 * Running executions of loaded machines on aws-local-stepfunctions: every Task (also inside Map
 * and Parallel) is overridden, by state name, with what runs it here (the wiring function's handler
 * in-process, or an integration); FERRY_LOCAL_WAIT_SCALE shortens Wait states and Retry intervals.
 * The runner reports how each execution ended; the service (stepfunctions.ts) records it.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { ExecutionAbortedError, ExecutionError, ExecutionTimeoutError, type RunOptions, type StateMachine } from 'aws-local-stepfunctions';
import { faultPoint, onCrash } from '../../functions/core/faults.js';
import type { FunctionWiring } from '../../functions/wiring.js';
import { HistoryCounter, type InterpreterEvent } from './history-count.js';
import { invokeFunction } from './http.js';
import { functionNamed, type LoadedMachine, type TaskBinding } from './stepfunctions-machines.js';

type JSONValue = Parameters<StateMachine['run']>[0];
type Overrides = NonNullable<RunOptions['overrides']>;

export const ECS_RUN_TASK_SYNC = 'arn:aws:states:::ecs:runTask.sync';
/** How long stop() lets in-flight step handlers finish before DynamoDB Local goes away. */
const STOP_GRACE_MS = 10_000;

/**
 * The step a handler call belongs to, so a crash fault (functions/core/faults.ts) that stops it is
 * known here: stop() does not wait for a step that will never return, as a killed process's steps.
 */
const stepScope = new AsyncLocalStorage<{ crashed(): void }>();
onCrash(() => stepScope.getStore()?.crashed());
/**
 * The step handler calls inside stepScope, in all runners. An AsyncLocalStorage that has run turns
 * on Node's async hooks for the whole process (Node 20: an init hook on every promise, timer and
 * socket), and they stay on until it is disabled: the last step to end disables it, so the API's
 * requests between steps run without them (1-2% of the node process's CPU in bench:attachments'
 * 32-client rounds). The next step's run() enables it again.
 */
let stepsInScope = 0;

function leaveStepScope(): void {
  stepsInScope--;
  if (stepsInScope === 0) stepScope.disable();
}

/**
 * The crash points of a step (crash tests, functions/core/faults.ts): kind `step-before` before its
 * handler runs, kind `step` right after it returned — its effects are made, the transition is not
 * recorded. The backend is the machine's wiring name, the method the state's name. A crash there
 * leaves the execution RUNNING, so the next start resumes it.
 */
export const STEP_BEFORE_FAULT_KIND = 'step-before';
export const STEP_FAULT_KIND = 'step';

export type ExecutionStatus = 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'TIMED_OUT' | 'ABORTED';

/** How an execution ended, as recorded (undefined: aborted, recorded already or resumed later). */
export type ExecutionOutcome = { status: ExecutionStatus; output?: string; error?: string; cause?: string; historyEvents?: number } | undefined;

/**
 * Runs a Task whose Resource is a service integration other than Lambda. The local stack registers
 * the copy worker (infra/local/copy-task.ts) for `arn:aws:states:::ecs:runTask.sync`: it runs the
 * worker as a child process and resolves when it exits, as `.sync` does on AWS.
 */
export type TaskIntegration = (input: JSONValue, task: { stateName: string; executionArn: string }) => Promise<JSONValue>;

/**
 * What `ecs:runTask.sync` does when no integration is given for it (a LocalStepFunctions built
 * without the local stack, as the interpreter tests do): the Task fails, as a task that cannot
 * start does. The local stack always passes copyTaskIntegration().
 */
export const ecsRunTaskNotWired: TaskIntegration = async (_input, task) => {
  throw Object.assign(new Error(`Task "${task.stateName}": ${ECS_RUN_TASK_SYNC} has no local integration here (the local stack passes copyTaskIntegration())`), {
    name: 'States.TaskFailed',
  });
};

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

export interface RunnerOptions {
  functions: readonly FunctionWiring[];
  integrations: Record<string, TaskIntegration>;
  /** Called once per launched execution when it ends. */
  onEnd(executionArn: string, outcome: ExecutionOutcome): void;
}

/** The executions running in this process. */
export class ExecutionRunner {
  private readonly running = new Map<string, { abort(): void }>();
  private readonly inflight = new Set<Promise<unknown>>();

  constructor(private readonly options: RunnerOptions) {}

  isRunning(executionArn: string): boolean {
    return this.running.has(executionArn);
  }

  launch(machine: LoadedMachine, execution: { executionArn: string; name: string; input: string; startDate: string }, roleArn: string): void {
    const { executionArn } = execution;
    const run = machine.stateMachine.run(JSON.parse(execution.input) as JSONValue, {
      overrides: this.overridesFor(machine, executionArn),
      context: {
        Execution: { Id: executionArn, Name: execution.name, RoleArn: roleArn, StartTime: execution.startDate },
        StateMachine: { Id: machine.arn, Name: machine.fullName },
      },
    });
    this.running.set(executionArn, run);
    // The event log queues every event until read: drained as it comes (long executions do not
    // grow memory), each counted as the events AWS's history would hold (history-count.ts).
    const history = new HistoryCounter(syncTaskNames(machine));
    const drained = (async () => {
      for await (const event of run.eventLogs) history.add(event as InterpreterEvent);
    })().catch((e: unknown) => console.warn(`ferry local: reading the event log of ${executionArn} failed: ${e instanceof Error ? e.message : String(e)}`));
    // The log ends with the execution's own last event, which may come after the result.
    const ended = (outcome: ExecutionOutcome) => drained.then(() => this.end(executionArn, outcome && { ...outcome, historyEvents: history.events }));
    run.result.then(
      (output) => ended({ status: 'SUCCEEDED', output: JSON.stringify(output ?? null) }),
      (e: unknown) => ended(outcomeOfFailure(e)),
    );
  }

  /** StopExecution: the execution stops at its next state (a running step handler finishes). */
  abort(executionArn: string): void {
    this.running.get(executionArn)?.abort();
    this.running.delete(executionArn);
  }

  /** Aborts every execution and lets in-flight step handlers finish (at most STOP_GRACE_MS). */
  async stop(): Promise<void> {
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

  private end(executionArn: string, outcome: ExecutionOutcome): void {
    this.running.delete(executionArn);
    this.options.onEnd(executionArn, outcome);
  }

  private overridesFor(machine: LoadedMachine, executionArn: string): Overrides {
    const taskResourceLocalHandlers: NonNullable<Overrides['taskResourceLocalHandlers']> = {};
    for (const [stateName, binding] of machine.tasks) {
      const task = { stateName, executionArn, machine: machine.wiring.name };
      taskResourceLocalHandlers[stateName] = (input) => this.track(() => this.runStep(binding, input, task));
    }
    // Wait states really wait; FERRY_LOCAL_WAIT_SCALE shortens fixed `Seconds` waits and Retry
    // intervals (tests): each retry then waits its scaled IntervalSeconds, without the backoff.
    // Waits by SecondsPath/Timestamp cannot be known ahead, so they wait in full. Timeouts (of a
    // Task, of the machine) are never scaled: a scaled timeout would fail runs that AWS finishes.
    const scale = waitScale();
    if (scale === 1) return { taskResourceLocalHandlers };
    const waitTimeOverrides: Record<string, number> = {};
    for (const [stateName, seconds] of machine.waitSeconds) waitTimeOverrides[stateName] = seconds * 1000 * scale;
    const retryIntervalOverrides: Record<string, number[]> = {};
    for (const [stateName, intervals] of machine.retryIntervals) retryIntervalOverrides[stateName] = intervals.map((s) => s * 1000 * scale);
    return { taskResourceLocalHandlers, waitTimeOverrides, retryIntervalOverrides };
  }

  private async runStep(binding: TaskBinding, input: JSONValue, task: { stateName: string; executionArn: string; machine: string }): Promise<JSONValue> {
    await faultPoint(STEP_BEFORE_FAULT_KIND, task.machine, task.stateName);
    const output = await this.runTask(binding, input, task);
    await faultPoint(STEP_FAULT_KIND, task.machine, task.stateName);
    return output;
  }

  private async runTask(binding: TaskBinding, input: JSONValue, task: { stateName: string; executionArn: string }): Promise<JSONValue> {
    switch (binding.kind) {
      case 'lambda':
        return this.invoke(binding.fn, input);
      case 'lambda-invoke': {
        // The optimized integration: Parameters give FunctionName and Payload; the result wraps the
        // function's output in Payload, as on AWS.
        const params = (input ?? {}) as { FunctionName?: string; Payload?: JSONValue };
        const fn = params.FunctionName ? functionNamed(this.options.functions, params.FunctionName) : undefined;
        if (!fn) throw Object.assign(new Error(`Function not found: ${params.FunctionName}`), { name: 'Lambda.ResourceNotFoundException' });
        const payload = await this.invoke(fn, params.Payload ?? {});
        return { ExecutedVersion: '$LATEST', Payload: payload, StatusCode: 200 };
      }
      case 'integration':
        return this.options.integrations[binding.resource]!(input, task);
    }
  }

  private async invoke(fn: FunctionWiring, event: JSONValue): Promise<JSONValue> {
    try {
      return (await invokeFunction(fn, event)) as JSONValue;
    } catch (e) {
      throw new LambdaFunctionError(e);
    }
  }

  /**
   * Remembers a step handler call, so stop() can let it finish before DynamoDB goes away; a call a
   * crash fault stopped is forgotten at once (it never returns).
   */
  private track<T>(step: () => Promise<T>): Promise<T> {
    let crashed!: () => void;
    const untilCrashed = new Promise<void>((resolve) => (crashed = resolve));
    const p = stepScope.run({ crashed }, step);
    stepsInScope++;
    // Ended, failed or crashed: the step leaves the scope once (a crashed one never settles p).
    const waited = Promise.race([p, untilCrashed]);
    this.inflight.add(waited);
    const forget = () => {
      this.inflight.delete(waited);
      leaveStepScope();
    };
    waited.then(forget, forget);
    return p;
  }
}

/** The Task states run by a `.sync` integration (AWS adds TaskSubmitted to each attempt). */
function syncTaskNames(machine: LoadedMachine): Set<string> {
  return new Set([...machine.tasks].filter(([, b]) => b.kind === 'integration' && b.resource.endsWith('.sync')).map(([name]) => name));
}

function waitScale(): number {
  const raw = process.env.FERRY_LOCAL_WAIT_SCALE;
  const scale = raw === undefined || raw === '' ? 1 : Number(raw);
  return Number.isFinite(scale) && scale >= 0 ? scale : 1;
}

function outcomeOfFailure(e: unknown): ExecutionOutcome {
  if (e instanceof ExecutionAbortedError) return undefined; // StopExecution or stop() recorded it already
  if (e instanceof ExecutionTimeoutError) return { status: 'TIMED_OUT', error: 'States.Timeout', cause: 'The execution timed out (TimeoutSeconds)' };
  if (e instanceof ExecutionError) {
    const inner = e.cause as Error | undefined;
    return { status: 'FAILED', error: inner?.name ?? 'States.Runtime', cause: inner?.message ?? e.message };
  }
  return { status: 'FAILED', error: 'States.Runtime', cause: e instanceof Error ? e.message : String(e) };
}
