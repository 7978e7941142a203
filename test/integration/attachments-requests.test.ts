/**
 * DynamoDB requests per attachment API call (issue 17: at most 3 each), counted through the API
 * handler, so whatever the route layer reads counts too: the attachments API's calls and the
 * pre-3.27 actions of POST /volumes/{id}/action, which read the volume first (volumes/actions.ts)
 * and start from that record (attachments/legacy.ts). The last block counts every call again from a
 * process that remembers nothing of the volume or the attachment (`fresh`).
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { forgetConnectionDrivers } from '../../functions/attachments/connections.js';
import { LEGACY_ATTACH_ACTIONS } from '../../functions/attachments/legacy.js';
import { attachmentRoutes } from '../../functions/attachments/routes.js';
import { forgetAllRecords, forgetAttachment, forgetVolume } from '../../functions/attachments/volume-records.js';
import { createApiHandler } from '../../functions/core/api.js';
import { db, dynamoRequests, resetDynamoRequests } from '../../functions/core/db.js';
import { VOLUME_VERSIONS } from '../../functions/core/microversion.js';
import { registerVolumeActions } from '../../functions/volumes/actions.js';
import { volumeRoutes } from '../../functions/volumes/routes.js';
import { call, cinder, DEMO } from '../support/events.js';
import { backendConnections, connector, putVolume, readVolume, useAttachmentEnv } from './attachments-support.js';

const handler = createApiHandler({ service: VOLUME_VERSIONS, rootPath: '/volume', versionPath: '/v3', routes: [...volumeRoutes, ...attachmentRoutes], unversioned: [] });
const base = '/volume/v3';

// What the Cinder API's entry point registers (functions/api/volume.ts).
useAttachmentEnv({ setup: () => registerVolumeActions(LEGACY_ATTACH_ACTIONS) });

/** One API call: its status, body and the DynamoDB requests it made. */
async function counted(method: string, path: string, body?: unknown, version = '3.70') {
  resetDynamoRequests();
  const res = await call(handler, { method, path: `${base}${path}`, headers: cinder(version), caller: DEMO, body });
  return { ...res, requests: dynamoRequests().total };
}
const action = (volumeId: string, body: unknown) => counted('POST', `/volumes/${volumeId}/action`, body, '3.0');

/**
 * One API call from a process that remembers no volume or attachment (volume-records.ts
 * forgetAllRecords): a Lambda container that served none of their earlier calls. The backend's
 * driver stays as warmDriver left it (a fresh container's first connect per backend reads its record: +1).
 */
async function fresh(method: string, path: string, body?: unknown, version = '3.70') {
  forgetAllRecords();
  return counted(method, path, body, version);
}
const freshAction = (volumeId: string, body: unknown) => fresh('POST', `/volumes/${volumeId}/action`, body, '3.0');

/**
 * A first connect reads the backend record, then reuses the driver for 10 s from that read
 * (connections.ts DRIVER_CACHE_MS): warm it afresh, as a running API is, so that its 10 s do not
 * end in the middle of a test on a loaded machine.
 */
async function warmDriver(): Promise<void> {
  forgetConnectionDrivers();
  const volume = await putVolume();
  const made = await counted('POST', '/attachments', { attachment: { volume_uuid: volume.id, connector: connector('warm') } });
  await counted('DELETE', `/attachments/${made.body.attachment.id}`);
}

