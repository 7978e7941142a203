/**
 * The wait for an attach the backend accepted but has not finished (an EBS attachment still
 * `attaching`): attachment_update answers at once with the connection_info, and the
 * volume-attach-wait machine (statemachines/volume-attach-wait.asl.json, steps in
 * attach-wait-steps.ts) looks at the backend until the attachment is made or gone. No function
 * waits meanwhile; the local driver's connections are made at once, so locally nothing starts.
 *
 * Ordering (the intent before the effect): the connect transaction that records the connection
 * also records `attachWait` (status `waiting`, the execution's name); then the execution starts
 * under that name, so a restart or a second start finds the first. The machine ends the record:
 * `attached`, or `failed` with the reason (the attachment `error_attaching`, its host's connection
 * removed). A delete of the attachment, or a connect that replaced the wait, wins: the machine
 * then finds no `waiting` record and ends without touching anything.
 *
 * The pure transitions are here; the machine's reads and writes in attach-wait-steps.ts.
 */
import { executionName, startExecution } from '../core/executions.js';
import { logger } from '../core/logger.js';
import type { ConnectionProperties } from '../drivers/volume/driver.js';
import type { Volume } from '../volumes/model.js';
import type { Attachment, AttachWait } from './model.js';
import { volumeStateAfterDetach, type ConnectResult } from './transitions.js';

export const ATTACH_WAIT_MACHINE = 'volume-attach-wait' as const;

/** `volume-attach-wait-<attachment id>-<version>`: the version the connect wrote, so each connect of an attachment has its own execution and a retried start finds it. */
export function attachWaitExecutionName(attachmentId: string, version: number): string {
  return executionName(ATTACH_WAIT_MACHINE, `${attachmentId}-${version}`);
}

/**
 * The connect's result with its wait: recorded when the driver answered `pending`; a connect made
 * at once drops a wait an earlier connect of the attachment left (the backend holds the
 * connection now, so that wait has nothing left to watch and ends when it next looks).
 */
export function withAttachWait(result: ConnectResult, connection: ConnectionProperties, now: string): ConnectResult {
  const { attachWait: _previous, ...attachment } = result.attachment;
  if (!connection.pending) return { ...result, attachment };
  const wait: AttachWait = { execution: attachWaitExecutionName(attachment.id, attachment.version), host: attachment.attachedHost!, status: 'waiting', startedAt: now };
  return { ...result, attachment: { ...attachment, attachWait: wait } };
}

/** The wait the machine may act on: the attachment live, its wait `waiting` on the host it is connected to; else undefined (superseded). */
export function liveWait(attachment: Attachment | undefined): AttachWait | undefined {
  const wait = attachment?.attachWait;
  if (!attachment || attachment.deleted || !wait || wait.status !== 'waiting' || wait.host !== attachment.attachedHost) return undefined;
  return wait;
}

/**
 * A new wait for the same attach (the reconciler's, attach-wait-recovery.ts): the execution that
 * watched it ended without ending it while the backend is still attaching, and an execution cannot
 * start again under its name. The attachment's next version names the new execution, so a retried
 * renewal of the same record names the same one.
 */
export function renewAttachWait(attachment: Attachment, now: string): Attachment {
  const version = attachment.version + 1;
  const wait: AttachWait = { execution: attachWaitExecutionName(attachment.id, version), host: attachment.attachWait!.host, status: 'waiting', startedAt: now };
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
  const wait = attachment.attachWait!;
  const next: Attachment = {
    ...attachment,
    attachStatus: 'error_attaching',
    connectionInfo: null,
    attachWait: { ...wait, status: 'failed', reason, endedAt: now, detachPending: true },
    updatedAt: now,
    version: attachment.version + 1,
  };
  const connections = { ...volume.connections };
  const users = (connections[wait.host] ?? []).filter((id) => id !== attachment.id);
  if (users.length > 0) connections[wait.host] = users;
  else delete connections[wait.host];
  const previous = volume.attachments[attachment.id];
  // The summary keeps its host and connector (unlike summaryOf's, which has a connector only while
  // connected), harmlessly: the host's connection count is connections[host], which it just left;
  // a delete from the summary (listed-removal.ts) terminates only a host whose connections list
  // the attachment (transitions.ts remove), and so does a connect moving it (connect's
  // releasedHost); the audit, the duplicate-connector guard and os-initialize_connection's pick go
  // by `connected`, and os-terminate_connection takes a connected attachment of the host before it
  // (legacy.ts attachmentToTerminate). The detach still pending reads the item's connector, not this.
  const attachments = previous ? { ...volume.attachments, [attachment.id]: { ...previous, status: 'error_attaching' as const, connected: false } } : volume.attachments;
  const deciding = Object.values(attachments).filter((s) => !s.status.startsWith('error'));
  return {
    volume: { ...volume, ...volumeStateAfterDetach(volume, deciding), attachments, connections, updatedAt: now, version: volume.version + 1 },
    attachment: next,
  };
}

/**
 * Starts the wait's execution after the connect transaction recorded it (a second start finds the
 * first: functions/core/executions.ts). A start that fails does not fail the connect, which the
 * backend and the records already hold: the failure is logged as an error with the execution's
 * name, and the attachment keeps its `waiting` record, which names the execution the reconciler
 * starts past its grace (attach-wait-recovery.ts), or an operator by hand (docs/state-machines.md).
 */
export async function startAttachWait(attachment: Attachment): Promise<void> {
  const wait = attachment.attachWait;
  if (wait?.status !== 'waiting') return;
  try {
    await startExecution(ATTACH_WAIT_MACHINE, wait.execution, { attachmentId: attachment.id });
  } catch (e) {
    logger.error('could not start volume-attach-wait: the attachment keeps its waiting record until the machine is started', { attachmentId: attachment.id, execution: wait.execution, error: e as Error });
  }
}
