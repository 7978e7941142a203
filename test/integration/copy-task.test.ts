/**
 * The local `ecs:runTask.sync` integration (infra/local/copy-task.ts) with real child processes of
 * the copy worker against the local stack's DynamoDB Local: a state machine Task copies a real
 * tree, a failing worker fails the Task with States.TaskFailed and the task as Cause, faults reach
 * the child through FERRY_FAULTS, and a worker whose parent is killed -9 exits with it
 * (FERRY_COPY_EXIT_WITH_PARENT) while the next worker resumes and completes.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DescribeExecutionCommand, SFNClient, StartExecutionCommand } from '@aws-sdk/client-sfn';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { stateMachineArn } from '../../functions/core/executions.js';
import { journalName } from '../../functions/copy/journal.js';
import { EXIT_CODES } from '../../functions/copy/main.js';
import { getCopyOperation } from '../../functions/copy/progress.js';
import { clearFaults, injectFault } from '../../functions/core/faults.js';
import { COPY_CONTAINER_NAME, COPY_ENTRYPOINT, copyTaskIntegration, runningCopyTasks, type StoppedTask } from '../../infra/local/copy-task.js';
import { REPO_ROOT, STEP_FUNCTIONS_PATH } from '../../infra/local/http.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';
import { content, tempDir, treeDigest, writeManyFiles } from '../support/copy-fixtures.js';

const work = tempDir('copy-task');
const MACHINE = 'copy-task-fixture';
const machineFile = join(work.path, 'copy-task.asl.json');
writeFileSync(
  machineFile,
  JSON.stringify({
    StartAt: 'Copy',
    States: {
      Copy: {
        Type: 'Task',
        Resource: 'arn:aws:states:::ecs:runTask.sync',
        Parameters: {
          Cluster: 'arn:aws:ecs:us-east-1:000000000000:cluster/ferry',
          TaskDefinition: 'ferry-copy-worker',
          LaunchType: 'FARGATE',
          NetworkConfiguration: { AwsvpcConfiguration: { Subnets: ['subnet-local'], SecurityGroups: ['sg-local'], AssignPublicIp: 'DISABLED' } },
          Overrides: {
            ContainerOverrides: [
              {
                Name: 'copy-worker',
                Environment: [
                  { Name: 'FERRY_COPY_OPERATION_ID', 'Value.$': '$.operationId' },
                  { Name: 'FERRY_COPY_SOURCE', 'Value.$': '$.source' },
                  { Name: 'FERRY_COPY_DESTINATION', 'Value.$': '$.destination' },
                ],
              },
            ],
          },
        },
        End: true,
      },
    },
  }),
);

let stack: TestLocalStack;
let sfn: SFNClient;
beforeAll(async () => {
  stack = await useLocalStack({ machines: [{ name: MACHINE, file: machineFile, description: 'copy task fixture', functions: [] }] });
  sfn = new SFNClient({ region: 'us-east-1', endpoint: stack.url + STEP_FUNCTIONS_PATH, credentials: { accessKeyId: 'ferry', secretAccessKey: 'ferry' } });
}, 120_000);
afterAll(async () => {
  sfn?.destroy();
  await stack?.stop();
  work.remove();
});

const cleanups: (() => void)[] = [];
afterEach(() => {
  clearFaults();
  for (const c of cleanups.splice(0)) c();
});

let nextId = 1;
function workspace(): { src: string; dst: string; operationId: string } {
  const dir = join(work.path, `ws-${nextId}`);
  const src = join(dir, 'src');
  mkdirSync(src, { recursive: true });
  return { src, dst: join(dir, 'dst'), operationId: `task-${process.pid}-${nextId++}` };
}

function runTaskParameters(env: Record<string, string>) {
  return {
    Cluster: 'ferry',
    TaskDefinition: 'arn:aws:ecs:us-east-1:000000000000:task-definition/ferry-copy-worker:3',
    LaunchType: 'FARGATE',
    NetworkConfiguration: { AwsvpcConfiguration: { Subnets: ['subnet-1'], SecurityGroups: ['sg-1'], AssignPublicIp: 'DISABLED' } },
    Overrides: { ContainerOverrides: [{ Name: COPY_CONTAINER_NAME, Environment: Object.entries(env).map(([Name, Value]) => ({ Name, Value })) }] },
  };
}

const task = { stateName: 'Copy', executionArn: 'arn:aws:states:us-east-1:000000000000:execution:x:y' };

function journalLines(path: string): number {
  if (!existsSync(path)) return 0;
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.endsWith('}')).length;
}

/** True when no such process runs any more (gone, or a zombie nobody has reaped yet). */
function processGone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z';
  } catch {
    return true;
  }
}

