/**
 * Turns a compute host's configuration into its driver, wrapped for fault injection
 * (`withFaults('compute', host, ...)`: a fault names the compute host as its `backend`), cached per
 * host and keyed by the configuration it was built from, like the volume and share registries.
 */
import { ConfigurationError } from '../../core/errors.js';
import { withFaults } from '../../core/faults.js';
import type { ComputeDriver, ComputeHostConfig } from './driver.js';
import { LocalComputeDriver } from './local.js';

export const COMPUTE_FAULT_KIND = 'compute';

const cache = new Map<string, { configKey: string; driver: ComputeDriver }>();

function build(config: ComputeHostConfig): ComputeDriver {
  switch (config.driver) {
    case 'local':
      return new LocalComputeDriver(config);
    default:
      throw new ConfigurationError(`compute host ${config.host}: unknown compute driver ${JSON.stringify((config as { driver: unknown }).driver)} (expected 'local')`);
  }
}

function configKeyOf(config: ComputeHostConfig): string {
  return JSON.stringify([
    config.host,
    config.driver,
    config.root,
    config.vcpus,
    config.memoryMb,
    config.diskGb,
    config.down ?? false,
    [...(config.allowedVolumeRoots ?? [])].sort(),
  ]);
}

export function computeDriverFor(config: ComputeHostConfig): ComputeDriver {
  const configKey = configKeyOf(config);
  const cached = cache.get(config.host);
  if (cached && cached.configKey === configKey) return cached.driver;
  const driver = withFaults(COMPUTE_FAULT_KIND, config.host, build(config));
  cache.set(config.host, { configKey, driver });
  return driver;
}

export function clearComputeDriverCache(): void {
  cache.clear();
}
