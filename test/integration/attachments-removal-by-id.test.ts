/**
 * DELETE /attachments/{id} by id (functions/attachments/removal-by-id.ts) when it removes a host's
 * last connection: the host's connection is terminated BEFORE the transaction, which is its fence
 * (3 DynamoDB requests from a process that remembers nothing). What that order must not break: a
 * process that dies between the terminate and the transaction (recovery makes the connection the
 * record still has), and a connect of another attachment on the same host that wins the race
 * (the connection is made again, and the retry keeps it). The in-use refusals by id are in
 * attachments-in-use.test.ts.
 */
import { randomUUID } from 'node:crypto';
import type { AuthContext } from '../../functions/core/auth.js';
import { describe, expect, test } from 'vitest';
import { recoverPendingDisconnects } from '../../functions/attachments/recovery.js';
import { getAttachmentRecord } from '../../functions/attachments/repo.js';
import { disconnectIntentId } from '../../functions/attachments/removal-by-id.js';
import { createAttachment, deleteAttachment } from '../../functions/attachments/service.js';
import { forgetAttachment } from '../../functions/attachments/volume-records.js';
import { clearFaultCalls, clearFaults, crashedCalls, faultCalls, injectFault } from '../../functions/core/faults.js';
import { eventually } from '../support/poll.js';
import { BACKEND, backendConnections, connector, DEMO_AUTH, failTransactions, putVolume, readVolume, useAttachmentEnv } from './attachments-support.js';

useAttachmentEnv();

const auth = DEMO_AUTH;
const NOVA: AuthContext = { userId: 'nova', projectId: 'service', isAdmin: true, roles: ['admin', 'service'] };
/** After every call of this test: a recovery pass treats every intent as abandoned. */
const later = () => new Date(Date.now() + 1000);
const connectionCalls = () => faultCalls().map((c) => c.method).filter((m) => m.endsWith('Connection'));

