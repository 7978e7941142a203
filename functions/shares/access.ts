/**
 * Share access rules (M/api/v2/shares.py _allow_access/_deny_access/_access_list,
 * M/api/v2/share_accesses.py): rules live on the share item, so "no duplicate rule" and "share
 * must be available" are the version condition of one write; the driver then gets the share's
 * whole rule set (update_access) and the rules become `active` (or `error`). Done inside the API
 * request rather than by a share manager cast: a local driver call takes milliseconds.
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { authorize, registerPolicies } from '../core/policy.js';
import type { DriverAccessRule } from '../drivers/share/driver.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { backendShareName, type Share } from './model.js';
import { getShareBackend, getShareOrThrow, getShareScoped, listShares, updateShare } from './repo.js';
import { accessRuleOf } from './validation.js';
import { accessListEntry, accessRuleView, shareViewContext } from './views.js';

registerPolicies({
  'share:allow_access': 'admin_or_owner',
  'share:deny_access': 'admin_or_owner',
  'share:access_get_all': 'admin_or_owner',
  'share_access_rule:index': 'admin_or_owner',
  'share_access_rule:get': 'admin_or_owner',
});

const now = () => new Date().toISOString();

/** The rules the driver should hold: every rule not being denied. */
export function rulesForDriver(s: Share): DriverAccessRule[] {
  return Object.values(s.accessRules)
    .filter((r) => r.state !== 'queued_to_deny' && r.state !== 'denying')
    .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id))
    .map((r) => ({ id: r.id, accessType: r.accessType, accessTo: r.accessTo, accessLevel: r.accessLevel }));
}

/** Pushes the share's current rule set to its backend. */
export async function syncAccess(shareId: string): Promise<Share> {
  const s = await getShareOrThrow(shareId);
  if (!s.host) throw new BadRequest(`Share ${s.id} has no host.`);
  const driver = shareDriverFor(await getShareBackend(s.host));
  await driver.updateAccess(backendShareName(s.instanceId), rulesForDriver(s));
  return s;
}

export async function allowAccess(req: ApiRequest, share: Share, inner: unknown): Promise<ReturnType<typeof json>> {
  authorize(req.auth, 'share:allow_access', share);
  if (!inner || typeof inner !== 'object' || Array.isArray(inner)) throw new BadRequest('Malformed request body: allow_access must be an object.');
  const rule = accessRuleOf(inner as Record<string, unknown>, req.version);
  const id = randomUUID();
  await updateShare(share.id, { type: 'access-add', at: now(), id, ...rule });
  let ok = true;
  try {
    await syncAccess(share.id);
  } catch (e) {
    ok = false;
    logger.error('update_access failed', { shareId: share.id, error: e as Error });
  }
  const after = await updateShare(share.id, { type: 'access-applied', at: now(), ids: [id], ok });
  return json(200, { access: accessRuleView(shareViewContext(req), after, after.accessRules[id]!) });
}

export async function denyAccess(req: ApiRequest, share: Share, inner: unknown): Promise<ReturnType<typeof json>> {
  authorize(req.auth, 'share:deny_access', share);
  const accessId = (inner as { access_id?: unknown } | null)?.access_id;
  if (typeof accessId !== 'string' || !accessId) throw new BadRequest('Malformed request body: deny_access needs access_id.');
  await updateShare(share.id, { type: 'access-deny', at: now(), id: accessId });
  // A driver failure leaves the rule queued_to_deny (access_rules_status syncing); repeating deny finishes it.
  await syncAccess(share.id);
  await updateShare(share.id, { type: 'access-removed', at: now(), id: accessId });
  return json(202);
}

export async function accessList(req: ApiRequest, share: Share): Promise<ReturnType<typeof json>> {
  authorize(req.auth, 'share:access_get_all', share);
  const ctx = shareViewContext(req);
  return json(200, { access_list: Object.values(share.accessRules).map((r) => accessListEntry(ctx, share, r)) });
}

async function listRules(req: ApiRequest) {
  const shareId = req.query.get('share_id');
  if (!shareId) throw new BadRequest('The share_id parameter is required.');
  const share = await getShareScoped(req.auth, shareId);
  authorize(req.auth, 'share_access_rule:index', share);
  const ctx = shareViewContext(req);
  const level = req.query.get('access_level');
  const type = req.query.get('access_type');
  const rules = Object.values(share.accessRules)
    .filter((r) => (!level || r.accessLevel === level) && (!type || r.accessType === type))
    .sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  return json(200, { access_list: rules.map((r) => accessRuleView(ctx, share, r)) });
}

/**
 * share_accesses.py show: the rule by its id. Rules live on their share's item, so the caller's
 * shares (an admin's: all) are searched; a rule of a share the caller cannot see is not found.
 */
async function showRule(req: ApiRequest) {
  const id = req.params.access_id!;
  const shares = await listShares(req.auth.isAdmin ? undefined : req.auth.projectId);
  const share = shares.find((s) => s.accessRules[id]);
  if (!share) throw new NotFound(`Share access rule ${id} not found.`);
  authorize(req.auth, 'share_access_rule:get', share);
  return json(200, { access: accessRuleView(shareViewContext(req), share, share.accessRules[id]!) });
}

export const accessRoutes: RouteSpec[] = [
  { method: 'GET', path: '/share-access-rules', action: 'share_access_rule:index', authorizeBy: 'resource', minVersion: '2.45', handler: listRules },
  { method: 'GET', path: '/share-access-rules/{access_id}', action: 'share_access_rule:get', authorizeBy: 'resource', minVersion: '2.45', handler: showRule },
];
