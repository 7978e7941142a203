/**
 * The one place that turns a backend's configuration into its driver (wrapped for fault
 * injection). It takes the configuration as input and reads no table: volumes/backends.ts
 * (`driverForHost`) reads the backend record and calls `driverFor`; so does the audit.
 *
 * Drivers are cached per backend host, keyed also by the configuration they were built from: an
 * operator's changed record (a new pool, a bigger capacity) takes effect on the next call.
 */
import { replicationDeviceProblems, type AdoptingDriver, type BackendConfig, type ReplicationDriver, type SnapshotDriver, type VolumeDriver } from './driver.js';
import { ConfigurationError } from '../../core/errors.js';
import { withFaults } from '../../core/faults.js';
import { canonicalJson } from '../../core/canonical.js';
import { LocalVolumeDriver } from './local.js';
import { AwsEbsVolumeDriver } from './aws-ebs.js';
import { clearReplicationEngines } from './local-replication.js';

const cache = new Map<string, { configKey: string; driver: VolumeDriver }>();

function build(config: BackendConfig, activeBackendId: string): VolumeDriver {
  // Every kind's replication_devices are checked here, so a misnamed target of an aws-ebs backend is
  // refused as surely as a local one (whose driver checks its own `root` key besides).
  const problems = replicationDeviceProblems(config);
  if (problems.length > 0) throw new ConfigurationError(problems.join('; '), { context: { host: config.host } });
  switch (config.driver) {
    case 'local':
      return new LocalVolumeDriver(config, { activeBackendId });
    case 'aws-ebs':
      return new AwsEbsVolumeDriver(config, { activeBackendId });
    default:
      throw new ConfigurationError(`backend ${config.host}: unknown volume driver ${JSON.stringify((config as { driver: unknown }).driver)} (expected 'local' or 'aws-ebs')`);
  }
}

/**
 * Driver for a backend config: built once per host, config and active backend, fault-wrapped.
 * `activeBackendId` is the service's (reference §2.3 "Use at startup"): '' for the primary, or the
 * replication target a failover moved the backend to, so a restarted stack talks to the right site.
 */
export function driverFor(config: BackendConfig, activeBackendId = ''): VolumeDriver {
  const configKey = canonicalJson({ config, activeBackendId });
  const cached = cache.get(config.host);
  if (cached && cached.configKey === configKey) return cached.driver;
  const driver = withFaults('volume', config.host, build(config, activeBackendId));
  cache.set(config.host, { configKey, driver });
  return driver;
}

/** Forgets every cached driver and the local replication engines' caches (tests that rebuild backends between cases). */
export function clearDriverCache(): void {
  cache.clear();
  clearReplicationEngines();
}

const REPLICATION_METHODS = ['replicationTargets', 'enableReplication', 'disableReplication', 'failoverHost', 'freezeBackend', 'thawBackend', 'startDrill', 'endDrill', 'discardFailedOver'] as const;
const SNAPSHOT_METHODS = ['createSnapshot', 'deleteSnapshot', 'listSnapshots'] as const;

const ADOPTING_METHODS = ['listAdoptable', 'adoptVolume', 'releaseAdopted'] as const;

const hasMethods = (driver: object, names: readonly string[]) => names.every((m) => typeof (driver as Record<string, unknown>)[m] === 'function');

/** True when the driver implements ReplicationDriver (whether or not its backend has targets). */
export function isReplicationDriver(driver: VolumeDriver): driver is VolumeDriver & ReplicationDriver {
  return hasMethods(driver, REPLICATION_METHODS);
}

export function isSnapshotDriver(driver: VolumeDriver): driver is VolumeDriver & SnapshotDriver {
  return hasMethods(driver, SNAPSHOT_METHODS);
}

/** The driver as an AdoptingDriver (manage may take over objects it did not make), or undefined. */
export function adoptingDriverFor(driver: VolumeDriver): (VolumeDriver & AdoptingDriver) | undefined {
  return hasMethods(driver, ADOPTING_METHODS) ? (driver as VolumeDriver & AdoptingDriver) : undefined;
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
