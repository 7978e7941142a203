/**
 * Manila's quotas: the resources and defaults of M/quota.py, what a share takes, the 413s of
 * M/share/api.py check_if_share_quotas_exceeded, and the quota-sets / quota-class-sets APIs of
 * M/api/v2/quota_sets.py and quota_class_sets.py (views M/api/views/quota_sets.py), for a
 * project as a whole (user_id and share_type quotas are refused: docs/compatibility.md).
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { versionedUpdate, listKind } from '../core/db.js';
import { BadRequest, Forbidden, OverLimit } from '../core/errors.js';
import type { ApiVersion } from '../core/microversion.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { tableName } from '../core/tables.js';
import {
  classLimitsKey,
  countLegacy,
  deleteProjectLimits,
  effectiveLimit,
  projectLimitsKey,
  readClassLimits,
  readLimits,
  readUsage,
  writeCharged,
  writeLimits,
  type Deltas,
  type Limits,
  type Over,
  type TransactItem,
} from '../quotas/engine.js';
import { shareGsi1, shareKey, type Share } from './model.js';

export const MANILA_DEFAULTS: Readonly<Record<string, number>> = {
  shares: 50,
  gigabytes: 1000,
  snapshots: 50,
  snapshot_gigabytes: 1000,
  share_networks: 10,
  share_groups: 50,
  share_group_snapshots: 50,
  share_replicas: 100,
  replica_gigabytes: 1000,
  per_share_gigabytes: -1,
};
const manilaBuiltin = (r: string) => MANILA_DEFAULTS[r] ?? -1;

/** What a share takes (M/share/api.py create: shares, gigabytes). */
export const shareTakes = (s: Pick<Share, 'size'>): Deltas => ({ shares: 1, gigabytes: s.size });

/** check_if_share_quotas_exceeded: gigabytes first, then shares. */
function shareOverError(overs: Over[]): OverLimit {
  if (overs.some((o) => o.resource === 'gigabytes')) return new OverLimit('Requested share exceeds allowed project/user or share type gigabytes quota.');
  const shares = overs.find((o) => o.resource === 'shares') ?? overs[0]!;
  return new OverLimit(`Maximum number of shares allowed (${shares.limit}) either per project/user or share type quota is exceeded.`);
}

function markCounted(s: Share, taken: Deltas): TransactItem {
  return { Update: versionedUpdate({ TableName: tableName('share'), Key: shareKey(s.id) }, s, { ...s, quota: taken }, { expression: 'attribute_not_exists(#quota) OR #quota = :nullq', names: { '#quota': 'quota' }, values: { ':nullq': null } }) };
}

async function projectShares(project: string): Promise<Share[]> {
  const items = await listKind(tableName('share'), { sk: 'SHARE', pkPrefix: 'SHARE#', gsi1pk: shareGsi1({ projectId: project, createdAt: '', id: '' }).gsi1pk });
  return items.map((i) => Object.fromEntries(Object.entries(i).filter(([k]) => !['pk', 'sk', 'gsi1pk', 'gsi1sk'].includes(k))) as unknown as Share);
}

export const countLegacyShares = (project: string) => countLegacy('share', project, () => projectShares(project), shareTakes, markCounted);

/** Writes a new share's items (the record first) with its quota charge; `s.quota` is set before the items are built. */
export async function writeShareCharged(s: Share, items: (s: Share) => TransactItem[]): Promise<void> {
  const deltas = shareTakes(s);
  s.quota = deltas;
  await writeCharged({
    table: 'share',
    project: s.projectId,
    deltas,
    builtin: manilaBuiltin,
    items: items(s),
    countLegacy: () => countLegacyShares(s.projectId),
    overError: shareOverError,
    precheck: (limits) => {
      const { limit } = effectiveLimit(limits, 'per_share_gigabytes', manilaBuiltin('per_share_gigabytes'));
      if (limit >= 0 && s.size > limit) throw new OverLimit(`Requested share size ${s.size} is larger than maximum allowed limit ${limit}.`);
    },
  });
}

/**
 * Writes `items` (an extend's begin: the share `extending` at the new quota, the pool's share) with
 * the extra gigabytes charged (M/share/api.py extend): over per_share_gigabytes is upstream's 413
 * ShareSizeExceedsLimit, over gigabytes its ShareSizeExceedsAvailableQuota, which the share
 * controller answers with 403.
 */
