/**
 * The repair of `failover-replica-left` (audit/volumes.ts): a failover brought up a replica on a
 * target (aws-ebs: a volume in the target region) for a volume whose record does not hold it
 * (deleted, being deleted or moved meanwhile), could not remove it, and recorded it as
 * `REPLOP#<operation>` `LEFT#<batch>` (replication/failover-discard.ts). That item is the recorded
 * intent; this repair finishes it.
 *
 * Why it is safe: no record ever held these replicas (the batch wrote no outcome pointing at them,
 * and a deleted or moved volume's record cannot come to hold a replica of this backend), so
 * removing them destroys nothing a volume uses. It acts only once the failover has ended (a batch
 * still running may record the item again) and the item is older than the grace cut-off. The
 * driver's discardFailedOver is idempotent (aws-ebs: DeleteVolume, InvalidVolume.NotFound = done);
 * the item is deleted only after the removal is done, conditionally on being the one read, so a
 * newer record written meanwhile is kept. A removal that fails leaves the item and the finding:
 * the next run tries again.
 */
import { DeleteCommand, GetCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure } from '../core/db.js';
import { tableName } from '../core/tables.js';
import type { DrillCopy } from '../drivers/volume/driver.js';
import { driverFor, isReplicationDriver } from '../drivers/volume/registry.js';
import { getOperationRecord } from '../replication/repo.js';
import { getBackendItem } from '../replication/service-repo.js';
import { leftAlone, type RepairOutcome } from './findings.js';

export const REPLICA_LEFT_REPAIRS: Readonly<Record<string, string>> = {
  'failover-replica-left': 'removes the replicas a failover recorded as left for volumes no record holds (the driver\'s discardFailedOver, idempotent), then the record, once the failover has ended',
};

type Outcome = RepairOutcome;
const left = leftAlone;

/** `ref`: the LEFT item's key (`operationId`, `sk`), as the audit read it. */
export async function removeLeftReplicas(ref: Record<string, string>, before: Date): Promise<Outcome> {
  const { operationId = '', sk = '' } = ref;
  const Key = { pk: `REPLOP#${operationId}`, sk };
  const item = (await db().send(new GetCommand({ TableName: tableName('volume'), Key, ConsistentRead: true }))).Item;
  if (!item) return left(`failover ${operationId} ${sk} no longer records a replica left`);
  const replicas = (item.replicas as DrillCopy[] | undefined) ?? [];
  const saw = `failover ${operationId} left ${replicas.map((r) => `${r.targetBackendId} ${r.location}`).join(', ')} (recorded ${String(item.at)})`;
  const op = await getOperationRecord(operationId);
  if (op?.status === 'running') return left(saw, 'left it: the failover is still running');
  if (!(Date.parse(String(item.at)) < before.getTime())) return left(saw, `left it: recorded within the grace period (before ${before.toISOString()})`);
  if (!op) return left(saw, `left it: the operation ${operationId} is gone, so its backend is unknown`);
  const backend = await getBackendItem(op.host);
  const driver = driverFor(backend.config, backend.service.activeBackendId);
  if (!isReplicationDriver(driver)) return left(saw, `left it: backend ${op.host} is no longer a replication backend`);
  await driver.discardFailedOver(replicas);
  try {
    await db().send(new DeleteCommand({ TableName: tableName('volume'), Key, ConditionExpression: '#at = :at', ExpressionAttributeNames: { '#at': 'at' }, ExpressionAttributeValues: { ':at': item.at } }));
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    return { saw, did: 'removed them; the record was written again meanwhile and is kept for the next run', outcome: 'repaired' };
  }
  return { saw, did: `removed them (discardFailedOver on ${op.host}) and the record`, outcome: 'repaired' };
}
