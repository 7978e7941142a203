/**
 * QoS specs (C/volume/qos_specs.py, C/objects/qos_specs.py, the qos_specs_* calls of C/db/api.py):
 * the model and the repository; the REST routes are qos-routes.ts.
 *
 * Layout in the volume table:
 * - spec:       pk `QOS#<id>`, sk `QOS`, gsi1pk `QOSSPECS`, gsi1sk `<createdAt>#<id>`; `typeCount`
 *               counts the volume types associated with it, kept in the same transaction as the
 *               type's `qosSpecsId`, so "deleting a spec still associated" is a condition, not a read.
 * - name claim: pk `QOSNAME#<name>`, sk `QOSNAME`, `specsId`; put with the spec, so two creates of
 *               one name cannot both succeed (upstream's QoSSpecsExists).
 * The association itself is the type's `qosSpecsId` (types.ts), as upstream's volume_types column.
 */
import { GetCommand, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { cancellationCodes, db, isConditionFailure, queryAll, withRetries } from '../core/db.js';
import { BadRequest, Conflict, FerryError, NotFound } from '../core/errors.js';
import { GSI1, tableName } from '../core/tables.js';
import { getVolumeTypeById, listVolumeTypes, qosSpecKey, volumeTypeKey, type VolumeType } from './types.js';

export const QOS_CONSUMERS = ['front-end', 'back-end', 'both'] as const;
export type QosConsumer = (typeof QOS_CONSUMERS)[number];

export interface QosSpecs {
  id: string;
  name: string;
  consumer: QosConsumer;
  specs: Record<string, string | null>;
  createdAt: string;
  version: number;
}

const specKey = qosSpecKey;
const nameKey = (name: string) => ({ pk: `QOSNAME#${name}`, sk: 'QOSNAME' });

export const qosNotFound = (id: string) => new NotFound(`No such QoS spec ${id}.`);
// Upstream formats the consumer field itself into the message (oslo's BaseEnumField repr).
export const invalidConsumer = () =>
  new BadRequest(
    "Invalid qos specs: Valid consumer of QoS specs are: QoSConsumerValues(default=<class 'oslo_versionedobjects.fields.UnspecifiedDefault'>,nullable=False,valid_values=('back-end', 'front-end', 'both'))",
  );

function toSpecs(item: Record<string, unknown>): QosSpecs {
  return {
    id: item.id as string,
    name: item.name as string,
    consumer: item.consumer as QosConsumer,
    specs: (item.specs as Record<string, string | null>) ?? {},
    createdAt: item.createdAt as string,
    version: (item.version as number) ?? 1,
  };
}

export async function getQosSpecs(id: string): Promise<QosSpecs> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: specKey(id) }));
  if (!out.Item) throw qosNotFound(id);
  return toSpecs(out.Item);
}

/** Newest first, as upstream's default sort (created_at desc). */
export async function listQosSpecs(): Promise<QosSpecs[]> {
  const items = await queryAll({ TableName: tableName('volume'), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': 'QOSSPECS' } });
  return items.map(toSpecs).sort((a, b) => b.createdAt.localeCompare(a.createdAt) || b.id.localeCompare(a.id));
}

/** Creates a spec; the name claim makes a second create of one name fail with 409 and write nothing. */
export async function createQosSpecs(input: { name: string; consumer: QosConsumer; specs: Record<string, string> }): Promise<QosSpecs> {
  const s: QosSpecs = { id: randomUUID(), name: input.name, consumer: input.consumer, specs: input.specs, createdAt: new Date().toISOString(), version: 1 };
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Put: { TableName: tableName('volume'), Item: { ...nameKey(s.name), specsId: s.id }, ConditionExpression: 'attribute_not_exists(pk)' } },
          { Put: { TableName: tableName('volume'), Item: { ...specKey(s.id), gsi1pk: 'QOSSPECS', gsi1sk: `${s.createdAt}#${s.id}`, ...s, typeCount: 0 }, ConditionExpression: 'attribute_not_exists(pk)' } },
        ],
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw new Conflict(`QoS Specs ${s.name} already exists.`);
    throw e;
  }
  return s;
}

/** Sets keys (one map path each, so concurrent writers of other keys are kept) and the consumer. */
export async function setQosSpecs(id: string, specs: Record<string, string | null>, consumer?: QosConsumer): Promise<void> {
  const names: Record<string, string> = { '#s': 'specs' };
  const values: Record<string, unknown> = { ':one': 1 };
  const sets = Object.entries(specs).map(([k, v], i) => {
    names[`#k${i}`] = k;
    values[`:v${i}`] = v;
    return `#s.#k${i} = :v${i}`;
  });
  if (consumer) {
    sets.push('consumer = :c');
    values[':c'] = consumer;
  }
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: specKey(id),
        UpdateExpression: `SET ${[...sets, 'version = version + :one'].join(', ')}`,
        ConditionExpression: 'attribute_exists(pk)',
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: values,
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw qosNotFound(id);
    throw e;
  }
}

/**
 * Removes keys, all or none: the condition asks for every key, and the first one missing is
 * reported as upstream reports it (upstream removes the keys before it, see docs/compatibility.md).
 */
