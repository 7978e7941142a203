import { randomUUID } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, dynamoRequests, resetDynamoRequests } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { volumeKey } from '../../functions/volumes/model.js';
import { Conflict, DriverError, InvalidVolume, NotFound } from '../../functions/core/errors.js';
import { injectFault } from '../../functions/core/faults.js';
import {
  completeAttachment,
  createAttachment,
  deleteAttachment,
  getAttachment,
  updateAttachment,
} from '../../functions/attachments/service.js';
import {
  ADMIN_AUTH,
  attachmentItems,
  BACKEND,
  backendConnections,
  connector,
  DEMO_AUTH,
  liveAttachmentItems,
  putVolume,
  readVolume,
  useAttachmentEnv,
} from './attachments-support.js';

useAttachmentEnv();

const auth = DEMO_AUTH;

describe('the attach cycle (§3.3)', () => {
  test('create without connector -> update -> complete -> delete, with the states of each step', async () => {
    // Prepare
    const volume = await putVolume();
    const instance = randomUUID();

    // Act / Assess: reserve
    const reserved = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: null });
    expect(reserved).toMatchObject({ attachStatus: 'reserved', instanceUuid: instance, attachMode: 'null', connectionInfo: null });
    expect(await readVolume(volume.id)).toMatchObject({
      status: 'reserved',
      attachStatus: 'detached',
      instances: { [instance]: 1 },
      connections: {},
      attachments: { [reserved.id]: { status: 'reserved', connected: false } },
    });

    // Act / Assess: update with the host's connector
    const updated = await updateAttachment({ auth, attachmentId: reserved.id, connector: connector('cmp1', { mountpoint: '/dev/vdb' }) });
    expect(updated).toMatchObject({ attachStatus: 'attaching', attachedHost: 'cmp1', mountpoint: '/dev/vdb', attachMode: 'rw' });
    expect(updated.attachTime).not.toBeNull();
    expect(updated.connectionInfo).toMatchObject({
      driver_volume_type: 'local',
      device_path: expect.stringContaining(volume.backendName),
      access_mode: 'rw',
      qos_specs: null,
      encrypted: false,
      cacheable: false,
      attachment_id: reserved.id,
    });
    expect(await readVolume(volume.id)).toMatchObject({
      status: 'attaching',
      attachStatus: 'attaching',
      connections: { cmp1: [reserved.id] },
      attachments: { [reserved.id]: { status: 'attaching', host: 'cmp1', connected: true } },
    });
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect(await getAttachment({ auth, attachmentId: reserved.id })).toEqual(updated);

    // Act / Assess: complete
    await completeAttachment({ auth, attachmentId: reserved.id });
    expect((await getAttachment({ auth, attachmentId: reserved.id })).attachStatus).toBe('attached');
    expect(await readVolume(volume.id)).toMatchObject({ status: 'in-use', attachStatus: 'attached' });

    // Act / Assess: delete
    const remaining = await deleteAttachment({ auth, attachmentId: reserved.id });
    expect(remaining).toEqual([]);
    await expect(getAttachment({ auth, attachmentId: reserved.id })).rejects.toThrow(NotFound);
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachStatus: 'detached', attachments: {}, instances: {}, connections: {} });
    expect(await backendConnections(volume)).toEqual([]);
    expect(await liveAttachmentItems(volume.id)).toEqual([]);
  });

  test('create with a connector connects at once', async () => {
    // Prepare
    const volume = await putVolume();
    // Act
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1'), mode: 'ro' });
    // Assess
    expect(att).toMatchObject({ attachStatus: 'attaching', attachedHost: 'cmp1', attachMode: 'ro', mountpoint: 'na' });
    expect(att.connectionInfo).toMatchObject({ access_mode: 'ro', attachment_id: att.id });
    expect(await readVolume(volume.id)).toMatchObject({ status: 'attaching', attachStatus: 'attaching', connections: { cmp1: [att.id] } });
    expect(await backendConnections(volume)).toEqual(['cmp1']);
  });

  test('the happy path takes at most 3 DynamoDB requests per call', async () => {
    // Prepare (the first connect also reads the backend record, then reuses the driver)
    const volume = await putVolume();
    const warm = await createAttachment({ auth, volumeId: volume.id, instanceUuid: null, connector: connector('warm') });
    await deleteAttachment({ auth, attachmentId: warm.id });
    const counted = async <T>(fn: () => Promise<T>): Promise<[T, number]> => {
      resetDynamoRequests();
      const out = await fn();
      return [out, dynamoRequests().total];
    };
    // Act
    const [att, create] = await counted(() => createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null }));
    const [, update] = await counted(() => updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp1') }));
    const [, done] = await counted(() => completeAttachment({ auth, attachmentId: att.id }));
    const [, show] = await counted(() => getAttachment({ auth, attachmentId: att.id }));
    const second = await createAttachment({ auth, volumeId: volume.id, instanceUuid: att.instanceUuid, connector: null });
    const [, deleteShared] = await counted(() => deleteAttachment({ auth, attachmentId: second.id }));
    // Assess
    // The create: from the volume's record the warm delete's fence left, the reserve under its version alone.
    // The update: the intent with the volume's version checked, the transaction (listed-connect.ts).
    // The complete: from the volume's record the update wrote, the transaction alone (listed-complete.ts).
    // The shared delete: from the record the second create (under the version) left, the transaction; no read.
    expect({ create, update, done, show, deleteShared }).toEqual({ create: 1, update: 2, done: 1, show: 1, deleteShared: 1 });
  });
});

