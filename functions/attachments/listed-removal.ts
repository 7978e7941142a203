/**
 * The delete of an attachment that the record of its volume lists, from that record alone: the
 * pre-3.27 detach actions (os-detach, os-force_detach, os-terminate_connection, os-unreserve:
 * legacy.ts) have read the volume already, and DELETE /attachments/{id} starts from it when this
 * process knows the attachment's volume (volume-records.ts knownAttachment) and has seen the volume
 * lately (knownVolume; else one read). The volume's summary of the attachment holds what the delete
 * needs (instance, host, whether connected, and the connector the host's
 * connection is terminated with), so the attachment is not read. DynamoDB requests: the
 * transaction, and the fence after the terminate when it removed a host's last connection.
 *
 * The transaction is the one a delete by id writes (the tombstone, the volume under its version,
 * the in-use conditions), but for the attachment's side: the fields a delete changes, on condition
 * that the item is a live attachment of this volume (repo-from-volume.ts writeTombstoneFromVolume). Every
 * write of what the summary shows also moves the volume's version, so the version condition is
 * what makes the summary as good as the item. A summary written before it kept the connector, or
 * records that disagree, fall back to the delete by id, which reads the attachment
 * (service.ts, which owns both entry points).
 */
import type { AuthContext } from '../core/auth.js';
import { withRetries } from '../core/db.js';
import { authorize } from '../core/policy.js';
import type { AttachmentSummary, Volume } from '../volumes/model.js';
import { now, RETRY } from './connections.js';
import type { Attachment } from './model.js';
import { getVolumeRecord, type LoadedVolume } from './repo.js';
import { AttachmentNotListed, writeTombstoneFromVolume } from './repo-from-volume.js';
import { ATTACHMENT_POLICIES, writeRemoval } from './removal.js';
import { remove, type RemoveResult } from './transitions.js';
import { knownVolume } from './volume-records.js';

/**
 * The attachment as far as a delete needs it, from the volume's summary: `remove` reads its id,
 * instance and connector, the in-use question whether it has a connection. Only the tombstone's
 * own fields (repo-from-volume.ts TOMBSTONE_FIELDS) are written from what `remove` makes of it;
 * likewise a complete's (listed-complete.ts).
 */
export function attachmentOfSummary(volume: Volume, id: string, s: AttachmentSummary, projectId: string): Attachment {
  return {
    id,
    volumeId: volume.id,
    projectId,
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
    // A summary written before it carried the connection info: only whether there is one matters
    // to a delete (the in-use question); a complete from it goes by id (listed-complete.ts).
    connectionInfo: s.connectionInfo !== undefined ? s.connectionInfo : s.connected ? {} : null,
    createdAt: s.attachedAt ?? '',
    updatedAt: s.updatedAt ?? s.attachedAt ?? '',
    version: 0,
  };
}

export interface ListedRemovalInput {
  auth: AuthContext;
  attachmentId: string;
  volumeId: string;
  /** The volume as the caller read it in this request, if it did; else as this process last saw it, else read. */
  volume?: LoadedVolume;
  /**
   * The attachment's project as this process knows it (DELETE /attachments/{id}): the policy is
   * checked against it and the transaction is conditioned on it. Without it, the volume's (the
   * pre-3.27 actions, whose route checked the caller against the volume).
   */
  projectId?: string;
}

/**
 * Removed (the terminate and fence still to do: removal.ts finishDisconnect); `unlisted`: the
 * volume does not list the attachment; `by-id`: its summary has no connector, or the records
 * disagree (AttachmentNotListed): delete by id; `volume-gone`: no such volume.
 */
export type ListedOutcome = { removed: RemoveResult } | 'unlisted' | 'by-id' | 'volume-gone';

export async function removeListed(input: ListedRemovalInput): Promise<ListedOutcome> {
  const { auth, attachmentId, volumeId } = input;
  let first = input.volume;
  try {
    return await withRetries(async (): Promise<ListedOutcome> => {
      // A retry starts from the record the refused transaction returned (remembered by repo.ts).
      const loaded = first ?? knownVolume(volumeId) ?? (await getVolumeRecord(volumeId));
      first = undefined;
      if (!loaded) return 'volume-gone';
      const volume = loaded.volume;
      const summary = volume.attachments[attachmentId];
      if (!summary) return 'unlisted';
      if (summary.connected && !summary.connector) return 'by-id';
      const projectId = input.projectId ?? volume.projectId;
      authorize(auth, ATTACHMENT_POLICIES.delete, { projectId });
      const attachment = attachmentOfSummary(volume, attachmentId, summary, projectId);
      const result = remove(volume, attachment, now());
      await writeRemoval(auth, attachment, (conditions) => writeTombstoneFromVolume(volume, result.volume, result.tombstone, conditions, input.projectId));
      return { removed: result };
    }, RETRY);
  } catch (e) {
    if (e instanceof AttachmentNotListed) return 'by-id';
    throw e;
  }
}
