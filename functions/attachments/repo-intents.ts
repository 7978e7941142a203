/**
 * The intents written before an effect at the backend (model.ts): a connect's, on its volume item
 * (`connectIntents`), and a delete's, on the attachment item (`pendingDisconnect`). Each is one
 * conditional update that also returns the item (ALL_NEW) when its call needs that read anyway.
 * Each adds its own key to its map and leaves the version alone, so concurrent calls neither erase
 * each other's intents nor make each other retry. Apart from repo.ts, whose writes end them.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { db } from '../core/db.js';
import { tableName } from '../core/tables.js';
import { volumeKey, type Volume } from '../volumes/model.js';
import { attachmentFromItem, attachmentKey, CONNECT_INTENTS, connectIntentsOf, type Attachment, type ConnectIntent, type DisconnectIntent } from './model.js';
import { forgetVolume, loadedVolume, rememberAttachment, rememberVolume, type LoadedVolume } from './volume-records.js';

/** Named condition clauses (Powertools' persistence layer builds its conditional put the same way). */
export const ATTACHMENT_EXISTS = 'attribute_exists(pk)';
export const ATTACHMENT_LIVE = 'attribute_not_exists(deleted)';
export const ATTACHMENT_IN_PROJECT = 'projectId = :project';
// A map every intent of which has ended is as good as none: written whole again in one request.
const INTENTS_MAP_EMPTY = '(attribute_not_exists(#pc) OR size(#pc) = :none)';
const INTENT_PRESENT = 'attribute_exists(#pc.#intent)';

const table = () => tableName('volume');
/** Whether `e` is the SDK error named `name` (ConditionalCheckFailedException, ...). */
export const isNamed = (e: unknown, name: string) => (e as { name?: string })?.name === name;

/** The attachment item's intent maps: a delete's, and connects' written before intents moved to the volume (recovery clears those). */
type IntentMap = 'pendingConnect' | 'pendingDisconnect';

/** What an intent write did: written (the attachment as stored after it), or refused (the item it found, if any). */
type IntentWrite = { written: Attachment } | { refused: Attachment | undefined };

/**
 * Adds `intent` under its id to the attachment's `map`, if the attachment is live (and of
 * `projectId`, when given). An item without the map, or with an empty one (its intents ended),
 * gets it whole (a nested SET needs the map): `wholeFirst` tries that first, for a map most items
 * lack or have emptied (no request more then).
 */
async function writeIntent(map: IntentMap, attachmentId: string, intent: { id: string }, projectId: string | undefined, wholeFirst: boolean): Promise<IntentWrite> {
  const clauses = [ATTACHMENT_EXISTS, ATTACHMENT_LIVE, ...(projectId === undefined ? [] : [ATTACHMENT_IN_PROJECT])];
  const project = projectId === undefined ? {} : { ':project': projectId };
  let refused: Attachment | undefined;
  for (let attempt = 0; attempt < 3; attempt++) {
    const whole = attempt % 2 === (wholeFirst ? 0 : 1);
    try {
      const out = await db().send(
        new UpdateCommand({
          TableName: table(),
          Key: attachmentKey(attachmentId),
          UpdateExpression: whole ? 'SET #pc = :intents' : 'SET #pc.#intent = :intent',
          ConditionExpression: (whole ? [...clauses, INTENTS_MAP_EMPTY] : clauses).join(' AND '),
          ExpressionAttributeNames: whole ? { '#pc': map } : { '#pc': map, '#intent': intent.id },
          ExpressionAttributeValues: { ...project, ...(whole ? { ':intents': { [intent.id]: intent }, ':none': 0 } : { ':intent': intent }) },
          ReturnValues: 'ALL_NEW',
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      const attachment = attachmentFromItem(out.Attributes!);
      rememberAttachment(attachment);
      return { written: attachment };
    } catch (e) {
      // The document client does not translate errors: the old item comes in the wire format.
      const old = (e as { Item?: Parameters<typeof unmarshall>[0] }).Item;
      refused = old ? attachmentFromItem(unmarshall(old)) : undefined;
      if (!whole && isNamed(e, 'ValidationException')) continue;
      if (whole && isNamed(e, 'ConditionalCheckFailedException') && Object.keys(refused?.[map] ?? {}).length > 0) continue;
      if (isNamed(e, 'ConditionalCheckFailedException')) return { refused };
      throw e;
    }
  }
  return { refused };
}

/**
 * Records a delete's disconnect intent on a live attachment (of `projectId`, when given); the
 * attachment as stored after, or, refused, the item found instead (a tombstone, another project's
 * attachment, or none). The map is written whole first: an attachment has it only once a delete
 * of it has begun, and empty again once that delete ended its intent (a refused delete retried
 * later): one request unless another delete of it is under way.
 */
export async function writeDisconnectIntent(attachmentId: string, intent: DisconnectIntent, projectId?: string): Promise<IntentWrite> {
  return writeIntent('pendingDisconnect', attachmentId, intent, projectId, true);
}

/** Removes an intent; 'gone' when it was not there any more (ended by its call's transaction, or by another pass). */
async function clearIntent(map: IntentMap, attachmentId: string, intentId: string): Promise<'cleared' | 'gone'> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: table(),
        Key: attachmentKey(attachmentId),
        UpdateExpression: 'REMOVE #pc.#intent',
        ConditionExpression: INTENT_PRESENT,
        ExpressionAttributeNames: { '#pc': map, '#intent': intentId },
      }),
    );
    return 'cleared';
  } catch (e) {
    if (isNamed(e, 'ConditionalCheckFailedException')) return 'gone';
    throw e;
  }
}