describe('multiattach rules (§3.4)', () => {
  test('the same instance twice on a non-multiattach volume is allowed; a second instance is refused', async () => {
    // Prepare
    const volume = await putVolume();
    const instance = randomUUID();
    const first = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: null });
    // Act
    const again = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: null });
    const other = createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    // Assess
    expect(again.id).not.toBe(first.id);
    await expect(other).rejects.toThrow(InvalidVolume);
    await expect(other).rejects.toThrow(`Invalid volume: Volume ${volume.id} status must be available or downloading to reserve, but the current status is reserved.`);
    expect(await readVolume(volume.id)).toMatchObject({ status: 'reserved', instances: { [instance]: 2 } });
    expect(await liveAttachmentItems(volume.id)).toHaveLength(2);
  });

  test('100 concurrent creates from 100 instances on a non-multiattach volume: exactly one wins, nothing left behind', async () => {
    // Prepare
    const volume = await putVolume();
    const instances = Array.from({ length: 100 }, () => randomUUID());
    // Act
    const results = await Promise.allSettled(instances.map((i) => createAttachment({ auth, volumeId: volume.id, instanceUuid: i, connector: null })));
    // Assess
    const won = results.filter((r) => r.status === 'fulfilled');
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(99);
    for (const r of lost) {
      expect(r.reason).toBeInstanceOf(InvalidVolume);
      expect((r.reason as InvalidVolume).status).toBe(400);
    }
    const winner = (won[0] as PromiseFulfilledResult<{ id: string; instanceUuid: string }>).value;
    const items = await attachmentItems(volume.id);
    expect(items.map((i) => i.id)).toEqual([winner.id]);
    const after = await readVolume(volume.id);
    expect(Object.keys(after.attachments)).toEqual([winner.id]);
    expect(after.instances).toEqual({ [winner.instanceUuid]: 1 });
    expect(after.status).toBe('reserved');
  });

  test('100 concurrent creates on a multiattach volume all succeed and the volume stays consistent', async () => {
    // Prepare
    const volume = await putVolume({ multiattach: true });
    const instances = Array.from({ length: 100 }, () => randomUUID());
    resetDynamoRequests();
    // Act
    const results = await Promise.allSettled(instances.map((i) => createAttachment({ auth, volumeId: volume.id, instanceUuid: i, connector: null })));
    // Assess: one transaction each, no lost races retried (the reserve condition is the invariant, not the version)
    expect(dynamoRequests().byCommand.TransactWriteItemsCommand).toBe(100);
    const rejected = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => String(r.reason));
    expect(rejected).toEqual([]);
    const ids = results.map((r) => (r as PromiseFulfilledResult<{ id: string }>).value.id).sort();
    expect((await liveAttachmentItems(volume.id)).map((i) => i.id).sort()).toEqual(ids);
    const after = await readVolume(volume.id);
    expect(Object.keys(after.attachments).sort()).toEqual(ids);
    expect(Object.keys(after.instances).sort()).toEqual([...instances].sort());
    expect(Object.values(after.instances).every((n) => n === 1)).toBe(true);
    expect(after.status).toBe('reserved');
    expect(after.version).toBe(volume.version + 100);
  });

  test('a second connector on a non-multiattach volume is refused with 409 and connects nothing', async () => {
    // Prepare: instance A connected on cmp1, a second attachment for A (a move) still reserved
    const volume = await putVolume();
    const instance = randomUUID();
    const first = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: connector('cmp1') });
    await completeAttachment({ auth, attachmentId: first.id });
    const second = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: null });
    const before = await readVolume(volume.id);
    // Act
    const update = updateAttachment({ auth, attachmentId: second.id, connector: connector('cmp2') });
    // Assess
    await expect(update).rejects.toThrow(Conflict);
    expect(await readVolume(volume.id)).toEqual(before);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await getAttachment({ auth, attachmentId: second.id })).attachStatus).toBe('reserved');
  });

  test('live migration: a second attachment of the same instance created with the destination connector connects both hosts', async () => {
    // Prepare
    const volume = await putVolume();
    const instance = randomUUID();
    const source = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: connector('src') });
    await completeAttachment({ auth, attachmentId: source.id });
    // Act
    const dest = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: connector('dst') });
    await completeAttachment({ auth, attachmentId: dest.id });
    await deleteAttachment({ auth, attachmentId: source.id });
    // Assess
    expect(await backendConnections(volume)).toEqual(['dst']);
    expect(await readVolume(volume.id)).toMatchObject({ status: 'in-use', attachStatus: 'attached', instances: { [instance]: 1 }, connections: { dst: [dest.id] } });
  });
});

