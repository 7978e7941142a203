/**
 * The local Step Functions endpoint, driven through the SDK's SFNClient exactly as functions drive
 * it: fixture machines (test/fixtures/local-stack) with fixture step handlers, no DynamoDB needed.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { executionAsyncId } from 'node:async_hooks';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  DescribeExecutionCommand,
  DescribeStateMachineCommand,
  ListExecutionsCommand,
  ListStateMachinesCommand,
  SFNClient,
  StartExecutionCommand,
  StopExecutionCommand,
  type DescribeExecutionCommandOutput,
} from '@aws-sdk/client-sfn';
import { STEP_FUNCTIONS_PATH, startHttpServer, type LocalHttpServer } from '../../infra/local/http.js';
import { LocalStepFunctions } from '../../infra/local/stepfunctions.js';
import { eventually } from '../support/poll.js';
import { FIXTURE_FUNCTIONS, FIXTURE_MACHINES, fixtureMachineArn } from '../fixtures/local-stack/wiring.js';
import { COPY_TASK_RESOURCE, COPY_TASK_TIMEOUT_SECONDS, MACHINE_POLICIES, RETRIERS } from '../../infra/asl/policy.js';
import type { TaskIntegration } from '../../infra/local/stepfunctions.js';

let dataDir: string;
let stepFunctions: LocalStepFunctions;
let server: LocalHttpServer;
let client: SFNClient;

beforeAll(async () => {
  // Wait states of 100 s and 300 s take 1 s and 3 s.
  process.env.FERRY_LOCAL_WAIT_SCALE = '0.01';
  dataDir = await mkdtemp(join(tmpdir(), 'ferry-sfn-'));
  stepFunctions = new LocalStepFunctions({ dataDir, functions: FIXTURE_FUNCTIONS, machines: FIXTURE_MACHINES, quiet: true });
  server = await startHttpServer({ port: 0, functions: FIXTURE_FUNCTIONS, stepFunctions, quiet: true });
  client = new SFNClient({ region: 'us-east-1', endpoint: server.url + STEP_FUNCTIONS_PATH, credentials: { accessKeyId: 'ferry', secretAccessKey: 'ferry' } });
});

afterAll(async () => {
  client?.destroy();
  await server?.close();
  await stepFunctions?.stop();
  await rm(dataDir, { recursive: true, force: true });
});

const start = (machine: string, input: unknown, name?: string) =>
  client.send(new StartExecutionCommand({ stateMachineArn: fixtureMachineArn(machine), input: JSON.stringify(input), ...(name ? { name } : {}) }));

const finished = (executionArn: string) =>
  eventually(async () => {
    const out = await client.send(new DescribeExecutionCommand({ executionArn }));
    return out.status === 'RUNNING' ? undefined : out;
  }, `execution ${executionArn} to finish`);

describe('state machines', () => {
  test('ListStateMachines and DescribeStateMachine show the loaded machines with Lambda ARNs substituted', async () => {
    // Act
    const list = await client.send(new ListStateMachinesCommand({}));
    const described = await client.send(new DescribeStateMachineCommand({ stateMachineArn: fixtureMachineArn('fixture-fail') }));

    // Assess
    expect(list.stateMachines?.map((m) => m.name).sort()).toEqual(FIXTURE_MACHINES.map((m) => `ferry-${m.name}`).sort());
    expect(described.status).toBe('ACTIVE');
    expect(described.definition).toContain('arn:aws:lambda:us-east-1:000000000000:function:ferry-fixture-steps');
    expect(described.definition).not.toContain('${');
  });

  test('a machine using a task token is refused when it is loaded', async () => {
    // Prepare
    const tokenMachine = { name: 'task-token', file: 'test/fixtures/local-stack/task-token.asl.json', description: 'refused', functions: ['fixture-steps'] };

    // Act + Assess
    expect(() => new LocalStepFunctions({ dataDir, functions: FIXTURE_FUNCTIONS, machines: [tokenMachine], quiet: true })).toThrow(/task token/);
  });
});

describe('executions', () => {
  test('Task + Choice + Wait + Map (with lambda:invoke) runs to SUCCEEDED with the right output', async () => {
    // Act
    const { executionArn } = await start('fixture-pipeline', { items: [1, 2, 3] }, 'pipeline-1');
    const out = await finished(executionArn!);

    // Assess: (1+2+3)*2, and the Context object carries the execution name.
    expect(out.status).toBe('SUCCEEDED');
    expect(JSON.parse(out.output!)).toEqual({ sum: 12, execution: 'pipeline-1' });
    expect(out.stopDate).toBeInstanceOf(Date);
  });

  test("once an execution's steps have ended, no async hook runs on the process's promises (the step scope is off)", async () => {
    // Prepare: a promise callback sees a non-zero executionAsyncId only while some hook tracks promises.
    const asyncIdInCallback = () => new Promise<number>((resolve) => void Promise.resolve().then(() => resolve(executionAsyncId())));

    // Act
    const { executionArn } = await start('fixture-pipeline', { items: [1, 2] });
    const out = await finished(executionArn!);

    // Assess
    expect(out.status).toBe('SUCCEEDED');
    expect(await asyncIdInCallback()).toBe(0);
  });

  test('the Choice default branch runs when there is nothing to map', async () => {
    // Act
    const { executionArn } = await start('fixture-pipeline', { items: [] });
    const out = await finished(executionArn!);

    // Assess
    expect(out.status).toBe('SUCCEEDED');
    expect(JSON.parse(out.output!)).toEqual({ sum: 0 });
  });

  test('a failing Task fails the execution with the Lambda error type and cause', async () => {
    // Act
    const { executionArn } = await start('fixture-fail', {});
    const out: DescribeExecutionCommandOutput = await finished(executionArn!);

    // Assess: as on AWS, Error is the errorType and Cause is Lambda's JSON error document.
    expect(out.status).toBe('FAILED');
    expect(out.error).toBe('DiskFull');
    expect(JSON.parse(out.cause!)).toMatchObject({ errorType: 'DiskFull', errorMessage: 'no space left on pool-a' });
    expect(out.output).toBeUndefined();
  });

  test('StartExecution is idempotent by name while running; other input or a closed execution is ExecutionAlreadyExists', async () => {
    // Prepare
    const first = await start('fixture-wait', { id: 'a' }, 'idem-1');

    // Act
    const again = await start('fixture-wait', { id: 'a' }, 'idem-1');
    const otherInput = await start('fixture-wait', { id: 'b' }, 'idem-1').catch((e: Error) => e);
    await finished(first.executionArn!);
    const afterClose = await start('fixture-wait', { id: 'a' }, 'idem-1').catch((e: Error) => e);

    // Assess
    expect(again.executionArn).toBe(first.executionArn);
    expect(first.executionArn).toBe('arn:aws:states:us-east-1:000000000000:execution:ferry-fixture-wait:idem-1');
    expect(otherInput).toBeInstanceOf(Error);
    expect((otherInput as Error).name).toBe('ExecutionAlreadyExists');
    expect((otherInput as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode).toBe(400);
    expect((afterClose as Error).name).toBe('ExecutionAlreadyExists');
  });

  test('StopExecution aborts a running execution, and ListExecutions filters by status', async () => {
    // Prepare
    const { executionArn } = await start('fixture-wait', { id: 'stop-me' }, 'stop-1');

    // Act
    await client.send(new StopExecutionCommand({ executionArn, error: 'Operator', cause: 'changed my mind' }));
    const out = await client.send(new DescribeExecutionCommand({ executionArn }));
    const aborted = await client.send(new ListExecutionsCommand({ stateMachineArn: fixtureMachineArn('fixture-wait'), statusFilter: 'ABORTED' }));
    const running = await client.send(new ListExecutionsCommand({ stateMachineArn: fixtureMachineArn('fixture-wait'), statusFilter: 'RUNNING' }));

    // Assess
    expect(out).toMatchObject({ status: 'ABORTED', error: 'Operator', cause: 'changed my mind' });
    expect(aborted.executions?.map((e) => e.name)).toContain('stop-1');
    expect(running.executions?.map((e) => e.name) ?? []).not.toContain('stop-1');
  });

  test('an unknown state machine is StateMachineDoesNotExist', async () => {
    // Act
    const err = await start('no-such-machine', {}).catch((e: Error) => e);

    // Assess
    expect((err as Error).name).toBe('StateMachineDoesNotExist');
  });

  test('each execution is a JSON file in the data directory, read again by a new service on the same directory', async () => {
    // Prepare
    const { executionArn } = await start('fixture-pipeline', { items: [5] }, 'persisted-1');
    await finished(executionArn!);

    // Act
    const files = await readdir(join(dataDir, 'stepfunctions', 'executions'));
    const onDisk = JSON.parse(await readFile(join(dataDir, 'stepfunctions', 'executions', 'fixture-pipeline@persisted-1.json'), 'utf8'));
    const reopened = new LocalStepFunctions({ dataDir, functions: FIXTURE_FUNCTIONS, machines: FIXTURE_MACHINES, quiet: true });
    const described = await reopened.handle('AWSStepFunctions.DescribeExecution', JSON.stringify({ executionArn }));
    await reopened.stop();

    // Assess
    expect(files.filter((f) => f.endsWith('.tmp'))).toEqual([]);
    expect(onDisk).toMatchObject({ executionArn, status: 'SUCCEEDED', input: JSON.stringify({ items: [5] }) });
    expect(described.status).toBe(200);
    expect(described.body).toMatchObject({ status: 'SUCCEEDED', output: JSON.stringify({ sum: 10, execution: 'persisted-1' }) });
  });
});

// The retry and timeout policy (infra/asl/policy.ts) as the interpreter runs it: the machine's
// TimeoutSeconds, a Task's TimeoutSeconds, and the copy task's Retry, whose waits the scale shortens.
describe('timeouts and retries', () => {
  let dir: string;
  let sfn: LocalStepFunctions;
  const launches: Record<string, number> = {};
  /** The copy task's stand-in: refused twice (no capacity), then done; or done only after its 1 s timeout. */
  const copyTask: TaskIntegration = async (_input, task) => {
    launches[task.stateName] = (launches[task.stateName] ?? 0) + 1;
    if (task.stateName === 'Hang') return new Promise((done) => setTimeout(() => done({ LastStatus: 'STOPPED' }), 3000));
    if (launches[task.stateName]! <= 2) throw Object.assign(new Error('Capacity is unavailable at this time.'), { name: 'ECS.AmazonECSException' });
    return { LastStatus: 'STOPPED' };
  };
  const catchAll = [{ ErrorEquals: ['States.ALL'], ResultPath: '$.error', Next: 'Caught' }];
  const machines = {
    'policy-machine-timeout': { TimeoutSeconds: 1, StartAt: 'Long', States: { Long: { Type: 'Wait', Seconds: 300, End: true } } },
    'policy-task-timeout': {
      TimeoutSeconds: MACHINE_POLICIES['share-migration-start'].timeoutSeconds,
      StartAt: 'Hang',
      States: { Hang: { Type: 'Task', Resource: COPY_TASK_RESOURCE, TimeoutSeconds: 1, Catch: catchAll, End: true }, Caught: { Type: 'Pass', End: true } },
    },
    'policy-copy-retry': {
      TimeoutSeconds: MACHINE_POLICIES['share-migration-start'].timeoutSeconds,
      StartAt: 'Copy',
      States: {
        Copy: { Type: 'Task', Resource: COPY_TASK_RESOURCE, TimeoutSeconds: COPY_TASK_TIMEOUT_SECONDS, Retry: [RETRIERS.copyTaskLaunch], ResultPath: '$.task', Catch: catchAll, End: true },
        Caught: { Type: 'Pass', End: true },
      },
    },
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ferry-sfn-policy-'));
    for (const [name, definition] of Object.entries(machines)) await writeFile(join(dir, `${name}.asl.json`), JSON.stringify(definition));
    sfn = new LocalStepFunctions({
      dataDir: dir,
      functions: FIXTURE_FUNCTIONS,
      machines: Object.keys(machines).map((name) => ({ name, file: join(dir, `${name}.asl.json`), description: name, functions: [] })),
      integrations: { [COPY_TASK_RESOURCE]: copyTask },
      quiet: true,
    });
  });

  afterAll(async () => {
    await sfn?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const run = async (machine: keyof typeof machines) => {
    const started = await sfn.handle('AWSStepFunctions.StartExecution', JSON.stringify({ stateMachineArn: fixtureMachineArn(machine), input: '{}' }));
    const { executionArn } = started.body as { executionArn: string };
    return eventually(async () => {
      const { body } = await sfn.handle('AWSStepFunctions.DescribeExecution', JSON.stringify({ executionArn }));
      const out = body as { status: string; error?: string; output?: string };
      return out.status === 'RUNNING' ? undefined : out;
    }, `${machine} to finish`);
  };

  test("the machine's TimeoutSeconds ends the execution TIMED_OUT (not scaled: the 3 s scaled wait outlasts it)", async () => {
    const out = await run('policy-machine-timeout');
    expect(out).toMatchObject({ status: 'TIMED_OUT', error: 'States.Timeout' });
  });

  test("a Task's TimeoutSeconds is States.Timeout, which the Catch sees; the machine's 20 days do not fire early", async () => {
    const out = await run('policy-task-timeout');
    expect(out.status).toBe('SUCCEEDED');
    expect(JSON.parse(out.output!).error).toMatchObject({ Error: 'States.Timeout' });
  });

  test('the copy task is launched again after a refused launch, the 30 s and 60 s waits shortened by FERRY_LOCAL_WAIT_SCALE', async () => {
    const t0 = Date.now();
    const out = await run('policy-copy-retry');
    expect(out.status).toBe('SUCCEEDED');
    expect(JSON.parse(out.output!)).toEqual({ task: { LastStatus: 'STOPPED' } });
    expect(launches.Copy).toBe(3);
    expect(Date.now() - t0).toBeLessThan(20_000);
  });
});
