/**
 * Cinder's os-quota-sets (C/api/contrib/quotas.py) and os-quota-class-sets
 * (C/api/contrib/quota_classes.py): show (with `?usage=true`), defaults, update, delete, with
 * upstream's validation (C/api/validation/validators.py _validate_quota_set) and policies. The
 * limits and usage are the engine's items (functions/quotas/engine.ts); volume create and delete
 * take and give back quota in their own transactions (repo.ts).
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest } from '../core/errors.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { boolFromString } from '../core/strutils.js';
import {
  classLimitsKey,
  deleteProjectLimits,
  effectiveLimit,
  projectLimitsKey,
  readClassLimits,
  readLimits,
  readUsage,
  writeLimits,
  type Limits,
} from '../quotas/engine.js';
import { cinderBuiltin, cinderResources, countLegacyVolumes } from './quotas.js';
import { listVolumeTypes } from './types.js';
import { invalidField, isObject, pyRepr } from './validation.js';

export const QUOTA_POLICIES = {
  show: 'volume_extension:quotas:show',
  update: 'volume_extension:quotas:update',
  delete: 'volume_extension:quotas:delete',
  classGet: 'volume_extension:quota_classes:get',
  classUpdate: 'volume_extension:quota_classes:update',
} as const;

registerPolicies({
  [QUOTA_POLICIES.show]: 'admin_or_owner',
  [QUOTA_POLICIES.update]: 'admin_api',
  [QUOTA_POLICIES.delete]: 'admin_api',
  [QUOTA_POLICIES.classGet]: 'admin_api',
  [QUOTA_POLICIES.classUpdate]: 'admin_api',
});

const NON_QUOTA_KEYS = ['tenant_id', 'id'];
const DB_MAX_INT = 0x7fffffff;

async function resources(): Promise<string[]> {
  return cinderResources((await listVolumeTypes()).map((t) => t.name));
}

/** oslo strutils.validate_integer as Cinder's api_utils calls it. */
function validInteger(value: unknown, name: string, min: number, max: number): number {
  const text = typeof value === 'string' ? value.trim() : typeof value === 'number' ? String(value) : null;
  if (text === null || !/^[-+]?\d+$/.test(text)) throw new BadRequest(`${name} must be an integer`);
  const n = Number(text);
  if (n < min) throw new BadRequest(`${name} must be >= ${min}`);
  if (n > max) throw new BadRequest(`${name} must be <= ${max}`);
  return n;
}

/** The limits in force for each resource (the project's, else the default class's, else the built-in). */
function limitsView(names: string[], limits: Limits): Record<string, number> {
  return Object.fromEntries(names.map((r) => [r, effectiveLimit(limits, r, cinderBuiltin(r)).limit]));
}

function projectIdParam(req: ApiRequest): string {
  const id = req.params.project_id!;
  if (id.length < 1 || id.length > 255) throw new BadRequest(`Invalid input received: quota_set_name has a length of ${id.length} characters; it must be between 1 and 255.`);
  return id;
}

async function showQuotas(req: ApiRequest) {
  const project = req.params.project_id!;
  authorize(req.auth, QUOTA_POLICIES.show, { projectId: project });
  const usage = req.query.has('usage') ? boolFromString(req.query.get('usage')) : false;
  // utils.get_bool_param: InvalidParameterValue.
  if (usage === undefined) throw new BadRequest(`Value '${req.query.get('usage')}' for 'usage' is not a boolean.`);
  const [names, limits] = await Promise.all([resources(), readLimits('volume', project)]);
  if (!usage) return json(200, { quota_set: { ...limitsView(names, limits), id: project } });
  // Usage counts the project's records from before quotas first, so what it shows is what a create is held to.
  let u = await readUsage('volume', project);
  if (!u.counted) {
    await countLegacyVolumes(project);
    u = await readUsage('volume', project);
  }
  const view = Object.fromEntries(names.map((r) => [r, { limit: effectiveLimit(limits, r, cinderBuiltin(r)).limit, in_use: u.usage[r] ?? 0, reserved: 0 }]));
  return json(200, { quota_set: { ...view, id: project } });
}

async function showDefaults(req: ApiRequest) {
  const project = req.params.project_id!;
  authorize(req.auth, QUOTA_POLICIES.show, { projectId: project });
  const [names, defaults] = await Promise.all([resources(), readClassLimits('volume', 'default')]);
  return json(200, { quota_set: { ...limitsView(names, { project: {}, defaults }), id: project } });
}

