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
 * watches, and first reads the attachment (for its volume) and the volume (its `attachWaits`):
 * unlisted, its wait ended, or its wait another execution's (another connect's, or the
 * reconciler's renewal under the next version: a stale execution never ends a renewed wait), it
 * ends at once and touches nothing. Every write is conditioned on the wait still being the one
 * read, so a delete or connect racing a step wins and the step's write is refused
 * (ConcurrentModification-free: it then reads again and finds itself superseded). Each write bumps
 * the volume's version, so a connect, complete or delete that read the volume before retries from
 * the record with the wait's outcome instead of writing back the `waiting` it read. A wait on an
 * attachment item written before the volume's map is read and written there (WaitPlace 'item'),
 * bumping the item's version, until none remain.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, withRetries } from '../core/db.js';
import { BackendNotReady, FerryError, reasonOf, type CaughtError } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { AttachmentState, Connector } from '../drivers/volume/driver.js';
import { volumeKey, type AttachWait, type Volume } from '../volumes/model.js';
import { driverForVolume, loadVolumeOf, now, releaseHost, RETRY } from './connections.js';
import { failAttach, liveItemWait, liveWait } from './attach-wait.js';
import { attachmentKey, type Attachment } from './model.js';
import { getVolumeRecord, readAttachment, writeVersioned, type LoadedVolume } from './repo.js';
import { writeAttachmentState } from './repo-from-volume.js';
import { forgetVolume, loadedVolume, rememberVolume } from './volume-records.js';

/** The backend holds no connection of the volume to the host any more: the attach did not take. */
export class AttachmentLost extends FerryError {
  constructor(message: string, context: Record<string, unknown>) {
    super(500, 'computeFault', message, { context });
  }
}

export type AttachWaitOutcome = { outcome: 'attached' } | { outcome: 'superseded' } | { outcome: 'failed'; reason: string };

/** Where a wait is recorded: the volume's `attachWaits` (its id), or the attachment item of one written before that map. */
export type WaitPlace = { volumeId: string } | 'item';

/** The key and the expression path of the wait of `attachmentId` at `place` (names: `#w`, and `#aid` on the volume). */
function waitAt(place: WaitPlace, attachmentId: string): { Key: Record<string, string>; path: string; names: Record<string, string> } {
  if (place === 'item') return { Key: attachmentKey(attachmentId), path: '#w', names: { '#w': 'attachWait' } };
  return { Key: volumeKey(place.volumeId), path: '#w.#aid', names: { '#w': 'attachWaits', '#aid': attachmentId } };
}

/**
 * One conditional update of the wait, if it is still the execution's and in status `from`; false
 * when it is not (deleted, ended or replaced meanwhile: the step is superseded). `remove` names its
 * fields to remove, or `'whole'` the wait itself. Bumps the version of the item it is on.
 */
export async function updateWait(place: WaitPlace, attachmentId: string, wait: AttachWait, from: AttachWait['status'], set: Record<string, unknown>, remove: string[] | 'whole' = []): Promise<boolean> {
  const at = waitAt(place, attachmentId);
  const names: Record<string, string> = { ...at.names, '#st': 'status', '#ex': 'execution' };
  const values: Record<string, unknown> = { ':ex': wait.execution, ':from': from, ':one': 1 };
  const sets = Object.entries(set).map(([field, value], i) => {
    names[`#f${i}`] = field;
    values[`:v${i}`] = value;
    return `${at.path}.#f${i} = :v${i}`;
  });
  const removes =
    remove === 'whole'
      ? [at.path]
      : remove.map((field, i) => {
          names[`#r${i}`] = field;
          return `${at.path}.#r${i}`;
        });
  return updatedIfCondition(place, {
    Key: at.Key,
    UpdateExpression: `${sets.length ? `SET ${sets.join(', ')} ` : ''}${removes.length ? `REMOVE ${removes.join(', ')} ` : ''}ADD version :one`,
    ConditionExpression: `${at.path}.#ex = :ex AND ${at.path}.#st = :from`,
    ExpressionAttributeNames: names,
    ExpressionAttributeValues: values,
  });
}

/**
 * One conditional update of the wait's item: true when written, false when its condition failed
 * (superseded). A volume written is remembered as it is stored now (its version moved).
 */
