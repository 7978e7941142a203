/**
 * The crash matrix of cross-cell resize, confirm and revert (issue 12): every point of each clean
 * run, crashed, the stack restarted, then the harness's promises and the copies' (scenarios/cross-cell.ts).
 * Runs under FERRY_CRASH_MATRIX (`npm run test:crash`); the policy allowing cross-cell resize is set
 * before the stack starts.
 */
import { afterAll, beforeAll, vi } from 'vitest';
import { resetPolicyCache } from '../../functions/core/policy.js';
import { keepDynamoAcrossRestarts, spareKeptDynamos } from '../support/crash.js';
import { crashMatrix } from './matrix.js';
import { CROSS_CELL_POLICY_ENV, CROSS_CELL_SCENARIOS, crossCellScenarios } from './scenarios/cross-cell.js';

vi.mock('../../infra/local/dynamo.js', async (real) => keepDynamoAcrossRestarts(await real<typeof import('../../infra/local/dynamo.js')>()));
vi.mock('../../infra/local/orphaned-dynamo.js', async (real) => spareKeptDynamos(await real<typeof import('../../infra/local/orphaned-dynamo.js')>()));

crashMatrix('cross-cell', CROSS_CELL_SCENARIOS, crossCellScenarios, CROSS_CELL_POLICY_ENV);
// Registered after crashMatrix's hooks: FERRY_POLICY is set (and restored) by them; the cached rules follow.
beforeAll(() => resetPolicyCache());
afterAll(() => resetPolicyCache());
