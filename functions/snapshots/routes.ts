/**
 * Cinder v3 snapshots (C/api/v3/snapshots.py, C/api/v2/snapshots.py, C/api/schemas/snapshots.py):
 * create, list, list detail, show, delete, and the os-reset_status and os-force_delete actions
 * (C/api/contrib/admin_actions.py).
 *
 * Create records the snapshot `creating` (the intent: its backend name derives from its id) and
 * tries the driver once in the request: a snapshot the backend makes at once (the local driver's
 * reflink-or-copy of a sparse file, milliseconds to seconds) answers 202 with the snapshot as it
 * ended, `available` (or `error` if the driver failed), as the upstream CLIs expect of a quick
 * backend. A backend that accepted the snapshot but has not finished it (an EBS snapshot still
 * `pending`: minutes) answers BackendNotReady; the request then starts the snapshot-create machine
 * (statemachines/snapshot-create.asl.json, functions/snapshots/steps.ts), which waits for it in
 * Step Functions, no function running meanwhile, and answers 202 `creating` (as upstream does).
 * Delete runs in the request and answers 202 once the snapshot is gone (or `error_deleting`).
 *
 * Refused on a frozen backend (reference §2.5): create and delete, with upstream's 400.
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BackendNotReady, BadRequest, InvariantViolation, NotFound } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { allowed, authorize, registerPolicies } from '../core/policy.js';
import { isSnapshotDriver } from '../drivers/volume/registry.js';
import { assertNotFrozen } from '../volumes/frozen.js';
import { backendOf, driverForHost } from '../volumes/backends.js';
import { upstreamTime } from '../volumes/model.js';
import { parseLimit, parseOffset, parseSort } from '../volumes/queries.js';
import { getVolumeScoped } from '../volumes/repo.js';
import { invalidField, isObject, isUuidLike, metadataField, optionalString, pyRepr, wrapped } from '../volumes/validation.js';
import { SNAPSHOT_ACTIONS } from './actions.js';
import { snapshotBackendName, type Snapshot, type SnapshotStatus } from './model.js';
import { snapshotCreateExecutionName, startSnapshotCreate } from './machine.js';
import { getSnapshotScoped, insertSnapshot, listSnapshots, recordSnapshotCreateFailure, removeSnapshotRecord, updateSnapshot } from './repo.js';

export const SNAPSHOT_POLICIES = {
  create: 'volume:create_snapshot',
  get: 'volume:get_snapshot',
  getAll: 'volume:get_all_snapshots',
  delete: 'volume:delete_snapshot',
  extendedAttributes: 'volume_extension:extended_snapshot_attributes',
} as const;

const SNAPSHOT_RESET_STATUS = 'volume_extension:snapshot_admin_actions:reset_status';
const SNAPSHOT_FORCE_DELETE = 'volume_extension:snapshot_admin_actions:force_delete';

registerPolicies({
  [SNAPSHOT_RESET_STATUS]: 'admin_api',
  [SNAPSHOT_FORCE_DELETE]: 'admin_api',
  [SNAPSHOT_POLICIES.create]: 'admin_or_owner',
  [SNAPSHOT_POLICIES.get]: 'admin_or_owner',
  [SNAPSHOT_POLICIES.getAll]: 'admin_or_owner',
  [SNAPSHOT_POLICIES.delete]: 'admin_or_owner',
  [SNAPSHOT_POLICIES.extendedAttributes]: 'admin_or_owner',
});

/** C/api/v3/snapshots.py SNAPSHOT_IN_USE_FLAG_MSG, returned when 3.66+ gets `force: false`. */
export const SNAPSHOT_IN_USE_FLAG_MSG =
  "Since microversion 3.66 the 'force' flag is invalid for this request. For backward compatability, however, when the 'force' flag is passed with a value evaluating to True, it is silently ignored.";

const now = () => new Date().toISOString();

const CREATE_KEYS = ['name', 'display_name', 'description', 'display_description', 'volume_id', 'force', 'metadata'];

/** oslo strutils.bool_from_string(strict=True) on what parameter_types.boolean lets through. */
function strictBool(field: string, v: unknown): boolean {
  if (typeof v === 'boolean') return v;
  if (typeof v === 'string') {
    const s = v.trim().toLowerCase();
    if (['1', 't', 'true', 'on', 'y', 'yes'].includes(s)) return true;
    if (['0', 'f', 'false', 'off', 'n', 'no'].includes(s)) return false;
  }
  throw invalidField(field, v, `${pyRepr(v)} is not valid under any of the given schemas`);
}

export interface NewSnapshotRequest {
  volumeId: string;
  force: boolean | undefined;
  name: string | null;
  description: string | null;
  metadata: Record<string, string>;
}