describe('ecs:runTask.sync in the local stack', () => {
  test('a state machine Task runs the worker as a child process against DynamoDB Local and succeeds with the stopped task', async () => {
    // Prepare
    const { src, dst, operationId } = workspace();
    writeManyFiles(src, 40, 20_000);
    writeFileSync(join(src, 'large.bin'), content(3 * 1024 * 1024, 7));

    // Act
    const { executionArn } = await sfn.send(
      new StartExecutionCommand({ stateMachineArn: stateMachineArn(MACHINE as never), input: JSON.stringify({ operationId, source: src, destination: dst }) }),
    );
    const done = await eventually(async () => {
      const out = await sfn.send(new DescribeExecutionCommand({ executionArn }));
      return out.status === 'RUNNING' ? undefined : out;
    }, 'the copy execution to finish', 60_000);

    // Assess
    expect(done.status).toBe('SUCCEEDED');
    const output = JSON.parse(done.output!) as StoppedTask;
    expect(output).toMatchObject({
      LastStatus: 'STOPPED',
      StopCode: 'EssentialContainerExited',
      LaunchType: 'FARGATE',
      ClusterArn: 'arn:aws:ecs:us-east-1:000000000000:cluster/ferry',
      Containers: [{ Name: 'copy-worker', ExitCode: 0, LastStatus: 'STOPPED' }],
    });
    expect(output.TaskArn).toMatch(/^arn:aws:ecs:us-east-1:000000000000:task\/ferry\/[0-9a-f]{32}$/);
    expect(await getCopyOperation(operationId)).toMatchObject({ status: 'completed', filesDone: 41, filesTotal: 41, totalProgress: 100 });
    expect(treeDigest(dst)).toEqual(treeDigest(src));
    // Quiet stack: the child's output went to a log file under the data dir.
    expect(readdirSync(join(stack.dataDir, 'copy-tasks')).some((f) => f.endsWith('.log'))).toBe(true);
  }, 90_000);

  test('a worker that exits non-zero fails the Task with States.TaskFailed and the stopped task as the cause', async () => {
    // Prepare
    const { executionArn } = await sfn.send(
      new StartExecutionCommand({ stateMachineArn: stateMachineArn(MACHINE as never), input: JSON.stringify({ operationId: 'bad/id', source: '/nowhere', destination: '/nowhere' }) }),
    );

    // Act
    const done = await eventually(async () => {
      const out = await sfn.send(new DescribeExecutionCommand({ executionArn }));
      return out.status === 'RUNNING' ? undefined : out;
    }, 'the execution to fail', 60_000);

    // Assess
    expect(done.status).toBe('FAILED');
    expect(done.error).toBe('States.TaskFailed');
    expect(JSON.parse(done.cause!)).toMatchObject({
      LastStatus: 'STOPPED',
      StopCode: 'EssentialContainerExited',
      Containers: [{ Name: 'copy-worker', ExitCode: EXIT_CODES.badConfiguration }],
    });
  }, 90_000);
});

