/**
 * The qos-specs REST routes (C/api/contrib/qos_specs_manage.py, C/api/schemas/qos_specs.py,
 * C/api/views/qos_specs.py), admin only as upstream's default policies; the records are qos.ts.
 * Associations are GETs with `vol_type_id` in the query, as upstream routes them.
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest } from '../core/errors.js';
import { registerPolicies } from '../core/policy.js';
import { associateQos, createQosSpecs, deleteQosKeys, deleteQosSpecs, disassociateAllQos, disassociateQos, getQosSpecs, invalidConsumer, listQosSpecs, qosAssociations, QOS_CONSUMERS, setQosSpecs, type QosConsumer, type QosSpecs } from './qos.js';
import { boolParam, invalidField, isObject, pyRepr, requiredProperty, wrapped } from './validation.js';

const P = {
  getAll: 'volume_extension:qos_specs_manage:get_all',
  get: 'volume_extension:qos_specs_manage:get',
  create: 'volume_extension:qos_specs_manage:create',
  update: 'volume_extension:qos_specs_manage:update',
  delete: 'volume_extension:qos_specs_manage:delete',
};
registerPolicies({ [P.getAll]: 'admin_api', [P.get]: 'admin_api', [P.create]: 'admin_api', [P.update]: 'admin_api', [P.delete]: 'admin_api' });

function specView(s: QosSpecs): Record<string, unknown> {
  return { id: s.id, name: s.name, consumer: s.consumer, specs: { ...s.specs } };
}

/** detail(): the spec and its self/bookmark links (C/api/common.py ViewBuilder._get_links). */
function detailView(req: ApiRequest, s: QosSpecs): Record<string, unknown> {
  const project = req.auth.projectId;
  const root = req.baseUrl.replace(/\/v3$/, '');
  return {
    qos_specs: specView(s),
    links: [
      { rel: 'self', href: `${req.baseUrl}/${project}/qos-specs/${s.id}` },
      { rel: 'bookmark', href: `${root}/${project}/qos-specs/${s.id}` },
    ],
  };
}

function consumerOf(v: unknown): QosConsumer {
  if (typeof v === 'string' && (QOS_CONSUMERS as readonly string[]).includes(v)) return v as QosConsumer;
  throw invalidConsumer();
}

/** utils.validate_dictionary_string_length: keys 1–255, values (unless null) 0–255 characters. */
function checkStrings(specs: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(specs)) {
    if (k.length > 255) throw new BadRequest(`Invalid input received: Key "${k}" has ${k.length} characters, more than 255.`);
    if (v === null) continue;
    if (typeof v !== 'string') throw new BadRequest(`Invalid input received: Value for key "${k}" is not a string or unicode`);
    if (v.length > 255) throw new BadRequest(`Invalid input received: Value for key "${k}" has ${v.length} characters, more than 255.`);
  }
}

async function createRoute(req: ApiRequest) {
  if (isObject(req.body)) {
    const extra = Object.keys(req.body).find((k) => k !== 'qos_specs');
    if (extra !== undefined) throw new BadRequest(`Additional properties are not allowed (${pyRepr(extra)} was unexpected)`);
  }
  const body = { ...wrapped(req.body, 'qos_specs') };
  if (!('name' in body)) throw requiredProperty('name');
  const rawName = body.name;
  if (typeof rawName !== 'string') throw invalidField('name', rawName, `${pyRepr(rawName)} is not of type 'string'`);
  if (!rawName) throw new BadRequest("An invalid 'name' value was provided. The 'name' can not be None.");
  const name = rawName.trim();
  if (!name) throw new BadRequest("An invalid 'name' value was provided. The 'name' can not be empty.");
  if (name.length > 255) throw new BadRequest("An invalid 'name' value was provided. The 'name' can not be greater than 255 characters.");
  delete body.name;
  checkStrings(body);
  const consumer = body.consumer === undefined || body.consumer === null ? 'back-end' : consumerOf(body.consumer);
  delete body.consumer;
  const specs = Object.fromEntries(Object.entries(body).filter(([, v]) => v !== null)) as Record<string, string>;
  const s = await createQosSpecs({ name, consumer, specs });
  return json(200, detailView(req, s));
}

async function listRoute(req: ApiRequest) {
  let specs = await listQosSpecs();
  for (const k of ['id', 'name', 'consumer'] as const) {
    const v = req.query.get(k);
    if (v !== null) specs = specs.filter((s) => s[k] === v);
  }
  const marker = req.query.get('marker');
  if (marker) {
    const i = specs.findIndex((s) => s.id === marker);
    if (i < 0) throw new BadRequest(`marker [${marker}] not found`);
    specs = specs.slice(i + 1);
  }
  const limit = req.query.get('limit');
  if (limit !== null) {
    if (!/^\d+$/.test(limit)) throw new BadRequest('limit param must be an integer');
    specs = specs.slice(0, Number(limit));
  }
  return json(200, { qos_specs: specs.map(specView) });
}

