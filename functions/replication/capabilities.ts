/**
 * Replication and snapshot capabilities of a backend's driver, negotiated through type guards on
 * the driver object (the local driver implements ReplicationDriver and SnapshotDriver; aws-ebs does
 * not), and the capability report upstream's scheduler and `GET /capabilities/{host}` show.
 */
import type { BackendConfig, PoolCapabilities, VolumeDriver } from '../drivers/volume/driver.js';
import { isReplicationDriver } from '../drivers/volume/registry.js';
import { FerryError } from '../core/errors.js';

// One definition of the guards, the registry's (it builds the drivers they test).
export { isReplicationDriver, isSnapshotDriver } from '../drivers/volume/registry.js';

/** Reported stats `replication_enabled` / `replication_targets` (reference §2.6): configured targets and a driver that can use them. */
export interface ReplicationCapability {
  enabled: boolean;
  targets: string[];
  count: number;
}

export function replicationCapability(config: BackendConfig, driver: VolumeDriver): ReplicationCapability {
  if (!config.replicationDevices?.length || !isReplicationDriver(driver)) return { enabled: false, targets: [], count: 0 };
  const targets = driver.replicationTargets();
  return { enabled: targets.length > 0, targets, count: targets.length };
}

/** A `replication_device` entry's backend_id may not be the failback sentinel, and must be given (reference §2.6). */
export function checkReplicationDevices(config: BackendConfig): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const [i, d] of (config.replicationDevices ?? []).entries()) {
    if (!d.backend_id) problems.push(`${config.host}: replication_device ${i} has no backend_id`);
    else if (d.backend_id === 'default') problems.push(`${config.host}: replication_device ${i} uses the reserved backend_id 'default'`);
    else if (seen.has(d.backend_id)) problems.push(`${config.host}: replication_device backend_id ${d.backend_id} appears twice`);
    seen.add(d.backend_id);
  }
  return problems;
}

/** A pool's capabilities as upstream's scheduler stats (`get_pools?detail=true`, `GET /capabilities`) name them. */
export function poolStats(config: BackendConfig, caps: PoolCapabilities, replication: ReplicationCapability, allocatedGb: number): Record<string, unknown> {
  return {
    pool_name: caps.pool,
    volume_backend_name: caps.volumeBackendName,
    vendor_name: caps.vendorName,
    driver_version: caps.driverVersion,
    storage_protocol: caps.storageProtocol,
    total_capacity_gb: caps.totalCapacityGb,
    free_capacity_gb: caps.freeCapacityGb,
    allocated_capacity_gb: allocatedGb,
    reserved_percentage: 0,
    multiattach: caps.multiattach,
    shared_targets: caps.sharedTargets,
    replication_enabled: replication.enabled,
    replication_targets: replication.targets,
    replication_count: replication.count,
    backend_state: 'up',
    driver: config.driver,
  };
}

/** The driver cannot replicate: failover (and drills) of its backend are refused before anything is written. */
export class ReplicationNotSupported extends FerryError {
  constructor(host: string, driver: string) {
    super(400, 'badRequest', `Invalid input received: Backend ${host} (driver ${driver}) does not support replication; it cannot fail over.`);
  }
}

/** Whether a driver error is upstream's InvalidReplicationTarget (the driver throws it as a 400). */
export function isInvalidReplicationTarget(e: unknown): boolean {
  if (!e || typeof e !== 'object') return false;
  const name = (e as { name?: string }).name ?? '';
  if (name === 'InvalidReplicationTarget') return true;
  return e instanceof FerryError && e.status === 400;
}

export class InvalidReplicationTarget extends FerryError {
  constructor(message: string, cause?: unknown) {
    super(400, 'badRequest', message, { cause });
  }
}

/** volume_utils.is_replicated_spec: the type's `replication_enabled` is `<is> True`. */
export function isReplicatedSpec(extraSpecs: Record<string, string>): boolean {
  return (extraSpecs.replication_enabled ?? '').trim().toLowerCase() === '<is> true';
}

/** A new (or retyped) volume's replication_status (create_volume.py, _set_replication_status). */
export function replicationStatusForType(extraSpecs: Record<string, string>): 'enabled' | 'disabled' {
  return isReplicatedSpec(extraSpecs) ? 'enabled' : 'disabled';
}
