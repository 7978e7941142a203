/** Backend configurations of the local volume driver for driver tests on temp directories. */
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';

/** A replicated local backend `ferry@rep` with pool `pool0` under `root`, one replication target per entry of `targets` (backend_id -> root). */
export function replicatedLocalBackend(root: string, targets: Record<string, string>): BackendConfig {
  return {
    host: 'ferry@rep',
    driver: 'local',
    root,
    pools: [{ name: 'pool0', totalCapacityGb: 100 }],
    serviceUuid: '33333333-3333-4333-8333-333333333333',
    volumeBackendName: 'rep',
    replicationDevices: Object.entries(targets).map(([backend_id, targetRoot]) => ({ backend_id, root: targetRoot })),
  };
}
