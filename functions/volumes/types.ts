/**
 * Volume types and their extra specs (C/api/v2/types.py, C/api/contrib/types_manage.py,
 * C/api/contrib/types_extra_specs.py): the model and the repository (the view and the REST routes:
 * type-routes.ts).
 *
 * Layout in the volume table:
 * - type:       pk `VTYPE#<id>`, sk `VTYPE`, gsi1pk `VTYPES`, gsi1sk `<name>`; `volumeCount` counts
 *               the volumes of this type (repo.ts adds and removes in the volume's own transaction),
 *               so "deleting a type in use" is a condition, not a read.
 * - name claim: pk `VTYPENAME#<name>`, sk `VTYPENAME`, `typeId`; put in the same transaction as the
 *               type, so two creates of one name cannot both succeed.
 */
import { GetCommand, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import type { AuthContext } from '../core/auth.js';
import { db, isConditionFailure, queryAll } from '../core/db.js';
import { BadRequest, Conflict, NotFound } from '../core/errors.js';
import { GSI1, tableName } from '../core/tables.js';
import { MAX_MAP_ITEMS, tooManyExtraSpecs, isUuidLike } from './validation.js';

/** The type a volume gets when the request names none (cinder.conf default_volume_type). */
export const DEFAULT_VOLUME_TYPE = process.env.FERRY_DEFAULT_VOLUME_TYPE ?? 'default';

/** Extra specs every user may read (C/api/v2/views/types.py USER_VISIBLE_EXTRA_SPECS). */
export const USER_VISIBLE_EXTRA_SPECS = ['RESKEY:availability_zones', 'multiattach', 'replication_enabled'];

/** The extra spec value that makes a type multiattach (and the scheduler ask for the capability). */
export const IS_TRUE = '<is> True';

export interface VolumeType {
  id: string;
  name: string;
  description: string | null;
  isPublic: boolean;
  extraSpecs: Record<string, string>;
  qosSpecsId: string | null;
  /** A private type's access list (os-volume-type-access, type-access.ts): the projects that may see and use it. */
  projects: string[];
  createdAt: string;
  version: number;
}

const typeKey = (id: string) => ({ pk: `VTYPE#${id}`, sk: 'VTYPE' });
const nameKey = (name: string) => ({ pk: `VTYPENAME#${name}`, sk: 'VTYPENAME' });
export const volumeTypeKey = typeKey;
/** A QoS spec's key (qos.ts keeps the specs; a type's delete takes its association off the spec's count). */
export const qosSpecKey = (id: string) => ({ pk: `QOS#${id}`, sk: 'QOS' });

function toType(item: Record<string, unknown>): VolumeType {
  return {
    id: item.id as string,
    name: item.name as string,
    description: (item.description as string | null) ?? null,
    isPublic: item.isPublic !== false,
    extraSpecs: (item.extraSpecs as Record<string, string>) ?? {},
    qosSpecsId: (item.qosSpecsId as string | null) ?? null,
    // Stored as a DynamoDB string set (ADD / DELETE keep it without a read).
    projects: item.projects instanceof Set ? [...(item.projects as Set<string>)].sort() : [],
    createdAt: item.createdAt as string,
    version: (item.version as number) ?? 1,
  };
}

export function isMultiattachType(t: Pick<VolumeType, 'extraSpecs'>): boolean {
  return (t.extraSpecs.multiattach ?? '').trim().toLowerCase() === IS_TRUE.toLowerCase();
}

const typeNotFound = (id: string) => new NotFound(`Volume type ${id} could not be found.`);
const typeNameNotFound = (name: string) => new NotFound(`Volume type with name ${name} could not be found.`);

export async function getVolumeTypeById(id: string): Promise<VolumeType> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: typeKey(id) }));
  if (!out.Item) throw typeNotFound(id);
  return toType(out.Item);
}

export async function getVolumeTypeByName(name: string): Promise<VolumeType> {
  const claim = await db().send(new GetCommand({ TableName: tableName('volume'), Key: nameKey(name) }));
  if (!claim.Item) throw typeNameNotFound(name);
  const t = await db().send(new GetCommand({ TableName: tableName('volume'), Key: typeKey(claim.Item.typeId as string) }));
  if (!t.Item) throw typeNameNotFound(name);
  return toType(t.Item);
}

