/**
 * The crash matrix's representative subset, run by `npm test` with the integration tier (the whole
 * matrix is `npm run test:crash`): for each machine below, one step point of its forward path
 * chosen by a fixed seed (FERRY_CRASH_SEED overrides it, to look elsewhere), crashed, the stack
 * restarted, then the three promises checked (test/support/crash.ts). A point the run does not
 * pass (a Choice went the other way) gives way to the seed's next choice.
 */
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import { clearFaults } from '../../functions/core/faults.js';
import { resetPolicyCache } from '../../functions/core/policy.js';
import { crashAt, forwardStepPoints, keepDynamoAcrossRestarts, spareKeptDynamos, seededPick, stopKeptDynamos, writeCrashReport, type CrashPoint, type CrashScenario, type PointResult } from '../support/crash.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';
import { crashAtFixedPoint } from './matrix.js';
import { CROSS_CELL_POLICY_ENV, CROSS_CELL_SUBSET, crossCellScenarios } from './scenarios/cross-cell.js';
import { serverScenarios } from './scenarios/servers.js';
import { shareScenarios } from './scenarios/shares.js';
import { syncActionScenarios } from './scenarios/sync-actions.js';
import { volumeScenarios } from './scenarios/volumes.js';

vi.mock('../../infra/local/dynamo.js', async (real) => keepDynamoAcrossRestarts(await real<typeof import('../../infra/local/dynamo.js')>()));
vi.mock('../../infra/local/orphaned-dynamo.js', async (real) => spareKeptDynamos(await real<typeof import('../../infra/local/orphaned-dynamo.js')>()));

const SEED = Number(process.env.FERRY_CRASH_SEED ?? 11);
/**
 * Scenario -> its machine (undefined: a synchronous action, crashed at its driver call). Two of each
 * family, so the subset stays near two minutes: volume and share machines, server flows with
 * attachments, and the attachment update that exports a volume to a host.
 */
const SUBSET: [scenario: string, machine: string | undefined][] = [
  ['volume-create', 'volume-create'],
  ['volume-delete', 'volume-delete'],
  ['share-create', 'share-create'],
  ['share-migration-start (driver-assisted)', 'share-migration-start'],
  ['server-attach-volume', 'server-attach-volume'],
  ['server-detach-volume', 'server-detach-volume'],
  ['server-live-migrate', 'server-live-migrate'],
  ['PUT /attachments/{id} (connector)', undefined],
];
const INITIALIZE_CONNECTION: CrashPoint = { kind: 'volume', backend: '(any)', method: 'initializeConnection', occurrence: 1, mode: 'crash-after' };

let stack: TestLocalStack;
const results: PointResult[] = [];
beforeAll(async () => {
  stack = await useLocalStack();
}, 300_000);
afterAll(async () => {
  clearFaults();
  console.log(`crash report: ${writeCrashReport('subset', results)}`);
  await stack?.stop();
  await stopKeptDynamos();
}, 300_000);

for (const [name, machine] of SUBSET) {
  test(`${name}: a crash at a seeded step finishes or rolls back, audit clean, nothing twice`, async () => {
    const scenario = [...volumeScenarios(stack), ...shareScenarios(stack), ...serverScenarios(stack), ...syncActionScenarios(stack)].find((s) => s.name === name) as CrashScenario<unknown>;
    const candidates = machine ? seededPick(SEED, 3)(forwardStepPoints(machine)) : [INITIALIZE_CONNECTION];
    let r: PointResult | undefined;
    for (const point of candidates) {
      r = await crashAt(stack, scenario, point);
      console.log(`crash ${r.scenario} @ ${r.point}: ${r.result} (${r.ms} ms ${JSON.stringify(r.phases)})${r.error ? ` — ${r.error.slice(0, 500)}` : ''}`);
      results.push(r);
      if (r.result !== 'not-reached') break;
    }
    expect(r?.result).not.toBe('failed');
    expect(r?.error).toBeUndefined();
  }, 300_000);
}

// Cross-cell resize (issue 12): fixed points between its sub-tasks (scenarios/cross-cell.ts), with
// the policy allowing it only for these tests.
for (const [name, point] of CROSS_CELL_SUBSET) {
  test(`${name}: a crash ${point.kind === 'step-before' ? 'before' : 'after'} ${point.method} finishes or rolls back, one visible copy, audit clean`, async () => {
    const saved = process.env.FERRY_POLICY;
    process.env.FERRY_POLICY = CROSS_CELL_POLICY_ENV.FERRY_POLICY;
    resetPolicyCache();
    try {
      const scenario = crossCellScenarios(stack).find((s) => s.name === name)!;
      await crashAtFixedPoint(stack, scenario, point, results);
    } finally {
      if (saved === undefined) delete process.env.FERRY_POLICY;
      else process.env.FERRY_POLICY = saved;
      resetPolicyCache();
    }
  }, 400_000);
}
