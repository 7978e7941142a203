/**
 * The Nova API's response bodies, as nova 26.2.2's view builders shape them for each microversion
 * (nova/api/openstack/compute/views/{versions,flavors}.py, compute/services.py, compute/hypervisors.py).
 * Pure functions of the records and the request's version, so every microversion rule is unit tested.
 */
import type { ApiVersion, ServiceVersions } from '../core/microversion.js';
import type { ComputeNode, ComputeService, Flavor, NodeUsage } from './model.js';
import { COMPUTE_BINARY, DEFAULT_AVAILABILITY_ZONE, INTERNAL_AVAILABILITY_ZONE } from './model.js';

// ---------------------------------------------------------------------------------------------
// Versions (nova/api/openstack/compute/versions.py, views/versions.py)

/** When v2.1 was released: upstream's `updated` of the v2.1 entry (it does not move with microversions). */
export const V21_UPDATED = '2013-07-23T11:33:21Z';
export const V21_MEDIA_TYPE = 'application/vnd.openstack.compute+json;version=2.1';
const DOCS_LINK = { rel: 'describedby', type: 'text/html', href: 'http://docs.openstack.org/' };

/**
 * `GET /compute/` (what `nova version-list` reads): the version list, 200 as Nova answers it.
 * Nova also lists a `v2.0` (SUPPORTED, the legacy v2 API at `/v2`); Ferry serves no `/v2`, so
 * it lists only what it answers.
 */
export function versionsDocument(service: ServiceVersions, rootUrl: string): Record<string, unknown> {
  return {
    versions: [
      {
        id: 'v2.1',
        status: 'CURRENT',
        version: `${service.major}.${service.maxMinor}`,
        min_version: `${service.major}.${service.minMinor}`,
        updated: V21_UPDATED,
        links: [{ rel: 'self', href: `${rootUrl}/v2.1/` }],
      },
    ],
  };
}

