/**
 * The volume types REST routes (C/api/v2/types.py, C/api/contrib/types_manage.py,
 * C/api/contrib/types_extra_specs.py) and the type view; the records are types.ts.
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import type { AuthContext } from '../core/auth.js';
import { BadRequest } from '../core/errors.js';
import { allowed, registerPolicies } from '../core/policy.js';
import { boolParam, extraSpecsField, invalidField, isObject, optionalString, pyRepr, requiredProperty, wrapped } from './validation.js';

import { createVolumeType, deleteExtraSpec, deleteVolumeType, findType, listVolumeTypes, setExtraSpecs, updateVolumeType, USER_VISIBLE_EXTRA_SPECS, visibleType, typeVisibleTo, type VolumeType, DEFAULT_VOLUME_TYPE, getVolumeTypeByName, noSuchSpec } from './types.js';

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

// ---------------------------------------------------------------------------------------------
// View (C/api/v2/views/types.py + the os-volume-type-access extension)

/** The extra specs this caller may read: all for read_sensitive (admins), else the user-visible ones. */
export function visibleExtraSpecs(auth: AuthContext, specs: Record<string, string>): Record<string, string> {
  if (allowed(auth, 'volume_extension:types_extra_specs:read_sensitive')) return { ...specs };
  return Object.fromEntries(Object.entries(specs).filter(([k]) => USER_VISIBLE_EXTRA_SPECS.includes(k)));
}

/**
 * The type as each call answers it. show and list use the v3 view (C/api/v3/views/types.py:
 * extra_specs and qos_specs_id by policy) plus the os-volume-type-access extension; create and
 * update (C/api/contrib/types_manage.py) use the plain C/api/views/types.py view (every extra spec,
 * no qos_specs_id), and only create is extended with `os-volume-type-access:is_public`.
 */
export function typeView(auth: AuthContext, t: VolumeType, call: 'show' | 'create' | 'update' = 'show'): Record<string, unknown> {
  if (call !== 'show') {
    const out: Record<string, unknown> = { id: t.id, name: t.name, is_public: t.isPublic, extra_specs: { ...t.extraSpecs }, description: t.description };
    if (call === 'create') out['os-volume-type-access:is_public'] = t.isPublic;
    return out;
  }
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
  if (!req.auth.isAdmin) types = types.filter((t) => typeVisibleTo(req.auth, t));
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
  return json(200, { volume_type: typeView(req.auth, t, 'create') });
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
  return json(200, { volume_type: typeView(req.auth, t, 'update') });
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
