/**
 * Neutron's quotas (neutron/extensions/quotasv2.py, quotasv2_detail.py), read-only: what
 * `openstack quota show` asks (GET /v2.0/quotas/{project_id}, `/default`, `/details`). Ferry
 * enforces no network quota, so each resource Ferry's Neutron has (networks, subnets, ports: no
 * router, floating IP or security group extensions) is -1, unlimited as Neutron shows it, with the
 * project's usage counted from its records. Setting one is refused like other writes of this API.
 */
import type { PlainRequest, PlainResponse, PlainRoute } from '../core/plain-api.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { listNetworks } from '../compute/repo.js';
import { scanAllPorts } from '../servers/network.js';
import { NeutronError } from './routes.js';
import { networkView } from './views.js';

const POLICIES = { get: 'get_quota', update: 'update_quota', delete: 'delete_quota' } as const;
registerPolicies({ [POLICIES.get]: 'admin_or_owner', [POLICIES.update]: 'admin_api', [POLICIES.delete]: 'admin_api' });

const RESOURCES = ['network', 'subnet', 'port'] as const;

/** What the project holds of each resource (a network's one subnet belongs to the network's project). */
async function usage(projectId: string): Promise<Record<string, number>> {
  const [networks, ports] = await Promise.all([listNetworks(), scanAllPorts()]);
  const own = networks.map(networkView).filter((n) => n.project_id === projectId).length;
  return { network: own, subnet: own, port: ports.filter((p) => p.projectId === projectId).length };
}

function target(req: PlainRequest, action: string): string {
  const projectId = req.params.project_id!;
  authorize(req.auth, action, { projectId });
  return projectId;
}

const limits = () => Object.fromEntries(RESOURCES.map((r) => [r, -1]));

async function show(req: PlainRequest): Promise<PlainResponse> {
  target(req, POLICIES.get);
  return { status: 200, body: { quota: limits() } };
}

async function details(req: PlainRequest): Promise<PlainResponse> {
  const used = await usage(target(req, POLICIES.get));
  return { status: 200, body: { quota: Object.fromEntries(RESOURCES.map((r) => [r, { limit: -1, used: used[r] ?? 0, reserved: 0 }])) } };
}

const refuse = (action: string) => async (req: PlainRequest): Promise<PlainResponse> => {
  target(req, action);
  throw new NeutronError(405, 'HTTPMethodNotAllowed', 'Ferry enforces no network quotas, so they cannot be changed (docs/compatibility.md).');
};

export const NETWORK_QUOTA_ROUTES: PlainRoute[] = [
  // The projects with quotas other than the defaults: none, since none can be set.
  { method: 'GET', path: '/v2.0/quotas', action: POLICIES.update, handler: async () => ({ status: 200, body: { quotas: [] } }) },
  { method: 'GET', path: '/v2.0/quotas/{project_id}', action: POLICIES.get, handler: show },
  { method: 'GET', path: '/v2.0/quotas/{project_id}/default', action: POLICIES.get, handler: show },
  { method: 'GET', path: '/v2.0/quotas/{project_id}/details', action: POLICIES.get, handler: details },
  { method: 'PUT', path: '/v2.0/quotas/{project_id}', action: POLICIES.update, handler: refuse(POLICIES.update) },
  { method: 'DELETE', path: '/v2.0/quotas/{project_id}', action: POLICIES.delete, handler: refuse(POLICIES.delete) },
];
