/**
 * What every delete of an attachment shares, by id (removal-by-id.ts) or from the volume's record
 * (listed-removal.ts): the attachment policies, the in-use conditions its transaction carries (and,
 * by id, the read that answers them before its terminate), and, from the record, the terminate with
 * its fence after the transaction.
 */
import type { AuthContext } from '../core/auth.js';
import { Conflict, DriverError, FerryError } from '../core/errors.js';
import { registerPolicies } from '../core/policy.js';
import { releaseHost } from './connections.js';
import { attachmentOf, type Attachment } from './model.js';
import { getAttachmentUsers, type TransactCondition } from './ports.js';
import { ExtraConditionFailed, getVolumeRecord, type LoadedVolume } from './repo.js';
import { getVolumeRecordWith } from './volume-records.js';
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
  if (!asksInUse(auth, attachment)) return [];
  return getAttachmentUsers().notInUseConditions(attachment.instanceUuid, attachment.volumeId, attachment.id);
}

function asksInUse(auth: AuthContext, attachment: RemovedAttachment): attachment is RemovedAttachment & { instanceUuid: string } {
  return !auth.roles.includes('service') && !!attachment.instanceUuid && !!attachment.connectionInfo;
}

const inUse = (instanceUuid: string) => new Conflict(`Detach volume from instance ${instanceUuid} using the Compute API`);

/** Reads of the in-use records that found a legacy record, recorded it, and read again, before leaving the answer to the transaction's conditions. */
const IN_USE_READS = 3;

/**
 * The volume a delete by id starts from, read afresh (its terminate comes before its transaction:
 * a decision taken before an effect, volume-records.ts) and, when the delete asks the in-use
 * question, with the records that answer it in the same request (TransactGetItems): a server that
 * uses the attachment is the 409 before anything is cut. The transaction still carries the
 * conditions (writeRemoval), for a server that attaches after this read.
 */
export async function readVolumeForRemoval(auth: AuthContext, item: Attachment): Promise<LoadedVolume | undefined> {
  // Whether it is connected is its volume's summary's to say (attachmentOf): read the in-use
  // records whenever the question may be asked (the same one request), answer it on the merge.
  if (auth.roles.includes('service')) return getVolumeRecord(item.volumeId);
  let instanceUuid = item.instanceUuid;
  if (!instanceUuid) {
    // An instance an os-attach gave it after its create is in the summary alone: read, then ask (one read more).
    const loaded = await getVolumeRecord(item.volumeId);
    const attachment = attachmentOf(item, loaded?.volume.attachments[item.id]);
    if (!asksInUse(auth, attachment)) return loaded;
    instanceUuid = attachment.instanceUuid;
  }
  const users = getAttachmentUsers();
  const reads = users.notInUseReads(instanceUuid);
  for (let n = 1; ; n++) {
    const { loaded, others } = await getVolumeRecordWith(item.volumeId, reads);
    const attachment = attachmentOf(item, loaded?.volume.attachments[item.id]);
    if (!asksInUse(auth, attachment)) return loaded;
    const failed = others.findIndex((record) => !users.holdsNotInUse(record, attachment.volumeId, attachment.id));
    if (failed < 0 || n >= IN_USE_READS) return loaded;
    // 'retry': a record written before servers recorded their attachments in use, recorded now.
    if ((await users.whyRefused(attachment.instanceUuid, attachment.volumeId, attachment.id, failed, others[failed])) === 'in-use') throw inUse(attachment.instanceUuid);
  }
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
    if (why === 'in-use') throw inUse(attachment.instanceUuid!);
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

