/**
 * Shared setup of the attachment integration tests (not a test file itself): DynamoDB Local, a
 * local-driver backend `ferry@lvm-a` in a temp dir, and volumes put directly as items with their
 * backend file created, so the attachments code runs against real parts only.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, expect } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { AuthContext } from '../../functions/core/auth.js';
import { attachmentKey, connectIntentsOf, type ConnectIntent } from '../../functions/attachments/model.js';
import { runAudit } from '../../functions/audit/audit.js';
import { db, scanAll } from '../../functions/core/db.js';
import { clearFaultCalls, clearFaults, crashedCalls } from '../../functions/core/faults.js';
import { tableName } from '../../functions/core/tables.js';
import type { BackendConfig, Connector } from '../../functions/drivers/volume/driver.js';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { putBackend } from '../../functions/volumes/backends.js';
import { volumeGsi1, volumeKey, type Volume } from '../../functions/volumes/model.js';
import { claimKey } from '../../functions/volumes/repo.js';
import { connectorFor, registerServerAttachmentUsers, volumeFixture } from '../support/attachment-fixtures.js';
import { useLocalDynamo } from '../support/dynamo.js';
import { eventually } from '../support/poll.js';

export const BACKEND = 'ferry@lvm-a';
export const VOLUME_HOST = `${BACKEND}#pool0`;

export const DEMO_AUTH: AuthContext = { userId: 'demo', projectId: 'demo', isAdmin: false, roles: ['member', 'reader'] };
export const ADMIN_AUTH: AuthContext = { userId: 'admin', projectId: 'admin', isAdmin: true, roles: ['admin', 'member', 'reader'] };

/** A connector as Nova's hosts send it, with an initiator named after the host. */
export const connector = (host: string, extra: Partial<Connector> = {}): Connector => connectorFor(host, { initiator: `iqn.2004-10.org:${host}`, ...extra });

/**
 * The file's environment (startAttachmentEnv) for its tests, and around each: the fault table's
 * calls cleared before, its faults cleared after, then (unless `audit: false`) every scenario must
 * end with DynamoDB and the backend agreeing. `setup` runs once the environment is up (the
 * legacy actions' registration, as the Cinder API's entry point does it).
 */
export function useAttachmentEnv(options: { audit?: boolean; setup?: () => void } = {}): void {
  let env: AttachmentTestEnv | undefined;
  beforeAll(async () => {
    env = await startAttachmentEnv();
    options.setup?.();
  });
  afterAll(async () => env?.stop());
  beforeEach(() => clearFaultCalls());
  afterEach(async () => {
    clearFaults();
    if (options.audit !== false) expect((await runAudit()).findings).toEqual([]);
  });
}

export interface AttachmentTestEnv {
  root: string;
  stop(): Promise<void>;
}

async function startAttachmentEnv(): Promise<AttachmentTestEnv> {
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
  // What the Cinder API handler registers: these tests call the routes and the service directly.
  await registerServerAttachmentUsers();
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
  const volume = volumeFixture({
    id,
    name: `vol-${id.slice(0, 8)}`,
    volumeTypeId: 'type-default',
    host: VOLUME_HOST,
    backendName: `volume-${id}`,
    createdAt: now,
    updatedAt: now,
    version: 1,
    ...overrides,
  });
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

/** A moment after every call so far: a recovery pass run with it treats every intent as abandoned. */
export const later = () => new Date(Date.now() + 1000);

/** Waits until a call to the driver's `method` has crashed (a crash-after fault: the process "died" there). */
export const crashed = (method: string) => eventually(() => crashedCalls().some((c) => c.method === method), `a crashed ${method}`);

/** The connect intents the volume item holds (attachments/model.ts `connectIntents`), by intent id. */
export async function connectIntentsOn(volumeId: string): Promise<Record<string, ConnectIntent>> {
  return connectIntentsOf(await readVolume(volumeId));
}

/** Every attachment item of a volume, tombstones included (`deleted: true`). */
export async function attachmentItems(volumeId: string): Promise<Record<string, unknown>[]> {
  return scanAll({ TableName: tableName('volume'), FilterExpression: 'sk = :sk AND volumeId = :v', ExpressionAttributeValues: { ':sk': 'ATT', ':v': volumeId }, ConsistentRead: true });
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

/** The transactions that write the volume item (not the connect intent's, which only checks its version). */
export const writesVolume = (input: { TransactItems?: { Update?: { Key?: Record<string, unknown> } }[] }) =>
  (input.TransactItems ?? []).some((item) => String(item.Update?.Key?.pk ?? '').startsWith('VOL#'));

/**
 * Makes every versioned write of a volume fail with `error` until the returned function is called:
 * the transactions that write it, and its single versioned UpdateItem (a connect or complete from
 * a full-state summary: repo-from-volume.ts), not the intents' writes, which leave the version alone.
 */
export function failVolumeWrites(error: Error): () => void {
  db().middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Parameters<typeof writesVolume>[0] & { Key?: { pk?: string }; ExpressionAttributeValues?: Record<string, unknown> };
      if (context.commandName === 'TransactWriteItemsCommand' && writesVolume(input)) throw error;
      if (context.commandName === 'UpdateItemCommand' && String(input.Key?.pk ?? '').startsWith('VOL#') && input.ExpressionAttributeValues?.[':next'] !== undefined) throw error;
      return next(args);
    },
    { step: 'initialize', name: 'testFailVolumeWrite' },
  );
  return () => db().middlewareStack.remove('testFailVolumeWrite');
}

/** Makes every TransactWriteItems request (that `only` picks) fail with `error` until the returned function is called. */
export function failTransactions(error: Error, only: (input: Parameters<typeof writesVolume>[0]) => boolean = () => true): () => void {
  db().middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'TransactWriteItemsCommand' && only(args.input as Parameters<typeof writesVolume>[0])) throw error;
      return next(args);
    },
    { step: 'initialize', name: 'testFailTransaction' },
  );
  return () => db().middlewareStack.remove('testFailTransaction');
}

/**
 * The attachment's records as a Ferry before summaries carried the full state wrote them: the
 * state on the item (copied from the summary), the summary without `updatedAt` (nor `without`'s
 * fields); the volume's version moved, as every write of a summary moves it.
 */
export async function asWrittenBeforeFullSummaries(volumeId: string, attachmentId: string, without: readonly string[] = []): Promise<void> {
  const summary = (await readVolume(volumeId)).attachments[attachmentId]!;
  const item = { instanceUuid: summary.instanceUuid, attachStatus: summary.status, attachedHost: summary.host, connector: summary.connector ?? null, connectionInfo: summary.connectionInfo ?? null, attachTime: summary.attachedAt, mountpoint: summary.mountpoint ?? null, attachMode: summary.mode };
  const names = Object.fromEntries(Object.keys(item).map((k, i) => [`#f${i}`, k]));
  const values = Object.fromEntries(Object.values(item).map((v, i) => [`:f${i}`, v]));
  await db().send(new UpdateCommand({ TableName: tableName('volume'), Key: attachmentKey(attachmentId), UpdateExpression: `SET ${Object.keys(item).map((_, i) => `#f${i} = :f${i}`).join(', ')}`, ExpressionAttributeNames: names, ExpressionAttributeValues: values }));
  const removes = ['updatedAt', ...without].map((f) => `attachments.#a.${f}`).join(', ');
  await db().send(new UpdateCommand({ TableName: tableName('volume'), Key: volumeKey(volumeId), UpdateExpression: `REMOVE ${removes} ADD version :one`, ExpressionAttributeNames: { '#a': attachmentId }, ExpressionAttributeValues: { ':one': 1 } }));
}
