/**
 * Connect and complete from a full-state summary write the volume item alone (one UpdateItem each,
 * repo-from-volume.ts): the attachment item keeps what the reserve wrote, and every reader shows
 * the state its volume holds. Concurrent connects of one multiattach volume keep each other's
 * state; a summary written before it carried the full state is upgraded by its first connect or
 * complete (the transaction with the item, once).
 */
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { attachmentKey } from '../../functions/attachments/model.js';
import { getAttachmentRecord, getVolumeRecord } from '../../functions/attachments/repo.js';
import { recoverPendingConnects } from '../../functions/attachments/recovery.js';
import { completeAttachment, createAttachment, deleteAttachment, updateAttachment } from '../../functions/attachments/service.js';
import { eventually } from '../support/poll.js';
import { db, dynamoRequests, resetDynamoRequests } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { volumeKey } from '../../functions/volumes/model.js';
import { asWrittenBeforeFullSummaries, backendConnections, connectIntentsOn, connector, DEMO_AUTH, putVolume, readVolume, useAttachmentEnv } from './attachments-support.js';

useAttachmentEnv();

const auth = DEMO_AUTH;
const storedItem = async (id: string) => (await db().send(new GetCommand({ TableName: tableName('volume'), Key: attachmentKey(id), ConsistentRead: true }))).Item!;

