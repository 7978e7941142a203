/**
 * The snapshot-create machine (statemachines/snapshot-create.asl.json) as the API and the
 * reconciler see it: its execution for a snapshot is named after the snapshot, so a retried start
 * finds the one already started, and "does a machine own this snapshot" is one DescribeExecution.
 */
import { executionName, executionStatus, startExecution, type ExecutionStatus } from '../core/executions.js';

export const SNAPSHOT_CREATE_MACHINE = 'snapshot-create' as const;

/** `snapshot-create-<snapshot id>`: one execution per snapshot, ever. */
export const snapshotCreateExecutionName = (snapshotId: string): string => executionName(SNAPSHOT_CREATE_MACHINE, snapshotId);

/**
 * Starts the snapshot's execution, or finds the one already started (ExecutionAlreadyExists is
 * that same execution: functions/core/executions.ts). Returns its ARN; a failed start throws.
 */
export function startSnapshotCreate(snapshotId: string): Promise<string> {
  return startExecution(SNAPSHOT_CREATE_MACHINE, snapshotCreateExecutionName(snapshotId), { snapshotId });
}

/**
 * The status of the snapshot's execution, or undefined when it never started. A Step Functions
 * that cannot answer throws DependencyError: that is no proof that no machine owns the snapshot.
 */
export function snapshotCreateStatus(snapshotId: string): Promise<ExecutionStatus | undefined> {
  return executionStatus(SNAPSHOT_CREATE_MACHINE, snapshotCreateExecutionName(snapshotId));
}
