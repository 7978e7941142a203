/**
 * The embedded local stack for an integration or e2e test file: a fresh temp data directory, a
 * free port. Use in beforeAll/afterAll:
 *   const stack = await useLocalStack();  ...  await stack.stop();
 * `stop()` tears everything down (the data directory too); `restart()` stops and starts again on
 * the same data directory and port, which is how a test proves that a restart loses nothing.
 * Its Wait states and Retry intervals run at FERRY_LOCAL_WAIT_SCALE, which test/support/setup.ts
 * sets for every test file. To wait for something the stack does, use `eventually` (./poll.ts).
 * The reconciler runs at each start (as `npm start` does) but not on a timer, so no periodic run
 * repairs what a test planted; pass `reconcile: { intervalSeconds }` to have one.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../infra/local/ports.js';
import { startLocalStack, type LocalStack, type LocalStackOptions } from '../../infra/local/stack.js';

export interface TestLocalStack extends LocalStack {
  /** Stops and starts the stack on the same data directory and port; `whileStopped` runs in between. */
  restart(whileStopped?: () => Promise<void> | void): Promise<void>;
}

export async function useLocalStack(given: Omit<LocalStackOptions, 'dataDir' | 'port'> = {}): Promise<TestLocalStack> {
  const options = { ...given, reconcile: { intervalSeconds: 0, ...given.reconcile } };
  const dataDir = await mkdtemp(join(tmpdir(), 'ferry-stack-'));
  // A port below the kernel's ephemeral range (freePort): restart() reuses it, and a kernel-picked
  // port could meanwhile be taken by an outgoing connection (EADDRINUSE on restart).
  let current: LocalStack | undefined = await startLocalStack({ quiet: true, ...options, dataDir, port: await freePort() });
  const handle: TestLocalStack = {
    url: current.url,
    port: current.port,
    dataDir,
    cloudsYaml: current.cloudsYaml,
    async restart(whileStopped) {
      await current?.stop();
      current = undefined;
      await whileStopped?.();
      current = await startLocalStack({ quiet: true, ...options, dataDir, port: handle.port });
      handle.url = current.url;
    },
    async stop() {
      await current?.stop();
      current = undefined;
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  return handle;
}
