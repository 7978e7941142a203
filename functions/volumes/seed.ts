/**
 * The sandbox the local stack seeds on every start: projects admin and demo, backends
 * ferry@lvm-a and ferry@lvm-b (local driver under <dataDir>/backends/<name>, one pool `pool0` of
 * 1000 GiB each), volume types `default` and `multiattach`.
 *
 * Idempotent: every write is conditional (a record that exists is left as it is, so an operator's
 * later change survives restarts), and the types' name claims make a second seed a no-op.
 */
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { join } from 'node:path';
import { db, isConditionFailure } from '../core/db.js';
import { Conflict } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { BackendConfig } from '../drivers/volume/driver.js';
import { createVolumeType, IS_TRUE } from './types.js';

export const SANDBOX_PROJECTS = ['admin', 'demo'] as const;
export const SANDBOX_POOL_GB = 1000;

/** Stable service uuids, so a reseeded stack reports the same `service_uuid` on its volumes. */
export const SANDBOX_SERVICE_UUIDS: Record<string, string> = {
  'ferry@lvm-a': '6b1a6d2e-3c0f-4f0a-9a51-1f3c2c7e0a01',
  'ferry@lvm-b': '6b1a6d2e-3c0f-4f0a-9a51-1f3c2c7e0b02',
};

export function sandboxBackends(dataDir: string): BackendConfig[] {
  return ['lvm-a', 'lvm-b'].map((name) => ({
    host: `ferry@${name}`,
    driver: 'local' as const,
    root: join(dataDir, 'backends', name),
    pools: [{ name: 'pool0', totalCapacityGb: SANDBOX_POOL_GB }],
    serviceUuid: SANDBOX_SERVICE_UUIDS[`ferry@${name}`]!,
    volumeBackendName: name,
  }));
}

async function putIfAbsent(item: Record<string, unknown>): Promise<void> {
  try {
    await db().send(new PutCommand({ TableName: tableName('volume'), Item: item, ConditionExpression: 'attribute_not_exists(pk)' }));
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
  }
}

async function typeIfAbsent(input: Parameters<typeof createVolumeType>[0]): Promise<void> {
  try {
    await createVolumeType(input);
  } catch (e) {
    if (!(e instanceof Conflict)) throw e;
  }
}

export async function seedVolumeSandbox(options: { dataDir: string }): Promise<void> {
  const at = new Date().toISOString();
  for (const p of SANDBOX_PROJECTS) {
    await putIfAbsent({ pk: `PROJECT#${p}`, sk: 'PROJECT', gsi1pk: 'PROJECTS', gsi1sk: p, id: p, name: p, createdAt: at });
  }
  for (const b of sandboxBackends(options.dataDir)) {
    // Same shape as backends.ts putBackend, but conditional so a restart keeps an operator's edits.
    await putIfAbsent({ pk: `BACKEND#${b.host}`, sk: 'BACKEND', gsi1pk: 'BACKENDS', gsi1sk: b.host, config: b });
  }
  await typeIfAbsent({ name: 'default', description: 'Default Volume Type' });
  await typeIfAbsent({ name: 'multiattach', description: 'Volumes that can be attached to several instances', extraSpecs: { multiattach: IS_TRUE } });
}
