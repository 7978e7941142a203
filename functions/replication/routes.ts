/**
 * Cinder's service and capability endpoints for replication v2.1 (reference §2.1, §2.3, §2.6):
 *
 * - `GET /os-services` (with the os-extended-services fields: replication_status,
 *   active_backend_id, frozen, disabled_reason; backend_state at 3.49)
 * - `PUT /os-services/{failover_host|failover|freeze|thaw}`
 * - `GET /capabilities/{host}`
 * - `GET /scheduler-stats/get_pools[?detail=true]`
 *
 * failover answers 202 once the operation is recorded and its volume-failover execution started;
 * freeze and thaw run in the request (a driver call each) and answer 200, as upstream's RPC call.
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { NotFound } from '../core/errors.js';
import { executionName, startExecution } from '../core/executions.js';
import { logger } from '../core/logger.js';

import { driverFor, isReplicationDriver } from '../drivers/volume/registry.js';
import { availabilityZoneOf, gatherPools } from '../volumes/scheduler.js';
import { listBackendRecords, backendOf } from '../volumes/backends.js';
import { upstreamTime } from '../volumes/model.js';
import { poolStats, replicationCapability } from '../volumes/capabilities.js';
import type { ReplicationOperation } from './repo.js';
import { enableAfterThaw, freezeService, getBackendItem, thawService } from './service-repo.js';
import { hostMatches, parseAction, recordFailover, SERVICE_POLICIES, validateServiceAction } from './requests.js';
import { undoRecordedOperation } from './operation-end.js';

/** The machine that runs failovers, failbacks and drills. */
export const FAILOVER_MACHINE = 'volume-failover' as const;

/** The one scheduler service Ferry reports beside its volume services (it is not a process of its own). */
export const SCHEDULER_HOST = 'ferry';

/** Upstream reports a thaw the driver refused as 200 with this text (the RPC call returned False). */
export const THAW_DRIVER_ERROR = 'Backend reported error during thaw_host operation.';

export async function startFailoverExecution(op: ReplicationOperation): Promise<void> {
  try {
    await startExecution(FAILOVER_MACHINE, executionName(FAILOVER_MACHINE, op.id), { operationId: op.id });
  } catch (e) {
    logger.error('could not start the failover execution', { operationId: op.id, error: e as Error });
    // The request changes nothing: the service (or drill) goes back to where it was.
    await undoRecordedOperation(op, e).catch((u) => logger.error('undo after failed start failed', { operationId: op.id, error: u as Error }));
    throw e;
  }
}

async function serviceAction(req: ApiRequest) {
  const action = parseAction(req.params.action!, req.version);
  const { request, item } = await validateServiceAction(req.auth, action, req.body, req.version);
  const host = item.config.host;
  switch (action) {
    case 'failover_host':
    case 'failover': {
      const op = await recordFailover(req.auth, request, item);
      await startFailoverExecution(op);
      return json(202);
    }
    case 'freeze': {
      await freezeService(item);
      const driver = driverFor(item.config, item.service.activeBackendId);
      // Upstream's manager only logs a driver's freeze failure: the service is frozen either way.
      if (isReplicationDriver(driver)) await driver.freezeBackend().catch((e) => logger.error('driver freeze_backend failed', { host, error: e as Error }));
      return json(200);
    }
    case 'thaw': {
      await thawService(item);
      const driver = driverFor(item.config, item.service.activeBackendId);
      try {
        if (isReplicationDriver(driver)) await driver.thawBackend();
      } catch (e) {
        // `frozen` is already false; the service stays disabled until a thaw succeeds (upstream).
        logger.error('driver thaw_backend failed', { host, error: e as Error });
        return json(200, THAW_DRIVER_ERROR);
      }
      await enableAfterThaw(host);
      return json(200);
    }
  }
}

function truthy(raw: string | null): boolean {
  return raw !== null && ['1', 't', 'true', 'on', 'y', 'yes'].includes(raw.toLowerCase());
}

