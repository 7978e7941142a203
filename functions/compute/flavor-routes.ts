/**
 * Flavors and their extra specs (nova/api/openstack/compute/flavors.py, flavors_extraspecs.py):
 * list and detail with upstream's filters, sort and paging, show, extra specs.
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { allowed } from '../core/policy.js';
import type { Flavor } from './model.js';
import { COMPUTE_POLICIES } from './policies.js';
import { getFlavor, listFlavors } from './repo.js';
import { flavorBasic, flavorDetail, type LinkContext } from './views.js';
import { invalid, positiveInt, type Json } from './validation.js';

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
