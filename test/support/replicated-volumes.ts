/**
 * Replicated volumes made directly, as POST /volumes and the create machine would leave them
 * (available, replication_status enabled, on ferry@lvm-r#pool0 of the sandbox), for what needs a
 * thousand of them quickly (bench/failover, the ferry watch test): the items with BatchWriteItem,
 * 25 per request, each with its backend-object claim (volumes/repo.ts claimItem, so the audit finds
 * nothing to report: without it the reconciler's timer pass, ~2 minutes over 10,000 volumes, ran
 * beside the bench's failover and logged 10,000 missing-claim findings), and each volume's backend
 * object as the local driver lays it out: a 1 GiB sparse file on the primary and on each
 * replication target, and the replication markers on the primary (writeReplicationMarkers, one fsync per 200). Through the API it would cost ~3
 * requests and an execution per volume.
 */
import { BatchWriteCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { mkdir, open } from 'node:fs/promises';
import { writeReplicationMarkers } from '../../functions/drivers/volume/local-sites.js';
import { join } from 'node:path';
import { db } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { getBackendItem } from '../../functions/replication/service-repo.js';
import { defaultBackendName, volumeGsi1, volumeKey, type Volume } from '../../functions/volumes/model.js';
import { claimItem } from '../../functions/volumes/repo.js';
import { REPLICATED_BACKEND } from '../../functions/volumes/seed.js';
import { getVolumeTypeByName } from '../../functions/volumes/types.js';

const GIB = 1024 ** 3;

async function sparseFile(path: string): Promise<void> {
  const f = await open(path, 'w');
  try {
    await f.truncate(GIB);
  } finally {
    await f.close();
  }
}

/** The item of an available replicated volume of project demo on `host` (`backend#pool`), as the create machine leaves it. */
export function replicatedVolumeItem(id: string, on: { host: string; serviceUuid: string | null; availabilityZone: string; typeId: string; typeName: string; at: string }): Volume & Record<string, unknown> {
  const { at } = on;
  return {
    ...volumeKey(id),
    ...volumeGsi1({ projectId: 'demo', createdAt: at, id }),
    id, projectId: 'demo', userId: 'demo', name: null, description: null, size: 1, status: 'available', attachStatus: 'detached',
    previousStatus: null, migrationStatus: null, replicationStatus: 'enabled', volumeTypeId: on.typeId, volumeTypeName: on.typeName, multiattach: false,
    bootable: false, host: on.host, backendName: defaultBackendName(id), providerLocation: null, serviceUuid: on.serviceUuid,
    sharedTargets: false, availabilityZone: on.availabilityZone, metadata: {}, adminMetadata: {}, attachments: {}, instances: {}, connections: {},
    capacity: null, managed: false, ownsBackendObject: true, errorReason: null, createdAt: at, updatedAt: at, version: 1,
  };
}

/** Writes volume items with BatchWriteItem, 25 per request, 8 requests at a time, until none is left unprocessed. */
export async function putVolumeItems(items: Record<string, unknown>[]): Promise<void> {
  const writers = 8;
  let next = 0;
  await Promise.all(
    Array.from({ length: writers }, async () => {
      for (;;) {
        const i = next;
        next += 25;
        if (i >= items.length) return;
        let pending: unknown[] = items.slice(i, i + 25).map((Item) => ({ PutRequest: { Item } }));
        while (pending.length) {
          const out = await db().send(new BatchWriteCommand({ RequestItems: { [tableName('volume')]: pending as never } }));
          pending = out.UnprocessedItems?.[tableName('volume')] ?? [];
        }
      }
    }),
  );
}

/** Makes `n` replicated volumes of project demo; returns their ids and the backend roots that hold them. */
export async function seedReplicatedVolumes(n: number): Promise<{ ids: string[]; roots: string[] }> {
  const { config } = await getBackendItem(REPLICATED_BACKEND);
  const type = await getVolumeTypeByName('replicated');
  const roots = [config.root!, ...(config.replicationDevices ?? []).map((d) => d.root!)];
  for (const r of roots) await mkdir(join(r, 'pool0'), { recursive: true });
  const at = new Date().toISOString();
  const ids = Array.from({ length: n }, () => randomUUID());
  const on = { host: `${REPLICATED_BACKEND}#pool0`, serviceUuid: config.serviceUuid, availabilityZone: 'nova', typeId: type.id, typeName: type.name, at };
  const items = ids.map((id) => replicatedVolumeItem(id, on));
  await putVolumeItems(items.flatMap((v) => [v, claimItem(v, on.host).Put!.Item!]));
  const enabledAt = Date.now();
  for (let i = 0; i < ids.length; i += 200) {
    const names = ids.slice(i, i + 200).map(defaultBackendName);
    await Promise.all([...names.flatMap((name) => roots.map((r) => sparseFile(join(r, 'pool0', name)))), writeReplicationMarkers(roots[0], names, enabledAt, 32)]);
  }
  return { ids, roots };
}