describe('the integration', () => {
  test('a copy_file fail fault injected in this process reaches the child: the record ends failed naming the file', async () => {
    // Prepare
    const { src, dst, operationId } = workspace();
    writeManyFiles(src, 10, 1000);
    writeFileSync(join(src, 'biggest.bin'), content(200_000, 3));
    injectFault({ kind: 'copy', method: 'copy_file', mode: 'fail', times: 1, message: 'disk on fire' });
    const integration = copyTaskIntegration({ quiet: true, logDir: join(work.path, 'logs') });

    // Act
    const error = (await integration(
      runTaskParameters({ FERRY_COPY_OPERATION_ID: operationId, FERRY_COPY_SOURCE: src, FERRY_COPY_DESTINATION: dst }),
      task,
    ).catch((e: Error) => e)) as Error;

    // Assess
    expect(error.name).toBe('States.TaskFailed');
    const cause = JSON.parse(error.message) as StoppedTask;
    expect(cause.Containers[0]).toMatchObject({ Name: 'copy-worker', ExitCode: EXIT_CODES.failed, LastStatus: 'STOPPED' });
    expect(cause.TaskArn).toMatch(/^arn:aws:ecs:us-east-1:000000000000:task\/ferry\/[0-9a-f]{32}$/);
    const record = (await getCopyOperation(operationId))!;
    expect(record.status).toBe('failed');
    // Largest file first: the one the fault hit, named in the record.
    expect(record.error).toBe('Cannot copy biggest.bin: disk on fire');
    expect(existsSync(join(dst, 'biggest.bin'))).toBe(false);
  }, 60_000);

  test('a signal kills the child: rejected with ExitCode 128 + signal', async () => {
    // Prepare: a slow copy, so the worker is still running when it is killed.
    const { src, dst, operationId } = workspace();
    writeFileSync(join(src, 'slow.bin'), content(8 * 1024 * 1024, 5));
    const integration = copyTaskIntegration({ quiet: true, logDir: join(work.path, 'logs') });
    const before = new Set(runningCopyTasks.keys());
    const running = integration(
      runTaskParameters({ FERRY_COPY_OPERATION_ID: operationId, FERRY_COPY_SOURCE: src, FERRY_COPY_DESTINATION: dst, FERRY_COPY_BYTES_PER_SECOND: String(1024 * 1024) }),
      task,
    ).catch((e: Error) => e);
    const [, child] = await eventually(() => [...runningCopyTasks].find(([id]) => !before.has(id)), 'the child to start', { intervalMs: 20 });
    await eventually(() => (existsSync(dst) ? true : undefined), 'the copy to start', { timeoutMs: 30_000, intervalMs: 20 });

    // Act
    child.kill('SIGTERM');
    const error = (await running) as Error;

    // Assess
    expect(error.name).toBe('States.TaskFailed');
    expect(JSON.parse(error.message).Containers[0]).toMatchObject({ ExitCode: 143, Reason: 'killed by SIGTERM' });
  }, 60_000);
});

describe('FERRY_COPY_EXIT_WITH_PARENT', () => {
  test('the worker exits within 2 s of its parent being killed -9, and the next worker resumes to a byte-identical tree', async () => {
    // Prepare: 24 MiB in 96 files at 4 MiB/s; an intermediate parent process starts the worker.
    const { src, dst, operationId } = workspace();
    writeManyFiles(src, 96, 256 * 1024);
    const env = { FERRY_COPY_OPERATION_ID: operationId, FERRY_COPY_SOURCE: src, FERRY_COPY_DESTINATION: dst };
    const parentScript = `
      const { spawn } = require('node:child_process');
      const worker = spawn(process.execPath, ['--import', 'tsx', ${JSON.stringify(COPY_ENTRYPOINT)}], { stdio: 'ignore', env: process.env });
      console.log(worker.pid);
      setInterval(() => {}, 1000);
    `;
    const parent = spawn(process.execPath, ['-e', parentScript], {
      cwd: REPO_ROOT,
      env: { ...process.env, ...env, FERRY_COPY_EXIT_WITH_PARENT: '1', FERRY_COPY_BYTES_PER_SECOND: String(4 * 1024 * 1024), FERRY_COPY_PROGRESS_INTERVAL_MS: '100' },
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    cleanups.push(() => parent.kill('SIGKILL'));
    const workerPid = await new Promise<number>((resolve, reject) => {
      parent.stdout!.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
      parent.once('exit', () => reject(new Error('the parent exited early')));
    });
    cleanups.push(() => {
      if (!processGone(workerPid)) process.kill(workerPid, 'SIGKILL');
    });
    const journal = join(dst, journalName(operationId));
    await eventually((note) => note(journalLines(journal)) >= 10 || undefined, 'ten finished files in the journal', { intervalMs: 20 });

    // Act
    parent.kill('SIGKILL');
    const killedAt = Date.now();
    await eventually(() => processGone(workerPid) || undefined, 'the worker to exit', { timeoutMs: 2_000, intervalMs: 10 });
    const goneAfterMs = Date.now() - killedAt;
    const stopped = (await getCopyOperation(operationId))!;
    const finished = journalLines(journal);
    const resumed = await copyTaskIntegration({ quiet: true, logDir: join(work.path, 'logs') })(runTaskParameters(env), task);

    // Assess
    expect(goneAfterMs).toBeLessThan(2_000);
    expect(stopped.status).toBe('running');
    expect(finished).toBeLessThan(96);
    expect(resumed).toMatchObject({ Containers: [{ ExitCode: 0 }] });
    const record = (await getCopyOperation(operationId))!;
    expect(record).toMatchObject({ status: 'completed', generation: 2, filesDone: 96, filesTotal: 96 });
    expect(record.filesResumed).toBeGreaterThanOrEqual(finished);
    expect(treeDigest(dst)).toEqual(treeDigest(src));
    expect(existsSync(journal)).toBe(false);
  }, 90_000);
});
