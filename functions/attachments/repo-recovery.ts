/**
 * The attachment records recovery passes read and mark (recovery.ts): connect intents and
 * pending disconnects. Apart from repo.ts, whose writes are the operations' own.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure, scanAll } from '../core/db.js';
import { tableName } from '../core/tables.js';
import { ATTACHMENT_SK, attachmentFromItem, attachmentKey, type Attachment } from './model.js';

const table = () => tableName('volume');

/**
 * Every attachment item (live or tombstone) holding a connect intent. A Scan with a filter: the
 * volume table's only index (gsi1) keys the project listings, and intents are rare (only
 * connects in flight or abandoned by a crash), so recovery passes pay one table read each.
 */
export async function scanConnectIntents(): Promise<Attachment[]> {
  const items = await scanAll({
    TableName: table(),
    FilterExpression: 'sk = :sk AND size(pendingConnect) > :zero',
    ExpressionAttributeValues: { ':sk': ATTACHMENT_SK, ':zero': 0 },
    ConsistentRead: true,
  });
  return items.map(attachmentFromItem);
}

/**
 * Every tombstone whose delete had to remove a host's connection and was not yet seen through by a
 * recovery pass, and every attachment item holding a delete's disconnect intent (model.ts): both
 * rare, so one Scan for both.
 */
export async function scanPendingDisconnects(): Promise<Attachment[]> {
  const items = await scanAll({
    TableName: table(),
    FilterExpression: 'sk = :sk AND ((deleted = :true AND attribute_type(#disconnect, :map)) OR size(#pd) > :zero)',
    ExpressionAttributeNames: { '#disconnect': 'disconnect', '#pd': 'pendingDisconnect' },
    ExpressionAttributeValues: { ':sk': ATTACHMENT_SK, ':true': true, ':map': 'M', ':zero': 0 },
    ConsistentRead: true,
  });
  return items.map(attachmentFromItem);
}

/** A recovery pass saw the tombstone's disconnect through: later passes skip it (a retried delete then has nothing left to finish). */
export async function markDisconnectDone(tombstone: Attachment): Promise<void> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: table(),
        Key: attachmentKey(tombstone.id),
        UpdateExpression: 'SET #disconnect = :none ADD version :one',
        ConditionExpression: 'deleted = :true AND #disconnect.#host = :host',
        ExpressionAttributeNames: { '#disconnect': 'disconnect', '#host': 'host' },
        ExpressionAttributeValues: { ':none': null, ':one': 1, ':true': true, ':host': tombstone.disconnect!.host },
      }),
    );
  } catch (e) {
    // Done by another pass (or the tombstone expired): nothing left to mark.
    if (!isConditionFailure(e)) throw e;
  }
}
