/**
 * Cinder's `attachment_deletion_allowed` (Bug #2004555) asked inside the delete's transaction: the
 * ConditionChecks on the cells' instance items (servers/attachment-users.ts), not a read before
 * it. The server's side is written through its own path (servers/repo.ts updateServer), so the
 * instance item's record of the attachments in use is the one Nova's flows keep.
 */
import { randomUUID } from 'node:crypto';
import { DeleteCommand, GetCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, describe, expect, test } from 'vitest';
import { getAttachmentRecord } from '../../functions/attachments/repo.js';
import { createAttachment, deleteAttachment, getAttachment } from '../../functions/attachments/service.js';
import { forgetAttachment } from '../../functions/attachments/volume-records.js';
import type { AuthContext } from '../../functions/core/auth.js';
import type { CellMapping } from '../../functions/compute/model.js';
import { db, dynamoRequests, resetDynamoRequests } from '../../functions/core/db.js';
import { Conflict } from '../../functions/core/errors.js';
import { clearFaultCalls, faultCalls } from '../../functions/core/faults.js';
import { tableName } from '../../functions/core/tables.js';
import { instanceKey, type BlockDeviceMapping, type Instance } from '../../functions/servers/model.js';
import { updateServer } from '../../functions/servers/repo.js';
import { backendConnections, connector, DEMO_AUTH, putVolume, readVolume, useAttachmentEnv } from './attachments-support.js';

useAttachmentEnv({ audit: false });

const CELL1: CellMapping = { uuid: 'cell-in-use-1', name: 'cell1', table: 'cell1', createdAt: '2026-01-01T00:00:00.000Z' };
const SERVICE_AUTH: AuthContext = { userId: 'nova', projectId: 'service', isAdmin: true, roles: ['admin', 'service'] };

/** Instance items these tests put, removed after each (the cells' tables are shared by the file). */
const instances: string[] = [];
afterEach(async () => {
  await Promise.all(instances.splice(0).map((uuid) => db().send(new DeleteCommand({ TableName: tableName('cell1'), Key: instanceKey(uuid) }))));
});

/** An instance item in cell1 as an older Ferry wrote it: no record of the attachments its BDMs use. */
async function putInstance(uuid: string, extra: Record<string, unknown> = {}): Promise<void> {
  instances.push(uuid);
  const instance = { uuid, projectId: 'demo', createdAt: '2026-01-01T00:00:00.000Z', updatedAt: '2026-01-01T00:00:00.000Z', version: 1, ...extra };
  await db().send(new PutCommand({ TableName: tableName('cell1'), Item: { ...instanceKey(uuid), ...instance } }));
}

const bdmOf = (instanceUuid: string, volumeId: string, attachmentId: string): BlockDeviceMapping => ({
  uuid: randomUUID(),
  instanceUuid,
  sourceType: 'volume',
  destinationType: 'volume',
  volumeId,
  imageId: null,
  bootIndex: null,
  deviceName: '/dev/vdb',
  attachmentId,
  connectionInfo: null,
  deleteOnTermination: false,
  tag: null,
  volumeSize: 1,
  createdAt: '2026-01-01T00:00:00.000Z',
  updatedAt: '2026-01-01T00:00:00.000Z',
});

/** The server's side of an attach: its BDM of the attachment, written as Nova's flows write it. */
async function serverAttaches(instanceUuid: string, bdm: BlockDeviceMapping): Promise<void> {
  await updateServer(CELL1, instanceUuid, ({ instance }) => ({ instance, putBdms: [bdm] }));
}

/** A volume with an attachment of `instanceUuid` connected on host cmp1 (connection_info set), made by the demo user. */
async function connectedAttachment(instanceUuid: string) {
  const volume = await putVolume();
  const attachment = await createAttachment({ auth: DEMO_AUTH, volumeId: volume.id, instanceUuid, connector: connector('cmp1') });
  expect(attachment.connectionInfo).not.toBeNull();
  return { volume, attachment };
}

