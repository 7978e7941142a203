/**
 * What a versioned write of an attachment and its volume carries (repo.ts writeVersioned): only
 * what the transition changed, on both items, under the same version conditions. DynamoDB Local
 * pays for every value an update carries (docs/attachments-bench.md, the cost per request shape).
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { writeVersioned } from '../../functions/attachments/repo.js';
import { connect, remove, reserve } from '../../functions/attachments/transitions.js';
import { setDb } from '../../functions/core/db.js';
import type { Volume } from '../../functions/volumes/model.js';
import { connectorFor, INSTANCE_A, INSTANCE_B, localConnection, T0, T1, volumeFixture } from '../support/attachment-fixtures.js';

const documents = DynamoDBDocumentClient.from(new DynamoDBClient({ region: 'us-east-1', credentials: { accessKeyId: 'k', secretAccessKey: 's' } }));
const ddb = mockClient(documents);
beforeAll(() => setDb(documents));
beforeEach(() => {
  ddb.reset();
  ddb.on(TransactWriteCommand).resolves({});
});
afterAll(() => setDb(undefined));

type Update = { UpdateExpression: string; ConditionExpression: string; ExpressionAttributeNames?: Record<string, string>; ExpressionAttributeValues: Record<string, unknown> };

/** The attachment's and the volume's updates of the one transaction sent. */
function sentUpdates(): { attachment: Update; volume: Update } {
  const [call] = ddb.commandCalls(TransactWriteCommand);
  const [attachment, volume] = call!.args[0].input.TransactItems!.map((item) => item.Update as unknown as Update);
  return { attachment: attachment!, volume: volume! };
}
const namesOf = (u: Update) => Object.values(u.ExpressionAttributeNames ?? {});

/** A multiattach volume with attachment att-1 of INSTANCE_A connected on cmp1 and att-2 of INSTANCE_B reserved. */
function twoAttachments() {
  const one = reserve(volumeFixture({ multiattach: true }), { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0 });
  const connected = connect(one.volume, one.attachment, { connector: connectorFor('cmp1'), connection: localConnection('cmp1'), now: T1 }, { checkDuplicates: true });
  const two = reserve(connected.volume, { attachmentId: 'att-2', instanceUuid: INSTANCE_B, now: T1 });
  return { volume: two.volume, connected: connected.attachment, reserved: two.attachment };
}

describe('a versioned write carries only what changed', () => {
  test("a connect sets the attachment's changed fields, not the ones it keeps (volume, project, instance, creation time)", async () => {
    // Prepare
    const { volume, reserved } = twoAttachments();
    const result = connect(volume, reserved, { connector: connectorFor('cmp2'), connection: localConnection('cmp2'), now: T1 }, { checkDuplicates: true });
    // Act
    await writeVersioned({ volume, attachment: reserved }, result);
    // Assess
    const { attachment } = sentUpdates();
    expect(namesOf(attachment)).toEqual(expect.arrayContaining(['attachStatus', 'connector', 'attachedHost', 'connectionInfo']));
    // The item's version moves with the item alone (reserve, tombstone): the volume's version guards the state.
    for (const kept of ['volumeId', 'projectId', 'instanceUuid', 'createdAt', 'volumeHost', 'version']) expect(namesOf(attachment)).not.toContain(kept);
    expect(attachment.ConditionExpression).toBe('version = :version');
  });

  test("the volume's maps change by entry: the other attachment's summary is not carried, the removed entries are removed", async () => {
    // Prepare
    const { volume, connected } = twoAttachments();
    const removed = remove(volume, connected, T1);
    // Act
    await writeVersioned({ volume, attachment: connected }, { volume: removed.volume, attachment: removed.tombstone });
    // Assess
    const { volume: update } = sentUpdates();
    expect(update.UpdateExpression).not.toMatch(/(^|[ ,])(attachments|instances|connections) = /);
    expect(update.UpdateExpression).toMatch(/REMOVE .*attachments\.#\w+.*instances\.#\w+.*connections\.#\w+/);
    expect(namesOf(update)).toEqual(expect.arrayContaining(['att-1', INSTANCE_A, 'cmp1']));
    expect(namesOf(update)).not.toContain('att-2');
    expect(JSON.stringify(update.ExpressionAttributeValues)).not.toContain('att-2');
    expect(update.ConditionExpression).toBe('version = :version');
    expect(update.ExpressionAttributeValues[':version']).toBe(volume.version);
  });

  test('a map the record read as empty is set whole, even when it stays empty (the item may not have it yet)', async () => {
    // Prepare
    const volume: Volume = volumeFixture();
    const reserved = reserve(volume, { attachmentId: 'att-1', instanceUuid: null, now: T0 });
    const before: Volume = { ...reserved.volume, connections: {} };
    const result = connect(before, reserved.attachment, { connector: connectorFor('cmp1'), connection: localConnection('cmp1'), now: T1 }, { checkDuplicates: true });
    // Act
    await writeVersioned({ volume: before, attachment: reserved.attachment }, result);
    // Assess: instances read empty and still empty, connections read empty and now with cmp1
    const { volume: update } = sentUpdates();
    expect(update.UpdateExpression).toMatch(/instances = :m1/);
    expect(update.ExpressionAttributeValues[':m1']).toEqual({});
    expect(update.UpdateExpression).toMatch(/connections = :m2/);
    expect(update.ExpressionAttributeValues[':m2']).toEqual({ cmp1: ['att-1'] });
  });
});
