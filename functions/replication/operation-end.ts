/**
 * How a failover, drill or drill-end operation ends: Finish (the service's new state), Fail (the
 * Catch of every state), and the undo of an operation the API recorded but could not start. The
 * failover steps and the os-services API both end operations, so this lives outside the steps'
 * entry module.
 */
import { reasonOf, type CaughtError } from '../core/errors.js';
import { finishOperation, getOperationOrThrow, getOperationRecord, type ReplicationOperation } from './repo.js';
import { finishServiceFailover, setDrillStatus } from './service-repo.js';

/** Last state: the service's new state (§2.3), or the drill's; the operation succeeded. Idempotent. */
export async function finish(operationId: string): Promise<{ status: string }> {
  const op = await getOperationOrThrow(operationId);
  if (op.status !== 'running') return { status: op.status };
  switch (op.kind) {
    case 'failover':
      await finishServiceFailover(op.host, op.id, { type: 'failover-succeeded', failback: op.failback, activeBackendId: op.target ?? '' });
      break;
    case 'drill':
      await setDrillStatus(op.host, op.id, 'active');
      break;
    case 'drill-end':
      await setDrillStatus(op.host, op.id, undefined);
      break;
  }
  await finishOperation(op.id, 'succeeded');
  return { status: 'succeeded' };
}

/**
 * The Catch of every state: InvalidReplicationTarget puts the service back (`failed-over` if it
 * already ran on a target, else `enabled`); any other failure leaves it `failover-error` and
 * disabled, as upstream. Volumes a batch already wrote keep their new state (upstream does not
 * revert either). A drill that failed keeps its record as `failed`, so `"drill": "end"` removes
 * whatever copies it made.
 */
export async function fail(operationId: string | undefined, error: CaughtError | undefined): Promise<{ status: string }> {
  if (!operationId) return { status: 'refused' };
  const op = await getOperationRecord(operationId);
  if (!op || op.status !== 'running') return { status: op?.status ?? 'refused' };
  await failOperation(op, error?.Error === 'InvalidReplicationTarget', reasonOf(error));
  return { status: 'failed' };
}

async function failOperation(op: ReplicationOperation, invalidTarget: boolean, reason: string): Promise<void> {
  switch (op.kind) {
    case 'failover':
      await finishServiceFailover(op.host, op.id, { type: invalidTarget ? 'failover-invalid-target' : 'failover-failed' });
      break;
    case 'drill':
    case 'drill-end':
      await setDrillStatus(op.host, op.id, 'failed');
      break;
  }
  await finishOperation(op.id, 'failed', reason);
}

/**
 * The API recorded an operation but could not start its execution: put everything back as it was
 * (the service to its previous replication status, a new drill removed, an ending drill active).
 */
export async function undoRecordedOperation(op: ReplicationOperation, cause: unknown): Promise<void> {
  const reason = `the execution could not be started: ${cause instanceof Error ? cause.message : String(cause)}`;
  switch (op.kind) {
    case 'failover':
      await finishServiceFailover(op.host, op.id, { type: 'failover-invalid-target' });
      break;
    case 'drill':
      await setDrillStatus(op.host, op.id, undefined);
      break;
    case 'drill-end':
      await setDrillStatus(op.host, op.id, 'active');
      break;
  }
  await finishOperation(op.id, 'failed', reason);
}
