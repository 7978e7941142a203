/**
 * Turns a share backend's configuration into its driver, wrapped for fault injection
 * (`withFaults('share', host, ...)`), cached per host and configuration like the volume registry.
 * Each kind's driver reads its own settings off the record (local.ts localShareBackend, aws-efs-sdk.ts
 * awsEfsShareBackend), so nothing above the drivers ever does.
 */
import { ConfigurationError } from '../../core/errors.js';
import { withFaults } from '../../core/faults.js';
import { AwsEfsShareDriver } from './aws-efs.js';
import type { ShareBackendConfig, ShareDriver, ShareDriverKind } from './driver.js';
import { LocalShareDriver, localShareBackend } from './local.js';

const cache = new Map<string, { configKey: string; driver: ShareDriver }>();

const BUILDERS: Record<ShareDriverKind, (config: ShareBackendConfig) => ShareDriver> = {
  'local-a': (config) => new LocalShareDriver(localShareBackend(config)),
  'local-b': (config) => new LocalShareDriver(localShareBackend(config)),
  // Its record is checked by the driver (awsEfsShareBackend); its SDKs load on the first AWS call.
  'aws-efs': (config) => new AwsEfsShareDriver(config),
};

function build(config: ShareBackendConfig): ShareDriver {
  const builder = Object.hasOwn(BUILDERS, config.driver) ? BUILDERS[config.driver] : undefined;
  if (!builder) {
    throw new ConfigurationError(`share backend ${config.host}: unknown share driver ${JSON.stringify(config.driver)} (expected one of ${Object.keys(BUILDERS).join(', ')})`);
  }
  return builder(config);
}

export function shareDriverFor(config: ShareBackendConfig): ShareDriver {
  // The whole record: whatever a kind's settings are, a change of any of them builds a new driver.
  const configKey = JSON.stringify(config);
  const cached = cache.get(config.host);
  if (cached && cached.configKey === configKey) return cached.driver;
  const driver = withFaults('share', config.host, build(config));
  cache.set(config.host, { configKey, driver });
  return driver;
}
