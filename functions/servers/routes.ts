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
import { COMPUTE_BINARY, serviceIsUp } from '../compute/model.js';
import { findServiceByHostBinary } from '../compute/repo.js';
import type { LinkContext } from '../compute/views.js';
import { isObject, type Json } from '../compute/validation.js';
import { computeDriverFor } from '../drivers/compute/registry.js';
import type { ServerActionSpec } from './actions.js';
import { computeNodes } from './engine.js';
import { EVACUATE_ACTIONS } from './flows/evacuate/api.js';
import { createServer, deleteServer, LIFECYCLE_ACTIONS } from './flows/lifecycle/api.js';
import { LIVE_MIGRATION_ACTIONS } from './flows/live-migration/api.js';
import { RESIZE_ACTIONS } from './flows/resize/api.js';
import { SHELVE_ACTIONS } from './flows/shelve/api.js';
import { VOLUME_ATTACHMENT_ROUTES } from './flows/volumes/api.js';
import { HISTORY_ROUTES } from './history-routes.js';
import { addressesOf, listPortsOf } from './network.js';
import { SERVER_POLICIES, visibleServer } from './policies.js';
import { listInstances, loadPartition, type LoadedServer } from './repo.js';
import { SERVER_HOST_STATUS_MIN, serverDetail, serverSummary } from './views.js';

const linkContext = (req: ApiRequest): LinkContext => ({ baseUrl: req.baseUrl, urlProjectId: req.urlProjectId });

/** Every action of `POST /servers/{id}/action`, by the body's key. */
const SERVER_ACTIONS: Record<string, ServerActionSpec> = {
  ...LIFECYCLE_ACTIONS,
  ...LIVE_MIGRATION_ACTIONS,
  ...RESIZE_ACTIONS,
  ...EVACUATE_ACTIONS,
  ...SHELVE_ACTIONS,
};

async function detailOf(req: ApiRequest, server: LoadedServer): Promise<Json> {
  const { bdms } = await loadPartition(server.cell, server.instance.uuid);
  const ports = await listPortsOf(server.instance.uuid);
  const addresses = await addressesOf(ports);
  // Only admins see host_status (2.16+): the service lookup is skipped for everyone else.
  const hostStatus = req.auth.isAdmin && req.version.atLeast(SERVER_HOST_STATUS_MIN) ? await hostStatusOf(server.instance.host) : undefined;
  return serverDetail(server.instance, { bdms, ports, addresses, hostStatus }, req.version, linkContext(req), { isAdmin: req.auth.isAdmin });
}

/** compute/api.py `get_instance_host_status`: '' without a host; DOWN, MAINTENANCE (disabled) or UP from its nova-compute service. */
async function hostStatusOf(host: string | null): Promise<string> {
  if (!host) return '';
  const svc = await findServiceByHostBinary(host, COMPUTE_BINARY);
  const node = (await computeNodes()).find((n) => n.node.host === host);
  if (!svc || !node) return 'UNKNOWN';
  const reporting = (await computeDriverFor(node.node.config).getHostInfo()).up;
  if (!serviceIsUp(svc.value, reporting)) return 'DOWN';
  return svc.value.disabled ? 'MAINTENANCE' : 'UP';
}

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
];
