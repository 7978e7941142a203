/**
 * The failover Batch's compensation (issue 14, "leave nothing behind"): what the driver brings up
 * on the target for a volume (aws-ebs: a new EBS volume in the target region) is held only by that
 * volume's record once its outcome is written. A volume whose record will not hold it is
 * "unheld", and the batch hands its replica to the driver's discardFailedOver (idempotent):
 * - deleted since Prepare listed it (upstream lets a volume be deleted while its backend fails
 *   over: only `frozen` refuses it);
 * - being deleted (`deleting`): its delete removes the record, and its backend object through the
 *   driver of the site active when the delete began (the primary, until the failover finishes);
 * - moved to another backend (a retype or migration that finished since the listing).
 * A volume already `deleting` when the batch runs is not handed to the driver at all.
 *
 * A crash between the driver's CreateVolume and the removal loses no replica: the batch's replica
 * choices are recorded before the driver makes anything (repo.ts recordReplicaChoices), so a re-run
 * hands every listed volume with a recorded choice that is now unheld back to the driver with that
 * choice (aws-ebs: the same ClientToken, which EC2 answers with the volume it made) and discards
 * what it answers (unheldSinceChoice).
 *
 * A discard that fails does not fail the failover (every other volume is failed over and recorded):
 * the error is logged with what was left, and the replicas are recorded in the volume table as
 * pk `REPLOP#<operation id>`, sk `LEFT#<nnnnn>` (batch), which the audit reports as
 * `failover-replica-left` and `ferry audit --repair` removes (audit/replica-left-repairs.ts).
 */
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { db } from '../core/db.js';
import { DriverError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { tableName } from '../core/tables.js';
import type { DrillCopy, ReplicatedVolumeRef, ReplicationDriver } from '../drivers/volume/driver.js';
import { backendOf } from '../volumes/backends.js';
import type { Volume } from '../volumes/model.js';
import type { ReplicaChoices } from './repo.js';

export const leftReplicasKey = (operationId: string, batch: number) => ({ pk: `REPLOP#${operationId}`, sk: `LEFT#${String(batch).padStart(5, '0')}` });

/** A replica the driver brought up on `targetBackendId` at `location` for a volume no record holds. */
export type DiscardedReplica = DrillCopy;

/** Whether the record of a volume as read holds what its failover brings up (see the module's list). */
export function holdsReplica<V extends Pick<Volume, 'host' | 'status'>>(v: V | null | undefined, host: string): v is V {
  return !!v && !!v.host && backendOf(v.host) === host && v.status !== 'deleting';
}

/**
 * A re-run's volumes to find again: listed in the batch, a replica chosen for them by an earlier
 * run (so the driver may have made it), and unheld now (`current`: the batch's volumes as read
 * now, still on this backend). Each comes with its recorded choice, so the driver answers what the
 * earlier run made rather than something new. A plan recorded with ids only has no names: none.
 */
export function unheldSinceChoice(listed: Pick<Volume, 'id' | 'backendName' | 'size'>[], choices: ReplicaChoices | undefined, current: Pick<Volume, 'id' | 'host' | 'status'>[], host: string): ReplicatedVolumeRef[] {
  if (!choices) return [];
  const now = new Map(current.map((v) => [v.id, v]));
  return listed.flatMap((v) => {
    const replica = choices[v.id];
    if (replica === undefined || replica === null || holdsReplica(now.get(v.id), host)) return [];
    return [{ volumeId: v.id, backendName: v.backendName, sizeGb: v.size, replica }];
  });
}

export async function discardUnheldReplicas(driver: Pick<ReplicationDriver, 'discardFailedOver'>, operationId: string, batch: number, replicas: DiscardedReplica[]): Promise<void> {
  if (!replicas.length) return;
  try {
    await driver.discardFailedOver(replicas);
    logger.info('failover: removed the replicas made for volumes no record holds (deleted, being deleted or moved meanwhile)', { operationId, batch, replicas });
  } catch (e) {
    // A driver that tried them all names those left; else all of them may be.
    const left = e instanceof DriverError && Array.isArray(e.context.left) ? (e.context.left as DiscardedReplica[]) : replicas;
    logger.error('failover: replicas made for volumes no record holds could not be removed; they are left on the target and recorded for the audit', { operationId, batch, left, error: e as Error });
    // Recording them is the one thing that must not be lost: its own failure fails the batch (retried).
    await db().send(new PutCommand({ TableName: tableName('volume'), Item: { ...leftReplicasKey(operationId, batch), replicas: left, error: (e as Error).message, at: new Date().toISOString() } }));
  }
}
