/**
 * Volume types and their extra specs (C/api/v2/types.py, C/api/contrib/types_manage.py,
 * C/api/contrib/types_extra_specs.py): the repository and the REST routes.
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
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import type { AuthContext } from '../core/auth.js';
import { db, isConditionFailure, queryAll } from '../core/db.js';
import { BadRequest, Conflict, NotFound } from '../core/errors.js';
import { allowed, registerPolicies } from '../core/policy.js';
import { GSI1, tableName } from '../core/tables.js';
import { MAX_MAP_ITEMS, tooManyExtraSpecs, boolParam, extraSpecsField, invalidField, isObject, isUuidLike, optionalString, pyRepr, requiredProperty, wrapped } from './validation.js';

registerPolicies({
  'volume_extension:types_manage': 'admin_api',
  'volume_extension:type_get': '@',
  'volume_extension:type_get_all': '@',
  'volume_extension:access_types_extra_specs': '@',
  'volume_extension:types_extra_specs:read_sensitive': 'admin_api',
  'volume_extension:access_types_qos_specs_id': 'admin_api',
  'volume_extension:types_extra_specs:index': '@',
  'volume_extension:types_extra_specs:show': '@',
  'volume_extension:types_extra_specs:create': 'admin_api',
  'volume_extension:types_extra_specs:update': 'admin_api',
  'volume_extension:types_extra_specs:delete': 'admin_api',
});

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
  createdAt: string;
  version: number;
}

const typeKey = (id: string) => ({ pk: `VTYPE#${id}`, sk: 'VTYPE' });
const nameKey = (name: string) => ({ pk: `VTYPENAME#${name}`, sk: 'VTYPENAME' });
export const volumeTypeKey = typeKey;

function toType(item: Record<string, unknown>): VolumeType {
  return {
    id: item.id as string,
    name: item.name as string,
    description: (item.description as string | null) ?? null,
    isPublic: item.isPublic !== false,
    extraSpecs: (item.extraSpecs as Record<string, string>) ?? {},
    qosSpecsId: (item.qosSpecsId as string | null) ?? null,
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
async function findType(idOrName: string): Promise<VolumeType> {
  try {
    return await getVolumeTypeById(idOrName);
  } catch (e) {
    if (!(e instanceof NotFound)) throw e;
    try {
      return await getVolumeTypeByName(idOrName);
    } catch {
      throw typeNotFound(idOrName);
    }
  }
}

/** A type the caller may see: non-public types are hidden from non-admins (404, as upstream's access check). */
export async function visibleType(auth: AuthContext, idOrName: string, lookup: (s: string) => Promise<VolumeType> = findType): Promise<VolumeType> {
  const t = await lookup(idOrName);
  if (!t.isPublic && !auth.isAdmin) throw typeNotFound(idOrName);
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
    createdAt: new Date().toISOString(),
    version: 1,
  };
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Put: { TableName: tableName('volume'), Item: { ...nameKey(t.name), typeId: t.id }, ConditionExpression: 'attribute_not_exists(pk)' } },
          { Put: { TableName: tableName('volume'), Item: { ...typeKey(t.id), gsi1pk: 'VTYPES', gsi1sk: t.name, ...t, volumeCount: 0 }, ConditionExpression: 'attribute_not_exists(pk)' } },
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
          { Delete: { TableName: tableName('volume'), Key: typeKey(id), ConditionExpression: 'attribute_exists(pk) AND (attribute_not_exists(volumeCount) OR volumeCount <= :zero)', ExpressionAttributeValues: { ':zero': 0 } } },
          { Delete: { TableName: tableName('volume'), Key: nameKey(t.name), ConditionExpression: 'attribute_not_exists(pk) OR typeId = :id', ExpressionAttributeValues: { ':id': id } } },
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

const noSuchSpec = (id: string, key: string) => new NotFound(`Volume Type ${id} has no extra specs with key ${key}.`);

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

// ---------------------------------------------------------------------------------------------
// View (C/api/v2/views/types.py + the os-volume-type-access extension)

/** The extra specs this caller may read: all for read_sensitive (admins), else the user-visible ones. */
export function visibleExtraSpecs(auth: AuthContext, specs: Record<string, string>): Record<string, string> {
  if (allowed(auth, 'volume_extension:types_extra_specs:read_sensitive')) return { ...specs };
  return Object.fromEntries(Object.entries(specs).filter(([k]) => USER_VISIBLE_EXTRA_SPECS.includes(k)));
}

