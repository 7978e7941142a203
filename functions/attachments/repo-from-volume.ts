/**
 * The attachment writes computed from the volume's record alone (its summary of the attachment),
 * with no read of the attachment: the connect (listed-connect.ts), the complete
 * (listed-complete.ts) and the delete (listed-removal.ts).
 *
 * The connect and the complete from a summary that carries the attachment's full state (it has
 * `updatedAt`: attachments/model.ts attachmentOf) write the volume alone: ONE UpdateItem under
 * the volume's version, on condition that the volume lists the attachment (and is of `projectId`
 * when given: the project the caller was authorized against). The attachment item is not written:
 * the summary is the attachment's state. What the item's condition held before moves to the
 * volume: every write of what a summary shows moves the version (the attach waits' included),
 * and "listed on the volume" is "a live attachment of it" (the create and the delete change both
 * in one transaction). A summary written before (no `updatedAt`) takes the transaction with the
 * item once, whose new summary has it.
 *
 * The delete (and that older connect) set on the item the fields their transition changes and
 * bump its version, on condition that the item is a live attachment of this volume (and of
 * `projectId`); the volume goes under its version (repo.ts writeWithVolume). The attachment's
 * condition failing while the volume's held is AttachmentNotListed (records that disagree: the
 * caller goes by id, reading the attachment). Apart from repo.ts, which is at its size.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { cancellationCodes, db } from '../core/db.js';
import { tableName } from '../core/tables.js';
import type { Volume } from '../volumes/model.js';
import { attachmentKey, attachmentToItem, type Attachment } from './model.js';
import { ATTACHMENT_EXISTS, ATTACHMENT_IN_PROJECT, ATTACHMENT_LIVE, rememberVersionedWrite, TOMBSTONE_STATE_FIELDS, versionedVolumeUpdate, writeVersioned, writeWithVolume, type EndedIntents, type TransactItem } from './repo.js';
import { connectIntentEnd, isNamed, type VolumeUpdatePart } from './repo-intents.js';
import { forgetAttachment, forgetVolume, loadedVolume, rememberAttachment, rememberVolume } from './volume-records.js';

/** The fields a delete changes on the attachment's item (transitions.ts remove), besides its version and GSI keys. */
const TOMBSTONE_FIELDS = ['attachStatus', 'detachTime', 'deleted', 'disconnect', 'updatedAt', 'expiresAt'] as const;

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

/** The volume lists an attachment whose item is not a live attachment of it (writeFieldsFromVolume), or no longer lists it, or is of another project than the caller took it for (writeVolumeOnly). */
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

/**
 * A delete from the volume's record: the item becomes the tombstone (`conditions`: the in-use
 * checks riding along), with the last state a full-state summary held copied onto it.
 */
export async function writeTombstoneFromVolume(before: Volume, after: Volume, tombstone: Attachment, conditions: readonly TransactItem[] = [], projectId?: string): Promise<void> {
  const full = before.attachments[tombstone.id]?.updatedAt !== undefined;
  await writeFieldsFromVolume(before, after, tombstone, full ? [...TOMBSTONE_FIELDS, ...TOMBSTONE_STATE_FIELDS] : TOMBSTONE_FIELDS, { projectId, removeGsiKeys: true, conditions });
  forgetAttachment(tombstone.id);
}

/** Whether the volume's summary of the attachment carries its full state: then a connect or complete writes the volume alone. */
const fullState = (volume: Volume, attachmentId: string) => volume.attachments[attachmentId]?.updatedAt !== undefined;

/**
 * The volume's versioned update alone, as ONE UpdateItem, on condition that it lists the attachment
 * (and is of `projectId`). Refused: the error (a condition failure, which RETRY retries from a read).
 */
async function writeVolumeOnly(before: Volume, after: Volume, attachmentId: string, projectId: string | undefined, part?: VolumeUpdatePart): Promise<void> {
  const listed: VolumeUpdatePart = {
    sets: [...(part?.sets ?? [])],
    removes: [...(part?.removes ?? [])],
    conditions: [...(part?.conditions ?? []), 'attribute_exists(attachments.#listed)', ...(projectId === undefined ? [] : ['projectId = :listedProject'])],
    names: { ...part?.names, '#listed': attachmentId },
    values: { ...part?.values, ...(projectId === undefined ? {} : { ':listedProject': projectId }) },
  };
  const { Update } = versionedVolumeUpdate(before, after, listed);
  try {
    await db().send(new UpdateCommand(Update!));
  } catch (e) {
    // The volume as the refusal found it: at the version read, it does not list the attachment (or
    // is of another project): the caller goes by id; else the retry starts from it.
    const found = isNamed(e, 'ConditionalCheckFailedException') ? (e as { Item?: Parameters<typeof unmarshall>[0] }).Item : undefined;
    const current = found ? loadedVolume(unmarshall(found)) : undefined;
    if (current) rememberVolume(current);
    else forgetVolume(before.id);
    if (current?.volume.version === before.version) throw new AttachmentNotListed(attachmentId, e);
    throw e;
  }
  rememberVersionedWrite(before, after);
}

/** A complete from the volume's record, whose summary carries the full state (listed-complete.ts asks for it): ONE UpdateItem of the volume. */
export async function writeCompleteFromVolume(before: Volume, after: Volume, completed: Attachment, projectId?: string): Promise<void> {
  await writeVolumeOnly(before, after, completed.id, projectId);
}

/**
 * A connect from the volume's record (listed-connect.ts): the volume's new summary and
 * connections with the connect's intent ended, and the wait of a pending connection in its
 * `attachWaits`: ONE UpdateItem of the volume when the summary carries the full state, else ONE
 * transaction that also writes the attachment's connect fields (and removes a wait an older item
 * held), whose summary then does.
 */
export async function writeConnectFromVolume(before: Volume, after: Volume, connected: Attachment, intentId: string, projectId: string): Promise<void> {
  if (fullState(before, connected.id)) await writeVolumeOnly(before, after, connected.id, projectId, connectIntentEnd(intentId));
  else await writeFieldsFromVolume(before, after, connected, CONNECT_FIELDS, { projectId, endConnectIntent: intentId });
  rememberAttachment(connected);
}

/**
 * A connect, complete, os-attach or failed attach decided from the attachment as read (by id):
 * the volume alone when its summary carries the full state (ONE UpdateItem, on condition that the
 * volume is at the version read and lists the attachment, of the attachment's project), else the
 * transaction with the item (repo.ts writeVersioned), whose new summary then carries it. A volume
 * that no longer lists the attachment is the condition failure a retry reads again (then 404).
 */
export async function writeAttachmentState(
  before: { volume: Volume; attachment: Attachment },
  after: { volume: Volume; attachment: Attachment },
  intents: Pick<EndedIntents, 'endIntent'> = {},
): Promise<void> {
  if (!fullState(before.volume, before.attachment.id)) return writeVersioned(before, after, intents);
  try {
    await writeVolumeOnly(before.volume, after.volume, before.attachment.id, before.attachment.projectId, intents.endIntent === undefined ? undefined : connectIntentEnd(intents.endIntent));
  } catch (e) {
    if (e instanceof AttachmentNotListed) throw e.cause;
    throw e;
  }
  rememberAttachment(after.attachment);
}
