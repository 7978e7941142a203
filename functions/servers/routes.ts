/**
 * The servers routes of the Nova v2.1 API (reference §3): list, detail and show here; create,
 * delete and the power actions (flows/lifecycle/api.ts), os-volume_attachments
 * (flows/volumes/api.ts), os-instance-actions, os-migrations and the image proxy
 * (history-routes.ts); `POST /servers/{id}/action` dispatches to the action its body names, each
 * flow's API declaring its own. Policies are nova 26.2.2's names with their defaults (policies.ts).
 */
import { json, type ApiRequest, type ApiResponse, type RouteSpec } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { authorize } from '../core/policy.js';
import type { LinkContext } from '../compute/views.js';
import { isObject } from '../compute/validation.js';
import type { ServerActionSpec } from './actions.js';
import { assertNotLocked } from './engine.js';
import { EVACUATE_ACTIONS } from './flows/evacuate/api.js';
import { createServer, deleteServer, LIFECYCLE_ACTIONS } from './flows/lifecycle/api.js';
import { GUEST_ACTIONS } from './flows/lifecycle/guest-actions.js';
import { LIVE_MIGRATION_ACTIONS } from './flows/live-migration/api.js';
import { LOCK_ACTIONS } from './flows/lock/api.js';
import { RESIZE_ACTIONS } from './flows/resize/api.js';
import { SHELVE_ACTIONS } from './flows/shelve/api.js';
import { VOLUME_ATTACHMENT_ROUTES } from './flows/volumes/api.js';
import { HISTORY_ROUTES } from './history-routes.js';
import { IPS_ROUTES } from './ips-routes.js';
import { OS_VOLUMES_ROUTES } from './os-volumes-routes.js';
import { SERVER_POLICIES, visibleServer } from './policies.js';
import { listInstances } from './repo.js';
import { serverSummary } from './views.js';
import { detailOf } from './detail.js';

const linkContext = (req: ApiRequest): LinkContext => ({ baseUrl: req.baseUrl, urlProjectId: req.urlProjectId });

/** Every action of `POST /servers/{id}/action`, by the body's key. */
const SERVER_ACTIONS: Record<string, ServerActionSpec> = {
  ...LIFECYCLE_ACTIONS,
  ...LIVE_MIGRATION_ACTIONS,
  ...RESIZE_ACTIONS,
  ...EVACUATE_ACTIONS,
  ...SHELVE_ACTIONS,
  ...LOCK_ACTIONS,
  ...GUEST_ACTIONS,
};

// ---------------------------------------------------------------------------------------------
// List / show

async function listServers(req: ApiRequest, detail: boolean): Promise<ApiResponse> {
  const allTenants = req.query.has('all_tenants') && req.query.get('all_tenants') !== '0' && req.query.get('all_tenants') !== 'false';
  if (allTenants) authorize(req.auth, SERVER_POLICIES.allTenants, {});
  const name = req.query.get('name');
  const status = req.query.get('status')?.toUpperCase();
  const host = req.query.get('host');
  const nameRe = name ? new RegExp(name) : undefined;
  const all = (await listInstances())
    .filter((s) => !s.instance.hidden)
    // A safety net: one server per uuid even if two copies were ever shown at once.
    .filter((s, i, list) => list.findIndex((o) => o.instance.uuid === s.instance.uuid) === i)
    .filter((s) => (allTenants ? true : s.instance.projectId === (req.query.get('project_id') && req.auth.isAdmin ? req.query.get('project_id') : req.auth.projectId)))
    .filter((s) => !nameRe || nameRe.test(s.instance.name))
    .filter((s) => !host || s.instance.host === host)
    .sort((a, b) => b.instance.createdAt.localeCompare(a.instance.createdAt));
  const views = [];
  for (const s of all) {
    if (!detail) {
      views.push(serverSummary(s.instance, linkContext(req)));
      continue;
    }
    const v = await detailOf(req, s);
    if (status && v.status !== status) continue;
    views.push(v);
  }
  return json(200, { servers: views });
}

async function showServer(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.show, { projectId: server.instance.projectId });
  return json(200, { server: await detailOf(req, server) });
}

// ---------------------------------------------------------------------------------------------
// Actions

async function serverAction(req: ApiRequest): Promise<ApiResponse> {
  const body = req.body;
  if (!isObject(body) || Object.keys(body).length !== 1) throw new BadRequest('Malformed request body');
  const name = Object.keys(body)[0]!;
  const spec = SERVER_ACTIONS[name];
  const server = await visibleServer(req, req.params.server_id!);
  if (!spec || (spec.minVersion && !req.version.atLeast(spec.minVersion))) throw new NotFound('The resource could not be found.');
  authorize(req.auth, spec.policy, { projectId: server.instance.projectId });
  // check_instance_lock wraps the API method, before its state checks (beginOperation checks again in its write).
  if (!spec.ignoresLock) assertNotLocked(server.instance, req.auth.isAdmin);
  return spec.handler(req, server, body[name]);
}

export const SERVER_ROUTES: RouteSpec[] = [
  { method: 'GET', path: '/servers', action: SERVER_POLICIES.index, handler: (req) => listServers(req, false) },
  { method: 'GET', path: '/servers/detail', action: SERVER_POLICIES.detail, handler: (req) => listServers(req, true) },
  { method: 'POST', path: '/servers', action: SERVER_POLICIES.create, handler: createServer },
  { method: 'GET', path: '/servers/{server_id}', action: SERVER_POLICIES.show, authorizeBy: 'resource', handler: showServer },
  { method: 'DELETE', path: '/servers/{server_id}', action: SERVER_POLICIES.delete, authorizeBy: 'resource', handler: deleteServer },
  { method: 'POST', path: '/servers/{server_id}/action', action: 'server action', authorizeBy: 'resource', handler: serverAction },
  ...VOLUME_ATTACHMENT_ROUTES,
  ...HISTORY_ROUTES,
  ...IPS_ROUTES,
  ...OS_VOLUMES_ROUTES,
];
