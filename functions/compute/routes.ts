/**
 * The Nova v2.1 foundation routes (nova 26.2.2, reference §3): flavors and their extra specs,
 * os-services (list; PUT by uuid from 2.53, the enable/disable/force-down actions before),
 * os-hypervisors (list, detail, show, statistics, uptime, search/servers before 2.53) and
 * os-availability-zone. Validation in upstream's order and wording, policies where upstream's are.
 *
 * Liveness: Nova's servicegroup says a service is up while it heartbeats and it is not forced
 * down. Ferry's nova-compute "heartbeat" is its compute driver host answering `getHostInfo` with
 * `up` (the local driver's `down` flag file plays a dead compute process); other services are up
 * unless forced down.
 */
import { loadavg, uptime as osUptime } from 'node:os';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { logger } from '../core/logger.js';
import type { ApiVersion } from '../core/microversion.js';
import { allowed, authorize, registerPolicies } from '../core/policy.js';
import { computeDriverFor } from '../drivers/compute/registry.js';
import { SERVER_ROUTES } from '../servers/routes.js';
import { COMPUTE_BINARY, isUuidLike, parseStrictBool, serviceIsUp, type ComputeNode, type ComputeService, type Flavor, type ServiceUpdate } from './model.js';
import {
  findServiceByHostBinary,
  findServiceByUuid,
  getFlavor,
  listComputeNodes,
  listFlavors,
  listServices,
  nodeUsage,
  updateService,
  type InCell,
} from './repo.js';
import {
  availabilityZoneOf,
  flavorBasic,
  flavorDetail,
  formatUptime,
  HYPERVISOR_PAGING_MIN,
  HYPERVISOR_REDUCED_MIN,
  hypervisorStatistics,
  hypervisorView,
  novaTime,
  SERVICE_FORCED_DOWN_MIN,
  serviceView,
  UUID_FOR_ID_MIN,
  type LinkContext,
} from './views.js';
import { invalid, isObject, type Json } from './validation.js';

/** The policy names of nova 26.2.2 (nova/policies/*.py) where upstream has one; their defaults. */
export const COMPUTE_POLICIES = {
  flavorsIndex: 'os_compute_api:flavors:index',
  flavorsDetail: 'os_compute_api:flavors:detail',
  flavorsShow: 'os_compute_api:flavors:show',
  extraSpecsIndex: 'os_compute_api:os-flavor-extra-specs:index',
  extraSpecsShow: 'os_compute_api:os-flavor-extra-specs:show',
  servicesList: 'os_compute_api:os-services:list',
  servicesUpdate: 'os_compute_api:os-services:update',
  hypervisorsList: 'os_compute_api:os-hypervisors:list',
  hypervisorsListDetail: 'os_compute_api:os-hypervisors:list-detail',
  hypervisorsShow: 'os_compute_api:os-hypervisors:show',
  hypervisorsStatistics: 'os_compute_api:os-hypervisors:statistics',
  hypervisorsUptime: 'os_compute_api:os-hypervisors:uptime',
  hypervisorsSearch: 'os_compute_api:os-hypervisors:search',
  hypervisorsServers: 'os_compute_api:os-hypervisors:servers',
  azList: 'os_compute_api:os-availability-zone:list',
  azDetail: 'os_compute_api:os-availability-zone:detail',
} as const;

registerPolicies({
  // Flavors have no policy upstream (any authenticated user); extra specs are project readers'.
  [COMPUTE_POLICIES.flavorsIndex]: '@',
  [COMPUTE_POLICIES.flavorsDetail]: '@',
  [COMPUTE_POLICIES.flavorsShow]: '@',
  [COMPUTE_POLICIES.extraSpecsIndex]: '@',
  [COMPUTE_POLICIES.extraSpecsShow]: '@',
  [COMPUTE_POLICIES.servicesList]: 'admin_api',
  [COMPUTE_POLICIES.servicesUpdate]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsList]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsListDetail]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsShow]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsStatistics]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsUptime]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsSearch]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsServers]: 'admin_api',
  [COMPUTE_POLICIES.azList]: '@',
  [COMPUTE_POLICIES.azDetail]: 'admin_api',
});



