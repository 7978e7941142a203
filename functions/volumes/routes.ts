/**
 * Cinder v3 volumes routes (C/api/v3/volumes.py, C/api/contrib/volume_actions.py,
 * C/api/contrib/admin_actions.py, C/api/contrib/volume_unmanage.py): validation in upstream's
 * order and wording, then a pure transition (transitions.ts) persisted conditionally (repo.ts),
 * and for create/delete an execution of the volume machine named from the volume id.
 */
import { own } from '../core/lookup.js';
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import type { AuthContext } from '../core/auth.js';
import { isConditionFailure, withRetries } from '../core/db.js';
import { BadRequest, ConcurrentModification, FerryError, InvalidVolume, NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { isReplicationDriver, replicationStatusForType } from '../replication/capabilities.js';
import { assertNotFrozen, BackendFrozen, notFrozenCheck } from '../replication/frozen.js';
import { executionName, startExecution } from '../core/executions.js';
import { logger } from '../core/logger.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { driverForHost } from '../drivers/volume/registry.js';
import { backendOf, getBackend, listBackends } from './backends.js';
import { defaultBackendName, type Volume, type VolumeAttachStatus, type VolumeStatus } from './model.js';
import { cancellationCodes, getVolumeOrThrow, getVolumeScoped, insertVolume, listVolumes, removeVolumeRecord, updateVolume, writeVolumeWith } from './repo.js';
import { availabilityZoneOf, DEFAULT_AVAILABILITY_ZONE, filterAndWeigh, gatherPools, poolTotalGb, reservePoolItem } from './scheduler.js';
import { apply, RESETTABLE_ATTACH_STATUSES, RESETTABLE_MIGRATION_STATUSES, VOLUME_STATUSES } from './transitions.js';
import { DEFAULT_VOLUME_TYPE, getVolumeTypeByName, getVolumeTypeByNameOrId, isMultiattachType, visibleType, volumeTypeKey } from './types.js';
import { invalidField, isObject, isUuidLike, metadataField, optionalString, pyRepr, sizeField, wrapped } from './validation.js';
import { viewContext, volumeDetail, volumeSummary } from './views.js';

export const VOLUME_POLICIES = {
  create: 'volume:create',
  get: 'volume:get',
  getAll: 'volume:get_all',
  update: 'volume:update',
  delete: 'volume:delete',
  extend: 'volume:extend',
  resetStatus: 'volume_extension:volume_admin_actions:reset_status',
  beginDetaching: 'volume:begin_detaching',
  rollDetaching: 'volume:roll_detaching',
  unmanage: 'volume_extension:volume_unmanage',
  action: 'volume:volume_action',
  retype: 'volume:retype',
} as const;

registerPolicies({
  [VOLUME_POLICIES.create]: '@',
  [VOLUME_POLICIES.get]: 'admin_or_owner',
  [VOLUME_POLICIES.getAll]: 'admin_or_owner',
  [VOLUME_POLICIES.update]: 'admin_or_owner',
  [VOLUME_POLICIES.delete]: 'admin_or_owner',
  [VOLUME_POLICIES.extend]: 'admin_or_owner',
  [VOLUME_POLICIES.resetStatus]: 'admin_api',
  [VOLUME_POLICIES.beginDetaching]: 'admin_or_owner',
  [VOLUME_POLICIES.rollDetaching]: 'admin_or_owner',
  [VOLUME_POLICIES.unmanage]: 'admin_api',
  [VOLUME_POLICIES.action]: 'admin_or_owner',
  [VOLUME_POLICIES.retype]: 'admin_or_owner',
});

/** osapi_max_limit */
export const MAX_LIMIT = 1000;

export const MULTIATTACH_REMOVED =
  'multiattach parameter has been removed. The default behavior is to use multiattach enabled volume types. Contact your administrator to create a multiattach enabled volume type and use it to create multiattach volumes.';

/** Sources of a new volume upstream supports and Ferry does not (yet): refused rather than silently ignored. */
const UNSUPPORTED_SOURCES = ['snapshot_id', 'source_volid', 'imageRef', 'backup_id', 'consistencygroup_id', 'group_id'];

const now = () => new Date().toISOString();

// ---------------------------------------------------------------------------------------------
// Create

export interface NewVolumeRequest {
  size: number;
  name: string | null;
  description: string | null;
  volumeType: string | null;
  availabilityZone: string | null;
  metadata: Record<string, string>;
  serverId: string | null;
}

/** Validates a `{"volume": {...}}` create body (upstream's schema, then the create flow's size check). Writes nothing. */
export function parseCreateBody(body: unknown): NewVolumeRequest {
  const volume = wrapped(body, 'volume');
  if (volume.multiattach) throw new BadRequest(MULTIATTACH_REMOVED);
  const name = optionalString(volume, 'name') ?? optionalString(volume, 'display_name') ?? null;
  const description = optionalString(volume, 'description') ?? optionalString(volume, 'display_description') ?? null;
  const volumeType = optionalString(volume, 'volume_type') ?? null;
  const availabilityZone = optionalString(volume, 'availability_zone') ?? null;
  const metadata = metadataField(volume, 'metadata', { nullable: true }) ?? {};
  for (const k of UNSUPPORTED_SOURCES) {
    if (volume[k] !== undefined && volume[k] !== null) throw new BadRequest(`Invalid input received: Creating a volume from ${k} is not supported by Ferry.`);
  }
  let serverId: string | null = null;
  if (volume.server_id !== undefined && volume.server_id !== null) {
    if (!isUuidLike(volume.server_id)) throw invalidField('server_id', volume.server_id, `${pyRepr(volume.server_id)} is not a 'uuid'`);
    serverId = volume.server_id;
  }
  if (volume.size === undefined || volume.size === null) {
    throw new BadRequest("Invalid input received: Volume size 'None' must be an integer and greater than 0");
  }
  const size = sizeField('size', volume.size);
  return { size, name, description, volumeType, availabilityZone, metadata, serverId };
}

/** The availability zones Ferry's backends are in. */
async function knownZones(): Promise<Set<string>> {
  const zones = new Set((await listBackends()).map(availabilityZoneOf));
  if (zones.size === 0) zones.add(DEFAULT_AVAILABILITY_ZONE);
  return zones;
}

/**
 * Records a new volume (`creating`) the way the API and the create machine's console start both
 * do; the caller then starts (or is) the volume-create execution.
 */
export async function recordNewVolume(auth: AuthContext, r: NewVolumeRequest, id: string = randomUUID()): Promise<Volume> {
  authorize(auth, VOLUME_POLICIES.create, { projectId: auth.projectId });
  const type = r.volumeType
    ? await visibleType(auth, r.volumeType, getVolumeTypeByNameOrId)
    : await getVolumeTypeByName(DEFAULT_VOLUME_TYPE);
  const zone = r.availabilityZone ?? DEFAULT_AVAILABILITY_ZONE;
  if (!(await knownZones()).has(zone)) throw new BadRequest(`Availability zone '${zone}' is invalid.`);
  const at = now();
  const v: Volume = {
    id,
    projectId: auth.projectId,
    userId: auth.userId,
    name: r.name,
    description: r.description,
    size: r.size,
    status: 'creating',
    attachStatus: 'detached',
    previousStatus: null,
    migrationStatus: null,
    // create_volume.py: `enabled` for a type with replication_enabled='<is> True', else `disabled`.
    replicationStatus: replicationStatusForType(type.extraSpecs),
    volumeTypeId: type.id,
    volumeTypeName: type.name,
    multiattach: isMultiattachType(type),
    bootable: false,
    host: null,
    backendName: defaultBackendName(id),
    providerLocation: null,
    serviceUuid: null,
    sharedTargets: null,
    availabilityZone: zone,
    metadata: r.metadata,
    adminMetadata: {},
    attachments: {},
    instances: {},
    connections: {},
    pendingServerId: r.serverId,
    capacity: null,
    managed: false,
    ownsBackendObject: false,
    errorReason: null,
    createdAt: at,
    updatedAt: at,
    version: 1,
  };
  await insertVolume(v);
  return v;
}

/**
 * Starts a machine for a recorded volume. If the start fails, `undo` puts things back so the
 * request changes nothing, and the error goes to the client.
 */
export async function startVolumeExecution(machine: 'volume-create' | 'volume-delete', volumeId: string, undo: () => Promise<void>): Promise<void> {
  try {
    await startExecution(machine, executionName(machine, volumeId), { volumeId });
  } catch (e) {
    logger.error('could not start volume execution', { machine, volumeId, error: e as Error });
    await undo().catch((u) => logger.error('undo after failed start failed', { volumeId, error: u as Error }));
    throw e;
  }
}

async function createVolume(req: ApiRequest) {
  const r = parseCreateBody(req.body);
  const v = await recordNewVolume(req.auth, r);
  await startVolumeExecution('volume-create', v.id, () => removeVolumeRecord(v));
  return json(202, { volume: volumeDetail(viewContext(req), v) });
}

// ---------------------------------------------------------------------------------------------
// List / show

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

function parseLimit(q: URLSearchParams): number {
  const raw = q.get('limit');
  if (raw === null) return MAX_LIMIT;
  if (!/^-?\d+$/.test(raw)) throw new BadRequest('limit param must be an integer');
  const n = Number(raw);
  if (n < 0) throw new BadRequest('limit param must be positive');
  return Math.min(n, MAX_LIMIT);
}

function parseOffset(q: URLSearchParams): number {
  const raw = q.get('offset');
  if (raw === null) return 0;
  if (!/^-?\d+$/.test(raw)) throw new BadRequest('offset param must be an integer');
  const n = Number(raw);
  if (n < 0) throw new BadRequest('offset param must be positive');
  return n;
}

function parseSort(q: URLSearchParams): { key: string; dir: 'asc' | 'desc' }[] {
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
    if (!own(SORT_KEYS, p.key)) throw new BadRequest(`Invalid input received: Invalid sort key ${p.key}.`);
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

async function listRoute(req: ApiRequest, detail: boolean) {
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
  const body: Record<string, unknown> = { volumes: volumes.map((v) => (detail ? volumeDetail(ctx, v) : volumeSummary(ctx, v))) };
  if (volumes.length > 0 && volumes.length === limit) {
    const params = new URLSearchParams(q);
    params.set('limit', String(limit));
    params.set('marker', volumes[volumes.length - 1]!.id);
    params.delete('offset');
    const project = req.urlProjectId ?? req.auth.projectId;
    body.volumes_links = [{ href: `${req.baseUrl}/${project}/volumes${detail ? '/detail' : ''}?${params.toString()}`, rel: 'next' }];
  }
  if (req.version.atLeast('3.45') && truthy(q.get('with_count'))) body.count = count;
  return json(200, body);
}

async function showVolume(req: ApiRequest) {
  const v = await getVolumeScoped(req.auth, req.params.volume_id!);
  authorize(req.auth, VOLUME_POLICIES.get, { projectId: v.projectId });
  return json(200, { volume: volumeDetail(viewContext(req), v) });
}

// ---------------------------------------------------------------------------------------------
// Update / delete

async function updateVolumeRoute(req: ApiRequest) {
  const body = wrapped(req.body, 'volume');
  for (const k of Object.keys(body)) {
    if (!['name', 'description', 'display_name', 'display_description', 'metadata'].includes(k)) {
      throw invalidField('volume', body, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
    }
  }
  const name = 'name' in body ? optionalString(body, 'name') : optionalString(body, 'display_name');
  const description = 'description' in body ? optionalString(body, 'description') : optionalString(body, 'display_description');
  const metadata = metadataField(body, 'metadata');
  const id = req.params.volume_id!;
  const found = await getVolumeScoped(req.auth, id);
  authorize(req.auth, VOLUME_POLICIES.update, { projectId: found.projectId });
  const v = await updateVolume(id, { type: 'update', at: now(), name, description, metadata });
  return json(200, { volume: volumeDetail(viewContext(req), v) });
}

/**
 * begin-delete written with a ConditionCheck that the volume's backend is not frozen, so a freeze
 * that lands after the read still refuses the delete (reference §2.5).
 */
async function beginDeleteNotFrozen(id: string): Promise<Volume> {
  return withRetries(
    async () => {
      const before = await getVolumeOrThrow(id);
      const after = apply(before, { type: 'begin-delete', at: now() });
      try {
        return await writeVolumeWith(before, after, before.host ? [notFrozenCheck(before.host)] : []);
      } catch (e) {
        if (before.host && cancellationCodes(e)[1] === 'ConditionalCheckFailed') throw new BackendFrozen(before.host);
        throw e;
      }
    },
    { retryable: (e) => cancellationCodes(e)[0] === 'ConditionalCheckFailed' || cancellationCodes(e).includes('TransactionConflict'), attempts: 20 },
  ).catch((e) => {
    if (isConditionFailure(e) && !(e instanceof FerryError)) throw new ConcurrentModification(`Volume ${id}`, e);
    throw e;
  });
}

async function deleteVolumeRoute(req: ApiRequest) {
  // `cascade` is accepted and ignored: a volume with snapshots is refused (delete its snapshots first).
  const id = req.params.volume_id!;
  const found = await getVolumeScoped(req.auth, id);
  authorize(req.auth, VOLUME_POLICIES.delete, { projectId: found.projectId });
  // Upstream's order: frozen (assert_not_frozen) before the status guard.
  if (found.host) await assertNotFrozen(found.host);
  const before = await beginDeleteNotFrozen(id);
  await startVolumeExecution('volume-delete', id, async () => {
    await updateVolume(id, { type: 'reset-status', at: now(), status: (before.previousStatus ?? 'available') as VolumeStatus });
  });
  return json(202);
}

// ---------------------------------------------------------------------------------------------
// Actions

type ActionHandler = (req: ApiRequest, v: Volume, args: unknown) => Promise<ReturnType<typeof json>>;

async function resetStatus(req: ApiRequest, v: Volume, args: unknown) {
  authorize(req.auth, VOLUME_POLICIES.resetStatus, { projectId: v.projectId });
  if (!isObject(args)) throw invalidField('os-reset_status', args, `${pyRepr(args)} is not of type 'object'`);
  for (const k of Object.keys(args)) {
    if (!['status', 'attach_status', 'migration_status'].includes(k)) throw invalidField('os-reset_status', args, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
  }
  const pick = (k: string) => {
    const x = args[k];
    if (x === undefined || x === null || x === '') return undefined;
    if (typeof x !== 'string') throw invalidField(k, x, `${pyRepr(x)} is not of type 'string', 'null'`);
    return x.toLowerCase();
  };
  const status = pick('status');
  const attachStatus = pick('attach_status');
  const migrationStatus = pick('migration_status');
  if (status !== undefined && !VOLUME_STATUSES.includes(status as VolumeStatus)) throw new BadRequest('Must specify a valid status');
  if (attachStatus !== undefined && !RESETTABLE_ATTACH_STATUSES.includes(attachStatus as VolumeAttachStatus)) throw new BadRequest('Must specify a valid attach status');
  if (migrationStatus !== undefined && !(RESETTABLE_MIGRATION_STATUSES as readonly string[]).includes(migrationStatus)) throw new BadRequest('Must specify a valid migration status');
  await updateVolume(v.id, {
    type: 'reset-status',
    at: now(),
    status: status as VolumeStatus | undefined,
    attachStatus: attachStatus as VolumeAttachStatus | undefined,
    migrationStatus: migrationStatus === undefined ? undefined : migrationStatus === 'none' ? null : migrationStatus,
  });
  return json(202);
}

async function beginDetaching(req: ApiRequest, v: Volume) {
  authorize(req.auth, VOLUME_POLICIES.beginDetaching, { projectId: v.projectId });
  await updateVolume(v.id, { type: 'begin-detaching', at: now() });
  return json(202);
}

async function rollDetaching(req: ApiRequest, v: Volume) {
  authorize(req.auth, VOLUME_POLICIES.rollDetaching, { projectId: v.projectId });
  await updateVolume(v.id, { type: 'roll-detaching', at: now() });
  return json(202);
}

/**
 * os-extend, run in the request: reserve the extra capacity together with `extending` (one
 * transaction), extend on the backend, then `available` at the new size, or `error_extending`
 * (capacity kept held at the new size: the backend may be partly extended; delete releases it).
 */
async function extend(req: ApiRequest, v: Volume, args: unknown) {
  authorize(req.auth, VOLUME_POLICIES.extend, { projectId: v.projectId });
  if (!isObject(args) || !('new_size' in args)) throw new BadRequest("'new_size' is a required property");
  const newSize = sizeField('new_size', args.new_size);
  const before = v;
  const after = apply(before, { type: 'begin-extend', at: now(), newSize });
  const backend = await getBackend(before.host!);
  const total = await poolTotalGb(backend, before.capacity!.pool);
  try {
    await writeVolumeWith(before, after, [reservePoolItem(before.capacity!.pool, newSize - before.size, total)]);
  } catch (e) {
    const codes = cancellationCodes(e);
    if (codes[1] === 'ConditionalCheckFailed') {
      throw new BadRequest(`Invalid input received: Pool ${before.capacity!.pool} does not have ${newSize - before.size} GiB free to extend volume ${v.id}.`);
    }
    if (isConditionFailure(e)) throw new ConcurrentModification(`Volume ${v.id}`, e);
    throw e;
  }
  try {
    // The driver of the site the backend runs on (after a failover: the target).
    await (await driverForHost(backend.host)).extendVolume(before.backendName, newSize);
    await updateVolume(v.id, { type: 'extend-done', at: now() });
  } catch (e) {
    logger.error('extend failed on the backend', { volumeId: v.id, error: e as Error });
    await updateVolume(v.id, { type: 'extend-failed', at: now(), reason: e instanceof Error ? e.message : String(e) });
  }
  return json(202);
}

/** os-unmanage: forget the volume, keep its backend object (capacity and claim released in the same transaction). */
async function unmanage(req: ApiRequest, v: Volume) {
  authorize(req.auth, VOLUME_POLICIES.unmanage, { projectId: v.projectId });
  // The delete guard decides (upstream's unmanage is delete with unmanage_only).
  apply(v, { type: 'begin-delete', at: now() });
  try {
    await removeVolumeRecord(v, undefined, { unmanaged: true });
  } catch (e) {
    if (isConditionFailure(e)) throw new ConcurrentModification(`Volume ${v.id}`, e);
    throw e;
  }
  return json(202);
}

/**
 * os-retype, minimal: the new type's replication_status (and multiattach) on the same backend. A
 * retype whose type the volume's pool does not satisfy would need a migration, which Ferry does
 * not do: 400 (docs/compatibility.md). Replication is enabled on the backend before the record
 * changes (an extra replica is harmless) and disabled after (a stale replica is harmless).
 */
async function retype(req: ApiRequest, v: Volume, args: unknown) {
  authorize(req.auth, VOLUME_POLICIES.retype, { projectId: v.projectId });
  if (!isObject(args)) throw invalidField('os-retype', args, `${pyRepr(args)} is not of type 'object'`);
  for (const k of Object.keys(args)) {
    if (!['new_type', 'migration_policy'].includes(k)) throw invalidField('os-retype', args, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
  }
  if (!('new_type' in args)) throw invalidField('os-retype', args, "'new_type' is a required property");
  if (typeof args.new_type !== 'string') throw invalidField('new_type', args.new_type, `${pyRepr(args.new_type)} is not of type 'string'`);
  const policy = args.migration_policy;
  if (policy !== undefined && policy !== null && policy !== 'on-demand' && policy !== 'never') {
    throw invalidField('migration_policy', policy, `${pyRepr(policy)} is not one of ['on-demand', 'never']`);
  }
  if (!['available', 'in-use'].includes(v.status)) {
    throw new InvalidVolume(`Unable to update type due to incorrect status: ${v.status} on volume: ${v.id}. Volume status must be available or in-use.`);
  }
  const type = await visibleType(req.auth, args.new_type, getVolumeTypeByNameOrId);
  const replicationStatus = replicationStatusForType(type.extraSpecs);
  if (!v.host) throw new InvalidVolume(`Volume ${v.id} has no host.`);
  const pool = (await gatherPools(v.host)).find((p) => p.host === (v.capacity?.pool ?? v.host));
  if (!pool) throw new BadRequest(`Invalid input received: Pool ${v.host} of volume ${v.id} is not reported by its backend.`);
  const { rejected } = filterAndWeigh([{ ...pool, allocatedGb: 0 }], { sizeGb: 0, extraSpecs: type.extraSpecs, availabilityZone: v.availabilityZone });
  if (rejected.length) {
    throw new BadRequest(`Invalid input received: Retyping volume ${v.id} to ${type.name} needs a migration off ${backendOf(v.host)} (${rejected.map((r) => r.reason).join('; ')}); Ferry does not migrate volumes.`);
  }
  const after = apply(v, { type: 'retype', at: now(), typeId: type.id, typeName: type.name, multiattach: isMultiattachType(type), replicationStatus });
  const driver = await driverForHost(v.host);
  const replicating = isReplicationDriver(driver) && !!pool.replication?.enabled;
  if (replicating && replicationStatus === 'enabled' && v.replicationStatus !== 'enabled') await driver.enableReplication(v.backendName);
  try {
    await writeVolumeWith(v, after, [
      { Update: { TableName: tableName('volume'), Key: volumeTypeKey(v.volumeTypeId), UpdateExpression: 'ADD volumeCount :minus', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':minus': -1 } } },
      { Update: { TableName: tableName('volume'), Key: volumeTypeKey(type.id), UpdateExpression: 'ADD volumeCount :one', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':one': 1 } } },
    ]);
  } catch (e) {
    if (cancellationCodes(e)[2] === 'ConditionalCheckFailed') throw new NotFound(`Volume type ${type.id} could not be found.`);
    if (isConditionFailure(e)) throw new ConcurrentModification(`Volume ${v.id}`, e);
    throw e;
  }
  if (replicating && replicationStatus === 'disabled' && v.replicationStatus !== 'disabled') {
    await driver.disableReplication(v.backendName).catch((e) => logger.error('disabling replication after retype failed', { volumeId: v.id, error: e as Error }));
  }
  return json(202);
}

const ACTIONS: Record<string, ActionHandler> = {
  'os-retype': retype,
  'os-reset_status': resetStatus,
  'os-begin_detaching': beginDetaching,
  'os-roll_detaching': rollDetaching,
  'os-extend': extend,
  'os-unmanage': unmanage,
};

async function volumeAction(req: ApiRequest) {
  if (!isObject(req.body) || Object.keys(req.body).length === 0) throw new BadRequest('Malformed request body');
  const name = Object.keys(req.body).find((k) => own(ACTIONS, k));
  if (!name) throw new BadRequest(`There is no such action: ${Object.keys(req.body)[0]}`);
  const v = await getVolumeScoped(req.auth, req.params.volume_id!);
  return own(ACTIONS, name)!(req, v, req.body[name]);
}

export const volumeRoutes: RouteSpec[] = [
  { method: 'POST', path: '/volumes', action: VOLUME_POLICIES.create, handler: createVolume },
  { method: 'GET', path: '/volumes', action: VOLUME_POLICIES.getAll, handler: (req) => listRoute(req, false) },
  { method: 'GET', path: '/volumes/detail', action: VOLUME_POLICIES.getAll, handler: (req) => listRoute(req, true) },
  { method: 'GET', path: '/volumes/{volume_id}', action: VOLUME_POLICIES.get, authorizeBy: 'resource', handler: showVolume },
  { method: 'PUT', path: '/volumes/{volume_id}', action: VOLUME_POLICIES.update, authorizeBy: 'resource', handler: updateVolumeRoute },
  { method: 'DELETE', path: '/volumes/{volume_id}', action: VOLUME_POLICIES.delete, authorizeBy: 'resource', handler: deleteVolumeRoute },
  { method: 'POST', path: '/volumes/{volume_id}/action', action: VOLUME_POLICIES.action, authorizeBy: 'resource', handler: volumeAction },
];