async function updatedIfCondition(place: WaitPlace, update: Omit<ConstructorParameters<typeof UpdateCommand>[0], 'TableName'>): Promise<boolean> {
  try {
    const out = await db().send(new UpdateCommand({ TableName: tableName('volume'), ...update, ...(place === 'item' ? {} : { ReturnValues: 'ALL_NEW' }) }));
    if (place !== 'item') rememberVolume(loadedVolume(out.Attributes!));
    return true;
  } catch (e) {
    if (place !== 'item') forgetVolume(place.volumeId);
    if ((e as { name?: string }).name === 'ConditionalCheckFailedException') return false;
    throw e;
  }
}

/** A wait as a step reads it: the attachment (item or tombstone), the wait of `execution` and where it is, and the volume when read. */
export interface WaitRead {
  attachment: Attachment;
  wait: AttachWait;
  place: WaitPlace;
  volume?: LoadedVolume;
}

/**
 * The wait of execution `execution` on `attachmentId`: on its item (one written before the
 * volume's map), else in its volume's `attachWaits`; undefined when neither holds that execution's.
 */
export async function readWait(attachmentId: string, execution: string): Promise<WaitRead | undefined> {
  const read = await readAttachment(attachmentId);
  if (!read) return undefined;
  const { attachment } = read;
  if (attachment.attachWait?.execution === execution) return { attachment, wait: attachment.attachWait, place: 'item' };
  // A tombstone read cold comes without its volume, which may still hold the wait (a failed attach's detach pending).
  const volume = read.volume ?? (await getVolumeRecord(attachment.volumeId));
  const wait = volume?.volume.attachWaits?.[attachmentId];
  return wait?.execution === execution ? { attachment, wait, place: { volumeId: attachment.volumeId }, volume } : undefined;
}

/** The wait read is the live one (liveWait on the volume, liveItemWait on an old item). */
function isLive(read: WaitRead): boolean {
  return read.place === 'item' ? liveItemWait(read.attachment) !== undefined : liveWait(read.volume?.volume, read.attachment.id) !== undefined;
}

/**
 * Where the backend's attachment of a live wait stands (the driver's attachmentState; a driver
 * without it never answers `pending`, so what it connected is made), or undefined when the wait
 * has nothing to look at (no connector, the volume gone). A throttled look is BackendNotReady.
 */
export async function backendAttachState(volumeId: string, connector: Connector | null | undefined, known?: Volume): Promise<AttachmentState | undefined> {
  const volume = known ?? (connector ? (await getVolumeRecord(volumeId))?.volume : undefined);
  if (!volume || !connector) return undefined;
  const driver = await driverForVolume(volume);
  return driver.attachmentState ? driver.attachmentState(volume.backendName, connector) : { state: 'attached' };
}

/** Why an attach the backend no longer holds failed, in words (the wait's reason). */
export function attachLostMessage(volumeId: string, wait: AttachWait, reason: string): string {
  return `Attach of volume ${volumeId} to ${wait.host} failed on the backend: ${reason}.`;
}

/** `attach-wait-look` of execution `execution`: one look at the backend's attachment, if the live wait is that execution's. */
export async function lookAtAttach(attachmentId: string, execution: string): Promise<AttachWaitOutcome> {
  const read = await readWait(attachmentId, execution);
  if (!read || !isLive(read)) return { outcome: 'superseded' };
  const { attachment, wait } = read;
  const state = await backendAttachState(attachment.volumeId, attachment.connector, read.volume?.volume);
  if (!state) return { outcome: 'superseded' };
  const context = { attachmentId, volumeId: attachment.volumeId, host: wait.host, execution: wait.execution };
  if (state.state === 'attaching') {
    throw new BackendNotReady(`attachment ${attachmentId}: the backend is still attaching volume ${attachment.volumeId} to ${wait.host}`, { context });
  }
  if (state.state === 'gone') throw new AttachmentLost(attachLostMessage(attachment.volumeId, wait, state.reason), context);
  const recorded = await updateWait(read.place, attachmentId, wait, 'waiting', { status: 'attached', endedAt: now() });
  return recorded ? { outcome: 'attached' } : { outcome: 'superseded' };
}

/**
 * The renewal of a volume's wait (renewAttachWait) written: one conditional update, if the volume
 * is still the version read, lists the attachment, with the same `waiting` wait; false when it is
 * not (a delete, a connect or another renewal won).
 */
