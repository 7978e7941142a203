/**
 * Nova's volume proxy `/os-volumes` (nova/api/openstack/compute/volumes.py, 2.1–2.35; from 2.36
 * 404 as upstream): list, detail, show, create and delete, each the Cinder operation the proxy
 * calls with the caller's own context, run in-process (the volume API's create, scoped get, list
 * and delete: the same validation, policies, quotas and conditional writes), shown in Nova's
 * camelCase view.
 */
import { json, type ApiRequest, type ApiResponse, type RouteSpec } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { ApiVersion } from '../core/microversion.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { invalid, isObject, noAdditional, type Json } from '../compute/validation.js';
import { createVolumeRoute } from '../volumes/create.js';
import { deleteVolume } from '../volumes/delete.js';
import { upstreamTime, type Volume } from '../volumes/model.js';
import { VOLUME_POLICIES } from '../volumes/policies.js';
import { getVolume, getVolumeScoped, listVolumes } from '../volumes/repo.js';

export const OS_VOLUMES_POLICIES = {
  list: 'os_compute_api:os-volumes:list',
  detail: 'os_compute_api:os-volumes:detail',
  show: 'os_compute_api:os-volumes:show',
  create: 'os_compute_api:os-volumes:create',
  delete: 'os_compute_api:os-volumes:delete',
} as const;

registerPolicies({
  [OS_VOLUMES_POLICIES.list]: 'admin_or_owner',
  [OS_VOLUMES_POLICIES.detail]: 'admin_or_owner',
  [OS_VOLUMES_POLICIES.show]: 'admin_or_owner',
  [OS_VOLUMES_POLICIES.create]: 'admin_or_owner',
  [OS_VOLUMES_POLICIES.delete]: 'admin_or_owner',
});

/** MAX_PROXY_API_SUPPORT_VERSION: the proxy APIs end at 2.35. */
const PROXY_MAX = '2.36';

function proxyVersion(req: ApiRequest): void {
  if (req.version.atLeast(PROXY_MAX)) throw new NotFound('The resource could not be found.');
}

/** The Cinder request the proxy makes: the caller's context at Cinder's base version. */
const cinderRequest = (req: ApiRequest, extra: Partial<ApiRequest>): ApiRequest => ({ ...req, version: new ApiVersion(3, 0), ...extra });

/** _translate_volume_summary_view (the detail view is the same). */
export function novaVolumeView(v: Volume): Json {
  const attached = Object.values(v.attachments ?? {}).filter((a) => a.status === 'attached');
  const first = attached[0];
  return {
    id: v.id,
    status: v.status,
    size: v.size,
    availabilityZone: v.availabilityZone,
    createdAt: upstreamTime(v.createdAt),
    attachments: v.attachStatus === 'attached' && first ? [{ id: v.id, volumeId: v.id, serverId: first.instanceUuid, ...(first.mountpoint ? { device: first.mountpoint } : {}) }] : [{}],
    displayName: v.name,
    displayDescription: v.description,
    volumeType: v.volumeTypeName ?? null,
    snapshotId: null,
    metadata: v.metadata ?? {},
  };
}

/** common.limited: offset and limit (non-negative integers) over the list. */
function limited<T>(req: ApiRequest, items: T[]): T[] {
  const num = (name: string): number | undefined => {
    const raw = req.query.get(name);
    if (raw === null) return undefined;
    if (!/^[0-9]+$/.test(raw)) throw new BadRequest(`Invalid input for query parameters ${name}. Value: ${raw}. '${raw}' does not match '^[0-9]*$'`);
    return Number(raw);
  };
  const offset = num('offset') ?? 0;
  const limit = Math.min(num('limit') ?? 1000, 1000);
  return items.slice(offset, offset + limit);
}

async function listRoute(req: ApiRequest, policy: string): Promise<ApiResponse> {
  proxyVersion(req);
  authorize(req.auth, policy, { projectId: req.auth.projectId });
  authorize(req.auth, VOLUME_POLICIES.getAll);
  // Cinder's list in the caller's project (Nova asks without all_tenants).
  const volumes = (await listVolumes(req.auth.projectId)).sort((a, b) => b.createdAt.localeCompare(a.createdAt) || b.id.localeCompare(a.id));
  return json(200, { volumes: limited(req, volumes).map(novaVolumeView) });
}

async function showRoute(req: ApiRequest): Promise<ApiResponse> {
  proxyVersion(req);
  authorize(req.auth, OS_VOLUMES_POLICIES.show, { projectId: req.auth.projectId });
  const v = await getVolumeScoped(req.auth, req.params.volume_id!);
  authorize(req.auth, VOLUME_POLICIES.get, { projectId: v.projectId });
  return json(200, { volume: novaVolumeView(v) });
}

