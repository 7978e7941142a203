/**
 * Neutron v2.0's routes for what servers need: networks, subnets and ports, list and show, with
 * Neutron's query filters (any attribute, repeated values OR'ed; `fixed_ips=ip_address=...` /
 * `subnet_id=...`) and `fields`. Networks come from the inventory: creating or deleting one through
 * the API is refused (405, docs/compatibility.md); ports are made by Nova's server flows.
 */
import { FerryError } from '../core/errors.js';
import type { PlainRequest, PlainResponse, PlainRoute } from '../core/plain-api.js';
import { registerPolicies } from '../core/policy.js';
import { listNetworks } from '../compute/repo.js';
import { scanAllPorts } from '../servers/network.js';
import { networkView, portView, resourcesDocument, subnetView, versionsDocument } from './views.js';

export const NETWORK_POLICIES = {
  getNetwork: 'get_network',
  getSubnet: 'get_subnet',
  getPort: 'get_port',
  listExtensions: 'get_extension',
} as const;

registerPolicies({
  [NETWORK_POLICIES.getNetwork]: '@',
  [NETWORK_POLICIES.getSubnet]: '@',
  [NETWORK_POLICIES.getPort]: '@',
  [NETWORK_POLICIES.listExtensions]: '@',
});

/** Neutron's error, carrying its `type` (NetworkNotFound, HTTPBadRequest, ...). */
export class NeutronError extends FerryError {
  constructor(status: number, readonly neutronType: string, message: string) {
    super(status, status === 404 ? 'itemNotFound' : 'badRequest', message);
  }
}

/** Query parameters that are not attribute filters. */
const NOT_FILTERS = new Set(['fields', 'limit', 'marker', 'page_reverse', 'sort_key', 'sort_dir']);

function matches(value: unknown, wanted: string[]): boolean {
  if (Array.isArray(value)) return value.some((v) => matches(v, wanted));
  if (typeof value === 'boolean') return wanted.some((w) => w.toLowerCase() === String(value));
  return wanted.includes(String(value ?? ''));
}

/** The fixed_ips filter: each value is `ip_address=X` or `subnet_id=Y` (or a bare address). */
function fixedIpsMatch(value: unknown, wanted: string[]): boolean {
  const ips = value as { ip_address: string; subnet_id: string }[];
  return wanted.every((w) => {
    const [k, v] = w.includes('=') ? (w.split('=', 2) as [string, string]) : ['ip_address', w];
    if (k !== 'ip_address' && k !== 'subnet_id' && k !== 'ip_address_substr') throw new NeutronError(400, 'HTTPBadRequest', `Invalid input for fixed_ips. Reason: ${k} is not a valid filter.`);
    return ips.some((f) => (k === 'ip_address_substr' ? f.ip_address.includes(v) : f[k] === v));
  });
}

/** The documents `req`'s filters keep, sorted by id, each cut to `fields` if given. */
function select(req: PlainRequest, docs: Record<string, unknown>[]): Record<string, unknown>[] {
  const filters = new Map<string, string[]>();
  for (const [k, v] of req.query) if (!NOT_FILTERS.has(k)) filters.set(k, [...(filters.get(k) ?? []), v]);
  const known = new Set(docs.length > 0 ? Object.keys(docs[0]!) : []);
  for (const k of filters.keys()) {
    if (docs.length > 0 && !known.has(k)) throw new NeutronError(400, 'HTTPBadRequest', `[${k}] is invalid attribute for filtering`);
  }
  const kept = docs.filter((d) => [...filters].every(([k, wanted]) => (k === 'fixed_ips' ? fixedIpsMatch(d[k], wanted) : matches(d[k], wanted))));
  kept.sort((a, b) => String(a.id).localeCompare(String(b.id)));
  return project(req, kept);
}

