/**
 * Manila v2 shares routes (M/api/v2/shares.py, share_export_locations.py, share_instances.py,
 * services.py, scheduler_stats.py): validation, then a pure transition persisted conditionally,
 * and for create/delete an execution of the share machine named from the share id.
 *
 * `POST /shares/{id}/action` dispatches through SHARE_ACTIONS; the migration work adds its
 * actions with `registerShareAction` (experimental ones need `X-OpenStack-Manila-API-Experimental`).
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type ApiResponse, type RouteSpec } from '../core/api.js';
import type { AuthContext } from '../core/auth.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { executionName, startExecution } from '../core/executions.js';
import { logger } from '../core/logger.js';
import { own } from '../core/lookup.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { boolFromString } from '../core/strutils.js';
import { accessList, allowAccess, denyAccess } from './access.js';
import { type Share } from './model.js';
import { getShareNetwork } from './networks.js';
import { getShareOrThrow, getShareScoped, insertShare, listShareBackends, listShares, removeShareRecord, updateShare } from './repo.js';
import { DEFAULT_SHARE_AZ, freeShareGb, gatherSharePools } from './scheduler.js';
import { DEFAULT_SHARE_TYPE, getShareTypeByName, getShareTypeByNameOrId } from './types.js';
import { body, isObject, metadataOf, optionalText, protoOf, sizeOf, strictBool } from './validation.js';
import { exportLocationId, exportLocationView, shareDetail, shareInstanceViews, shareSummary, shareViewContext } from './views.js';

registerPolicies({
  'share:create': '@',
  'share:get': 'admin_or_owner',
  'share:get_all': '@',
  'share:update': 'admin_or_owner',
  'share:delete': 'admin_or_owner',
  'share:action': 'admin_or_owner',
  'share:reset_status': 'admin_api',
  'share_export_location:index': 'admin_or_owner',
  'share_export_location:show': 'admin_or_owner',
  'share_instance:index': 'admin_api',
  'share_instance:show': 'admin_api',
  'service:index': 'admin_api',
  'scheduler_stats:pools:index': 'admin_api',
  'scheduler_stats:pools:detail': 'admin_api',
});

const now = () => new Date().toISOString();

// ---- actions --------------------------------------------------------------------------------

export interface ShareActionSpec {
  minVersion?: string;
  maxVersion?: string;
  /** Needs `X-OpenStack-Manila-API-Experimental: true`; without it the action is a bare 404 (reference §1.1). */
  experimental?: boolean;
  /** The handler authorizes itself (against the share). */
  handler?: (req: ApiRequest, share: Share, value: unknown) => Promise<ApiResponse>;
  /**
   * Checked before the share is looked up (upstream's controller-level authorize, so a denied
   * caller gets 403 even for a share that does not exist); such actions use `byId`.
   */
  policy?: string;
  /** A handler that looks the share up itself (its not-found message differs per action). */
  byId?: (req: ApiRequest, shareId: string, value: unknown) => Promise<ApiResponse>;
}

/** Action key -> spec (several specs per key for several version ranges). */
export const SHARE_ACTIONS: Record<string, ShareActionSpec[]> = {};

export function registerShareAction(name: string, spec: ShareActionSpec): void {
  (SHARE_ACTIONS[name] ??= []).push(spec);
}

registerShareAction('os-allow_access', { maxVersion: '2.6', handler: allowAccess });
registerShareAction('allow_access', { minVersion: '2.7', handler: allowAccess });
registerShareAction('os-deny_access', { maxVersion: '2.6', handler: denyAccess });
registerShareAction('deny_access', { minVersion: '2.7', handler: denyAccess });
registerShareAction('os-access_list', { maxVersion: '2.6', handler: (req, s) => accessList(req, s) });
registerShareAction('access_list', { minVersion: '2.7', maxVersion: '2.44', handler: (req, s) => accessList(req, s) });
registerShareAction('os-reset_status', { maxVersion: '2.6', policy: 'share:reset_status', byId: resetStatus });
registerShareAction('reset_status', { minVersion: '2.7', policy: 'share:reset_status', byId: resetStatus });

/** Manila's share statuses an admin may set (M/api/openstack/wsgi.py AdminActionsMixin valid_status). */
const RESETTABLE_STATUSES = ['available', 'error', 'creating', 'deleting', 'error_deleting', 'migrating', 'migrating_to', 'inactive'] as const;

