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
import { db, queryAll, scanAll } from '../core/db.js';
import { GSI1, tableName } from '../core/tables.js';
import { volumeKey, type Volume } from '../volumes/model.js';
import { ATTACHMENT_SK, attachmentFromItem, attachmentKey, attachmentToItem, projectAttachmentsGsi1pk, type Attachment } from './model.js';
import { MULTIATTACH_RESERVE_FROM, RESERVE_FROM, SAME_INSTANCE_RESERVE_FROM, type ReserveResult } from './transitions.js';

type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];

const table = () => tableName('volume');

/** A volume as read, and whether its item already has the aggregate maps an additive update needs. */
export interface LoadedVolume {
  volume: Volume;
  hasMaps: boolean;
}

export async function getAttachmentRecord(id: string): Promise<Attachment | undefined> {
  const out = await db().send(new GetCommand({ TableName: table(), Key: attachmentKey(id), ConsistentRead: true }));
  return out.Item ? attachmentFromItem(out.Item) : undefined;
}

export async function getVolumeRecord(id: string): Promise<LoadedVolume | undefined> {
  const out = await db().send(new GetCommand({ TableName: table(), Key: volumeKey(id), ConsistentRead: true }));
  if (!out.Item) return undefined;
  const { pk: _pk, sk: _sk, gsi1pk: _g1, gsi1sk: _g2, ...rest } = out.Item;
  const hasMaps = ['attachments', 'instances', 'connections'].every((k) => typeof rest[k] === 'object' && rest[k] !== null);
  const volume = {
    ...rest,
    attachments: rest.attachments ?? {},
    instances: rest.instances ?? {},
    connections: rest.connections ?? {},
    adminMetadata: rest.adminMetadata ?? {},
    version: rest.version ?? 0,
  } as Volume;
  return { volume, hasMaps };
}

function valueList(prefix: string, values: readonly string[]): { expr: string; values: Record<string, string> } {
  const vals: Record<string, string> = {};
  values.forEach((v, i) => (vals[`${prefix}${i}`] = v));
  return { expr: Object.keys(vals).join(', '), values: vals };
}

/** The volume update of a versioned transition: writes the aggregate fields attachments own, conditioned on the version read. */
function versionedVolumeUpdate(before: Volume, after: Volume): TransactItem {
  return {
    Update: {
      TableName: table(),
      Key: volumeKey(before.id),
      UpdateExpression: 'SET #status = :status, attachStatus = :attachStatus, attachments = :attachments, instances = :instances, connections = :connections, updatedAt = :now, version = :next',
      ConditionExpression: 'version = :version',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: {
        ':status': after.status,
        ':attachStatus': after.attachStatus,
        ':attachments': after.attachments,
        ':instances': after.instances,
        ':connections': after.connections,
        ':now': after.updatedAt,
        ':next': before.version + 1,
        ':version': before.version,
      },
    },
  };
}

/**
 * Reserve: put the new attachment and add it to the volume. When the item has its maps, the
 * volume update is additive and conditioned on the reserve rule of the path the pure transition
 * chose; otherwise (an item written without them) it falls back to a versioned write.
 */
export async function writeReserve(before: LoadedVolume, result: ReserveResult): Promise<void> {
  const put: TransactItem = {
    Put: { TableName: table(), Item: attachmentToItem(result.attachment), ConditionExpression: 'attribute_not_exists(pk)' },
  };
  if (!before.hasMaps) {
    await db().send(new TransactWriteCommand({ TransactItems: [put, versionedVolumeUpdate(before.volume, result.volume)] }));
    return;
  }
  const a = result.attachment;
  const names: Record<string, string> = { '#status': 'status', '#atts': 'attachments', '#aid': a.id };
  const values: Record<string, unknown> = { ':summary': result.volume.attachments[a.id], ':now': a.createdAt, ':one': 1 };
  const sets = ['#atts.#aid = :summary', 'updatedAt = :now'];
  if (a.instanceUuid) {
    names['#insts'] = 'instances';
    names['#inst'] = a.instanceUuid;
    values[':zero'] = 0;
    sets.push('#insts.#inst = if_not_exists(#insts.#inst, :zero) + :one');
  }
  let condition: string;
  if (result.path === 'same-instance') {
    const from = valueList(':from', SAME_INSTANCE_RESERVE_FROM);
    Object.assign(values, from.values);
    condition = `#status IN (${from.expr}) AND #insts.#inst > :zero`;
  } else {
    sets.push('#status = :reserved');
    values[':reserved'] = 'reserved';
    const from = valueList(':from', result.path === 'multiattach' ? MULTIATTACH_RESERVE_FROM : RESERVE_FROM);
    Object.assign(values, from.values);
    condition = `#status IN (${from.expr})`;
    if (result.path === 'multiattach') {
      values[':true'] = true;
      condition = `multiattach = :true AND ${condition}`;
    }
  }
  const update: TransactItem = {
    Update: {
      TableName: table(),
      Key: volumeKey(a.volumeId),
      UpdateExpression: `SET ${sets.join(', ')} ADD version :one`,
      ConditionExpression: condition,
      ExpressionAttributeNames: names,
      ExpressionAttributeValues: values,
    },
  };
  await db().send(new TransactWriteCommand({ TransactItems: [put, update] }));
}

/** Connect, complete or delete: the attachment (or its tombstone) and the volume, each conditioned on the version read. */
export async function writeVersioned(before: { volume: Volume; attachment: Attachment }, after: { volume: Volume; attachment: Attachment }): Promise<void> {
  await db().send(
    new TransactWriteCommand({
      TransactItems: [
        {
          Put: {
            TableName: table(),
            Item: attachmentToItem(after.attachment),
            ConditionExpression: 'version = :version',
            ExpressionAttributeValues: { ':version': before.attachment.version },
          },
        },
        versionedVolumeUpdate(before.volume, after.volume),
      ],
    }),
  );
}

/**
 * After a host's backend connection was terminated: bump the volume's version unless an attachment
 * has meanwhile recorded a connection on that host. A connect that read the volume before this
 * fence then fails its versioned write and connects again, so it cannot keep a connection the
 * terminate removed. Returns 'in-use' when the host has users again (the caller reconnects it).
 */
export async function fenceHost(volumeId: string, host: string): Promise<'fenced' | 'in-use' | 'gone'> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: table(),
        Key: volumeKey(volumeId),
        UpdateExpression: 'ADD version :one',
        ConditionExpression: 'attribute_exists(pk) AND attribute_not_exists(#conns.#host)',
        ExpressionAttributeNames: { '#conns': 'connections', '#host': host },
        ExpressionAttributeValues: { ':one': 1 },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    return 'fenced';
  } catch (e) {
    if ((e as { name?: string }).name !== 'ConditionalCheckFailedException') throw e;
    return (e as { Item?: unknown }).Item ? 'in-use' : 'gone';
  }
}

/** Every live attachment of a project (the GSI), oldest first. */
export async function queryProjectAttachments(projectId: string): Promise<Attachment[]> {
  const items = await queryAll({ TableName: table(), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': projectAttachmentsGsi1pk(projectId) } });
  return items.map(attachmentFromItem);
}

/** Every live attachment of every project (admin `all_tenants`). */
export async function scanAllAttachments(): Promise<Attachment[]> {
  const items = await scanAll({ TableName: table(), FilterExpression: 'sk = :sk AND attribute_not_exists(deleted)', ExpressionAttributeValues: { ':sk': ATTACHMENT_SK } });
  return items.map(attachmentFromItem);
}