function project(req: PlainRequest, docs: Record<string, unknown>[]): Record<string, unknown>[] {
  // openstacksdk 0.101 (Debian's, under openstackclient 6.0) sends a Python tuple's text,
  // `fields=('id', 'name')`: the quotes and brackets are dropped so its columns are not blank.
  const fields = req.query
    .getAll('fields')
    .flatMap((f) => f.split(','))
    .map((f) => f.replace(/[()'"\s]/g, ''))
    .filter(Boolean);
  if (fields.length === 0) return docs;
  return docs.map((d) => Object.fromEntries(fields.filter((f) => f in d).map((f) => [f, d[f]])));
}

async function networkDocs(): Promise<Record<string, unknown>[]> {
  return (await listNetworks()).map(networkView);
}

async function subnetDocs(): Promise<Record<string, unknown>[]> {
  return (await listNetworks()).map(subnetView);
}

/** The ports the caller sees: an admin every port, a member its project's. */
async function portDocs(req: PlainRequest): Promise<Record<string, unknown>[]> {
  return (await scanAllPorts()).filter((p) => req.auth.isAdmin || p.projectId === req.auth.projectId).map((p) => portView(p, req.auth.isAdmin));
}

const notFound = (type: string, what: string, id: string) => new NeutronError(404, type, `${what} ${id} could not be found.`);

function one(req: PlainRequest, docs: Record<string, unknown>[], key: string, id: string, type: string, what: string): PlainResponse {
  const found = docs.find((d) => d.id === id);
  if (!found) throw notFound(type, what, id);
  return { status: 200, body: { [key]: project(req, [found])[0] } };
}

const refuseWrite = (what: string) => async (): Promise<PlainResponse> => {
  throw new NeutronError(405, 'HTTPMethodNotAllowed', `${what} are managed through Ferry's inventory (docs/compatibility.md); this API does not change them.`);
};

export const NETWORK_ROUTES: PlainRoute[] = [
  { method: 'GET', path: '/', handler: async (req) => ({ status: 200, body: versionsDocument(req.rootUrl) }) },
  { method: 'GET', path: '/v2.0', action: NETWORK_POLICIES.getNetwork, handler: async (req) => ({ status: 200, body: resourcesDocument(req.rootUrl) }) },
  { method: 'GET', path: '/v2.0/extensions', action: NETWORK_POLICIES.listExtensions, handler: async () => ({ status: 200, body: { extensions: [] } }) },
  {
    method: 'GET',
    path: '/v2.0/extensions/{alias}',
    action: NETWORK_POLICIES.listExtensions,
    handler: async (req) => {
      throw notFound('ExtensionNotFound', 'Extension', req.params.alias!);
    },
  },
  { method: 'GET', path: '/v2.0/networks', action: NETWORK_POLICIES.getNetwork, handler: async (req) => ({ status: 200, body: { networks: select(req, await networkDocs()) } }) },
  { method: 'POST', path: '/v2.0/networks', action: NETWORK_POLICIES.getNetwork, handler: refuseWrite('Networks') },
  { method: 'GET', path: '/v2.0/networks/{id}', action: NETWORK_POLICIES.getNetwork, handler: async (req) => one(req, await networkDocs(), 'network', req.params.id!, 'NetworkNotFound', 'Network') },
  { method: 'PUT', path: '/v2.0/networks/{id}', action: NETWORK_POLICIES.getNetwork, handler: refuseWrite('Networks') },
  { method: 'DELETE', path: '/v2.0/networks/{id}', action: NETWORK_POLICIES.getNetwork, handler: refuseWrite('Networks') },
  { method: 'GET', path: '/v2.0/subnets', action: NETWORK_POLICIES.getSubnet, handler: async (req) => ({ status: 200, body: { subnets: select(req, await subnetDocs()) } }) },
  { method: 'POST', path: '/v2.0/subnets', action: NETWORK_POLICIES.getSubnet, handler: refuseWrite('Subnets') },
  { method: 'GET', path: '/v2.0/subnets/{id}', action: NETWORK_POLICIES.getSubnet, handler: async (req) => one(req, await subnetDocs(), 'subnet', req.params.id!, 'SubnetNotFound', 'Subnet') },
  { method: 'GET', path: '/v2.0/ports', action: NETWORK_POLICIES.getPort, handler: async (req) => ({ status: 200, body: { ports: select(req, await portDocs(req)) } }) },
  { method: 'POST', path: '/v2.0/ports', action: NETWORK_POLICIES.getPort, handler: refuseWrite('Ports') },
  { method: 'GET', path: '/v2.0/ports/{id}', action: NETWORK_POLICIES.getPort, handler: async (req) => one(req, await portDocs(req), 'port', req.params.id!, 'PortNotFound', 'Port') },
];
