/**
 * Reads of an attachment's state: its item (identity, intents, tombstone) merged with its volume's
 * summary of it (model.ts attachmentOf: a full-state summary is the authority). Both are read
 * afresh (ConsistentRead), never from the remembered records (volume-records.ts knownVolume may
 * be behind by a write of another process).
 *
 * - by id: one BatchGetItem of the item and its volume when this process knows the attachment's
 *   volume (knownAttachment, fixed for the attachment's life), else the item, then its volume;
 * - a project's listing: the GSI Query, then one BatchGetItem per 100 distinct volumes; an entry
 *   whose volume no longer lists it (a delete the index has not caught up with) is left out;
 * - every project's (admin all_tenants): one Scan of the attachment and volume items.
 */
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { batchGetAll, db, queryAll, scanAll } from '../core/db.js';
import { GSI1, tableName } from '../core/tables.js';
import { VOLUME_SK, volumeKey, type Volume } from '../volumes/model.js';
import { ATTACHMENT_SK, attachmentFromItem, attachmentKey, attachmentOf, projectAttachmentsGsi1pk, type Attachment } from './model.js';
import { forgetVolume, getVolumeRecord, knownAttachment, loadedVolume, rememberAttachment, rememberVolume, type LoadedVolume } from './volume-records.js';

const table = () => tableName('volume');

/** The attachment's item as stored, without its volume's summary: its identity and intents (a caller that needs no state). */
export async function getAttachmentItem(id: string): Promise<Attachment | undefined> {
  const out = await db().send(new GetCommand({ TableName: table(), Key: attachmentKey(id), ConsistentRead: true }));
  const attachment = out.Item ? attachmentFromItem(out.Item) : undefined;
  if (attachment) rememberAttachment(attachment);
  return attachment;
}

/** An attachment as readers see it, and its volume when it was read with it (not for a tombstone read cold; not when gone). */
export interface AttachmentRead {
  attachment: Attachment;
  volume: LoadedVolume | undefined;
}

/** The attachment by id, merged with its volume's summary; undefined when there is no item. */
export async function readAttachment(id: string): Promise<AttachmentRead | undefined> {
  const known = knownAttachment(id);
  if (known) {
    const items = await batchGetAll(table(), [attachmentKey(id), volumeKey(known.volumeId)]);
    const item = items.find((i) => i.sk === ATTACHMENT_SK);
    const volumeItem = items.find((i) => i.sk === VOLUME_SK);
    const attachment = item ? attachmentFromItem(item) : undefined;
    if (attachment) rememberAttachment(attachment);
    if (!volumeItem) forgetVolume(known.volumeId);
    // The identity is fixed for an attachment's life: another volume would be another attachment's id reused (never: ids are not).
    if (!attachment || attachment.volumeId === known.volumeId) return attachment && merged(attachment, volumeItem ? rememberVolume(loadedVolume(volumeItem)) : undefined);
  }
  const attachment = await getAttachmentItem(id);
  if (!attachment) return undefined;
  if (attachment.deleted) return { attachment, volume: undefined };
  return merged(attachment, await getVolumeRecord(attachment.volumeId));
}

function merged(item: Attachment, volume: LoadedVolume | undefined): AttachmentRead {
  return { attachment: attachmentOf(item, volume?.volume.attachments[item.id]), volume };
}

/** readAttachment's attachment alone. */
export async function getAttachmentRecord(id: string): Promise<Attachment | undefined> {
  return (await readAttachment(id))?.attachment;
}

/**
 * Live attachment items merged with the volume items that list them; an item its volume does not
 * list (or whose volume is gone) is left out: the index lags a delete, or the audit's dangling case.
 */
export function mergeWithVolumes(items: readonly Attachment[], volumes: ReadonlyMap<string, Volume>): Attachment[] {
  return items.flatMap((item) => {
    const summary = volumes.get(item.volumeId)?.attachments?.[item.id];
    return !item.deleted && summary ? [attachmentOf(item, summary)] : [];
  });
}

async function volumesOf(items: readonly Attachment[]): Promise<Map<string, Volume>> {
  const ids = [...new Set(items.map((a) => a.volumeId))];
  const volumes = await batchGetAll(table(), ids.map(volumeKey));
  return new Map(volumes.map((v) => [String(v.id), loadedVolume(v).volume]));
}

/** Every live attachment of a project (the GSI, oldest first), as its volume lists it. */
export async function queryProjectAttachments(projectId: string): Promise<Attachment[]> {
  const items = (await queryAll({ TableName: table(), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': projectAttachmentsGsi1pk(projectId) } })).map(attachmentFromItem);
  return items.length === 0 ? [] : mergeWithVolumes(items, await volumesOf(items));
}

/** Every live attachment of every project (admin `all_tenants`), as its volume lists it: one Scan of both kinds of item. */
export async function scanAllAttachments(): Promise<Attachment[]> {
  const items = await scanAll({
    TableName: table(),
    FilterExpression: '(sk = :att AND attribute_not_exists(deleted)) OR sk = :vol',
    ExpressionAttributeValues: { ':att': ATTACHMENT_SK, ':vol': VOLUME_SK },
  });
  const volumes = new Map(items.filter((i) => i.sk === VOLUME_SK).map((v) => [String(v.id), loadedVolume(v).volume]));
  return mergeWithVolumes(items.filter((i) => i.sk === ATTACHMENT_SK).map(attachmentFromItem), volumes);
}
