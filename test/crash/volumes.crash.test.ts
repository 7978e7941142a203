/** The crash matrix of the volume machines: every point of volume-create, volume-delete, volume-failover. */
import { vi } from 'vitest';
import { keepDynamoAcrossRestarts, spareKeptDynamos } from '../support/crash.js';
import { crashMatrix } from './matrix.js';
import { volumeScenarios } from './scenarios/volumes.js';

vi.mock('../../infra/local/dynamo.js', async (real) => keepDynamoAcrossRestarts(await real<typeof import('../../infra/local/dynamo.js')>()));
vi.mock('../../infra/local/orphaned-dynamo.js', async (real) => spareKeptDynamos(await real<typeof import('../../infra/local/orphaned-dynamo.js')>()));

// Replication only when a step syncs, so a failover's points are the same on every run.
crashMatrix('volumes', ['volume-create', 'volume-create-from-snapshot', 'volume-clone', 'volume-delete', 'volume-failover'], volumeScenarios, { FERRY_REPLICATION_INTERVAL_MS: String(3_600_000) });
