/**
 * DynamoDB reads and writes for attachments. Every change of an attachment and its volume is one
 * TransactWriteItems, so the attachment item and the volume aggregate (attachments, instances,
 * connections, status) never disagree.
 *
 * Two kinds of volume condition:
 * - `version` (and bump it): connect, complete, delete, whose transitions read the whole aggregate.
 * - the invariant itself, for the contended reserve paths: many concurrent attaches to a
 *   multiattach volume each add their own map entries and all succeed, instead of serializing
 *   into version retries.
 */
import { GetCommand, TransactWriteCommand, UpdateCommand, type TransactWriteCommandInput } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { isDeepStrictEqual } from 'node:util';
import { cancellationCodes, db, queryAll, scanAll } from '../core/db.js';
import { GSI1, tableName } from '../core/tables.js';
import { volumeKey, type Volume } from '../volumes/model.js';
import {
  ATTACHMENT_SK,
  attachmentFromItem,
  attachmentKey,
  AttachmentIdTaken,
  attachmentToItem,
  projectAttachmentsGsi1pk,
  type Attachment,
} from './model.js';
import { failedItem, forgetVolume, loadedVolume, rememberAttachment, rememberVolume, type LoadedVolume } from './volume-records.js';
import { MULTIATTACH_RESERVE_FROM, RESERVE_FROM, SAME_INSTANCE_RESERVE_FROM, type ReserveResult } from './transitions.js';

import { connectIntentEnd, connectIntentSet, isNamed, noConnectIntents, type VolumeUpdatePart } from './repo-intents.js';
import type { ConnectIntent } from './model.js';

export { getVolumeRecord, type LoadedVolume } from './volume-records.js';
export { getAttachmentItem, getAttachmentRecord, queryProjectAttachments, readAttachment, scanAllAttachments } from './attachment-reads.js';
export { ATTACHMENT_EXISTS, ATTACHMENT_IN_PROJECT, ATTACHMENT_LIVE, clearConnectIntent, clearDisconnectIntent, writeConnectIntent, writeDisconnectIntent } from './repo-intents.js';

export type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];

/** The state a tombstone copies from its attachment's summary (the fields attachmentOf takes from it). */
export const TOMBSTONE_STATE_FIELDS = ['instanceUuid', 'attachedHost', 'attachMode', 'attachTime', 'mountpoint', 'connector', 'connectionInfo'] as const;

const table = () => tableName('volume');

/** Named condition clauses (Powertools' persistence layer builds its conditional put the same way). */
const ATTACHMENT_ID_FREE = 'attribute_not_exists(pk)';

function valueList(prefix: string, values: readonly string[]): { expr: string; values: Record<string, string> } {
  const vals: Record<string, string> = {};
  values.forEach((v, i) => (vals[`${prefix}${i}`] = v));
  return { expr: Object.keys(vals).join(', '), values: vals };
}

/** The aggregate maps a versioned write keeps up to date. */
const AGGREGATE_MAPS = ['attachments', 'instances', 'connections'] as const;

/**
 * The volume update of a versioned transition, conditioned on the version read: the aggregate
 * fields attachments own, only where they changed (an entry of a map set or removed, not the whole
 * map: DynamoDB Local's cost grows with what an update carries). A map the record read as empty
 * may be missing from the item (written before the maps), so it is set whole, even when empty: the
 * record remembered after the write (writeWithVolume) says the item has its maps.
 */
