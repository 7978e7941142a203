/**
 * The records recovery passes read and mark (recovery.ts): connect intents (on volumes) and
 * pending disconnects (on attachment items). Apart from repo.ts, whose writes are the operations' own.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure, scanAll } from '../core/db.js';
import { tableName } from '../core/tables.js';
import { volumeKey, type AttachmentSummary } from '../volumes/model.js';
import { ATTACHMENT_SK, attachmentFromItem, attachmentKey, CONNECT_INTENTS, connectIntentsOf, type Attachment, type ConnectIntent } from './model.js';

const table = () => tableName('volume');

/**
 * A connect intent a recovery pass found: on its volume (with the volume's summary of the
 * attachment, absent once the attachment is deleted), or on an attachment item (`item`: written
 * there before intents moved to the volume).
 */
export type FoundConnectIntent = { volumeId: string; intent: ConnectIntent } & ({ summary: AttachmentSummary | undefined } | { item: Attachment });

/**
 * Every connect intent: on volume items, and on attachment items (live or tombstone) from before
 * intents moved to the volume. A Scan with a filter: the volume table's only index (gsi1) keys
 * the project listings, and intents are rare (only connects in flight or abandoned by a crash),
 * so recovery passes pay one table read each. The attachment items' half stays until no item
 * holds such an intent (the local stack keeps its data across upgrades; the audit's
 * pending-connect finding names any left).
 */
export async function scanConnectIntents(): Promise<FoundConnectIntent[]> {
  const items = await scanAll({
    TableName: table(),
    FilterExpression: '(sk = :vol AND size(#ci) > :zero) OR (sk = :att AND size(pendingConnect) > :zero)',
    ExpressionAttributeNames: { '#ci': CONNECT_INTENTS },
    ExpressionAttributeValues: { ':vol': volumeKey('').sk, ':att': ATTACHMENT_SK, ':zero': 0 },
    ConsistentRead: true,
  });
  return items.flatMap((item): FoundConnectIntent[] => {
    if (item.sk === ATTACHMENT_SK) {
      const attachment = attachmentFromItem(item);
      return Object.values(attachment.pendingConnect ?? {}).map((intent) => ({ volumeId: attachment.volumeId, intent: { ...intent, attachmentId: attachment.id }, item: attachment }));
    }
    const attachments = (item.attachments ?? {}) as Record<string, AttachmentSummary>;
    return Object.values(connectIntentsOf(item)).map((intent) => ({ volumeId: item.id as string, intent, summary: attachments[intent.attachmentId] }));
  });
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
