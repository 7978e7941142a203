/**
 * Connect intents on the volume item (attachments/model.ts `connectIntents`), against DynamoDB
 * Local and a local-driver backend: a crash between the intent and the connect's record leaves the
 * intent on the volume, where recovery finds and undoes it (also once the attachment is deleted);
 * an intent decided on a stale record is refused by the volume's version; a volume holding an
 * intent is not removed; intents written on attachment items before they moved are still undone.
 */
import { randomUUID } from 'node:crypto';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { describe, expect, test } from 'vitest';
import { attachmentKey, newConnectIntent } from '../../functions/attachments/model.js';
import { recoverPendingConnects } from '../../functions/attachments/recovery.js';
import { getAttachmentRecord, getVolumeRecord, writeConnectIntent } from '../../functions/attachments/repo.js';
import { writeConnectIntentAtVersion } from '../../functions/attachments/repo-intents.js';
import { createAttachment, deleteAttachment, updateAttachment } from '../../functions/attachments/service.js';
import { runAudit } from '../../functions/audit/audit.js';
import { db } from '../../functions/core/db.js';
import { BackendNotReady } from '../../functions/core/errors.js';
import { injectFault } from '../../functions/core/faults.js';
import { tableName } from '../../functions/core/tables.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { volumeKey } from '../../functions/volumes/model.js';
import { removeVolumeRecord, VolumeConnectsPending } from '../../functions/volumes/repo.js';
import { finishDelete } from '../../functions/volumes/steps.js';
import { volumeTypeKey } from '../../functions/volumes/types.js';
import { BACKEND, backendConnections, connectIntentsOn, connector, crashed, DEMO_AUTH, later, putVolume, readVolume, useAttachmentEnv } from './attachments-support.js';

// Some tests leave on purpose what the audit reports (an intent, a removed volume's backend object).
useAttachmentEnv({ audit: false });

const auth = DEMO_AUTH;

/** A volume (counted in its type, as a created one is) whose attachment is gone, left holding a dead connect's intent on cmp1. */
async function volumeWithDeadIntent() {
  const volume = await putVolume();
  await db().send(new UpdateCommand({ TableName: tableName('volume'), Key: volumeTypeKey(volume.volumeTypeId), UpdateExpression: 'ADD volumeCount :one', ExpressionAttributeValues: { ':one': 1 } }));
  const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
  expect(await writeConnectIntent(att, newConnectIntent(att.id, connector('cmp1'), new Date().toISOString(), 'dead'))).toBeDefined();
  await deleteAttachment({ auth, attachmentId: att.id });
  return volume;
}

