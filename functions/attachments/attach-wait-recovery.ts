/**
 * The reconciler's pass over attach waits (attach-wait.ts) that nothing will end:
 * - `waiting` since before `before` with no execution of its recorded name: the connect's start
 *   failed (Step Functions refused, or the process died between the transaction and the start).
 *   The execution is started under that name; its steps decide from the record, so a start that
 *   races another (ExecutionAlreadyExists) is harmless. One RUNNING is the machine's and left
 *   alone (it may wait up to its bound, 3.8 hours); one that ended without ending the record
 *   (aborted, or its Failed step ran out of retries) cannot be started again under its name: that
 *   is left for an operator (the audit's `stuck-attach-wait`).
 * - `failed` with `detachPending` ended before `before`, whose execution is not running: the
 *   machine's removal of what the backend holds failed after its retries. The removal is run again
 *   as the machine's Failed step runs it (attachWaitFailed: releaseHost under the same conditions
 *   as every release, so a host another attachment uses is kept), which clears the intent.
 * When Step Functions cannot say whether the execution runs, nothing is done: the next pass looks again.
 */
import { scanAll } from '../core/db.js';
import { executionStatus, startExecution } from '../core/executions.js';
import { logger } from '../core/logger.js';
import { tableName } from '../core/tables.js';
import { ATTACH_WAIT_MACHINE, liveWait } from './attach-wait.js';
import { attachWaitFailed } from './attach-wait-steps.js';
import { ATTACHMENT_SK, attachmentFromItem, type Attachment, type AttachWait } from './model.js';

export interface AttachWaitRecovery {
  kind: 'stuck-attach-wait' | 'attach-wait-detach-pending';
  attachmentId: string;
  /** started / detached: done; ended: the execution ended without ending the wait (an operator's); failed: nothing done, the next pass tries again. */
  action: 'started' | 'detached' | 'ended' | 'failed';
  /** What the pass saw on the record. */
  saw: string;
  /** What it did, or why nothing. */
  did: string;
}

/** Attachments whose wait is `waiting`, or `failed` with its detach still pending (deleted ones too: a delete of an error_attaching attachment removes no connection). */
async function scanOpenWaits(): Promise<Attachment[]> {
  const items = await scanAll({
    TableName: tableName('volume'),
    FilterExpression: 'sk = :sk AND (#w.#st = :waiting OR #w.#dp = :true)',
    ExpressionAttributeNames: { '#w': 'attachWait', '#st': 'status', '#dp': 'detachPending' },
    ExpressionAttributeValues: { ':sk': ATTACHMENT_SK, ':waiting': 'waiting', ':true': true },
    ConsistentRead: true,
  });
  return items.map(attachmentFromItem);
}

export async function recoverAttachWaits(options: { before: Date }): Promise<AttachWaitRecovery[]> {
  const before = options.before.getTime();
  const out: AttachWaitRecovery[] = [];
  for (const attachment of await scanOpenWaits()) {
    const wait = attachment.attachWait!;
    const pendingDetach = wait.status === 'failed' && wait.detachPending === true;
    // A wait superseded by a delete or another connect is ended by its machine's next look, or never matters.
    if (!pendingDetach && !liveWait(attachment)) continue;
    if (Date.parse(pendingDetach ? (wait.endedAt ?? wait.startedAt) : wait.startedAt) >= before) continue;
    const kind = pendingDetach ? 'attach-wait-detach-pending' : 'stuck-attach-wait';
    const saw = pendingDetach
      ? `attach to ${wait.host} failed ${wait.endedAt} (${wait.reason}) and the backend's connection was not removed`
      : `attach to ${wait.host} waiting since ${wait.startedAt}`;
    try {
      const status = await executionStatus(ATTACH_WAIT_MACHINE, wait.execution);
      if (status === 'RUNNING') continue;
      out.push(pendingDetach ? await detachAgain(attachment, saw) : await startOrReport(attachment, wait, status, saw));
    } catch (e) {
      logger.error('attach wait repair failed; the next pass tries again', { attachmentId: attachment.id, execution: wait.execution, error: e as Error });
      out.push({ kind, attachmentId: attachment.id, action: 'failed', saw, did: `failed (${(e as Error).message}); the next pass tries again` });
    }
  }
  return out;
}

async function startOrReport(attachment: Attachment, wait: AttachWait, status: string | undefined, saw: string): Promise<AttachWaitRecovery> {
  if (status !== undefined) {
    return { kind: 'stuck-attach-wait', attachmentId: attachment.id, action: 'ended', saw, did: `nothing: its execution ${wait.execution} ended ${status} without ending the wait and cannot start again under its name; left for an operator` };
  }
  await startExecution(ATTACH_WAIT_MACHINE, wait.execution, { attachmentId: attachment.id });
  return { kind: 'stuck-attach-wait', attachmentId: attachment.id, action: 'started', saw, did: `started ${wait.execution}, which no start had made` };
}

async function detachAgain(attachment: Attachment, saw: string): Promise<AttachWaitRecovery> {
  const result = await attachWaitFailed(attachment.id, undefined);
  const did = result.outcome === 'failed' ? 'removed what the backend held (unless another attachment uses the host) and cleared the intent' : 'nothing: the wait changed meanwhile';
  return { kind: 'attach-wait-detach-pending', attachmentId: attachment.id, action: 'detached', saw, did };
}