export async function writeShareGrowth(projectId: string, newSize: number, gb: number, items: TransactItem[]): Promise<void> {
  await writeCharged({
    table: 'share',
    project: projectId,
    deltas: { gigabytes: gb },
    builtin: manilaBuiltin,
    items,
    countLegacy: () => countLegacyShares(projectId),
    overError: () => new Forbidden('Requested share exceeds allowed project/user or share type gigabytes quota.'),
    precheck: (limits) => {
      const { limit } = effectiveLimit(limits, 'per_share_gigabytes', manilaBuiltin('per_share_gigabytes'));
      if (limit >= 0 && newSize > limit) throw new OverLimit(`Requested share size ${newSize} is larger than maximum allowed limit ${limit}.`);
    },
  });
}

// ---- API ------------------------------------------------------------------------------------------

const P = { show: 'quota_set:show', update: 'quota_set:update', delete: 'quota_set:delete', classShow: 'quota_class_set:show', classUpdate: 'quota_class_set:update' } as const;
registerPolicies({ [P.show]: '@', [P.update]: 'admin_api', [P.delete]: 'admin_api', [P.classShow]: '@', [P.classUpdate]: 'admin_api' });

/** The keys a view shows at a microversion (the view builder's versioned modifiers). */
function viewKeys(v: ApiVersion, withNetworks: boolean): string[] {
  return [
    'shares', 'gigabytes', 'snapshots', 'snapshot_gigabytes',
    ...(withNetworks ? ['share_networks'] : []),
    ...(v.atLeast('2.40') ? ['share_groups', 'share_group_snapshots'] : []),
    ...(v.atLeast('2.53') ? ['share_replicas', 'replica_gigabytes'] : []),
    ...(v.atLeast('2.62') ? ['per_share_gigabytes'] : []),
  ];
}

const limitOf = (limits: Limits, r: string) => effectiveLimit(limits, r, manilaBuiltin(r)).limit;

/** db.authorize_project_context: a non-admin asking about another project. */
function ownProject(req: ApiRequest, project: string): void {
  if (!req.auth.isAdmin && req.auth.projectId !== project) throw new Forbidden('Access was denied to this resource.');
}

/** user_id and share_type scoped quotas are not kept by Ferry: refused rather than answered for the project. */
function projectScopeOnly(req: ApiRequest): void {
  for (const k of ['user_id', 'share_type']) {
    if (req.query.get(k)) throw new BadRequest(`Quotas per ${k} are not supported by Ferry; only project quotas are kept.`);
  }
}

async function show(req: ApiRequest, detail: boolean) {
  const project = req.params.project_id!;
  ownProject(req, project);
  projectScopeOnly(req);
  const limits = await readLimits('share', project);
  const keys = viewKeys(req.version, true);
  if (!detail) return json(200, { quota_set: { ...Object.fromEntries(keys.map((k) => [k, limitOf(limits, k)])), id: project } });
  let u = await readUsage('share', project);
  if (!u.counted) {
    await countLegacyShares(project);
    u = await readUsage('share', project);
  }
  return json(200, { quota_set: { ...Object.fromEntries(keys.map((k) => [k, { limit: limitOf(limits, k), in_use: u.usage[k] ?? 0, reserved: 0 }])), id: project } });
}

async function defaults(req: ApiRequest) {
  const project = req.params.project_id!;
  const limits = { project: {}, defaults: await readClassLimits('share', 'default') };
  return json(200, { quota_set: { ...Object.fromEntries(viewKeys(req.version, true).map((k) => [k, limitOf(limits, k)])), id: project } });
}

