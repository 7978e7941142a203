/**
 * The sizes infra/asl/policy.ts sizes the machine timeouts by are those of the step functions:
 * a failover's Map items (its batches of functions/replication/failover-batch.ts), a migration's copy runs and driver polls. And every machine's
 * longest run, with every BackendNotReady wait used to its end, stays under the 25,000 history
 * events AWS allows an execution. Apart from asl.test.ts because it loads the flow modules, which
 * the ASL checks do not need.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { MAX_COPY_ATTEMPTS, maxDriverPolls } from '../../functions/migration/flow.js';
import { STATE_MACHINES } from '../../functions/wiring.js';
import { worstCaseHistoryEvents } from '../../infra/asl/check.js';
import { BACKEND_WAIT, CUTOVER_WAIT, MACHINE_POLICIES, MIGRATION_COPY_RUNS, MIGRATION_DRIVER_POLLS } from '../../infra/asl/policy.js';
import { AWS_HISTORY_LIMIT } from '../../infra/local/history-count.js';

const definition = (file: string) => JSON.parse(readFileSync(file, 'utf8'));

describe('the sizes of the retry and timeout policy', () => {
  test('are those of the step functions', () => {
    // The batch size has one source (functions/replication/failover-batch.ts): 10,000 volumes in batches of 198.
    expect(MACHINE_POLICIES['volume-failover'].sizing?.mapItems).toEqual({ Batches: 51 });
    expect(MIGRATION_COPY_RUNS).toBe(MAX_COPY_ATTEMPTS);
    expect(MIGRATION_DRIVER_POLLS).toBe(maxDriverPolls());
  });
});

describe('the history of a run stays under AWS\'s limit', () => {
  test.each(STATE_MACHINES.map((m) => [m.name, m.file] as const))('%s: its longest run, every wait used up, writes under 25,000 events', (name, file) => {
    expect(worstCaseHistoryEvents(definition(file), MACHINE_POLICIES[name])).toBeLessThan(AWS_HISTORY_LIMIT);
  });

  test('the share machines wait for their backend where the aws-efs driver answers BackendNotReady', () => {
    const waits = Object.fromEntries(STATE_MACHINES.filter((m) => m.name.startsWith('share-')).map((m) => [m.name, MACHINE_POLICIES[m.name].waits ?? []]));
    expect(waits).toEqual({
      'share-create': ['CreateOnBackend', 'Rollback'],
      'share-delete': ['DeleteOnBackend'],
      'share-migration-start': ['DriverStart', 'DriverStartFailed', 'HostPrepare', 'Cancel', 'Rollback'],
      'share-migration-complete': ['DriverComplete', 'DeleteRetired', 'Rollback'],
      'share-migration-cancel': ['Cancel'],
    });
    expect(MACHINE_POLICIES['share-migration-complete'].waitRetrier).toBe(CUTOVER_WAIT);
  });

  test('the count is exact for a small machine, and a wait that is too long is caught', () => {
    const machine = {
      StartAt: 'Make',
      States: {
        Make: { Type: 'Task', Resource: '${FnShareSteps}', Next: 'Poll' },
        Poll: { Type: 'Wait', Seconds: 5, Next: 'Check' },
        Check: { Type: 'Choice', Choices: [{ Variable: '$.done', BooleanEquals: false, Next: 'Poll' }], Default: 'Done' },
        Done: { Type: 'Succeed' },
      },
    };
    // Execution 2; Make: entered/exited + 181 attempts of 3; Poll and Check 10 runs of 2 each; Done 2.
    expect(worstCaseHistoryEvents(machine, { waits: ['Make'], sizing: { runs: { Poll: 10, Check: 10 } } })).toBe(2 + 2 + (1 + BACKEND_WAIT.MaxAttempts) * 3 + 20 + 20 + 2);
    const tooPatient = { ...BACKEND_WAIT, MaxAttempts: 9000 };
    expect(worstCaseHistoryEvents(machine, { waits: ['Make'], waitRetrier: tooPatient })).toBeGreaterThan(AWS_HISTORY_LIMIT);
  });
});
