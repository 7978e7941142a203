/**
 * Connect intents in the pure transitions (model.ts `pendingConnect`): the reserve of a create
 * with a connector carries its intent, recording the connection on a host ends that host's intent
 * and no other, and a delete keeps the intents of connects still in flight (recovery undoes them).
 */
import { describe, expect, test } from 'vitest';
import { AttachmentIdTaken, CONNECT_INTENT_TIMEOUT_MS, connectIntentId, newConnectIntent } from '../../functions/attachments/model.js';
import { connect, remove, reserve } from '../../functions/attachments/transitions.js';
import { Conflict } from '../../functions/core/errors.js';
import { connectorFor, INSTANCE_A, localConnection, T0, T1, volumeFixture } from '../support/attachment-fixtures.js';

/** The intent of call `callId` connecting att-1 to `host`. */
const intentFor = (host: string, callId = 'req-1') => newConnectIntent('att-1', connectorFor(host), T0, callId);

describe('connect intents in the transitions', () => {
  test('an intent names its host and expires CONNECT_INTENT_TIMEOUT_MS after it starts; each call has its own, the same call the same', () => {
    const intent = intentFor('cmp1');
    expect(intent).toEqual({
      id: connectIntentId('att-1', 'cmp1', 'req-1'),
      host: 'cmp1',
      connector: connectorFor('cmp1'),
      startedAt: T0,
      expiresAt: new Date(Date.parse(T0) + CONNECT_INTENT_TIMEOUT_MS).toISOString(),
    });
    expect(intentFor('cmp1', 'req-2').id).not.toBe(intent.id);
    expect(intentFor('cmp1').id).toBe(intent.id);
    expect(newConnectIntent('att-1', connectorFor('cmp1'), T0).id).toBe(connectIntentId('att-1', 'cmp1'));
  });

  test('the reserve of a create with a connector carries its intent; a plain reserve carries none', () => {
    const volume = volumeFixture();
    const intent = intentFor('cmp1');
    const withIntent = reserve(volume, { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0, pendingConnect: { [intent.id]: intent } });
    expect(withIntent.attachment.pendingConnect).toEqual({ [intent.id]: intent });
    expect(reserve(volume, { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0 }).attachment).not.toHaveProperty('pendingConnect');
  });

  test("recording the connection ends this connect's intent and keeps every other call's, even for the same host", () => {
    const volume = volumeFixture({ multiattach: true });
    const [mine, sameHost, otherHost] = [intentFor('cmp1'), intentFor('cmp1', 'req-2'), intentFor('cmp2')];
    const pendingConnect = { [mine.id]: mine, [sameHost.id]: sameHost, [otherHost.id]: otherHost };
    const r = reserve(volume, { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0, pendingConnect });
    const connected = connect(r.volume, r.attachment, { connector: connectorFor('cmp1'), connection: localConnection('cmp1'), now: T1, intentId: mine.id }, { checkDuplicates: true });
    expect(connected.attachment.pendingConnect).toEqual({ [sameHost.id]: sameHost, [otherHost.id]: otherHost });
    expect(connected.volume.connections).toEqual({ cmp1: ['att-1'] });
  });

  test('a delete keeps the intents of connects in flight on the tombstone', () => {
    const volume = volumeFixture();
    const intent = intentFor('cmp1');
    const r = reserve(volume, { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0, pendingConnect: { [intent.id]: intent } });
    const removed = remove(r.volume, r.attachment, T1);
    expect(removed.tombstone).toMatchObject({ deleted: true, pendingConnect: { [intent.id]: intent } });
    expect(removed.disconnect).toBeNull();
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
