/**
 * Shared setup of the attachment integration tests (not a test file itself): DynamoDB Local, a
 * local-driver backend `ferry@lvm-a` in a temp dir, and volumes put directly as items with their
 * backend file created, so the attachments code runs against real parts only.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetCommand, PutCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import type { AuthContext } from '../../functions/core/auth.js';
import { db } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import type { BackendConfig, Connector } from '../../functions/drivers/volume/driver.js';
import { clearDriverCache, driverForHost } from '../../functions/drivers/volume/registry.js';
import { putBackend } from '../../functions/volumes/backends.js';
import { volumeGsi1, volumeKey, type Volume } from '../../functions/volumes/model.js';
import { claimKey } from '../../functions/volumes/repo.js';
import { useLocalDynamo } from '../support/dynamo.js';

export const BACKEND = 'ferry@lvm-a';
export const VOLUME_HOST = `${BACKEND}#pool0`;

export const DEMO_AUTH: AuthContext = { userId: 'demo', projectId: 'demo', isAdmin: false, roles: ['member', 'reader'] };
export const ADMIN_AUTH: AuthContext = { userId: 'admin', projectId: 'admin', isAdmin: true, roles: ['admin', 'member', 'reader'] };

export const connector = (host: string, extra: Partial<Connector> = {}): Connector => ({
  initiator: `iqn.2004-10.org:${host}`,
  ip: '10.0.0.5',
  platform: 'x86_64',
  host,
  os_type: 'linux2',
  multipath: false,
  mountpoint: null,
  ...extra,
});

export interface AttachmentTestEnv {
  root: string;
  stop(): Promise<void>;
}

export async function startAttachmentEnv(): Promise<AttachmentTestEnv> {
  const ddb = await useLocalDynamo();
  const root = await mkdtemp(join(tmpdir(), 'ferry-attachments-'));
  const config: BackendConfig = {
    host: BACKEND,
    driver: 'local',
    root,
    pools: [{ name: 'pool0', totalCapacityGb: 1000 }],
    serviceUuid: randomUUID(),
    volumeBackendName: 'lvm-a',
  };
  clearDriverCache();
  await putBackend(config);
  return {
    root,
    stop: async () => {
      clearDriverCache();
      await ddb.stop();
      await rm(root, { recursive: true, force: true });
    },
  };
}

/** A volume item as the volumes code writes it, and its file on the backend. */
export async function putVolume(overrides: Partial<Volume> = {}): Promise<Volume> {
  const id = overrides.id ?? randomUUID();
  const now = new Date().toISOString();
  const volume: Volume = {
    id,
    projectId: 'demo',
    userId: 'demo',
    name: `vol-${id.slice(0, 8)}`,
    description: null,
    size: 1,
    status: 'available',
    attachStatus: 'detached',
    previousStatus: null,
    migrationStatus: null,
    replicationStatus: null,
    volumeTypeId: 'type-default',
    volumeTypeName: 'default',
    multiattach: false,
    bootable: false,
    host: VOLUME_HOST,
    backendName: `volume-${id}`,
    providerLocation: null,
    serviceUuid: null,
    sharedTargets: false,
    availabilityZone: 'nova',
    metadata: {},
    adminMetadata: {},
    attachments: {},
    instances: {},
    connections: {},
    createdAt: now,
    updatedAt: now,
    version: 1,
    ...overrides,
  };
  const driver = await driverForHost(VOLUME_HOST);
  await driver.createVolume({ backendName: volume.backendName, sizeGb: volume.size, pool: 'pool0' });
  await db().send(new PutCommand({ TableName: tableName('volume'), Item: { ...volumeKey(id), ...volumeGsi1(volume), ...volume } }));
  // The volumes code claims every backend object it creates; the audit checks the claim.
  await db().send(new PutCommand({ TableName: tableName('volume'), Item: { ...claimKey(VOLUME_HOST, volume.backendName), volumeId: id, host: BACKEND, backendName: volume.backendName } }));
  return volume;
}

export async function readVolume(id: string): Promise<Volume & Record<string, unknown>> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: volumeKey(id), ConsistentRead: true }));
  return out.Item as Volume & Record<string, unknown>;
}

/** Every attachment item of a volume, tombstones included (`deleted: true`). */
export async function attachmentItems(volumeId: string): Promise<Record<string, unknown>[]> {
  const items: Record<string, unknown>[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const page = await db().send(
      new ScanCommand({
        TableName: tableName('volume'),
        FilterExpression: 'sk = :sk AND volumeId = :v',
        ExpressionAttributeValues: { ':sk': 'ATT', ':v': volumeId },
        ConsistentRead: true,
        ExclusiveStartKey: start,
      }),
    );
    items.push(...(page.Items ?? []));
    start = page.LastEvaluatedKey;
  } while (start);
  return items;
}

export const liveAttachmentItems = async (volumeId: string) => (await attachmentItems(volumeId)).filter((i) => !i.deleted);

/** The backend's connections of one volume, as `host` names. */
export async function backendConnections(volume: Pick<Volume, 'backendName'>): Promise<string[]> {
  const driver = await driverForHost(VOLUME_HOST);
  return (await driver.listConnections())
    .filter((c) => c.backendName === volume.backendName)
    .map((c) => c.host)
    .sort();
}