export function typeView(auth: AuthContext, t: VolumeType): Record<string, unknown> {
  const out: Record<string, unknown> = { id: t.id, name: t.name, is_public: t.isPublic, description: t.description };
  if (allowed(auth, 'volume_extension:access_types_extra_specs')) out.extra_specs = visibleExtraSpecs(auth, t.extraSpecs);
  if (allowed(auth, 'volume_extension:access_types_qos_specs_id')) out.qos_specs_id = t.qosSpecsId;
  out['os-volume-type-access:is_public'] = t.isPublic;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Routes

function typeNameField(obj: Record<string, unknown>, required: boolean): string | undefined {
  if (!('name' in obj) || (obj.name === null && !required)) {
    if (required) throw requiredProperty('name');
    return undefined;
  }
  const v = obj.name;
  if (typeof v !== 'string') throw invalidField('name', v, `${pyRepr(v)} is not of type 'string'`);
  if (v.length > 255) throw invalidField('name', v, `${pyRepr(v)} is too long`);
  if (v.trim().length === 0) throw new BadRequest(required ? invalidField('name', v, `${pyRepr(v)} is too short`).message : 'Volume type name can not be empty.');
  return v;
}

async function indexTypes(req: ApiRequest) {
  let types = await listVolumeTypes();
  if (!req.auth.isAdmin) types = types.filter((t) => t.isPublic);
  else if (req.query.has('is_public')) {
    const raw = req.query.get('is_public')!;
    if (raw.toLowerCase() !== 'none') {
      const pub = boolParam('is_public', raw);
      types = types.filter((t) => t.isPublic === pub);
    }
  }
  types.sort((a, b) => a.name.localeCompare(b.name));
  return json(200, { volume_types: types.map((t) => typeView(req.auth, t)) });
}

async function showType(req: ApiRequest) {
  const id = req.params.type_id!;
  const t = id === 'default' ? await visibleType(req.auth, DEFAULT_VOLUME_TYPE, getVolumeTypeByName) : await visibleType(req.auth, id);
  return json(200, { volume_type: typeView(req.auth, t) });
}

async function createType(req: ApiRequest) {
  const body = wrapped(req.body, 'volume_type');
  const name = typeNameField(body, true)!;
  const description = optionalString(body, 'description');
  const extraSpecs = 'extra_specs' in body && body.extra_specs !== null ? extraSpecsField(body.extra_specs) : {};
  const isPublic = 'os-volume-type-access:is_public' in body ? boolParam('os-volume-type-access:is_public', body['os-volume-type-access:is_public']) : true;
  const t = await createVolumeType({ name, description, isPublic, extraSpecs });
  return json(200, { volume_type: typeView(req.auth, t) });
}

async function updateType(req: ApiRequest) {
  const body = wrapped(req.body, 'volume_type');
  for (const k of Object.keys(body)) {
    if (!['name', 'description', 'is_public'].includes(k)) throw invalidField('volume_type', body, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
  }
  const name = typeNameField(body, false);
  const description = optionalString(body, 'description');
  const isPublic = 'is_public' in body && body.is_public !== null ? boolParam('is_public', body.is_public) : undefined;
  if (name === undefined && description === undefined && isPublic === undefined) {
    throw new BadRequest('Specify volume type name, description, is_public or a combination thereof.');
  }
  const current = await findType(req.params.type_id!);
  const t = await updateVolumeType(current.id, { name, description, isPublic });
  return json(200, { volume_type: typeView(req.auth, t) });
}

async function deleteType(req: ApiRequest) {
  const t = await findType(req.params.type_id!);
  await deleteVolumeType(t.id);
  return json(202);
}

async function indexSpecs(req: ApiRequest) {
  const t = await visibleType(req.auth, req.params.type_id!);
  return json(200, { extra_specs: visibleExtraSpecs(req.auth, t.extraSpecs) });
}

async function createSpecs(req: ApiRequest) {
  if (!isObject(req.body) || !('extra_specs' in req.body)) throw requiredProperty('extra_specs');
  const specs = extraSpecsField(req.body.extra_specs);
  const t = await findType(req.params.type_id!);
  await setExtraSpecs(t.id, specs);
  return json(200, { extra_specs: specs });
}

async function showSpec(req: ApiRequest) {
  const t = await visibleType(req.auth, req.params.type_id!);
  const key = req.params.key!;
  const specs = visibleExtraSpecs(req.auth, t.extraSpecs);
  if (!(key in specs)) throw noSuchSpec(t.id, key);
  return json(200, { [key]: specs[key] });
}

async function updateSpec(req: ApiRequest) {
  const key = req.params.key!;
  if (!isObject(req.body)) throw new BadRequest('Malformed request body');
  if (!(key in req.body)) throw new BadRequest('Request body and URI mismatch');
  if (Object.keys(req.body).length > 1) throw new BadRequest('Request body contains too many items');
  const specs = extraSpecsField(req.body);
  const t = await findType(req.params.type_id!);
  await setExtraSpecs(t.id, specs);
  return json(200, specs);
}

async function deleteSpec(req: ApiRequest) {
  const t = await findType(req.params.type_id!);
  await deleteExtraSpec(t.id, req.params.key!);
  return json(202);
}

export const typeRoutes: RouteSpec[] = [
  { method: 'GET', path: '/types', action: 'volume_extension:type_get_all', handler: indexTypes },
  { method: 'POST', path: '/types', action: 'volume_extension:types_manage', handler: createType },
  { method: 'GET', path: '/types/{type_id}', action: 'volume_extension:type_get', handler: showType },
  { method: 'PUT', path: '/types/{type_id}', action: 'volume_extension:types_manage', handler: updateType },
  { method: 'DELETE', path: '/types/{type_id}', action: 'volume_extension:types_manage', handler: deleteType },
  { method: 'GET', path: '/types/{type_id}/extra_specs', action: 'volume_extension:types_extra_specs:index', handler: indexSpecs },
  { method: 'POST', path: '/types/{type_id}/extra_specs', action: 'volume_extension:types_extra_specs:create', handler: createSpecs },
  { method: 'GET', path: '/types/{type_id}/extra_specs/{key}', action: 'volume_extension:types_extra_specs:show', handler: showSpec },
  { method: 'PUT', path: '/types/{type_id}/extra_specs/{key}', action: 'volume_extension:types_extra_specs:update', handler: updateSpec },
  { method: 'DELETE', path: '/types/{type_id}/extra_specs/{key}', action: 'volume_extension:types_extra_specs:delete', handler: deleteSpec },
];
