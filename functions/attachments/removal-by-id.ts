/**
 * The delete of an attachment by id: DELETE /attachments/{id} from a process that does not know
 * the attachment's volume, or whose record of it cannot stand for the attachment (service.ts
 * deleteAttachment). At most 3 DynamoDB requests, also when it removes a host's last connection:
 *
 * 1. the disconnect intent, written by the conditional update that also returns the attachment
 *    (repo-intents.ts writeDisconnectIntent; the read the delete needs anyway);
 * 2. the volume, read afresh, with the records that say whether a server uses the attachment in
 *    the same TransactGetItems (removal.ts readVolumeForRemoval): the 409 comes before anything is cut;
 * 3. when the attachment was its host's last user, that host's connection is terminated, THEN the
 *    transaction (tombstone, volume under its version, the in-use conditions, the intent ended).
 *
 * The transaction after the terminate is the terminate's fence and its record of done, as a move's
 * (connections.ts connectAttachment): it moves the volume's version, so a connect on that host that
 * read the volume before it fails its own write, retries and connects again; a connect that reads
 * after it finds the host unused and connects it anew. If the transaction does not happen (a version
 * race, a connect recording the host meanwhile, a server attaching meanwhile, a failure), the host's
 * connection is made again (connections.ts restoreHost, which removes it again should no attachment
 * record the host any more), the intent cleared, and the delete retried or failed as before. A
 * process that dies between the terminate and the transaction leaves the intent on a live
 * attachment whose connection is gone: recovery.ts makes it again.
 */
import type { AuthContext } from '../core/auth.js';
import { withRetries } from '../core/db.js';
import { DriverError, FerryError } from '../core/errors.js';
import { intentId } from '../core/intents.js';
import { logger } from '../core/logger.js';
import { authorize } from '../core/policy.js';
import { driverForVolume, now, releaseHost, restoreLeftHost, RETRY, volumeNotFound } from './connections.js';
import { attachmentOf, newDisconnectIntent, type Attachment } from './model.js';
import type { TransactCondition } from './ports.js';
import { ATTACHMENT_POLICIES, readVolumeForRemoval, writeRemoval } from './removal.js';
import { clearDisconnectIntent, getVolumeRecord, writeDisconnectIntent, writeVersioned } from './repo.js';
import { attachmentNotFound, remove, type RemoveResult } from './transitions.js';

export interface RemovalByIdInput {
  auth: AuthContext;
  attachmentId: string;
  /** The call's own id: the API's request id. Absent for Nova's flows, the audit's repair and tests. */
  callId?: string;
}

/**
 * The disconnect intent's id, from the attachment and the call (core/intents.ts): a call retrying
 * its delete, or a flow's step re-run after a crash (no call id), writes the intent it left, which
 * its transaction then ends, instead of leaving it beside a second one. Two API calls deleting the
 * same attachment at once have their own request ids, so the one whose delete fails clears only its
 * own intent, never the one a crash of the other must leave for recovery.
 */
export const disconnectIntentId = (attachmentId: string, callId = 'no-call-id') => intentId('attachment-delete', attachmentId, callId);

/** The attachment, tombstone included, when the caller may see it. */
const visibleTo = (auth: AuthContext, attachment: Attachment | undefined) => (attachment && (auth.isAdmin || attachment.projectId === auth.projectId) ? attachment : undefined);

/** Removes the attachment; its host's connection, if it was the host's last user, is gone already (the result's `disconnect` is null). */
export async function removeById(input: RemovalByIdInput): Promise<RemoveResult> {
  const { auth, attachmentId } = input;
  const intent = newDisconnectIntent(disconnectIntentId(attachmentId, input.callId), now());
  // Whether the intent may be on the item (an attempt wrote it), and whether it must stay there for recovery.
  let written = false;
  let keepIntent = false;
  try {
    return await withRetries(async (): Promise<RemoveResult> => {
      const write = await writeDisconnectIntent(attachmentId, intent, auth.isAdmin ? undefined : auth.projectId);
      if ('refused' in write) {
        await finishTombstone(visibleTo(auth, write.refused));
        throw attachmentNotFound(attachmentId);
      }
      written = true;
      const item = write.written;
      authorize(auth, ATTACHMENT_POLICIES.delete, { projectId: item.projectId });
      const loaded = await readVolumeForRemoval(auth, item);
      if (!loaded) throw volumeNotFound(item.volumeId);
      // Its state (host, connector, connected) as its volume's summary holds it.
      const attachment = attachmentOf(item, loaded.volume.attachments[attachmentId]);
      const removed = remove(loaded.volume, attachment, now());
      // The terminate comes before the transaction: the tombstone has no disconnect left to finish.
      const tombstone = { ...removed.tombstone, disconnect: null };
      const transaction = (conditions: TransactCondition[]) =>
        writeVersioned({ volume: loaded.volume, attachment }, { volume: removed.volume, attachment: tombstone }, { endDisconnectIntent: intent.id }, conditions);
      const left = removed.disconnect;
      const driver = left ? await driverForVolume(loaded.volume) : undefined;
      try {
        if (driver && left) await driver.terminateConnection(loaded.volume.backendName, left.connector);
        await writeRemoval(auth, attachment, transaction);
      } catch (e) {
        if (left && !(await restoreLeftHost(attachmentId, loaded.volume, left))) {
          keepIntent = true;
          throw new DriverError(
            `Attachment ${attachmentId} was not deleted, and the backend connection of host ${left.host} its delete removed could not be made again; a recovery pass makes it again.`,
            { cause: e, context: { attachmentId, host: left.host } },
          );
        }
        throw e;
      }
      return { ...removed, tombstone, disconnect: null };
    }, RETRY);
  } catch (e) {
    if (written && !keepIntent) await clearIntentAfterFailure(attachmentId, intent.id);
    throw e;
  }
}

/**
 * A tombstone: a retried delete, whose 404 comes after finishing a disconnect the first one could
 * not (a delete from the volume's record, listed-removal.ts, terminates after its transaction).
 */
async function finishTombstone(found: Attachment | undefined): Promise<void> {
  if (!found?.deleted || !found.disconnect) return;
  const loaded = await getVolumeRecord(found.volumeId);
  if (loaded) await releaseHost(loaded.volume, found.disconnect, { knownUnused: false });
}

/** The intent of a delete that did not happen; one that cannot be cleared is logged and left to a recovery pass (which finds the connection as recorded). */
async function clearIntentAfterFailure(attachmentId: string, intentId: string): Promise<void> {
  try {
    await clearDisconnectIntent(attachmentId, intentId);
  } catch (e) {
    const reason = e instanceof FerryError ? e.message : String(e);
    logger.error('could not clear the intent of a delete that did not happen; a recovery pass clears it', { attachmentId, reason, error: e as Error });
  }
}