/** Upstream's get_by_name_or_id: a UUID-like identity is an id, anything else a name. */
export async function getVolumeTypeByNameOrId(identity: string): Promise<VolumeType> {
  return isUuidLike(identity) ? getVolumeTypeById(identity) : getVolumeTypeByName(identity);
}

/** For the types routes: an id first, then a name (cinderclient's find_resource passes either). */
export async function findType(idOrName: string): Promise<VolumeType> {
  try {
    return await getVolumeTypeById(idOrName);
  } catch (e) {
    if (!(e instanceof NotFound)) throw e;
    try {
      return await getVolumeTypeByName(idOrName);
    } catch (byName) {
      // Only "no such name" means not found; a failed read is the caller's error as it is.
      if (byName instanceof NotFound) throw typeNotFound(idOrName);
      throw byName;
    }
  }
}

/** Upstream's _volume_type_get_query filter: public, or private with the caller's project on its access list, or an admin. */
export const typeVisibleTo = (auth: Pick<AuthContext, 'isAdmin' | 'projectId'>, t: Pick<VolumeType, 'isPublic' | 'projects'>) => auth.isAdmin || t.isPublic || t.projects.includes(auth.projectId);

/** A type the caller may see: other private types are hidden from non-admins (404, as upstream's access check). */
export async function visibleType(auth: AuthContext, idOrName: string, lookup: (s: string) => Promise<VolumeType> = findType): Promise<VolumeType> {
  const t = await lookup(idOrName);
  if (!typeVisibleTo(auth, t)) throw typeNotFound(idOrName);
  return t;
}

export async function listVolumeTypes(): Promise<VolumeType[]> {
  const items = await queryAll({ TableName: tableName('volume'), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': 'VTYPES' } });
  return items.map(toType);
}

const typeExists = (name: string) => new Conflict(`Volume Type ${name} already exists.`);

/** Creates a type; the name claim makes a second create of the same name fail with 409 and write nothing. */
export async function createVolumeType(input: { name: string; description?: string | null; isPublic?: boolean; extraSpecs?: Record<string, string>; id?: string }): Promise<VolumeType> {
  const t: VolumeType = {
    id: input.id ?? randomUUID(),
    name: input.name,
    description: input.description ?? null,
    isPublic: input.isPublic ?? true,
    extraSpecs: input.extraSpecs ?? {},
    qosSpecsId: null,
    projects: [],
    createdAt: new Date().toISOString(),
    version: 1,
  };
  // The access list is a string set, absent while empty (DynamoDB has no empty sets).
  const { projects: _none, ...stored } = t;
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Put: { TableName: tableName('volume'), Item: { ...nameKey(t.name), typeId: t.id }, ConditionExpression: 'attribute_not_exists(pk)' } },
          { Put: { TableName: tableName('volume'), Item: { ...typeKey(t.id), gsi1pk: 'VTYPES', gsi1sk: t.name, ...stored, volumeCount: 0 }, ConditionExpression: 'attribute_not_exists(pk)' } },
        ],
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw typeExists(t.name);
    throw e;
  }
  return t;
}

export async function updateVolumeType(id: string, changes: { name?: string; description?: string | null; isPublic?: boolean }): Promise<VolumeType> {
  const current = await getVolumeTypeById(id);
  const sets: string[] = ['version = version + :one'];
  const names: Record<string, string> = {};
  const values: Record<string, unknown> = { ':one': 1, ':v': current.version };
  if (changes.name !== undefined && changes.name !== current.name) {
    sets.push('#n = :name', 'gsi1sk = :name');
    names['#n'] = 'name';
    values[':name'] = changes.name;
  }
  if (changes.description !== undefined) {
    sets.push('description = :d');
    values[':d'] = changes.description;
  }
  if (changes.isPublic !== undefined) {
    sets.push('isPublic = :pub');
    values[':pub'] = changes.isPublic;
  }
  const update = {
    TableName: tableName('volume'),
    Key: typeKey(id),
    UpdateExpression: 'SET ' + sets.join(', '),
    ConditionExpression: 'version = :v',
    ...(Object.keys(names).length ? { ExpressionAttributeNames: names } : {}),
    ExpressionAttributeValues: values,
  };
  const renaming = changes.name !== undefined && changes.name !== current.name;
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Update: update },
          ...(renaming
            ? [
                { Delete: { TableName: tableName('volume'), Key: nameKey(current.name), ConditionExpression: 'typeId = :id', ExpressionAttributeValues: { ':id': id } } },
                { Put: { TableName: tableName('volume'), Item: { ...nameKey(changes.name!), typeId: id }, ConditionExpression: 'attribute_not_exists(pk)' } },
              ]
            : []),
        ],
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) {
      const reasons = (e as { CancellationReasons?: { Code?: string }[] }).CancellationReasons ?? [];
      if (renaming && reasons[2]?.Code === 'ConditionalCheckFailed') throw typeExists(changes.name!);
      throw new Conflict(`Volume type ${id} was changed by another request at the same time; try again.`);
    }
    throw e;
  }
  return getVolumeTypeById(id);
}

