/**
 * Runs the replication machines on the local stack's interpreter (statemachines/replication-pass
 * and replication-schedule), as EventBridge Scheduler starts them on AWS, and waits for the end.
 */
import { randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import { describeExecution, startExecution } from '../../functions/core/executions.js';
import type { StateMachineName } from '../../functions/core/machines.js';
import type { PassState } from '../../functions/replication/pass.js';
import { eventually } from './poll.js';

/** Starts the machine under `name` (a fresh one by default) and returns the ended execution. */
export async function runMachine(machine: StateMachineName, input: unknown, name = `test-${randomUUID()}`) {
  const arn = await startExecution(machine, name, input);
  return eventually(async () => {
    const out = await describeExecution(arn);
    return out.status === 'RUNNING' ? undefined : out;
  }, `${machine} execution ${name} to end`, 60_000);
}

/** One replication-pass of the backend, which must succeed: what it carried at its end. */
export async function replicationPass(backend: string): Promise<PassState> {
  const out = await runMachine('replication-pass', { backend });
  expect(out.status, out.cause ?? out.error).toBe('SUCCEEDED');
  return (JSON.parse(out.output!) as { pass: PassState }).pass;
}
