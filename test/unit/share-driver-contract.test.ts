/** The share driver contract (test/contracts/share-driver.ts), run by both local kinds on temporary directories. */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LocalShareBackendConfig } from '../../functions/drivers/share/driver.js';
import { LocalShareDriver } from '../../functions/drivers/share/local.js';
import { describeShareDriverContract, type ShareDriverUnderTest } from '../contracts/share-driver.js';

/** A backend of a local kind under a temporary directory; its shares' export locations are directories. */
function localBackend(kind: LocalShareBackendConfig['driver']) {
  return async (host: string): Promise<ShareDriverUnderTest> => {
    const dir = await mkdtemp(join(tmpdir(), `ferry-share-contract-${kind}-`));
    const backend: LocalShareBackendConfig = {
      host,
      driver: kind,
      root: join(dir, host),
      pools: [{ name: 'pool0', totalCapacityGb: 10 }],
      shareBackendName: host.split('@')[1]!,
      protocols: ['NFS', 'CIFS'],
    };
    return {
      driver: new LocalShareDriver(backend),
      backend,
      data: {
        write: (exportLocation, rel, data) => writeFile(join(exportLocation, rel), data),
        read: (exportLocation, rel) => readFile(join(exportLocation, rel), 'utf8'),
      },
      cleanup: () => rm(dir, { recursive: true, force: true }),
    };
  };
}

describeShareDriverContract('local-a', localBackend('local-a'));
describeShareDriverContract('local-b', localBackend('local-b'));