/** The create schema (additionalProperties false, volume_id required), in upstream's wording. Writes nothing. */
export function parseSnapshotCreate(body: unknown): NewSnapshotRequest {
  const snap = wrapped(body, 'snapshot');
  for (const k of Object.keys(snap)) {
    if (!CREATE_KEYS.includes(k)) throw invalidField('snapshot', snap, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
  }
  if (!('volume_id' in snap)) throw invalidField('snapshot', snap, "'volume_id' is a required property");
  const volumeId = snap.volume_id;
  if (volumeId !== null && (typeof volumeId !== 'string' || !isUuidLike(volumeId))) throw invalidField('volume_id', volumeId, `${pyRepr(volumeId)} is not a 'uuid'`);
  const name = ('name' in snap ? optionalString(snap, 'name') : optionalString(snap, 'display_name')) ?? null;
  const description = ('description' in snap ? optionalString(snap, 'description') : optionalString(snap, 'display_description')) ?? null;
  const metadata = metadataField(snap, 'metadata', { nullable: true }) ?? {};
  const force = snap.force === undefined || snap.force === null ? undefined : strictBool('force', snap.force);
  if (volumeId === null) throw new NotFound('Volume None could not be found.');
  return { volumeId, force, name, description, metadata };
}

/**
 * A snapshot as upstream's views show it: `detail` is the v3 detail builder (create, update, show,
 * the detail list: group_snapshot_id, user_id, consumes_quota by microversion), else the summary
 * (the plain list); `extended` adds the os-extended-snapshot-attributes extension, which upstream
 * hooks on show and the detail list only (not create).
 */
export function snapshotView(req: ApiRequest, s: Snapshot, detail: boolean, extended = detail): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: s.id,
    created_at: upstreamTime(s.createdAt),
    updated_at: upstreamTime(s.updatedAt),
    name: s.name,
    description: s.description,
    volume_id: s.volumeId,
    status: s.status,
    size: s.size,
    metadata: { ...(s.metadata ?? {}) },
  };
  if (extended && allowed(req.auth, SNAPSHOT_POLICIES.extendedAttributes, { projectId: s.projectId })) {
    out['os-extended-snapshot-attributes:progress'] = s.status === 'available' ? '100%' : (s.progress ?? '0%');
    out['os-extended-snapshot-attributes:project_id'] = s.projectId;
  }
  if (!detail) return out;
  if (req.version.atLeast('3.14')) out.group_snapshot_id = null;
  if (req.version.atLeast('3.41')) out.user_id = s.userId;
  if (req.version.atLeast('3.65')) out.consumes_quota = true;
  return out;
}

async function createSnapshotRoute(req: ApiRequest) {
  const r = parseSnapshotCreate(req.body);
  const inUseAllowed = req.version.atLeast('3.66');
  if (inUseAllowed && r.force === false) throw new BadRequest(SNAPSHOT_IN_USE_FLAG_MSG);
  const v = await getVolumeScoped(req.auth, r.volumeId);
  authorize(req.auth, SNAPSHOT_POLICIES.create, { projectId: v.projectId });
  if (!v.host) throw new BadRequest(`Invalid volume: Volume ${v.id} status must be available, but current status is: ${v.status}.`);
  await assertNotFrozen(v.host);
  const driver = await driverForHost(v.host);
  if (!isSnapshotDriver(driver)) throw new BadRequest(`Invalid input received: Backend ${backendOf(v.host)} does not support snapshots.`);

  const id = randomUUID();
  const at = now();
  const snapshot: Snapshot = {
    id,
    volumeId: v.id,
    projectId: v.projectId,
    userId: req.auth.userId,
    name: r.name,
    description: r.description,
    metadata: r.metadata,
    size: v.size,
    status: 'creating',
    backendHost: backendOf(v.host),
    volumeBackendName: v.backendName,
    backendName: snapshotBackendName(id),
    createdAt: at,
    updatedAt: at,
    version: 1,
  };
  await insertSnapshot(snapshot, inUseAllowed || r.force === true);
  let result: Snapshot = snapshot;
  try {
    // The quick path: one try in the request (the local driver's snapshot is done in milliseconds).
    await driver.createSnapshot(v.backendName, snapshot.backendName);
    result = await updateSnapshot(id, { type: 'created', at: now() });
  } catch (e) {
    if (e instanceof BackendNotReady) {
      // The backend is still making it (an EBS snapshot takes minutes): the machine waits for it.
      await waitInMachine(id);
      return json(202, { snapshot: snapshotView(req, result, true, false) });
    }
    logger.error('snapshot create failed on the backend', { snapshotId: id, error: e as Error });
    result = await updateSnapshot(id, { type: 'create-failed', at: now(), reason: e instanceof Error ? e.message : String(e) });
    await recordSnapshotCreateFailure(result);
  }
  return json(202, { snapshot: snapshotView(req, result, true, false) });
}

