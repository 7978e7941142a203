/**
 * Runs in every test worker before its test file (vitest.config.ts `setupFiles`, all tiers).
 */
// aws-local-stepfunctions uses Promise.withResolvers, which Node 20 lacks.
import '../../infra/local/polyfills.js';
import { inject } from 'vitest';

/**
 * The pace of every local stack a test starts (in this process, or as a child process, which
 * inherits the environment): Wait states with fixed `Seconds` and Retry intervals run at 1/100
 * (infra/local/stepfunctions-runner.ts), so a driver's 5 s poll takes 50 ms and each retry of a
 * Retry with IntervalSeconds 1 waits 10 ms (the scaled interval, without the backoff). Set here,
 * once, for every file, unless the run sets it (`FERRY_LOCAL_WAIT_SCALE=1 npx vitest run ...`
 * runs with real waits, to tell a timing problem from a logic one); a test that means to measure
 * real waits sets FERRY_LOCAL_WAIT_SCALE=1 itself before it starts its stack, and puts it back after.
 */
export const TEST_WAIT_SCALE = '0.01';
process.env.FERRY_LOCAL_WAIT_SCALE ??= TEST_WAIT_SCALE;

/**
 * Where the tier shares one DynamoDB Local (test/support/shared-dynamo.ts), each test file's
 * tables get a prefix of their own, set before the file is loaded so that a module-level
 * `tableName()` already sees it (test/support/dynamo.ts creates the tables under it).
 */
if (inject('sharedDynamoEndpoint')) process.env.FERRY_TABLE_PREFIX = `ferry-${process.pid}-${Date.now().toString(36)}-`;

/**
 * Quotas (functions/quotas/engine.ts): every resource unlimited by default in the test tiers, so
 * suites about other things may make more than Cinder's 10 volumes a project; a stack a test
 * starts as a child process inherits it. The quota tests clear it and hold to upstream's defaults.
 */
export const TEST_QUOTA_DEFAULTS = JSON.stringify(Object.fromEntries(
  ['volumes', 'gigabytes', 'snapshots', 'backups', 'backup_gigabytes', 'groups', 'shares', 'snapshot_gigabytes', 'share_networks', 'share_groups', 'share_group_snapshots', 'share_replicas', 'replica_gigabytes'].map((r) => [r, -1]),
));
process.env.FERRY_QUOTA_DEFAULTS ??= TEST_QUOTA_DEFAULTS;