const IN_USE = (instanceUuid: string) => `Detach volume from instance ${instanceUuid} using the Compute API`;

/** Runs `hook` once, just before the next TransactWriteItems request is sent (its own requests pass). */
function beforeNextTransaction(hook: () => Promise<void>): void {
  let fired = false;
  db().middlewareStack.add(
    (next, context) => async (args) => {
      if (!fired && context.commandName === 'TransactWriteItemsCommand') {
        fired = true;
        await hook();
      }
      return next(args);
    },
    { step: 'initialize', name: 'testBeforeNextTransaction' },
  );
}

describe("the delete's in-use check is a condition of its transaction", () => {
  test('a server that attaches between the delete\'s reads and its transaction: 409, and nothing is deleted', async () => {
    // Prepare
    const server = randomUUID();
    await putInstance(server, { attachmentsInUse: {} });
    const { volume, attachment } = await connectedAttachment(server);
    const before = await readVolume(volume.id);
    // The server's BDM is written after the delete read the attachment and the volume: a check
    // made by a read before the transaction finds no BDM and deletes an attachment in use.
    beforeNextTransaction(() => serverAttaches(server, bdmOf(server, volume.id, attachment.id)));
    try {
      // Act
      const refused = deleteAttachment({ auth: DEMO_AUTH, attachmentId: attachment.id });
      // Assess
      await expect(refused).rejects.toThrow(Conflict);
      await expect(refused).rejects.toThrow(IN_USE(server));
    } finally {
      db().middlewareStack.remove('testBeforeNextTransaction');
    }
    expect(await getAttachment({ auth: DEMO_AUTH, attachmentId: attachment.id })).toMatchObject({ id: attachment.id, attachStatus: 'attaching' });
    expect(await readVolume(volume.id)).toEqual(before);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
  });

  test.each([
    ['from the volume as the connect left it: the transaction alone', false, { TransactWriteItemsCommand: 1 }],
    // removal-by-id.ts: the disconnect intent returning the attachment, the volume read with the server's records (the 409), the intent cleared
    ['by id, in a process that has not seen the attachment: its intent, the read that answers, the intent cleared', true, { UpdateItemCommand: 2, TransactGetItemsCommand: 1 }],
  ])('refused without reading the server, %s', async (_, unseen, expected) => {
    // Prepare
    const server = randomUUID();
    await putInstance(server, { attachmentsInUse: {} });
    const { volume, attachment } = await connectedAttachment(server);
    await serverAttaches(server, bdmOf(server, volume.id, attachment.id));
    if (unseen) forgetAttachment(attachment.id);
    resetDynamoRequests();
    // Act
    await expect(deleteAttachment({ auth: DEMO_AUTH, attachmentId: attachment.id })).rejects.toThrow(IN_USE(server));
    // Assess
    expect(dynamoRequests().byCommand).toEqual(expected);
  });

  test('once the server detached (its BDM deleted), the same delete goes through: 2 requests, the fence included', async () => {
    // Prepare
    const server = randomUUID();
    await putInstance(server, { attachmentsInUse: {} });
    const { volume, attachment } = await connectedAttachment(server);
    const bdm = bdmOf(server, volume.id, attachment.id);
    await serverAttaches(server, bdm);
    await updateServer(CELL1, server, ({ instance }) => ({ instance, deleteBdms: [bdm.uuid] }));
    resetDynamoRequests();
    // Act
    const remaining = await deleteAttachment({ auth: DEMO_AUTH, attachmentId: attachment.id });
    // Assess: the transaction with its ConditionChecks (from the volume as the connect left it, no
    // read of the attachment), the fence after the terminate (it was the host's last connection);
    // no read of the server's records.
    expect(dynamoRequests().byCommand).toEqual({ TransactWriteItemsCommand: 1, UpdateItemCommand: 1 });
    expect(remaining).toEqual([]);
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, connections: {} });
    expect(await backendConnections(volume)).toEqual([]);
  });

  test('by id, refused while the server used it, then again once it detached: 3 requests (the ended intent left an empty map, written whole again)', async () => {
    // Prepare
    const server = randomUUID();
    await putInstance(server, { attachmentsInUse: {} });
    const { volume, attachment } = await connectedAttachment(server);
    const bdm = bdmOf(server, volume.id, attachment.id);
    await serverAttaches(server, bdm);
    forgetAttachment(attachment.id);
    await expect(deleteAttachment({ auth: DEMO_AUTH, attachmentId: attachment.id })).rejects.toThrow(IN_USE(server));
    await updateServer(CELL1, server, ({ instance }) => ({ instance, deleteBdms: [bdm.uuid] }));
    forgetAttachment(attachment.id);
    resetDynamoRequests();
    // Act
    await deleteAttachment({ auth: DEMO_AUTH, attachmentId: attachment.id });
    // Assess: the intent, the volume with the server's records, the transaction after the terminate
    expect(dynamoRequests().byCommand).toEqual({ UpdateItemCommand: 1, TransactGetItemsCommand: 1, TransactWriteItemsCommand: 1 });
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, connections: {} });
    expect(await backendConnections(volume)).toEqual([]);
  });

  test("Nova's service user deletes an attachment its server still uses (upstream asks only other callers)", async () => {
    // Prepare
    const server = randomUUID();
    await putInstance(server, { attachmentsInUse: {} });
    const { volume, attachment } = await connectedAttachment(server);
    await serverAttaches(server, bdmOf(server, volume.id, attachment.id));
    // Act
    await deleteAttachment({ auth: SERVICE_AUTH, attachmentId: attachment.id });
    // Assess
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {} });
  });

  test('an instance record from before it kept its attachments in use: the first delete writes them from its BDMs, then the condition answers', async () => {
    // Prepare: the BDM written as an older Ferry did, the instance item without attachmentsInUse
    const server = randomUUID();
    await putInstance(server);
    const { volume, attachment } = await connectedAttachment(server);
    const bdm = bdmOf(server, volume.id, attachment.id);
    await db().send(new PutCommand({ TableName: tableName('cell1'), Item: { pk: `INSTANCE#${server}`, sk: `BDM#${bdm.uuid}`, ...bdm } }));
    // Act / Assess: refused (the record now says what its BDMs say), the version unmoved
    await expect(deleteAttachment({ auth: DEMO_AUTH, attachmentId: attachment.id })).rejects.toThrow(IN_USE(server));
    const stored = (await db().send(new GetCommand({ TableName: tableName('cell1'), Key: instanceKey(server), ConsistentRead: true }))).Item as Instance;
    expect(stored).toMatchObject({ attachmentsInUse: { [attachment.id]: volume.id }, version: 1 });
    // An older record whose BDMs do not use it: the delete goes through.
    await db().send(new DeleteCommand({ TableName: tableName('cell1'), Key: { pk: `INSTANCE#${server}`, sk: `BDM#${bdm.uuid}` } }));
    await db().send(new UpdateCommand({ TableName: tableName('cell1'), Key: instanceKey(server), UpdateExpression: 'REMOVE attachmentsInUse' }));
    await deleteAttachment({ auth: DEMO_AUTH, attachmentId: attachment.id });
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {} });
  });
});