describe('at most 3 DynamoDB requests per call', () => {
  test('the attachments API: create, update, complete, show, delete', async () => {
    // Prepare
    await warmDriver();
    const volume = await putVolume();
    // Act
    const create = await counted('POST', '/attachments', { attachment: { volume_uuid: volume.id, instance_uuid: randomUUID(), connector: {} } });
    const id = create.body.attachment.id as string;
    const update = await counted('PUT', `/attachments/${id}`, { attachment: { connector: connector('cmp1') } });
    const complete = await counted('POST', `/attachments/${id}/action`, { 'os-complete': null });
    const show = await counted('GET', `/attachments/${id}`);
    const remove = await counted('DELETE', `/attachments/${id}`);
    const createConnected = await counted('POST', '/attachments', { attachment: { volume_uuid: volume.id, instance_uuid: randomUUID(), connector: connector('cmp2') } });
    // Assess
    expect([create, update, complete, show, remove, createConnected].map((r) => r.status)).toEqual([200, 200, 204, 200, 200, 200]);
    expect({ create: create.requests, update: update.requests, complete: complete.requests, show: show.requests, remove: remove.requests, createConnected: createConnected.requests }).toEqual({
      create: 2,
      update: 3,
      // From the volume's record the update wrote (no attachment read): ONE transaction.
      complete: 1,
      show: 1,
      // From the volume's record this process wrote last (no attachment read): transaction, fence.
      remove: 2,
      // From the volume's record the delete's fence left: the reserve under its version, the connect's transaction.
      createConnected: 2,
    });
    expect(await backendConnections(volume)).toEqual(['cmp2']);
  });

  test("Nova's legacy path: os-reserve, os-initialize_connection, os-attach, os-detach", async () => {
    // Prepare
    await warmDriver();
    const volume = await putVolume();
    const server = randomUUID();
    // Act
    const reserve = await action(volume.id, { 'os-reserve': null });
    const initialize = await action(volume.id, { 'os-initialize_connection': { connector: connector('cmp1') } });
    const attach = await action(volume.id, { 'os-attach': { instance_uuid: server, mountpoint: '/dev/vdb' } });
    const attached = await readVolume(volume.id);
    const detach = await action(volume.id, { 'os-detach': null });
    // Assess: os-detach removes the host's last connection from the route's record (no attachment read): route read, transaction, the fence after the terminate
    expect([reserve.status, initialize.status, attach.status, detach.status]).toEqual([202, 200, 202, 202]);
    expect(attached).toMatchObject({ status: 'in-use', attachStatus: 'attached' });
    expect({ reserve: reserve.requests, initialize: initialize.requests, attach: attach.requests, detach: detach.requests }).toEqual({ reserve: 2, initialize: 3, attach: 3, detach: 3 });
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, connections: {} });
    expect(await backendConnections(volume)).toEqual([]);
  });

  test('os-attach alone reserves and attaches in one transaction; os-detach from the route\'s read of the volume', async () => {
    // Prepare
    const volume = await putVolume();
    const server = randomUUID();
    // Act
    const attach = await action(volume.id, { 'os-attach': { instance_uuid: server, mountpoint: '/dev/vdb', mode: 'ro' } });
    const attached = await readVolume(volume.id);
    forgetVolume(volume.id); // as another process would handle the detach
    const detach = await action(volume.id, { 'os-detach': null });
    // Assess
    expect([attach.status, detach.status]).toEqual([202, 202]);
    expect(attached).toMatchObject({ status: 'in-use', attachStatus: 'attached', instances: { [server]: 1 } });
    expect(Object.values(attached.attachments)).toMatchObject([{ status: 'attached', instanceUuid: server, mode: 'ro', mountpoint: '/dev/vdb' }]);
    expect({ attach: attach.requests, detach: detach.requests }).toEqual({ attach: 2, detach: 2 });
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, instances: {} });
  });

  test('os-reserve, os-unreserve; os-initialize_connection with nothing reserved, os-terminate_connection', async () => {
    // Prepare
    await warmDriver();
    const volume = await putVolume();
    // Act
    const reserve = await action(volume.id, { 'os-reserve': null });
    const unreserve = await action(volume.id, { 'os-unreserve': null });
    const initialize = await action(volume.id, { 'os-initialize_connection': { connector: connector('cmp1') } });
    const connected = await backendConnections(volume);
    const terminate = await action(volume.id, { 'os-terminate_connection': { connector: connector('cmp1') } });
    // Assess: os-terminate_connection removes the host's last connection from the route's record: route read, transaction, fence
    expect([reserve.status, unreserve.status, initialize.status, terminate.status]).toEqual([202, 202, 200, 202]);
    expect(connected).toEqual(['cmp1']);
    expect({ reserve: reserve.requests, unreserve: unreserve.requests, initialize: initialize.requests, terminate: terminate.requests }).toEqual({ reserve: 2, unreserve: 2, initialize: 3, terminate: 3 });
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, connections: {} });
    expect(await backendConnections(volume)).toEqual([]);
  });
});

describe('DELETE /attachments/{id} removing a host\'s last connection, in a process that has not seen the volume lately', () => {
  /** An attachment connected on its own host and completed: what the delete removes. */
  async function connectedAttachment(host: string) {
    const volume = await putVolume();
    const made = await counted('POST', '/attachments', { attachment: { volume_uuid: volume.id, instance_uuid: randomUUID(), connector: connector(host) } });
    const id = made.body.attachment.id as string;
    await counted('POST', `/attachments/${id}/action`, { 'os-complete': null });
    return { volume, id };
  }

  test('3 requests when it has seen the attachment (volume read, transaction, fence); 3 when it has seen neither (disconnect intent returning the attachment, volume with the in-use records, transaction after the terminate)', async () => {
    // Prepare
    await warmDriver();
    const seen = await connectedAttachment('cmp1');
    const unseen = await connectedAttachment('cmp2');
    forgetVolume(seen.volume.id); // as more than 10 s after this process last saw it
    forgetVolume(unseen.volume.id);
    forgetAttachment(unseen.id); // as another process (a Lambda container that served none of its calls)
    // Act
    const removeSeen = await counted('DELETE', `/attachments/${seen.id}`);
    const removeUnseen = await counted('DELETE', `/attachments/${unseen.id}`);
    // Assess
    expect([removeSeen.status, removeUnseen.status]).toEqual([200, 200]);
    expect({ removeSeen: removeSeen.requests, removeUnseen: removeUnseen.requests }).toEqual({ removeSeen: 3, removeUnseen: 3 });
    for (const { volume } of [seen, unseen]) {
      expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, connections: {} });
      expect(await backendConnections(volume)).toEqual([]);
    }
  });
});