async function showRoute(req: ApiRequest) {
  return json(200, detailView(req, await getQosSpecs(req.params.qos_id!)));
}

/** PUT: sets keys (and the consumer); answers the body as it came, as upstream. */
async function updateRoute(req: ApiRequest) {
  if (isObject(req.body)) {
    const extra = Object.keys(req.body).find((k) => k !== 'qos_specs');
    if (extra !== undefined) throw new BadRequest(`Additional properties are not allowed (${pyRepr(extra)} was unexpected)`);
  }
  const specs = wrapped(req.body, 'qos_specs');
  for (const k of Object.keys(specs)) {
    if (!/^[a-zA-Z0-9-_:. /]{1,255}$/.test(k)) throw invalidField('qos_specs', specs, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
    const v = specs[k];
    if (v !== null && typeof v !== 'string') throw invalidField(k, v, `${pyRepr(v)} is not of type 'string', 'null'`);
  }
  const id = req.params.qos_id!;
  await getQosSpecs(id);
  checkStrings(specs);
  const { consumer, ...rest } = specs;
  await setQosSpecs(id, rest as Record<string, string | null>, 'consumer' in specs ? consumerOf(consumer) : undefined);
  return json(200, req.body);
}

async function deleteRoute(req: ApiRequest) {
  const raw = req.query.get('force');
  const force = raw === null ? false : boolParam('force', raw);
  await deleteQosSpecs(req.params.qos_id!, force);
  return json(202);
}

async function deleteKeysRoute(req: ApiRequest) {
  if (!isObject(req.body)) throw new BadRequest(req.body === undefined ? "'keys' is a required property" : `${pyRepr(req.body)} is not of type 'object'`);
  const extra = Object.keys(req.body).find((k) => k !== 'keys');
  if (extra !== undefined) throw new BadRequest(`Additional properties are not allowed (${pyRepr(extra)} was unexpected)`);
  if (!('keys' in req.body)) throw requiredProperty('keys');
  const keys = req.body.keys;
  if (!Array.isArray(keys)) throw invalidField('keys', keys, `${pyRepr(keys)} is not of type 'array'`);
  for (const k of keys) {
    if (typeof k !== 'string') throw invalidField('keys', keys, `${pyRepr(k)} is not of type 'string'`);
    if (k.length < 1 || k.length > 255) throw invalidField('keys', keys, `${pyRepr(k)} is ${k.length < 1 ? 'too short' : 'too long'}`);
  }
  if (new Set(keys).size !== keys.length) throw invalidField('keys', keys, `${pyRepr(keys)} has non-unique elements`);
  await deleteQosKeys(req.params.qos_id!, keys as string[]);
  return json(202);
}

async function associationsRoute(req: ApiRequest) {
  const id = req.params.qos_id!;
  await getQosSpecs(id);
  const types = await qosAssociations(id);
  return json(200, { qos_associations: types.map((t) => ({ association_type: 'volume_type', name: t.name, id: t.id })) });
}

function typeIdParam(req: ApiRequest): string {
  const typeId = req.query.get('vol_type_id');
  if (!typeId) throw new BadRequest('Volume Type id must not be None.');
  return typeId;
}

export const qosRoutes: RouteSpec[] = [
  { method: 'POST', path: '/qos-specs', action: P.create, handler: createRoute },
  { method: 'GET', path: '/qos-specs', action: P.getAll, handler: listRoute },
  { method: 'GET', path: '/qos-specs/{qos_id}', action: P.get, handler: showRoute },
  { method: 'PUT', path: '/qos-specs/{qos_id}', action: P.update, handler: updateRoute },
  { method: 'DELETE', path: '/qos-specs/{qos_id}', action: P.delete, handler: deleteRoute },
  { method: 'PUT', path: '/qos-specs/{qos_id}/delete_keys', action: P.delete, handler: deleteKeysRoute },
  { method: 'GET', path: '/qos-specs/{qos_id}/associations', action: P.getAll, handler: associationsRoute },
  { method: 'GET', path: '/qos-specs/{qos_id}/associate', action: P.update, handler: async (req) => (await associateQos(req.params.qos_id!, typeIdParam(req)), json(202)) },
  { method: 'GET', path: '/qos-specs/{qos_id}/disassociate', action: P.update, handler: async (req) => (await disassociateQos(req.params.qos_id!, typeIdParam(req)), json(202)) },
  { method: 'GET', path: '/qos-specs/{qos_id}/disassociate_all', action: P.update, handler: async (req) => (await disassociateAllQos(req.params.qos_id!), json(202)) },
];