export async function deleteQosKeys(id: string, keys: string[]): Promise<void> {
  if (keys.length === 0) return void (await getQosSpecs(id));
  const names: Record<string, string> = { '#s': 'specs' };
  keys.forEach((k, i) => (names[`#k${i}`] = k));
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: specKey(id),
        UpdateExpression: `REMOVE ${keys.map((_, i) => `#s.#k${i}`).join(', ')} SET version = version + :one`,
        ConditionExpression: ['attribute_exists(pk)', ...keys.map((_, i) => `attribute_exists(#s.#k${i})`)].join(' AND '),
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: { ':one': 1 },
      }),
    );
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    const now = await getQosSpecs(id);
    const missing = keys.find((k) => !(k in now.specs));
    if (missing !== undefined) throw new NotFound(`QoS spec ${id} has no spec with key ${missing}.`);
    throw new Conflict(`QoS specs ${id} was changed by another request at the same time; try again.`);
  }
}

/** The types associated with a spec (upstream's get_associations). */
export async function qosAssociations(id: string): Promise<VolumeType[]> {
  return (await listVolumeTypes()).filter((t) => t.qosSpecsId === id).sort((a, b) => a.name.localeCompare(b.name));
}

const retryConflicts = { retryable: (e: unknown) => cancellationCodes(e).includes('TransactionConflict'), attempts: 10 };

/**
 * Associates a spec with a type: the type's qosSpecsId and the spec's typeCount in one transaction,
 * conditioned on the type having no spec (or this one: nothing to do) and the spec existing.
 */
export async function associateQos(id: string, typeId: string): Promise<void> {
  await withRetries(async () => {
    await getQosSpecs(id);
    const type = await getVolumeTypeById(typeId);
    if (type.qosSpecsId === id) return;
    if (type.qosSpecsId) throw new BadRequest(`Invalid volume type: Type ${typeId} is already associated with another qos specs: ${type.qosSpecsId}`);
    try {
      await db().send(
        new TransactWriteCommand({
          TransactItems: [
            { Update: { TableName: tableName('volume'), Key: volumeTypeKey(typeId), UpdateExpression: 'SET qosSpecsId = :q, version = version + :one', ConditionExpression: 'attribute_exists(pk) AND (attribute_not_exists(qosSpecsId) OR qosSpecsId = :null)', ExpressionAttributeValues: { ':q': id, ':one': 1, ':null': null } } },
            { Update: { TableName: tableName('volume'), Key: specKey(id), UpdateExpression: 'ADD typeCount :one', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':one': 1 } } },
          ],
        }),
      );
    } catch (e) {
      // The type or the spec changed since the reads: read again and answer from what is there now.
      if (isConditionFailure(e) && cancellationCodes(e).includes('ConditionalCheckFailed')) return associateQos(id, typeId);
      throw e;
    }
  }, retryConflicts);
}

/** Removes the association if the type has this spec; nothing to do otherwise (upstream's filter_by). */
export async function disassociateQos(id: string, typeId: string): Promise<void> {
  await withRetries(async () => {
    await getQosSpecs(id);
    const type = await getVolumeTypeById(typeId);
    if (type.qosSpecsId !== id) return;
    try {
      await db().send(new TransactWriteCommand({ TransactItems: disassociation(id, [typeId]) }));
    } catch (e) {
      if (isConditionFailure(e) && cancellationCodes(e).includes('ConditionalCheckFailed')) return disassociateQos(id, typeId);
      throw e;
    }
  }, retryConflicts);
}

/** The writes that take `typeIds` off spec `id`: each type conditioned on still having it. */
function disassociation(id: string, typeIds: string[]) {
  return [
    ...typeIds.map((typeId) => ({
      Update: { TableName: tableName('volume'), Key: volumeTypeKey(typeId), UpdateExpression: 'SET qosSpecsId = :null, version = version + :one', ConditionExpression: 'qosSpecsId = :q', ExpressionAttributeValues: { ':q': id, ':one': 1, ':null': null } },
    })),
    { Update: { TableName: tableName('volume'), Key: specKey(id), UpdateExpression: 'ADD typeCount :minus', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':minus': -typeIds.length } } },
  ];
}

export async function disassociateAllQos(id: string): Promise<void> {
  await withRetries(async () => {
    await getQosSpecs(id);
    const types = await qosAssociations(id);
    if (types.length === 0) return;
    try {
      // 99 types and the spec: one transaction; more come off in the next pass.
      await db().send(new TransactWriteCommand({ TransactItems: disassociation(id, types.slice(0, 99).map((t) => t.id)) }));
    } catch (e) {
      if (isConditionFailure(e) && cancellationCodes(e).includes('ConditionalCheckFailed')) return disassociateAllQos(id);
      throw e;
    }
    if (types.length > 99) await disassociateAllQos(id);
  }, retryConflicts);
}

/**
 * Deletes a spec no type is associated with: the condition reads typeCount, so an associate that
 * lands after any read still refuses the delete. `force` first takes every association off.
 */
export async function deleteQosSpecs(id: string, force: boolean): Promise<void> {
  const s = await getQosSpecs(id);
  if (force) await disassociateAllQos(id);
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Delete: { TableName: tableName('volume'), Key: specKey(id), ConditionExpression: 'attribute_exists(pk) AND (attribute_not_exists(typeCount) OR typeCount <= :zero)', ExpressionAttributeValues: { ':zero': 0 } } },
          { Delete: { TableName: tableName('volume'), Key: nameKey(s.name), ConditionExpression: 'attribute_not_exists(pk) OR specsId = :id', ExpressionAttributeValues: { ':id': id } } },
        ],
      }),
    );
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    await getQosSpecs(id);
    // Upstream's HTTPInternalServerError: a force delete raced by a new association.
    if (force) throw new FerryError(500, 'computeFault', 'Failed to disassociate qos specs.');
    throw new BadRequest('Qos specs still in use.');
  }
}
