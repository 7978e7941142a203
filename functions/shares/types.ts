/**
 * Manila share types (M/api/v2/share_types.py, share_types_extra_specs.py): records with extra
 * specs; `driver_handles_share_servers` is required (only false is served by Ferry's backends);
 * writes are admin-only. A type's name is claimed by a separate item written in the same
 * transaction, so two types never share a name; its `shareCount` moves with each share, so a type
 * in use cannot be deleted.
 */
import { GetCommand, QueryCommand, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { db, isConditionFailure } from '../core/db.js';
import { BadRequest, Conflict, NotFound } from '../core/errors.js';
import { registerPolicies } from '../core/policy.js';
import { GSI1, tableName } from '../core/tables.js';
import { shareTypeKey, shareTypeNameKey, type ShareType } from './model.js';
import { body, isObject, optionalText, strictBool } from './validation.js';

export const DEFAULT_SHARE_TYPE = 'default';

registerPolicies({
  'share_type:index': '@',
  'share_type:show': '@',
  'share_type:default': '@',
  'share_type:create': 'admin_api',
  'share_type:delete': 'admin_api',
  'share_types_extra_spec:index': '@',
  'share_types_extra_spec:create': 'admin_api',
  'share_types_extra_spec:delete': 'admin_api',
});

const typeNotFound = (id: string) => new NotFound(`Share type ${id} could not be found.`);

/** Extra specs as upstream validates them: string keys/values, DHSS a strict bool. */
export function validateExtraSpecs(specs: unknown, requireDhss: boolean): Record<string, string> {
  if (!isObject(specs)) throw new BadRequest('Invalid extra_specs: extra_specs must be a dict.');
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(specs)) {
    if (!k || k.length > 255) throw new BadRequest('Invalid extra_spec key: keys must be 1 to 255 characters.');
    const value = typeof v === 'boolean' ? (v ? 'True' : 'False') : v;
    if (typeof value !== 'string' || value.length > 255) throw new BadRequest(`Invalid extra_spec value for ${k}: values must be strings of at most 255 characters.`);
    out[k] = value;
  }
  const dhss = out.driver_handles_share_servers;
  if (dhss === undefined) {
    if (requireDhss) throw new BadRequest('Invalid share type: Required extra specification driver_handles_share_servers is missing.');
  } else {
    strictBool('driver_handles_share_servers', dhss);
  }
  return out;
}

function toType(item: Record<string, unknown>): ShareType {
  return { id: String(item.id), name: String(item.name), description: (item.description as string | null) ?? null, isPublic: item.isPublic !== false, extraSpecs: (item.extraSpecs as Record<string, string>) ?? {}, createdAt: String(item.createdAt) };
}

export async function getShareTypeById(id: string): Promise<ShareType> {
  const out = await db().send(new GetCommand({ TableName: tableName('share'), Key: shareTypeKey(id), ConsistentRead: true }));
  if (!out.Item) throw typeNotFound(id);
  return toType(out.Item);
}

export async function getShareTypeByName(name: string): Promise<ShareType | undefined> {
  const claim = await db().send(new GetCommand({ TableName: tableName('share'), Key: shareTypeNameKey(name), ConsistentRead: true }));
  return claim.Item ? getShareTypeById(String(claim.Item.typeId)) : undefined;
}

export async function getShareTypeByNameOrId(ref: string): Promise<ShareType> {
  const out = await db().send(new GetCommand({ TableName: tableName('share'), Key: shareTypeKey(ref), ConsistentRead: true }));
  if (out.Item) return toType(out.Item);
  const byName = await getShareTypeByName(ref);
  if (!byName) throw typeNotFound(ref);
  return byName;
}

export async function listShareTypes(): Promise<ShareType[]> {
  const out = await db().send(new QueryCommand({ TableName: tableName('share'), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': 'STYPES' } }));
  return (out.Items ?? []).map(toType).sort((a, b) => a.name.localeCompare(b.name));
}

export async function createShareType(input: { name: string; description?: string | null; isPublic?: boolean; extraSpecs: Record<string, string> }): Promise<ShareType> {
  const t: ShareType = { id: randomUUID(), name: input.name, description: input.description ?? null, isPublic: input.isPublic ?? true, extraSpecs: input.extraSpecs, createdAt: new Date().toISOString() };
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Put: { TableName: tableName('share'), Item: { ...shareTypeNameKey(t.name), typeId: t.id }, ConditionExpression: 'attribute_not_exists(pk)' } },
          { Put: { TableName: tableName('share'), Item: { ...shareTypeKey(t.id), gsi1pk: 'STYPES', gsi1sk: t.name, ...t, shareCount: 0 }, ConditionExpression: 'attribute_not_exists(pk)' } },
        ],
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw new Conflict(`Share Type ${t.name} already exists.`);
    throw e;
  }
  return t;
}

export function shareTypeView(req: Pick<ApiRequest, 'version'>, t: ShareType): Record<string, unknown> {
  const dhss = t.extraSpecs.driver_handles_share_servers;
  const view: Record<string, unknown> = {
    id: t.id,
    name: t.name,
    extra_specs: t.extraSpecs,
    required_extra_specs: dhss === undefined ? {} : { driver_handles_share_servers: dhss },
  };
  if (req.version.atLeast('2.7')) view['share_type_access:is_public'] = t.isPublic;
  else view['os-share-type-access:is_public'] = t.isPublic;
  if (req.version.atLeast('2.41')) view.description = t.description;
  if (req.version.atLeast('2.46')) view.is_default = t.name === DEFAULT_SHARE_TYPE;
  return view;
}

