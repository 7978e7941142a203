/**
 * The one place that turns a backend's configuration into its driver (wrapped for fault
 * injection). Callers: volume steps, attachments, the audit.
 *
 * Drivers are cached per backend host, keyed also by the configuration they were built from: an
 * operator's changed record (a new pool, a bigger capacity) takes effect on the next call.
 */
import type { BackendConfig, ReplicationDriver, SnapshotDriver, VolumeDriver } from './driver.js';
import { getBackendRecord } from '../../volumes/backends.js';
import { withFaults } from '../../core/faults.js';
import { LocalVolumeDriver } from './local.js';
import { AwsEbsVolumeDriver } from './aws-ebs.js';
import { clearReplicationEngines } from './local-replication.js';

export { InvalidReplicationTarget } from './local-replication.js';

const cache = new Map<string, { configKey: string; driver: VolumeDriver }>();

/** JSON with sorted keys: DynamoDB does not keep a map's key order, so plain JSON would differ per read. */
function stableKey(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableKey).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableKey(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

function build(config: BackendConfig, activeBackendId: string): VolumeDriver {
  switch (config.driver) {
    case 'local':
      return new LocalVolumeDriver(config, { activeBackendId });
    case 'aws-ebs':
      return new AwsEbsVolumeDriver(config);
    default:
      throw new Error(`backend ${config.host}: unknown volume driver ${JSON.stringify((config as { driver: unknown }).driver)} (expected 'local' or 'aws-ebs')`);
  }
}

/**
 * Driver for a backend config: built once per host, config and active backend, fault-wrapped.
 * `activeBackendId` is the service's (reference §2.3 "Use at startup"): '' for the primary, or the
 * replication target a failover moved the backend to, so a restarted stack talks to the right site.
 */
export function driverFor(config: BackendConfig, activeBackendId = ''): VolumeDriver {
  const configKey = stableKey({ config, activeBackendId });
  const cached = cache.get(config.host);
  if (cached && cached.configKey === configKey) return cached.driver;
  const driver = withFaults('volume', config.host, build(config, activeBackendId));
  cache.set(config.host, { configKey, driver });
  return driver;
}

/** Driver for a volume's `host` (`host@backend#pool`) or a backend `host@backend`. */
export async function driverForHost(host: string): Promise<VolumeDriver> {
  const record = await getBackendRecord(host);
  return driverFor(record.config, record.service.activeBackendId);
}

/** Forgets every cached driver and the local replication engines' caches (tests that rebuild backends between cases). */
export function clearDriverCache(): void {
  cache.clear();
  clearReplicationEngines();
}

const REPLICATION_METHODS = ['replicationTargets', 'enableReplication', 'disableReplication', 'failoverHost', 'freezeBackend', 'thawBackend', 'startDrill', 'endDrill'] as const;
const SNAPSHOT_METHODS = ['createSnapshot', 'deleteSnapshot', 'listSnapshots'] as const;

const hasMethods = (driver: object, names: readonly string[]) => names.every((m) => typeof (driver as Record<string, unknown>)[m] === 'function');

/** True when the driver implements ReplicationDriver (whether or not its backend has targets). */
export function isReplicationDriver(driver: VolumeDriver): driver is VolumeDriver & ReplicationDriver {
  return hasMethods(driver, REPLICATION_METHODS);
}

export function isSnapshotDriver(driver: VolumeDriver): driver is VolumeDriver & SnapshotDriver {
  return hasMethods(driver, SNAPSHOT_METHODS);
}

/**
 * The driver as a ReplicationDriver when its backend is replicated (implements the methods and has
 * at least one replication_device), else undefined: aws-ebs, and local backends without targets.
 * Calls go through the same fault wrapper as the VolumeDriver calls.
 */
export function replicationDriverFor(driver: VolumeDriver): (VolumeDriver & ReplicationDriver) | undefined {
  if (!isReplicationDriver(driver)) return undefined;
  return driver.replicationTargets().length > 0 ? driver : undefined;
}

/** The driver as a SnapshotDriver, or undefined when its kind has no snapshots. */
export function snapshotDriverFor(driver: VolumeDriver): (VolumeDriver & SnapshotDriver) | undefined {
  return isSnapshotDriver(driver) ? driver : undefined;
}