/**
 * `reset_status` (`manila reset-state`): an admin's override of a share's status after checking
 * the backend by hand, e.g. after a failed phase 2 of a driver-assisted migration. Only the
 * status changes; what the share holds stays recorded, so the audit still sees it.
 */
async function resetStatus(req: ApiRequest, shareId: string, value: unknown): Promise<ApiResponse> {
  const share = await getShareScoped(req.auth, shareId);
  const status = isObject(value) ? value.status : undefined;
  if (typeof status !== 'string') throw new BadRequest("Must specify 'status'");
  if (!(RESETTABLE_STATUSES as readonly string[]).includes(status)) throw new BadRequest(`Invalid state. Valid states: ${RESETTABLE_STATUSES.join(', ')}.`);
  await updateShare(share.id, { type: 'reset-status', at: now(), status: status as Share['status'] });
  return json(202);
}

/** strutils.bool_from_string, lenient: what the experimental header accepts. */
export function isExperimental(headers: Record<string, string | undefined>): boolean {
  return boolFromString(headers['x-openstack-manila-api-experimental'] ?? '') === true;
}

function inRange(req: ApiRequest, spec: ShareActionSpec): boolean {
  if (spec.minVersion && !req.version.atLeast(spec.minVersion)) return false;
  if (spec.maxVersion) {
    const [maj, min] = spec.maxVersion.split('.').map(Number);
    if (req.version.major > maj! || (req.version.major === maj && req.version.minor > min!)) return false;
  }
  return true;
}

async function action(req: ApiRequest) {
  const b = req.body;
  if (!isObject(b) || Object.keys(b).length !== 1) throw new BadRequest('Malformed request body');
  const key = Object.keys(b)[0]!;
  const specs = own(SHARE_ACTIONS, key);
  if (!specs) throw new BadRequest(`There is no such action: ${key}`);
  const spec = specs.find((s) => inRange(req, s) && (!s.experimental || isExperimental(req.event.headers)));
  if (!spec) throw new NotFound();
  if (spec.policy) authorize(req.auth, spec.policy);
  if (spec.byId) return spec.byId(req, req.params.id!, b[key]);
  const share = await getShareScoped(req.auth, req.params.id!);
  return spec.handler!(req, share, b[key]);
}

// ---- create ---------------------------------------------------------------------------------

export interface CreateShareRequest {
  size: number;
  shareProto: 'NFS' | 'CIFS';
  name: string | null;
  description: string | null;
  shareType: string | null;
  shareNetworkId: string | null;
  availabilityZone: string | null;
  metadata: Record<string, string>;
  isPublic: boolean;
}

export function parseCreateShare(raw: unknown): CreateShareRequest {
  const b = body(raw, 'share');
  if (b.snapshot_id !== undefined && b.snapshot_id !== null) throw new BadRequest('Creating a share from a snapshot is not supported by Ferry.');
  if (b.share_group_id !== undefined && b.share_group_id !== null) throw new BadRequest('Share groups are not supported by Ferry.');
  const shareProto = protoOf(b.share_proto);
  const size = sizeOf(b.size);
  const name = optionalText(b, 'name') ?? optionalText(b, 'display_name') ?? null;
  const description = optionalText(b, 'description', 10_000) ?? optionalText(b, 'display_description', 10_000) ?? null;
  const typeRef = b.share_type ?? b.volume_type ?? null;
  if (typeRef !== null && typeof typeRef !== 'string') throw new BadRequest('share_type must be a string.');
  const net = b.share_network_id ?? null;
  if (net !== null && typeof net !== 'string') throw new BadRequest('share_network_id must be a string.');
  const az = optionalText(b, 'availability_zone') ?? null;
  return {
    size,
    shareProto,
    name,
    description,
    shareType: typeRef || null,
    shareNetworkId: net || null,
    availabilityZone: az || null,
    metadata: metadataOf(b.metadata),
    isPublic: b.is_public === undefined || b.is_public === null ? false : strictBool('is_public', b.is_public),
  };
}

