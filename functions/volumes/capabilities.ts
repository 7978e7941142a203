/**
 * A backend's capabilities as the scheduler and `GET /capabilities/{host}` report them, and what a
 * volume type's extra specs ask of them: replication is negotiated through the registry's type
 * guard on the driver object (the local driver implements ReplicationDriver; aws-ebs does not).
 */
import type { BackendConfig, PoolCapabilities, VolumeDriver } from '../drivers/volume/driver.js';
import { isReplicationDriver } from '../drivers/volume/registry.js';
import { lagCapability, type BackendLag } from '../drivers/volume/replication-lag.js';
import { REPLICATION, type Volume } from './model.js';

/** Reported stats `replication_enabled` / `replication_targets` (reference §2.6): configured targets and a driver that can use them. */
export interface ReplicationCapability {
  enabled: boolean;
  targets: string[];
  count: number;
  /** Per target, as the last replication pass measured it (replication-lag.ts); absent before the first. */
  lag?: BackendLag;
}

export function replicationCapability(config: BackendConfig, driver: VolumeDriver, lag?: BackendLag): ReplicationCapability {
  if (!config.replicationDevices?.length || !isReplicationDriver(driver)) return { enabled: false, targets: [], count: 0 };
  const targets = driver.replicationTargets();
  return { enabled: targets.length > 0, targets, count: targets.length, ...(lag ? { lag } : {}) };
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
    // Ferry's own (a driver may report any capability): what a failover to each target would bring up now.
    ...(replication.enabled && replication.lag ? { replication_lag: lagCapability(replication.lag) } : {}),
    backend_state: 'up',
    driver: config.driver,
  };
}

/** volume_utils.is_replicated_spec: the type's `replication_enabled` is `<is> True`. */
export function isReplicatedSpec(extraSpecs: Record<string, string>): boolean {
  return (extraSpecs.replication_enabled ?? '').trim().toLowerCase() === '<is> true';
}

/** A new (or retyped) volume's replication_status (create_volume.py, _set_replication_status). */
export function replicationStatusForType(extraSpecs: Record<string, string>): 'enabled' | 'disabled' {
  return isReplicatedSpec(extraSpecs) ? 'enabled' : 'disabled';
}

/**
 * Upstream hands a volume to the driver unless its replication_status is `disabled` or
 * `not-capable`. Ferry also treats `null` (a volume recorded before replication existed, which
 * upstream never has) as not replicated: its backend object has no replica to fail over to.
 */
export function isReplicatedVolume(v: Pick<Volume, 'replicationStatus'>): boolean {
  return v.replicationStatus !== null && v.replicationStatus !== REPLICATION.disabled && v.replicationStatus !== REPLICATION.notCapable;
}
