/** The local volume backend the local compute driver's tests export volumes from (contract and local-only tests). */
import { join } from 'node:path';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';
import { LocalVolumeDriver } from '../../functions/drivers/volume/local.js';

export function localVolumeBackend(tmp: string): { volumes: LocalVolumeDriver; volumeConfig: BackendConfig } {
  const volumeConfig: BackendConfig = {
    host: 'ferry@lvm-a',
    driver: 'local',
    root: join(tmp, 'volumes'),
    pools: [{ name: 'pool0', totalCapacityGb: 100 }],
    serviceUuid: '11111111-1111-4111-8111-111111111111',
    volumeBackendName: 'lvm-a',
  };
  return { volumes: new LocalVolumeDriver(volumeConfig), volumeConfig };
}

/** A volume (made on first use, 1 GiB) exported to `host`, as Nova holds its connection_info (nested, with serial). */
export async function exportLocalVolume(volumes: LocalVolumeDriver, volumeId: string, host: string): Promise<Record<string, unknown>> {
  const backendName = `volume-${volumeId}`;
  if (!(await volumes.getVolume(backendName))) await volumes.createVolume({ backendName, sizeGb: 1, pool: 'pool0' });
  const props = await volumes.initializeConnection(backendName, { host });
  return { driver_volume_type: props.driverVolumeType, data: props.data, serial: volumeId };
}