async function update(req: ApiRequest) {
  const project = req.params.project_id!;
  projectScopeOnly(req);
  const body = (req.body as { quota_set?: Record<string, unknown> } | undefined)?.quota_set ?? {};
  if (typeof body !== 'object' || body === null || Object.keys(MANILA_DEFAULTS).every((k) => body[k] === undefined || body[k] === null)) {
    throw new BadRequest('Must supply at least one quota field to update.');
  }
  const known = viewKeys(req.version, true);
  let force = false;
  const bad: string[] = [];
  const values: Record<string, number> = {};
  for (const [k, v] of Object.entries(body)) {
    if (k === 'force') {
      force = v === true || (typeof v === 'string' && ['1', 't', 'true', 'on', 'y', 'yes'].includes(v.toLowerCase()));
      continue;
    }
    if (k === 'tenant_id' || k === 'id') continue;
    if (!(k in MANILA_DEFAULTS)) {
      bad.push(k);
      continue;
    }
    // A key the request's microversion does not know yet (the _ensure_specific_microversion_args_are_absent checks).
    if (!known.includes(k)) throw new BadRequest(`'${k}' key is not supported by this microversion. Use 2.${k === 'per_share_gigabytes' ? 62 : k.startsWith('share_group') ? 40 : 53} API microversion.`);
    if (v === null || v === undefined || v === '' || v === false) continue;
    const n = typeof v === 'number' ? v : typeof v === 'string' && /^\s*[-+]?\d+\s*$/.test(v) ? Number(v) : NaN;
    if (!Number.isInteger(n)) throw new BadRequest(`Quota '${String(v)}' for ${k} should be integer.`);
    values[k] = n;
  }
  if (bad.length) throw new BadRequest(`Bad key(s) ${bad.join(',')} in quota_set.`);
  let u = await readUsage('share', project);
  if (!u.counted) {
    await countLegacyShares(project);
    u = await readUsage('share', project);
  }
  const limits = await readLimits('share', project);
  for (const [k, n] of Object.entries(values)) {
    if (!force && n >= 0 && limitOf(limits, k) >= 0 && (u.usage[k] ?? 0) > n) {
      throw new BadRequest(`Quota value ${n} for ${k} is smaller than already used and reserved ${u.usage[k] ?? 0}.`);
    }
    if (n < -1) throw new BadRequest('Quota limit must be -1 or greater.');
  }
  await writeLimits('share', projectLimitsKey(project), values);
  const after = await readLimits('share', project);
  return json(200, { quota_set: Object.fromEntries(viewKeys(req.version, true).map((k) => [k, limitOf(after, k)])) });
}

async function remove(req: ApiRequest) {
  const project = req.params.project_id!;
  ownProject(req, project);
  projectScopeOnly(req);
  await deleteProjectLimits('share', project);
  return json(202);
}

async function showClass(req: ApiRequest) {
  const cls = req.params.class_name!;
  // db.authorize_quota_class_context: a non-admin sees only its own quota class (Ferry gives none).
  if (!req.auth.isAdmin) throw new Forbidden('Access was denied to this resource.');
  const limits = { project: await readClassLimits('share', cls), defaults: await readClassLimits('share', 'default') };
  return json(200, { quota_class_set: { ...Object.fromEntries(viewKeys(req.version, true).map((k) => [k, limitOf(limits, k)])), id: cls } });
}

async function updateClass(req: ApiRequest) {
  const cls = req.params.class_name!;
  const body = (req.body as { quota_class_set?: Record<string, unknown> } | undefined)?.quota_class_set ?? {};
  const values: Record<string, number> = {};
  // Upstream takes int() of each known key and ignores the rest.
  for (const [k, v] of Object.entries(typeof body === 'object' && body ? body : {})) {
    if (!(k in MANILA_DEFAULTS)) continue;
    const n = typeof v === 'number' ? v : typeof v === 'string' && /^\s*[-+]?\d+\s*$/.test(v) ? Number(v) : NaN;
    if (!Number.isInteger(n)) throw new BadRequest(`Quota '${String(v)}' for ${k} should be integer.`);
    values[k] = n;
  }
  await writeLimits('share', classLimitsKey(cls), values);
  const limits = { project: await readClassLimits('share', cls), defaults: await readClassLimits('share', 'default') };
  return json(200, { quota_class_set: Object.fromEntries(viewKeys(req.version, true).map((k) => [k, limitOf(limits, k)])) });
}

const sets = (base: string, min: string, max?: string): RouteSpec[] => [
  { method: 'GET', path: `/${base}/{project_id}`, action: P.show, minVersion: min, maxVersion: max, handler: (r) => show(r, false) },
  { method: 'GET', path: `/${base}/{project_id}/defaults`, action: P.show, minVersion: min, maxVersion: max, handler: defaults },
  { method: 'PUT', path: `/${base}/{project_id}`, action: P.update, minVersion: min, maxVersion: max, handler: update },
  { method: 'DELETE', path: `/${base}/{project_id}`, action: P.delete, minVersion: min, maxVersion: max, handler: remove },
];
const classSets = (base: string, min: string, max?: string): RouteSpec[] => [
  { method: 'GET', path: `/${base}/{class_name}`, action: P.classShow, minVersion: min, maxVersion: max, handler: showClass },
  { method: 'PUT', path: `/${base}/{class_name}`, action: P.classUpdate, minVersion: min, maxVersion: max, handler: updateClass },
];

export const shareQuotaRoutes: RouteSpec[] = [
  ...sets('os-quota-sets', '2.0', '2.6'),
  ...sets('quota-sets', '2.7'),
  { method: 'GET', path: '/quota-sets/{project_id}/detail', action: P.show, minVersion: '2.25', handler: (r) => show(r, true) },
  ...classSets('os-quota-class-sets', '2.0', '2.6'),
  ...classSets('quota-class-sets', '2.7'),
];
