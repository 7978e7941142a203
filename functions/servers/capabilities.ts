/**
 * What a compute host's driver can do, checked by the API before an operation starts (nothing is
 * written, no machine runs): a live migration needs drivers that live-migrate, a swap a driver that
 * swaps volumes, and a volume is attached (or booted from, or swapped in) only where the host's
 * driver can connect its backend's `driver_volume_type`. The drivers still refuse deep inside; this
 * turns the refusal into a 400 up front instead of a failed operation with a fault.
 */
import { BadRequest } from '../core/errors.js';
import type { ComputeDriverCapabilities } from '../drivers/compute/driver.js';
import { driverVolumeTypeOfHost } from '../volumes/backends.js';
import type { Volume } from '../volumes/model.js';
import { driverOfHost } from './engine.js';

async function capabilitiesOf(host: string): Promise<ComputeDriverCapabilities> {
  return (await driverOfHost(host)).capabilities();
}

/** @throws BadRequest when the driver of `host` cannot live-migrate (either end of the move). */
export async function requireLiveMigration(host: string): Promise<void> {
  if (!(await capabilitiesOf(host)).liveMigration) {
    throw new BadRequest(`Migration pre-check error: the compute driver of host ${host} does not support live migration.`);
  }
}

/** @throws BadRequest when the driver of `host` cannot swap a guest's volume. */
export async function requireSwapVolume(host: string): Promise<void> {
  if (!(await capabilitiesOf(host)).swapVolume) {
    throw new BadRequest(`Swapping a volume is not supported by the compute driver of host ${host}.`);
  }
}

/**
 * @throws BadRequest when the driver of `host` cannot connect the volume's `driver_volume_type`.
 * A volume without a backend host yet (never scheduled) is left to the checks of its status.
 */
export async function requireVolumeConnectable(host: string, volume: Pick<Volume, 'id' | 'host'>): Promise<void> {
  if (!volume.host) return;
  const [caps, volumeType] = await Promise.all([capabilitiesOf(host), driverVolumeTypeOfHost(volume.host)]);
  if (!caps.volumeTypes.includes(volumeType)) {
    throw new BadRequest(`Invalid volume: volume ${volume.id} (driver_volume_type ${volumeType}) cannot be connected by the compute driver of host ${host}.`);
  }
}