describe('connect and complete write the volume alone', () => {
  test('PUT and os-complete from the record: one UpdateItem each, the item as the reserve wrote it, the state in the summary', async () => {
    // Prepare: a volume this process remembers (the warm-up's delete left it), the backend's driver warm
    const volume = await putVolume();
    const warm = await createAttachment({ auth, volumeId: volume.id, instanceUuid: null, connector: connector('warm') });
    await deleteAttachment({ auth, attachmentId: warm.id });
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    // Act
    resetDynamoRequests();
    await updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp1') });
    const update = dynamoRequests().byCommand;
    resetDynamoRequests();
    await completeAttachment({ auth, attachmentId: att.id });
    const complete = dynamoRequests().byCommand;
    // Assess: the intent under the version, then the connect; the complete
    expect({ update, complete }).toEqual({ update: { UpdateItemCommand: 2 }, complete: { UpdateItemCommand: 1 } });
    expect(await storedItem(att.id)).toMatchObject({ attachStatus: 'reserved', connectionInfo: null, attachedHost: null, version: att.version });
    const shown = (await getAttachmentRecord(att.id))!;
    expect(shown).toMatchObject({ attachStatus: 'attached', attachedHost: 'cmp1', connector: expect.objectContaining({ host: 'cmp1' }) });
    expect(shown.connectionInfo).toMatchObject({ attachment_id: att.id });
    // The delete's tombstone copies the last state from the summary.
    await deleteAttachment({ auth, attachmentId: att.id });
    expect(await storedItem(att.id)).toMatchObject({ deleted: true, attachedHost: 'cmp1', connectionInfo: expect.objectContaining({ attachment_id: att.id }) });
    expect(await backendConnections(volume)).toEqual([]);
  });

  test('two connects of a multiattach volume at once, from one remembered record: each keeps the state of the other', async () => {
    // Prepare
    const volume = await putVolume({ multiattach: true });
    const [a1, a2] = [
      await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null }),
      await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null }),
    ];
    // Act
    await Promise.all([updateAttachment({ auth, attachmentId: a1.id, connector: connector('cmp1') }), updateAttachment({ auth, attachmentId: a2.id, connector: connector('cmp2') })]);
    await Promise.all([completeAttachment({ auth, attachmentId: a1.id }), completeAttachment({ auth, attachmentId: a2.id })]);
    // Assess
    const stored = await readVolume(volume.id);
    expect(stored.connections).toEqual({ cmp1: [a1.id], cmp2: [a2.id] });
    for (const [a, host] of [[a1, 'cmp1'], [a2, 'cmp2']] as const) {
      expect(stored.attachments[a.id]).toMatchObject({ status: 'attached', host, connected: true, connectionInfo: expect.objectContaining({ attachment_id: a.id }) });
      expect((await getAttachmentRecord(a.id))!.connectionInfo).toMatchObject({ attachment_id: a.id });
    }
    expect(await backendConnections(volume)).toEqual(['cmp1', 'cmp2']);
    await deleteAttachment({ auth, attachmentId: a1.id });
    await deleteAttachment({ auth, attachmentId: a2.id });
  });

  test('a summary written before it carried the full state: its first connect and complete take the transaction with the item, which upgrades it', async () => {
    // Prepare: a reserved attachment whose summary is as written before (no connectionInfo, updatedAt); this process knows it so
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    const old = (field: string) =>
      db().send(new UpdateCommand({ TableName: tableName('volume'), Key: volumeKey(volume.id), UpdateExpression: `REMOVE attachments.#a.${field} ADD version :one`, ExpressionAttributeNames: { '#a': att.id }, ExpressionAttributeValues: { ':one': 1 } }));
    await old('updatedAt');
    await old('connectionInfo');
    await getVolumeRecord(volume.id);
    // Act
    resetDynamoRequests();
    await updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp1') });
    const update = dynamoRequests().byCommand;
    const upgraded = (await readVolume(volume.id)).attachments[att.id]!;
    resetDynamoRequests();
    await completeAttachment({ auth, attachmentId: att.id });
    const complete = dynamoRequests().byCommand;
    // Assess: the connect's write was the transaction with the item; the summary it wrote carries the full state, so the complete is one UpdateItem
    expect(update).toEqual({ UpdateItemCommand: 1, TransactWriteItemsCommand: 1 });
    expect(upgraded).toMatchObject({ status: 'attaching', updatedAt: expect.any(String), connectionInfo: expect.objectContaining({ attachment_id: att.id }) });
    expect(complete).toEqual({ UpdateItemCommand: 1 });
    expect(await storedItem(att.id)).toMatchObject({ attachStatus: 'attaching', attachedHost: 'cmp1' });
    expect((await getAttachmentRecord(att.id))!.attachStatus).toBe('attached');
    await deleteAttachment({ auth, attachmentId: att.id });
  });

  test('an old summary completed first: the complete goes by id (the transaction with the item), which upgrades it', async () => {
    // Prepare: connected, then its records as an older Ferry wrote them
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    const connected = (await readVolume(volume.id)).attachments[att.id]!;
    await asWrittenBeforeFullSummaries(volume.id, att.id, ['connectionInfo']);
    await getVolumeRecord(volume.id);
    // Act
    resetDynamoRequests();
    await completeAttachment({ auth, attachmentId: att.id });
    const complete = dynamoRequests().byCommand;
    // Assess
    expect(complete.TransactWriteItemsCommand).toBe(1);
    expect((await readVolume(volume.id)).attachments[att.id]).toMatchObject({ status: 'attached', updatedAt: expect.any(String), connectionInfo: connected.connectionInfo });
    await deleteAttachment({ auth, attachmentId: att.id });
  });

  test("a crash right after the connect's write of the volume: nothing leaks, recovery leaves the connection the summary records, and the delete removes it", async () => {
    // Prepare: a process that dies once the connect's versioned UpdateItem of the volume is stored (the call never answers)
    const volume = await putVolume();
    const warm = await createAttachment({ auth, volumeId: volume.id, instanceUuid: null, connector: connector('warm') });
    await deleteAttachment({ auth, attachmentId: warm.id });
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    let written = false;
    db().middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { Key?: { pk?: string }; ExpressionAttributeValues?: Record<string, unknown> };
        const connectWrite = context.commandName === 'UpdateItemCommand' && input.Key?.pk === `VOL#${volume.id}` && input.ExpressionAttributeValues?.[':next'] !== undefined;
        const out = await next(args);
        if (!connectWrite || written) return out;
        written = true;
        return new Promise<never>(() => undefined);
      },
      { step: 'initialize', name: 'testCrashAfterVolumeWrite' },
    );
    // Act
    void updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp1') });
    await eventually(async () => written || undefined, "the connect's write of the volume");
    db().middlewareStack.remove('testCrashAfterVolumeWrite');
    const repairs = await recoverPendingConnects({ before: new Date(Date.now() + 3_600_000) });
    // Assess: the write that recorded the connection ended its intent: recovery has nothing to undo
    expect(repairs.filter((r) => r.resource.includes(att.id))).toEqual([]);
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect(await getAttachmentRecord(att.id)).toMatchObject({ attachStatus: 'attaching', attachedHost: 'cmp1', connectionInfo: expect.objectContaining({ attachment_id: att.id }) });
    await deleteAttachment({ auth, attachmentId: att.id });
    expect(await backendConnections(volume)).toEqual([]);
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, connections: {} });
  });
});
