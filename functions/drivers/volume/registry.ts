/**
 * The one place that turns a backend's configuration into its driver (wrapped for fault
 * injection). Callers: volume steps, attachments, the audit.
 */
import type { BackendConfig, VolumeDriver } from './driver.js';
import { getBackend } from '../../volumes/backends.js';

/** Driver for a backend config. TODO(volume-drivers helper): local and aws-ebs, cached by host, fault-wrapped. */
export function driverFor(config: BackendConfig): VolumeDriver {
  throw new Error(`no volume driver for ${config.driver} yet`);
}

/** Driver for a volume's `host` (`host@backend#pool`) or a backend `host@backend`. */
export async function driverForHost(host: string): Promise<VolumeDriver> {
  return driverFor(await getBackend(host));
}