async function listServices(req: ApiRequest) {
  const host = req.query.get('host');
  const binary = req.query.get('binary');
  const at = upstreamTime(new Date().toISOString());
  const withCluster = req.version.atLeast('3.7');
  const withBackendState = req.version.atLeast('3.49');
  const rows: Record<string, unknown>[] = [];
  const records = await listBackendRecords();
  const zones = [...new Set(records.map((r) => availabilityZoneOf(r.config)))];
  rows.push({
    binary: 'cinder-scheduler',
    host: SCHEDULER_HOST,
    zone: zones[0] ?? 'nova',
    status: 'enabled',
    state: 'up',
    updated_at: at,
    ...(withCluster ? { cluster: null } : {}),
    disabled_reason: null,
  });
  for (const { config, service } of records.sort((a, b) => a.config.host.localeCompare(b.config.host))) {
    const item = await getBackendItem(config.host);
    rows.push({
      binary: 'cinder-volume',
      host: config.host,
      zone: availabilityZoneOf(config),
      status: service.disabled ? 'disabled' : 'enabled',
      state: 'up',
      updated_at: at,
      ...(withCluster ? { cluster: null } : {}),
      disabled_reason: service.disabledReason || null,
      replication_status: service.replicationStatus,
      active_backend_id: service.activeBackendId || null,
      frozen: service.frozen,
      ...(withBackendState ? { backend_state: 'up' } : {}),
      // Ferry's extension: a drill in progress on this backend (upstream has none).
      ...(item.drill ? { drill: { status: item.drill.status, backend_id: item.drill.target, operation_id: item.drill.operationId } } : {}),
    });
  }
  const filtered = rows.filter((r) => (!host || hostMatches(host, String(r.host))) && (!binary || r.binary === binary));
  return json(200, { services: filtered });
}

async function showCapabilities(req: ApiRequest) {
  const wanted = req.params.host!;
  const records = await listBackendRecords();
  const record = records.find((r) => r.config.host === backendOf(wanted));
  if (!record) throw new NotFound(`Can't find service: ${wanted}`);
  const driver = driverFor(record.config, record.service.activeBackendId);
  const caps = await driver.capabilities();
  const first = caps[0];
  const replication = replicationCapability(record.config, driver);
  return json(200, {
    namespace: `OS::Storage::Capabilities::${record.config.host}`,
    vendor_name: first?.vendorName ?? null,
    volume_backend_name: record.config.volumeBackendName,
    pool_name: first?.pool ?? null,
    driver_version: first?.driverVersion ?? null,
    storage_protocol: first?.storageProtocol ?? null,
    display_name: null,
    description: null,
    visibility: null,
    // views/capabilities.py names its keys: no `replication_enabled` (the pools' stats have it).
    replication_targets: replication.targets,
    properties: {
      multiattach: { title: 'Multiattach', description: 'Volumes may be attached to several hosts at once.', type: 'boolean' },
      replication_enabled: { title: 'Replication', description: 'Volumes of a type with replication_enabled=<is> True are kept in sync on the replication targets.', type: 'boolean' },
    },
  });
}

async function getPools(req: ApiRequest) {
  const detail = truthy(req.query.get('detail'));
  const nameFilter = req.query.get('name');
  const pools = (await gatherPools()).filter((p) => !nameFilter || p.host === nameFilter);
  return json(200, {
    pools: pools.map((p) =>
      detail
        ? { name: p.host, capabilities: { ...poolStats(p.backend, p.caps, p.replication ?? { enabled: false, targets: [], count: 0 }, p.allocatedGb), timestamp: upstreamTime(new Date().toISOString()) } }
        : { name: p.host },
    ),
  });
}

export const replicationRoutes: RouteSpec[] = [
  { method: 'GET', path: '/os-services', action: SERVICE_POLICIES.index, handler: listServices },
  { method: 'PUT', path: '/os-services/{action}', action: SERVICE_POLICIES.update, authorizeBy: 'resource', handler: serviceAction },
  { method: 'GET', path: '/capabilities/{host}', action: SERVICE_POLICIES.capabilities, handler: showCapabilities },
  { method: 'GET', path: '/scheduler-stats/get_pools', action: SERVICE_POLICIES.getPools, handler: getPools },
];

