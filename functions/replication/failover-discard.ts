/**
 * The failover Batch's compensation (issue 14, "leave nothing behind"): upstream lets a volume be
 * deleted while its backend fails over (only `frozen` refuses it), so a volume deleted after
 * Prepare listed it can reach the driver, which brings up a replica for it (aws-ebs: a new EBS
 * volume in the target region), and then its outcome write finds no record to hold that replica.
 * The batch hands exactly those to the driver's discardFailedOver (idempotent).
 *
 * A discard that fails does not fail the failover (every other volume is failed over and recorded):
 * the error is logged with what was left, and the replicas are recorded in the volume table as
 * pk `REPLOP#<operation id>`, sk `LEFT#<nnnnn>` (batch), which the audit reports as
 * `failover-replica-left` until an operator removes them and the item.
 */
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { db } from '../core/db.js';
import { DriverError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { tableName } from '../core/tables.js';
import type { DrillCopy, ReplicationDriver } from '../drivers/volume/driver.js';

export const leftReplicasKey = (operationId: string, batch: number) => ({ pk: `REPLOP#${operationId}`, sk: `LEFT#${String(batch).padStart(5, '0')}` });

/** A replica the driver brought up on `targetBackendId` at `location` for a volume deleted since. */
export type DiscardedReplica = DrillCopy;

export async function discardReplicasOfDeletedVolumes(driver: Pick<ReplicationDriver, 'discardFailedOver'>, operationId: string, batch: number, replicas: DiscardedReplica[]): Promise<void> {
  if (!replicas.length) return;
  try {
    await driver.discardFailedOver(replicas);
    logger.info('failover: removed the replicas made for volumes deleted meanwhile', { operationId, batch, replicas });
  } catch (e) {
    // A driver that tried them all names those left; else all of them may be.
    const left = e instanceof DriverError && Array.isArray(e.context.left) ? (e.context.left as DiscardedReplica[]) : replicas;
    logger.error('failover: replicas made for volumes deleted meanwhile could not be removed; they are left on the target and recorded for the audit', { operationId, batch, left, error: e as Error });
    // Recording them is the one thing that must not be lost: its own failure fails the batch (retried).
    await db().send(new PutCommand({ TableName: tableName('volume'), Item: { ...leftReplicasKey(operationId, batch), replicas: left, error: (e as Error).message, at: new Date().toISOString() } }));
  }
}
