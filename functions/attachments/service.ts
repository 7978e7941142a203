/**
 * The attachment operations, independent of HTTP: the attachments API calls them, so do the
 * volume-create state machine (attach to `server_id`, attachments/steps.ts) and Nova's flows
 * (servers/cinder.ts). Host connections: connections.ts; the listing: queries.ts.
 *
 * Each operation reads the attachment and/or volume, applies a pure transition (transitions.ts),
 * and writes both in one transaction (repo.ts); a lost race re-reads and re-applies. Happy-path
 * DynamoDB requests: create 2 (get volume, transaction), create with connector 3, update 3
 * (get attachment, get volume, transaction), complete 3, delete 3 (+1 fence when it removes a
 * host's last connection), show 1.
 *
 * Host connections (reference §3.6, seed 004): the backend connection of (volume, connector host)
 * is shared by every attachment of the volume on that host and refcounted in the volume item's
 * `connections[host]`. Ordering, so a failure at any point leaks nothing and loses nothing:
 * - connect: driver.initializeConnection (idempotent), then the transaction that records the
 *   attachment as connected; if the connect finally fails and no attachment uses the host, the
 *   connection is terminated again. A process death between the two leaves a connection without
 *   record, which the audit reports and a retried update adopts.
 * - delete: the transaction (attachment -> tombstone, removed from `connections[host]`), then,
 *   if it was the last user, terminateConnection and a fence write. The tombstone remembers the
 *   pending disconnect, so a delete retried after a crash or a driver failure finishes it.
 */