/** Nova's `create` schema: size required (an integer or a string of digits, at least 1), strings, metadata an object, nothing else. */
function parseProxyCreate(body: unknown): Json {
  if (!isObject(body)) throw new BadRequest(`${JSON.stringify(body)} is not of type 'object'`);
  if (body.volume !== undefined && !isObject(body.volume)) throw invalid('volume', body.volume, `${JSON.stringify(body.volume)} is not of type 'object'`);
  if (isObject(body.volume)) {
    const vol = body.volume;
    for (const key of ['volume_type', 'snapshot_id', 'availability_zone', 'display_name', 'display_description']) {
      if (vol[key] !== undefined && typeof vol[key] !== 'string') throw invalid(key, vol[key], `${JSON.stringify(vol[key])} is not of type 'string'`);
    }
    if (vol.metadata !== undefined && !isObject(vol.metadata)) throw invalid('metadata', vol.metadata, `${JSON.stringify(vol.metadata)} is not of type 'object'`);
    const size = vol.size;
    if (size !== undefined) {
      if (!(typeof size === 'number' && Number.isInteger(size)) && typeof size !== 'string') throw invalid('size', size, `${JSON.stringify(size)} is not of type 'integer', 'string'`);
      if (typeof size === 'string' && !/^[0-9]+$/.test(size)) throw invalid('size', size, `'${size}' does not match '^[0-9]+$'`);
      if (Number(size) < 1) throw invalid('size', size, `${String(size)} is less than the minimum of 1`);
    }
    if (size === undefined) throw invalid('volume', vol, "'size' is a required property");
    noAdditional('volume', vol, ['volume_type', 'metadata', 'snapshot_id', 'size', 'availability_zone', 'display_name', 'display_description']);
  }
  if (body.volume === undefined) throw new BadRequest("'volume' is a required property");
  noAdditional('volume', body, ['volume']);
  return body.volume as Json;
}

async function createRoute(req: ApiRequest): Promise<ApiResponse> {
  proxyVersion(req);
  const vol = parseProxyCreate(req.body);
  authorize(req.auth, OS_VOLUMES_POLICIES.create, { projectId: req.auth.projectId });
  authorize(req.auth, VOLUME_POLICIES.create);
  // cinder.API.create: the body cinderclient sends for these arguments.
  const cinderBody = {
    volume: {
      size: Number(vol.size),
      ...(vol.display_name !== undefined ? { name: vol.display_name } : {}),
      ...(vol.display_description !== undefined ? { description: vol.display_description } : {}),
      ...(vol.volume_type !== undefined ? { volume_type: vol.volume_type } : {}),
      ...(vol.availability_zone !== undefined ? { availability_zone: vol.availability_zone } : {}),
      ...(vol.metadata !== undefined ? { metadata: vol.metadata } : {}),
      ...(vol.snapshot_id !== undefined ? { snapshot_id: vol.snapshot_id } : {}),
    },
  };
  const res = await createVolumeRoute(cinderRequest(req, { body: cinderBody }));
  const id = (res.body as { volume: { id: string } }).volume.id;
  const v = await getVolume(id);
  if (!v) throw new NotFound(`Volume ${id} could not be found.`);
  // volumes.py answers create with 200 (no @wsgi.response) and a Location header.
  return json(200, { volume: novaVolumeView(v) }, { Location: `${req.baseUrl}/os-volumes/${id}` });
}

async function deleteRoute(req: ApiRequest): Promise<ApiResponse> {
  proxyVersion(req);
  authorize(req.auth, OS_VOLUMES_POLICIES.delete, { projectId: req.auth.projectId });
  const found = await getVolumeScoped(req.auth, req.params.volume_id!);
  authorize(req.auth, VOLUME_POLICIES.delete, { projectId: found.projectId });
  await deleteVolume(found, false);
  return json(202);
}

export const OS_VOLUMES_ROUTES: RouteSpec[] = [
  { method: 'GET', path: '/os-volumes', action: OS_VOLUMES_POLICIES.list, authorizeBy: 'resource', handler: (req) => listRoute(req, OS_VOLUMES_POLICIES.list) },
  { method: 'GET', path: '/os-volumes/detail', action: OS_VOLUMES_POLICIES.detail, authorizeBy: 'resource', handler: (req) => listRoute(req, OS_VOLUMES_POLICIES.detail) },
  { method: 'POST', path: '/os-volumes', action: OS_VOLUMES_POLICIES.create, authorizeBy: 'resource', handler: createRoute },
  { method: 'GET', path: '/os-volumes/{volume_id}', action: OS_VOLUMES_POLICIES.show, authorizeBy: 'resource', handler: showRoute },
  { method: 'DELETE', path: '/os-volumes/{volume_id}', action: OS_VOLUMES_POLICIES.delete, authorizeBy: 'resource', handler: deleteRoute },
];