export function versionedVolumeUpdate(before: Volume, after: Volume, part?: VolumeUpdatePart): TransactItem {
  const names: Record<string, string> = { ...part?.names };
  const values: Record<string, unknown> = { ':now': after.updatedAt, ':next': before.version + 1, ':version': before.version, ...part?.values };
  const sets = ['updatedAt = :now', 'version = :next', ...(part?.sets ?? [])];
  const removes: string[] = [...(part?.removes ?? [])];
  if (after.status !== before.status) {
    names['#status'] = 'status';
    values[':status'] = after.status;
    sets.push('#status = :status');
  }
  if (after.attachStatus !== before.attachStatus) {
    values[':attachStatus'] = after.attachStatus;
    sets.push('attachStatus = :attachStatus');
  }
  [...AGGREGATE_MAPS, 'attachWaits' as const].forEach((map, m) => {
    const was: Record<string, unknown> = before[map] ?? {};
    const now: Record<string, unknown> = after[map] ?? {};
    // The attach waits (attach-wait.ts) are absent until the first: set whole only to add one (most writes carry none).
    if (map === 'attachWaits' && Object.keys(was).length === 0 && Object.keys(now).length === 0) return;
    if (Object.keys(was).length === 0) {
      values[`:m${m}`] = now;
      sets.push(`${map} = :m${m}`);
      return;
    }
    const keys = new Set([...Object.keys(was), ...Object.keys(now)]);
    [...keys].forEach((key, k) => {
      if (isDeepStrictEqual(was[key], now[key])) return;
      names[`#m${m}k${k}`] = key;
      if (now[key] === undefined) removes.push(`${map}.#m${m}k${k}`);
      else {
        values[`:m${m}k${k}`] = now[key];
        sets.push(`${map}.#m${m}k${k} = :m${m}k${k}`);
      }
    });
  });
  return {
    Update: {
      TableName: table(),
      Key: volumeKey(before.id),
      UpdateExpression: `SET ${sets.join(', ')}${removes.length ? ` REMOVE ${removes.join(', ')}` : ''}`,
      ConditionExpression: ['version = :version', ...(part?.conditions ?? [])].join(' AND '),
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      ...(Object.keys(names).length ? { ExpressionAttributeNames: names } : {}),
      ExpressionAttributeValues: values,
    },
  };
}

/**
 * Reserve: put the new attachment and add it to the volume. When the item has its maps, the
 * volume update is additive and conditioned on the reserve rule of the path the pure transition
 * chose; otherwise (an item written without them) it falls back to a versioned write.
 *
 * `versioned`: the reserve was decided from a record this process remembers (volume-records.ts
 * knownVolume), not from a read: the update is also conditioned on that record's version, so the
 * decision (visibility, policy, reserve rule) was taken on the stored volume, and the volume as
 * stored after is known and remembered. Refused, the transaction's reason carries the volume as it
 * found it (ALL_OLD: volume-records.ts failedItem), for the retry to start from.
 *
 * `connectIntent`: a create with a connector records its connect's intent in the volume update
 * (model.ts `connectIntents`), the map whole when the record shows none (connectIntentSet: a map
 * written meanwhile refuses the transaction, whose retry starts from the item it found).
 */
export async function writeReserve(before: LoadedVolume, result: ReserveResult, options: { versioned?: boolean; connectIntent?: ConnectIntent } = {}): Promise<void> {
  // An additive update: what it leaves stored depends on concurrent reserves, so it is not remembered.
  forgetVolume(before.volume.id);
  const put: TransactItem = {
    Put: { TableName: table(), Item: attachmentToItem(result.attachment), ConditionExpression: ATTACHMENT_ID_FREE, ReturnValuesOnConditionCheckFailure: 'ALL_OLD' },
  };
  const intent = options.connectIntent ? connectIntentSet(options.connectIntent, noConnectIntents(before.volume)) : undefined;
  if (!before.hasMaps) {
    await sendReserve([put, versionedVolumeUpdate(before.volume, result.volume, intent)]);
    return rememberAttachment(result.attachment);
  }
  const a = result.attachment;
  const names: Record<string, string> = { '#status': 'status', '#atts': 'attachments', '#aid': a.id, ...intent?.names };
  const values: Record<string, unknown> = { ':summary': result.volume.attachments[a.id], ':now': a.createdAt, ':one': 1, ...intent?.values };
  const sets = ['#atts.#aid = :summary', 'updatedAt = :now', ...(intent?.sets ?? [])];
  if (a.instanceUuid) {
    names['#insts'] = 'instances';
    names['#inst'] = a.instanceUuid;
    values[':zero'] = 0;
    sets.push('#insts.#inst = if_not_exists(#insts.#inst, :zero) + :one');
  }
  let condition = '';
  if (options.versioned) {
    values[':version'] = before.volume.version;
    condition = 'version = :version AND ';
  }
  if (result.path === 'same-instance') {
    const from = valueList(':from', SAME_INSTANCE_RESERVE_FROM);
    Object.assign(values, from.values);
    condition += `#status IN (${from.expr}) AND #insts.#inst > :zero`;
  } else {
    sets.push('#status = :reserved');
    values[':reserved'] = 'reserved';
    const from = valueList(':from', result.path === 'multiattach' ? MULTIATTACH_RESERVE_FROM : RESERVE_FROM);
    Object.assign(values, from.values);
    condition += `#status IN (${from.expr})`;
    if (result.path === 'multiattach') {
      values[':true'] = true;
      condition += ' AND multiattach = :true';
    }
  }
  for (const clause of intent?.conditions ?? []) condition += ` AND ${clause}`;
  const update: TransactItem = {
    Update: {
      TableName: table(),
      Key: volumeKey(a.volumeId),
      UpdateExpression: `SET ${sets.join(', ')} ADD version :one`,
      ConditionExpression: condition,
      ExpressionAttributeNames: names,
      ExpressionAttributeValues: values,
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
    },
  };
  await sendReserve([put, update]);
  rememberAttachment(result.attachment);
  // Under the version read, what the update set is all that changed: the stored volume is the transition's.
  if (options.versioned) rememberVolume({ volume: result.volume, hasMaps: true });
}

