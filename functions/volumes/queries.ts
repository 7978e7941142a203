/**
 * GET /volumes, /volumes/detail and /volumes/{id} (C/api/v3/volumes.py index, detail, show): the
 * filters a user and an admin may use, sorting, paging, and the views.
 */
import { own } from '../core/lookup.js';
import { json, type ApiRequest } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { authorize } from '../core/policy.js';
import { type Volume } from './model.js';
import { getVolumeScoped, listVolumes } from './repo.js';
import { isObject } from './validation.js';
import { viewContext, volumeDetail, volumeSummary } from './views.js';
import { VOLUME_POLICIES } from './policies.js';

/** osapi_max_limit */
export const MAX_LIMIT = 1000;

const PAGING_KEYS = new Set(['limit', 'marker', 'offset', 'sort', 'sort_key', 'sort_dir', 'all_tenants', 'with_count']);
/** C/etc/resource_filters.json "volume": what a non-admin may filter on. */
const USER_FILTERS = new Set(['name', 'status', 'metadata', 'bootable', 'migration_status', 'availability_zone', 'group_id', 'size', 'created_at', 'updated_at']);
const SORT_KEYS: Record<string, (v: Volume) => string | number> = {
  id: (v) => v.id,
  name: (v) => v.name ?? '',
  display_name: (v) => v.name ?? '',
  status: (v) => v.status,
  size: (v) => v.size,
  availability_zone: (v) => v.availabilityZone,
  created_at: (v) => v.createdAt,
  updated_at: (v) => v.updatedAt,
  bootable: (v) => String(v.bootable),
  volume_type_id: (v) => v.volumeTypeId,
  project_id: (v) => v.projectId,
};