export async function recordNewShare(auth: AuthContext, r: CreateShareRequest, id: string = randomUUID()): Promise<Share> {
  const type = r.shareType ? await getShareTypeByNameOrId(r.shareType).catch((e) => {
    if (e instanceof NotFound) throw new NotFound(`Share type ${r.shareType} could not be found.`);
    throw e;
  }) : await getShareTypeByName(DEFAULT_SHARE_TYPE);
  if (!type) throw new BadRequest('Invalid share type: no share type given and no default share type is configured.');
  const dhss = strictBool('driver_handles_share_servers', type.extraSpecs.driver_handles_share_servers ?? 'False');
  if (r.shareNetworkId) {
    await getShareNetwork(auth, r.shareNetworkId);
    if (!dhss) throw new BadRequest(`Share network ID should not be provided when using a share type with driver_handles_share_servers extra spec set to False.`);
  } else if (dhss) {
    throw new BadRequest('Share network must be set when the driver_handles_share_servers extra spec of the share type is True.');
  }
  const at = now();
  const s: Share = {
    id,
    projectId: auth.projectId,
    userId: auth.userId,
    name: r.name,
    description: r.description,
    size: r.size,
    shareProto: r.shareProto,
    status: 'creating',
    taskState: null,
    shareTypeId: type.id,
    shareTypeName: type.name,
    shareNetworkId: r.shareNetworkId,
    availabilityZone: r.availabilityZone,
    metadata: r.metadata,
    isPublic: r.isPublic,
    instanceId: randomUUID(),
    host: null,
    exportLocations: [],
    capacity: null,
    ownsBackendShare: false,
    accessRules: {},
    errorReason: null,
    migration: null,
    createdAt: at,
    updatedAt: at,
    version: 1,
  };
  await insertShare(s);
  return s;
}

async function create(req: ApiRequest) {
  const s = await recordNewShare(req.auth, parseCreateShare(req.body));
  try {
    await startExecution('share-create', executionName('share-create', s.id), { shareId: s.id });
  } catch (e) {
    logger.error('could not start share-create', { shareId: s.id, error: e as Error });
    await removeShareRecord(s).catch(() => undefined);
    throw e;
  }
  return json(202, { share: shareDetail(shareViewContext(req), s) });
}

// ---- list / show / update / delete ---------------------------------------------------------

const truthy = (v: string | null) => ['1', 'true', 'yes', 't', 'on'].includes((v ?? '').toLowerCase());

async function visibleShares(req: ApiRequest): Promise<Share[]> {
  // Ferry has no soft delete (2.69): the soft-deleted listing is empty (manilaclient's find lists both and merges).
  if (truthy(req.query.get('is_soft_deleted'))) return [];
  const all = req.auth.isAdmin && truthy(req.query.get('all_tenants'));
  const projectFilter = req.auth.isAdmin ? req.query.get('project_id') : null;
  let shares = await listShares(all ? projectFilter ?? undefined : req.auth.projectId);
  const q = req.query;
  const eq = (k: string, get: (s: Share) => unknown) => {
    const want = q.get(k);
    if (want !== null) shares = shares.filter((s) => String(get(s) ?? '') === want);
  };
  eq('name', (s) => s.name);
  eq('status', (s) => s.status);
  eq('share_type_id', (s) => s.shareTypeId);
  eq('share_network_id', (s) => s.shareNetworkId);
  eq('share_proto', (s) => s.shareProto);
  if (req.auth.isAdmin) eq('host', (s) => s.host);
  const nameLike = q.get('name~');
  if (nameLike !== null) shares = shares.filter((s) => (s.name ?? '').includes(nameLike));
  const sortKey = q.get('sort_key') ?? 'created_at';
  const dir = (q.get('sort_dir') ?? 'desc').toLowerCase() === 'asc' ? 1 : -1;
  const keyOf: Record<string, (s: Share) => string | number> = {
    created_at: (s) => s.createdAt, id: (s) => s.id, name: (s) => s.name ?? '', status: (s) => s.status, size: (s) => s.size,
    share_proto: (s) => s.shareProto, host: (s) => s.host ?? '', share_type_id: (s) => s.shareTypeId, updated_at: (s) => s.updatedAt,
  };
  const key = own(keyOf, sortKey);
  if (!key) throw new BadRequest(`Wrong sort_key filter provided: '${sortKey}'.`);
  shares.sort((a, b) => (key(a) < key(b) ? -dir : key(a) > key(b) ? dir : 0));
  const offset = Number(q.get('offset') ?? 0);
  const limit = q.get('limit') === null ? undefined : Number(q.get('limit'));
  if (!Number.isInteger(offset) || offset < 0 || (limit !== undefined && (!Number.isInteger(limit) || limit < 0))) throw new BadRequest('limit and offset must be non-negative integers.');
  return shares.slice(offset, limit === undefined ? undefined : offset + limit);
}

