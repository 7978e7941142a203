/**
 * The os-services replication actions (C/api/contrib/services.py `_failover/_freeze/_thaw`,
 * C/volume/api.py `failover/freeze_host/thaw_host`), in upstream's validation order (reference
 * §2.2): schema -> host/cluster presence -> policy -> service lookup (`_filter_host`) -> the
 * conditional service update. Shared by the API routes and the failover machine's console start,
 * so both validate and record the same way.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { AuthContext } from '../core/auth.js';
import { BadRequest } from '../core/errors.js';
import type { ApiVersion } from '../core/microversion.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { driverFor, isReplicationDriver } from '../drivers/volume/registry.js';
import { listBackends } from '../volumes/backends.js';
import { invalidField, isObject, pyRepr } from '../volumes/validation.js';
import { ReplicationNotSupported } from './errors.js';
import type { ReplicationOperation } from './repo.js';
import { beginDrill, beginDrillEnd, beginFailover, ensureServiceState, getBackendItem, type BackendItem } from './service-repo.js';
import { FAILBACK_SENTINEL } from '../drivers/volume/driver.js';

export const SERVICE_POLICIES = {
  index: 'volume_extension:services:index',
  update: 'volume_extension:services:update',
  failover: 'volume:failover_host',
  freeze: 'volume:freeze_host',
  thaw: 'volume:thaw_host',
  capabilities: 'volume_extension:capabilities',
  getPools: 'scheduler_extension:scheduler_stats:get_pools',
} as const;

registerPolicies({
  [SERVICE_POLICIES.index]: 'admin_api',
  [SERVICE_POLICIES.update]: 'admin_api',
  [SERVICE_POLICIES.failover]: 'admin_api',
  [SERVICE_POLICIES.freeze]: 'admin_api',
  [SERVICE_POLICIES.thaw]: 'admin_api',
  [SERVICE_POLICIES.capabilities]: 'admin_api',
  [SERVICE_POLICIES.getPools]: 'admin_api',
});

/** mv.REPLICATION_CLUSTER: `failover` exists, and freeze/thaw take a cluster, from here on. */
export const REPLICATION_CLUSTER_VERSION = '3.26';

export const UNKNOWN_ACTION = 'Invalid input received: Unknown action';

/** parameter_types.hostname's pattern (C/api/validation/parameter_types.py), as jsonschema quotes it. */
const HOST_PATTERN = /^[a-zA-Z0-9-._#@:/+[\]]*$/;
const HOST_PATTERN_TEXT = '^[a-zA-Z0-9-._#@:/+\\[\\]]*$';

export type ServiceAction = 'failover_host' | 'failover' | 'freeze' | 'thaw';

/** Ferry's extension of failover_host/failover: `"drill": true` starts a drill, `"drill": "end"` removes its copies. */
export type DrillRequest = false | 'start' | 'end';

export interface ServiceActionRequest {
  action: ServiceAction;
  host: string | null;
  cluster: string | null;
  backendId: string | null;
  drill: DrillRequest;
}

/** The action named in the URL; `failover` exists only from 3.26 (below it is an unknown action, as upstream). */
export function parseAction(id: string, version: ApiVersion): ServiceAction {
  if (id === 'failover_host' || id === 'freeze' || id === 'thaw') return id;
  if (id === 'failover' && version.atLeast(REPLICATION_CLUSTER_VERSION)) return 'failover';
  if (['enable', 'disable', 'disable-log-reason', 'set-log', 'get-log'].includes(id)) {
    throw new BadRequest(`Invalid input received: Ferry does not implement the os-services action ${id}.`);
  }
  throw new BadRequest(UNKNOWN_ACTION);
}

function hostField(v: unknown): string {
  if (typeof v !== 'string') throw invalidField('host', v, `${pyRepr(v)} is not of type 'string'`);
  if (v.length < 1) throw invalidField('host', v, `${pyRepr(v)} is too short`);
  if (v.length > 255) throw invalidField('host', v, `${pyRepr(v)} is too long`);
  if (!HOST_PATTERN.test(v)) throw invalidField('host', v, `${pyRepr(v)} does not match ${pyRepr(HOST_PATTERN_TEXT)}`);
  return v;
}

function nullableString(field: string, v: unknown, max = 255): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw invalidField(field, v, `${pyRepr(v)} is not of type 'string', 'null'`);
  if (v.length > max) throw invalidField(field, v, `${pyRepr(v)} is too long`);
  return v;
}

/**
 * Schema (C/api/schemas/services.py, additionalProperties false) then get_cluster_host. Writes
 * nothing. `drill` is accepted on failover_host/failover only (Ferry's extension).
 */
