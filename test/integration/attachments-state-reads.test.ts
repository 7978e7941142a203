/**
 * Readers see an attachment's state from its volume's summary (attachments/model.ts attachmentOf)
 * once the summary carries the full state: GET by id, the listings (project and all_tenants) and
 * their request counts. The attachment item is set back to its reserve-time state by hand, as the
 * calls that stop writing it leave it, so each assertion shows where the state was read from.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { attachmentKey } from '../../functions/attachments/model.js';
import { attachmentRoutes } from '../../functions/attachments/routes.js';
import { forgetAllRecords } from '../../functions/attachments/volume-records.js';
import { createApiHandler } from '../../functions/core/api.js';
import { db, dynamoRequests, resetDynamoRequests } from '../../functions/core/db.js';
import { VOLUME_VERSIONS } from '../../functions/core/microversion.js';
import { tableName } from '../../functions/core/tables.js';
import { volumeKey } from '../../functions/volumes/model.js';
import { volumeRoutes } from '../../functions/volumes/routes.js';
import { ADMIN, call, cinder, DEMO } from '../support/events.js';
import { connector, putVolume, readVolume, useAttachmentEnv } from './attachments-support.js';

const handler = createApiHandler({ service: VOLUME_VERSIONS, rootPath: '/volume', versionPath: '/v3', routes: [...volumeRoutes, ...attachmentRoutes], unversioned: [] });

useAttachmentEnv();

async function counted(method: string, path: string, body?: unknown, caller = DEMO, query?: string) {
  resetDynamoRequests();
  const res = await call(handler, { method, path: `/volume/v3${path}`, headers: cinder('3.70'), caller, body, query });
  return { ...res, requests: dynamoRequests().total };
}

/** The item as the reserve wrote it: what it holds once connect and complete no longer write it. */
const itemBackToReserved = (id: string) =>
  db().send(
    new UpdateCommand({
      TableName: tableName('volume'),
      Key: attachmentKey(id),
      UpdateExpression: 'SET attachStatus = :r, connectionInfo = :null, attachedHost = :null, connector = :null, mountpoint = :null, attachTime = :null',
      ExpressionAttributeValues: { ':r': 'reserved', ':null': null },
    }),
  );

/** A connected, completed attachment of a new volume whose item was set back to `reserved`. */
async function attachedByTheSummaryAlone(): Promise<{ id: string; volumeId: string }> {
  const volume = await putVolume();
  const create = await counted('POST', '/attachments', { attachment: { volume_uuid: volume.id, instance_uuid: randomUUID(), connector: connector('cmp1') } });
  const id = create.body.attachment.id as string;
  expect((await counted('POST', `/attachments/${id}/action`, { 'os-complete': null })).status).toBe(204);
  await itemBackToReserved(id);
  return { id, volumeId: volume.id };
}

describe("an attachment's state as its volume's summary holds it", () => {
  test('GET by id shows the connected state: one BatchGetItem in a process that knows the volume, two reads cold', async () => {
    const { id } = await attachedByTheSummaryAlone();
    const known = await counted('GET', `/attachments/${id}`);
    forgetAllRecords();
    const cold = await counted('GET', `/attachments/${id}`);
    for (const shown of [known, cold]) {
      expect(shown.status).toBe(200);
      expect(shown.body.attachment).toMatchObject({ status: 'attached', attached_at: expect.any(String), attach_mode: 'rw' });
      expect(shown.body.attachment.connection_info).toMatchObject({ driver_volume_type: expect.any(String), attachment_id: id });
    }
    expect({ known: known.requests, cold: cold.requests }).toEqual({ known: 1, cold: 2 });
  });

  test('the listings show it too: the Query and one BatchGetItem of the volumes; all_tenants one Scan', async () => {
    const { id, volumeId } = await attachedByTheSummaryAlone();
    const detail = await counted('GET', '/attachments/detail', undefined, DEMO, `volume_id=${volumeId}`);
    const filtered = await counted('GET', '/attachments/detail', undefined, DEMO, `attach_status=attached&volume_id=${volumeId}`);
    const all = await counted('GET', '/attachments/detail', undefined, ADMIN, `all_tenants=1&volume_id=${volumeId}`);
    for (const listed of [detail, filtered, all]) {
      expect(listed.status).toBe(200);
      expect(listed.body.attachments.map((a: { id: string }) => a.id)).toEqual([id]);
      expect(listed.body.attachments[0]).toMatchObject({ status: 'attached', connection_info: expect.objectContaining({ attachment_id: id }) });
    }
    expect({ detail: detail.requests, all: all.requests }).toEqual({ detail: 2, all: 1 });
  });

  test('a listing leaves out an attachment its volume no longer lists (an index behind a delete)', async () => {
    const { id, volumeId } = await attachedByTheSummaryAlone();
    const listing = (expression: string, values?: Record<string, unknown>) =>
      db().send(new UpdateCommand({ TableName: tableName('volume'), Key: volumeKey(volumeId), UpdateExpression: expression, ExpressionAttributeNames: { '#a': id }, ExpressionAttributeValues: values }));
    const summary = (await readVolume(volumeId)).attachments[id];
    await listing('REMOVE attachments.#a');
    const detail = await counted('GET', '/attachments/detail', undefined, DEMO, `volume_id=${volumeId}`);
    expect(detail.status).toBe(200);
    expect(detail.body.attachments).toEqual([]);
    // The audit after each test finds the records as they were.
    await listing('SET attachments.#a = :s', { ':s': summary });
  });
});
