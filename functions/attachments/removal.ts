/**
 * What every delete of an attachment shares, by id (service.ts deleteAttachment) or from the
 * volume's record (listed-removal.ts): the attachment policies, the in-use conditions its
 * transaction carries, and the terminate with its fence after it.
 */
import type { AuthContext } from '../core/auth.js';
import { Conflict, DriverError, FerryError } from '../core/errors.js';
import { registerPolicies } from '../core/policy.js';
import { releaseHost } from './connections.js';
import type { Attachment } from './model.js';
import { getAttachmentUsers, type TransactCondition } from './ports.js';
import { ExtraConditionFailed } from './repo.js';
import type { RemoveResult } from './transitions.js';

export const ATTACHMENT_POLICIES = {
  create: 'volume:attachment_create',
  update: 'volume:attachment_update',
  delete: 'volume:attachment_delete',
  complete: 'volume:attachment_complete',
  index: 'volume:attachment_index',
  show: 'volume:attachment_show',
  multiattachBootable: 'volume:multiattach_bootable_volume',
} as const;

registerPolicies(Object.fromEntries(Object.values(ATTACHMENT_POLICIES).map((action) => [action, 'admin_or_owner' as const])));

/**
 * `attachment_deletion_allowed` (Bug #2004555): a caller other than Nova's service user may not
 * delete an attachment with an instance and connection_info while that server still uses it (its
 * BDM holds this attachment): 409, detach through the Compute API instead. Asked as conditions of
 * the delete's own transaction (the port's), so a server that attaches between the delete's reads
 * and its write refuses it too; none for the callers upstream does not ask for.
 */
function inUseConditions(auth: AuthContext, attachment: RemovedAttachment): TransactCondition[] {
  if (auth.roles.includes('service') || !attachment.instanceUuid || !attachment.connectionInfo) return [];
  return getAttachmentUsers().notInUseConditions(attachment.instanceUuid, attachment.volumeId, attachment.id);
}

/** What the in-use question asks of the attachment a delete removes. */
export type RemovedAttachment = Pick<Attachment, 'id' | 'volumeId' | 'instanceUuid' | 'connectionInfo'>;

/**
 * The delete's transaction (`write`, given the in-use conditions to carry); a failed in-use
 * condition is the 409 when its record shows the server using the attachment, else a race to retry.
 */
export async function writeRemoval(auth: AuthContext, attachment: RemovedAttachment, write: (conditions: TransactCondition[]) => Promise<void>): Promise<void> {
  try {
    await write(inUseConditions(auth, attachment));
  } catch (e) {
    if (!(e instanceof ExtraConditionFailed)) throw e;
    const why = await getAttachmentUsers().whyRefused(attachment.instanceUuid!, attachment.volumeId, attachment.id, e.index, e.old);
    if (why === 'in-use') throw new Conflict(`Detach volume from instance ${attachment.instanceUuid} using the Compute API`);
    // The transaction's own error: a condition failure, which RETRY retries from the current records.
    throw e.cancelled;
  }
}

/** After a delete's transaction that removed a host's last connection: the terminate and its fence; a failure says how to retry. */
export async function finishDisconnect(attachmentId: string, removed: Pick<RemoveResult, 'volume' | 'disconnect'>): Promise<void> {
  if (!removed.disconnect) return;
  try {
    await releaseHost(removed.volume, removed.disconnect, { knownUnused: true });
  } catch (e) {
    const reason = e instanceof FerryError ? e.message : String(e);
    throw new DriverError(
      `Attachment ${attachmentId} was deleted, but the backend connection of host ${removed.disconnect.host} could not be removed (${reason}); delete the attachment again to retry.`,
      { cause: e, context: { attachmentId, host: removed.disconnect.host } },
    );
  }
}

