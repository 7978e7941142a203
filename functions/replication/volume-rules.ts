/**
 * What a failover does to each volume and its snapshots (reference §2.4, VolumeManager.failover),
 * as pure functions of (volume, driver update) -> volume. The failover steps persist each result
 * with a condition on the volume's `version`; the snapshot side is a list of ids to set `error`.
 *
 * Every result carries the operation id (`failoverOperationId`), so a re-run of the same operation
 * (a retried batch, a local stack restarted mid-failover) recognises a volume it already did and
 * leaves it alone.
 */
import type { FailoverResult } from '../drivers/volume/driver.js';
import { REPLICATION, type Volume } from '../volumes/model.js';

export type DriverVolumeUpdate = FailoverResult['volumeUpdates'][number]['updates'];

/** The volume was already handled by this operation (skip on re-run). */
export function doneBy(v: Pick<Volume, 'failoverOperationId'>, operationId: string): boolean {
  return v.failoverOperationId === operationId;
}

export interface VolumeOutcome {
  volume: Volume;
  /** Snapshots to set `error` together with the volume. */
  snapshotsToError: string[];
}

/**
 * A non-replicated volume on a backend that fails over (never on failback): `error` /
 * `not-capable`, the old status kept in previous_status, every snapshot `error`. Upstream neither
 * reverts this when the driver fails nor restores it on a later failback; neither does Ferry.
 */
export function markNotCapable(v: Volume, operationId: string, at: string): VolumeOutcome {
  return {
    volume: { ...v, previousStatus: v.status, status: 'error', replicationStatus: REPLICATION.notCapable, failoverOperationId: operationId, updatedAt: at },
    snapshotsToError: [...(v.snapshotIds ?? [])],
  };
}

/**
 * A replicated volume after the driver's failover_host, by §2.4 step 5:
 * - a driver `status: error` makes replication_status `failover-error`;
 * - replication_status absent or `failed-over` becomes the service-level value (`failed-over`,
 *   or `enabled` on failback);
 * - `failover-error` defaults status to `error` and sets every snapshot `error`;
 * - a status change keeps the old status in previous_status.
 */
export function applyFailoverUpdate(v: Volume, update: DriverVolumeUpdate | undefined, failback: boolean, operationId: string, at: string): VolumeOutcome {
  const u: DriverVolumeUpdate = { ...(update ?? {}) };
  if (u.status === 'error') u.replicationStatus = REPLICATION.failoverError;
  if (u.replicationStatus === undefined || u.replicationStatus === REPLICATION.failedOver) {
    u.replicationStatus = failback ? REPLICATION.enabled : REPLICATION.failedOver;
  }
  let snapshotsToError: string[] = [];
  if (u.replicationStatus === REPLICATION.failoverError) {
    u.status ??= 'error';
    snapshotsToError = [...(v.snapshotIds ?? [])];
  }
  const next: Volume = { ...v, replicationStatus: u.replicationStatus, failoverOperationId: operationId, updatedAt: at };
  if (u.status !== undefined) {
    next.previousStatus = v.status;
    next.status = u.status as Volume['status'];
  }
  if (u.providerLocation !== undefined) next.providerLocation = u.providerLocation;
  return { volume: next, snapshotsToError };
}
