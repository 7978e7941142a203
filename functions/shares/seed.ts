/**
 * The share sandbox the local stack seeds on every start: backends ferry@nfs-a and ferry@nfs-b
 * (kind local-a: driver-assisted migration between them), ferry@nfs-c (kind local-b), each one pool
 * `pool0` of 1000 GiB with its root under <dataDir>/shares/<name>, and the share type `default`
 * (driver_handles_share_servers False). Idempotent: conditional writes; an existing record is kept.
 */
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { db, isConditionFailure } from '../core/db.js';
import { Conflict } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { LocalShareBackendConfig } from '../drivers/share/driver.js';
import { shareBackendKey } from './model.js';
import { createShareType, DEFAULT_SHARE_TYPE } from './types.js';

export const SHARE_POOL_GB = 1000;

export function sandboxShareBackends(dataDir: string): LocalShareBackendConfig[] {
  return (
    [
      ['nfs-a', 'local-a'],
      ['nfs-b', 'local-a'],
      ['nfs-c', 'local-b'],
    ] as const
  ).map(([name, driver]) => ({
    host: `ferry@${name}`,
    driver,
    root: join(dataDir, 'shares', name),
    pools: [{ name: 'pool0', totalCapacityGb: SHARE_POOL_GB }],
    shareBackendName: name,
    protocols: ['NFS', 'CIFS'],
  }));
}

export async function seedShareSandbox(options: { dataDir: string }): Promise<void> {
  for (const b of sandboxShareBackends(options.dataDir)) {
    try {
      await db().send(
        new PutCommand({ TableName: tableName('share'), Item: { ...shareBackendKey(b.host), gsi1pk: 'SBACKENDS', gsi1sk: b.host, config: b }, ConditionExpression: 'attribute_not_exists(pk)' }),
      );
      await mkdir(b.root, { recursive: true });
    } catch (e) {
      if (!isConditionFailure(e)) throw e;
    }
  }
  try {
    await createShareType({ name: DEFAULT_SHARE_TYPE, description: 'Default share type', extraSpecs: { driver_handles_share_servers: 'False' } });
  } catch (e) {
    if (!(e instanceof Conflict)) throw e;
  }
}