describe('connect intents on the volume item', () => {
  test('a crash between the intent and the connect: the intent is on the volume (not the item); recovery terminates the export and clears it, also once the attachment is deleted', async () => {
    // Prepare: a PUT from the remembered volume dies right after initializeConnection
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    injectFault({ kind: 'volume', backend: BACKEND, method: 'initializeConnection', mode: 'crash-after', times: 1 });
    void updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp2') });
    await crashed('initializeConnection');
    const stored = await readVolume(volume.id);
    expect(Object.values(await connectIntentsOn(volume.id))).toEqual([expect.objectContaining({ attachmentId: att.id, host: 'cmp2' })]);
    expect(stored.version).toBe((await getVolumeRecord(volume.id))!.volume.version);
    expect(await getAttachmentRecord(att.id)).not.toHaveProperty('pendingConnect');
    expect(await backendConnections(volume)).toEqual(['cmp2']);
    // The attachment goes before any recovery pass: its intent stays on the volume
    await deleteAttachment({ auth, attachmentId: att.id });
    expect((await readVolume(volume.id)).attachments).toEqual({});
    expect(Object.keys(await connectIntentsOn(volume.id))).toHaveLength(1);
    // Act
    const repairs = await recoverPendingConnects({ before: later() });
    // Assess
    expect(repairs).toEqual([{ kind: 'pending-connect', resource: `attachment ${att.id}`, saw: expect.stringMatching(/^deleted .*host cmp2/), did: 'terminated the backend connection; cleared the intent' }]);
    expect(await backendConnections(volume)).toEqual([]);
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect(await recoverPendingConnects({ before: later() })).toEqual([]);
    expect((await runAudit()).findings).toEqual([]);
  });

  test("an intent decided on a stale record is refused by the volume's version: nothing written, the current record returned", async () => {
    // Prepare: a record of the volume one version behind the stored one
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    const current = (await getVolumeRecord(volume.id))!.volume;
    const stale = { ...current, version: current.version - 1 };
    const intent = newConnectIntent(att.id, connector('cmp1'), new Date().toISOString(), 'stale');
    // Act
    const write = await writeConnectIntentAtVersion(att.id, intent, stale, auth.projectId);
    // Assess
    expect(write).toEqual({ moved: expect.objectContaining({ volume: expect.objectContaining({ version: current.version }) }) });
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect((await readVolume(volume.id)).version).toBe(current.version);
    // At the stored version the same intent is written, and moves no version
    expect(await writeConnectIntentAtVersion(att.id, intent, current, auth.projectId)).toBe('written');
    expect(Object.keys(await connectIntentsOn(volume.id))).toEqual([intent.id]);
    expect((await readVolume(volume.id)).version).toBe(current.version);
    expect(await recoverPendingConnects({ before: later() })).toHaveLength(1);
    await deleteAttachment({ auth, attachmentId: att.id });
  });

  test("a volume's record is not removed while it holds a connect intent (VolumeConnectsPending); once recovery undid it, it is", async () => {
    // Prepare: a dead connect's intent left on a volume whose attachment is gone
    const volume = await volumeWithDeadIntent();
    const before = (await getVolumeRecord(volume.id))!.volume;
    // Act + Assess: refused, typed, nothing removed
    await expect(removeVolumeRecord(before)).rejects.toThrow(VolumeConnectsPending);
    expect(await readVolume(volume.id)).toMatchObject({ id: volume.id, version: before.version });
    // Recovery undoes the intent; the removal then goes through (the backend object first, as the delete's steps do)
    expect((await recoverPendingConnects({ before: later() })).map((r) => r.did)).toEqual(['terminated the backend connection; cleared the intent']);
    await (await driverForHost(volume.host!)).deleteVolume(volume.backendName);
    await removeVolumeRecord((await getVolumeRecord(volume.id))!.volume);
    expect(await readVolume(volume.id)).toBeUndefined();
    expect((await runAudit()).findings).toEqual([]);
  });

  test("the delete machine's FinishDelete waits (BackendNotReady, which its Retry waits out) while the volume holds a dead connect's intent, and removes the record once recovery undid it", async () => {
    // Prepare: a volume being deleted (its backend object gone) that still holds a dead connect's intent
    const volume = await volumeWithDeadIntent();
    await db().send(new UpdateCommand({ TableName: tableName('volume'), Key: volumeKey(volume.id), UpdateExpression: 'SET #s = :deleting ADD version :one', ExpressionAttributeNames: { '#s': 'status' }, ExpressionAttributeValues: { ':deleting': 'deleting', ':one': 1 } }));
    await (await driverForHost(volume.host!)).deleteVolume(volume.backendName);
    // Act + Assess: the step waits, typed as the machine's Retry expects, and removes nothing
    const waiting = finishDelete(volume.id);
    await expect(waiting).rejects.toThrow(BackendNotReady);
    await expect(waiting).rejects.toMatchObject({ cause: expect.any(VolumeConnectsPending) });
    expect(await readVolume(volume.id)).toMatchObject({ status: 'deleting' });
    // Recovery undoes the intent (the backend object is gone already); the step then removes the record
    expect((await recoverPendingConnects({ before: later() })).map((r) => r.did)).toEqual(['terminated the backend connection; cleared the intent']);
    await finishDelete(volume.id);
    expect(await readVolume(volume.id)).toBeUndefined();
  });

  test("an intent written on an attachment item before intents moved to the volume is still found, undone and cleared", async () => {
    // Prepare: the item's `pendingConnect` as the code before wrote it (no attachmentId), and its export
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    const { attachmentId: _named, ...old } = newConnectIntent(att.id, connector('cmp3'), new Date().toISOString(), 'old');
    await db().send(new UpdateCommand({ TableName: tableName('volume'), Key: attachmentKey(att.id), UpdateExpression: 'SET pendingConnect = :intents', ExpressionAttributeValues: { ':intents': { [old.id]: old } } }));
    await (await driverForHost(volume.host!)).initializeConnection(volume.backendName, connector('cmp3'));
    const expired = await runAudit({ now: new Date(Date.now() + 10 * 60_000) });
    expect(expired.findings).toEqual([expect.objectContaining({ kind: 'pending-connect', ref: { attachmentId: att.id, volumeId: volume.id, host: 'cmp3' } })]);
    // Act
    const repairs = await recoverPendingConnects({ before: later() });
    // Assess
    expect(repairs).toEqual([{ kind: 'pending-connect', resource: `attachment ${att.id}`, saw: expect.stringMatching(/^reserved .*host cmp3/), did: 'terminated the backend connection; cleared the intent' }]);
    expect(await backendConnections(volume)).toEqual([]);
    expect((await getAttachmentRecord(att.id))!.pendingConnect).toEqual({});
    expect(await recoverPendingConnects({ before: later() })).toEqual([]);
    await deleteAttachment({ auth, attachmentId: att.id });
    expect((await runAudit()).findings).toEqual([]);
  });
});
