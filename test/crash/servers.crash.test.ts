/**
 * The crash matrix of the server machines (all but server-evacuate, which needs a host down: see
 * the report). The attachment points depend on deterministic attachment ids in every server flow.
 */
import { vi } from 'vitest';
import { keepDynamoAcrossRestarts, spareKeptDynamos } from '../support/crash.js';
import { crashMatrix } from './matrix.js';
import { SERVER_SCENARIOS, serverScenarios } from './scenarios/servers.js';

vi.mock('../../infra/local/dynamo.js', async (real) => keepDynamoAcrossRestarts(await real<typeof import('../../infra/local/dynamo.js')>()));
vi.mock('../../infra/local/orphaned-dynamo.js', async (real) => spareKeptDynamos(await real<typeof import('../../infra/local/orphaned-dynamo.js')>()));

crashMatrix('servers', SERVER_SCENARIOS, serverScenarios);
