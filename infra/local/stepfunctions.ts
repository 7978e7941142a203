/**
 * A local Step Functions: the same ASL files CDK deploys, run by aws-local-stepfunctions, behind
 * the Step Functions API (AWS JSON 1.0) so functions start executions with the ordinary SFNClient
 * (FERRY_SFN_ENDPOINT) and people use `aws stepfunctions --endpoint-url <url>/_aws/stepfunctions`.
 *
 * Loading a machine (placeholders, the subset the interpreter runs, what runs each Task) is
 * stepfunctions-machines.ts; running executions (Task overrides, scaled waits) is
 * stepfunctions-runner.ts; this module is the service: the execution records and the API.
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
import { FUNCTIONS, STATE_MACHINES, type FunctionWiring, type StateMachineName, type StateMachineWiring } from '../../functions/wiring.js';
import { stateMachineArn } from '../../functions/core/executions.js';
import { LOCAL_ACCOUNT, REPO_ROOT, type StepFunctionsEndpoint } from './http.js';
import { loadMachine, type LoadedMachine } from './stepfunctions-machines.js';
import { aslValidationCache } from './asl-validation-cache.js';
import { AWS_HISTORY_LIMIT } from './history-count.js';
import { ECS_RUN_TASK_SYNC, ExecutionRunner, ecsRunTaskNotWired, type ExecutionOutcome, type ExecutionStatus, type TaskIntegration } from './stepfunctions-runner.js';

export { LAMBDA_INVOKE } from './stepfunctions-machines.js';
export { ECS_RUN_TASK_SYNC, type ExecutionStatus, type TaskIntegration } from './stepfunctions-runner.js';

export const LOCAL_ROLE_ARN = `arn:aws:iam::${LOCAL_ACCOUNT}:role/ferry-local-stepfunctions`;
const MAX_INPUT_BYTES = 256 * 1024;

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
  /** The events AWS's history would hold for this run (history-count.ts); since its last resume after a restart. */
  historyEvents?: number;
}

export interface LocalStepFunctionsOptions {
  dataDir: string;
  /** Default: STATE_MACHINES of the wiring table. */
  machines?: readonly StateMachineWiring[];
  /** Default: FUNCTIONS of the wiring table. */
  functions?: readonly FunctionWiring[];
  /** Task resources other than Lambda, by resource ARN (the local stack: the copy task). */
  integrations?: Record<string, TaskIntegration>;
  /** Definition substitutions other than the `${Fn...}` ones (CDK's DefinitionSubstitutions). */
  substitutions?: Record<string, string>;
  quiet?: boolean;
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

const epochSeconds = (iso: string | undefined) => (iso === undefined ? undefined : Date.parse(iso) / 1000);

/**
 * The local Step Functions service. A machine's TimeoutSeconds counts from each launch: an
 * execution resumed after a restart gets its whole timeout again (on AWS it counts from the start).
 */
export class LocalStepFunctions implements StepFunctionsEndpoint {
  private readonly executionsDir: string;
  private readonly machines = new Map<string, LoadedMachine>();
  /** Machines of the wiring whose ASL could not be found, with why (StartExecution says so). */
  private readonly unavailable = new Map<string, string>();
  private readonly records = new Map<string, ExecutionRecord>();
  private readonly runner: ExecutionRunner;
  private closed = false;
  private tempCounter = 0;

  constructor(private readonly options: LocalStepFunctionsOptions) {
    const functions = options.functions ?? FUNCTIONS;
    const integrations = { [ECS_RUN_TASK_SYNC]: ecsRunTaskNotWired, ...options.integrations };
    this.runner = new ExecutionRunner({ functions, integrations, onEnd: (arn, outcome) => this.finish(arn, outcome) });
    const validated = aslValidationCache(REPO_ROOT);
    const context = { functions, integrationResources: Object.keys(integrations), substitutions: options.substitutions, validated };
    for (const wiring of options.machines ?? STATE_MACHINES) {
      const file = resolve(REPO_ROOT, wiring.file);
      const arn = stateMachineArn(wiring.name as StateMachineName);
      if (!existsSync(file)) {
        this.unavailable.set(arn, `${wiring.file} not found`);
        if (!options.quiet) console.warn(`ferry local: state machine ${wiring.name} unavailable: ${wiring.file} not found`);
        continue;
      }
      this.machines.set(arn, loadMachine(wiring, arn, readFileSync(file, 'utf8'), context));
    }
    validated.save();
    this.executionsDir = join(options.dataDir, 'stepfunctions', 'executions');
    mkdirSync(this.executionsDir, { recursive: true });
    for (const f of readdirSync(this.executionsDir)) {
      if (!f.endsWith('.json')) continue;
      const rec = JSON.parse(readFileSync(join(this.executionsDir, f), 'utf8')) as ExecutionRecord;
      this.records.set(rec.executionArn, rec);
    }
  }

  // ---- executions ----

  /** Runs again every execution left RUNNING by a previous process (from the start, same input). */
  resumeRunning(): number {
    let resumed = 0;
    for (const rec of this.records.values()) {
      if (rec.status !== 'RUNNING' || this.runner.isRunning(rec.executionArn)) continue;
      const machine = this.machines.get(rec.stateMachineArn);
      if (!machine) {
        if (!this.options.quiet) console.warn(`ferry local: cannot resume ${rec.executionArn}: its state machine is not loaded`);
        continue;
      }
      this.runner.launch(machine, rec, LOCAL_ROLE_ARN);
      resumed++;
    }
    return resumed;
  }

  private finish(executionArn: string, outcome: ExecutionOutcome): void {
    const rec = this.records.get(executionArn);
    // After stop() an execution stays RUNNING on disk (it resumes on the next start); after
    // StopExecution it is already ABORTED.
    if (this.closed || !outcome || rec?.status !== 'RUNNING') return;
    this.save({ ...rec, ...outcome, stopDate: new Date().toISOString() });
    // On AWS this machine would have failed at the limit: said while it is still only local.
    if ((outcome.historyEvents ?? 0) > AWS_HISTORY_LIMIT * 0.8) {
      console.warn(`ferry local: ${rec.machine} execution ${rec.name} made ${outcome.historyEvents} history events; AWS stops an execution at ${AWS_HISTORY_LIMIT}`);
    }
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
    await this.runner.stop();
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
    this.runner.launch(machine, rec, LOCAL_ROLE_ARN);
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
      this.runner.abort(rec.executionArn);
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
