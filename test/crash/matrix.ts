/**
 * One crash-matrix test file's body: a local stack for the file, one test per scenario (each
 * crashes at every point the scenario's clean run passed), the results written to
 * CRASH_REPORT_DIR/<file>.json. FERRY_CRASH_ONLY=<scenario,...> and FERRY_CRASH_POINTS=<n> narrow
 * a run by hand. The file itself mocks infra/local/dynamo.js (keepDynamoAcrossRestarts): vi.mock
 * is hoisted per file.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { clearFaults } from '../../functions/core/faults.js';
import { crashAt, crashEverywhere, limitFromEnv, stopKeptDynamos, writeCrashReport, type CrashPoint, type CrashScenario, type PointResult } from '../support/crash.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

/** `start` makes the file's stack (default a sandbox stack): a file whose backends are mocked AWS ones brings its own (volumes-ebs.crash.test.ts). */
export function crashMatrix(
  file: string,
  names: string[],
  scenariosOf: (stack: TestLocalStack) => CrashScenario<any>[],
  env: Record<string, string> = {},
  start: () => Promise<TestLocalStack> = () => useLocalStack(),
): void {
  const results: PointResult[] = [];
  const stackOf = crashFileStack(file, env, start, results);

  const only = process.env.FERRY_CRASH_ONLY?.split(',');
  for (const name of names) {
    test.skipIf(only !== undefined && !only.includes(name))(`${name}: a crash at every point finishes or rolls back, audit clean, nothing twice`, async () => {
      const scenario = scenariosOf(stackOf()).find((s) => s.name === name);
      if (!scenario) throw new Error(`no scenario ${name}`);
      const mine = await crashEverywhere(stackOf(), scenario, limitFromEnv());
      results.push(...mine);
      writeCrashReport(file, results);
      expect(mine.filter((r) => r.result === 'failed')).toEqual([]);
    });
  }
}

/**
 * A crash file's stack: `env` set and the stack started before its tests; after them the faults
 * cleared, `env` put back, the results written to CRASH_REPORT_DIR/<file>.json, the stack stopped.
 */
export function crashFileStack(file: string, env: Record<string, string>, start: () => Promise<TestLocalStack>, results: PointResult[]): () => TestLocalStack {
  let stack: TestLocalStack;
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
  return () => stack;
}

/** One fixed point crashed, logged and kept in `results`: it must be reached and finish or roll back, with no broken promise. */
export async function crashAtFixedPoint(stack: TestLocalStack, scenario: CrashScenario<unknown>, point: CrashPoint, results: PointResult[]): Promise<void> {
  const r = await crashAt(stack, scenario, point);
  console.log(`crash ${r.scenario} @ ${r.point}: ${r.result} (${r.ms} ms ${JSON.stringify(r.phases)})${r.error ? ` — ${r.error.slice(0, 500)}` : ''}`);
  results.push(r);
  expect(r.error).toBeUndefined();
  expect(r.result).not.toBe('failed');
  expect(r.result).not.toBe('not-reached');
}
