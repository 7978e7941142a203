/**
 * The attachment writes computed from the volume's record alone (its summary of the attachment),
 * with no read of the attachment: the delete (listed-removal.ts) and the complete
 * (listed-complete.ts). Each sets on the attachment's item only the fields its transition changes
 * and bumps its version, on condition that the item is a live attachment of this volume (and of
 * `projectId` when given: the project a caller took it for); the volume goes under its version,
 * which every write of what the summary shows moves (repo.ts writeWithVolume). The attachment's
 * condition failing while the volume's held is AttachmentNotListed (records that disagree: the
 * caller goes by id, reading the attachment). Apart from repo.ts, which is at its size.
 */
import { cancellationCodes } from '../core/db.js';
import { tableName } from '../core/tables.js';
import type { Volume } from '../volumes/model.js';
import { attachmentKey, attachmentToItem, type Attachment } from './model.js';
import { ATTACHMENT_EXISTS, ATTACHMENT_IN_PROJECT, ATTACHMENT_LIVE, writeWithVolume, type TransactItem } from './repo.js';
import { connectIntentEnd } from './repo-intents.js';
import { forgetAttachment, rememberAttachment } from './volume-records.js';

/** The fields a delete changes on the attachment's item (transitions.ts remove), besides its version and GSI keys. */
const TOMBSTONE_FIELDS = ['attachStatus', 'detachTime', 'deleted', 'disconnect', 'updatedAt', 'expiresAt'] as const;

/** The fields a complete changes on the attachment's item (transitions.ts complete), besides its version. */
const COMPLETE_FIELDS = ['attachStatus', 'updatedAt'] as const;

/** The fields a connect changes on the attachment's item (transitions.ts connect), besides its version, its intent and its wait. */
const CONNECT_FIELDS = ['attachStatus', 'connector', 'attachedHost', 'mountpoint', 'attachTime', 'attachMode', 'connectionInfo', 'updatedAt'] as const;

/**
 * A wait on the item (attach-wait.ts; only items written before the volume's `attachWaits` map
 * hold one) the connect may drop: none, or one that has ended for good (`attached`, or `failed`
 * with its detach done). Such a wait still watched, or failed with its detach still pending,
 * changes without the volume's version: that item goes by id. Waits in the volume's map need no
 * clause here: each of their writes moves the volume's version, which the connect is conditioned
 * on. Kept until the audit finds no wait on an item.
 */
const NO_LIVE_ITEM_WAIT = '(attribute_not_exists(#aw) OR #aw.#aws = :attached OR (#aw.#aws = :failed AND attribute_not_exists(#aw.#awd)))';

/** The volume lists an attachment whose item is not a live attachment of it (writeFieldsFromVolume). */
export class AttachmentNotListed extends Error {
  constructor(
    readonly attachmentId: string,
    cause: unknown,
  ) {
    super(`attachment ${attachmentId} is listed on its volume but its item is not a live attachment of it`, { cause });
    this.name = 'AttachmentNotListed';
  }
}

async function writeFieldsFromVolume(
  before: Volume,
  after: Volume,
  attachment: Attachment,
  fields: readonly string[],
  options: { projectId?: string; removeGsiKeys?: boolean; conditions?: readonly TransactItem[]; endConnectIntent?: string },
): Promise<void> {
  const item = attachmentToItem(attachment);
  const names: Record<string, string> = { '#vid': 'volumeId', ...(options.removeGsiKeys ? { '#g1': 'gsi1pk', '#g2': 'gsi1sk' } : {}) };
  const values: Record<string, unknown> = { ':vid': before.id, ':one': 1, ...(options.projectId === undefined ? {} : { ':project': options.projectId }) };
  const removes = options.removeGsiKeys ? ['#g1', '#g2'] : [];
  let condition = `${ATTACHMENT_EXISTS} AND ${ATTACHMENT_LIVE} AND #vid = :vid${options.projectId === undefined ? '' : ` AND ${ATTACHMENT_IN_PROJECT}`}`;
  if (options.endConnectIntent !== undefined) {
    Object.assign(names, { '#aw': 'attachWait', '#aws': 'status', '#awd': 'detachPending' });
    Object.assign(values, { ':attached': 'attached', ':failed': 'failed' });
    removes.push('#aw');
    condition += ` AND ${NO_LIVE_ITEM_WAIT}`;
  }
  fields.forEach((field, i) => {
    names[`#t${i}`] = field;
    values[`:t${i}`] = item[field] ?? null;
  });
  const update: TransactItem = {
    Update: {
      TableName: tableName('volume'),
      Key: attachmentKey(attachment.id),
      UpdateExpression: `SET ${fields.map((_, i) => `#t${i} = :t${i}`).join(', ')} ADD version :one${removes.length ? ` REMOVE ${removes.join(', ')}` : ''}`,
      ConditionExpression: condition,
      ExpressionAttributeNames: names,
      ExpressionAttributeValues: values,
    },
  };
  try {
    // The connect's intent is on the volume (model.ts `connectIntents`): its versioned update ends it.
    const endConnect = options.endConnectIntent === undefined ? undefined : connectIntentEnd(options.endConnectIntent);
    await writeWithVolume(update, before, after, options.conditions ?? [], endConnect);
  } catch (e) {
    const [attachmentCode, volumeCode] = cancellationCodes(e);
    if (attachmentCode === 'ConditionalCheckFailed' && volumeCode === 'None') throw new AttachmentNotListed(attachment.id, e);
    throw e;
  }
}

/** A delete from the volume's record: the item becomes the tombstone (`conditions`: the in-use checks riding along). */
export async function writeTombstoneFromVolume(before: Volume, after: Volume, tombstone: Attachment, conditions: readonly TransactItem[] = [], projectId?: string): Promise<void> {
  await writeFieldsFromVolume(before, after, tombstone, TOMBSTONE_FIELDS, { projectId, removeGsiKeys: true, conditions });
  forgetAttachment(tombstone.id);
}

/** A complete from the volume's record: ONE transaction, the attachment `attached` and the volume's summary with it. */
export async function writeCompleteFromVolume(before: Volume, after: Volume, completed: Attachment, projectId?: string): Promise<void> {
  await writeFieldsFromVolume(before, after, completed, COMPLETE_FIELDS, { projectId });
}

/**
 * A connect from the volume's record (listed-connect.ts): ONE transaction, the attachment's connect
 * fields (and a wait an older item held removed), and the volume's new summary and connections
 * with the connect's intent ended, and the wait of a pending connection in its `attachWaits`.
 */
export async function writeConnectFromVolume(before: Volume, after: Volume, connected: Attachment, intentId: string, projectId: string): Promise<void> {
  await writeFieldsFromVolume(before, after, connected, CONNECT_FIELDS, { projectId, endConnectIntent: intentId });
  rememberAttachment(connected);
}
