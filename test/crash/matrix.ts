/**
 * One crash-matrix test file's body: a local stack for the file, one test per scenario (each
 * crashes at every point the scenario's clean run passed), the results written to
 * CRASH_REPORT_DIR/<file>.json. FERRY_CRASH_ONLY=<scenario,...> and FERRY_CRASH_POINTS=<n> narrow
 * a run by hand. The file itself mocks infra/local/dynamo.js (keepDynamoAcrossRestarts): vi.mock
 * is hoisted per file.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { clearFaults } from '../../functions/core/faults.js';
import { crashEverywhere, limitFromEnv, stopKeptDynamos, writeCrashReport, type CrashScenario, type PointResult } from '../support/crash.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

/** `start` makes the file's stack (default a sandbox stack): a file whose backends are mocked AWS ones brings its own (volumes-ebs.crash.test.ts). */
export function crashMatrix(
  file: string,
  names: string[],
  scenariosOf: (stack: TestLocalStack) => CrashScenario<any>[],
  env: Record<string, string> = {},
  start: () => Promise<TestLocalStack> = () => useLocalStack(),
): void {
  let stack: TestLocalStack;
  const results: PointResult[] = [];
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  beforeAll(async () => {
    Object.assign(process.env, env);
    stack = await start();
  }, 300_000);
  afterAll(async () => {
    clearFaults();
    for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k];
    else process.env[k] = v;
    console.log(`crash report: ${writeCrashReport(file, results)}`);
    await stack?.stop();
    await stopKeptDynamos();
  }, 300_000);

  const only = process.env.FERRY_CRASH_ONLY?.split(',');
  for (const name of names) {
    test.skipIf(only !== undefined && !only.includes(name))(`${name}: a crash at every point finishes or rolls back, audit clean, nothing twice`, async () => {
      const scenario = scenariosOf(stack).find((s) => s.name === name);
      if (!scenario) throw new Error(`no scenario ${name}`);
      const mine = await crashEverywhere(stack, scenario, limitFromEnv());
      results.push(...mine);
      writeCrashReport(file, results);
      expect(mine.filter((r) => r.result === 'failed')).toEqual([]);
    });
  }
}
