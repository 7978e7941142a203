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
 * Each step is given its own execution's name (`$$.Execution.Name`), the token of the wait it
 * watches, and first reads the attachment: deleted, its wait ended, or its wait another
 * execution's (another connect's, or the reconciler's renewal under the next version: a stale
 * execution never ends a renewed wait), it ends at once and touches nothing. Every write is
 * conditioned on the wait still being the one read, so a delete or connect racing a step wins and
 * the step's write is refused (ConcurrentModification-free: it then reads again and finds itself superseded).
 * Each write bumps the attachment's version, so a connect, complete or delete that read the
 * attachment before retries from the record with the wait's outcome instead of writing back the
 * `waiting` it read.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, withRetries } from '../core/db.js';
import { BackendNotReady, FerryError, reasonOf, type CaughtError } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { AttachmentState } from '../drivers/volume/driver.js';
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
export async function updateWait(attachmentId: string, wait: AttachWait, from: AttachWait['status'], set: Record<string, unknown>, remove: string[] = []): Promise<boolean> {
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
  return updatedIfCondition(
    new UpdateCommand({
      TableName: tableName('volume'),
      Key: attachmentKey(attachmentId),
      UpdateExpression: `${sets.length ? `SET ${sets.join(', ')} ` : ''}${removes.length ? `REMOVE ${removes.join(', ')} ` : ''}ADD version :one`,
      ConditionExpression: '#w.#ex = :ex AND #w.#st = :from',
      ExpressionAttributeNames: names,
      ExpressionAttributeValues: values,
    }),
  );
}

/** One conditional update of the attachment: true when written, false when its condition failed (superseded). */
async function updatedIfCondition(update: UpdateCommand): Promise<boolean> {
  try {
    await db().send(update);
    return true;
  } catch (e) {
    if ((e as { name?: string }).name === 'ConditionalCheckFailedException') return false;
    throw e;
  }
}

/**
 * Where the backend's attachment of a live wait stands (the driver's attachmentState; a driver
 * without it never answers `pending`, so what it connected is made), or undefined when the wait
 * has nothing to look at (no connector, the volume gone). A throttled look is BackendNotReady.
 */
export async function backendAttachState(attachment: Attachment): Promise<AttachmentState | undefined> {
  const volume = attachment.connector ? await getVolumeRecord(attachment.volumeId) : undefined;
  if (!volume) return undefined;
  const driver = await driverForVolume(volume.volume);
  return driver.attachmentState ? driver.attachmentState(volume.volume.backendName, attachment.connector!) : { state: 'attached' };
}

/** Why an attach the backend no longer holds failed, in words (the attachment's attachWait.reason). */
export function attachLostMessage(attachment: Attachment, wait: AttachWait, reason: string): string {
  return `Attach of volume ${attachment.volumeId} to ${wait.host} failed on the backend: ${reason}.`;
}

/** `attach-wait-look` of execution `execution`: one look at the backend's attachment, if the live wait is that execution's. */
export async function lookAtAttach(attachmentId: string, execution: string): Promise<AttachWaitOutcome> {
  const attachment = await getAttachmentRecord(attachmentId);
  const wait = liveWait(attachment);
  if (!attachment || !wait || wait.execution !== execution) return { outcome: 'superseded' };
  const state = await backendAttachState(attachment);
  if (!state) return { outcome: 'superseded' };
  const context = { attachmentId, volumeId: attachment.volumeId, host: wait.host, execution: wait.execution };
  if (state.state === 'attaching') {
    throw new BackendNotReady(`attachment ${attachmentId}: the backend is still attaching volume ${attachment.volumeId} to ${wait.host}`, { context });
  }
  if (state.state === 'gone') throw new AttachmentLost(attachLostMessage(attachment, wait, state.reason), context);
  const recorded = await updateWait(attachmentId, wait, 'waiting', { status: 'attached', endedAt: now() });
  return recorded ? { outcome: 'attached' } : { outcome: 'superseded' };
}

/**
 * The renewal of a wait (renewAttachWait) written: one conditional update, if the attachment is
 * still the version read, live, with the same `waiting` wait; false when it is not (a delete, a
 * connect or another renewal won).
 */
export async function writeRenewedWait(before: Attachment, after: Attachment): Promise<boolean> {
  return updatedIfCondition(
    new UpdateCommand({
      TableName: tableName('volume'),
      Key: attachmentKey(before.id),
      UpdateExpression: 'SET #w = :wait, updatedAt = :now, version = :next',
      ConditionExpression: 'version = :version AND attribute_not_exists(deleted) AND #w.#ex = :ex AND #w.#st = :waiting',
      ExpressionAttributeNames: { '#w': 'attachWait', '#ex': 'execution', '#st': 'status' },
      ExpressionAttributeValues: { ':wait': after.attachWait, ':now': after.updatedAt, ':next': after.version, ':version': before.version, ':ex': before.attachWait!.execution, ':waiting': 'waiting' },
    }),
  );
}

/**
 * `attach-wait-failed` of the wait of execution `execution` (the machine's own name, or the one the
 * reconciler read): records the failure (once: a re-run finds it recorded and goes on with the
 * removal), removes the backend's connection unless another attachment uses the host, and
 * records that done. A wait of another execution, or one that is not this failure's any more, is left alone.
 */
export async function attachWaitFailed(attachmentId: string, error: CaughtError | undefined, execution: string): Promise<AttachWaitOutcome> {
  const reason = reasonOf(error);
  const failed = await withRetries(async () => {
    const attachment = await getAttachmentRecord(attachmentId);
    const wait = attachment?.attachWait;
    if (wait?.execution !== execution) return undefined;
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
  /** The machine's own execution name (`$$.Execution.Name`): the wait it may act on. */
  execution?: string;
  error?: CaughtError;
}

/**
 * The attach-wait steps of the attachment-steps handler (steps.ts), or undefined for another step.
 * A step without its execution's name (an execution started from a definition before the name was
 * passed) is superseded: it touches nothing, and the reconciler repairs the wait it leaves.
 */
export function attachWaitStep(input: AttachWaitStepInput, attachmentId: () => string): Promise<AttachWaitOutcome> | undefined {
  if (input.step !== 'attach-wait-look' && input.step !== 'attach-wait-failed') return undefined;
  if (input.execution === undefined) return Promise.resolve({ outcome: 'superseded' });
  return input.step === 'attach-wait-look' ? lookAtAttach(attachmentId(), input.execution) : attachWaitFailed(attachmentId(), input.error, input.execution);
}
