/**
 * Vitest global setup of the `integration` and `e2e` projects: ONE DynamoDB Local (in memory) for
 * every test file of the tier that needs tables (test/support/dynamo.ts `useLocalDynamo()`) or a
 * whole local stack (test/support/stack.ts `useLocalStack()`), instead of a JVM per file. Each
 * file gets its own table-name prefix in it (test/support/setup.ts), so files running at the same
 * time never see each other's items.
 *
 * The JVM is spawned here without waiting for it to answer (that takes seconds on a busy machine);
 * `useLocalDynamo()` waits until it answers before creating its tables.
 */
import type { TestProject } from 'vitest/node';
import { startDynamo } from '../../infra/local/dynamo.js';
import { freePort } from '../../infra/local/ports.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The endpoint of the tier's shared DynamoDB Local, when the project started one. */
    sharedDynamoEndpoint?: string;
  }
}

export default async function setup(project: TestProject): Promise<(() => Promise<void>) | undefined> {
  // Only when this run holds two or more test files of the project (a single file gains nothing,
  // and starts its own JVM when it needs one); files that need no tables leave it idle.
  const filters = (project.vitest as unknown as { filenamePattern?: string[] }).filenamePattern;
  const { testFiles } = await project.globTestFiles(filters);
  if (testFiles.length < 2) return undefined;

  const port = await freePort();
  // One retry: on a loaded machine the JVM can miss startDynamo's 60 s deadline (it is killed then).
  const starting = startDynamo({ port }).catch((first: unknown) => {
    console.error('the shared DynamoDB Local did not start, trying again:', first);
    return startDynamo({ port });
  });
  // A start that fails is reported by the files that wait for the endpoint (useLocalDynamo names
  // it); the teardown logs it instead of leaving an unhandled rejection.
  const started = starting.then(
    (dynamo) => ({ dynamo, error: undefined }),
    (error: unknown) => ({ dynamo: undefined, error }),
  );
  project.provide('sharedDynamoEndpoint', `http://127.0.0.1:${port}`);
  return async () => {
    const { dynamo, error } = await started;
    if (error) console.error('the shared DynamoDB Local did not start:', error);
    await dynamo?.stop();
  };
}