/** `GET /compute/v2.1/` (novaclient's discovery reads `version.version` and `version.min_version`). */
export function versionDocument(service: ServiceVersions, rootUrl: string): Record<string, unknown> {
  return {
    version: {
      id: 'v2.1',
      status: 'CURRENT',
      version: `${service.major}.${service.maxMinor}`,
      min_version: `${service.major}.${service.minMinor}`,
      updated: V21_UPDATED,
      links: [{ rel: 'self', href: `${rootUrl}/v2.1/` }, DOCS_LINK],
      'media-types': [{ base: 'application/json', type: V21_MEDIA_TYPE }],
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Links (nova/api/openstack/common.py ViewBuilder)

/**
 * `self` under the versioned base, `bookmark` without the version; both with the project id
 * only when the request URL had one (as Nova does since the project id became optional).
 */
export function resourceLinks(baseUrl: string, projectId: string | undefined, collection: string, id: string): { rel: string; href: string }[] {
  const project = projectId ? `/${projectId}` : '';
  const unversioned = baseUrl.replace(/\/v\d+(\.\d+)?$/, '');
  return [
    { rel: 'self', href: `${baseUrl}${project}/${collection}/${id}` },
    { rel: 'bookmark', href: `${unversioned}${project}/${collection}/${id}` },
  ];
}

export interface LinkContext {
  baseUrl: string;
  urlProjectId?: string;
}

// ---------------------------------------------------------------------------------------------
// Flavors (views/flavors.py)

/** Description from 2.55; extra_specs in the body from 2.61; swap 0 instead of "" from 2.75. */
export const FLAVOR_DESCRIPTION_MIN = '2.55';
export const FLAVOR_EXTRA_SPECS_MIN = '2.61';
export const FLAVOR_SWAP_INT_MIN = '2.75';

/** `GET /flavors` entry: id, name, links (+description at 2.55). */
export function flavorBasic(f: Flavor, v: ApiVersion, links: LinkContext): Record<string, unknown> {
  const out: Record<string, unknown> = { id: f.flavorid, name: f.name, links: resourceLinks(links.baseUrl, links.urlProjectId, 'flavors', f.flavorid) };
  if (v.atLeast(FLAVOR_DESCRIPTION_MIN)) out.description = f.description;
  return out;
}

/** `GET /flavors/detail` entry and `GET /flavors/{id}`. `includeExtraSpecs`: the extra-specs policy allowed it. */
export function flavorDetail(f: Flavor, v: ApiVersion, links: LinkContext, includeExtraSpecs = true): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: f.flavorid,
    name: f.name,
    ram: f.memoryMb,
    disk: f.rootGb,
    swap: v.atLeast(FLAVOR_SWAP_INT_MIN) ? f.swap || 0 : f.swap || '',
    'OS-FLV-EXT-DATA:ephemeral': f.ephemeralGb,
    'OS-FLV-DISABLED:disabled': f.disabled,
    vcpus: f.vcpus,
    'os-flavor-access:is_public': f.isPublic,
    rxtx_factor: f.rxtxFactor || '',
    links: resourceLinks(links.baseUrl, links.urlProjectId, 'flavors', f.flavorid),
  };
  if (v.atLeast(FLAVOR_DESCRIPTION_MIN)) out.description = f.description;
  if (includeExtraSpecs && v.atLeast(FLAVOR_EXTRA_SPECS_MIN)) out.extra_specs = { ...f.extraSpecs };
  return out;
}

// ---------------------------------------------------------------------------------------------
// Services (compute/services.py _get_service_detail)

/** From 2.11 the service carries `forced_down` (and the force-down action exists). */
export const SERVICE_FORCED_DOWN_MIN = '2.11';
/** From 2.53 services and hypervisors are identified by uuid, and PUT takes the uuid. */
export const UUID_FOR_ID_MIN = '2.53';

/** Nova's datetime in JSON: `2012-10-29T13:42:02.000000`. */
export function novaTime(iso: string | null | undefined): string | null {
  if (!iso) return null;
  return iso.replace('Z', '').replace(/\.(\d{3})$/, '.$1000');
}

export function availabilityZoneOf(svc: Pick<ComputeService, 'binary'>): string {
  return svc.binary === COMPUTE_BINARY ? DEFAULT_AVAILABILITY_ZONE : INTERNAL_AVAILABILITY_ZONE;
}

/** One entry of `GET /os-services` (and the body of the 2.53 PUT). `up`: the servicegroup's verdict. */
export function serviceView(svc: ComputeService, up: boolean, v: ApiVersion): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: v.atLeast(UUID_FOR_ID_MIN) ? svc.uuid : svc.id,
    binary: svc.binary,
    disabled_reason: svc.disabledReason,
    host: svc.host,
    state: up ? 'up' : 'down',
    status: svc.disabled ? 'disabled' : 'enabled',
    updated_at: novaTime(svc.updatedAt),
    zone: availabilityZoneOf(svc),
  };
  if (v.atLeast(SERVICE_FORCED_DOWN_MIN)) out.forced_down = svc.forcedDown;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Hypervisors (compute/hypervisors.py _view_hypervisor)

/** From 2.28 cpu_info is an object (a JSON string before). */
export const HYPERVISOR_CPU_INFO_OBJECT_MIN = '2.28';
/** From 2.33 the lists page with limit and marker. */
export const HYPERVISOR_PAGING_MIN = '2.33';
/** From 2.75 `with_servers` always yields a `servers` list (empty when none). */
export const HYPERVISOR_SERVERS_ALWAYS_MIN = '2.75';
/** From 2.88 the usage fields are gone from detail/show, `uptime` joins them, statistics and /uptime are removed. */
export const HYPERVISOR_REDUCED_MIN = '2.88';

export interface HypervisorViewInput {
  node: ComputeNode;
  service: ComputeService;
  up: boolean;
  usage: NodeUsage;
  /** `uptime(1)`-style text, or null when the host does not report it. */
  uptime: string | null;
  /** Servers on the host (name, uuid) when asked `with_servers`. */
  servers?: { name: string; uuid: string }[];
}

