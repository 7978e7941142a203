/**
 * The local `arn:aws:states:::ecs:runTask.sync` integration: runs the copy worker
 * (functions/copy/main.ts) as a child process with the environment the Fargate task would get, and
 * resolves when it exits, as `.sync` does on AWS (where Step Functions polls DescribeTasks until the
 * task is STOPPED).
 *
 * Input (the Task's resolved Parameters): Cluster, TaskDefinition, LaunchType and
 * NetworkConfiguration are placeholders locally (echoed in the output, otherwise ignored); what
 * matters is `Overrides.ContainerOverrides[Name = copy-worker].Environment`.
 *
 * The child's environment: this process's environment (so FERRY_DYNAMODB_ENDPOINT, FERRY_TABLE_*
 * and AWS_REGION are inherited), then the override Environment, then FERRY_COPY_EXIT_WITH_PARENT=1
 * and FERRY_FAULTS = the `copy` faults injected in this process now (the child gets copies).
 *
 * Output: the stopped task as `.sync` returns it (DescribeTasks' task, PascalCase):
 *   { TaskArn, ClusterArn, TaskDefinitionArn, LaunchType, LastStatus: 'STOPPED', DesiredStatus:
 *     'STOPPED', StopCode, StoppedReason, CreatedAt, StartedAt, StoppedAt, Overrides,
 *     Containers: [{ Name: 'copy-worker', ExitCode, LastStatus: 'STOPPED', Reason? }] }
 * A non-zero exit, a signal, or a child that cannot start rejects with an Error named
 * `States.TaskFailed` whose message (the execution's Cause) is that task object as JSON, as on AWS.
 *
 * The child's output goes to `<logDir>/<task id>.log` when quiet, else to this process's stderr
 * with each line prefixed `[copy-task <task id>] `. The child is unref'd: it never keeps this
 * process alive, and a child still running when the stack stops is left to finish, to be
 * superseded by the next worker of its operation (generation fencing), or to exit with this
 * process (FERRY_COPY_EXIT_WITH_PARENT).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { quietAwsSdk } from './quiet-sdk.js';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { constants as osConstants } from 'node:os';
import { faultsOfKindForEnv, FAULTS_ENV } from '../../functions/core/faults.js';
import { COPY_FAULT_KIND } from '../../functions/copy/faults.js';
import { LOCAL_ACCOUNT, REPO_ROOT, localRegion } from './http.js';
import type { TaskIntegration } from './stepfunctions.js';

/** The container name of the copy worker in the Fargate task definition (infra/aws). */
export const COPY_CONTAINER_NAME = 'copy-worker';
export const COPY_ENTRYPOINT = join(REPO_ROOT, 'functions/copy/main.ts');

export interface CopyTaskOptions {
  /** Where quiet runs write each child's output (`<task id>.log`); default `<FERRY_DATA_DIR or tmp>/copy-tasks`. */
  logDir?: string;
  /** Child output to log files instead of this process's stderr. */
  quiet?: boolean;
  /** Variables added after the override Environment (tests). */
  env?: Record<string, string>;
  /** Default: functions/copy/main.ts. */
  entrypoint?: string;
}

type Json = Parameters<TaskIntegration>[0];

interface RunTaskParameters {
  Cluster?: string;
  TaskDefinition?: string;
  LaunchType?: string;
  Overrides?: { ContainerOverrides?: { Name?: string; Environment?: { Name?: string; Value?: string }[] }[] };
}

export interface StoppedTask {
  TaskArn: string;
  ClusterArn: string;
  TaskDefinitionArn: string;
  LaunchType: string;
  LastStatus: 'STOPPED';
  DesiredStatus: 'STOPPED';
  StopCode: 'EssentialContainerExited' | 'TaskFailedToStart';
  StoppedReason: string;
  CreatedAt: number;
  StartedAt?: number;
  StoppedAt: number;
  Overrides: unknown;
  Containers: { Name: string; ExitCode?: number; LastStatus: 'STOPPED'; Reason?: string }[];
}