/**
 * Starts snapshot-create for a snapshot the backend is still making. Its execution is named after
 * the snapshot (`snapshot-create-<id>`), so a second start finds the first. A start that fails
 * (Step Functions throttled or unreachable) does not fail the request: the snapshot was accepted
 * and stays `creating`, and the reconciler's pass over pending snapshots (functions/snapshots/
 * recovery.ts, after its grace) is the backstop that finishes it, as it finishes a create a crash
 * interrupted. The failure is logged as an error, never dropped.
 */
async function waitInMachine(snapshotId: string): Promise<void> {
  try {
    await startSnapshotCreate(snapshotId);
  } catch (e) {
    logger.error('could not start snapshot-create: the snapshot stays creating until the reconciler finishes it', {
      snapshotId,
      execution: snapshotCreateExecutionName(snapshotId),
      error: e as Error,
    });
  }
}

const SNAPSHOT_SORT_KEYS: Record<string, (s: Snapshot) => string | number> = {
  id: (s) => s.id,
  name: (s) => s.name ?? '',
  display_name: (s) => s.name ?? '',
  status: (s) => s.status,
  size: (s) => s.size,
  volume_id: (s) => s.volumeId,
  created_at: (s) => s.createdAt,
  updated_at: (s) => s.updatedAt,
  project_id: (s) => s.projectId,
};

const PAGING_KEYS = new Set(['limit', 'marker', 'offset', 'sort', 'sort_key', 'sort_dir', 'all_tenants', 'with_count']);

async function listRoute(req: ApiRequest, detail: boolean) {
  const q = req.query;
  const allTenants = req.auth.isAdmin && ['1', 'true', 'yes', 't', 'on'].includes((q.get('all_tenants') ?? '').toLowerCase());
  let snapshots = await listSnapshots(allTenants ? undefined : req.auth.projectId);
  for (const [k, value] of q) {
    if (PAGING_KEYS.has(k)) continue;
    if (k === 'status') snapshots = snapshots.filter((s) => s.status === value);
    else if (k === 'volume_id') snapshots = snapshots.filter((s) => s.volumeId === value);
    else if (k === 'name' || k === 'display_name') snapshots = snapshots.filter((s) => (s.name ?? '') === value);
    else if (k === 'project_id' && allTenants) snapshots = snapshots.filter((s) => s.projectId === value);
  }
  // Upstream's default order: created_at desc, then id; `sort`/`sort_key`+`sort_dir` and `offset` as for volumes.
  const sort = parseSort(q, SNAPSHOT_SORT_KEYS);
  const limit = parseLimit(q);
  const offset = parseOffset(q);
  snapshots.sort((a, b) => {
    for (const { key, dir } of sort) {
      const x = SNAPSHOT_SORT_KEYS[key]!(a);
      const y = SNAPSHOT_SORT_KEYS[key]!(b);
      if (x !== y) return (x < y ? -1 : 1) * (dir === 'asc' ? 1 : -1);
    }
    return 0;
  });
  const marker = q.get('marker');
  if (marker) {
    const i = snapshots.findIndex((s) => s.id === marker);
    if (i < 0) throw new NotFound(`Marker ${marker} could not be found.`);
    snapshots = snapshots.slice(i + 1);
  }
  snapshots = snapshots.slice(offset, offset + limit);
  const body: Record<string, unknown> = { snapshots: snapshots.map((s) => snapshotView(req, s, detail)) };
  if (req.version.atLeast('3.45') && ['1', 'true'].includes((q.get('with_count') ?? '').toLowerCase())) body.count = snapshots.length;
  return json(200, body);
}

async function showRoute(req: ApiRequest) {
  const s = await getSnapshotScoped(req.auth, req.params.snapshot_id!);
  authorize(req.auth, SNAPSHOT_POLICIES.get, { projectId: s.projectId });
  return json(200, { snapshot: snapshotView(req, s, true) });
}

async function deleteRoute(req: ApiRequest) {
  const id = req.params.snapshot_id!;
  const found = await getSnapshotScoped(req.auth, id);
  authorize(req.auth, SNAPSHOT_POLICIES.delete, { projectId: found.projectId });
  return deleteSnapshotNow(found, false);
}

