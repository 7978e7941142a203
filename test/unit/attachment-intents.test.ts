/**
 * Connect intents (model.ts `connectIntents`): on the VOLUME item, written, ended and cleared by
 * single requests there (repo-intents.ts, repo.ts), never on the attachment item. The pure
 * transitions leave them to the repository. The requests are checked as sent (aws-sdk-client-mock);
 * what DynamoDB makes of them is in test/integration/attachments-intents.test.ts.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { marshall } from '@aws-sdk/util-dynamodb';
import { DynamoDBDocumentClient, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { AttachmentIdTaken, CONNECT_INTENT_TIMEOUT_MS, connectIntentId, newConnectIntent } from '../../functions/attachments/model.js';
import { writeReserve, writeVersioned } from '../../functions/attachments/repo.js';
import { clearConnectIntent, writeConnectIntentAtVersion } from '../../functions/attachments/repo-intents.js';
import { forgetAllRecords } from '../../functions/attachments/volume-records.js';
import { connect, reserve } from '../../functions/attachments/transitions.js';
import { setDb } from '../../functions/core/db.js';
import { Conflict } from '../../functions/core/errors.js';
import type { Volume } from '../../functions/volumes/model.js';
import { connectorFor, INSTANCE_A, localConnection, T0, T1, volumeFixture } from '../support/attachment-fixtures.js';

const documents = DynamoDBDocumentClient.from(new DynamoDBClient({ region: 'us-east-1', credentials: { accessKeyId: 'k', secretAccessKey: 's' } }));
const ddb = mockClient(documents);
beforeAll(() => setDb(documents));
beforeEach(() => {
  ddb.reset();
  forgetAllRecords();
  ddb.on(TransactWriteCommand).resolves({});
  ddb.on(UpdateCommand).resolves({});
});
afterAll(() => setDb(undefined));

type Update = { Key: Record<string, string>; UpdateExpression: string; ConditionExpression: string; ExpressionAttributeNames?: Record<string, string>; ExpressionAttributeValues: Record<string, unknown> };

/** The intent of call `callId` connecting att-1 to `host`. */
const intentFor = (host: string, callId = 'req-1') => newConnectIntent('att-1', connectorFor(host), T0, callId);
/** A volume with att-1 reserved on it (listed), as the record a connect decides on. */
const reservedVolume = (): Volume => reserve(volumeFixture(), { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0 }).volume;
const namesOf = (u: Update) => Object.values(u.ExpressionAttributeNames ?? {});
const updatesSent = () => ddb.commandCalls(UpdateCommand).map((c) => c.args[0].input as unknown as Update);
const transactionUpdates = () => ddb.commandCalls(TransactWriteCommand)[0]!.args[0].input.TransactItems!.map((i) => i.Update as unknown as Update | undefined);
/** A condition failure as the service sends it, with the item it found (ALL_OLD, wire format). */
const refusedWith = (item: Record<string, unknown>) => Object.assign(new Error('The conditional request failed'), { name: 'ConditionalCheckFailedException', Item: marshall(item) });

