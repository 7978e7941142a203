/**
 * The delete of an attachment that the caller's record of its volume lists, from that record
 * alone: the pre-3.27 detach actions (os-detach, os-force_detach, os-terminate_connection,
 * os-unreserve: legacy.ts) have read the volume already, and its summary of the attachment holds
 * what the delete needs (instance, host, whether connected, and the connector the host's
 * connection is terminated with), so the attachment is not read. DynamoDB requests: the
 * transaction, and the fence after the terminate when it removed a host's last connection.
 *
 * The transaction is the one a delete by id writes (the tombstone, the volume under its version,
 * the in-use conditions), but for the attachment's side: the fields a delete changes, on condition
 * that the item is a live attachment of this volume (repo.ts writeTombstoneFromVolume). Every
 * write of what the summary shows also moves the volume's version, so the version condition is
 * what makes the summary as good as the item. A summary written before it kept the connector, or
 * records that disagree, fall back to the delete by id, which reads the attachment.
 */
import type { AuthContext } from '../core/auth.js';
import { withRetries } from '../core/db.js';
import { authorize } from '../core/policy.js';
import type { AttachmentSummary, Volume } from '../volumes/model.js';
import { now, RETRY, volumeNotFound } from './connections.js';
import type { Attachment } from './model.js';
import { AttachmentNotListed, getVolumeRecord, writeTombstoneFromVolume, type LoadedVolume } from './repo.js';
import { ATTACHMENT_POLICIES, deleteAttachment, finishDisconnect, writeRemoval } from './service.js';
import { assertAttachmentLive, remove, type RemoveResult } from './transitions.js';
import { knownVolume } from './volume-records.js';

/** A connected attachment whose summary has no connector (written before summaries kept it): the delete reads the attachment. */
class SummaryWithoutConnector extends Error {
  constructor(readonly attachmentId: string) {
    super(`the volume's summary of attachment ${attachmentId} has no connector`);
    this.name = 'SummaryWithoutConnector';
  }
}

/**
 * The attachment as far as a delete needs it, from the volume's summary: `remove` reads its id,
 * instance and connector, the in-use question whether it has a connection. Only the tombstone's
 * own fields (repo.ts TOMBSTONE_FIELDS) are written from what `remove` makes of it.
 */
function attachmentOfSummary(volume: Volume, id: string, s: AttachmentSummary): Attachment {
  return {
    id,
    volumeId: volume.id,
    projectId: volume.projectId,
    instanceUuid: s.instanceUuid,
    // A volume status ('detaching') may stand in a summary: only the tombstone's 'detached' is written.
    attachStatus: s.status as Attachment['attachStatus'],
    attachMode: s.mode,
    volumeHost: volume.host,
    connector: s.connector ?? null,
    attachedHost: s.host,
    mountpoint: s.mountpoint ?? null,
    attachTime: s.attachedAt,
    detachTime: null,
    // Not stored from here: only whether there is one matters (the in-use question).
    connectionInfo: s.connected ? {} : null,
    createdAt: s.attachedAt ?? '',
    updatedAt: s.attachedAt ?? '',
    version: 0,
  };
}

export interface ListedRemovalInput {
  auth: AuthContext;
  attachmentId: string;
  /** The volume as the caller read it in this request; its summaries list the attachment. */
  volume: LoadedVolume;
}

/** Deletes the attachment from the volume's record (404 when the volume no longer lists it); as DELETE /attachments/{id} otherwise. */
export async function deleteListedAttachment(input: ListedRemovalInput): Promise<void> {
  const { auth, attachmentId } = input;
  const volumeId = input.volume.volume.id;
  let first: LoadedVolume | undefined = input.volume;
  let removed: RemoveResult;
  try {
    removed = await withRetries(async () => {
      // A retry starts from the record the refused transaction returned (remembered by repo.ts).
      const loaded = first ?? knownVolume(volumeId) ?? (await getVolumeRecord(volumeId));
      first = undefined;
      if (!loaded) throw volumeNotFound(volumeId);
      const volume = loaded.volume;
      const summary = volume.attachments[attachmentId];
      if (!summary) assertAttachmentLive(undefined, attachmentId);
      if (summary.connected && !summary.connector) throw new SummaryWithoutConnector(attachmentId);
      authorize(auth, ATTACHMENT_POLICIES.delete, { projectId: volume.projectId });
      const attachment = attachmentOfSummary(volume, attachmentId, summary);
      const result = remove(volume, attachment, now());
      await writeRemoval(auth, attachment, (conditions) => writeTombstoneFromVolume(volume, result.volume, result.tombstone, conditions));
      return result;
    }, RETRY);
  } catch (e) {
    if (!(e instanceof SummaryWithoutConnector || e instanceof AttachmentNotListed)) throw e;
    await deleteAttachment({ auth, attachmentId });
    return;
  }
  await finishDisconnect(attachmentId, removed);
}
