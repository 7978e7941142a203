/**
 * Turns a share backend's configuration into its driver, wrapped for fault injection
 * (`withFaults('share', host, ...)`), cached per host and configuration like the volume registry.
 */
import { withFaults } from '../../core/faults.js';
import type { ShareBackendConfig, ShareDriver } from './driver.js';
import { LocalShareDriver } from './local.js';

const cache = new Map<string, { configKey: string; driver: ShareDriver }>();

function build(config: ShareBackendConfig): ShareDriver {
  switch (config.driver) {
    case 'local-a':
    case 'local-b':
      return new LocalShareDriver(config);
    default:
      throw new Error(`share backend ${config.host}: unknown share driver ${JSON.stringify((config as { driver: unknown }).driver)} (expected 'local-a' or 'local-b')`);
  }
}

export function shareDriverFor(config: ShareBackendConfig): ShareDriver {
  const configKey = JSON.stringify([config.host, config.driver, config.root, config.pools.map((p) => [p.name, p.totalCapacityGb]), config.protocols]);
  const cached = cache.get(config.host);
  if (cached && cached.configKey === configKey) return cached.driver;
  const driver = withFaults('share', config.host, build(config));
  cache.set(config.host, { configKey, driver });
  return driver;
}

export function clearShareDriverCache(): void {
  cache.clear();
}
