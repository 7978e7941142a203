/**
 * The audit finds each kind of mismatch between DynamoDB and the backends. Each case plants one
 * inconsistency on top of a consistent picture (a volume attached on one host) and checks the
 * audit names it, and that the consistent picture alone is clean.
 */
import { DeleteCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { attachmentToItem, CONNECT_INTENT_TIMEOUT_MS, newConnectIntent, newDisconnectIntent, type Attachment } from '../../functions/attachments/model.js';
import { disconnectIntentId } from '../../functions/attachments/removal-by-id.js';
import { writeConnectIntent } from '../../functions/attachments/repo.js';
import { writeDisconnectIntent } from '../../functions/attachments/repo-intents.js';
import { runAudit } from '../../functions/audit/audit.js';
import { db } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';
import { clearDriverCache, driverFor } from '../../functions/drivers/volume/registry.js';
import { putBackend } from '../../functions/volumes/backends.js';
import { volumeGsi1, volumeKey, type Volume } from '../../functions/volumes/model.js';
import { claimKey, poolKey, unmanagedKey } from '../../functions/volumes/repo.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';

let ddb: LocalDynamo;
let root: string;
let backend: BackendConfig;
const T = tableName('volume');

beforeAll(async () => {
  ddb = await useLocalDynamo();
});
afterAll(async () => {
  await ddb.stop();
});

/** A consistent picture: one 1 GiB volume, in-use through one attachment connected on host cmp1. */
async function consistentVolume(): Promise<{ volume: Volume; attachment: Attachment }> {
  const id = randomUUID();
  const attId = randomUUID();
  const now = new Date().toISOString();
  const backendName = `volume-${id}`;
  const driver = driverFor(backend);
  await driver.createVolume({ backendName, sizeGb: 1, pool: 'pool0' });
  const conn = await driver.initializeConnection(backendName, { host: 'cmp1' });
  const volume: Volume = {
    id, projectId: 'demo', userId: 'demo', name: 'v', description: null, size: 1, status: 'in-use', attachStatus: 'attached',
    previousStatus: null, migrationStatus: null, replicationStatus: null, volumeTypeId: 't', volumeTypeName: 'default', multiattach: false,
    bootable: false, host: `${backend.host}#pool0`, backendName, providerLocation: null, serviceUuid: backend.serviceUuid, sharedTargets: false,
    availabilityZone: 'nova', metadata: {}, adminMetadata: {},
    attachments: { [attId]: { status: 'attached', instanceUuid: 'inst-1', host: 'cmp1', mode: 'rw', attachedAt: now, connected: true } },
    instances: { 'inst-1': 1 }, connections: { cmp1: [attId] }, createdAt: now, updatedAt: now, version: 3,
  };
  const attachment: Attachment = {
    id: attId, volumeId: id, projectId: 'demo', instanceUuid: 'inst-1', attachStatus: 'attached', attachMode: 'rw', volumeHost: volume.host,
    connector: { host: 'cmp1' }, attachedHost: 'cmp1', mountpoint: '/dev/vdb', attachTime: now, detachTime: null,
    connectionInfo: { driver_volume_type: conn.driverVolumeType, ...conn.data, attachment_id: attId }, createdAt: now, updatedAt: now, version: 3,
  };
  await db().send(new PutCommand({ TableName: T, Item: { ...volumeKey(id), ...volumeGsi1(volume), ...volume } }));
  await db().send(new PutCommand({ TableName: T, Item: attachmentToItem(attachment) }));
  await db().send(new PutCommand({ TableName: T, Item: { ...claimKey(volume.host!, backendName), volumeId: id, host: backend.host, backendName } }));
  return { volume, attachment };
}

async function clearTable(): Promise<void> {
  const { ScanCommand } = await import('@aws-sdk/lib-dynamodb');
  const out = await db().send(new ScanCommand({ TableName: T }));
  for (const i of out.Items ?? []) await db().send(new DeleteCommand({ TableName: T, Key: { pk: i.pk, sk: i.sk } }));
}

beforeEach(async () => {
  await clearTable();
  clearDriverCache();
  root = mkdtempSync(join(tmpdir(), 'ferry-audit-'));
  backend = { host: 'ferry@audit', driver: 'local', root, pools: [{ name: 'pool0', totalCapacityGb: 100 }], serviceUuid: randomUUID(), volumeBackendName: 'audit' };
  await putBackend(backend);
  return () => rmSync(root, { recursive: true, force: true });
});

const kinds = async () => (await runAudit()).findings.map((f) => f.kind).sort();

describe('ferry audit', () => {
  test('a consistent picture is clean', async () => {
    await consistentVolume();
    const report = await runAudit();
    expect(report.findings).toEqual([]);
    expect(report.checked).toMatchObject({ volumes: 1, attachments: 1, 'backend volumes': 1, 'host connections': 1 });
  });

  test('a volume whose backend object is gone', async () => {
    const { volume } = await consistentVolume();
    await driverFor(backend).deleteVolume(volume.backendName);
    expect(await kinds()).toContain('missing-backend-volume');
  });

  test('a Ferry-named backend object with no record is an orphan; an operator volume is not', async () => {
    await consistentVolume();
    await driverFor(backend).createVolume({ backendName: `volume-${randomUUID()}`, sizeGb: 1, pool: 'pool0' });
    await driverFor(backend).createVolume({ backendName: 'legacy-db-disk', sizeGb: 1, pool: 'pool0' });
    const report = await runAudit();
    expect(report.findings.map((f) => f.kind)).toEqual(['orphan-backend-volume']);
    expect(report.checked['unmanaged backend volumes (ignored)']).toBe(1);
  });

  test('an attachment the volume does not list, and a summary with no attachment', async () => {
    const { volume, attachment } = await consistentVolume();
    await db().send(new PutCommand({ TableName: T, Item: attachmentToItem({ ...attachment, id: randomUUID() }) }));
    await db().send(new UpdateCommand({ TableName: T, Key: volumeKey(volume.id), UpdateExpression: 'SET attachments.#x = :s', ExpressionAttributeNames: { '#x': 'ghost' }, ExpressionAttributeValues: { ':s': { status: 'reserved', instanceUuid: null, host: null, mode: 'null', attachedAt: null, connected: false } } }));
    expect(await kinds()).toEqual(expect.arrayContaining(['orphan-attachment', 'dangling-attachment']));
  });

  test('a connection on the backend that no attachment uses', async () => {
    const { volume } = await consistentVolume();
    await driverFor(backend).initializeConnection(volume.backendName, { host: 'cmp9' });
    expect(await kinds()).toEqual(['orphan-host-connection']);
  });

  test('a connect intent in flight covers the export it is making; once expired it is a pending-connect', async () => {
    const { volume, attachment } = await consistentVolume();
    await driverFor(backend).initializeConnection(volume.backendName, { host: 'cmp7' });
    expect(await writeConnectIntent(attachment, newConnectIntent(attachment.id, { host: 'cmp7' }, new Date().toISOString(), 'planted'))).toBeDefined();
    expect(await kinds()).toEqual([]);
    const report = await runAudit({ now: new Date(Date.now() + CONNECT_INTENT_TIMEOUT_MS + 1000) });
    expect(report.findings).toEqual([expect.objectContaining({ kind: 'pending-connect', resource: `attachment ${attachment.id}`, ref: { attachmentId: attachment.id, volumeId: volume.id, host: 'cmp7' } })]);
  });

  test('a delete by id in flight covers the connection it cut; once its intent expired it is a pending-disconnect', async () => {
    // Prepare: the state a delete by id leaves between its terminate and its transaction
    const { volume, attachment } = await consistentVolume();
    const intent = newDisconnectIntent(disconnectIntentId(attachment.id, 'req-1'), new Date().toISOString());
    expect(await writeDisconnectIntent(attachment.id, intent)).toHaveProperty('written');
    await driverFor(backend).terminateConnection(volume.backendName, { host: 'cmp1' });
    // Act + Assess: in flight, nothing to report; past its expiry, the dead delete
    expect(await kinds()).toEqual([]);
    const report = await runAudit({ now: new Date(Date.now() + CONNECT_INTENT_TIMEOUT_MS + 1000) });
    expect(report.findings).toEqual([
      expect.objectContaining({ kind: 'missing-host-connection', resource: `volume ${volume.id}` }),
      expect.objectContaining({ kind: 'pending-disconnect', resource: `attachment ${attachment.id}`, ref: { attachmentId: attachment.id, volumeId: volume.id, host: 'cmp1' } }),
    ]);
  });

  test('an attachment counted on a host whose backend connection is gone', async () => {
    const { volume } = await consistentVolume();
    await driverFor(backend).terminateConnection(volume.backendName, { host: 'cmp1' });
    expect(await kinds()).toEqual(['missing-host-connection']);
  });

  test('a volume in-use with no attachment, and an instances map that disagrees', async () => {
    const { volume, attachment } = await consistentVolume();
    await db().send(new DeleteCommand({ TableName: T, Key: { pk: `ATT#${attachment.id}`, sk: 'ATT' } }));
    await db().send(new UpdateCommand({ TableName: T, Key: volumeKey(volume.id), UpdateExpression: 'SET attachments = :e, connections = :e', ExpressionAttributeValues: { ':e': {} } }));
    await driverFor(backend).terminateConnection(volume.backendName, { host: 'cmp1' });
    expect(await kinds()).toEqual(['instances-mismatch', 'status-mismatch']);
  });

  test('pool allocation that does not match what its volumes hold', async () => {
    const { volume } = await consistentVolume();
    const pool = `${backend.host}#pool0`;
    await db().send(new UpdateCommand({ TableName: T, Key: volumeKey(volume.id), UpdateExpression: 'SET #c = :c', ExpressionAttributeNames: { '#c': 'capacity' }, ExpressionAttributeValues: { ':c': { pool, gb: 1 } } }));
    await db().send(new PutCommand({ TableName: T, Item: { ...poolKey(pool), allocatedGb: 1, totalGb: 100 } }));
    expect(await kinds()).toEqual([]);
    await db().send(new UpdateCommand({ TableName: T, Key: poolKey(pool), UpdateExpression: 'SET allocatedGb = :a', ExpressionAttributeValues: { ':a': 3 } }));
    expect(await kinds()).toEqual(['capacity-mismatch']);
  });

  test('a claim whose volume is gone, and a volume whose object is unclaimed', async () => {
    const { volume } = await consistentVolume();
    await db().send(new PutCommand({ TableName: T, Item: { ...claimKey(volume.host!, volume.backendName), volumeId: 'someone-else', host: backend.host, backendName: volume.backendName } }));
    expect(await kinds()).toEqual(['missing-claim', 'orphan-claim']);
  });

  test('a Ferry-named object let go of with os-unmanage is not an orphan', async () => {
    await consistentVolume();
    const name = `volume-${randomUUID()}`;
    await driverFor(backend).createVolume({ backendName: name, sizeGb: 1, pool: 'pool0' });
    expect(await kinds()).toEqual(['orphan-backend-volume']);
    await db().send(new PutCommand({ TableName: T, Item: { ...unmanagedKey(backend.host, name), volumeId: 'x', at: new Date().toISOString() } }));
    expect(await kinds()).toEqual([]);
  });

  test('a volume stuck in reserved past the threshold', async () => {
    const { volume } = await consistentVolume();
    const old = new Date(Date.now() - 2 * 3600_000).toISOString();
    await db().send(new UpdateCommand({ TableName: T, Key: volumeKey(volume.id), UpdateExpression: 'SET #s = :r, updatedAt = :t', ExpressionAttributeNames: { '#s': 'status' }, ExpressionAttributeValues: { ':r': 'reserved', ':t': old } }));
    expect(await kinds()).toEqual(['stuck-volume']);
    expect((await runAudit({ stuckAfterSeconds: 3 * 3600 })).findings).toEqual([]);
  });
});