/** The metadata filter as cinderclient sends it: a Python dict literal (`{'k': 'v'}`) or JSON. */
function parseMetadataFilter(raw: string): Record<string, string> {
  try {
    const parsed = JSON.parse(raw.replace(/'/g, '"')) as unknown;
    if (isObject(parsed)) return Object.fromEntries(Object.entries(parsed).map(([k, v]) => [k, String(v)]));
  } catch {
    /* falls through */
  }
  throw new BadRequest(`Invalid input received: Invalid metadata filter ${raw}.`);
}

export function parseLimit(q: URLSearchParams): number {
  const raw = q.get('limit');
  if (raw === null) return MAX_LIMIT;
  if (!/^-?\d+$/.test(raw)) throw new BadRequest('limit param must be an integer');
  const n = Number(raw);
  if (n < 0) throw new BadRequest('limit param must be positive');
  return Math.min(n, MAX_LIMIT);
}

export function parseOffset(q: URLSearchParams): number {
  const raw = q.get('offset');
  if (raw === null) return 0;
  if (!/^-?\d+$/.test(raw)) throw new BadRequest('offset param must be an integer');
  const n = Number(raw);
  if (n < 0) throw new BadRequest('offset param must be positive');
  return n;
}

/** `sort=k1:dir,k2` or `sort_key`/`sort_dir` (C/api/common.py get_sort_params), checked against `sortKeys`; id breaks ties. */
export function parseSort(q: URLSearchParams, sortKeys: Record<string, unknown> = SORT_KEYS): { key: string; dir: 'asc' | 'desc' }[] {
  const pairs: { key: string; dir: string }[] = [];
  const sort = q.get('sort');
  if (sort) {
    for (const part of sort.split(',')) {
      const [key, dir] = part.trim().split(':');
      pairs.push({ key: key!.trim(), dir: (dir ?? 'desc').trim().toLowerCase() });
    }
  } else if (q.get('sort_key')) {
    const keys = q.get('sort_key')!.split(',');
    const dirs = (q.get('sort_dir') ?? '').split(',');
    keys.forEach((k, i) => pairs.push({ key: k.trim(), dir: (dirs[i] || dirs[0] || 'desc').trim().toLowerCase() }));
  } else {
    pairs.push({ key: 'created_at', dir: 'desc' });
  }
  for (const p of pairs) {
    if (p.dir !== 'asc' && p.dir !== 'desc') throw new BadRequest("Unknown sort direction, must be 'desc' or 'asc'");
    if (!own(sortKeys, p.key)) throw new BadRequest(`Invalid input received: Invalid sort key ${p.key}.`);
  }
  if (!pairs.some((p) => p.key === 'id')) pairs.push({ key: 'id', dir: pairs[pairs.length - 1]!.dir });
  return pairs as { key: string; dir: 'asc' | 'desc' }[];
}

function truthy(raw: string | null): boolean {
  return raw !== null && ['1', 't', 'true', 'on', 'y', 'yes'].includes(raw.toLowerCase());
}

function matchesFilters(v: Volume, filters: Map<string, string>): boolean {
  for (const [k, raw] of filters) {
    switch (k) {
      case 'name':
      case 'display_name':
        if ((v.name ?? '') !== raw) return false;
        break;
      case 'status':
        if (v.status !== raw) return false;
        break;
      case 'metadata':
        for (const [mk, mv] of Object.entries(parseMetadataFilter(raw))) if (v.metadata?.[mk] !== mv) return false;
        break;
      case 'bootable':
        if (v.bootable !== truthy(raw)) return false;
        break;
      case 'migration_status':
        if ((v.migrationStatus ?? '') !== raw) return false;
        break;
      case 'availability_zone':
        if (v.availabilityZone !== raw) return false;
        break;
      case 'size':
        if (String(v.size) !== raw) return false;
        break;
      case 'project_id':
        if (v.projectId !== raw) return false;
        break;
      case 'host':
        if (v.host !== raw) return false;
        break;
      case 'group_id':
        if (raw) return false; // Ferry has no groups
        break;
      default:
        // created_at / updated_at comparisons (3.60) and admin-only columns are accepted and not applied.
        break;
    }
  }
  return true;
}

export async function listRoute(req: ApiRequest, detail: boolean) {
  const q = req.query;
  const allTenants = req.auth.isAdmin && truthy(q.get('all_tenants'));
  const filters = new Map<string, string>();
  for (const [k, v] of q) if (!PAGING_KEYS.has(k)) filters.set(k, v);
  if (!req.auth.isAdmin) {
    // Upstream (common.reject_invalid_filters) checks non-admin filters against resource_filters.json.
    const invalid = [...filters.keys()].filter((k) => !USER_FILTERS.has(k));
    if (invalid.length) throw new BadRequest(`Invalid filters ${invalid.join(', ')} are provided.`);
  }
  if (!allTenants) filters.delete('project_id');
  const limit = parseLimit(q);
  const offset = parseOffset(q);
  const sort = parseSort(q);
  const marker = q.get('marker');

  let volumes = (await listVolumes(allTenants ? undefined : req.auth.projectId)).filter((v) => matchesFilters(v, filters));
  volumes.sort((a, b) => {
    for (const { key, dir } of sort) {
      const x = own(SORT_KEYS, key)!(a);
      const y = own(SORT_KEYS, key)!(b);
      if (x < y) return dir === 'asc' ? -1 : 1;
      if (x > y) return dir === 'asc' ? 1 : -1;
    }
    return 0;
  });
  const count = volumes.length;
  if (marker) {
    const i = volumes.findIndex((v) => v.id === marker);
    if (i < 0) throw new NotFound(`Marker ${marker} could not be found.`);
    volumes = volumes.slice(i + 1);
  }
  volumes = volumes.slice(offset, offset + limit);

  const ctx = viewContext(req);
  const body: Record<string, unknown> = { volumes: volumes.map((v) => (detail ? volumeDetail(ctx, v, true) : volumeSummary(ctx, v))) };
  if (volumes.length > 0 && volumes.length === limit) {
    const params = new URLSearchParams(q);
    params.set('limit', String(limit));
    params.set('marker', volumes[volumes.length - 1]!.id);
    params.delete('offset');
    // common.py _get_next_link: the project id is in the link only when the request's URL has it
    // (Tempest compares the link's path with the URL it asked).
    const project = req.urlProjectId ? `/${req.urlProjectId}` : '';
    body.volumes_links = [{ href: `${req.baseUrl}${project}/volumes${detail ? '/detail' : ''}?${params.toString()}`, rel: 'next' }];
  }
  if (req.version.atLeast('3.45') && truthy(q.get('with_count'))) body.count = count;
  return json(200, body);
}

export async function showVolume(req: ApiRequest) {
  const v = await getVolumeScoped(req.auth, req.params.volume_id!);
  authorize(req.auth, VOLUME_POLICIES.get, { projectId: v.projectId });
  return json(200, { volume: volumeDetail(viewContext(req), v, true) });
}

/**
 * GET /volumes/summary (3.12; distinct metadata from 3.36): count and total size of the caller's
 * volumes (every project's for an admin with all_tenants), as C/api/v3/volumes.py summary.
 */
export async function summaryRoute(req: ApiRequest) {
  const allTenants = req.auth.isAdmin && truthy(req.query.get('all_tenants'));
  const volumes = await listVolumes(allTenants ? undefined : req.auth.projectId);
  const summary: Record<string, unknown> = { total_count: volumes.length, total_size: volumes.reduce((n, v) => n + v.size, 0) };
  if (req.version.atLeast('3.36')) {
    const metadata: Record<string, string[]> = {};
    for (const v of volumes) for (const [k, x] of Object.entries(v.metadata ?? {})) if (!(metadata[k] ??= []).includes(x)) metadata[k]!.push(x);
    summary.metadata = metadata;
  }
  return json(200, { 'volume-summary': summary });
}
