/** The compute driver contract (test/contracts/compute-driver.ts) for every compute driver: today the local one. */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ComputeHostConfig } from '../../functions/drivers/compute/driver.js';
import { LocalComputeDriver } from '../../functions/drivers/compute/local.js';
import { describeComputeDriverContract } from '../contracts/compute-driver.js';
import { exportLocalVolume, localVolumeBackend } from '../support/compute-driver-fixtures.js';

describeComputeDriverContract('local', async () => {
  const tmp = await mkdtemp(join(tmpdir(), 'ferry-compute-contract-'));
  const hostConfig = (host: string): ComputeHostConfig => ({ host, driver: 'local', root: join(tmp, 'compute'), vcpus: 8, memoryMb: 16384, diskGb: 200 });
  const { volumes } = localVolumeBackend(tmp);
  return {
    driver: new LocalComputeDriver(hostConfig('cmp1')),
    peer: new LocalComputeDriver(hostConfig('cmp2')),
    image: randomBytes(64 * 1024),
    exportVolume: (volumeId, host) => exportLocalVolume(volumes, volumeId, host),
    cleanup: () => rm(tmp, { recursive: true, force: true }),
  };
});