describe('a delete by id removing a host\'s last connection: the terminate before the transaction', () => {
  test('a process that dies between the terminate and the transaction: recovery makes the connection again, and a later delete removes both', async () => {
    // Prepare: connected on cmp1, its only user; the delete comes from a process that does not know the attachment
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    forgetAttachment(att.id);
    injectFault({ kind: 'volume', backend: BACKEND, method: 'terminateConnection', mode: 'crash-after', times: 1 });
    void deleteAttachment({ auth, attachmentId: att.id });
    await eventually(() => crashedCalls().some((c) => c.method === 'terminateConnection'), 'the delete to crash after terminateConnection');
    // The crash's state: the connection gone, the attachment live and recorded on cmp1, its disconnect intent left
    expect(await backendConnections(volume)).toEqual([]);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [att.id] });
    const crashed = (await getAttachmentRecord(att.id))!;
    expect(crashed.deleted).toBeUndefined();
    expect(Object.keys(crashed.pendingDisconnect ?? {})).toHaveLength(1);
    // Act
    const repairs = await recoverPendingDisconnects({ before: later() });
    // Assess: no attachment left live without its connection
    expect(repairs).toEqual([
      {
        kind: 'pending-disconnect',
        resource: `attachment ${att.id}`,
        saw: expect.stringContaining("attaching attachment of volume"),
        did: "made the connection on host cmp1 (the delete's) again; kept the backend connection (an attachment uses the host); cleared the intent",
      },
    ]);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await getAttachmentRecord(att.id))!.pendingDisconnect).toEqual({});
    expect(await recoverPendingDisconnects({ before: later() })).toEqual([]);
    // and no connection left for a deleted attachment
    forgetAttachment(att.id);
    expect(await deleteAttachment({ auth, attachmentId: att.id })).toEqual([]);
    expect(await backendConnections(volume)).toEqual([]);
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachments: {}, connections: {} });
    expect(await getAttachmentRecord(att.id)).toMatchObject({ deleted: true, disconnect: null, pendingDisconnect: {} });
  });

  test("a flow's step re-run after dying between the terminate and the transaction: the same intent, ended by the re-run", async () => {
    // Prepare: Nova's service user deletes by id (a flow's step: no call id) and dies after the terminate
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    forgetAttachment(att.id);
    injectFault({ kind: 'volume', backend: BACKEND, method: 'terminateConnection', mode: 'crash-after', times: 1 });
    void deleteAttachment({ auth: NOVA, attachmentId: att.id });
    await eventually(() => crashedCalls().some((c) => c.method === 'terminateConnection'), 'the delete to crash after terminateConnection');
    expect(Object.keys((await getAttachmentRecord(att.id))!.pendingDisconnect ?? {})).toEqual([disconnectIntentId(att.id)]);
    // Act: the step runs again
    forgetAttachment(att.id);
    expect(await deleteAttachment({ auth: NOVA, attachmentId: att.id })).toEqual([]);
    // Assess: its transaction ended the intent the first run left: nothing for a recovery pass
    expect(await getAttachmentRecord(att.id)).toMatchObject({ deleted: true, disconnect: null, pendingDisconnect: {} });
    expect(await backendConnections(volume)).toEqual([]);
    expect(await recoverPendingDisconnects({ before: later() })).toEqual([]);
    // Two API calls have their own intents
    expect(disconnectIntentId(att.id, 'req-a')).not.toBe(disconnectIntentId(att.id, 'req-b'));
  });

  test('a connect of another attachment on the same host between the read and the transaction: the connection is made again and kept', async () => {
    // Prepare: the delete read the volume (cmp1 used by its attachment alone) and is held at cmp1's terminate
    const volume = await putVolume({ multiattach: true });
    const leaving = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    forgetAttachment(leaving.id);
    injectFault({ kind: 'volume', backend: BACKEND, method: 'terminateConnection', mode: 'hang', times: 1 });
    clearFaultCalls();
    const removal = deleteAttachment({ auth, attachmentId: leaving.id });
    await eventually(() => faultCalls().some((c) => c.method === 'terminateConnection' && c.hanging), "the delete held at cmp1's terminate");
    // Act: a second attachment connects on cmp1 and records it, then the held terminate removes that connection
    const joining = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [leaving.id, joining.id] });
    clearFaults(); // releases the held terminate (a hang, not a crash)
    const remaining = await removal;
    // Assess: the delete's transaction failed on the version the connect moved; restoreHost made cmp1 again, and
    // the retry, reading cmp1 in use, deleted without terminating it
    expect(remaining.map((r) => r.id)).toEqual([joining.id]);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [joining.id] });
    expect(await getAttachmentRecord(leaving.id)).toMatchObject({ deleted: true, disconnect: null, pendingDisconnect: {} });
    // The delete's terminate (held), the connect's initialize, restoreHost's initialize; no second terminate
    expect(connectionCalls()).toEqual(['terminateConnection', 'initializeConnection', 'initializeConnection']);
  });

  test('a transaction that fails for good after the terminate: the connection is made again, the intent cleared, the attachment kept', async () => {
    // Prepare
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    forgetAttachment(att.id);
    const lost = Object.assign(new Error('the transaction failed'), { name: 'InternalServerError' });
    const restoreTransactions = failTransactions(lost);
    clearFaultCalls();
    // Act
    let failure: unknown;
    try {
      await deleteAttachment({ auth, attachmentId: att.id });
    } catch (e) {
      failure = e;
    } finally {
      restoreTransactions();
    }
    // Assess
    expect(failure).toBe(lost);
    expect(connectionCalls()).toEqual(['terminateConnection', 'initializeConnection']);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [att.id] });
    expect(await getAttachmentRecord(att.id)).toMatchObject({ attachedHost: 'cmp1', pendingDisconnect: {} });
    expect((await getAttachmentRecord(att.id))!.deleted).toBeUndefined();
  });
});