describe('connect intents', () => {
  test('an intent names its attachment and host and expires CONNECT_INTENT_TIMEOUT_MS after it starts; each call has its own, the same call the same', () => {
    const intent = intentFor('cmp1');
    expect(intent).toEqual({
      id: connectIntentId('att-1', 'cmp1', 'req-1'),
      attachmentId: 'att-1',
      host: 'cmp1',
      connector: connectorFor('cmp1'),
      startedAt: T0,
      expiresAt: new Date(Date.parse(T0) + CONNECT_INTENT_TIMEOUT_MS).toISOString(),
    });
    expect(intentFor('cmp1', 'req-2').id).not.toBe(intent.id);
    expect(intentFor('cmp1').id).toBe(intent.id);
    expect(newConnectIntent('att-1', connectorFor('cmp1'), T0).id).toBe(connectIntentId('att-1', 'cmp1'));
  });

  test("the intent of a connect from a remembered record: ONE UpdateItem of the volume, under its version, the attachment listed and the project; the version is not moved", async () => {
    const volume = reservedVolume();
    const intent = intentFor('cmp1');

    expect(await writeConnectIntentAtVersion('att-1', intent, volume, 'demo')).toBe('written');

    expect(ddb.commandCalls(TransactWriteCommand)).toEqual([]);
    const [update] = updatesSent();
    expect(updatesSent()).toHaveLength(1);
    expect(update!.Key).toEqual({ pk: `VOL#${volume.id}`, sk: 'VOL' });
    // The record shows no intent: the map whole, on condition it is empty
    expect(update!.UpdateExpression).toBe('SET #ci = :intents');
    expect(update!.ExpressionAttributeValues[':intents']).toEqual({ [intent.id]: intent });
    expect(update!.ConditionExpression).toBe('version = :version AND attribute_exists(#atts.#aid) AND projectId = :project AND (attribute_not_exists(#ci) OR size(#ci) = :none)');
    expect(update!.ExpressionAttributeValues).toMatchObject({ ':version': volume.version, ':project': 'demo' });
    expect(update!.ExpressionAttributeNames).toMatchObject({ '#ci': 'connectIntents', '#atts': 'attachments', '#aid': 'att-1' });
  });

  test("a record showing another call's intent: the intent under its own key, the map left as it is", async () => {
    const other = intentFor('cmp2', 'req-9');
    const volume = { ...reservedVolume(), connectIntents: { [other.id]: other } } as Volume;

    expect(await writeConnectIntentAtVersion('att-1', intentFor('cmp1'), volume, 'demo')).toBe('written');

    const [update] = updatesSent();
    expect(update!.UpdateExpression).toBe('SET #ci.#intent = :intent');
    expect(update!.ConditionExpression).toBe('version = :version AND attribute_exists(#atts.#aid) AND projectId = :project');
  });

  test('refused: a volume moved since the record is returned as the new record; one at the version that does not list the attachment is refused (the caller goes by id)', async () => {
    const volume = reservedVolume();
    const item = { pk: `VOL#${volume.id}`, sk: 'VOL', ...volume };
    ddb.on(UpdateCommand).rejects(refusedWith({ ...item, version: volume.version + 1 }));
    const moved = await writeConnectIntentAtVersion('att-1', intentFor('cmp1'), volume, 'demo');
    expect(moved).toEqual({ moved: expect.objectContaining({ volume: expect.objectContaining({ version: volume.version + 1 }) }) });

    ddb.on(UpdateCommand).rejects(refusedWith({ ...item, attachments: {} }));
    expect(await writeConnectIntentAtVersion('att-1', intentFor('cmp1'), volume, 'demo')).toBe('refused');
  });

  test("the connect's versioned write ends its intent on the volume, and leaves the attachment item's maps alone", async () => {
    const volume = reservedVolume();
    const attachment = reserve(volumeFixture(), { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0 }).attachment;
    const intent = intentFor('cmp1');
    const result = connect(volume, attachment, { connector: connectorFor('cmp1'), connection: localConnection('cmp1'), now: T1 }, { checkDuplicates: true });

    await writeVersioned({ volume, attachment }, result, { endIntent: intent.id });

    const [onItem, onVolume] = transactionUpdates();
    expect(onVolume!.UpdateExpression).toMatch(/ REMOVE (.*, )?#ci\.#cintent/);
    expect(onVolume!.ExpressionAttributeNames).toMatchObject({ '#ci': 'connectIntents', '#cintent': intent.id });
    expect(onVolume!.ConditionExpression).toBe('version = :version');
    expect(namesOf(onItem!)).not.toContain('pendingConnect');
    expect(onItem!.UpdateExpression).not.toMatch(/REMOVE/);
  });

  test("a create with a connector: its intent in the reserve transaction's volume update, the map whole while the record shows none", async () => {
    const volume = volumeFixture();
    const intent = intentFor('cmp1');
    const result = reserve(volume, { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0 });
    expect(result.attachment).not.toHaveProperty('pendingConnect');

    await writeReserve({ volume, hasMaps: true }, result, { connectIntent: intent });

    const [put, onVolume] = ddb.commandCalls(TransactWriteCommand)[0]!.args[0].input.TransactItems!;
    expect(put!.Put!.Item).not.toHaveProperty('pendingConnect');
    const update = onVolume!.Update as unknown as Update;
    expect(update.UpdateExpression).toMatch(/SET .*#ci = :intents/);
    expect(update.ExpressionAttributeValues[':intents']).toEqual({ [intent.id]: intent });
    expect(update.ConditionExpression).toMatch(/ AND \(attribute_not_exists\(#ci\) OR size\(#ci\) = :none\)$/);
  });

  test("clearing an intent: REMOVE of its key on the volume, on condition it is there ('gone' when not)", async () => {
    expect(await clearConnectIntent('vol-1', 'i-1')).toBe('cleared');
    const [update] = updatesSent();
    expect(update).toMatchObject({ Key: { pk: 'VOL#vol-1', sk: 'VOL' }, UpdateExpression: 'REMOVE #ci.#intent', ConditionExpression: 'attribute_exists(#ci.#intent)' });
    expect(update!.ExpressionAttributeNames).toEqual({ '#ci': 'connectIntents', '#intent': 'i-1' });

    ddb.on(UpdateCommand).rejects(refusedWith({}));
    expect(await clearConnectIntent('vol-1', 'i-1')).toBe('gone');
  });

  test('AttachmentIdTaken is a 409 Conflict carrying the item it found', () => {
    const { attachment } = reserve(volumeFixture(), { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0 });
    const taken = new AttachmentIdTaken({ ...attachment, deleted: true });
    expect(taken).toBeInstanceOf(Conflict);
    expect(taken.status).toBe(409);
    expect(taken.existing.id).toBe('att-1');
    expect(taken.message).toBe('Attachment id att-1 is already used by a deleted attachment.');
  });
});
