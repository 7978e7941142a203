/**
 * Manage existing backend objects (C/api/v3/volume_manage.py, C/api/contrib/volume_manage.py):
 * list what a backend holds, and bring one object under Ferry keeping its legacy name as the
 * volume's backendName for the volume's whole life (seed 003's stable backend names: Ferry never
 * renames the object, where upstream's LVM driver renames it to volume-<id>).
 *
 * An object is managed once: the volume item and the object's claim item (repo.ts claimKey) are
 * written in one transaction, so a second manage of the same object writes nothing and gets 400.
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest } from '../core/errors.js';
import { authorize, registerPolicies } from '../core/policy.js';
import type { BackendConfig } from '../drivers/volume/driver.js';
import { adoptingDriverFor } from '../drivers/volume/registry.js';
import { backendOf, driverForHost, getBackend, poolOf } from './backends.js';
import type { Volume } from './model.js';
import { listClaims, insertVolume, removeVolumeRecord } from './repo.js';
import { startVolumeExecution } from './create.js';
import { MAX_LIMIT } from './queries.js';
import { availabilityZoneOf } from './scheduler.js';
import { DEFAULT_VOLUME_TYPE, getVolumeTypeByName, getVolumeTypeByNameOrId, isMultiattachType } from './types.js';
import { boolParam, invalidField, isObject, metadataField, optionalString, pyRepr, wrapped } from './validation.js';
import { viewContext, volumeDetail } from './views.js';

export const MANAGE_POLICIES = { manage: 'volume_extension:volume_manage', list: 'volume_extension:list_manageable' } as const;

registerPolicies({ [MANAGE_POLICIES.manage]: 'admin_api', [MANAGE_POLICIES.list]: 'admin_api' });

export const MANAGE_MIN_VERSION = '3.8';

export interface ManageableVolume {
  reference: { 'source-name': string };
  size: number;
  safe_to_manage: boolean;
  reason_not_safe: string | null;
  cinder_id: string | null;
  extra_info: null;
}

/** Every object on a backend, as upstream's get_manageable_volumes reports them: known ones are not safe to manage. */
export async function manageableVolumes(backend: BackendConfig): Promise<ManageableVolume[]> {
  // The active site: after a failover the backend's objects live on the replication target.
  const driver = await driverForHost(backend.host);
  const adopting = adoptingDriverFor(driver);
  const [objects, connections, claims, adoptable] = await Promise.all([driver.listVolumes(), driver.listConnections(), listClaims(backend.host), adopting?.listAdoptable() ?? []]);
  const connected = new Set(connections.map((c) => c.backendName));
  const entry = (name: string, size: number, owner: string | null, reason: string | null): ManageableVolume => ({
    reference: { 'source-name': name },
    size,
    safe_to_manage: reason === null,
    reason_not_safe: reason,
    cinder_id: owner,
    extra_info: null,
  });
  const known = objects.map((o) => {
    const owner = claims.get(o.backendName) ?? null;
    return entry(o.backendName, o.sizeGb, owner, owner ? 'already managed' : connected.has(o.backendName) ? 'volume in use' : null);
  });
  // What the backend could take over (EBS volumes of its zone no Ferry backend has tagged), by id.
  return [...known, ...adoptable.map((o) => entry(o.backendName, o.sizeGb, null, o.inUse ? 'volume in use' : null))];
}

/** `host` (or `cluster`, which Ferry treats as a host) — upstream's common.get_cluster_host. */
function hostParam(host: unknown, cluster: unknown): string {
  const given = [host, cluster].filter((x) => x !== undefined && x !== null && x !== '');
  if (given.length !== 1) throw new BadRequest('One and only one of cluster and host must be set.');
  if (typeof given[0] !== 'string') throw invalidField('host', given[0], `${pyRepr(given[0])} is not of type 'string'`);
  return given[0];
}

async function listRoute(req: ApiRequest, detail: boolean) {
  const host = hostParam(req.query.get('host') ?? undefined, req.query.get('cluster') ?? undefined);
  const backend = await getBackend(host);
  let entries = await manageableVolumes(backend);
  const sortKey = req.query.get('sort_keys') ?? req.query.get('sort_key') ?? 'reference';
  const sortDir = (req.query.get('sort_dirs') ?? req.query.get('sort_dir') ?? 'asc').toLowerCase();
  if (!['reference', 'size'].includes(sortKey)) throw new BadRequest(`Invalid input received: Invalid sort key ${sortKey}: only size and reference are supported.`);
  if (!['asc', 'desc'].includes(sortDir)) throw new BadRequest("Unknown sort direction, must be 'desc' or 'asc'");
  const sign = sortDir === 'asc' ? 1 : -1;
  entries.sort((a, b) => sign * (sortKey === 'size' ? a.size - b.size || a.reference['source-name'].localeCompare(b.reference['source-name']) : a.reference['source-name'].localeCompare(b.reference['source-name'])));
  const marker = req.query.get('marker');
  if (marker) {
    const i = entries.findIndex((e) => e.reference['source-name'] === marker);
    if (i < 0) throw new BadRequest(`Invalid input received: marker not found: ${marker}`);
    entries = entries.slice(i + 1);
  }
  const offset = Number(req.query.get('offset') ?? 0);
  const limit = Math.min(Number(req.query.get('limit') ?? MAX_LIMIT), MAX_LIMIT);
  if (!Number.isInteger(offset) || offset < 0) throw new BadRequest('offset param must be positive');
  if (!Number.isInteger(limit) || limit < 0) throw new BadRequest('limit param must be positive');
  entries = entries.slice(offset, offset + limit);
  const view = detail ? entries : entries.map((e) => ({ reference: e.reference, size: e.size, safe_to_manage: e.safe_to_manage }));
  return json(200, { 'manageable-volumes': view });
}