export function parseServiceActionBody(action: ServiceAction, body: unknown, version: ApiVersion): ServiceActionRequest {
  if (!isObject(body)) throw new BadRequest(`${pyRepr(body ?? null)} is not of type 'object'`);
  const failover = action === 'failover_host' || action === 'failover';
  const allowed = failover ? ['host', 'backend_id', 'cluster', 'drill'] : ['host', 'cluster'];
  for (const k of Object.keys(body)) {
    if (!allowed.includes(k)) throw new BadRequest(`Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
  }
  const host = body.host === undefined ? null : hostField(body.host);
  const cluster = nullableString('cluster', body.cluster);
  const backendId = failover ? nullableString('backend_id', body.backend_id) : null;
  let drill: DrillRequest = false;
  if (failover && body.drill !== undefined && body.drill !== null && body.drill !== false) {
    if (body.drill === true) drill = 'start';
    else if (body.drill === 'end') drill = 'end';
    else throw invalidField('drill', body.drill, `${pyRepr(body.drill)} is not one of [True, False, 'end']`);
  }

  // common.get_cluster_host; failover_host never takes a cluster.
  if (action === 'failover_host') {
    if (!host) throw new BadRequest('Invalid input received: Host field is missing.');
    return { action, host, cluster: null, backendId, drill };
  }
  if (version.atLeast(REPLICATION_CLUSTER_VERSION)) {
    if (Boolean(host) === Boolean(cluster)) throw new BadRequest('Invalid input received: One and only one of cluster and host must be set.');
    return { action, host, cluster, backendId, drill };
  }
  if (!host) throw new BadRequest('Invalid input received: Host field is missing.');
  return { action, host, cluster: null, backendId, drill };
}

/** C/db/sqlalchemy/api.py `_filter_host`: with '#' exact; with '@' exact or `value#*`; bare: exact, `value@*`, `value#*`. */
export function hostMatches(value: string, serviceHost: string): boolean {
  if (value.includes('#')) return serviceHost === value;
  if (value.includes('@')) return serviceHost === value || serviceHost.startsWith(`${value}#`);
  return serviceHost === value || serviceHost.startsWith(`${value}@`) || serviceHost.startsWith(`${value}#`);
}

/** `_get_cluster_and_services_for_replication`: one volume service, or upstream's 400s. Ferry has no clusters. */
export async function findService(host: string | null, cluster: string | null): Promise<BackendItem> {
  if (!host) throw new BadRequest(`No service found with cluster=${cluster}`);
  const matching = (await listBackends()).filter((b) => hostMatches(host, b.host));
  if (matching.length === 0) throw new BadRequest(`No service found with host=${host}`);
  if (matching.some((b) => b.host !== matching[0]!.host)) throw new BadRequest('Invalid input received: Services from different clusters found.');
  const item = await getBackendItem(matching[0]!.host);
  await ensureServiceState(item);
  return item.hasService ? item : getBackendItem(matching[0]!.host);
}

const POLICY_OF: Record<ServiceAction, string> = {
  failover_host: SERVICE_POLICIES.failover,
  failover: SERVICE_POLICIES.failover,
  freeze: SERVICE_POLICIES.freeze,
  thaw: SERVICE_POLICIES.thaw,
};

/** Validation up to and including the service lookup, in upstream's order. */
export async function validateServiceAction(auth: AuthContext, action: ServiceAction, body: unknown, version: ApiVersion): Promise<{ request: ServiceActionRequest; item: BackendItem }> {
  const request = parseServiceActionBody(action, body, version);
  authorize(auth, POLICY_OF[action]);
  const item = await findService(request.host, request.cluster);
  return { request, item };
}

/** A failover operation id derived from a console execution name, so a re-run records the same operation. */
export function operationIdForExecution(executionName: string): string {
  const h = createHash('sha256').update(`ferry-volume-failover:${executionName}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/**
 * Records a failover (or drill start/end) after validation: the operation item and the service's
 * conditional change, atomically. The caller starts the volume-failover execution named from the
 * returned operation's id. Refusals are upstream's 400s; nothing is written then.
 */
export async function recordFailover(auth: AuthContext, request: ServiceActionRequest, item: BackendItem, id: string = randomUUID()): Promise<ReplicationOperation> {
  const host = item.config.host;
  const driver = driverFor(item.config, item.service.activeBackendId);
  // A driver that cannot replicate at all (aws-ebs) gets a message that says so; a replicating
  // driver without replication_device entries is refused as upstream does, by its `disabled` status.
  if (!isReplicationDriver(driver)) throw new ReplicationNotSupported(host, item.config.driver);
  const at = new Date().toISOString();
  const base: ReplicationOperation = {
    id,
    kind: 'failover',
    host,
    requestedBackendId: request.backendId,
    failback: request.backendId === FAILBACK_SENTINEL,
    status: 'running',
    requestedBy: auth.userId,
    createdAt: at,
    updatedAt: at,
  };
  if (request.drill === 'start') {
    if (request.backendId === FAILBACK_SENTINEL) throw new BadRequest(`Invalid input received: A drill needs a replication target of ${host}, not '${FAILBACK_SENTINEL}'.`);
    const targets = driver.replicationTargets();
    const target = request.backendId ?? targets[0];
    if (!target || !targets.includes(target)) {
      throw new BadRequest(`Invalid input received: ${target ?? 'None'} is not a replication target of ${host} (targets: ${targets.join(', ') || 'none'}).`);
    }
    const op: ReplicationOperation = { ...base, kind: 'drill', failback: false };
    await beginDrill(item, op, target);
    return { ...op, target };
  }
  if (request.drill === 'end') {
    if (!item.drill) throw new BadRequest(`Invalid input received: Backend ${host} has no drill to end.`);
    const op: ReplicationOperation = { ...base, kind: 'drill-end', failback: false, drillOperationId: item.drill.operationId, target: item.drill.target };
    await beginDrillEnd(item, op);
    return op;
  }
  await beginFailover(item, base);
  return base;
}
