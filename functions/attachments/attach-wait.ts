/**
 * The wait for an attach the backend accepted but has not finished (an EBS attachment still
 * `attaching`): attachment_update answers at once with the connection_info, and the
 * volume-attach-wait machine (statemachines/volume-attach-wait.asl.json, steps in
 * attach-wait-steps.ts) looks at the backend until the attachment is made or gone. No function
 * waits meanwhile; the local driver's connections are made at once, so locally nothing starts.
 *
 * Ordering (the intent before the effect): the connect write that records the connection also
 * records the wait in the volume's `attachWaits` (status `waiting`, the execution's name, named
 * from the volume version that write makes); then the execution starts
 * under that name, so a restart or a second start finds the first. The machine ends the record:
 * `attached`, or `failed` with the reason (the attachment `error_attaching`, its host's connection
 * removed). A delete of the attachment, or a connect that replaced the wait, wins: the machine
 * then finds no `waiting` record and ends without touching anything.
 *
 * Every write of the volume's map moves the volume's version, so a connect, complete or delete
 * computed from the volume's record (under its version condition) never writes back a wait state
 * it did not read. Waits on attachment items written before the map (`attachWait`, named from the
 * attachment's version) are still honoured, by the steps, the reconciler and the audit
 * (liveItemWait, renewItemAttachWait), until the audit finds none; nothing writes a new one.
 *
 * The pure transitions are here; the machine's reads and writes in attach-wait-steps.ts.
 */
import { executionName, startExecution } from '../core/executions.js';
import { logger } from '../core/logger.js';
import type { ConnectionProperties } from '../drivers/volume/driver.js';
import type { AttachWait, Volume } from '../volumes/model.js';
import type { Attachment } from './model.js';
import { volumeStateAfterDetach, type ConnectResult } from './transitions.js';

export const ATTACH_WAIT_MACHINE = 'volume-attach-wait' as const;

/**
 * `volume-attach-wait-<attachment id>-v<volume version>`: the version of the volume the connect (or
 * the renewal) wrote with the wait. It is unique and only grows, so each connect of an attachment
 * has its own execution and a retried start finds it; the `v` keeps these apart from the names of
 * waits on attachment items written before (`-<attachment version>`). 19 + 36 + 2 characters before
 * the digits: within the 80 executionName keeps.
 */
export function attachWaitExecutionName(attachmentId: string, volumeVersion: number): string {
  return executionName(ATTACH_WAIT_MACHINE, `${attachmentId}-v${volumeVersion}`);
}

/** The name of a wait on an attachment item written before the volume's map (attachment version): its renewal keeps the item's scheme. */
function itemWaitExecutionName(attachmentId: string, attachmentVersion: number): string {
  return executionName(ATTACH_WAIT_MACHINE, `${attachmentId}-${attachmentVersion}`);
}

/**
 * The connect's result with its wait, in the volume's `attachWaits` (written with the volume, under
 * its version): recorded when the driver answered `pending`; a connect made at once drops a wait an
 * earlier connect of the attachment left (the backend holds the connection now, so that wait has
 * nothing left to watch and ends when it next looks). A wait on the attachment's item (written
 * before the map) is dropped either way: the connect's item write removes it.
 */
export function withAttachWait(result: ConnectResult, connection: ConnectionProperties, now: string): ConnectResult {
  const { attachWait: _itemWait, ...attachment } = result.attachment;
  const { [attachment.id]: _previous, ...waits } = result.volume.attachWaits ?? {};
  if (connection.pending) {
    waits[attachment.id] = { execution: attachWaitExecutionName(attachment.id, result.volume.version), host: attachment.attachedHost!, status: 'waiting', startedAt: now };
  }
  const untouched = !result.volume.attachWaits && Object.keys(waits).length === 0;
  return { ...result, attachment, volume: untouched ? result.volume : { ...result.volume, attachWaits: waits } };
}

/** The wait of `attachmentId` the machine may act on: listed on the volume, `waiting` on the host its summary is connected to; else undefined (superseded). */
export function liveWait(volume: Volume | undefined, attachmentId: string): AttachWait | undefined {
  const wait = volume?.attachWaits?.[attachmentId];
  const summary = volume?.attachments[attachmentId];
  if (!summary || !wait || wait.status !== 'waiting' || wait.host !== summary.host) return undefined;
  return wait;
}

/** liveWait of a wait on an attachment item written before the volume's map (honoured until none remain). */
export function liveItemWait(attachment: Attachment | undefined): AttachWait | undefined {
  const wait = attachment?.attachWait;
  if (!attachment || attachment.deleted || !wait || wait.status !== 'waiting' || wait.host !== attachment.attachedHost) return undefined;
  return wait;
}

