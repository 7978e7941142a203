/**
 * Create, complete and delete start from the volume as this process last saw it stored
 * (attachments/volume-records.ts), and from its summary of an attachment this process knows
 * (listed-complete.ts, listed-removal.ts): the races that start must still lose to the conditions,
 * and a refusal is answered as from a read.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { completeAttachment, createAttachment, deleteAttachment, updateAttachment } from '../../functions/attachments/service.js';
import { getAttachmentRecord, getVolumeRecord } from '../../functions/attachments/repo.js';
import { knownVolume, loadedVolume, rememberAttachment, rememberVolume } from '../../functions/attachments/volume-records.js';
import { Conflict, InvalidVolume, NotFound } from '../../functions/core/errors.js';
import { clearFaultCalls, faultCalls } from '../../functions/core/faults.js';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { attachmentKey } from '../../functions/attachments/model.js';
import { db, dynamoRequests, resetDynamoRequests } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { volumeKey } from '../../functions/volumes/model.js';
import { ADMIN_AUTH, asWrittenBeforeFullSummaries, backendConnections, connectIntentsOn, connector, DEMO_AUTH, putVolume, readVolume, useAttachmentEnv } from './attachments-support.js';

useAttachmentEnv();

const auth = DEMO_AUTH;

describe('the remembered volume', () => {
  test('the cycle: complete 1 request, delete 2 with the fence (no read of the volume, nor of the attachment)', async () => {
    // Prepare (the first connect also reads the backend record, then reuses the driver)
    const volume = await putVolume();
    const warm = await createAttachment({ auth, volumeId: volume.id, instanceUuid: null, connector: connector('warm') });
    await deleteAttachment({ auth, attachmentId: warm.id });
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    await updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp1') });
    // Act
    resetDynamoRequests();
    await completeAttachment({ auth, attachmentId: att.id });
    const complete = dynamoRequests().byCommand;
    resetDynamoRequests();
    await deleteAttachment({ auth, attachmentId: att.id });
    const remove = dynamoRequests().byCommand;
    // Assess
    expect(complete).toEqual({ UpdateItemCommand: 1 });
    expect(remove).toEqual({ TransactWriteItemsCommand: 1, UpdateItemCommand: 1 });
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, connections: {}, version: knownVolume(volume.id)!.volume.version });
    expect(await backendConnections(volume)).toEqual([]);
  });

  test('a delete from a remembered volume another writer has moved since: refused by its version, retried from the record the refusal returned, and the connection the other writer recorded on the host is kept', async () => {
    // Prepare: att1 connected on cmp1; what this process remembers of the volume then
    const volume = await putVolume({ multiattach: true });
    const att1 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    await completeAttachment({ auth, attachmentId: att1.id });
    const stale = structuredClone(knownVolume(volume.id)!);
    expect(stale.volume.connections).toEqual({ cmp1: [att1.id] });
    // Another writer (as another process would) connects att2 on the same host; this process still
    // remembers the volume before it.
    const att2 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    rememberVolume(stale);
    resetDynamoRequests();
    // Act
    const remaining = await deleteAttachment({ auth, attachmentId: att1.id });
    const requests = dynamoRequests().byCommand;
    // Assess: computed from the stale record, att1 was cmp1's last user and its connection would be
    // terminated under att2; the refused transaction's record says otherwise.
    expect(remaining.map((r) => r.id)).toEqual([att2.id]);
    expect(await readVolume(volume.id)).toMatchObject({ connections: { cmp1: [att2.id] } });
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    // The refused transaction (no read of the attachment: this process wrote it), the retry from
    // the record it returned (no read of the volume), and no fence (the host keeps a user).
    expect(requests).toEqual({ TransactWriteItemsCommand: 2 });
  });

  test("a remembered attachment taken for another project than its own: the delete's condition refuses it, and the delete by id answers 404 with nothing deleted", async () => {
    // Prepare: another project's connected attachment, which this process (wrongly) remembers as the caller's
    const volume = await putVolume({ projectId: 'other' });
    const att = await createAttachment({ auth: ADMIN_AUTH, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    await completeAttachment({ auth: ADMIN_AUTH, attachmentId: att.id });
    rememberAttachment({ id: att.id, volumeId: volume.id, projectId: DEMO_AUTH.projectId });
    const before = await readVolume(volume.id);
    // Act
    const refused = deleteAttachment({ auth: DEMO_AUTH, attachmentId: att.id });
    // Assess
    await expect(refused).rejects.toThrow(NotFound);
    expect(await readVolume(volume.id)).toEqual(before);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
  });

  test("a complete from a remembered volume another writer has moved since: refused by its version, retried from the record the refusal returned, and the other writer's attachment kept", async () => {
    // Prepare: att1 connected on cmp1, not completed; what this process remembers of the volume then
    const volume = await putVolume({ multiattach: true });
    const att1 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    const stale = structuredClone(knownVolume(volume.id)!);
    const att2 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    rememberVolume(stale);
    resetDynamoRequests();
    // Act
    await completeAttachment({ auth, attachmentId: att1.id });
    const requests = dynamoRequests().byCommand;
    // Assess: the refused write of the volume and the retry from the record it returned (no read)
    expect(requests).toEqual({ UpdateItemCommand: 2 });
    const stored = await readVolume(volume.id);
    expect(Object.keys(stored.attachments).sort()).toEqual([att1.id, att2.id].sort());
    expect(stored).toMatchObject({ status: 'in-use', attachments: { [att1.id]: { status: 'attached', connected: true }, [att2.id]: { status: 'attaching' } }, connections: { cmp1: expect.arrayContaining([att1.id, att2.id]) } });
  });

  test("a complete of a remembered attachment taken for another project than its own: the transaction's condition refuses it, and the complete by id answers 404 with nothing written", async () => {
    // Prepare: another project's connected attachment, which this process (wrongly) remembers as the caller's
    const volume = await putVolume({ projectId: 'other' });
    const att = await createAttachment({ auth: ADMIN_AUTH, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    rememberAttachment({ id: att.id, volumeId: volume.id, projectId: DEMO_AUTH.projectId });
    const before = await readVolume(volume.id);
    // Act
    const refused = completeAttachment({ auth: DEMO_AUTH, attachmentId: att.id });
    // Assess
    await expect(refused).rejects.toThrow(NotFound);
    expect(await readVolume(volume.id)).toEqual(before);
    expect(await getAttachmentRecord(att.id)).toMatchObject({ attachStatus: 'attaching', version: att.version });
  });
});

describe('a create from the remembered volume', () => {
  test('1 request (the reserve under the remembered version), and the volume as stored after is remembered', async () => {
    // Prepare: the cycle's delete left the volume remembered
    const volume = await putVolume();
    const before = await createAttachment({ auth, volumeId: volume.id, instanceUuid: null, connector: connector('cmp1') });
    await deleteAttachment({ auth, attachmentId: before.id });
    resetDynamoRequests();
    // Act
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    // Assess
    expect(dynamoRequests().byCommand).toEqual({ TransactWriteItemsCommand: 1 });
    const stored = await readVolume(volume.id);
    expect(stored).toMatchObject({ status: 'reserved', attachments: { [att.id]: { status: 'reserved' } } });
    expect(knownVolume(volume.id)!.volume).toEqual(loadedVolume(stored as unknown as Record<string, unknown>).volume);
    await deleteAttachment({ auth, attachmentId: att.id });
  });

  test('from a remembered volume another writer has moved since: refused by its version, retried from the record the refusal returned (no read), and nothing remembered that is not stored', async () => {
    // Prepare: what this process remembers of a multiattach volume; another writer then reserves att1
    const volume = await putVolume({ multiattach: true });
    const warm = await createAttachment({ auth, volumeId: volume.id, instanceUuid: null, connector: null });
    await deleteAttachment({ auth, attachmentId: warm.id });
    const stale = structuredClone(knownVolume(volume.id)!);
    const att1 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    rememberVolume(stale);
    resetDynamoRequests();
    // Act
    const att2 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    // Assess: the refused transaction, then the additive reserve from the record it returned
    expect(dynamoRequests().byCommand).toEqual({ TransactWriteItemsCommand: 2 });
    const stored = await readVolume(volume.id);
    expect(Object.keys(stored.attachments).sort()).toEqual([att1.id, att2.id].sort());
    const known = knownVolume(volume.id);
    if (known) expect(known.volume).toEqual(loadedVolume(stored as unknown as Record<string, unknown>).volume);
    await deleteAttachment({ auth, attachmentId: att1.id });
    await deleteAttachment({ auth, attachmentId: att2.id });
  });

  test('from a remembered volume another writer has reserved since (not multiattach): the 400 a read gives', async () => {
    // Prepare
    const volume = await putVolume();
    const warm = await createAttachment({ auth, volumeId: volume.id, instanceUuid: null, connector: null });
    await deleteAttachment({ auth, attachmentId: warm.id });
    const stale = structuredClone(knownVolume(volume.id)!);
    const att1 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    rememberVolume(stale);
    const before = await readVolume(volume.id);
    resetDynamoRequests();
    // Act
    const refused = createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    // Assess
    await expect(refused).rejects.toThrow(InvalidVolume);
    expect(dynamoRequests().byCommand).toEqual({ TransactWriteItemsCommand: 1 });
    expect(await readVolume(volume.id)).toEqual(before);
    await deleteAttachment({ auth, attachmentId: att1.id });
  });

  test('from a remembered volume deleted since: 404, as from a read, with nothing written', async () => {
    // Prepare: a record this process remembers of a volume whose item is gone
    const volume = await putVolume();
    const warm = await createAttachment({ auth, volumeId: volume.id, instanceUuid: null, connector: null });
    await deleteAttachment({ auth, attachmentId: warm.id });
    const gone = randomUUID();
    rememberVolume({ volume: { ...structuredClone(knownVolume(volume.id)!.volume), id: gone }, hasMaps: true });
    resetDynamoRequests();
    // Act
    const refused = createAttachment({ auth, volumeId: gone, instanceUuid: randomUUID(), connector: null });
    // Assess: the refused transaction (no item to return), then the read that answers
    await expect(refused).rejects.toThrow(NotFound);
    expect(dynamoRequests().byCommand).toEqual({ TransactWriteItemsCommand: 1, GetItemCommand: 1 });
    expect(knownVolume(gone)).toBeUndefined();
  });

  test("from a remembered volume of another project: the 404 a read gives, and the read's record decides", async () => {
    // Prepare: the process remembers the volume (of project 'other') from an admin's calls
    const volume = await putVolume({ projectId: 'other' });
    const warm = await createAttachment({ auth: ADMIN_AUTH, volumeId: volume.id, instanceUuid: null, connector: null });
    await deleteAttachment({ auth: ADMIN_AUTH, attachmentId: warm.id });
    expect(knownVolume(volume.id)).toBeDefined();
    resetDynamoRequests();
    // Act
    const refused = createAttachment({ auth: DEMO_AUTH, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    // Assess
    await expect(refused).rejects.toThrow(NotFound);
    expect(dynamoRequests().byCommand).toEqual({ GetItemCommand: 1 });
  });
});

describe('an update (connect) from the remembered volume', () => {
  /** A volume this process remembers (the delete's fence left it), the backend's driver warm. */
  async function rememberedVolume(options: Parameters<typeof putVolume>[0] = {}, by = auth) {
    const volume = await putVolume(options);
    const warm = await createAttachment({ auth: by, volumeId: volume.id, instanceUuid: null, connector: connector('warm') });
    await deleteAttachment({ auth: by, attachmentId: warm.id });
    expect(knownVolume(volume.id)).toBeDefined();
    return volume;
  }

  test("2 requests: the intent on the volume under its version (one UpdateItem), the connect (one UpdateItem of the volume); the attachment as its summary holds it", async () => {
    // Prepare
    const volume = await rememberedVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    resetDynamoRequests();
    // Act
    const updated = await updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp1') });
    // Assess
    expect(dynamoRequests().byCommand).toEqual({ UpdateItemCommand: 2 });
    const item = (await getAttachmentRecord(att.id))!;
    expect(item).toMatchObject({ attachStatus: 'attaching', attachedHost: 'cmp1', connector: connector('cmp1'), version: att.version });
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect(updated).toMatchObject({ id: att.id, attachStatus: item.attachStatus, attachTime: item.attachTime, attachMode: item.attachMode, connectionInfo: item.connectionInfo, instanceUuid: att.instanceUuid });
    expect(await readVolume(volume.id)).toMatchObject({ status: 'attaching', connections: { cmp1: [att.id] }, version: knownVolume(volume.id)!.volume.version });
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    await deleteAttachment({ auth, attachmentId: att.id });
  });

  test('from a remembered volume another writer has moved since: the check refuses the intent, the connect decides again on the record it returned (no read)', async () => {
    // Prepare: att1 reserved on a multiattach volume; another writer then connects att2 on cmp1
    const volume = await rememberedVolume({ multiattach: true });
    const att1 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    const stale = structuredClone(knownVolume(volume.id)!);
    const att2 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    rememberVolume(stale);
    resetDynamoRequests();
    // Act
    await updateAttachment({ auth, attachmentId: att1.id, connector: connector('cmp1') });
    // Assess: the refused intent, the intent from the returned record, the connect's UpdateItem
    expect(dynamoRequests().byCommand).toEqual({ UpdateItemCommand: 3 });
    expect(await readVolume(volume.id)).toMatchObject({ connections: { cmp1: [att2.id, att1.id] } });
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    await deleteAttachment({ auth, attachmentId: att1.id });
    await deleteAttachment({ auth, attachmentId: att2.id });
  });

  test("from a stale record that would admit it, a connect the stored volume refuses (duplicate connectors): 409, and the backend is never asked to connect", async () => {
    // Prepare: two attachments of one instance on a non-multiattach volume; another writer connects the second
    const volume = await rememberedVolume();
    const instance = randomUUID();
    const att1 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: null });
    const att2 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: null });
    await updateAttachment({ auth, attachmentId: att2.id, connector: connector('cmp1') });
    const stale = structuredClone(knownVolume(volume.id)!);
    stale.volume.attachments[att2.id] = { ...stale.volume.attachments[att2.id]!, connected: false, connector: undefined };
    rememberVolume({ ...stale, volume: { ...stale.volume, version: stale.volume.version - 1 } });
    clearFaultCalls();
    // Act
    const refused = updateAttachment({ auth, attachmentId: att1.id, connector: connector('cmp2') });
    // Assess
    await expect(refused).rejects.toThrow(Conflict);
    expect(faultCalls().map((c) => c.method)).not.toContain('initializeConnection');
    expect(await getAttachmentRecord(att1.id)).toMatchObject({ attachStatus: 'reserved' });
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    await deleteAttachment({ auth, attachmentId: att1.id });
    await deleteAttachment({ auth, attachmentId: att2.id });
  });

  test("an item written before the volume's attachWaits whose wait (attach-wait.ts) is still watched: the connect's transaction from the summary is refused, and the connect goes by the item", async () => {
    // Prepare: connected on cmp1, then a wait recorded on the item as the wait's steps wrote it before the volume's map (no volume version)
    const volume = await rememberedVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    const wait = { execution: `volume-attach-wait-${att.id}-9`, host: 'cmp1', status: 'waiting', startedAt: new Date().toISOString() };
    await db().send(new UpdateCommand({ TableName: tableName('volume'), Key: attachmentKey(att.id), UpdateExpression: 'SET attachWait = :w ADD version :one', ExpressionAttributeValues: { ':w': wait, ':one': 1 } }));
    // ...whose records are of that time too (summaries with updatedAt are never written beside an unfinished item wait), as this process last read them.
    await asWrittenBeforeFullSummaries(volume.id, att.id);
    await getVolumeRecord(volume.id);
    resetDynamoRequests();
    // Act
    await updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp2') });
    // Assess: the intent, the refused transaction (cmp1's terminate before it undone: restoreHost's fence),
    // then by the item (the item and its volume, which still holds the intent, in one BatchGetItem: the process knows
    // the attachment's volume; the transaction after cmp1's terminate)
    expect(dynamoRequests().byCommand).toEqual({ TransactWriteItemsCommand: 2, UpdateItemCommand: 2, BatchGetItemCommand: 1 });
    const item = (await getAttachmentRecord(att.id))!;
    expect(item).toMatchObject({ attachedHost: 'cmp2', version: att.version + 1 });
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect(item.attachWait).toBeUndefined();
    expect(await backendConnections(volume)).toEqual(['cmp2']);
    await deleteAttachment({ auth, attachmentId: att.id });
  });

  /** A wait recorded in the volume's attachWaits as a pending connect or a wait's step writes it: under (and moving) the volume's version. */
  async function waitOnVolume(volumeId: string, attachmentId: string, host: string) {
    const wait = { execution: `volume-attach-wait-${attachmentId}-v99`, host, status: 'waiting', startedAt: new Date().toISOString() };
    const names = { '#ws': 'attachWaits', '#aid': attachmentId };
    await db().send(new UpdateCommand({ TableName: tableName('volume'), Key: volumeKey(volumeId), UpdateExpression: 'SET #ws = if_not_exists(#ws, :none) ADD version :one', ExpressionAttributeNames: { '#ws': 'attachWaits' }, ExpressionAttributeValues: { ':none': {}, ':one': 1 } }));
    await db().send(new UpdateCommand({ TableName: tableName('volume'), Key: volumeKey(volumeId), UpdateExpression: 'SET #ws.#aid = :w ADD version :one', ExpressionAttributeNames: names, ExpressionAttributeValues: { ':w': wait, ':one': 1 } }));
    return wait;
  }

  test("a wait on the volume survives the connect of another attachment of a multiattach volume, from a summary remembered before the wait (not erased)", async () => {
    // Prepare: att1 connected on cmp1 with its wait on the volume (written after this process last saw it); att2 reserved
    const volume = await rememberedVolume({ multiattach: true });
    const att1 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    const att2 = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    const wait = await waitOnVolume(volume.id, att1.id, 'cmp1');
    // Act
    await updateAttachment({ auth, attachmentId: att2.id, connector: connector('cmp2') });
    await completeAttachment({ auth, attachmentId: att2.id });
    // Assess
    const stored = await readVolume(volume.id);
    expect(stored.attachWaits).toEqual({ [att1.id]: wait });
    expect(stored.connections).toEqual({ cmp1: [att1.id], cmp2: [att2.id] });
    // The delete of att1 ends its wait with it; att2's delete leaves the map empty.
    await deleteAttachment({ auth, attachmentId: att1.id });
    await deleteAttachment({ auth, attachmentId: att2.id });
    expect((await readVolume(volume.id)).attachWaits).toEqual({});
  });

  test("a wait on the volume does not refuse the connect from the summary (the volume's version carries it): the connect replaces it in its own transaction", async () => {
    // Prepare: connected on cmp1, its wait on the volume, the volume read again since
    const volume = await rememberedVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    await waitOnVolume(volume.id, att.id, 'cmp1');
    await getVolumeRecord(volume.id);
    resetDynamoRequests();
    // Act
    await updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp2') });
    // Assess: the intent under the volume's version (one UpdateItem of the volume), the connect's (another); no item read, no retry
    expect(dynamoRequests().byCommand).toEqual({ UpdateItemCommand: 2 });
    const stored = await readVolume(volume.id);
    expect([stored.attachWaits, stored.connections]).toEqual([{}, { cmp2: [att.id] }]);
    expect(await backendConnections(volume)).toEqual(['cmp2']);
    await deleteAttachment({ auth, attachmentId: att.id });
  });

  test("a remembered attachment taken for another project than its own: the intent's condition refuses it, and the update by id answers 404 with nothing written", async () => {
    // Prepare: another project's reserved attachment, which this process (wrongly) remembers as the caller's
    const volume = await rememberedVolume({ projectId: 'other' }, ADMIN_AUTH);
    const att = await createAttachment({ auth: ADMIN_AUTH, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    rememberAttachment({ id: att.id, volumeId: volume.id, projectId: DEMO_AUTH.projectId });
    const before = await readVolume(volume.id);
    // Act
    const refused = updateAttachment({ auth: DEMO_AUTH, attachmentId: att.id, connector: connector('cmp1') });
    // Assess
    await expect(refused).rejects.toThrow(NotFound);
    expect(await readVolume(volume.id)).toEqual(before);
    expect(await getAttachmentRecord(att.id)).toMatchObject({ attachStatus: 'reserved', version: att.version });
    expect(await backendConnections(volume)).toEqual([]);
    await deleteAttachment({ auth: ADMIN_AUTH, attachmentId: att.id });
  });
});