export function hypervisorView(input: HypervisorViewInput, detail: boolean, v: ApiVersion, withServers = false): Record<string, unknown> {
  const { node, service, up, usage } = input;
  const uuids = v.atLeast(UUID_FOR_ID_MIN);
  const out: Record<string, unknown> = {
    id: uuids ? node.uuid : node.id,
    hypervisor_hostname: node.hypervisorHostname,
    state: up ? 'up' : 'down',
    status: service.disabled ? 'disabled' : 'enabled',
  };
  if (detail) {
    out.hypervisor_type = node.hypervisorType;
    out.hypervisor_version = node.hypervisorVersion;
    out.host_ip = node.hostIp;
    out.service = { id: uuids ? service.uuid : service.id, host: node.host, disabled_reason: service.disabledReason };
    if (!v.atLeast(HYPERVISOR_REDUCED_MIN)) {
      const freeRam = node.memoryMb - usage.memoryMbUsed;
      const freeDisk = node.localGb - usage.localGbUsed;
      Object.assign(out, {
        vcpus: node.vcpus,
        memory_mb: node.memoryMb,
        local_gb: node.localGb,
        vcpus_used: usage.vcpusUsed,
        memory_mb_used: usage.memoryMbUsed,
        local_gb_used: usage.localGbUsed,
        free_ram_mb: freeRam,
        free_disk_gb: freeDisk,
        current_workload: 0,
        running_vms: usage.consumers,
        disk_available_least: freeDisk,
        cpu_info: v.atLeast(HYPERVISOR_CPU_INFO_OBJECT_MIN) ? { ...node.cpuInfo } : JSON.stringify(node.cpuInfo),
      });
    } else {
      out.uptime = input.uptime;
    }
  }
  if (input.servers && input.servers.length > 0) out.servers = input.servers.map((s) => ({ name: s.name, uuid: s.uuid }));
  else if (withServers && v.atLeast(HYPERVISOR_SERVERS_ALWAYS_MIN)) out.servers = [];
  return out;
}

/** `GET /os-hypervisors/statistics` (2.1–2.87): sums over every node. */
export function hypervisorStatistics(rows: readonly { node: ComputeNode; usage: NodeUsage }[]): Record<string, number> {
  const s = { count: 0, vcpus: 0, memory_mb: 0, local_gb: 0, vcpus_used: 0, memory_mb_used: 0, local_gb_used: 0, free_ram_mb: 0, free_disk_gb: 0, current_workload: 0, running_vms: 0, disk_available_least: 0 };
  for (const { node, usage } of rows) {
    s.count += 1;
    s.vcpus += node.vcpus;
    s.memory_mb += node.memoryMb;
    s.local_gb += node.localGb;
    s.vcpus_used += usage.vcpusUsed;
    s.memory_mb_used += usage.memoryMbUsed;
    s.local_gb_used += usage.localGbUsed;
    s.free_ram_mb += node.memoryMb - usage.memoryMbUsed;
    s.free_disk_gb += node.localGb - usage.localGbUsed;
    s.running_vms += usage.consumers;
    s.disk_available_least += node.localGb - usage.localGbUsed;
  }
  return s;
}

/**
 * What libvirt's `get_host_uptime` returns, the output of `uptime(1)`:
 * ` 08:32:11 up 93 days, 18:25,  0 users,  load average: 0.20, 0.12, 0.14`.
 */
export function formatUptime(now: Date, uptimeSeconds: number, loadavg: readonly number[]): string {
  const clock = now.toISOString().slice(11, 19);
  const days = Math.floor(uptimeSeconds / 86_400);
  const hours = Math.floor((uptimeSeconds % 86_400) / 3600);
  const minutes = Math.floor((uptimeSeconds % 3600) / 60);
  const hm = hours > 0 ? `${hours}:${String(minutes).padStart(2, '0')}` : `${minutes} min`;
  const up = days > 0 ? `${days} day${days === 1 ? '' : 's'}, ${hm}` : hm;
  const load = [0, 1, 2].map((i) => (loadavg[i] ?? 0).toFixed(2)).join(', ');
  return ` ${clock} up ${up},  0 users,  load average: ${load}`;
}
