/**
 * `GET /servers/{id}/ips` and `/servers/{id}/ips/{network_label}` (nova/api/openstack/compute/
 * ips.py): the server's addresses by network label, each `{version, addr}` only (the address
 * view without the OS-EXT-IPS extensions that server show adds). A label the server has no
 * address on is Nova's 404 "Instance is not a member of specified network".
 */
import { json, type ApiRequest, type ApiResponse, type RouteSpec } from '../core/api.js';
import { NotFound } from '../core/errors.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { addressesOf, listPortsOf } from './network.js';
import { visibleServer } from './policies.js';

export const IPS_POLICIES = {
  index: 'os_compute_api:ips:index',
  show: 'os_compute_api:ips:show',
} as const;

registerPolicies({
  [IPS_POLICIES.index]: 'admin_or_owner',
  [IPS_POLICIES.show]: 'admin_or_owner',
});

type Basic = { version: number; addr: string };

/** The server's addresses by label, as ips.py's view (version and addr); none while it builds, as server show. */
async function basicAddresses(req: ApiRequest, policy: string): Promise<Record<string, Basic[]>> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, policy, { projectId: server.instance.projectId });
  if (server.instance.vmState === 'building') return {};
  const full = await addressesOf(await listPortsOf(server.instance.uuid));
  return Object.fromEntries(Object.entries(full).map(([label, list]) => [label, list.map((a) => ({ version: a.version, addr: a.addr }))]));
}

async function listIps(req: ApiRequest): Promise<ApiResponse> {
  return json(200, { addresses: await basicAddresses(req, IPS_POLICIES.index) });
}

async function showIps(req: ApiRequest): Promise<ApiResponse> {
  const label = req.params.network_label!;
  const addresses = await basicAddresses(req, IPS_POLICIES.show);
  if (!Object.prototype.hasOwnProperty.call(addresses, label)) throw new NotFound('Instance is not a member of specified network');
  return json(200, { [label]: addresses[label] });
}

export const IPS_ROUTES: RouteSpec[] = [
  { method: 'GET', path: '/servers/{server_id}/ips', action: IPS_POLICIES.index, authorizeBy: 'resource', handler: listIps },
  { method: 'GET', path: '/servers/{server_id}/ips/{network_label}', action: IPS_POLICIES.show, authorizeBy: 'resource', handler: showIps },
];