/** Clears a connect intent written on an attachment item before intents moved to the volume (recovery.ts). */
export const clearItemConnectIntent = (attachmentId: string, intentId: string) => clearIntent('pendingConnect', attachmentId, intentId);
export const clearDisconnectIntent = (attachmentId: string, intentId: string) => clearIntent('pendingDisconnect', attachmentId, intentId);

// A volume's connect intents (model.ts `connectIntents`).
const VOLUME_LISTS_ATTACHMENT = 'attribute_exists(#atts.#aid)';
const VOLUME_IN_PROJECT = 'projectId = :project';
const CONNECT_INTENTS_EMPTY = '(attribute_not_exists(#ci) OR size(#ci) = :none)';

/** A part of a volume update: what it SETs and REMOVEs, on what condition, with its names and values. */
export interface VolumeUpdatePart {
  sets: string[];
  removes: string[];
  conditions: string[];
  names: Record<string, string>;
  values: Record<string, unknown>;
}

/**
 * The SET of `intent` in a volume's `connectIntents`: under its own key, or, `whole`, the map
 * written whole on condition that it is absent or empty (a nested SET needs the map: volumes
 * written before intents moved there lack it, and a map every intent of which has ended is as good
 * as none). The map is empty but while a connect is in flight, so whole is the usual first try.
 */
export function connectIntentSet(intent: ConnectIntent, whole: boolean): VolumeUpdatePart {
  return whole
    ? { sets: ['#ci = :intents'], removes: [], conditions: [CONNECT_INTENTS_EMPTY], names: { '#ci': CONNECT_INTENTS }, values: { ':intents': { [intent.id]: intent }, ':none': 0 } }
    : { sets: ['#ci.#intent = :intent'], removes: [], conditions: [], names: { '#ci': CONNECT_INTENTS, '#intent': intent.id }, values: { ':intent': intent } };
}

/** The REMOVE of a connect intent its connect's write ends (repo.ts writeVersioned, repo-from-volume.ts). */
export function connectIntentEnd(intentId: string): VolumeUpdatePart {
  return { sets: [], removes: ['#ci.#cintent'], conditions: [], names: { '#ci': CONNECT_INTENTS, '#cintent': intentId }, values: {} };
}

/** Whether a volume record shows no connect intent: the map is then written whole first (connectIntentSet). */
export const noConnectIntents = (volume: object) => Object.keys(connectIntentsOf(volume)).length === 0;

/** Requests a volume intent write may take: the map's other form once, a conflicting transaction waited out. */
const ATTEMPTS = 3;

/** What a volume intent write did: written (the volume as stored after, when asked for), or refused (the volume it found, if any). */
type VolumeIntentWrite = { written: LoadedVolume | undefined } | { refused: Record<string, unknown> | undefined };

/**
 * Adds `intent` to the volume's `connectIntents` if `clauses` hold, the map whole first when
 * `wholeFirst` (connectIntentSet), the other way when that form cannot apply: a nested SET into a
 * missing map is invalid, a whole one refused by a map holding another call's intent. A
 * transaction in flight on the volume (a delete's) is waited out the same way.
 */