/** Children started by integrations of this process and still running (tests, diagnostics). */
export const runningCopyTasks = new Map<string, ChildProcess>();

function namePart(value: string | undefined, kind: 'cluster' | 'task-definition', fallback: string): string {
  if (!value) return fallback;
  const marker = `:${kind}/`;
  const at = value.indexOf(marker);
  return at >= 0 ? value.slice(at + marker.length) : value;
}

/** The failure of a Task the way Step Functions reports `.sync` failures of ECS: States.TaskFailed, Cause = the task. */
export function taskFailed(task: StoppedTask): Error {
  return Object.assign(new Error(JSON.stringify(task)), { name: 'States.TaskFailed' });
}

/** The integration, plus `stop()`: the local stack stops the workers it started when it stops. */
export type CopyTaskIntegration = TaskIntegration & { stop(): Promise<void> };

/** How long a stopped worker gets to exit on SIGTERM before SIGKILL. */
const STOP_GRACE_MS = 3000;

export function copyTaskIntegration(options: CopyTaskOptions = {}): CopyTaskIntegration {
  const mine = new Set<ChildProcess>();
  let stopped = false;
  const integration: TaskIntegration = async (input) => {
    if (stopped) throw Object.assign(new Error('The local stack is stopping; no copy task is started.'), { name: 'States.TaskFailed' });
    const params = (input ?? {}) as RunTaskParameters;
    const override = params.Overrides?.ContainerOverrides?.find((c) => c.Name === COPY_CONTAINER_NAME);
    const others = params.Overrides?.ContainerOverrides?.filter((c) => c.Name !== COPY_CONTAINER_NAME) ?? [];
    if (others.length > 0) {
      // What RunTask answers for an override of a container the task definition does not have.
      throw Object.assign(new Error(`Override for container named ${others[0]!.Name} is not a container in the TaskDefinition.`), {
        name: 'ECS.InvalidParameterException',
      });
    }
    const overrideEnv: Record<string, string> = {};
    for (const { Name, Value } of override?.Environment ?? []) if (Name) overrideEnv[Name] = Value ?? '';

    const region = localRegion();
    const cluster = namePart(params.Cluster, 'cluster', 'default');
    const taskDefinition = namePart(params.TaskDefinition, 'task-definition', 'ferry-copy-worker');
    const taskId = randomUUID().replace(/-/g, '');
    const base = {
      TaskArn: `arn:aws:ecs:${region}:${LOCAL_ACCOUNT}:task/${cluster}/${taskId}`,
      ClusterArn: `arn:aws:ecs:${region}:${LOCAL_ACCOUNT}:cluster/${cluster}`,
      TaskDefinitionArn: `arn:aws:ecs:${region}:${LOCAL_ACCOUNT}:task-definition/${taskDefinition.includes(':') ? taskDefinition : `${taskDefinition}:1`}`,
      LaunchType: params.LaunchType ?? 'FARGATE',
      LastStatus: 'STOPPED' as const,
      DesiredStatus: 'STOPPED' as const,
      Overrides: params.Overrides ?? { ContainerOverrides: [] },
    };

    // Quiet as the stack is (quiet-sdk.ts): a worker's log is for the copy, not the SDK's Node-version notice.
    const env: NodeJS.ProcessEnv = { ...quietAwsSdk({ ...process.env }), ...overrideEnv, ...options.env, FERRY_COPY_EXIT_WITH_PARENT: '1' };
    const faults = faultsOfKindForEnv(COPY_FAULT_KIND);
    // Always replace what this process inherited: only the copy faults injected now go to the child.
    if (faults === '[]') delete env[FAULTS_ENV];
    else env[FAULTS_ENV] = faults;

    let logFd: number | undefined;
    if (options.quiet) {
      const dir = options.logDir ?? join(process.env.FERRY_DATA_DIR ?? join(REPO_ROOT, '.ferry'), 'copy-tasks');
      mkdirSync(dir, { recursive: true });
      logFd = openSync(join(dir, `${taskId}.log`), 'a');
    }
    const createdAt = Date.now() / 1000;
    let child: ChildProcess;
    try {
      child = spawn(process.execPath, ['--import', 'tsx', options.entrypoint ?? COPY_ENTRYPOINT], {
        cwd: REPO_ROOT,
        env,
        stdio: ['ignore', logFd ?? 'pipe', logFd ?? 'pipe'],
      });
    } finally {
      // The child holds its own copy of the descriptor.
      if (logFd !== undefined) closeSync(logFd);
    }
    runningCopyTasks.set(taskId, child);
    mine.add(child);
    child.once('exit', () => mine.delete(child));
    // Never keep this process alive for a copy: it exits with us (FERRY_COPY_EXIT_WITH_PARENT).
    child.unref();
    for (const stream of [child.stdout, child.stderr]) {
      if (!stream) continue;
      (stream as unknown as { unref?: () => void }).unref?.();
      const lines = createInterface({ input: stream, crlfDelay: Infinity });
      lines.on('line', (line) => process.stderr.write(`[copy-task ${taskId}] ${line}\n`));
      lines.on('error', () => undefined);
    }

    return await new Promise<Json>((resolve, reject) => {
      let startedAt: number | undefined;
      child.once('spawn', () => (startedAt = Date.now() / 1000));
      child.once('error', (e) => {
        runningCopyTasks.delete(taskId);
        if (child.pid !== undefined && startedAt !== undefined) return; // 'exit' follows
        reject(
          taskFailed({
            ...base,
            StopCode: 'TaskFailedToStart',
            StoppedReason: `CannotStartContainerError: ${e.message}`,
            CreatedAt: createdAt,
            StoppedAt: Date.now() / 1000,
            Containers: [{ Name: COPY_CONTAINER_NAME, LastStatus: 'STOPPED', Reason: `CannotStartContainerError: ${e.message}` }],
          }),
        );
      });
      child.once('exit', (code, signal) => {
        runningCopyTasks.delete(taskId);
        // A container killed by a signal reports 128 + the signal's number, as Docker does.
        const exitCode = code ?? 128 + (signal ? (osConstants.signals[signal] ?? 0) : 0);
        const task: StoppedTask = {
          ...base,
          StopCode: 'EssentialContainerExited',
          StoppedReason: 'Essential container in task exited',
          CreatedAt: createdAt,
          ...(startedAt !== undefined ? { StartedAt: startedAt } : {}),
          StoppedAt: Date.now() / 1000,
          Containers: [
            {
              Name: COPY_CONTAINER_NAME,
              ExitCode: exitCode,
              LastStatus: 'STOPPED',
              ...(signal ? { Reason: `killed by ${signal}` } : {}),
            },
          ],
        };
        if (exitCode === 0) resolve(task as unknown as Json);
        else reject(taskFailed(task));
      });
    });
  };
  /**
   * Stops this stack's workers. A stack stopped and started again in the same process (tests, or
   * an embedding program) would otherwise keep an old worker writing into the destination next to
   * the new one, fenced only once its writes reach the database — which, after a restart, may be a
   * new DynamoDB Local the old worker does not talk to. A killed worker resumes from its journal.
   */
  const stop = async () => {
    stopped = true;
    const exits = [...mine].map((child) => new Promise<void>((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', () => resolve()))));
    for (const child of mine) child.kill('SIGTERM');
    const timer = setTimeout(() => {
      for (const child of mine) child.kill('SIGKILL');
    }, STOP_GRACE_MS);
    await Promise.all(exits);
    clearTimeout(timer);
  };
  return Object.assign(integration, { stop });
}