/** Deletes a type with no volumes (the condition reads the counter repo.ts keeps in the volumes' transactions). */
export async function deleteVolumeType(id: string): Promise<void> {
  const t = await getVolumeTypeById(id);
  if (t.name === DEFAULT_VOLUME_TYPE) throw new BadRequest(`The volume type ${t.name} is the default volume type and cannot be deleted.`);
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          {
            Delete: {
              TableName: tableName('volume'),
              Key: typeKey(id),
              // The association read is part of the condition: a qos (dis)association in between fails the delete.
              ConditionExpression: `attribute_exists(pk) AND (attribute_not_exists(volumeCount) OR volumeCount <= :zero) AND ${t.qosSpecsId ? 'qosSpecsId = :q' : '(attribute_not_exists(qosSpecsId) OR qosSpecsId = :null)'}`,
              ExpressionAttributeValues: { ':zero': 0, ...(t.qosSpecsId ? { ':q': t.qosSpecsId } : { ':null': null }) },
            },
          },
          { Delete: { TableName: tableName('volume'), Key: nameKey(t.name), ConditionExpression: 'attribute_not_exists(pk) OR typeId = :id', ExpressionAttributeValues: { ':id': id } } },
          ...(t.qosSpecsId
            ? [{ Update: { TableName: tableName('volume'), Key: qosSpecKey(t.qosSpecsId), UpdateExpression: 'ADD typeCount :minus', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':minus': -1 } } }]
            : []),
        ],
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw new BadRequest(`Target volume type is still in use. Volume Type ${id} deletion is not allowed with volumes present with the type.`);
    throw e;
  }
}

/** Sets (adds or replaces) extra specs, one map path per key, so concurrent writers of other keys are kept. */
export async function setExtraSpecs(id: string, specs: Record<string, string>): Promise<void> {
  const entries = Object.entries(specs);
  if (entries.length === 0) return;
  const names: Record<string, string> = { '#es': 'extraSpecs' };
  // The total stays bounded (one DynamoDB item): counting every given key as new is conservative.
  const values: Record<string, unknown> = { ':one': 1, ':room': MAX_MAP_ITEMS - entries.length };
  const sets = entries.map(([k, v], i) => {
    names[`#k${i}`] = k;
    values[`:v${i}`] = v;
    return `#es.#k${i} = :v${i}`;
  });
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: typeKey(id),
        UpdateExpression: `SET ${sets.join(', ')}, version = version + :one`,
        ConditionExpression: 'attribute_exists(pk) AND (attribute_not_exists(#es) OR size(#es) <= :room)',
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: values,
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) {
      if ((e as { Item?: unknown }).Item) throw tooManyExtraSpecs();
      throw typeNotFound(id);
    }
    throw e;
  }
}

export const noSuchSpec = (id: string, key: string) => new NotFound(`Volume Type ${id} has no extra specs with key ${key}.`);

export async function deleteExtraSpec(id: string, key: string): Promise<void> {
  await getVolumeTypeById(id);
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: typeKey(id),
        UpdateExpression: 'REMOVE #es.#k SET version = version + :one',
        ConditionExpression: 'attribute_exists(#es.#k)',
        ExpressionAttributeNames: { '#es': 'extraSpecs', '#k': key },
        ExpressionAttributeValues: { ':one': 1 },
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw noSuchSpec(id, key);
    throw e;
  }
}