async function writeVolumeIntent(
  volumeId: string,
  intent: ConnectIntent,
  guard: { clauses: string[]; names: Record<string, string>; values: Record<string, unknown> },
  options: { wholeFirst: boolean; returnVolume: boolean },
): Promise<VolumeIntentWrite> {
  let whole = options.wholeFirst;
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const part = connectIntentSet(intent, whole);
    try {
      const out = await db().send(
        new UpdateCommand({
          TableName: table(),
          Key: volumeKey(volumeId),
          UpdateExpression: `SET ${part.sets.join(', ')}`,
          ConditionExpression: [...guard.clauses, ...part.conditions].join(' AND '),
          ExpressionAttributeNames: { ...guard.names, ...part.names },
          ExpressionAttributeValues: { ...guard.values, ...part.values },
          ReturnValues: options.returnVolume ? 'ALL_NEW' : 'NONE',
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      return { written: out.Attributes ? rememberVolume(loadedVolume(out.Attributes)) : undefined };
    } catch (e) {
      // The document client does not translate errors: the old item comes in the wire format.
      const old = (e as { Item?: Parameters<typeof unmarshall>[0] }).Item;
      const refused = old ? unmarshall(old) : undefined;
      // The last attempt answers what it found: a refusal, or the error itself (a conflict is not a "no").
      const again = attempt < ATTEMPTS - 1;
      if (again && isNamed(e, 'TransactionConflictException')) continue;
      if (again && !whole && isNamed(e, 'ValidationException')) {
        whole = true;
        continue;
      }
      if (again && whole && isNamed(e, 'ConditionalCheckFailedException') && refused && !noConnectIntents(refused)) {
        whole = false;
        continue;
      }
      if (isNamed(e, 'ConditionalCheckFailedException')) return { refused };
      throw e;
    }
  }
  throw new Error('unreachable: the last attempt returns or throws');
}

/**
 * Records a connect intent on the volume of a live `attachment` (as read by the caller: the item
 * names the volume), on condition that the volume lists it (summary listed ⇔ item live: the reserve
 * and delete transactions keep that) and, when given, is of `projectId`. The volume as stored
 * after (ALL_NEW: the read the connect needs anyway), or undefined when the volume does not list it.
 */
export async function writeConnectIntent(attachment: Attachment, intent: ConnectIntent, projectId?: string): Promise<LoadedVolume | undefined> {
  const guard = {
    clauses: [VOLUME_LISTS_ATTACHMENT, ...(projectId === undefined ? [] : [VOLUME_IN_PROJECT])],
    names: { '#atts': 'attachments', '#aid': attachment.id },
    values: projectId === undefined ? {} : { ':project': projectId },
  };
  const out = await writeVolumeIntent(attachment.volumeId, intent, guard, { wholeFirst: true, returnVolume: true });
  if ('written' in out) return out.written;
  if (!out.refused) forgetVolume(attachment.volumeId);
  return undefined;
}

/** Removes a connect intent from its volume; 'gone' when it was not there any more (ended by its connect's write, or by another pass). */
export async function clearConnectIntent(volumeId: string, intentId: string): Promise<'cleared' | 'gone'> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: table(),
        Key: volumeKey(volumeId),
        UpdateExpression: 'REMOVE #ci.#intent',
        ConditionExpression: 'attribute_exists(#ci.#intent)',
        ExpressionAttributeNames: { '#ci': CONNECT_INTENTS, '#intent': intentId },
      }),
    );
    return 'cleared';
  } catch (e) {
    if (isNamed(e, 'ConditionalCheckFailedException')) return 'gone';
    throw e;
  }
}

/**
 * What writeConnectIntentAtVersion did: written; `moved`, the volume was not at the version (the
 * record it found, remembered; undefined when there is none); `refused`, the volume at that version
 * does not list the attachment or is of another project (the caller goes by id).
 */
export type CheckedIntentWrite = 'written' | { moved: LoadedVolume | undefined } | 'refused';

/**
 * A connect intent recorded on `volume` in ONE UpdateItem conditioned on the volume still being at
 * the version of the record the connect decided on, listing the attachment, of `projectId`: that
 * record is then proven current at the moment the intent is recorded, as a read of it would be,
 * and the connect's effect (initializeConnection) follows a decision taken on the stored volume
 * (listed-connect.ts). No version bump, and no ReturnValues on success: the record is the stored one.
 */
export async function writeConnectIntentAtVersion(attachmentId: string, intent: ConnectIntent, volume: Volume, projectId: string): Promise<CheckedIntentWrite> {
  const guard = {
    clauses: ['version = :version', VOLUME_LISTS_ATTACHMENT, VOLUME_IN_PROJECT],
    names: { '#atts': 'attachments', '#aid': attachmentId },
    values: { ':version': volume.version, ':project': projectId },
  };
  const out = await writeVolumeIntent(volume.id, intent, guard, { wholeFirst: noConnectIntents(volume), returnVolume: false });
  if ('written' in out) return 'written';
  if (!out.refused) {
    forgetVolume(volume.id);
    return { moved: undefined };
  }
  if (out.refused.version !== volume.version) return { moved: rememberVolume(loadedVolume(out.refused)) };
  return 'refused';
}
