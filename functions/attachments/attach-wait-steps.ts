/**
 * The steps of volume-attach-wait (statemachines/volume-attach-wait.asl.json; the record and its
 * transitions: attach-wait.ts), run by the attachment-steps Lambda (steps.ts):
 * - `attach-wait-look`: one look at the backend (EC2 DescribeVolumes). Attached: the wait is
 *   recorded `attached`. Still attaching: BackendNotReady, which the machine's Retry runs again
 *   after its wait, up to its bound. Gone: AttachmentLost, which the Catch hands to the failure.
 * - `attach-wait-failed`: the attachment `error_attaching` with the reason, then whatever the
 *   backend holds of the connection removed (idempotently: terminateConnection of a host not
 *   connected succeeds), then that recorded done.
 *
 * Each step first reads the attachment: deleted, its wait ended, or replaced by another connect's
 * (the detach or delete won), it ends at once and touches nothing. Every write is conditioned on
 * the wait still being the one read, so a delete or connect racing a step wins and the step's
 * write is refused (ConcurrentModification-free: it then reads again and finds itself superseded).
 * Each write bumps the attachment's version, so a connect, complete or delete that read the
 * attachment before retries from the record with the wait's outcome instead of writing back the
 * `waiting` it read.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, withRetries } from '../core/db.js';
import { BackendNotReady, FerryError, reasonOf, type CaughtError } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { driverForVolume, loadVolumeOf, now, releaseHost, RETRY } from './connections.js';
import { failAttach, liveWait } from './attach-wait.js';
import { attachmentKey, type Attachment, type AttachWait } from './model.js';
import { getAttachmentRecord, getVolumeRecord, writeVersioned } from './repo.js';

/** The backend holds no connection of the volume to the host any more: the attach did not take. */
export class AttachmentLost extends FerryError {
  constructor(message: string, context: Record<string, unknown>) {
    super(500, 'computeFault', message, { context });
  }
}

export type AttachWaitOutcome = { outcome: 'attached' } | { outcome: 'superseded' } | { outcome: 'failed'; reason: string };

/**
 * One conditional update of the attachment's wait, if it is still the execution's and in status
 * `from`; false when it is not (deleted, ended or replaced meanwhile: the step is superseded).
 */
async function updateWait(attachmentId: string, wait: AttachWait, from: AttachWait['status'], set: Record<string, unknown>, remove: string[] = []): Promise<boolean> {
  const names: Record<string, string> = { '#w': 'attachWait', '#st': 'status', '#ex': 'execution' };
  const values: Record<string, unknown> = { ':ex': wait.execution, ':from': from, ':one': 1 };
  const sets = Object.entries(set).map(([field, value], i) => {
    names[`#f${i}`] = field;
    values[`:v${i}`] = value;
    return `#w.#f${i} = :v${i}`;
  });
  const removes = remove.map((field, i) => {
    names[`#r${i}`] = field;
    return `#w.#r${i}`;
  });
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: attachmentKey(attachmentId),
        UpdateExpression: `${sets.length ? `SET ${sets.join(', ')} ` : ''}${removes.length ? `REMOVE ${removes.join(', ')} ` : ''}ADD version :one`,
        ConditionExpression: '#w.#ex = :ex AND #w.#st = :from',
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: values,
      }),
    );
    return true;
  } catch (e) {
    if ((e as { name?: string }).name === 'ConditionalCheckFailedException') return false;
    throw e;
  }
}

/** `attach-wait-look`: one look at the backend's attachment. */
export async function lookAtAttach(attachmentId: string): Promise<AttachWaitOutcome> {
  const attachment = await getAttachmentRecord(attachmentId);
  const wait = liveWait(attachment);
  if (!attachment || !wait || !attachment.connector) return { outcome: 'superseded' };
  const volume = await getVolumeRecord(attachment.volumeId);
  if (!volume) return { outcome: 'superseded' };
  const driver = await driverForVolume(volume.volume);
  // A driver without the look never answers `pending`: what it connected is made.
  const state = driver.attachmentState ? await driver.attachmentState(volume.volume.backendName, attachment.connector) : ({ state: 'attached' } as const);
  const context = { attachmentId, volumeId: attachment.volumeId, host: wait.host, execution: wait.execution };
  if (state.state === 'attaching') {
    throw new BackendNotReady(`attachment ${attachmentId}: the backend is still attaching volume ${attachment.volumeId} to ${wait.host}`, { context });
  }
  if (state.state === 'gone') throw new AttachmentLost(`Attach of volume ${attachment.volumeId} to ${wait.host} failed on the backend: ${state.reason}.`, context);
  const recorded = await updateWait(attachmentId, wait, 'waiting', { status: 'attached', endedAt: now() });
  return recorded ? { outcome: 'attached' } : { outcome: 'superseded' };
}

/**
 * `attach-wait-failed`: records the failure (once: a re-run finds it recorded and goes on with the
 * removal), removes the backend's connection unless another attachment uses the host, and
 * records that done. A wait that is not this failure's any more is left alone.
 */
export async function attachWaitFailed(attachmentId: string, error: CaughtError | undefined): Promise<AttachWaitOutcome> {
  const reason = reasonOf(error);
  const failed = await withRetries(async () => {
    const attachment = await getAttachmentRecord(attachmentId);
    const wait = attachment?.attachWait;
    if (attachment && wait?.status === 'failed' && wait.detachPending) return attachment;
    if (!liveWait(attachment)) return undefined;
    const volume = await loadVolumeOf(attachment!);
    const result = failAttach(volume.volume, attachment!, reason, now());
    await writeVersioned({ volume: volume.volume, attachment: attachment! }, result);
    return result.attachment;
  }, RETRY);
  if (!failed) return { outcome: 'superseded' };
  await removeBackendConnection(failed);
  return { outcome: 'failed', reason: failed.attachWait!.reason ?? reason };
}

/** The compensation of the accepted attach: what the backend holds of (volume, host) goes, unless another attachment uses that host; then the intent is cleared. */
async function removeBackendConnection(attachment: Attachment): Promise<void> {
  const wait = attachment.attachWait!;
  const volume = await getVolumeRecord(attachment.volumeId);
  if (volume && attachment.connector) await releaseHost(volume.volume, { host: wait.host, connector: attachment.connector }, { knownUnused: false });
  await updateWait(attachment.id, wait, 'failed', {}, ['detachPending']);
}

export interface AttachWaitStepInput {
  step: string;
  attachmentId?: string;
  error?: CaughtError;
}

/** The attach-wait steps of the attachment-steps handler (steps.ts), or undefined for another step. */
export function attachWaitStep(input: AttachWaitStepInput, attachmentId: () => string): Promise<AttachWaitOutcome> | undefined {
  if (input.step === 'attach-wait-look') return lookAtAttach(attachmentId());
  if (input.step === 'attach-wait-failed') return attachWaitFailed(attachmentId(), input.error);
  return undefined;
}
