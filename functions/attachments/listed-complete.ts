/**
 * POST /attachments/{id}/action os-complete from the volume's record alone, when this process
 * knows the attachment's volume and project (volume-records.ts knownAttachment) and has seen the
 * volume lately (knownVolume; else one read): ONE request in the API's cycle, the transaction
 * (was 2: the attachment read, then the transaction).
 *
 * The volume's summary of the attachment holds what `complete` makes the new summary from, so the
 * attachment is not read: its item gets the fields a complete changes (attachStatus, updatedAt,
 * version + 1), on condition that it is a live attachment of this volume and of the project the
 * caller was authorized against; the volume goes under its version, which every write of what the
 * summary shows moves (repo-from-volume.ts). The invariants stay in the transaction's conditions:
 * a volume moved since is refused and retried from the record the refusal returned; an item that
 * is not what the process remembers (deleted, another volume or project) goes by id, which reads
 * the attachment and answers as upstream (404). No state check: upstream's complete has none.
 */
import type { AuthContext } from '../core/auth.js';
import { withRetries } from '../core/db.js';
import { authorize } from '../core/policy.js';
import { now, RETRY } from './connections.js';
import { attachmentOfSummary } from './listed-removal.js';
import { ATTACHMENT_POLICIES } from './removal.js';
import { AttachmentNotListed, writeCompleteFromVolume } from './repo-from-volume.js';
import { getVolumeRecord } from './repo.js';
import { complete } from './transitions.js';
import { knownVolume } from './volume-records.js';

export interface ListedCompleteInput {
  auth: AuthContext;
  attachmentId: string;
  volumeId: string;
  /** The attachment's project as this process knows it: the policy is checked against it and the transaction conditioned on it. */
  projectId: string;
}

/** True when completed; false when the volume's record cannot stand for the attachment (the caller completes by id). */
export async function completeListed(input: ListedCompleteInput): Promise<boolean> {
  const { auth, attachmentId, volumeId, projectId } = input;
  try {
    return await withRetries(async () => {
      // A retry starts from the record the refused transaction returned (remembered by repo.ts).
      const loaded = knownVolume(volumeId) ?? (await getVolumeRecord(volumeId));
      const summary = loaded?.volume.attachments[attachmentId];
      // Not listed (or no volume): the attachment read answers. A summary from before volumes kept
      // the attachment's full state (`updatedAt`: its connection info, its mountpoint) cannot give
      // what the item holds: by id too, whose write upgrades the summary.
      if (!loaded || !summary || summary.updatedAt === undefined) return false;
      authorize(auth, ATTACHMENT_POLICIES.complete, { projectId });
      const result = complete(loaded.volume, attachmentOfSummary(loaded.volume, attachmentId, summary, projectId), now());
      await writeCompleteFromVolume(loaded.volume, result.volume, result.attachment, projectId);
      return true;
    }, RETRY);
  } catch (e) {
    if (e instanceof AttachmentNotListed) return false;
    throw e;
  }
}