/**
 * A new wait for the same attach (the reconciler's, attach-wait-recovery.ts): the execution that
 * watched it ended without ending it while the backend is still attaching, and an execution cannot
 * start again under its name. The volume's next version names the new execution (a retried
 * renewal of the same record names the same one) and is the version the renewal writes.
 */
export function renewAttachWait(volume: Volume, attachmentId: string, now: string): Volume {
  const version = volume.version + 1;
  const wait: AttachWait = { execution: attachWaitExecutionName(attachmentId, version), host: volume.attachWaits![attachmentId]!.host, status: 'waiting', startedAt: now };
  return { ...volume, attachWaits: { ...volume.attachWaits, [attachmentId]: wait }, version };
}

/** renewAttachWait of a wait on an attachment item written before the volume's map: the item's next version names it. */
export function renewItemAttachWait(attachment: Attachment, now: string): Attachment {
  const version = attachment.version + 1;
  const wait: AttachWait = { execution: itemWaitExecutionName(attachment.id, version), host: attachment.attachWait!.host, status: 'waiting', startedAt: now };
  return { ...attachment, attachWait: wait, updatedAt: now, version };
}

/**
 * The attach failed on the backend (its attachment gone, or still not made when the machine's
 * bound was reached): the attachment goes `error_attaching` (Cinder's status for a failed attach)
 * without its connection_info, it no longer counts as a user of its host's connection, and the
 * volume's status is recomputed from its other attachments, as a delete recomputes it (an error
 * attachment decides nothing). `detachPending` is the intent of removing what the backend holds.
 */
export function failAttach(volume: Volume, attachment: Attachment, reason: string, now: string): { volume: Volume; attachment: Attachment } {
  // The volume's wait, or the one on an item written before the map: the failure is recorded where the wait is.
  const onVolume = volume.attachWaits?.[attachment.id];
  const wait = onVolume ?? attachment.attachWait!;
  const failed: AttachWait = { ...wait, status: 'failed', reason, endedAt: now, detachPending: true };
  const next: Attachment = {
    ...attachment,
    attachStatus: 'error_attaching',
    connectionInfo: null,
    ...(onVolume ? {} : { attachWait: failed }),
    updatedAt: now,
  };
  const attachWaits = onVolume ? { ...volume.attachWaits, [attachment.id]: failed } : volume.attachWaits;
  const connections = { ...volume.connections };
  const users = (connections[wait.host] ?? []).filter((id) => id !== attachment.id);
  if (users.length > 0) connections[wait.host] = users;
  else delete connections[wait.host];
  const previous = volume.attachments[attachment.id];
  // The summary keeps its host and connector (as summaryOf's does once a connector was given),
  // harmlessly: the host's connection count is connections[host], which it just left;
  // a delete from the summary (listed-removal.ts) terminates only a host whose connections list
  // the attachment (transitions.ts remove), and so does a connect moving it (connect's
  // releasedHost); the audit, the duplicate-connector guard and os-initialize_connection's pick go
  // by `connected`, and os-terminate_connection takes a connected attachment of the host before it
  // (legacy.ts attachmentToTerminate). The detach still pending reads the item's connector, not this.
  // A full-state summary (attachmentOf's authority) also drops the connection info and is dated; an
  // older one stays as it was written (the item, also written, is then the authority).
  const full = previous?.updatedAt !== undefined ? { connectionInfo: null, updatedAt: now } : {};
  const attachments = previous ? { ...volume.attachments, [attachment.id]: { ...previous, status: 'error_attaching' as const, connected: false, ...full } } : volume.attachments;
  const deciding = Object.values(attachments).filter((s) => !s.status.startsWith('error'));
  return {
    volume: { ...volume, ...volumeStateAfterDetach(volume, deciding), attachments, connections, ...(attachWaits ? { attachWaits } : {}), updatedAt: now, version: volume.version + 1 },
    attachment: next,
  };
}

/**
 * Starts the wait's execution after the connect recorded it (a second start finds the first:
 * functions/core/executions.ts). A start that fails does not fail the connect, which the backend
 * and the records already hold: the failure is logged as an error with the execution's name, and
 * the volume keeps the `waiting` record, which names the execution the reconciler starts past its
 * grace (attach-wait-recovery.ts), or an operator by hand (docs/state-machines.md).
 */
export async function startAttachWait(attachmentId: string, wait: AttachWait | undefined): Promise<void> {
  if (wait?.status !== 'waiting') return;
  try {
    await startExecution(ATTACH_WAIT_MACHINE, wait.execution, { attachmentId });
  } catch (e) {
    logger.error('could not start volume-attach-wait: the volume keeps the waiting record until the machine is started', { attachmentId, execution: wait.execution, error: e as Error });
  }
}
