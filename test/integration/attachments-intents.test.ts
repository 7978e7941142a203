/**
 * Creates with a caller's own attachment id (idempotent: a re-run finds what the first run made),
 * and the recovery of connects and disconnects a crash left half done (functions/attachments/
 * recovery.ts), against DynamoDB Local and a local-driver backend. The whole-stack crash
 * reproductions are in attachments-crash.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { AttachmentIdTaken, connectIntentId, newConnectIntent } from '../../functions/attachments/model.js';
import { recoverPendingConnects, recoverPendingDisconnects, terminateUnusedConnection } from '../../functions/attachments/recovery.js';
import { getAttachmentRecord, writeConnectIntent } from '../../functions/attachments/repo.js';
import { completeAttachment, createAttachment, deleteAttachment, updateAttachment } from '../../functions/attachments/service.js';
import { runAudit } from '../../functions/audit/audit.js';
import { DriverError } from '../../functions/core/errors.js';
import { clearFaultCalls, clearFaults, faultCalls, injectFault } from '../../functions/core/faults.js';
import { intentId } from '../../functions/core/intents.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { eventually } from '../support/poll.js';
import { attachmentItems, BACKEND, backendConnections, connectIntentsOn, connector, crashed, DEMO_AUTH, failVolumeWrites, liveAttachmentItems, later, putVolume, readVolume, useAttachmentEnv, VOLUME_HOST } from './attachments-support.js';

useAttachmentEnv();

const auth = DEMO_AUTH;

describe('createAttachment with the caller’s id', () => {
  test('twice: one attachment, the same id; with a connector the second call connects nothing new', async () => {
    const volume = await putVolume();
    const instance = randomUUID();
    const id = intentId(randomUUID(), 'attach', 'bdm-1');
    const first = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: null, attachmentId: id });
    const again = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: null, attachmentId: id });
    expect(first.id).toBe(id);
    expect(again).toEqual(first);
    expect((await liveAttachmentItems(volume.id)).map((i) => i.id)).toEqual([id]);
    expect((await readVolume(volume.id)).instances).toEqual({ [instance]: 1 });

    // A re-run with the connector connects the reservation the first run left; a third finds it connected.
    const connected = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: connector('cmp1'), attachmentId: id });
    const third = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: connector('cmp1'), attachmentId: id });
    expect(connected).toMatchObject({ id, attachStatus: 'attaching', attachedHost: 'cmp1' });
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect(third).toEqual(connected);
    expect((await liveAttachmentItems(volume.id)).map((i) => i.id)).toEqual([id]);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [id] });
    expect(await backendConnections(volume)).toEqual(['cmp1']);
  });

  test('an id whose attachment was deleted: AttachmentIdTaken carrying the tombstone; nothing made', async () => {
    const volume = await putVolume();
    const instance = randomUUID();
    const id = randomUUID();
    await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: null, attachmentId: id });
    await deleteAttachment({ auth, attachmentId: id });
    const before = await readVolume(volume.id);

    const retry = createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: connector('cmp1'), attachmentId: id });

    await expect(retry).rejects.toBeInstanceOf(AttachmentIdTaken);
    const taken = (await retry.catch((e: unknown) => e)) as AttachmentIdTaken;
    expect(taken.status).toBe(409);
    expect(taken.existing).toMatchObject({ id, deleted: true, volumeId: volume.id });
    expect(await readVolume(volume.id)).toEqual(before);
    expect(await backendConnections(volume)).toEqual([]);
  });

  test('an id used for another volume or another instance is refused; the first attachment is untouched', async () => {
    const volume = await putVolume({ multiattach: true });
    const other = await putVolume({ multiattach: true });
    const instance = randomUUID();
    const id = randomUUID();
    const first = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: null, attachmentId: id });
    const otherBefore = await readVolume(other.id);

    await expect(createAttachment({ auth, volumeId: other.id, instanceUuid: instance, connector: null, attachmentId: id })).rejects.toBeInstanceOf(AttachmentIdTaken);
    await expect(createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null, attachmentId: id })).rejects.toBeInstanceOf(AttachmentIdTaken);

    expect(await getAttachmentRecord(id)).toEqual(first);
    expect(await readVolume(other.id)).toEqual(otherBefore);
    expect(await attachmentItems(other.id)).toEqual([]);
    expect(Object.keys((await readVolume(volume.id)).attachments)).toEqual([id]);
  });

  test.each([false, true])('20 concurrent creates with one id (multiattach %s): exactly one attachment', async (multiattach) => {
    const volume = await putVolume({ multiattach });
    const instance = randomUUID();
    const id = randomUUID();

    const results = await Promise.allSettled(
      Array.from({ length: 20 }, () => createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: connector('cmp1'), attachmentId: id })),
    );

    expect(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason))).toEqual([]);
    expect(new Set(results.map((r) => (r as PromiseFulfilledResult<{ id: string }>).value.id))).toEqual(new Set([id]));
    expect((await attachmentItems(volume.id)).map((i) => i.id)).toEqual([id]);
    const after = await readVolume(volume.id);
    expect(Object.keys(after.attachments)).toEqual([id]);
    expect(after.instances).toEqual({ [instance]: 1 });
    expect(after.connections).toEqual({ cmp1: [id] });
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect(await connectIntentsOn(volume.id)).toEqual({});
  });

  test('a failed connect keeps the reservation of an id-given create; the re-run connects it', async () => {
    const volume = await putVolume();
    const instance = randomUUID();
    const id = randomUUID();
    injectFault({ kind: 'volume', backend: BACKEND, method: 'initializeConnection', mode: 'fail', times: 1 });

    await expect(createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: connector('cmp1'), attachmentId: id })).rejects.toThrow(DriverError);
    expect(await getAttachmentRecord(id)).toMatchObject({ attachStatus: 'reserved' });
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect(await backendConnections(volume)).toEqual([]);

    const rerun = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: connector('cmp1'), attachmentId: id });
    expect(rerun).toMatchObject({ id, attachStatus: 'attaching', attachedHost: 'cmp1' });
    expect(await backendConnections(volume)).toEqual(['cmp1']);
  });

  test("a flow's step re-run after dying between its connect intent and its transaction: the same intent, ended by the re-run", async () => {
    // Prepare: Nova's step (no call id) creates with a connector and dies after initializeConnection
    const volume = await putVolume();
    const instance = randomUUID();
    const id = randomUUID();
    injectFault({ kind: 'volume', backend: BACKEND, method: 'initializeConnection', mode: 'crash-after', times: 1 });
    void createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: connector('cmp1'), attachmentId: id });
    await crashed('initializeConnection');
    expect(Object.keys(await connectIntentsOn(volume.id))).toEqual([connectIntentId(id, 'cmp1')]);
    // Act: the step runs again
    const rerun = await createAttachment({ auth, volumeId: volume.id, instanceUuid: instance, connector: connector('cmp1'), attachmentId: id });
    // Assess: its transaction ended the intent the first run left: nothing for a recovery pass
    expect(rerun).toMatchObject({ id, attachStatus: 'attaching', attachedHost: 'cmp1' });
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect(await recoverPendingConnects({ before: later() })).toEqual([]);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    // Two API calls have their own intents; so have two hosts
    expect(connectIntentId(id, 'cmp1', 'req-a')).not.toBe(connectIntentId(id, 'cmp1', 'req-b'));
    expect(connectIntentId(id, 'cmp1')).not.toBe(connectIntentId(id, 'cmp2'));
  });
});

describe('recoverPendingConnects', () => {
  test('a connect that died after initializeConnection: the export goes, the intent goes, the attachment stays reserved', async () => {
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    injectFault({ kind: 'volume', backend: BACKEND, method: 'initializeConnection', mode: 'crash-after', times: 1 });
    void updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp2') });
    await crashed('initializeConnection');
    expect(await backendConnections(volume)).toEqual(['cmp2']);
    const [intent] = Object.values(await connectIntentsOn(volume.id));
    expect(intent).toMatchObject({ host: 'cmp2', attachmentId: att.id });

    // A pass that counts the crashed call as live leaves it alone.
    expect(await recoverPendingConnects({ before: new Date(intent!.startedAt) })).toEqual([]);
    const repairs = await recoverPendingConnects({ before: later() });

    expect(repairs).toEqual([{ kind: 'pending-connect', resource: `attachment ${att.id}`, saw: expect.stringContaining('host cmp2'), did: 'terminated the backend connection; cleared the intent' }]);
    expect(await backendConnections(volume)).toEqual([]);
    expect(await getAttachmentRecord(att.id)).toMatchObject({ attachStatus: 'reserved' });
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect(await recoverPendingConnects({ before: later() })).toEqual([]);
    // The attachment still works.
    await updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp2') });
    expect(await backendConnections(volume)).toEqual(['cmp2']);
  });

  test("a move that died after terminating the old host's connection, before its transaction: recovery makes the old host's connection again and removes the new one", async () => {
    // Prepare: the old host's terminate happens, then the process dies
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    injectFault({ kind: 'volume', backend: BACKEND, method: 'terminateConnection', mode: 'crash-after', times: 1 });
    void updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp2') });
    await crashed('terminateConnection');
    expect(await backendConnections(volume)).toEqual(['cmp2']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [att.id] });
    // Act
    const repairs = await recoverPendingConnects({ before: later() });
    // Assess: what the record says (the attachment on cmp1) is what the backend holds again
    expect(repairs).toEqual([
      {
        kind: 'pending-connect',
        resource: `attachment ${att.id}`,
        saw: expect.stringContaining('host cmp2'),
        did: "made the connection on host cmp1 (the move's old host) again; terminated the backend connection; cleared the intent",
      },
    ]);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [att.id] });
    expect(await getAttachmentRecord(att.id)).toMatchObject({ attachedHost: 'cmp1' });
    expect(await connectIntentsOn(volume.id)).toEqual({});
  });

  test("a move whose transaction fails after the old host's terminate: the old host's connection is made again, the new one removed, the intent cleared", async () => {
    // Prepare
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    const lost = Object.assign(new Error('the transaction failed'), { name: 'InternalServerError' });
    // The connect's write of the volume fails (its intent's, which only checks the volume's version, does not)
    const restoreTransactions = failVolumeWrites(lost);
    clearFaultCalls();
    // Act
    let failure: unknown;
    try {
      await updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp2') });
    } catch (e) {
      failure = e;
    } finally {
      restoreTransactions();
    }
    // Assess: the terminate of cmp1 happened (the move's order) and was undone; nothing of cmp2 is left
    expect(failure).toBe(lost);
    const driverCalls = faultCalls().map((c) => c.method).filter((m) => m.endsWith('Connection'));
    // connect cmp2, terminate cmp1 (before the transaction), make cmp1 again (restoreHost), terminate cmp2 (the failed connect's cleanup)
    expect(driverCalls).toEqual(['initializeConnection', 'terminateConnection', 'initializeConnection', 'terminateConnection']);
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [att.id] });
    expect(await getAttachmentRecord(att.id)).toMatchObject({ attachedHost: 'cmp1' });
    expect(await connectIntentsOn(volume.id)).toEqual({});
  });

  test("a move whose transaction loses its race to a connect on the old host: the old host's connection is made again, then the retry moves without terminating it", async () => {
    // Prepare: the move read the volume (cmp1 used by it alone) and is held at the old host's terminate
    const volume = await putVolume({ multiattach: true });
    const moving = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    injectFault({ kind: 'volume', backend: BACKEND, method: 'terminateConnection', mode: 'hang', times: 1 });
    clearFaultCalls();
    const move = updateAttachment({ auth, attachmentId: moving.id, connector: connector('cmp2') });
    await eventually(() => faultCalls().some((c) => c.method === 'terminateConnection' && c.hanging), "the move held at cmp1's terminate");
    // Act: a second attachment connects on cmp1 and records it, then the held terminate removes that connection
    const joining = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [moving.id, joining.id] });
    clearFaults(); // releases the held terminate (a hang, not a crash)
    const moved = await move;
    // Assess: the move's transaction failed on the version the connect moved; restoreHost made cmp1 again, and the
    // retry, reading cmp1 in use, kept it
    expect(moved).toMatchObject({ attachedHost: 'cmp2' });
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect(await backendConnections(volume)).toEqual(['cmp1', 'cmp2']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [joining.id], cmp2: [moving.id] });
    const driverCalls = faultCalls().map((c) => c.method).filter((m) => m.endsWith('Connection'));
    // In the order intercepted: the move's initialize of cmp2, its terminate of cmp1 (held), the joining connect's
    // initialize of cmp1, restoreHost's of cmp1, the retry's of cmp2; no second terminate
    expect(driverCalls).toEqual(['initializeConnection', 'terminateConnection', 'initializeConnection', 'initializeConnection', 'initializeConnection']);
  });

  test('an intent on a host another attachment uses: the intent is cleared, the connection kept', async () => {
    const volume = await putVolume({ multiattach: true });
    const user = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmpH') });
    await completeAttachment({ auth, attachmentId: user.id });
    const planted = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    expect(await writeConnectIntent(planted, newConnectIntent(planted.id, connector('cmpH'), new Date().toISOString(), 'planted'))).toBeDefined();
    clearFaultCalls();

    const repairs = await recoverPendingConnects({ before: later() });

    // Not even for a moment: a terminate healed by the fence's reconnect would still cut the live host's I/O.
    expect(faultCalls().filter((c) => c.method === 'terminateConnection')).toEqual([]);
    expect(repairs).toEqual([
      { kind: 'pending-connect', resource: `attachment ${planted.id}`, saw: expect.any(String), did: 'kept the backend connection (an attachment uses the host); cleared the intent' },
    ]);
    expect(await backendConnections(volume)).toEqual(['cmpH']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmpH: [user.id] });
    expect(await connectIntentsOn(volume.id)).toEqual({});
  });

  test('a pass that takes a live connect for a dead one does not break it: the connect retries and records its connection', async () => {
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: null });
    injectFault({ kind: 'volume', backend: BACKEND, method: 'initializeConnection', mode: 'hang', times: 1 });
    const live = updateAttachment({ auth, attachmentId: att.id, connector: connector('cmp1') });
    await eventually(() => faultCalls().some((c) => c.method === 'initializeConnection' && c.hanging), 'the connect held in initializeConnection');

    const repairs = await recoverPendingConnects({ before: later() });
    clearFaults(); // releases the held call (a hang, not a crash)

    expect(repairs.map((r) => r.did)).toEqual(['terminated the backend connection; cleared the intent']);
    expect(await live).toMatchObject({ attachStatus: 'attaching', attachedHost: 'cmp1' });
    expect(await connectIntentsOn(volume.id)).toEqual({});
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [att.id] });
  });
});

describe('recoverPendingDisconnects and terminateUnusedConnection', () => {
  test('a delete that died before terminateConnection: the pass removes the export once, then has nothing left', async () => {
    const volume = await putVolume();
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    injectFault({ kind: 'volume', backend: BACKEND, method: 'terminateConnection', mode: 'crash', times: 1 });
    void deleteAttachment({ auth, attachmentId: att.id });
    await crashed('terminateConnection');
    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await runAudit()).findings.map((f) => f.kind)).toContain('pending-disconnect');

    const repairs = await recoverPendingDisconnects({ before: later() });

    expect(repairs).toEqual([{ kind: 'pending-disconnect', resource: `attachment ${att.id}`, saw: expect.stringContaining('host cmp1'), did: 'terminated the backend connection' }]);
    expect(await backendConnections(volume)).toEqual([]);
    expect(await recoverPendingDisconnects({ before: later() })).toEqual([]);
    expect((await getAttachmentRecord(att.id))!.disconnect).toBeNull();
  });

  test('terminateUnusedConnection: an unused export goes, a used one stays, an unknown volume is reported', async () => {
    const volume = await putVolume({ multiattach: true });
    const att = await createAttachment({ auth, volumeId: volume.id, instanceUuid: randomUUID(), connector: connector('cmp1') });
    const driver = await driverForHost(VOLUME_HOST);
    await driver.initializeConnection(volume.backendName, connector('stray'));
    expect(await backendConnections(volume)).toEqual(['cmp1', 'stray']);

    expect(await terminateUnusedConnection(volume.id, 'stray', { host: 'stray' })).toBe('terminated');
    expect(await terminateUnusedConnection(volume.id, 'cmp1', { host: 'cmp1' })).toBe('in-use');
    expect(await terminateUnusedConnection(randomUUID(), 'cmp1', { host: 'cmp1' })).toBe('volume-gone');

    expect(await backendConnections(volume)).toEqual(['cmp1']);
    expect((await readVolume(volume.id)).connections).toEqual({ cmp1: [att.id] });
  });
});
