/**
 * Neutron v2.0's documents over Ferry's networks and ports: a network, its one subnet (the
 * network's CIDR; gateway the first address, the allocation pool the rest but the broadcast,
 * exactly the addresses functions/servers/network.ts hands out), a port. Ferry's networks are
 * the operator's (the inventory's), shared with every project.
 */
import type { Network } from '../compute/model.js';
import { assignableAddresses, subnetIdOf } from '../servers/network.js';
import type { Port } from '../servers/model.js';

const at = (iso: string) => iso.replace(/\.\d+Z$/, 'Z');

/** The project Neutron would name as the owner of the operator's networks. */
const OPERATOR_PROJECT = '';

export function versionsDocument(rootUrl: string): unknown {
  return { versions: [{ id: 'v2.0', status: 'CURRENT', links: [{ rel: 'self', href: `${rootUrl}/v2.0/` }] }] };
}

export function resourcesDocument(rootUrl: string): unknown {
  return {
    resources: ['network', 'subnet', 'port'].map((name) => ({ name, collection: `${name}s`, links: [{ rel: 'self', href: `${rootUrl}/v2.0/${name}s` }] })),
  };
}

export function networkView(n: Network): Record<string, unknown> {
  return {
    id: n.id,
    name: n.name,
    tenant_id: OPERATOR_PROJECT,
    project_id: OPERATOR_PROJECT,
    status: 'ACTIVE',
    admin_state_up: true,
    shared: true,
    'router:external': false,
    subnets: [subnetIdOf(n.id)],
    mtu: 1500,
    availability_zones: ['nova'],
    availability_zone_hints: [],
    ipv4_address_scope: null,
    ipv6_address_scope: null,
    port_security_enabled: true,
    l2_adjacency: true,
    is_default: false,
    description: '',
    tags: [],
    created_at: at(n.createdAt),
    updated_at: at(n.createdAt),
    revision_number: 1,
  };
}

function poolOf(cidr: string): { gateway: string; start: string; end: string } {
  const [base, bits] = cidr.split('/');
  const toInt = (ip: string) => ip.split('.').reduce((n, o) => n * 256 + Number(o), 0);
  const toIp = (n: number) => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');
  const size = 2 ** (32 - Number(bits));
  const network = toInt(base!) - (toInt(base!) % size);
  const first = assignableAddresses(cidr).next();
  return { gateway: toIp(network + 1), start: first.done ? toIp(network + 2) : first.value, end: toIp(network + size - 2) };
}

export function subnetView(n: Network): Record<string, unknown> {
  const pool = poolOf(n.cidr);
  return {
    id: subnetIdOf(n.id),
    name: `${n.name}-subnet`,
    network_id: n.id,
    tenant_id: OPERATOR_PROJECT,
    project_id: OPERATOR_PROJECT,
    ip_version: 4,
    cidr: n.cidr,
    gateway_ip: pool.gateway,
    allocation_pools: [{ start: pool.start, end: pool.end }],
    enable_dhcp: true,
    dns_nameservers: [],
    host_routes: [],
    ipv6_ra_mode: null,
    ipv6_address_mode: null,
    subnetpool_id: null,
    segment_id: null,
    service_types: [],
    description: '',
    tags: [],
    created_at: at(n.createdAt),
    updated_at: at(n.createdAt),
    revision_number: 0,
  };
}

/** A port; the binding attributes are an admin's (Neutron's policy hides them from members). */
export function portView(p: Port, isAdmin: boolean): Record<string, unknown> {
  const bound = p.bindingHostId ? p.bindings[p.bindingHostId] : undefined;
  return {
    id: p.id,
    name: '',
    network_id: p.networkId,
    tenant_id: p.projectId,
    project_id: p.projectId,
    mac_address: p.macAddress,
    admin_state_up: true,
    status: p.status,
    device_id: p.deviceId,
    device_owner: p.deviceOwner,
    fixed_ips: p.fixedIps.map((f) => ({ subnet_id: f.subnetId, ip_address: f.ipAddress })),
    allowed_address_pairs: [],
    extra_dhcp_opts: [],
    security_groups: [],
    port_security_enabled: true,
    'binding:vnic_type': bound?.vnicType ?? 'normal',
    ...(isAdmin
      ? {
          'binding:host_id': p.bindingHostId ?? '',
          'binding:vif_type': bound ? bound.vifType : 'unbound',
          'binding:vif_details': {},
          'binding:profile': bound?.profile ?? {},
        }
      : {}),
    description: '',
    tags: [],
    created_at: at(p.createdAt),
    updated_at: at(p.updatedAt),
    revision_number: 1,
  };
}