describe('POST /attachments/{id}/action os-complete in a process that has not seen the volume lately', () => {
  test('2 requests when it has seen the attachment (volume read, transaction); 3 when it has seen neither (attachment read, volume read, transaction), as before', async () => {
    // Prepare: two attachments connected, not completed
    await warmDriver();
    const made = [];
    for (const host of ['cmp1', 'cmp2']) {
      const volume = await putVolume();
      const res = await counted('POST', '/attachments', { attachment: { volume_uuid: volume.id, instance_uuid: randomUUID(), connector: connector(host) } });
      made.push({ volume, id: res.body.attachment.id as string });
    }
    const [seen, unseen] = made as [(typeof made)[0], (typeof made)[0]];
    forgetVolume(seen.volume.id); // as more than 10 s after this process last saw it
    forgetVolume(unseen.volume.id);
    forgetAttachment(unseen.id); // as another process
    // Act
    const completeSeen = await counted('POST', `/attachments/${seen.id}/action`, { 'os-complete': null });
    const completeUnseen = await counted('POST', `/attachments/${unseen.id}/action`, { 'os-complete': null });
    // Assess
    expect([completeSeen.status, completeUnseen.status]).toEqual([204, 204]);
    expect({ completeSeen: completeSeen.requests, completeUnseen: completeUnseen.requests }).toEqual({ completeSeen: 2, completeUnseen: 3 });
    for (const { volume, id } of made) {
      expect(await readVolume(volume.id)).toMatchObject({ status: 'in-use', attachStatus: 'attached', attachments: { [id]: { status: 'attached', connected: true } } });
      expect((await counted('GET', `/attachments/${id}`)).body.attachment).toMatchObject({ status: 'attached' });
    }
  });
});

describe('PUT /attachments/{id} moving an attachment to another host', () => {
  test("off a host nobody else uses: 2 requests from the volume's record (the intent under its version, the transaction after the old host's terminate: its fence); 3 from a process that has not seen the volume", async () => {
    // Prepare
    await warmDriver();
    const volume = await putVolume();
    const made = await counted('POST', '/attachments', { attachment: { volume_uuid: volume.id, instance_uuid: randomUUID(), connector: connector('cmp1') } });
    const id = made.body.attachment.id as string;
    await counted('POST', `/attachments/${id}/action`, { 'os-complete': null });
    // Act
    const move = await counted('PUT', `/attachments/${id}`, { attachment: { connector: connector('cmp2') } });
    const afterMove = await backendConnections(volume);
    forgetVolume(volume.id); // as another process would handle the next move
    const moveBack = await counted('PUT', `/attachments/${id}`, { attachment: { connector: connector('cmp1') } });
    // Assess
    expect([move.status, moveBack.status]).toEqual([200, 200]);
    expect({ move: move.requests, moveBack: moveBack.requests }).toEqual({ move: 2, moveBack: 3 });
    expect(afterMove).toEqual(['cmp2']);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [id] });
    const remove = await counted('DELETE', `/attachments/${id}`);
    expect(remove.status).toBe(200);
    expect(await backendConnections(volume)).toEqual([]);
  });
});

describe("the route's record of the volume under a race", () => {
  test('two os-attach of one non-multiattach volume by two servers at once: one attaches, the other loses by the version condition and is refused (400) from the record it re-reads', async () => {
    // Prepare
    const volume = await putVolume();
    const [first, second] = [randomUUID(), randomUUID()];
    // Act: both requests read the volume available before either writes (a transaction waits for both reads)
    let reads = 0;
    let bothRead!: () => void;
    const bothReadPromise = new Promise<void>((resolve) => (bothRead = resolve));
    db().middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetItemCommand' && ++reads === 2) bothRead();
        if (context.commandName === 'TransactWriteItemsCommand') await bothReadPromise;
        return next(args);
      },
      { step: 'initialize', name: 'testBothReadFirst' },
    );
    let results: Awaited<ReturnType<typeof action>>[];
    try {
      results = await Promise.all([first, second].map((server) => action(volume.id, { 'os-attach': { instance_uuid: server, mountpoint: '/dev/vdb' } })));
    } finally {
      db().middlewareStack.remove('testBothReadFirst');
    }
    // Assess
    expect(results.map((r) => r.status).sort()).toEqual([202, 400]);
    const refused = results.find((r) => r.status === 400)!;
    expect(refused.body.badRequest.message).toMatch(/status must be available or downloading to reserve, but the current status is in-use/);
    const stored = await readVolume(volume.id);
    const winner = results[0]!.status === 202 ? first : second;
    expect(stored).toMatchObject({ status: 'in-use', attachStatus: 'attached', instances: { [winner]: 1 } });
    expect(Object.values(stored.attachments)).toMatchObject([{ status: 'attached', instanceUuid: winner }]);
  });
});

