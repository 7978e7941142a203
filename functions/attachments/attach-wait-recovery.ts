/**
 * The reconciler's pass over attach waits (attach-wait.ts) that nothing will end:
 * - `waiting` since before `before` with no execution of its recorded name: the connect's start
 *   failed (Step Functions refused, or the process died between the transaction and the start).
 *   The execution is started under that name; its steps decide from the record, so a start that
 *   races another (ExecutionAlreadyExists) is harmless. One RUNNING is the machine's and left
 *   alone (it may wait up to its bound, 3.8 hours).
 * - `waiting`, its execution ended without ending it (aborted, timed out, its Failed step out of
 *   retries, or a console start with another input): an execution cannot start again under its
 *   name, so the pass does what the machine's next step would, from one look at the backend
 *   (attach-wait-steps.ts backendAttachState): attached -> the wait recorded `attached`; still
 *   attaching -> a new wait (the volume's next version names its execution: renewAttachWait),
 *   written before its execution starts, so a start that fails leaves a `waiting` record with no
 *   execution, which the next pass starts; gone -> the attachment `error_attaching` and what the
 *   backend holds detached, as the machine's Failed step does (attachWaitFailed). Each write is
 *   conditioned on the wait still being the one read, so a delete or a connect meanwhile wins.
 * - `failed` with `detachPending` ended before `before`, whose execution is not running: the
 *   machine's removal of what the backend holds failed after its retries. The removal is run again
 *   as the machine's Failed step runs it (attachWaitFailed: releaseHost under the same conditions
 *   as every release, so a host another attachment uses is kept), which clears the intent.
 * When Step Functions or the backend cannot say where things stand, nothing is done: the next pass looks again.
 *
 * The waits are found in the volumes' `attachWaits` maps, and, until none remain, on attachment
 * items written before those maps (`attachWait`): one Scan finds both.
 */
import { scanAll } from '../core/db.js';
import { executionStatus, startExecution } from '../core/executions.js';
import { logger } from '../core/logger.js';
import { tableName } from '../core/tables.js';
import type { AttachWait, Volume } from '../volumes/model.js';
import { now } from './connections.js';
import { ATTACH_WAIT_MACHINE, liveItemWait, liveWait, renewAttachWait, renewItemAttachWait } from './attach-wait.js';
import { attachLostMessage, attachWaitFailed, backendAttachState, updateWait, writeRenewedItemWait, writeRenewedWait, type WaitPlace } from './attach-wait-steps.js';
import { ATTACHMENT_SK, attachmentFromItem, type Attachment } from './model.js';
import { loadedVolume } from './volume-records.js';

export interface AttachWaitRecovery {
  kind: 'stuck-attach-wait' | 'attach-wait-detach-pending';
  attachmentId: string;
  /**
   * started / detached / attached / renewed / errored: done; superseded: nothing to do (a delete or
   * a connect changed the wait meanwhile); ended: the execution ended and the pass could not look
   * at the backend (the volume or the connector gone): an operator's; failed: nothing done, the
   * next pass tries again.
   */
  action: 'started' | 'detached' | 'attached' | 'renewed' | 'errored' | 'superseded' | 'ended' | 'failed';
  /** What the pass saw on the record. */
  saw: string;
  /** What it did, or why nothing. */
  did: string;
}

/** An open wait as the scan found it: on a volume (`volume`), or on an attachment item written before the volume's map (`item`). */
export type OpenWait = { attachmentId: string; volumeId: string; wait: AttachWait; live: boolean } & ({ volume: Volume } | { item: Attachment });

const isOpen = (wait: AttachWait) => wait.status === 'waiting' || wait.detachPending === true;

/**
 * Waits `waiting`, or `failed` with their detach still pending (of deleted attachments too: a delete
 * of an error_attaching attachment removes no connection, and keeps such a wait): one Scan of the
 * volumes with attach waits and the attachment items with one.
 */
export async function scanOpenWaits(): Promise<OpenWait[]> {
  const items = await scanAll({
    TableName: tableName('volume'),
    FilterExpression: '(sk = :vol AND size(#ws) > :zero) OR (sk = :att AND (#w.#st = :waiting OR #w.#dp = :true))',
    ExpressionAttributeNames: { '#ws': 'attachWaits', '#w': 'attachWait', '#st': 'status', '#dp': 'detachPending' },
    ExpressionAttributeValues: { ':vol': 'VOL', ':zero': 0, ':att': ATTACHMENT_SK, ':waiting': 'waiting', ':true': true },
    ConsistentRead: true,
  });
  return items.flatMap((item): OpenWait[] => {
    if (item.sk === ATTACHMENT_SK) {
      const a = attachmentFromItem(item);
      return [{ attachmentId: a.id, volumeId: a.volumeId, wait: a.attachWait!, live: liveItemWait(a) !== undefined, item: a }];
    }
    const volume = loadedVolume(item).volume;
    return Object.entries(volume.attachWaits ?? {})
      .filter(([, wait]) => isOpen(wait))
      .map(([attachmentId, wait]) => ({ attachmentId, volumeId: volume.id, wait, live: liveWait(volume, attachmentId) !== undefined, volume }));
  });
}

