/**
 * The pre-3.27 detach actions delete from the route's record of the volume, with no read of the
 * attachment (functions/attachments/listed-removal.ts): the tombstone they write is the one a
 * delete by id writes, a summary written before summaries kept the connector falls back to the
 * delete by id, and a terminate that fails after the transaction leaves the tombstone's pending
 * disconnect for a recovery pass, as a delete by id does.
 */
import { randomUUID } from 'node:crypto';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { describe, expect, test } from 'vitest';
import { LEGACY_ATTACH_ACTIONS } from '../../functions/attachments/legacy.js';
import { recoverPendingDisconnects } from '../../functions/attachments/recovery.js';
import { getAttachmentRecord } from '../../functions/attachments/repo.js';
import { attachmentRoutes } from '../../functions/attachments/routes.js';
import { createApiHandler } from '../../functions/core/api.js';
import { db, dynamoRequests, resetDynamoRequests } from '../../functions/core/db.js';
import { injectFault } from '../../functions/core/faults.js';
import { VOLUME_VERSIONS } from '../../functions/core/microversion.js';
import { tableName } from '../../functions/core/tables.js';
import { registerVolumeActions } from '../../functions/volumes/actions.js';
import { volumeKey } from '../../functions/volumes/model.js';
import { volumeRoutes } from '../../functions/volumes/routes.js';
import { call, cinder, DEMO } from '../support/events.js';
import { asWrittenBeforeFullSummaries, attachmentItems, BACKEND, backendConnections, connector, putVolume, readVolume, useAttachmentEnv } from './attachments-support.js';

const handler = createApiHandler({ service: VOLUME_VERSIONS, rootPath: '/volume', versionPath: '/v3', routes: [...volumeRoutes, ...attachmentRoutes], unversioned: [] });

useAttachmentEnv({ setup: () => registerVolumeActions(LEGACY_ATTACH_ACTIONS) });

async function action(volumeId: string, body: unknown) {
  resetDynamoRequests();
  const res = await call(handler, { method: 'POST', path: `/volume/v3/volumes/${volumeId}/action`, headers: cinder('3.0'), caller: DEMO, body });
  return { ...res, requests: dynamoRequests().total };
}

/** A volume attached the legacy way on host cmp1 to a new server: its attachment's id. */
async function attachedOnCmp1(volumeId: string): Promise<string> {
  expect((await action(volumeId, { 'os-initialize_connection': { connector: connector('cmp1') } })).status).toBe(200);
  expect((await action(volumeId, { 'os-attach': { instance_uuid: randomUUID(), mountpoint: '/dev/vdb' } })).status).toBe(202);
  return Object.keys((await readVolume(volumeId)).attachments)[0]!;
}

describe('os-detach from the volume record', () => {
  test('the tombstone is the one a delete by id writes: detached, no GSI keys, expiring, version moved, the connection it had kept', async () => {
    // Prepare
    const volume = await putVolume();
    const id = await attachedOnCmp1(volume.id);
    const before = await getAttachmentRecord(id);
    expect((await readVolume(volume.id)).attachments[id]).toMatchObject({ connected: true, connector: connector('cmp1') });
    // Act
    const detach = await action(volume.id, { 'os-detach': null });
    // Assess
    expect(detach.status).toBe(202);
    const [item] = await attachmentItems(volume.id);
    expect(item).toMatchObject({ deleted: true, attachStatus: 'detached', disconnect: { host: 'cmp1', connector: connector('cmp1') }, connectionInfo: before!.connectionInfo, version: before!.version + 1 });
    expect(item).not.toHaveProperty('gsi1pk');
    expect(item!.expiresAt).toEqual(expect.any(Number));
    expect(await backendConnections(volume)).toEqual([]);
  });

  test('a summary written before summaries kept the connector: the delete reads the attachment (one request more) and removes the connection all the same', async () => {
    // Prepare: the records as an older Ferry wrote them (the summary without the connector, nor the full state)
    const volume = await putVolume();
    const id = await attachedOnCmp1(volume.id);
    await asWrittenBeforeFullSummaries(volume.id, id, ['connector']);
    // Act
    const detach = await action(volume.id, { 'os-detach': null });
    // Assess
    expect(detach.status).toBe(202);
    expect(detach.requests).toBe(4);
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, connections: {} });
    expect(await backendConnections(volume)).toEqual([]);
  });

  test("a terminate that fails after the transaction: the error says so, the tombstone keeps the disconnect, and a recovery pass removes the connection", async () => {
    // Prepare
    const volume = await putVolume();
    const id = await attachedOnCmp1(volume.id);
    injectFault({ kind: 'volume', backend: BACKEND, method: 'terminateConnection', mode: 'fail', times: 1 });
    // Act
    const detach = await action(volume.id, { 'os-detach': null });
    // Assess
    expect(detach.status).toBeGreaterThanOrEqual(500);
    expect(JSON.stringify(detach.body)).toMatch(new RegExp(`Attachment ${id} was deleted, but the backend connection of host cmp1 could not be removed`));
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, connections: {} });
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    const repairs = await recoverPendingDisconnects({ before: new Date(Date.now() + 1000) });
    expect(repairs.map((r) => r.did)).toEqual(['terminated the backend connection']);
    expect(await backendConnections(volume)).toEqual([]);
  });
});