const both = (req: ApiRequest, t: ShareType) => ({ share_type: shareTypeView(req, t), volume_type: shareTypeView(req, t) });

async function create(req: ApiRequest) {
  const b = body(req.body, 'share_type');
  const name = b.name;
  if (typeof name !== 'string' || !name.trim() || name.length > 255) throw new BadRequest('Share type name is not valid.');
  const extraSpecs = validateExtraSpecs(b.extra_specs ?? {}, true);
  const description = optionalText(b, 'description');
  const pub = b['share_type_access:is_public'] ?? b['os-share-type-access:is_public'];
  const t = await createShareType({ name: name.trim(), description, isPublic: pub === undefined ? true : strictBool('is_public', pub), extraSpecs });
  return json(200, both(req, t));
}

/** Deletes a type no share uses (the condition reads the `shareCount` the shares' transactions keep). */
export async function deleteShareType(id: string): Promise<void> {
  const t = await getShareTypeById(id);
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Delete: { TableName: tableName('share'), Key: shareTypeKey(t.id), ConditionExpression: 'attribute_not_exists(shareCount) OR shareCount = :z', ExpressionAttributeValues: { ':z': 0 } } },
          { Delete: { TableName: tableName('share'), Key: shareTypeNameKey(t.name) } },
        ],
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw new BadRequest(`Share Type ${t.id} deletion is not allowed with shares present with the type.`);
    throw e;
  }
}

async function remove(req: ApiRequest) {
  await deleteShareType(req.params.id!);
  return json(202);
}

/** Sets a type's description, visibility and whole extra specs (an inventory apply). */
export async function setShareTypeFields(id: string, fields: { description: string | null; isPublic: boolean; extraSpecs: Record<string, string> }): Promise<void> {
  await db().send(
    new UpdateCommand({
      TableName: tableName('share'),
      Key: shareTypeKey(id),
      UpdateExpression: 'SET description = :d, isPublic = :p, extraSpecs = :s',
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeValues: { ':d': fields.description, ':p': fields.isPublic, ':s': validateExtraSpecs(fields.extraSpecs, true) },
    }),
  );
}

async function writeExtraSpecs(id: string, specs: Record<string, string>): Promise<void> {
  await db().send(
    new UpdateCommand({ TableName: tableName('share'), Key: shareTypeKey(id), UpdateExpression: 'SET extraSpecs = :s', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':s': specs } }),
  );
}

async function setExtraSpecs(req: ApiRequest) {
  const t = await getShareTypeById(req.params.id!);
  const b = req.body;
  if (!isObject(b) || !isObject(b.extra_specs)) throw new BadRequest('Malformed request body: extra_specs is missing or not an object.');
  const specs = validateExtraSpecs(b.extra_specs, false);
  await writeExtraSpecs(t.id, { ...t.extraSpecs, ...specs });
  return json(200, { extra_specs: specs });
}

async function unsetExtraSpec(req: ApiRequest) {
  const t = await getShareTypeById(req.params.id!);
  const key = req.params.key!;
  if (key === 'driver_handles_share_servers') throw new BadRequest('Extra spec driver_handles_share_servers is required and cannot be deleted.');
  if (!Object.hasOwn(t.extraSpecs, key)) throw new NotFound(`Share Type ${t.id} has no extra specs with key ${key}.`);
  const { [key]: _gone, ...rest } = t.extraSpecs;
  await writeExtraSpecs(t.id, rest);
  return json(202);
}

export const shareTypeRoutes: RouteSpec[] = [
  { method: 'GET', path: '/types', action: 'share_type:index', handler: async (req) => {
    const types = (await listShareTypes()).filter((t) => t.isPublic || req.auth.isAdmin).map((t) => shareTypeView(req, t));
    return json(200, { share_types: types, volume_types: types });
  } },
  { method: 'GET', path: '/types/default', action: 'share_type:default', handler: async (req) => {
    const t = await getShareTypeByName(DEFAULT_SHARE_TYPE);
    if (!t) throw new NotFound('Default share type not found.');
    return json(200, both(req, t));
  } },
  { method: 'GET', path: '/types/{id}', action: 'share_type:show', handler: async (req) => json(200, both(req, await getShareTypeByNameOrId(req.params.id!))) },
  { method: 'POST', path: '/types', action: 'share_type:create', handler: create },
  { method: 'DELETE', path: '/types/{id}', action: 'share_type:delete', handler: remove },
  { method: 'GET', path: '/types/{id}/extra_specs', action: 'share_types_extra_spec:index', handler: async (req) => json(200, { extra_specs: (await getShareTypeById(req.params.id!)).extraSpecs }) },
  { method: 'POST', path: '/types/{id}/extra_specs', action: 'share_types_extra_spec:create', handler: setExtraSpecs },
  { method: 'DELETE', path: '/types/{id}/extra_specs/{key}', action: 'share_types_extra_spec:delete', handler: unsetExtraSpec },
];