function requireBodyObject(body: unknown): Json {
  if (!isObject(body)) throw new BadRequest('The request body is invalid: it must be a JSON object.');
  return body;
}

function noAdditional(field: string, obj: Json, allowedKeys: readonly string[]): void {
  const extra = Object.keys(obj).filter((k) => !allowedKeys.includes(k));
  if (extra.length) throw invalid(field, obj, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length === 1 ? 'was' : 'were'} unexpected)`);
}

function requireString(field: string, obj: Json, key: string, max = 255): string {
  const v = obj[key];
  if (v === undefined) throw invalid(field, obj, `'${key}' is a required property`);
  if (typeof v !== 'string') throw invalid(key, v, `${JSON.stringify(v)} is not of type 'string'`);
  if (v.length > max) throw invalid(key, v, `'${v}' is too long`);
  return v;
}

function positiveInt(name: string, raw: string | null): number | undefined {
  if (raw === null) return undefined;
  if (!/^\d+$/.test(raw)) throw new BadRequest(`${name} param must be an integer`);
  return Number(raw);
}

// ---------------------------------------------------------------------------------------------
// Liveness

/** Whether each compute host's driver reports up (a failing driver call counts as not reporting). */
async function reportingHosts(nodes: readonly ComputeNode[]): Promise<Map<string, boolean>> {
  const entries = await Promise.all(
    nodes.map(async (n): Promise<[string, boolean]> => {
      try {
        return [n.host, (await computeDriverFor(n.config).getHostInfo()).up];
      } catch (e) {
        logger.warn('compute host does not report', { host: n.host, error: e as Error });
        return [n.host, false];
      }
    }),
  );
  return new Map(entries);
}

function isUp(svc: ComputeService, reporting: Map<string, boolean>): boolean {
  return serviceIsUp(svc, svc.binary === COMPUTE_BINARY ? (reporting.get(svc.host) ?? false) : true);
}

// ---------------------------------------------------------------------------------------------
// Flavors

const FLAVOR_SORT_KEYS: Record<string, (f: Flavor) => string | number | boolean> = {
  flavorid: (f) => f.flavorid,
  id: (f) => f.id,
  name: (f) => f.name,
  memory_mb: (f) => f.memoryMb,
  root_gb: (f) => f.rootGb,
  ephemeral_gb: (f) => f.ephemeralGb,
  vcpus: (f) => f.vcpus,
  swap: (f) => f.swap,
  rxtx_factor: (f) => f.rxtxFactor,
  is_public: (f) => f.isPublic,
  disabled: (f) => f.disabled,
  created_at: (f) => f.createdAt,
};

/** `_parse_is_public`: t/true/yes/1 -> true, f/false/no/0 -> false, none -> all; absent -> true. */
function parseIsPublic(raw: string | null): boolean | null {
  if (raw === null) return true;
  const v = raw.trim().toLowerCase();
  if (v === 'none') return null;
  if (['1', 't', 'true', 'on', 'y', 'yes'].includes(v)) return true;
  if (['0', 'f', 'false', 'off', 'n', 'no'].includes(v)) return false;
  throw new BadRequest(`Invalid is_public filter [${raw}]`);
}

function intFilter(name: string, raw: string | null): number | undefined {
  if (raw === null) return undefined;
  if (!/^\d+$/.test(raw.trim())) throw new BadRequest(`Invalid ${name} filter [${raw}]`);
  return Number(raw);
}

/** The flavors a caller may see: admins every public one (or all, `is_public=None`); others public, enabled ones. */
function visibleFlavor(f: Flavor, req: ApiRequest): boolean {
  return req.auth.isAdmin || (f.isPublic && !f.disabled);
}

const flavorNotFound = (id: string) => new NotFound(`Flavor ${id} could not be found.`);

async function flavorOr404(req: ApiRequest): Promise<Flavor> {
  const id = req.params.flavor_id!;
  const f = await getFlavor(id);
  if (!f || !visibleFlavor(f, req)) throw flavorNotFound(id);
  return f;
}

const linkContext = (req: ApiRequest): LinkContext => ({ baseUrl: req.baseUrl, urlProjectId: req.urlProjectId });

async function flavorList(req: ApiRequest, detail: boolean) {
  const q = req.query;
  const isPublic = req.auth.isAdmin ? parseIsPublic(q.get('is_public')) : true;
  const minRam = intFilter('minRam', q.get('minRam'));
  const minDisk = intFilter('minDisk', q.get('minDisk'));
  const sortKey = q.get('sort_key') ?? 'flavorid';
  const sortDir = (q.get('sort_dir') ?? 'asc').toLowerCase();
  const keyOf = Object.hasOwn(FLAVOR_SORT_KEYS, sortKey) ? FLAVOR_SORT_KEYS[sortKey] : undefined;
  if (!keyOf) throw invalid('sort_key', sortKey, `'${sortKey}' is not one of [${Object.keys(FLAVOR_SORT_KEYS).map((k) => `'${k}'`).join(', ')}]`);
  if (sortDir !== 'asc' && sortDir !== 'desc') throw invalid('sort_dir', sortDir, `'${sortDir}' is not one of ['asc', 'desc']`);
  const limit = positiveInt('limit', q.get('limit'));
  const marker = q.get('marker');

  let flavors = (await listFlavors()).filter(
    (f) =>
      visibleFlavor(f, req) &&
      (isPublic === null || f.isPublic === isPublic) &&
      (minRam === undefined || f.memoryMb >= minRam) &&
      (minDisk === undefined || f.rootGb >= minDisk),
  );
  flavors.sort((a, b) => {
    const x = keyOf(a);
    const y = keyOf(b);
    const c = x < y ? -1 : x > y ? 1 : a.flavorid.localeCompare(b.flavorid);
    return sortDir === 'asc' ? c : -c;
  });
  if (marker !== null) {
    const i = flavors.findIndex((f) => f.flavorid === marker);
    if (i < 0) throw new BadRequest(`marker [${marker}] not found`);
    flavors = flavors.slice(i + 1);
  }
  const page = limit === undefined ? flavors : flavors.slice(0, limit);
  const links = linkContext(req);
  const body: Json = { flavors: page.map((f) => (detail ? flavorDetail(f, req.version, links, allowed(req.auth, COMPUTE_POLICIES.extraSpecsIndex)) : flavorBasic(f, req.version, links))) };
  if (limit !== undefined && page.length === limit && page.length > 0) {
    const next = new URLSearchParams(req.query);
    next.set('marker', page[page.length - 1]!.flavorid);
    body.flavors_links = [{ rel: 'next', href: `${req.baseUrl}${req.urlProjectId ? '/' + req.urlProjectId : ''}/flavors${detail ? '/detail' : ''}?${next}` }];
  }
  return json(200, body);
}

export const flavorRoutes: RouteSpec[] = [
  { method: 'GET', path: '/flavors', action: COMPUTE_POLICIES.flavorsIndex, handler: (req) => flavorList(req, false) },
  { method: 'GET', path: '/flavors/detail', action: COMPUTE_POLICIES.flavorsDetail, handler: (req) => flavorList(req, true) },
  {
    method: 'GET',
    path: '/flavors/{flavor_id}',
    action: COMPUTE_POLICIES.flavorsShow,
    handler: async (req) => json(200, { flavor: flavorDetail(await flavorOr404(req), req.version, linkContext(req), allowed(req.auth, COMPUTE_POLICIES.extraSpecsIndex)) }),
  },
  {
    method: 'GET',
    path: '/flavors/{flavor_id}/os-extra_specs',
    action: COMPUTE_POLICIES.extraSpecsIndex,
    handler: async (req) => json(200, { extra_specs: { ...(await flavorOr404(req)).extraSpecs } }),
  },
  {
    method: 'GET',
    path: '/flavors/{flavor_id}/os-extra_specs/{key}',
    action: COMPUTE_POLICIES.extraSpecsShow,
    handler: async (req) => {
      const f = await flavorOr404(req);
      const key = req.params.key!;
      if (!Object.hasOwn(f.extraSpecs, key)) throw new NotFound(`Flavor ${f.flavorid} has no extra specs with key ${key}.`);
      return json(200, { [key]: f.extraSpecs[key] });
    },
  },
];

// ---------------------------------------------------------------------------------------------
// os-services

async function servicesWithLiveness(): Promise<{ services: InCell<ComputeService>[]; reporting: Map<string, boolean> }> {
  const [services, nodes] = await Promise.all([listServices(), listComputeNodes()]);
  return { services, reporting: await reportingHosts(nodes.map((n) => n.value)) };
}

async function upOf(svc: InCell<ComputeService>): Promise<boolean> {
  if (svc.value.binary !== COMPUTE_BINARY) return serviceIsUp(svc.value, true);
  const nodes = (await listComputeNodes()).filter((n) => n.value.host === svc.value.host).map((n) => n.value);
  return isUp(svc.value, await reportingHosts(nodes));
}

/** 2.53+: `PUT /os-services/{service_id}` with `status`, `disabled_reason`, `forced_down` (services.py `_update_v253`). */
async function updateV253(req: ApiRequest) {
  const body = requireBodyObject(req.body);
  noAdditional('body', body, ['status', 'disabled_reason', 'forced_down']);
  if (body.status !== undefined && body.status !== 'enabled' && body.status !== 'disabled') {
    throw invalid('status', body.status, `${JSON.stringify(body.status)} is not one of ['enabled', 'disabled']`);
  }
  if (body.disabled_reason !== undefined) {
    const r = body.disabled_reason;
    if (typeof r !== 'string') throw invalid('disabled_reason', r, `${JSON.stringify(r)} is not of type 'string'`);
    if (r.length < 1) throw invalid('disabled_reason', r, `'' is too short`);
    if (r.length > 255) throw invalid('disabled_reason', r, `'${r}' is too long`);
  }
  const forcedDown = body.forced_down === undefined ? undefined : parseStrictBool(body.forced_down, 'forced_down');
  authorize(req.auth, COMPUTE_POLICIES.servicesUpdate);

  const id = req.params.service_id!;
  if (!isUuidLike(id)) throw new BadRequest(`Invalid uuid ${id}`);
  const found = await findServiceByUuid(id.toLowerCase());
  if (!found) throw new NotFound(`Service ${id} could not be found.`);
  const status = body.status as 'enabled' | 'disabled' | undefined;
  const reason = body.disabled_reason as string | undefined;
  if (status === 'enabled' && reason) throw new BadRequest("Specifying 'disabled_reason' with status 'enabled' is invalid.");
  if (found.value.binary !== COMPUTE_BINARY) {
    throw new BadRequest(`Updating a ${found.value.binary} service is not supported. Only nova-compute services can be updated.`);
  }
  const update: ServiceUpdate = {};
  if (status !== undefined) {
    update.status = status;
    update.disabledReason = reason ?? null;
  }
  if (forcedDown !== undefined) update.forcedDown = forcedDown;
  if (Object.keys(update).length === 0) throw new BadRequest("No updates were requested. Fields 'status' or 'forced_down' should be specified.");
  const saved = await updateService(found.cell, found.value.uuid, update);
  if (update.forcedDown === false) await afterComputeBack(saved.host);
  const view = serviceView(saved, await upOf({ cell: found.cell, value: saved }), req.version);
  return json(200, { service: view });
}

/** Before 2.53: `PUT /os-services/{enable|disable|disable-log-reason|force-down}` with host and binary. */
async function updateByAction(req: ApiRequest) {
  const action = req.params.service_id!;
  const known = ['enable', 'disable', 'disable-log-reason', ...(req.version.atLeast(SERVICE_FORCED_DOWN_MIN) ? ['force-down'] : [])];
  if (!known.includes(action)) throw new NotFound('Unknown action');
  const body = requireBodyObject(req.body);
  const host = requireString('body', body, 'host');
  const binary = requireString('body', body, 'binary');
  let update: ServiceUpdate;
  let out: Json;
  switch (action) {
    case 'enable':
      update = { status: 'enabled', disabledReason: null };
      out = { host, binary, status: 'enabled' };
      break;
    case 'disable':
      update = { status: 'disabled', disabledReason: null };
      out = { host, binary, status: 'disabled' };
      break;
    case 'disable-log-reason': {
      const reason = requireString('body', body, 'disabled_reason');
      update = { status: 'disabled', disabledReason: reason };
      out = { host, binary, status: 'disabled', disabled_reason: reason };
      break;
    }
    default: {
      if (body.forced_down === undefined) throw invalid('body', body, "'forced_down' is a required property");
      const forced = parseStrictBool(body.forced_down, 'forced_down');
      update = { forcedDown: forced };
      out = { host, binary, forced_down: forced };
    }
  }
  authorize(req.auth, COMPUTE_POLICIES.servicesUpdate);
  const found = await findServiceByHostBinary(host, binary);
  if (!found) throw new NotFound(`Could not find binary ${binary} on host ${host}.`);
  await updateService(found.cell, found.value.uuid, update);
  if (update.forcedDown === false) await afterComputeBack(host);
  return json(200, { service: out });
}

/**
 * A compute service no longer forced down plays a nova-compute restart: guests evacuated away
 * from the host while it was down are destroyed there (`_destroy_evacuated_instances`). Best
 * effort: the service update itself succeeded, and the audit lists what is left.
 */
async function afterComputeBack(host: string): Promise<void> {
  try {
    const { cleanupEvacuatedGuests } = await import('../servers/flows/evacuate.js');
    await cleanupEvacuatedGuests(host);
  } catch (e) {
    logger.warn('could not clean evacuated guests on a compute host back up', { host, error: e as Error });
  }
}

export const serviceRoutes: RouteSpec[] = [
  {
    method: 'GET',
    path: '/os-services',
    action: COMPUTE_POLICIES.servicesList,
    handler: async (req) => {
      const host = req.query.get('host');
      const binary = req.query.get('binary');
      const { services, reporting } = await servicesWithLiveness();
      const shown = services.filter((s) => (host === null || s.value.host === host) && (binary === null || s.value.binary === binary));
      return json(200, { services: shown.map((s) => serviceView(s.value, isUp(s.value, reporting), req.version)) });
    },
  },
  { method: 'PUT', path: '/os-services/{service_id}', action: COMPUTE_POLICIES.servicesUpdate, authorizeBy: 'resource', minVersion: UUID_FOR_ID_MIN, handler: updateV253 },
  { method: 'PUT', path: '/os-services/{service_id}', action: COMPUTE_POLICIES.servicesUpdate, authorizeBy: 'resource', maxVersion: '2.52', handler: updateByAction },
];

// ---------------------------------------------------------------------------------------------
// os-hypervisors

interface HypervisorRow {
  cellNode: InCell<ComputeNode>;
  service: ComputeService;
  up: boolean;
}

/** Every compute node with its nova-compute service and liveness. */
async function hypervisorRows(): Promise<HypervisorRow[]> {
  const [nodes, services] = await Promise.all([listComputeNodes(), listServices()]);
  const reporting = await reportingHosts(nodes.map((n) => n.value));
  const rows: HypervisorRow[] = [];
  for (const n of nodes) {
    const svc = services.find((s) => s.cell.uuid === n.cell.uuid && s.value.uuid === n.value.serviceUuid);
    // A node whose service is gone is not listed (Nova: ComputeHostNotFound, skipped).
    if (svc) rows.push({ cellNode: n, service: svc.value, up: isUp(svc.value, reporting) });
  }
  return rows;
}

function hostUptime(up: boolean): string | null {
  // All local driver hosts run on this machine: its uptime is theirs. A down host reports nothing.
  return up ? formatUptime(new Date(), osUptime(), loadavg()) : null;
}

async function viewRow(row: HypervisorRow, detail: boolean, v: ApiVersion, withServers: boolean) {
  const usage = detail && !v.atLeast(HYPERVISOR_REDUCED_MIN) ? await nodeUsage(row.cellNode.value.uuid) : { vcpusUsed: 0, memoryMbUsed: 0, localGbUsed: 0, consumers: 0 };
  return hypervisorView(
    { node: row.cellNode.value, service: row.service, up: row.up, usage, uptime: detail && v.atLeast(HYPERVISOR_REDUCED_MIN) ? hostUptime(row.up) : null },
    detail,
    v,
    withServers,
  );
}

const noMatch = (pattern: string) => new NotFound(`No hypervisor matching '${pattern}' could be found.`);
const hypervisorNotFound = (id: string) => new NotFound(`Hypervisor with ID '${id}' could not be found.`);

/** Nova matches `hypervisor_hostname LIKE %pattern%` (case-insensitive on MySQL). */
const hostnameMatches = (pattern: string) => (row: HypervisorRow) => row.cellNode.value.hypervisorHostname.toLowerCase().includes(pattern.toLowerCase());

async function hypervisorList(req: ApiRequest, detail: boolean) {
  const v = req.version;
  const q = req.query;
  const uuids = v.atLeast(UUID_FOR_ID_MIN);
  const pattern = uuids ? q.get('hypervisor_hostname_pattern') : null;
  const withServers = uuids && q.get('with_servers') !== null ? parseStrictBool(q.get('with_servers'), 'with_servers') : false;
  const paging = v.atLeast(HYPERVISOR_PAGING_MIN);
  const limit = paging ? positiveInt('limit', q.get('limit')) : undefined;
  const marker = paging ? q.get('marker') : null;
  if (pattern !== null && (limit !== undefined || marker !== null)) {
    throw new BadRequest('Paging over hypervisors with the hypervisor_hostname_pattern query parameter is not supported.');
  }
  let rows = await hypervisorRows();
  if (pattern !== null) {
    rows = rows.filter(hostnameMatches(pattern));
    if (rows.length === 0) throw noMatch(pattern);
  }
  if (marker !== null) {
    const i = rows.findIndex((r) => (uuids ? r.cellNode.value.uuid === marker : String(r.cellNode.value.id) === marker));
    if (i < 0) throw new BadRequest(`marker [${marker}] not found`);
    rows = rows.slice(i + 1);
  }
  if (limit !== undefined) rows = rows.slice(0, limit);
  const body: Json = { hypervisors: await Promise.all(rows.map((r) => viewRow(r, detail, v, withServers))) };
  if (limit !== undefined && rows.length === limit && rows.length > 0) {
    const last = rows[rows.length - 1]!.cellNode.value;
    const next = new URLSearchParams(q);
    next.set('marker', uuids ? last.uuid : String(last.id));
    body.hypervisors_links = [{ rel: 'next', href: `${req.baseUrl}${req.urlProjectId ? '/' + req.urlProjectId : ''}/os-hypervisors${detail ? '/detail' : ''}?${next}` }];
  }
  return json(200, body);
}

/** `_validate_id` then the lookup in every cell: a uuid from 2.53, an integer id before; 404 otherwise. */
async function hypervisorRowById(req: ApiRequest): Promise<HypervisorRow> {
  const id = req.params.hypervisor_id!;
  const uuids = req.version.atLeast(UUID_FOR_ID_MIN);
  if (uuids ? !isUuidLike(id) : !/^\d+$/.test(id)) throw hypervisorNotFound(id);
  const rows = await hypervisorRows();
  const row = uuids ? rows.find((r) => r.cellNode.value.uuid === id.toLowerCase()) : rows.find((r) => r.cellNode.value.id === Number(id));
  if (!row) throw hypervisorNotFound(id);
  return row;
}

async function hypervisorSearch(req: ApiRequest, servers: boolean) {
  const pattern = req.params.hypervisor_hostname_pattern!;
  const rows = (await hypervisorRows()).filter(hostnameMatches(pattern));
  if (rows.length === 0) throw noMatch(pattern);
  // No servers exist yet: the `servers` key appears only for a hypervisor that has some.
  return json(200, { hypervisors: await Promise.all(rows.map((r) => viewRow(r, false, req.version, servers))) });
}

export const hypervisorRoutes: RouteSpec[] = [
  { method: 'GET', path: '/os-hypervisors', action: COMPUTE_POLICIES.hypervisorsList, handler: (req) => hypervisorList(req, false) },
  { method: 'GET', path: '/os-hypervisors/detail', action: COMPUTE_POLICIES.hypervisorsListDetail, handler: (req) => hypervisorList(req, true) },
  {
    method: 'GET',
    path: '/os-hypervisors/statistics',
    action: COMPUTE_POLICIES.hypervisorsStatistics,
    maxVersion: '2.87',
    handler: async () => {
      const rows = await hypervisorRows();
      return json(200, { hypervisor_statistics: hypervisorStatistics(await Promise.all(rows.map(async (r) => ({ node: r.cellNode.value, usage: await nodeUsage(r.cellNode.value.uuid) })))) });
    },
  },
  {
    method: 'GET',
    path: '/os-hypervisors/{hypervisor_id}',
    action: COMPUTE_POLICIES.hypervisorsShow,
    handler: async (req) => {
      const withServers = req.version.atLeast(UUID_FOR_ID_MIN) && req.query.get('with_servers') !== null ? parseStrictBool(req.query.get('with_servers'), 'with_servers') : false;
      return json(200, { hypervisor: await viewRow(await hypervisorRowById(req), true, req.version, withServers) });
    },
  },
  {
    method: 'GET',
    path: '/os-hypervisors/{hypervisor_id}/uptime',
    action: COMPUTE_POLICIES.hypervisorsUptime,
    maxVersion: '2.87',
    handler: async (req) => {
      const row = await hypervisorRowById(req);
      if (!row.up) throw new BadRequest(`Compute service of ${row.cellNode.value.host} is unavailable at this time.`);
      return json(200, { hypervisor: { ...(await viewRow(row, false, req.version, false)), uptime: hostUptime(true) } });
    },
  },
  { method: 'GET', path: '/os-hypervisors/{hypervisor_hostname_pattern}/search', action: COMPUTE_POLICIES.hypervisorsSearch, maxVersion: '2.52', handler: (req) => hypervisorSearch(req, false) },
  { method: 'GET', path: '/os-hypervisors/{hypervisor_hostname_pattern}/servers', action: COMPUTE_POLICIES.hypervisorsServers, maxVersion: '2.52', handler: (req) => hypervisorSearch(req, true) },
];

// ---------------------------------------------------------------------------------------------
// os-availability-zone (availability_zone.py): zones of the enabled and disabled services

export const availabilityZoneRoutes: RouteSpec[] = [
  {
    method: 'GET',
    path: '/os-availability-zone',
    action: COMPUTE_POLICIES.azList,
    handler: async () => {
      const { services } = await servicesWithLiveness();
      const zones = new Map<string, boolean>();
      for (const s of services) {
        const zone = availabilityZoneOf(s.value);
        if (zone === 'internal') continue;
        zones.set(zone, (zones.get(zone) ?? false) || !s.value.disabled);
      }
      return json(200, { availabilityZoneInfo: [...zones].map(([zoneName, available]) => ({ zoneName, zoneState: { available }, hosts: null })) });
    },
  },
  {
    method: 'GET',
    path: '/os-availability-zone/detail',
    action: COMPUTE_POLICIES.azDetail,
    handler: async () => {
      const { services, reporting } = await servicesWithLiveness();
      const zones = new Map<string, { available: boolean; hosts: Record<string, Record<string, Json>> }>();
      for (const s of services) {
        const zone = availabilityZoneOf(s.value);
        const z = zones.get(zone) ?? { available: false, hosts: {} };
        z.available ||= !s.value.disabled;
        (z.hosts[s.value.host] ??= {})[s.value.binary] = { available: isUp(s.value, reporting), active: !s.value.disabled, updated_at: novaTime(s.value.updatedAt) };
        zones.set(zone, z);
      }
      return json(200, { availabilityZoneInfo: [...zones].map(([zoneName, z]) => ({ zoneName, zoneState: { available: z.available }, hosts: z.hosts })) });
    },
  },
];

/** Every route of the Nova API so far, in one list (functions/api/compute.ts). */
export const COMPUTE_ROUTES: RouteSpec[] = [...flavorRoutes, ...serviceRoutes, ...hypervisorRoutes, ...availabilityZoneRoutes, ...SERVER_ROUTES];