async function show(req: ApiRequest) {
  const s = await getShareScoped(req.auth, req.params.id!);
  authorize(req.auth, 'share:get', s.isPublic ? undefined : s);
  return json(200, { share: shareDetail(shareViewContext(req), s) });
}

async function update(req: ApiRequest) {
  const b = body(req.body, 'share');
  const s = await getShareScoped(req.auth, req.params.id!);
  authorize(req.auth, 'share:update', s);
  const name = optionalText(b, 'display_name') ?? optionalText(b, 'name');
  const description = optionalText(b, 'display_description', 10_000) ?? optionalText(b, 'description', 10_000);
  const isPublic = b.is_public === undefined ? undefined : strictBool('is_public', b.is_public);
  const after = await updateShare(s.id, { type: 'update', at: now(), name, description, isPublic });
  return json(200, { share: shareDetail(shareViewContext(req), after) });
}

async function remove(req: ApiRequest) {
  const s = await getShareScoped(req.auth, req.params.id!);
  authorize(req.auth, 'share:delete', s);
  await updateShare(s.id, { type: 'begin-delete', at: now() });
  try {
    await startExecution('share-delete', executionName(`share-delete-${s.version}`, s.id), { shareId: s.id });
  } catch (e) {
    logger.error('could not start share-delete', { shareId: s.id, error: e as Error });
    await updateShare(s.id, { type: 'delete-failed', at: now(), reason: 'the delete machine could not be started' }).catch(() => undefined);
    throw e;
  }
  return json(202);
}

// ---- export locations / instances ------------------------------------------------------------

async function exportLocations(req: ApiRequest) {
  const s = await getShareScoped(req.auth, req.params.id!);
  authorize(req.auth, 'share_export_location:index', s);
  const ctx = shareViewContext(req);
  return json(200, { export_locations: s.exportLocations.map((p, i) => exportLocationView(ctx, s, p, i)) });
}

async function exportLocation(req: ApiRequest) {
  const s = await getShareScoped(req.auth, req.params.id!);
  authorize(req.auth, 'share_export_location:show', s);
  const i = s.exportLocations.findIndex((p) => exportLocationId(s, p) === req.params.el!);
  if (i < 0) throw new NotFound(`Export location ${req.params.el} could not be found.`);
  return json(200, { export_location: exportLocationView(shareViewContext(req), s, s.exportLocations[i]!, i) });
}

async function instances(req: ApiRequest) {
  const ctx = shareViewContext(req);
  return json(200, { share_instances: (await listShares()).flatMap((s) => shareInstanceViews(ctx, s)) });
}

async function instance(req: ApiRequest) {
  const view = (await listShares()).flatMap((s) => shareInstanceViews(shareViewContext(req), s)).find((v) => v.id === req.params.id);
  if (!view) throw new NotFound(`Share instance ${req.params.id} could not be found.`);
  return json(200, { share_instance: view });
}

async function instancesOfShare(req: ApiRequest) {
  const s = await getShareOrThrow(req.params.id!);
  return json(200, { share_instances: shareInstanceViews(shareViewContext(req), s) });
}

// ---- services / pools ------------------------------------------------------------------------

/** A stable small id per service, as upstream's integer ids. */
async function services(req: ApiRequest) {
  const at = new Date().toISOString().replace('Z', '').replace(/\.(\d{3})$/, '.$1000');
  const backends = await listShareBackends();
  const rows = [
    { id: 1, binary: 'manila-scheduler', host: 'ferry', zone: DEFAULT_SHARE_AZ, status: 'enabled', state: 'up', updated_at: at },
    ...backends.map((b, i) => ({ id: i + 2, binary: 'manila-share', host: b.host, zone: b.availabilityZone ?? DEFAULT_SHARE_AZ, status: 'enabled', state: 'up', updated_at: at })),
  ];
  const q = req.query;
  const filtered = rows.filter((r) => ['binary', 'host', 'zone', 'status', 'state'].every((k) => q.get(k) === null || String((r as Record<string, unknown>)[k]) === q.get(k)));
  return json(200, { services: filtered });
}

