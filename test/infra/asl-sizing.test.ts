/**
 * The sizes infra/asl/policy.ts sizes the machine timeouts by are those of the step functions:
 * a failover's volumes per batch, a migration's copy runs and driver polls. Apart from
 * asl.test.ts because it loads the flow modules, which the ASL checks do not need.
 */
import { describe, expect, test } from 'vitest';
import { FAILOVER_BATCH_SIZE as FUNCTIONS_FAILOVER_BATCH_SIZE } from '../../functions/replication/repo.js';
import { MAX_COPY_ATTEMPTS, maxDriverPolls } from '../../functions/migration/flow.js';
import { FAILOVER_BATCH_SIZE, MIGRATION_COPY_RUNS, MIGRATION_DRIVER_POLLS } from '../../infra/asl/policy.js';

describe('the sizes of the retry and timeout policy', () => {
  test('are those of the step functions', () => {
    expect(FAILOVER_BATCH_SIZE).toBe(FUNCTIONS_FAILOVER_BATCH_SIZE);
    expect(MIGRATION_COPY_RUNS).toBe(MAX_COPY_ATTEMPTS);
    expect(MIGRATION_DRIVER_POLLS).toBe(maxDriverPolls());
  });
});
