/** The crash matrix of volume-failover on an aws-ebs backend against fake EC2 regions that outlive every restart (scenarios/volumes-ebs.ts). */
import { vi } from 'vitest';
import { keepDynamoAcrossRestarts, spareKeptDynamos } from '../support/crash.js';
import { crashMatrix } from './matrix.js';
import { ebsFailoverScenarios, startEbsCrashStack } from './scenarios/volumes-ebs.js';

vi.mock('../../infra/local/dynamo.js', async (real) => keepDynamoAcrossRestarts(await real<typeof import('../../infra/local/dynamo.js')>()));
vi.mock('../../infra/local/orphaned-dynamo.js', async (real) => spareKeptDynamos(await real<typeof import('../../infra/local/orphaned-dynamo.js')>()));

// The sandbox's local replication only when a step syncs, as volumes.crash.test.ts: its loop would add points of its own.
crashMatrix('volumes-ebs', ['volume-failover (aws-ebs)'], ebsFailoverScenarios, { FERRY_REPLICATION_INTERVAL_MS: String(3_600_000) }, startEbsCrashStack);
