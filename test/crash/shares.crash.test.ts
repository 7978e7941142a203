/** The crash matrix of the share machines: share-create, share-delete, and the three migration machines, driver- and host-assisted. */
import { vi } from 'vitest';
import { keepDynamoAcrossRestarts, spareKeptDynamos } from '../support/crash.js';
import { crashMatrix } from './matrix.js';
import { shareScenarios } from './scenarios/shares.js';

vi.mock('../../infra/local/dynamo.js', async (real) => keepDynamoAcrossRestarts(await real<typeof import('../../infra/local/dynamo.js')>()));
vi.mock('../../infra/local/orphaned-dynamo.js', async (real) => spareKeptDynamos(await real<typeof import('../../infra/local/orphaned-dynamo.js')>()));

crashMatrix(
  'shares',
  [
    'share-create',
    'share-delete',
    'share-migration-start (driver-assisted)',
    'share-migration-start (host-assisted)',
    'share-migration-complete (driver-assisted)',
    'share-migration-complete (host-assisted)',
    'share-migration-cancel (driver-assisted)',
    'share-migration-cancel (host-assisted)',
  ],
  shareScenarios,
  // As test/support/manila.ts useFastMigrationEnv: scaled waits, one file per migration_continue slice.
  { FERRY_LOCAL_WAIT_SCALE: '0.01', FERRY_SHARE_MIGRATION_SLICE_MS: '0' },
);