/** The reserve transaction; when its put finds the id taken, AttachmentIdTaken with the item it found. */
async function sendReserve(items: TransactItem[]): Promise<void> {
  try {
    await db().send(new TransactWriteCommand({ TransactItems: items }));
  } catch (e) {
    const [putReason] = (e as { CancellationReasons?: { Code?: string; Item?: Record<string, unknown> }[] }).CancellationReasons ?? [];
    if ((e as { name?: string }).name === 'TransactionCanceledException' && putReason?.Code === 'ConditionalCheckFailed' && putReason.Item) {
      // Errors are not translated by the document client: the old item comes in the wire format.
      throw new AttachmentIdTaken(attachmentFromItem(unmarshall(putReason.Item as Parameters<typeof unmarshall>[0])));
    }
    throw e;
  }
}

/**
 * The attachment's side of a versioned write: every field of `after` that differs from `before` set, the fields it dropped
 * removed (a tombstone's GSI keys), conditioned on the version read. The intents are left
 * alone but for the delete's this write ends: intents of concurrent calls, written after the read,
 * survive it (their writes do not move the version, so they never make this one retry).
 */
function versionedAttachmentUpdate(before: Attachment, after: Attachment, intents: EndedIntents): TransactItem {
  const item = attachmentToItem(after);
  const previous = attachmentToItem(before);
  const untouched = new Set(['pk', 'sk', 'pendingConnect', 'pendingDisconnect']);
  // A tombstone keeps the attachment's last state, which its volume's summary held (calls from the
  // summary leave the item as the reserve wrote it): copied whole, whatever `before` says.
  const copied = new Set<string>(after.deleted ? TOMBSTONE_STATE_FIELDS : []);
  const names: Record<string, string> = {};
  const values: Record<string, unknown> = { ':version': before.version };
  const sets: string[] = [];
  const removes: string[] = [];
  Object.entries(item).forEach(([field, value], i) => {
    // Only what changed: the version condition makes `before` the stored item (intents aside), and
    // DynamoDB Local's cost grows with the values an update carries (a connect's was all 18).
    if (untouched.has(field) || value === undefined || (!copied.has(field) && isDeepStrictEqual(value, previous[field]))) return;
    names[`#s${i}`] = field;
    values[`:s${i}`] = value;
    sets.push(`#s${i} = :s${i}`);
  });
  Object.keys(previous).forEach((field, i) => {
    if (untouched.has(field) || item[field] !== undefined || previous[field] === undefined) return;
    names[`#r${i}`] = field;
    removes.push(`#r${i}`);
  });
  if (intents.endDisconnectIntent !== undefined) {
    names['#pd'] = 'pendingDisconnect';
    names['#dintent'] = intents.endDisconnectIntent;
    removes.push('#pd.#dintent');
  }
  return {
    Update: {
      TableName: table(),
      Key: attachmentKey(after.id),
      UpdateExpression: `SET ${sets.join(', ')}${removes.length ? ` REMOVE ${removes.join(', ')}` : ''}`,
      ConditionExpression: 'version = :version',
      ExpressionAttributeNames: names,
      ExpressionAttributeValues: values,
    },
  };
}

/** The intent a versioned write ends: a connect's (on the volume, `connectIntents`), a delete's (the item's `pendingDisconnect`). */
export interface EndedIntents {
  endIntent?: string;
  endDisconnectIntent?: string;
}

/**
 * A condition of another capability's records (`conditions` of writeVersioned) failed: which one
 * (its index among them) and the item it returned. The version conditions may have failed too;
 * the caller decides from this one first.
 */