async function pools(req: ApiRequest, detail: boolean) {
  // Upstream matches host/backend/pool as regular expressions from the start (re.match); the CLI sends `.*`.
  const matcher = (name: string) => {
    const pattern = req.query.get(name);
    if (pattern === null) return () => true;
    let re: RegExp;
    try {
      re = new RegExp(`^(?:${pattern})`);
    } catch {
      throw new BadRequest(`Invalid ${name} filter: ${pattern}.`);
    }
    return (v: string) => re.test(v);
  };
  const [hostOk, backendOk, poolOk] = [matcher('host'), matcher('backend'), matcher('pool')];
  const list = (await gatherSharePools()).filter((p) => {
    const [hostPart, backendPart] = p.backend.host.split('@');
    return hostOk(hostPart!) && backendOk(backendPart!) && poolOk(p.caps.pool);
  });
  return json(200, {
    pools: list.map((p) => {
      const [host, backend] = p.backend.host.split('@');
      const base: Record<string, unknown> = { name: p.host, host, backend, pool: p.caps.pool };
      if (detail) {
        base.capabilities = {
          pool_name: p.caps.pool,
          total_capacity_gb: p.caps.totalCapacityGb,
          free_capacity_gb: freeShareGb(p),
          allocated_capacity_gb: p.allocatedGb,
          reserved_percentage: 0,
          reserved_snapshot_percentage: 0,
          reserved_share_extend_percentage: 0,
          driver_handles_share_servers: false,
          share_backend_name: p.backend.shareBackendName,
          storage_protocol: p.caps.storageProtocol,
          vendor_name: p.caps.vendorName,
          driver_version: p.caps.driverVersion,
          snapshot_support: p.caps.snapshotSupport,
          create_share_from_snapshot_support: false,
          revert_to_snapshot_support: false,
          mount_snapshot_support: false,
          replication_type: null,
          dedupe: false,
          compression: false,
          thin_provisioning: false,
          qos: false,
          ipv4_support: true,
          ipv6_support: true,
          timestamp: new Date().toISOString().replace('Z', ''),
        };
      }
      return base;
    }),
  });
}

export const shareRoutes: RouteSpec[] = [
  { method: 'POST', path: '/shares', action: 'share:create', handler: create },
  { method: 'GET', path: '/shares', action: 'share:get_all', handler: async (req) => json(200, { shares: (await visibleShares(req)).map((s) => shareSummary(shareViewContext(req), s)) }) },
  { method: 'GET', path: '/shares/detail', action: 'share:get_all', handler: async (req) => json(200, { shares: (await visibleShares(req)).map((s) => shareDetail(shareViewContext(req), s)) }) },
  { method: 'GET', path: '/shares/{id}', action: 'share:get', authorizeBy: 'resource', handler: show },
  { method: 'PUT', path: '/shares/{id}', action: 'share:update', authorizeBy: 'resource', handler: update },
  { method: 'DELETE', path: '/shares/{id}', action: 'share:delete', authorizeBy: 'resource', handler: remove },
  { method: 'POST', path: '/shares/{id}/action', action: 'share:action', authorizeBy: 'resource', handler: action },
  { method: 'GET', path: '/shares/{id}/export_locations', action: 'share_export_location:index', authorizeBy: 'resource', minVersion: '2.9', handler: exportLocations },
  { method: 'GET', path: '/shares/{id}/export_locations/{el}', action: 'share_export_location:show', authorizeBy: 'resource', minVersion: '2.9', handler: exportLocation },
  { method: 'GET', path: '/shares/{id}/instances', action: 'share_instance:index', minVersion: '2.3', handler: instancesOfShare },
  { method: 'GET', path: '/share_instances', action: 'share_instance:index', minVersion: '2.3', handler: instances },
  { method: 'GET', path: '/share_instances/{id}', action: 'share_instance:show', minVersion: '2.3', handler: instance },
  { method: 'GET', path: '/os-services', action: 'service:index', maxVersion: '2.6', handler: services },
  { method: 'GET', path: '/services', action: 'service:index', minVersion: '2.7', handler: services },
  { method: 'GET', path: '/scheduler-stats/pools', action: 'scheduler_stats:pools:index', handler: (req) => pools(req, false) },
  { method: 'GET', path: '/scheduler-stats/pools/detail', action: 'scheduler_stats:pools:detail', handler: (req) => pools(req, true) },
];
