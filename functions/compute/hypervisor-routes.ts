/**
 * os-hypervisors (list, detail, show, statistics, uptime, search/servers before 2.53): every compute
 * node with its nova-compute service and liveness, by integer id before 2.53 and uuid after.
 */
import { loadavg, uptime as osUptime } from 'node:os';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import type { ApiVersion } from '../core/microversion.js';
import { isUp, reportingHosts } from './liveness.js';
import { isUuidLike, parseStrictBool, type ComputeNode, type ComputeService } from './model.js';
import { nodeUsage } from './placement.js';
import { COMPUTE_POLICIES } from './policies.js';
import { listComputeNodes, listServices, type InCell } from './repo.js';
import { formatUptime, HYPERVISOR_PAGING_MIN, HYPERVISOR_REDUCED_MIN, hypervisorStatistics, hypervisorView, UUID_FOR_ID_MIN } from './views.js';
import { positiveInt, type Json } from './validation.js';

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