/** DELETE and os-force_delete (any status): the driver runs in the request. */
async function deleteSnapshotNow(found: Snapshot, force: boolean) {
  const id = found.id;
  // Upstream's order: frozen first, then the status guard of the conditional update.
  await assertNotFrozen(found.backendHost);
  const s = await updateSnapshot(id, { type: 'begin-delete', at: now(), force }, { notFrozen: true });
  try {
    const driver = await driverForHost(s.backendHost);
    if (!isSnapshotDriver(driver)) throw new InvariantViolation(`backend ${s.backendHost} does not support snapshots, yet holds snapshot ${id}`, { context: { snapshotId: id } });
    await driver.deleteSnapshot(s.volumeBackendName, s.backendName);
    await removeSnapshotRecord(id);
  } catch (e) {
    logger.error('snapshot delete failed on the backend', { snapshotId: id, error: e as Error });
    await updateSnapshot(id, { type: 'delete-failed', at: now(), reason: e instanceof Error ? e.message : String(e) });
  }
  return json(202);
}

/** C/objects/fields.py SnapshotStatus.ALL, in its order (the refusal lists them). */
const UPSTREAM_SNAPSHOT_STATUSES = ['error', 'available', 'creating', 'deleting', 'deleted', 'updating', 'error_deleting', 'unmanaging', 'backing-up', 'restoring'];
const SNAPSHOT_STATUSES: readonly SnapshotStatus[] = ['creating', 'available', 'deleting', 'error', 'error_deleting'];

/** POST /snapshots/{id}/action: os-reset_status and os-force_delete (admin_actions.py SnapshotAdminController). */
async function actionRoute(req: ApiRequest) {
  const body = req.body;
  if (!isObject(body) || Object.keys(body).length === 0) throw new BadRequest('Malformed request body');
  if ('os-force_delete' in body) {
    const args = body['os-force_delete'];
    if (args !== null && !isObject(args)) throw invalidField('os-force_delete', args, `${pyRepr(args)} is not of type 'object', 'null'`);
    const s = await getSnapshotScoped(req.auth, req.params.snapshot_id!);
    authorize(req.auth, SNAPSHOT_FORCE_DELETE, { projectId: s.projectId });
    return deleteSnapshotNow(s, true);
  }
  const other = Object.keys(body).find((k) => k in SNAPSHOT_ACTIONS);
  if (other !== undefined) return SNAPSHOT_ACTIONS[other]!(req, body[other]);
  if (!('os-reset_status' in body)) throw new BadRequest(`There is no such action: ${Object.keys(body)[0]}`);
  const args = body['os-reset_status'];
  if (!isObject(args)) throw invalidField('os-reset_status', args, `${pyRepr(args)} is not of type 'object'`);
  const extra = Object.keys(args).find((k) => k !== 'status');
  if (extra !== undefined) throw invalidField('os-reset_status', args, `Additional properties are not allowed (${pyRepr(extra)} was unexpected)`);
  if (!('status' in args)) throw invalidField('os-reset_status', args, "'status' is a required property");
  const status = args.status;
  if (typeof status !== 'string') throw invalidField('status', status, `${pyRepr(status)} is not of type 'string'`);
  if (!UPSTREAM_SNAPSHOT_STATUSES.includes(status.toLowerCase())) {
    throw new BadRequest(`Snapshot status: ${status} is invalid, valid statuses are: (${UPSTREAM_SNAPSHOT_STATUSES.map((x) => `'${x}'`).join(', ')}).`);
  }
  if (!SNAPSHOT_STATUSES.includes(status.toLowerCase() as SnapshotStatus)) {
    throw new BadRequest(`Invalid input received: Ferry's snapshots have no status ${status.toLowerCase()} (docs/compatibility.md).`);
  }
  const s = await getSnapshotScoped(req.auth, req.params.snapshot_id!);
  authorize(req.auth, SNAPSHOT_RESET_STATUS, { projectId: s.projectId });
  await updateSnapshot(s.id, { type: 'reset-status', at: now(), status: status.toLowerCase() as SnapshotStatus });
  return json(202);
}

export const snapshotRoutes: RouteSpec[] = [
  { method: 'POST', path: '/snapshots/{snapshot_id}/action', action: SNAPSHOT_RESET_STATUS, authorizeBy: 'resource', handler: actionRoute },
  { method: 'POST', path: '/snapshots', action: SNAPSHOT_POLICIES.create, authorizeBy: 'resource', handler: createSnapshotRoute },
  { method: 'GET', path: '/snapshots', action: SNAPSHOT_POLICIES.getAll, handler: (req) => listRoute(req, false) },
  { method: 'GET', path: '/snapshots/detail', action: SNAPSHOT_POLICIES.getAll, handler: (req) => listRoute(req, true) },
  { method: 'GET', path: '/snapshots/{snapshot_id}', action: SNAPSHOT_POLICIES.get, authorizeBy: 'resource', handler: showRoute },
  { method: 'DELETE', path: '/snapshots/{snapshot_id}', action: SNAPSHOT_POLICIES.delete, authorizeBy: 'resource', handler: deleteRoute },
];