const placeOf = (open: OpenWait): WaitPlace => ('item' in open ? 'item' : { volumeId: open.volumeId });

export async function recoverAttachWaits(options: { before: Date }): Promise<AttachWaitRecovery[]> {
  const before = options.before.getTime();
  const out: AttachWaitRecovery[] = [];
  for (const open of await scanOpenWaits()) {
    const { wait, attachmentId } = open;
    const pendingDetach = wait.status === 'failed' && wait.detachPending === true;
    // A wait superseded by a delete or another connect is ended by its machine's next look, or never matters.
    if (!pendingDetach && !open.live) continue;
    if (Date.parse(pendingDetach ? (wait.endedAt ?? wait.startedAt) : wait.startedAt) >= before) continue;
    const kind = pendingDetach ? 'attach-wait-detach-pending' : 'stuck-attach-wait';
    const saw = pendingDetach
      ? `attach to ${wait.host} failed ${wait.endedAt} (${wait.reason}) and the backend's connection was not removed`
      : `attach to ${wait.host} waiting since ${wait.startedAt}`;
    try {
      const status = await executionStatus(ATTACH_WAIT_MACHINE, wait.execution);
      if (status === 'RUNNING') continue;
      out.push(pendingDetach ? await detachAgain(attachmentId, wait, saw) : await startOrReport(open, status, saw));
    } catch (e) {
      logger.error('attach wait repair failed; the next pass tries again', { attachmentId, execution: wait.execution, error: e as Error });
      out.push({ kind, attachmentId, action: 'failed', saw, did: `failed (${(e as Error).message}); the next pass tries again` });
    }
  }
  return out;
}

async function startOrReport(open: OpenWait, status: string | undefined, saw: string): Promise<AttachWaitRecovery> {
  if (status !== undefined) return repairEnded(open, status, saw);
  await startExecution(ATTACH_WAIT_MACHINE, open.wait.execution, { attachmentId: open.attachmentId });
  return { kind: 'stuck-attach-wait', attachmentId: open.attachmentId, action: 'started', saw, did: `started ${open.wait.execution}, which no start had made` };
}

/** The renewal written (on the volume, or on an old item), and the new execution's name; undefined when a delete or a connect won. */
async function renew(open: OpenWait): Promise<string | undefined> {
  if ('item' in open) {
    const renewed = renewItemAttachWait(open.item, now());
    return (await writeRenewedItemWait(open.item, renewed)) ? renewed.attachWait!.execution : undefined;
  }
  const renewed = renewAttachWait(open.volume, open.attachmentId, now());
  return (await writeRenewedWait(open.volume, renewed, open.attachmentId)) ? renewed.attachWaits![open.attachmentId]!.execution : undefined;
}

/** A wait whose execution ended without ending it: one look at the backend decides (see the top of this file). */
async function repairEnded(open: OpenWait, status: string, saw: string): Promise<AttachWaitRecovery> {
  const { attachmentId, wait } = open;
  const report = (action: AttachWaitRecovery['action'], did: string): AttachWaitRecovery => ({ kind: 'stuck-attach-wait', attachmentId, action, saw, did });
  const ended = `its execution ${wait.execution} ended ${status} without ending the wait`;
  const superseded = () => report('superseded', `nothing: ${ended}, and a delete or a connect changed the wait meanwhile`);
  // The connector of a live wait: its summary's (connected), or the old item's.
  const state = 'item' in open ? await backendAttachState(open.volumeId, open.item.connector) : await backendAttachState(open.volumeId, open.volume.attachments[attachmentId]?.connector, open.volume);
  if (!state) return report('ended', `nothing: ${ended}, and there is no backend attachment to look at (the volume or its connector is gone); left for an operator`);
  if (state.state === 'attached') {
    return (await updateWait(placeOf(open), attachmentId, wait, 'waiting', { status: 'attached', endedAt: now() })) ? report('attached', `recorded attached: ${ended}, and the backend holds the attachment`) : superseded();
  }
  if (state.state === 'attaching') {
    const execution = await renew(open);
    if (!execution) return superseded();
    await startExecution(ATTACH_WAIT_MACHINE, execution, { attachmentId });
    return report('renewed', `started ${execution}: ${ended}, and the backend is still attaching`);
  }
  const cause = JSON.stringify({ errorMessage: attachLostMessage(open.volumeId, wait, state.reason) });
  const failed = await attachWaitFailed(attachmentId, { Error: 'AttachmentLost', Cause: cause }, wait.execution);
  return failed.outcome === 'failed' ? report('errored', `error_attaching (${failed.reason}), what the backend held detached: ${ended}`) : superseded();
}

async function detachAgain(attachmentId: string, wait: AttachWait, saw: string): Promise<AttachWaitRecovery> {
  const result = await attachWaitFailed(attachmentId, undefined, wait.execution);
  const did = result.outcome === 'failed' ? 'removed what the backend held (unless another attachment uses the host) and cleared the intent' : 'nothing: the wait changed meanwhile';
  return { kind: 'attach-wait-detach-pending', attachmentId, action: 'detached', saw, did };
}