/** The pool a manage request lands on: the one named, or the backend's only pool. */
function poolHostFor(backend: BackendConfig, host: string): string {
  const pool = poolOf(host);
  if (pool) {
    if (!backend.pools.some((p) => p.name === pool)) throw new BadRequest(`Invalid input received: Backend ${backend.host} has no pool ${pool}.`);
    return `${backend.host}#${pool}`;
  }
  if (backend.pools.length !== 1) throw new BadRequest(`Invalid input received: Backend ${backend.host} has several pools; give the host as ${backend.host}#<pool>.`);
  return `${backend.host}#${backend.pools[0]!.name}`;
}

async function manageRoute(req: ApiRequest) {
  authorize(req.auth, MANAGE_POLICIES.manage);
  const body = wrapped(req.body, 'volume');
  if (!('ref' in body)) throw new BadRequest("'ref' is a required property");
  const ref = body.ref;
  if (!isObject(ref)) throw invalidField('ref', ref, `${pyRepr(ref)} is not of type 'object'`);
  const host = hostParam(body.host, body.cluster);
  const name = optionalString(body, 'name') ?? null;
  const description = optionalString(body, 'description') ?? null;
  const typeName = optionalString(body, 'volume_type') ?? null;
  const zoneGiven = optionalString(body, 'availability_zone') ?? null;
  const metadata = metadataField(body, 'metadata', { nullable: true }) ?? {};
  const bootable = 'bootable' in body && body.bootable !== null ? boolParam('bootable', body.bootable) : false;

  const type = typeName ? await getVolumeTypeByNameOrId(typeName) : await getVolumeTypeByName(DEFAULT_VOLUME_TYPE);
  const backend = await getBackend(backendOf(host));
  const poolHost = poolHostFor(backend, host);
  const sourceName = ref['source-name'];
  if (typeof sourceName !== 'string' || sourceName === '') {
    throw new BadRequest(`Manage existing volume failed due to invalid backend reference ${pyRepr(ref)}: Reference must contain source-name element.`);
  }
  const found = await (await driverForHost(backend.host)).getVolume(sourceName);
  if (!found) throw new BadRequest(`Manage existing volume failed due to invalid backend reference ${pyRepr(ref)}: Specified volume does not exist on ${backend.host}.`);
  const zone = zoneGiven ?? availabilityZoneOf(backend);
  if (zone !== availabilityZoneOf(backend)) throw new BadRequest(`Availability zone '${zone}' is invalid.`);

  const id = randomUUID();
  const at = new Date().toISOString();
  const v: Volume = {
    id,
    projectId: req.auth.projectId,
    userId: req.auth.userId,
    name,
    description,
    size: found.sizeGb,
    status: 'managing',
    attachStatus: 'detached',
    previousStatus: null,
    migrationStatus: null,
    replicationStatus: null,
    volumeTypeId: type.id,
    volumeTypeName: type.name,
    multiattach: isMultiattachType(type),
    bootable,
    host: poolHost,
    backendName: sourceName,
    providerLocation: null,
    serviceUuid: backend.serviceUuid,
    sharedTargets: null,
    availabilityZone: zone,
    metadata,
    adminMetadata: {},
    attachments: {},
    instances: {},
    connections: {},
    pendingServerId: null,
    capacity: null,
    managed: true,
    ownsBackendObject: false,
    errorReason: null,
    createdAt: at,
    updatedAt: at,
    version: 1,
  };
  await insertVolume(v, { claimBackendObject: true });
  await startVolumeExecution('volume-create', id, () => removeVolumeRecord(v));
  return json(202, { volume: volumeDetail(viewContext(req), v) });
}

export const manageRoutes: RouteSpec[] = [
  { method: 'GET', path: '/manageable_volumes', action: MANAGE_POLICIES.list, minVersion: MANAGE_MIN_VERSION, handler: (req) => listRoute(req, false) },
  { method: 'GET', path: '/manageable_volumes/detail', action: MANAGE_POLICIES.list, minVersion: MANAGE_MIN_VERSION, handler: (req) => listRoute(req, true) },
  { method: 'POST', path: '/manageable_volumes', action: MANAGE_POLICIES.manage, minVersion: MANAGE_MIN_VERSION, handler: manageRoute },
  // The os-volume-manage extension's path, which upstream's v3 API serves beside manageable_volumes
  // at every microversion: cinderclient's `cinder manage` posts here whatever version it asks for.
  { method: 'POST', path: '/os-volume-manage', action: MANAGE_POLICIES.manage, handler: manageRoute },
];
