/** The crash matrix of the synchronous API actions that touch a backend (test/crash/scenarios/sync-actions.ts lists them with file:line). */
import { vi } from 'vitest';
import { keepDynamoAcrossRestarts, spareKeptDynamos } from '../support/crash.js';
import { crashMatrix } from './matrix.js';
import { SYNC_ACTION_SCENARIOS, syncActionScenarios } from './scenarios/sync-actions.js';

vi.mock('../../infra/local/dynamo.js', async (real) => keepDynamoAcrossRestarts(await real<typeof import('../../infra/local/dynamo.js')>()));
vi.mock('../../infra/local/orphaned-dynamo.js', async (real) => spareKeptDynamos(await real<typeof import('../../infra/local/orphaned-dynamo.js')>()));

crashMatrix('sync-actions', SYNC_ACTION_SCENARIOS, syncActionScenarios);
