/**
 * The one place that turns a backend's configuration into its driver (wrapped for fault
 * injection). Callers: volume steps, attachments, the audit.
 *
 * Drivers are cached per backend host, keyed also by the configuration they were built from: an
 * operator's changed record (a new pool, a bigger capacity) takes effect on the next call.
 */
import type { BackendConfig, VolumeDriver } from './driver.js';
import { getBackendRecord } from '../../volumes/backends.js';
import { withFaults } from '../faults.js';
import { LocalVolumeDriver } from './local.js';
import { AwsEbsVolumeDriver } from './aws-ebs.js';

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

/** Forgets every cached driver (tests that rebuild backends between cases). */
export function clearDriverCache(): void {
  cache.clear();
}
