/**
 * The embedded local stack for an integration or e2e test file: a fresh temp data directory, a
 * free port. Use in beforeAll/afterAll:
 *   const stack = await useLocalStack();  ...  await stack.stop();
 * `stop()` tears everything down (the data directory too); `restart()` stops and starts again on
 * the same data directory and port, which is how a test proves that a restart loses nothing.
 * Its Wait states and Retry intervals run at FERRY_LOCAL_WAIT_SCALE, which test/support/setup.ts
 * sets for every test file. To wait for something the stack does, use `eventually` (./poll.ts).
 * The reconciler runs at each start (as `npm start` does) but not on a timer, so no periodic run
 * repairs what a test planted; pass `reconcile: { intervalSeconds }` to have one. The stack runs
 * the start's pass after it answers (stack.ts reconcileInBackground); `useLocalStack` and
 * `restart()` return once it has ended (LocalStack.reconciled), so a test reads what the restart
 * repaired, unless `reconcileInBackground` asks to return as soon as the stack answers.
 *
 * Where the tier runs a shared DynamoDB Local (test/support/shared-dynamo.ts), the stack keeps its
 * tables there, under the file's table-name prefix, instead of starting a JVM of its own: a JVM
 * start is ~4.5 s of CPU, paid by every stack file of `npm test` on a 2-core machine. The tables
 * outlive `restart()` as they outlive a Ferry restart on AWS (the JVM's own restart from disk is
 * the subject of local-stack.test.ts and start-stop.test.ts, which ask for `dedicatedDynamo`);
 * `stop()` drops them. A second stack of the same file while one runs gets a JVM of its own.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DynamoProcess } from '../../infra/local/dynamo.js';
import { freePort } from '../../infra/local/ports.js';
import { startLocalStack, type LocalStack, type LocalStackOptions } from '../../infra/local/stack.js';
import { dropFileTables, sharedDynamoClient, sharedDynamoEndpoint } from './dynamo.js';

export interface TestLocalStack extends LocalStack {
  /** Stops and starts the stack on the same data directory and port; `whileStopped` runs in between. */
  restart(whileStopped?: () => Promise<void> | void): Promise<void>;
}

export interface TestStackOptions extends Omit<LocalStackOptions, 'dataDir' | 'port' | 'dynamo'> {
  /** A DynamoDB Local of the stack's own, on its data directory, stopped and started with it. */
  dedicatedDynamo?: boolean;
  /** Return from a start as soon as the stack answers, its start's reconcile pass still running (`reconciled`). */
  reconcileInBackground?: boolean;
}

/** Whether a stack of this file holds the shared DynamoDB Local's tables (one prefix per file). */
let sharedTablesHeld = false;

export async function useLocalStack(given: TestStackOptions = {}): Promise<TestLocalStack> {
  const { dedicatedDynamo, reconcileInBackground, ...rest } = given;
  const shared = sharedTablesHeld ? undefined : sharedDynamoEndpoint({ dedicated: dedicatedDynamo });
  if (shared) sharedTablesHeld = true;
  let holdsTables = shared !== undefined;
  const options = { ...rest, reconcile: { intervalSeconds: 0, ...rest.reconcile }, ...(shared ? { dynamo: sharedDynamoProcess(shared) } : {}) };
  const dataDir = await mkdtemp(join(tmpdir(), 'ferry-stack-'));
  // A port below the kernel's ephemeral range (freePort): restart() reuses it, and a kernel-picked
  // port could meanwhile be taken by an outgoing connection (EADDRINUSE on restart).
  let current: LocalStack | undefined;
  const started = async (stack: LocalStack) => {
    if (!reconcileInBackground) await stack.reconciled;
    return stack;
  };
  try {
    current = await started(await startLocalStack({ quiet: true, ...options, dataDir, port: await freePort() }));
  } catch (e) {
    if (shared) await dropTables(shared).catch((dropError: unknown) => console.error('the failed stack left tables in the shared DynamoDB Local:', dropError));
    await rm(dataDir, { recursive: true, force: true });
    throw e;
  }
  const handle: TestLocalStack = {
    url: current.url,
    port: current.port,
    dataDir,
    cloudsYaml: current.cloudsYaml,
    reconciled: current.reconciled,
    async restart(whileStopped) {
      await current?.stop();
      current = undefined;
      await whileStopped?.();
      current = await started(await startLocalStack({ quiet: true, ...options, dataDir, port: handle.port }));
      handle.url = current.url;
      handle.reconciled = current.reconciled;
    },
    async stop() {
      try {
        await current?.stop();
        current = undefined;
        // Once: a file may stop its stack in a test and again in afterAll.
        if (holdsTables && shared) {
          await dropTables(shared);
          holdsTables = false;
        }
      } finally {
        await rm(dataDir, { recursive: true, force: true });
      }
    },
  };
  return handle;
}

/**
 * The shared DynamoDB Local as the stack's launched JVM (LocalStackOptions.dynamo): the stack waits
 * for it and creates its tables (those missing: a restart finds them); its stop leaves it running.
 */
function sharedDynamoProcess(endpoint: string): DynamoProcess {
  return {
    endpoint,
    port: Number(new URL(endpoint).port),
    pid: undefined,
    classArchive: { state: 'off', reason: "the integration tier's shared DynamoDB Local" },
    exited: () => false,
    exit: new Promise(() => {}),
    stopArchiveWriter: async () => undefined,
    stop: async () => {},
  };
}

async function dropTables(endpoint: string): Promise<void> {
  const client = sharedDynamoClient(endpoint);
  try {
    await dropFileTables(client);
    sharedTablesHeld = false;
  } finally {
    client.destroy();
  }
}