import { randomUUID } from 'node:crypto';
import type { AuthContext } from '../core/auth.js';
import { withRetries } from '../core/db.js';
import { BadRequest, Conflict, DriverError, FerryError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { authorize, registerPolicies } from '../core/policy.js';
import type { Connector } from '../drivers/volume/driver.js';
import type { AttachmentSummary } from '../volumes/model.js';
import type { Attachment } from './model.js';
import { getAttachmentUsers } from './ports.js';
import { getAttachmentRecord, getVolumeRecord, writeReserve, writeVersioned, type LoadedVolume } from './repo.js';
import { assertAttachmentLive, complete, needsMultiattachBootablePolicy, remove, reserve } from './transitions.js';

import { connectAttachment, loadVolumeOf, now, releaseHost, RETRY, volumeNotFound } from './connections.js';
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

export function assertConnectorHost(connector: Connector | null | undefined): void {
  if (connector && (typeof connector.host !== 'string' || connector.host === '')) {
    // Upstream answers 500 (a KeyError building its lock name); a client mistake is a 400.
    throw new BadRequest("Invalid input received: connector must have a 'host' property naming the host to connect.");
  }
}

/** The volume, if the caller may see it (project-scoped as upstream's Volume.get_by_id). */
async function loadVolume(auth: AuthContext, volumeId: string): Promise<LoadedVolume> {
  const loaded = await getVolumeRecord(volumeId);
  if (!loaded || (!auth.isAdmin && loaded.volume.projectId !== auth.projectId)) throw volumeNotFound(volumeId);
  return loaded;
}

/** The attachment, if it exists and the caller may see it; then the action's policy against its project. */
async function loadAttachment(auth: AuthContext, attachmentId: string, action: string): Promise<Attachment> {
  const attachment = await getAttachmentRecord(attachmentId);
  const visible = attachment && !attachment.deleted && (auth.isAdmin || attachment.projectId === auth.projectId) ? attachment : undefined;
  assertAttachmentLive(visible, attachmentId);
  authorize(auth, action, { projectId: attachment!.projectId });
  return visible;
}

export interface CreateAttachmentInput {
  auth: AuthContext;
  volumeId: string;
  instanceUuid: string | null;
  /** null (or an empty connector, which the API maps to null) only reserves. */
  connector: Connector | null;
  mode?: 'rw' | 'ro';
}

/** POST /attachments: reserve, and connect when a connector is given. */
export async function createAttachment(input: CreateAttachmentInput): Promise<Attachment> {
  const { auth, volumeId, instanceUuid, connector } = input;
  assertConnectorHost(connector);
  const attachmentId = randomUUID();
  const reserved = await withRetries(async () => {
    const loaded = await loadVolume(auth, volumeId);
    const volume = loaded.volume;
    authorize(auth, ATTACHMENT_POLICIES.create, { projectId: volume.projectId });
    if (needsMultiattachBootablePolicy(volume)) authorize(auth, ATTACHMENT_POLICIES.multiattachBootable, { projectId: volume.projectId });
    const result = reserve(volume, { attachmentId, instanceUuid, mode: input.mode, now: now() });
    await writeReserve(loaded, result);
    return result;
  }, RETRY);
  if (!connector) return reserved.attachment;

  try {
    // Create with a connector skips the duplicate-connector guard, as upstream (Nova's live
    // migration connects a second attachment of the same instance this way).
    return await connectAttachment(reserved.attachment.id, connector, { checkDuplicates: false }, {
      attachment: reserved.attachment,
      volume: { volume: reserved.volume, hasMaps: true },
    });
  } catch (e) {
    // The client never learns this attachment's id, so a failed connect must not leave the
    // reservation behind (upstream leaves it, and a non-multiattach volume stays reserved).
    await removeQuietly(reserved.attachment.id);
    if (e instanceof DriverError) throw new DriverError(`Unable to create attachment for volume (${e.message}).`, { cause: e });
    throw e;
  }
}

export interface UpdateAttachmentInput {
  auth: AuthContext;
  attachmentId: string;
  connector: Connector;
}

/** PUT /attachments/{id}: connect the attachment to the connector's host. */
export async function updateAttachment(input: UpdateAttachmentInput): Promise<Attachment> {
  assertConnectorHost(input.connector);
  const attachment = await loadAttachment(input.auth, input.attachmentId, ATTACHMENT_POLICIES.update);
  const volume = await loadVolumeOf(attachment);
  try {
    return await connectAttachment(attachment.id, input.connector, { checkDuplicates: true }, { attachment, volume });
  } catch (e) {
    if (e instanceof DriverError) throw new DriverError(`Unable to update attachment.(${e.message})`, { cause: e });
    throw e;
  }
}

/** Rollback of a create whose connect failed: delete the reservation (its own connection, if any, was released already). */
async function removeQuietly(attachmentId: string): Promise<void> {
  try {
    await withRetries(async () => {
      const attachment = await getAttachmentRecord(attachmentId);
      if (!attachment || attachment.deleted) return;
      const volume = await loadVolumeOf(attachment);
      const result = remove(volume.volume, attachment, now());
      await writeVersioned({ volume: volume.volume, attachment }, { volume: result.volume, attachment: result.tombstone });
    }, RETRY);
  } catch (e) {
    logger.error('could not roll back the reservation of a failed create', { attachmentId, error: e as Error });
  }
}

export interface AttachmentRef {
  auth: AuthContext;
  attachmentId: string;
}

/** POST /attachments/{id}/action os-complete: no state check, as upstream. */
export async function completeAttachment(input: AttachmentRef): Promise<Attachment> {
  return withRetries(async () => {
    const attachment = await loadAttachment(input.auth, input.attachmentId, ATTACHMENT_POLICIES.complete);
    const volume = await loadVolumeOf(attachment);
    const result = complete(volume.volume, attachment, now());
    await writeVersioned({ volume: volume.volume, attachment }, result);
    return result.attachment;
  }, RETRY);
}

export interface RemainingAttachment {
  id: string;
  volumeId: string;
  summary: AttachmentSummary;
}

/**
 * `attachment_deletion_allowed` (Bug #2004555): a caller other than Nova's service user may not
 * delete an attachment with an instance and connection_info while that server still uses it (its
 * BDM holds this attachment): 409, detach through the Compute API instead.
 */
async function assertDeletionAllowed(auth: AuthContext, attachment: Attachment): Promise<void> {
  if (auth.roles.includes('service') || !attachment.instanceUuid || !attachment.connectionInfo) return;
  if (await getAttachmentUsers().attachmentInUseByServer(attachment.instanceUuid, attachment.volumeId, attachment.id)) {
    throw new Conflict(`Detach volume from instance ${attachment.instanceUuid} using the Compute API`);
  }
}

/** DELETE /attachments/{id}: returns the volume's remaining attachments. */
export async function deleteAttachment(input: AttachmentRef): Promise<RemainingAttachment[]> {
  const first = await getAttachmentRecord(input.attachmentId);
  if (first?.deleted && (input.auth.isAdmin || first.projectId === input.auth.projectId)) {
    // A tombstone: a retried delete. Finish a disconnect the first one could not (crash, driver
    // failure), then answer 404 as upstream does for a deleted attachment.
    if (first.disconnect) {
      const volume = await getVolumeRecord(first.volumeId);
      if (volume) await releaseHost(volume.volume, first.disconnect, { knownUnused: false });
    }
    assertAttachmentLive(undefined, input.attachmentId);
  }
  const result = await withRetries(async (n) => {
    const attachment = n === 0 ? first : await getAttachmentRecord(input.attachmentId);
    const visible = attachment && !attachment.deleted && (input.auth.isAdmin || attachment.projectId === input.auth.projectId) ? attachment : undefined;
    assertAttachmentLive(visible, input.attachmentId);
    authorize(input.auth, ATTACHMENT_POLICIES.delete, { projectId: visible.projectId });
    if (n === 0) await assertDeletionAllowed(input.auth, visible);
    const volume = await loadVolumeOf(visible);
    const removed = remove(volume.volume, visible, now());
    await writeVersioned({ volume: volume.volume, attachment: visible }, { volume: removed.volume, attachment: removed.tombstone });
    return removed;
  }, RETRY);
  if (result.disconnect) {
    try {
      await releaseHost(result.volume, result.disconnect, { knownUnused: true });
    } catch (e) {
      const reason = e instanceof FerryError ? e.message : String(e);
      throw new DriverError(
        `Attachment ${input.attachmentId} was deleted, but the backend connection of host ${result.disconnect.host} could not be removed (${reason}); delete the attachment again to retry.`,
        { cause: e, context: { attachmentId: input.attachmentId, host: result.disconnect.host } },
      );
    }
  }
  return result.remaining.map((r) => ({ id: r.id, volumeId: result.volume.id, summary: r.summary }));
}

/** GET /attachments/{id} */
export async function getAttachment(input: AttachmentRef): Promise<Attachment> {
  return loadAttachment(input.auth, input.attachmentId, ATTACHMENT_POLICIES.show);
}