export async function writeRenewedWait(before: Volume, after: Volume, attachmentId: string): Promise<boolean> {
  const place = { volumeId: before.id };
  return updatedIfCondition(place, {
    Key: volumeKey(before.id),
    UpdateExpression: 'SET #w.#aid = :wait, version = :next',
    ConditionExpression: 'version = :version AND attribute_exists(#atts.#aid) AND #w.#aid.#ex = :ex AND #w.#aid.#st = :waiting',
    ExpressionAttributeNames: { '#w': 'attachWaits', '#aid': attachmentId, '#atts': 'attachments', '#ex': 'execution', '#st': 'status' },
    ExpressionAttributeValues: { ':wait': after.attachWaits![attachmentId], ':next': after.version, ':version': before.version, ':ex': before.attachWaits![attachmentId]!.execution, ':waiting': 'waiting' },
  });
}

/** writeRenewedWait of a wait on an attachment item written before the volume's map (renewItemAttachWait). */
export async function writeRenewedItemWait(before: Attachment, after: Attachment): Promise<boolean> {
  return updatedIfCondition('item', {
    Key: attachmentKey(before.id),
    UpdateExpression: 'SET #w = :wait, updatedAt = :now, version = :next',
    ConditionExpression: 'version = :version AND attribute_not_exists(deleted) AND #w.#ex = :ex AND #w.#st = :waiting',
    ExpressionAttributeNames: { '#w': 'attachWait', '#ex': 'execution', '#st': 'status' },
    ExpressionAttributeValues: { ':wait': after.attachWait, ':now': after.updatedAt, ':next': after.version, ':version': before.version, ':ex': before.attachWait!.execution, ':waiting': 'waiting' },
  });
}

/**
 * `attach-wait-failed` of the wait of execution `execution` (the machine's own name, or the one the
 * reconciler read): records the failure (once: a re-run finds it recorded and goes on with the
 * removal), removes the backend's connection unless another attachment uses the host, and
 * records that done. A wait of another execution, or one that is not this failure's any more, is left alone.
 */
export async function attachWaitFailed(attachmentId: string, error: CaughtError | undefined, execution: string): Promise<AttachWaitOutcome> {
  const reason = reasonOf(error);
  const failed = await withRetries(async (): Promise<WaitRead | undefined> => {
    const read = await readWait(attachmentId, execution);
    if (!read) return undefined;
    if (read.wait.status === 'failed' && read.wait.detachPending) return read;
    if (!isLive(read)) return undefined;
    const volume = read.volume ?? (await loadVolumeOf(read.attachment));
    const result = failAttach(volume.volume, read.attachment, reason, now());
    // A wait on an item written before the volume's map is recorded failed there: the transaction with the item.
    if (read.place === 'item') await writeVersioned({ volume: volume.volume, attachment: read.attachment }, result);
    else await writeAttachmentState({ volume: volume.volume, attachment: read.attachment }, result);
    const wait = read.place === 'item' ? result.attachment.attachWait! : result.volume.attachWaits![attachmentId]!;
    return { ...read, attachment: result.attachment, wait };
  }, RETRY);
  if (!failed) return { outcome: 'superseded' };
  await removeBackendConnection(failed);
  return { outcome: 'failed', reason: failed.wait.reason ?? reason };
}

/**
 * The compensation of the accepted attach: what the backend holds of (volume, host) goes, unless
 * another attachment uses that host; then the intent is cleared. On the volume, the wait of an
 * attachment no longer listed goes whole (nothing else would remove it: the delete kept it for
 * this); a listed one keeps its `failed` record until the attachment's delete or next connect.
 */
async function removeBackendConnection(failed: WaitRead): Promise<void> {
  const { attachment, wait, place } = failed;
  const volume = await getVolumeRecord(attachment.volumeId);
  if (volume && attachment.connector) await releaseHost(volume.volume, { host: wait.host, connector: attachment.connector }, { knownUnused: false });
  // An attachment unlisted stays so (ids are not reused), so the read decides which write; a delete
  // after it moves the volume's version and drops a wait with no detach pending itself (transitions.ts remove).
  const unlisted = place !== 'item' && volume !== undefined && !volume.volume.attachments[attachment.id];
  await updateWait(place, attachment.id, wait, 'failed', {}, unlisted ? 'whole' : ['detachPending']);
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