describe('host connections (§3.6)', () => {
  test('two attachments on one host share one backend connection, removed only with the last', async () => {
    // Prepare
    const volume = await putVolume({ multiattach: true });
    const a = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    const b = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    // Act
    await updateAttachment({ auth, attachmentId: a.id, connector: connector('cmp1') });
    await updateAttachment({ auth, attachmentId: b.id, connector: connector('cmp1') });
    // Assess
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [a.id, b.id] });

    // Act
    const remaining = await deleteAttachment({ auth, attachmentId: a.id });
    // Assess
    expect(remaining.map((r) => r.id)).toEqual([b.id]);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [b.id] });

    // Act
    await deleteAttachment({ auth, attachmentId: b.id });
    // Assess
    expect(await backendConnections(volume)).toEqual([]);
    expect((await readVolume(volume.id)).connections).toEqual({});
  });

  test('moving an attachment to another host releases the old host', async () => {
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    await updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp2') });
    expect(await backendConnections(volume)).toEqual(['cmp2']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp2: [att.id] });
  });

  test.each(['fail', 'fail-after'] as const)('a driver failure (%s) on connect: 500, attachment still reserved, no connection, volume unchanged', async (mode) => {
    // Prepare
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    const before = await readVolume(volume.id);
    injectFault({ kind: 'volume', backend: BACKEND, method: 'initializeConnection', mode });
    // Act
    const update = updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp1') });
    // Assess
    await expect(update).rejects.toThrow(DriverError);
    await expect(update).rejects.toThrow(/^Unable to update attachment\.\(/);
    expect((await getAttachment({ auth, attachmentId: att.id })).attachStatus).toBe('reserved');
    // Only the version moves (the rollback's fence write: see service.ts releaseHost), and the
    // connect's intent, written then cleared, leaves its map empty.
    const { connectIntents, ...after } = await readVolume(volume.id);
    expect(connectIntents).toEqual({});
    expect({ ...after, version: before.version }).toEqual(before);
    expect(await backendConnections(volume)).toEqual([]);
  });

  test('a driver failure on create with connector leaves no attachment, no connection, and the volume available', async () => {
    // Prepare
    const volume = await putVolume();
    injectFault({ kind: 'volume', backend: BACKEND, method: 'initializeConnection', mode: 'fail-after' });
    // Act
    const create = createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    // Assess
    await expect(create).rejects.toThrow(/^Unable to create attachment for volume \(/);
    expect(await liveAttachmentItems(volume.id)).toEqual([]);
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachStatus: 'detached', attachments: {}, instances: {}, connections: {} });
    expect(await backendConnections(volume)).toEqual([]);
  });

  test('a delete whose disconnect failed is finished by the retried delete', async () => {
    // Prepare
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    injectFault({ kind: 'volume', backend: BACKEND, method: 'terminateConnection', mode: 'fail', times: 1 });
    // Act
    const first = deleteAttachment({ auth, attachmentId: att.id });
    // Assess: the attachment is gone, the backend connection not yet
    await expect(first).rejects.toThrow(DriverError);
    await expect(getAttachment({ auth, attachmentId: att.id })).rejects.toThrow(NotFound);
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', connections: {} });
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    // Act
    const retry = deleteAttachment({ auth, attachmentId: att.id });
    // Assess
    await expect(retry).rejects.toThrow(NotFound);
    expect(await backendConnections(volume)).toEqual([]);
  });

  test('concurrent connects of many attachments on shared hosts leave exactly the hosts in use connected', async () => {
    // Prepare
    const volume = await putVolume({ multiattach: true });
    const atts = await Promise.all(Array.from({ length: 12 }, () => createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null })));
    const hostOf = (i: number) => `cmp${i % 3}`;
    // Act: connect all, then delete every attachment on cmp0 and cmp1 concurrently with more connects on cmp2
    await Promise.all(atts.map((a, i) => updateAttachment({ auth, attachmentId: a.id, connector: connector(hostOf(i)) })));
    await Promise.all(
      atts.map((a, i) =>
        hostOf(i) === 'cmp2' ? updateAttachment({ auth, attachmentId: a.id, connector: connector('cmp2') }) : deleteAttachment({ auth, attachmentId: a.id }),
      ),
    );
    // Assess
    const after = await readVolume(volume.id);
    expect(Object.keys(after.connections)).toEqual(['cmp2']);
    expect(after.connections.cmp2).toHaveLength(4);
    expect(await backendConnections(volume)).toEqual(['cmp2']);
    expect(Object.keys(after.attachments)).toHaveLength(4);
  });
});