function quotaBody(body: unknown, key: string): Record<string, unknown> {
  if (!isObject(body)) throw new BadRequest(`${pyRepr(body ?? null)} is not of type 'object'`);
  for (const k of Object.keys(body)) if (k !== key) throw new BadRequest(`Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
  if (!(key in body)) throw new BadRequest(`'${key}' is a required property`);
  const inner = body[key];
  if (!isObject(inner)) throw invalidField(key, inner, `${pyRepr(inner)} is not of type 'object'`);
  return inner;
}

async function updateQuotas(req: ApiRequest) {
  const project = projectIdParam(req);
  authorize(req.auth, QUOTA_POLICIES.update, { projectId: project });
  const set = quotaBody(req.body, 'quota_set');
  if (Object.keys(set).length === 0) throw invalidField('quota_set', set, '{} does not have enough properties');
  const names = await resources();
  const bad = Object.keys(set).filter((k) => !names.includes(k) && !NON_QUOTA_KEYS.includes(k));
  // _validate_quota_set: every value of a known key must be an integer in range, then bad keys.
  const values: Record<string, number> = {};
  for (const [k, v] of Object.entries(set)) {
    if (NON_QUOTA_KEYS.includes(k) || bad.includes(k)) continue;
    values[k] = validInteger(v, k, -1, DB_MAX_INT);
  }
  if (bad.length) throw new BadRequest(`Invalid input received: Bad key(s) in quota set: ${bad.join(', ')}`);
  let u = await readUsage('volume', project);
  if (!u.counted && Object.keys(values).length) {
    await countLegacyVolumes(project);
    u = await readUsage('volume', project);
  }
  for (const [k, v] of Object.entries(values)) {
    if (k === 'per_volume_gigabytes' || v === -1) continue;
    const used = u.usage[k] ?? 0;
    if (v < used) throw new BadRequest(`Quota ${k} limit must be equal or greater than existing resources. Current usage is ${used} and the requested limit is ${v}.`);
  }
  await writeLimits('volume', projectLimitsKey(project), values);
  return json(200, { quota_set: limitsView(names, await readLimits('volume', project)) });
}

async function deleteQuotas(req: ApiRequest) {
  const project = req.params.project_id!;
  authorize(req.auth, QUOTA_POLICIES.delete, { projectId: project });
  await deleteProjectLimits('volume', project);
  return json(200);
}

async function showClass(req: ApiRequest) {
  const cls = req.params.class_name!;
  const [names, own, defaults] = await Promise.all([resources(), readClassLimits('volume', cls), readClassLimits('volume', 'default')]);
  return json(200, { quota_class_set: { ...limitsView(names, { project: own, defaults }), id: cls } });
}

async function updateClass(req: ApiRequest) {
  const cls = req.params.class_name!;
  if (cls.length < 1 || cls.length > 255) throw new BadRequest(`Invalid input received: quota_class_name has a length of ${cls.length} characters; it must be between 1 and 255.`);
  const set = quotaBody(req.body, 'quota_class_set');
  const names = await resources();
  const values: Record<string, number> = {};
  // parameter_types.quota_class_set: integer or digit string, -1 .. DB_MAX_INT; then the keys known.
  for (const [k, v] of Object.entries(set)) {
    if (typeof v === 'string' ? !/^[0-9]+$/.test(v) : !(typeof v === 'number' && Number.isInteger(v))) {
      throw invalidField(k, v, typeof v === 'string' ? `${pyRepr(v)} does not match '^[0-9]*$'` : `${pyRepr(v)} is not of type 'integer', 'string'`);
    }
    const n = Number(v);
    if (n < -1) throw invalidField(k, v, `${n} is less than the minimum of -1`);
    if (n > DB_MAX_INT) throw invalidField(k, v, `${n} is greater than the maximum of ${DB_MAX_INT}`);
    values[k] = n;
  }
  const bad = Object.keys(set).filter((k) => !names.includes(k));
  if (bad.length) throw new BadRequest(`Invalid input received: Bad key(s) in quota class set: ${bad.join(', ')}`);
  await writeLimits('volume', classLimitsKey(cls), values);
  const [own, defaults] = await Promise.all([readClassLimits('volume', cls), readClassLimits('volume', 'default')]);
  return json(200, { quota_class_set: limitsView(names, { project: own, defaults }) });
}

export const quotaRoutes: RouteSpec[] = [
  { method: 'GET', path: '/os-quota-sets/{project_id}', action: QUOTA_POLICIES.show, authorizeBy: 'resource', handler: showQuotas },
  { method: 'GET', path: '/os-quota-sets/{project_id}/defaults', action: QUOTA_POLICIES.show, authorizeBy: 'resource', handler: showDefaults },
  { method: 'PUT', path: '/os-quota-sets/{project_id}', action: QUOTA_POLICIES.update, authorizeBy: 'resource', handler: updateQuotas },
  { method: 'DELETE', path: '/os-quota-sets/{project_id}', action: QUOTA_POLICIES.delete, authorizeBy: 'resource', handler: deleteQuotas },
  { method: 'GET', path: '/os-quota-class-sets/{class_name}', action: QUOTA_POLICIES.classGet, handler: showClass },
  { method: 'PUT', path: '/os-quota-class-sets/{class_name}', action: QUOTA_POLICIES.classUpdate, handler: updateClass },
];