describe('every attachment call from a process that remembers nothing: at most 3 DynamoDB requests, a delete removing a host\'s last connection included', () => {
  test('the attachments API: create, update, update moving host, complete, show, delete', async () => {
    // Prepare
    await warmDriver();
    const volume = await putVolume();
    // Act
    const create = await fresh('POST', '/attachments', { attachment: { volume_uuid: volume.id, instance_uuid: randomUUID(), connector: {} } });
    const id = create.body.attachment.id as string;
    const update = await fresh('PUT', `/attachments/${id}`, { attachment: { connector: connector('cmp1') } });
    const move = await fresh('PUT', `/attachments/${id}`, { attachment: { connector: connector('cmp2') } });
    const complete = await fresh('POST', `/attachments/${id}/action`, { 'os-complete': null });
    const show = await fresh('GET', `/attachments/${id}`);
    const remove = await fresh('DELETE', `/attachments/${id}`);
    const createConnected = await fresh('POST', '/attachments', { attachment: { volume_uuid: volume.id, instance_uuid: randomUUID(), connector: connector('cmp3') } });
    const removeConnected = await fresh('DELETE', `/attachments/${createConnected.body.attachment.id}`);
    // Assess
    expect([create, update, move, complete, show, remove, createConnected, removeConnected].map((r) => r.status)).toEqual([200, 200, 200, 204, 200, 200, 200, 200]);
    expect({
      create: create.requests,
      update: update.requests,
      move: move.requests,
      complete: complete.requests,
      show: show.requests,
      remove: remove.requests,
      createConnected: createConnected.requests,
      removeConnected: removeConnected.requests,
      // A delete by id (removal-by-id.ts): the disconnect intent returning the attachment, the volume
      // with the in-use records, the transaction after the terminate (its fence). The show: the
      // attachment, then its volume (its summary holds the state; attachment-reads.ts).
    }).toEqual({ create: 2, update: 3, move: 3, complete: 3, show: 2, remove: 3, createConnected: 3, removeConnected: 3 });
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, connections: {} });
    expect(await backendConnections(volume)).toEqual([]);
  });

  test("Nova's legacy path: os-reserve, os-initialize_connection, os-attach, os-detach; os-unreserve, os-terminate_connection", async () => {
    // Prepare
    await warmDriver();
    const volume = await putVolume();
    const other = await putVolume();
    // Act
    const reserve = await freshAction(volume.id, { 'os-reserve': null });
    const initialize = await freshAction(volume.id, { 'os-initialize_connection': { connector: connector('cmp1') } });
    const attach = await freshAction(volume.id, { 'os-attach': { instance_uuid: randomUUID(), mountpoint: '/dev/vdb' } });
    const detach = await freshAction(volume.id, { 'os-detach': null });
    const reserveOther = await freshAction(other.id, { 'os-reserve': null });
    const unreserve = await freshAction(other.id, { 'os-unreserve': null });
    const initializeAlone = await freshAction(other.id, { 'os-initialize_connection': { connector: connector('cmp2') } });
    const terminate = await freshAction(other.id, { 'os-terminate_connection': { connector: connector('cmp2') } });
    const attachAlone = await freshAction(other.id, { 'os-attach': { instance_uuid: randomUUID(), mountpoint: '/dev/vdb', mode: 'ro' } });
    const detachAlone = await freshAction(other.id, { 'os-detach': null });
    // Assess
    const all = { reserve, initialize, attach, detach, reserveOther, unreserve, initializeAlone, terminate, attachAlone, detachAlone };
    expect(Object.values(all).map((r) => r.status)).toEqual([202, 200, 202, 202, 202, 202, 200, 202, 202, 202]);
    expect(Object.fromEntries(Object.entries(all).map(([name, r]) => [name, r.requests]))).toEqual({
      reserve: 2,
      initialize: 3,
      attach: 3,
      detach: 3,
      reserveOther: 2,
      unreserve: 2,
      initializeAlone: 3,
      terminate: 3,
      attachAlone: 2,
      detachAlone: 2,
    });
    for (const v of [volume, other]) {
      expect(await readVolume(v.id)).toMatchObject({ status: 'available', attachments: {}, connections: {} });
      expect(await backendConnections(v)).toEqual([]);
    }
  });
});