/**
 * By id (removal-by-id.ts) the host's connection is terminated before the transaction: the volume
 * read that comes before the terminate reads the server's records too (one TransactGetItems), so
 * a server that uses the attachment is refused before anything is cut; one that attaches after
 * that read still fails the transaction's conditions, and the connection is made again.
 */
describe('the in-use check of a delete by id, whose terminate comes before its transaction', () => {
  const connectionCalls = () => faultCalls().map((c) => c.method).filter((m) => m.endsWith('Connection'));

  test.each([
    ['that records its attachments in use', { attachmentsInUse: {} }],
    ['from before it kept its attachments in use (its BDMs recorded onto it first, then read again)', {}],
  ])('a server %s and uses the attachment: 409, and its connection never cut', async (_, extra) => {
    // Prepare
    const server = randomUUID();
    await putInstance(server, extra);
    const { volume, attachment } = await connectedAttachment(server);
    const bdm = bdmOf(server, volume.id, attachment.id);
    if ('attachmentsInUse' in extra) await serverAttaches(server, bdm);
    else await db().send(new PutCommand({ TableName: tableName('cell1'), Item: { pk: `INSTANCE#${server}`, sk: `BDM#${bdm.uuid}`, ...bdm } }));
    forgetAttachment(attachment.id);
    clearFaultCalls();
    // Act
    await expect(deleteAttachment({ auth: DEMO_AUTH, attachmentId: attachment.id })).rejects.toThrow(IN_USE(server));
    // Assess
    expect(connectionCalls()).toEqual([]);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect(await getAttachmentRecord(attachment.id)).toMatchObject({ attachStatus: 'attaching', pendingDisconnect: {} });
    expect(await readVolume(volume.id)).toMatchObject({ connections: { cmp1: [attachment.id] } });
  });

  test('a server that attaches between the read and the transaction: 409, the connection made again, nothing deleted', async () => {
    // Prepare
    const server = randomUUID();
    await putInstance(server, { attachmentsInUse: {} });
    const { volume, attachment } = await connectedAttachment(server);
    forgetAttachment(attachment.id);
    // After the read that found the server not using it, and after the terminate: the transaction's condition refuses
    beforeNextTransaction(() => serverAttaches(server, bdmOf(server, volume.id, attachment.id)));
    clearFaultCalls();
    try {
      // Act
      await expect(deleteAttachment({ auth: DEMO_AUTH, attachmentId: attachment.id })).rejects.toThrow(IN_USE(server));
    } finally {
      db().middlewareStack.remove('testBeforeNextTransaction');
    }
    // Assess: cut by the terminate, made again by restoreHost
    expect(connectionCalls()).toEqual(['terminateConnection', 'initializeConnection']);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect(await getAttachmentRecord(attachment.id)).toMatchObject({ attachStatus: 'attaching', pendingDisconnect: {} });
    expect(await readVolume(volume.id)).toMatchObject({ connections: { cmp1: [attachment.id] }, attachments: { [attachment.id]: expect.anything() } });
  });

  test("an instance the attachment's summary alone names (os-attach gave it after the create): the delete by id still reads the server first and refuses before cutting anything", async () => {
    // Prepare: reserved with no instance, connected on cmp1; the instance then recorded as os-attach records it (on the volume alone)
    const server = randomUUID();
    await putInstance(server, { attachmentsInUse: {} });
    const volume = await putVolume();
    const attachment = await createAttachment({ auth: DEMO_AUTH, volumeId: volume.id, instanceUuid: null, connector: connector('cmp1') });
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: { pk: `VOL#${volume.id}`, sk: 'VOL' },
        UpdateExpression: 'SET attachments.#a.instanceUuid = :i, instances.#i = :one ADD version :one',
        ExpressionAttributeNames: { '#a': attachment.id, '#i': server },
        ExpressionAttributeValues: { ':i': server, ':one': 1 },
      }),
    );
    await serverAttaches(server, bdmOf(server, volume.id, attachment.id));
    forgetAttachment(attachment.id);
    clearFaultCalls();
    // Act
    const refused = deleteAttachment({ auth: DEMO_AUTH, attachmentId: attachment.id });
    // Assess: the 409 from the reads, with no terminate (and so no restore) of cmp1's connection
    await expect(refused).rejects.toThrow(IN_USE(server));
    expect(faultCalls().map((c) => c.method).filter((m) => m.endsWith('Connection'))).toEqual([]);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
  });
});