export class ExtraConditionFailed extends Error {
  constructor(
    readonly index: number,
    readonly old: Record<string, unknown> | undefined,
    readonly cancelled: unknown,
  ) {
    super(`condition ${index} of the transaction did not hold`, { cause: cancelled });
    this.name = 'ExtraConditionFailed';
  }
}

/**
 * Connect, complete or delete: the attachment (or its tombstone) and the volume, each conditioned
 * on the version read. A connect also ends its intent, a delete by id its disconnect intent. `conditions` ride in the same transaction
 * (a delete's in-use check: attachments/ports.ts); one that fails is ExtraConditionFailed, a
 * version race stays the transaction's own error.
 */
export async function writeVersioned(
  before: { volume: Volume; attachment: Attachment },
  after: { volume: Volume; attachment: Attachment },
  intents: EndedIntents = {},
  conditions: readonly TransactItem[] = [],
): Promise<void> {
  const endConnect = intents.endIntent === undefined ? undefined : connectIntentEnd(intents.endIntent);
  await writeWithVolume(versionedAttachmentUpdate(before.attachment, after.attachment, intents), before.volume, after.volume, conditions, endConnect);
  rememberAttachment(after.attachment);
}

/** One attachment write and the volume's versioned update (with `volumePart`: a connect intent ended) in a transaction, with `conditions`; the volume as stored after is remembered. */
export async function writeWithVolume(attachmentWrite: TransactItem, before: Volume, after: Volume, conditions: readonly TransactItem[], volumePart?: VolumeUpdatePart): Promise<void> {
  const items = [attachmentWrite, versionedVolumeUpdate(before, after, volumePart)];
  try {
    await db().send(new TransactWriteCommand({ TransactItems: [...items, ...conditions] }));
  } catch (e) {
    // The volume as the failed transaction found it: the retry starts from it instead of a read.
    const current = failedItem(e, 1);
    if (current) rememberVolume(loadedVolume(current));
    else if (cancellationCodes(e)[1] !== 'None') forgetVolume(before.id); // 'None': its condition held, the record read is still the stored one
    const reasons = (e as { CancellationReasons?: { Code?: string }[] }).CancellationReasons ?? [];
    const failed = reasons.findIndex((r, i) => i >= items.length && r?.Code === 'ConditionalCheckFailed');
    if (!isNamed(e, 'TransactionCanceledException') || failed < 0) throw e;
    throw new ExtraConditionFailed(failed - items.length, failedItem(e, failed), e);
  }
  rememberVersionedWrite(before, after);
}

/** After a versioned volume update: the stored volume is the record read with what versionedVolumeUpdate set. */
export function rememberVersionedWrite(before: Volume, after: Volume): void {
  const written = { status: after.status, attachStatus: after.attachStatus, attachments: after.attachments, instances: after.instances, connections: after.connections, attachWaits: after.attachWaits, updatedAt: after.updatedAt };
  rememberVolume({ volume: { ...before, ...written, version: before.version + 1 }, hasMaps: true });
}

/**
 * After a host's backend connection was terminated: bump the volume's version unless an attachment
 * has meanwhile recorded a connection on that host. A connect that read the volume before this
 * fence then fails its versioned write and connects again, so it cannot keep a connection the
 * terminate removed. Returns 'in-use' when the host has users again (the caller reconnects it).
 *
 * `whileUsed`: the fence after a connection was made again (connections.ts restoreHost): bump the
 * version only while an attachment still records the host; 'unused' when none does any more.
 */
export async function fenceHost(volumeId: string, host: string, options: { whileUsed?: boolean } = {}): Promise<'fenced' | 'in-use' | 'unused' | 'gone'> {
  try {
    const out = await db().send(
      new UpdateCommand({
        TableName: table(),
        Key: volumeKey(volumeId),
        UpdateExpression: 'ADD version :one',
        ConditionExpression: `attribute_exists(pk) AND ${options.whileUsed ? 'attribute_exists' : 'attribute_not_exists'}(#conns.#host)`,
        ExpressionAttributeNames: { '#conns': 'connections', '#host': host },
        ExpressionAttributeValues: { ':one': 1 },
        ReturnValues: 'ALL_NEW',
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    rememberVolume(loadedVolume(out.Attributes!));
    return 'fenced';
  } catch (e) {
    forgetVolume(volumeId);
    if ((e as { name?: string }).name !== 'ConditionalCheckFailedException') throw e;
    if (!(e as { Item?: unknown }).Item) return 'gone';
    return options.whileUsed ? 'unused' : 'in-use';
  }
}
