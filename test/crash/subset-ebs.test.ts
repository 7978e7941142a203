/**
 * npm test's EBS point of the crash matrix (issue 14), beside test/crash/subset.test.ts: the
 * volume-failover machine on an aws-ebs backend (scenarios/volumes-ebs.ts: fake EC2 regions that
 * outlive every restart, a copy arriving during the failover, Frankfurt's DescribeVolumes not
 * listing the volumes made since it started) crashed right after the driver's failoverHost made the
 * target volumes and before the batch wrote a record of them. The restart runs the batch again: it
 * finds no volume by tag, so only the ClientToken of the copy its first run recorded keeps each
 * volume from being made twice. Every point of that machine is `npm run test:crash`'s
 * (volumes-ebs.crash.test.ts); this one is the point where a second volume could appear.
 */
import { test, vi } from 'vitest';
import { keepDynamoAcrossRestarts, spareKeptDynamos, type CrashPoint, type PointResult } from '../support/crash.js';
import { crashAtFixedPoint, crashFileStack } from './matrix.js';
import { ebsFailoverScenarios, startEbsCrashStack } from './scenarios/volumes-ebs.js';

vi.mock('../../infra/local/dynamo.js', async (real) => keepDynamoAcrossRestarts(await real<typeof import('../../infra/local/dynamo.js')>()));
vi.mock('../../infra/local/orphaned-dynamo.js', async (real) => spareKeptDynamos(await real<typeof import('../../infra/local/orphaned-dynamo.js')>()));

const AFTER_TARGET_VOLUMES: CrashPoint = { kind: 'volume', backend: '(any)', method: 'failoverHost', occurrence: 1, mode: 'crash-after' };

const results: PointResult[] = [];
// The sandbox's local replication only when a step syncs, as volumes-ebs.crash.test.ts.
const stack = crashFileStack('subset-ebs', { FERRY_REPLICATION_INTERVAL_MS: String(3_600_000) }, startEbsCrashStack, results);

test('volume-failover (aws-ebs): a crash right after the target volumes were made, before the batch recorded them, finishes with one volume each, audit clean', async () => {
  const scenario = ebsFailoverScenarios().find((s) => s.name === 'volume-failover (aws-ebs)')!;
  await crashAtFixedPoint(stack(), scenario, AFTER_TARGET_VOLUMES, results);
}, 300_000);
