/**
 * The intents written on an attachment item before an effect at the backend (model.ts): a
 * connect's (`pendingConnect`) and a delete's (`pendingDisconnect`). Each is one conditional
 * update that also returns the attachment (ALL_NEW): the read its call needs anyway. Each adds its
 * own key to its map and leaves the version alone, so concurrent calls neither erase each other's
 * intents nor make each other retry. Apart from repo.ts, whose writes end them.
 */
import { TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { cancellationCodes, db } from '../core/db.js';
import { tableName } from '../core/tables.js';
import { volumeKey, type Volume } from '../volumes/model.js';
import { attachmentFromItem, attachmentKey, type Attachment, type ConnectIntent, type DisconnectIntent } from './model.js';
import { failedItem, forgetVolume, loadedVolume, rememberAttachment, rememberVolume, type LoadedVolume } from './volume-records.js';

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
 * Records a connect intent on a live attachment (of `projectId`, when given); the attachment as
 * stored after, or undefined when there is no such live attachment. Items have the map since
 * connect intents exist (a reserve writes it).
 */
export async function writeConnectIntent(attachmentId: string, intent: ConnectIntent, projectId?: string): Promise<Attachment | undefined> {
  const out = await writeIntent('pendingConnect', attachmentId, intent, projectId, false);
  return 'written' in out ? out.written : undefined;
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

export const clearConnectIntent = (attachmentId: string, intentId: string) => clearIntent('pendingConnect', attachmentId, intentId);
export const clearDisconnectIntent = (attachmentId: string, intentId: string) => clearIntent('pendingDisconnect', attachmentId, intentId);

/**
 * What writeConnectIntentAtVersion did: written; `moved`, the volume was not at the version (the
 * record it found, remembered; undefined when there is none); `refused`, the item is not a live
 * attachment of that volume and project, or has no intents map (the caller goes by id).
 */
export type CheckedIntentWrite = 'written' | { moved: LoadedVolume | undefined } | 'refused';

/**
 * A connect intent recorded on a live attachment of `volume` and of `projectId`, in ONE
 * transaction with a check that the volume is still at the version of the record the connect
 * decided on: that record is then proven current at the moment the intent is recorded, as a read
 * of it would be, and the connect's effect (initializeConnection) follows a decision taken on the
 * stored volume (listed-connect.ts). No ReturnValues on success: the attachment's state comes from
 * the volume's summary of it, which the same version guards.
 */
export async function writeConnectIntentAtVersion(attachmentId: string, intent: ConnectIntent, volume: Volume, projectId: string): Promise<CheckedIntentWrite> {
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          {
            Update: {
              TableName: table(),
              Key: attachmentKey(attachmentId),
              UpdateExpression: 'SET #pc.#intent = :intent',
              ConditionExpression: `${ATTACHMENT_EXISTS} AND ${ATTACHMENT_LIVE} AND #vid = :vid AND ${ATTACHMENT_IN_PROJECT}`,
              ExpressionAttributeNames: { '#pc': 'pendingConnect', '#intent': intent.id, '#vid': 'volumeId' },
              ExpressionAttributeValues: { ':intent': intent, ':vid': volume.id, ':project': projectId },
            },
          },
          {
            ConditionCheck: {
              TableName: table(),
              Key: volumeKey(volume.id),
              ConditionExpression: 'version = :version',
              ExpressionAttributeValues: { ':version': volume.version },
              ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
            },
          },
        ],
      }),
    );
    return 'written';
  } catch (e) {
    // An item without the intents map: a nested SET is invalid. The connect by id writes it whole.
    if (isNamed(e, 'ValidationException')) return 'refused';
    if (!isNamed(e, 'TransactionCanceledException')) throw e;
    const [attachmentCode, volumeCode] = cancellationCodes(e);
    if (volumeCode === 'ConditionalCheckFailed') {
      const current = failedItem(e, 1);
      if (!current) forgetVolume(volume.id);
      return { moved: current ? rememberVolume(loadedVolume(current)) : undefined };
    }
    if (attachmentCode === 'ConditionalCheckFailed' || attachmentCode === 'ValidationError') return 'refused';
    throw e;
  }
}