describe('volume items', () => {
  test('a volume item written without the attachment maps still takes attachments', async () => {
    // Prepare
    const volume = await putVolume();
    await db().send(new UpdateCommand({ TableName: tableName('volume'), Key: volumeKey(volume.id), UpdateExpression: 'REMOVE attachments, instances, connections' }));
    // Act
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    // Assess
    expect(await readVolume(volume.id)).toMatchObject({ status: 'attaching', attachments: { [att.id]: { status: 'attaching' } }, connections: { cmp1: [att.id] } });
  });
});

describe('who may', () => {
  test("another project cannot see or change a project's attachment; an admin can", async () => {
    const volume = await putVolume();
    const other = { ...DEMO_AUTH, userId: 'other', projectId: 'other' };
    await expect(createAttachment({ auth: other, volumeId: volume.id, instanceUuid: null, connector: null })).rejects.toThrow(`Volume ${volume.id} could not be found.`);
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: null, connector: null });
    await expect(getAttachment({ auth: other, attachmentId: att.id })).rejects.toThrow(NotFound);
    await expect(deleteAttachment({ auth: other, attachmentId: att.id })).rejects.toThrow(NotFound);
    expect((await getAttachment({ auth: ADMIN_AUTH, attachmentId: att.id })).id).toBe(att.id);
  });
});
