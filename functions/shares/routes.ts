/**
 * Manila v2 shares routes (M/api/v2/shares.py, share_export_locations.py, share_instances.py,
 * services.py, scheduler_stats.py): validation, then a pure transition persisted conditionally,
 * and for create/delete an execution of the share machine named from the share id. Create is
 * create.ts, the actions of `POST /shares/{id}/action` actions.ts, services and pools services.ts.
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { executionName, startExecution } from '../core/executions.js';
import { logger } from '../core/logger.js';
import { own } from '../core/lookup.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { action } from './actions.js';
import { create } from './create.js';
import { type Share } from './model.js';
import { getShareOrThrow, getShareScoped, listShares, updateShare } from './repo.js';
import { pools, services } from './services.js';
import { undoOrRecord } from './undo.js';
import { body, optionalText, strictBool } from './validation.js';
import { exportLocationId, exportLocationView, shareDetail, shareInstanceViews, shareSummary, shareViewContext } from './views.js';

registerPolicies({
  'share:get': 'admin_or_owner',
  'share:get_all': '@',
  'share:update': 'admin_or_owner',
  'share:delete': 'admin_or_owner',
  'share_export_location:index': 'admin_or_owner',
  'share_export_location:show': 'admin_or_owner',
  'share_instance:index': 'admin_api',
  'share_instance:show': 'admin_api',
});

const now = () => new Date().toISOString();

const truthy = (v: string | null) => ['1', 'true', 'yes', 't', 'on'].includes((v ?? '').toLowerCase());

async function visibleShares(req: ApiRequest): Promise<Share[]> {
  // Ferry has no soft delete (2.69): the soft-deleted listing is empty (manilaclient's find lists both and merges).
  if (truthy(req.query.get('is_soft_deleted'))) return [];
  const all = req.auth.isAdmin && truthy(req.query.get('all_tenants'));
  const projectFilter = req.auth.isAdmin ? req.query.get('project_id') : null;
  let shares = await listShares(all ? projectFilter ?? undefined : req.auth.projectId);
  const q = req.query;
  const eq = (k: string, get: (s: Share) => unknown) => {
    const want = q.get(k);
    if (want !== null) shares = shares.filter((s) => String(get(s) ?? '') === want);
  };
  eq('name', (s) => s.name);
  eq('status', (s) => s.status);
  eq('share_type_id', (s) => s.shareTypeId);
  eq('share_network_id', (s) => s.shareNetworkId);
  eq('share_proto', (s) => s.shareProto);
  if (req.auth.isAdmin) eq('host', (s) => s.host);
  const nameLike = q.get('name~');
  if (nameLike !== null) shares = shares.filter((s) => (s.name ?? '').includes(nameLike));
  const sortKey = q.get('sort_key') ?? 'created_at';
  const dir = (q.get('sort_dir') ?? 'desc').toLowerCase() === 'asc' ? 1 : -1;
  const keyOf: Record<string, (s: Share) => string | number> = {
    created_at: (s) => s.createdAt, id: (s) => s.id, name: (s) => s.name ?? '', status: (s) => s.status, size: (s) => s.size,
    share_proto: (s) => s.shareProto, host: (s) => s.host ?? '', share_type_id: (s) => s.shareTypeId, updated_at: (s) => s.updatedAt,
  };
  const key = own(keyOf, sortKey);
  if (!key) throw new BadRequest(`Wrong sort_key filter provided: '${sortKey}'.`);
  shares.sort((a, b) => (key(a) < key(b) ? -dir : key(a) > key(b) ? dir : 0));
  const offset = Number(q.get('offset') ?? 0);
  const limit = q.get('limit') === null ? undefined : Number(q.get('limit'));
  if (!Number.isInteger(offset) || offset < 0 || (limit !== undefined && (!Number.isInteger(limit) || limit < 0))) throw new BadRequest('limit and offset must be non-negative integers.');
  return shares.slice(offset, limit === undefined ? undefined : offset + limit);
}

async function show(req: ApiRequest) {
  const s = await getShareScoped(req.auth, req.params.id!);
  authorize(req.auth, 'share:get', s.isPublic ? undefined : s);
  return json(200, { share: shareDetail(shareViewContext(req), s) });
}

async function update(req: ApiRequest) {
  const b = body(req.body, 'share');
  const s = await getShareScoped(req.auth, req.params.id!);
  authorize(req.auth, 'share:update', s);
  const name = optionalText(b, 'display_name') ?? optionalText(b, 'name');
  const description = optionalText(b, 'display_description', 10_000) ?? optionalText(b, 'description', 10_000);
  const isPublic = b.is_public === undefined ? undefined : strictBool('is_public', b.is_public);
  const after = await updateShare(s.id, { type: 'update', at: now(), name, description, isPublic });
  return json(200, { share: shareDetail(shareViewContext(req), after) });
}

async function remove(req: ApiRequest) {
  const s = await getShareScoped(req.auth, req.params.id!);
  authorize(req.auth, 'share:delete', s);
  await updateShare(s.id, { type: 'begin-delete', at: now() });
  try {
    await startExecution('share-delete', executionName(`share-delete-${s.version}`, s.id), { shareId: s.id });
  } catch (e) {
    logger.error('could not start share-delete', { shareId: s.id, error: e as Error });
    await undoOrRecord(() => updateShare(s.id, { type: 'delete-failed', at: now(), reason: 'the delete machine could not be started' }), {
      what: 'the share in deleting with no delete machine (delete it again, or reset its state)',
      shareId: s.id,
    });
    throw e;
  }
  return json(202);
}

// ---- export locations / instances ------------------------------------------------------------

async function exportLocations(req: ApiRequest) {
  const s = await getShareScoped(req.auth, req.params.id!);
  authorize(req.auth, 'share_export_location:index', s);
  const ctx = shareViewContext(req);
  return json(200, { export_locations: s.exportLocations.map((p, i) => exportLocationView(ctx, s, p, i)) });
}

async function exportLocation(req: ApiRequest) {
  const s = await getShareScoped(req.auth, req.params.id!);
  authorize(req.auth, 'share_export_location:show', s);
  const i = s.exportLocations.findIndex((p) => exportLocationId(s, p) === req.params.el!);
  if (i < 0) throw new NotFound(`Export location ${req.params.el} could not be found.`);
  return json(200, { export_location: exportLocationView(shareViewContext(req), s, s.exportLocations[i]!, i) });
}

async function instances(req: ApiRequest) {
  const ctx = shareViewContext(req);
  return json(200, { share_instances: (await listShares()).flatMap((s) => shareInstanceViews(ctx, s)) });
}

async function instance(req: ApiRequest) {
  const view = (await listShares()).flatMap((s) => shareInstanceViews(shareViewContext(req), s)).find((v) => v.id === req.params.id);
  if (!view) throw new NotFound(`Share instance ${req.params.id} could not be found.`);
  return json(200, { share_instance: view });
}

async function instancesOfShare(req: ApiRequest) {
  const s = await getShareOrThrow(req.params.id!);
  return json(200, { share_instances: shareInstanceViews(shareViewContext(req), s) });
}

export const shareRoutes: RouteSpec[] = [
  { method: 'POST', path: '/shares', action: 'share:create', handler: create },
  { method: 'GET', path: '/shares', action: 'share:get_all', handler: async (req) => json(200, { shares: (await visibleShares(req)).map((s) => shareSummary(shareViewContext(req), s)) }) },
  { method: 'GET', path: '/shares/detail', action: 'share:get_all', handler: async (req) => json(200, { shares: (await visibleShares(req)).map((s) => shareDetail(shareViewContext(req), s)) }) },
  { method: 'GET', path: '/shares/{id}', action: 'share:get', authorizeBy: 'resource', handler: show },
  { method: 'PUT', path: '/shares/{id}', action: 'share:update', authorizeBy: 'resource', handler: update },
  { method: 'DELETE', path: '/shares/{id}', action: 'share:delete', authorizeBy: 'resource', handler: remove },
  { method: 'POST', path: '/shares/{id}/action', action: 'share:action', authorizeBy: 'resource', handler: action },
  { method: 'GET', path: '/shares/{id}/export_locations', action: 'share_export_location:index', authorizeBy: 'resource', minVersion: '2.9', handler: exportLocations },
  { method: 'GET', path: '/shares/{id}/export_locations/{el}', action: 'share_export_location:show', authorizeBy: 'resource', minVersion: '2.9', handler: exportLocation },
  { method: 'GET', path: '/shares/{id}/instances', action: 'share_instance:index', minVersion: '2.3', handler: instancesOfShare },
  { method: 'GET', path: '/share_instances', action: 'share_instance:index', minVersion: '2.3', handler: instances },
  { method: 'GET', path: '/share_instances/{id}', action: 'share_instance:show', minVersion: '2.3', handler: instance },
  { method: 'GET', path: '/os-services', action: 'service:index', maxVersion: '2.6', handler: services },
  { method: 'GET', path: '/services', action: 'service:index', minVersion: '2.7', handler: services },
  { method: 'GET', path: '/scheduler-stats/pools', action: 'scheduler_stats:pools:index', handler: (req) => pools(req, false) },
  { method: 'GET', path: '/scheduler-stats/pools/detail', action: 'scheduler_stats:pools:detail', handler: (req) => pools(req, true) },
];
