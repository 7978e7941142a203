/**
 * The sandbox the local stack seeds on every start: projects admin and demo, backends
 * ferry@lvm-a and ferry@lvm-b (local driver under <dataDir>/backends/<name>, one pool `pool0` of
 * 1000 GiB each), the replicated backend ferry@lvm-r (same, plus two replication targets `site-b`
 * and `site-c` under <dataDir>/backends/lvm-r-site-<x>), volume types `default`, `multiattach`
 * and `replicated` (replication_enabled='<is> True', volume_backend_name lvm-r).
 *
 * Idempotent: every write is conditional (a record that exists is left as it is, so an operator's
 * later change survives restarts), and the types' name claims make a second seed a no-op.
 */
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { db, isConditionFailure } from '../core/db.js';
import { Conflict } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { BackendConfig } from '../drivers/volume/driver.js';
import { initialServiceState } from './backends.js';
import { createVolumeType, IS_TRUE } from './types.js';

export const SANDBOX_PROJECTS = ['admin', 'demo'] as const;
export const SANDBOX_POOL_GB = 1000;

/** Stable service uuids, so a reseeded stack reports the same `service_uuid` on its volumes. */
export const SANDBOX_SERVICE_UUIDS: Record<string, string> = {
  'ferry@lvm-a': '6b1a6d2e-3c0f-4f0a-9a51-1f3c2c7e0a01',
  'ferry@lvm-b': '6b1a6d2e-3c0f-4f0a-9a51-1f3c2c7e0b02',
  'ferry@lvm-r': '6b1a6d2e-3c0f-4f0a-9a51-1f3c2c7e0c03',
};

/** The replicated sandbox backend and its replication targets (seed 001). */
export const REPLICATED_BACKEND = 'ferry@lvm-r';
export const REPLICATION_TARGETS = ['site-b', 'site-c'] as const;
export const REPLICATED_TYPE = 'replicated';

export function sandboxBackends(dataDir: string): BackendConfig[] {
  const plain: BackendConfig[] = ['lvm-a', 'lvm-b'].map((name) => ({
    host: `ferry@${name}`,
    driver: 'local' as const,
    root: join(dataDir, 'backends', name),
    pools: [{ name: 'pool0', totalCapacityGb: SANDBOX_POOL_GB }],
    serviceUuid: SANDBOX_SERVICE_UUIDS[`ferry@${name}`]!,
    volumeBackendName: name,
  }));
  const replicated: BackendConfig = {
    host: REPLICATED_BACKEND,
    driver: 'local',
    root: join(dataDir, 'backends', 'lvm-r'),
    pools: [{ name: 'pool0', totalCapacityGb: SANDBOX_POOL_GB }],
    serviceUuid: SANDBOX_SERVICE_UUIDS[REPLICATED_BACKEND]!,
    volumeBackendName: 'lvm-r',
    replicationDevices: REPLICATION_TARGETS.map((id) => ({ backend_id: id, root: join(dataDir, 'backends', `lvm-r-${id}`) })),
  };
  return [...plain, replicated];
}

/** Puts the item unless it exists; true when it was put. */
async function putIfAbsent(item: Record<string, unknown>): Promise<boolean> {
  try {
    await db().send(new PutCommand({ TableName: tableName('volume'), Item: item, ConditionExpression: 'attribute_not_exists(pk)' }));
    return true;
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    return false;
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
    // The service state starts with the backend, so every later change can be a condition on it.
    const created = await putIfAbsent({ pk: `BACKEND#${b.host}`, sk: 'BACKEND', gsi1pk: 'BACKENDS', gsi1sk: b.host, config: b, service: initialServiceState(b) });
    // A new backend's sites exist from the start (the local driver calls a missing target
    // unreachable). Only when the backend is new: a site an operator (or a test) removed to stage
    // an outage stays removed across restarts.
    if (created) for (const root of [b.root, ...(b.replicationDevices ?? []).map((d) => d.root)]) if (root) await mkdir(root, { recursive: true });
  }
  await typeIfAbsent({ name: 'default', description: 'Default Volume Type' });
  await typeIfAbsent({ name: 'multiattach', description: 'Volumes that can be attached to several instances', extraSpecs: { multiattach: IS_TRUE } });
  await typeIfAbsent({ name: REPLICATED_TYPE, description: 'Volumes kept in sync on the replication targets of ferry@lvm-r', extraSpecs: { replication_enabled: IS_TRUE, volume_backend_name: 'lvm-r' } });
}
