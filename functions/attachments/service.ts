/**
 * The attachment operations, independent of HTTP: the attachments API calls them, so do the
 * volume-create state machine (attach to `server_id`, attachments/steps.ts) and Nova's flows
 * (servers/cinder.ts). Host connections: connections.ts; the listing: queries.ts.
 *
 * Each operation reads the attachment and/or volume, applies a pure transition (transitions.ts),
 * and writes both in one transaction (repo.ts); a lost race re-reads and re-applies. Happy-path
 * DynamoDB requests: create 1 from the volume as this process last saw it stored (the reserve
 * under its version) or 2 (get volume, transaction), create with connector 1 or 2 more, update 2
 * from the volume's record when this process knows the attachment and remembers its volume (the
 * connect intent in one update of the volume under its version, then the transaction:
 * listed-connect.ts) or 3 by id (get attachment, the connect-intent update of its volume returning
 * the volume, transaction); also when it moves the attachment off a host nobody else uses (that host's
 * terminate comes before the transaction, which is its fence: connections.ts connectAttachment), complete
 * 1 (the transaction, from the volume's record when this process read or wrote the attachment;
 * +1 get attachment when it did not), delete 1 (the transaction, from the volume's record when this
 * process read or wrote the attachment; +1 fence when it removes a host's last connection) or 3 by
 * id when it did not (the disconnect intent returning the attachment, the volume, the transaction:
 * removal-by-id.ts), show 1. Complete and delete start from the volume as this
 * process last saw it stored (volume-records.ts), which the previous call of the cycle left: +1
 * (get volume) when it has not seen it in the last seconds.
 *
 * A caller with an id of its own for the attachment (a Nova flow's step: core/intents.ts) passes
 * `attachmentId`: the reserve puts the attachment only if the id is free, and a re-run finds the
 * attachment the first run made instead of making a second one. The public API never lets a
 * client choose the id.
 *
 * Host connections (reference §3.6, seed 004): the backend connection of (volume, connector host)
 * is shared by every attachment of the volume on that host and refcounted in the volume item's
 * `connections[host]`. Ordering, so a failure at any point leaks nothing and loses nothing:
 * - connect: the connect intent on the volume (model.ts `connectIntents`: written by the reserve
 *   for a create with a connector, by the update that also reads the volume for PUT), driver.initializeConnection
 *   (idempotent), then the transaction that records the attachment as connected and clears the
 *   intent; if the connect finally fails and no attachment uses the host, the connection is
 *   terminated again and the intent cleared. A process death in between leaves the intent, which
 *   recovery.ts undoes (at stack start, and by the reconciler).
 * - delete from the volume's record: the transaction (attachment -> tombstone, removed from
 *   `connections[host]`), then, if it was the last user, terminateConnection and a fence write. The
 *   tombstone remembers the pending disconnect, so a delete retried after a crash or a driver
 *   failure finishes it. Delete by id: the disconnect intent, terminateConnection, then the
 *   transaction as its fence (removal-by-id.ts).
 */
import { randomUUID } from 'node:crypto';
import type { AuthContext } from '../core/auth.js';
import { withRetries } from '../core/db.js';
import { BadRequest, DriverError, FerryError, InvalidVolume } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { authorize } from '../core/policy.js';
import type { Connector } from '../drivers/volume/driver.js';
import type { AttachmentSummary } from '../volumes/model.js';
import { AttachmentIdTaken, attachmentOf, newConnectIntent, type Attachment } from './model.js';
import { failedItem, knownAttachment, knownVolume, loadedVolume, type AttachmentIdentity } from './volume-records.js';
import { completeListed } from './listed-complete.js';
import { startConnectListed } from './listed-connect.js';
import { removeListed, type ListedRemovalInput } from './listed-removal.js';
import { ATTACHMENT_POLICIES, finishDisconnect } from './removal.js';
import { removeById } from './removal-by-id.js';
import { clearConnectIntent, getAttachmentItem, getAttachmentRecord, getVolumeRecord, readAttachment, writeConnectIntent, writeReserve, writeVersioned, type LoadedVolume } from './repo.js';
import { writeAttachmentState } from './repo-from-volume.js';
import { assertAttachmentLive, complete, needsMultiattachBootablePolicy, remove, reserve, type RemoveResult, type ReserveResult } from './transitions.js';

import { connectAttachment, loadVolumeOf, now, RETRY, volumeNotFound, type ConnectStart } from './connections.js';

export { ATTACHMENT_POLICIES } from './removal.js';

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
  /**
   * The id of the attachment to make, derived by the caller from its operation and step
   * (core/intents.ts); never from an API client. With it the create is idempotent: a re-run
   * returns the attachment the first run made (connecting it if it is not yet connected to the
   * connector's host), and a failed connect keeps the reservation (the caller knows its id: it
   * retries or deletes it). An id used by a tombstone or by another volume or instance:
   * AttachmentIdTaken. Without it, a fresh random id (the API).
   */
  attachmentId?: string;
  /**
   * The volume as the caller read it in this request (the pre-3.27 actions read it first): the
   * reserve's first attempt starts from it instead of reading it again. Its transaction is
   * conditional on the version read, so a volume moved since is refused and the retry reads.
   */
  volume?: LoadedVolume;
  /** The call's own id (the API's request id; absent for a flow's step): names the connect intent (model.ts connectIntentId). */
  callId?: string;
}

/** POST /attachments: reserve, and connect when a connector is given. */
export async function createAttachment(input: CreateAttachmentInput): Promise<Attachment> {
  const { connector } = input;
  assertConnectorHost(connector);
  let start: ConnectStart | Attachment;
  try {
    start = await reserveAttachment(input);
  } catch (e) {
    if (input.attachmentId === undefined) throw e;
    // The id may be taken by the first run of this create; an InvalidVolume may be that run's
    // attachment holding the volume (only then is the read worth it).
    // The put's refusal returns the item alone: a live one's state is read with its volume's summary.
    const taken = e instanceof AttachmentIdTaken ? e.existing : undefined;
    const existing = taken?.deleted ? taken : taken || e instanceof InvalidVolume ? ((await getAttachmentRecord(input.attachmentId)) ?? taken) : undefined;
    if (!existing) throw e;
    start = await adoptExisting(input, existing);
  }
  if (!connector || !('intent' in start)) return start as Attachment;

  try {
    // Create with a connector skips the duplicate-connector guard, as upstream (Nova's live
    // migration connects a second attachment of the same instance this way).
    return await connectAttachment(start.attachment.id, connector, { checkDuplicates: false }, start);
  } catch (e) {
    // An API client never learns this attachment's id, so a failed connect must not leave the
    // reservation behind (upstream leaves it, and a non-multiattach volume stays reserved).
    if (input.attachmentId === undefined) await removeQuietly(start.attachment.id);
    if (e instanceof DriverError) throw new DriverError(`Unable to create attachment for volume (${e.message}).`, { cause: e });
    throw e;
  }
}

/** The reservation (with the connect intent on the volume when a connector is given, in the same transaction): what the connect starts from. */
async function reserveAttachment(input: CreateAttachmentInput): Promise<ConnectStart | Attachment> {
  const { auth, volumeId, instanceUuid, connector } = input;
  const attachmentId = input.attachmentId ?? randomUUID();
  const intent = connector ? newConnectIntent(attachmentId, connector, now(), input.callId) : undefined;
  // The first attempt starts from the caller's record if it read one, else from the one this
  // process remembers (whose version the reserve is then conditioned on: repo.ts writeReserve; 1
  // request in the API's cycle instead of 2), else reads; a retry from the record the refused
  // transaction returned, which is as good as a read.
  let first = input.volume;
  let remembered = first ? undefined : knownVolume(volumeId);
  const decide = (loaded: LoadedVolume): ReserveResult => {
    const volume = loaded.volume;
    // What a read answers (loadVolume), for a record that did not come from one.
    if (!auth.isAdmin && volume.projectId !== auth.projectId) throw volumeNotFound(volumeId);
    authorize(auth, ATTACHMENT_POLICIES.create, { projectId: volume.projectId });
    if (needsMultiattachBootablePolicy(volume)) authorize(auth, ATTACHMENT_POLICIES.multiattachBootable, { projectId: volume.projectId });
    return reserve(volume, { attachmentId, instanceUuid, mode: input.mode, now: now() });
  };
  const reserved: ReserveResult = await withRetries(async () => {
    const [given, fromMemory] = [first, remembered];
    first = remembered = undefined;
    let start = given ? { loaded: given, result: decide(given) } : fromMemory ? decidedOrRefused(fromMemory, decide) : undefined;
    if (!start) {
      // A refusal is answered from a read, as it always was: a remembered record may be behind.
      const loaded = await loadVolume(auth, volumeId);
      start = { loaded, result: decide(loaded) };
    }
    try {
      await writeReserve(start.loaded, start.result, { versioned: start.loaded === fromMemory, connectIntent: intent });
    } catch (e) {
      const current = failedItem(e, 1);
      if (current) first = loadedVolume(current);
      throw e;
    }
    return start.result;
  }, RETRY);
  if (!intent) return reserved.attachment;
  return { attachment: reserved.attachment, intent, volume: { volume: reserved.volume, hasMaps: true } };
}

/** The decision on a remembered record, or undefined when it refuses (the caller decides again on a read). */
function decidedOrRefused(loaded: LoadedVolume, decide: (loaded: LoadedVolume) => ReserveResult): { loaded: LoadedVolume; result: ReserveResult } | undefined {
  try {
    return { loaded, result: decide(loaded) };
  } catch (e) {
    if (e instanceof FerryError) return undefined;
    throw e;
  }
}

/**
 * A create re-run with its id found the attachment a first run made: it is the result if it is
 * that create's (live, same volume and instance) and connected where asked; else it is connected
 * now. Anything else under that id is refused, never replaced by a second attachment.
 */
async function adoptExisting(input: CreateAttachmentInput, existing: Attachment): Promise<ConnectStart | Attachment> {
  if (existing.deleted || existing.volumeId !== input.volumeId || existing.instanceUuid !== input.instanceUuid) throw new AttachmentIdTaken(existing);
  const connector = input.connector;
  if (!connector || (existing.attachedHost === connector.host && existing.connectionInfo !== null)) return existing;
  const intent = newConnectIntent(existing.id, connector, now(), input.callId);
  const volume = await writeConnectIntent(existing, intent);
  assertAttachmentLive(volume ? existing : undefined, existing.id);
  return { attachment: existing, intent, volume };
}

export interface UpdateAttachmentInput {
  auth: AuthContext;
  attachmentId: string;
  connector: Connector;
  /** The attachment's volume as the caller read it in this request: the connect starts from its summary of the attachment (listed-connect.ts). */
  volume?: LoadedVolume;
  /** The call's own id (see CreateAttachmentInput.callId). */
  callId?: string;
}

/** PUT /attachments/{id}: connect the attachment to the connector's host. */
export async function updateAttachment(input: UpdateAttachmentInput): Promise<Attachment> {
  assertConnectorHost(input.connector);
  // From the volume's record when this process knows the attachment and its volume, or the caller
  // read the volume and it lists the attachment (listed-connect.ts: 2 requests), else by id.
  const listing = input.volume?.volume.attachments[input.attachmentId] ? { volumeId: input.volume.volume.id, projectId: input.volume.volume.projectId } : undefined;
  const known = input.volume ? listing : knownToCaller(input);
  const listed = known && (await startConnectListed({ ...input, ...known, record: input.volume }));
  // Either start carries the volume as its intent write found it (listed: the record proven current; by id: ALL_NEW).
  const start: ConnectStart = listed || (await startConnect(input.auth, input.attachmentId, input.connector, input.callId));
  try {
    return await connectAttachment(input.attachmentId, input.connector, { checkDuplicates: true }, start);
  } catch (e) {
    if (e instanceof DriverError) throw new DriverError(`Unable to update attachment.(${e.message})`, { cause: e });
    throw e;
  }
}

/**
 * The attachment read (its identity: volume, project), then the connect intent written on its
 * volume by the one conditional update that also reads the volume (ALL_NEW: no separate GetItem).
 * Visibility is checked on the item read and again in the write's condition (listed on the
 * volume, and the caller's project unless admin), so answers stay as a read-first update gives
 * them: 404 for what the caller cannot see, then the policy's 403.
 */
async function startConnect(auth: AuthContext, attachmentId: string, connector: Connector, callId: string | undefined): Promise<ConnectStart> {
  const action = ATTACHMENT_POLICIES.update;
  if (!auth.isAdmin) {
    // The condition limits the write to the caller's project, so this is the policy check
    // against the attachment's project, made before anything is written.
    try {
      authorize(auth, action, { projectId: auth.projectId });
    } catch (e) {
      await loadAttachment(auth, attachmentId, action);
      throw e;
    }
  }
  const projectId = auth.isAdmin ? undefined : auth.projectId;
  // The item for the attachment's identity; its state from the volume the intent's write returns.
  const item = await getAttachmentItem(attachmentId);
  const visible = item && !item.deleted && (projectId === undefined || item.projectId === projectId) ? item : undefined;
  const intent = newConnectIntent(attachmentId, connector, now(), callId);
  const volume = visible && (await writeConnectIntent(visible, intent, projectId));
  const attachment = volume ? attachmentOf(visible, volume.volume.attachments[attachmentId]) : undefined;
  assertAttachmentLive(attachment, attachmentId);
  if (auth.isAdmin) {
    try {
      authorize(auth, action, { projectId: attachment.projectId });
    } catch (e) {
      await clearConnectIntent(attachment.volumeId, intent.id);
      throw e;
    }
  }
  return { attachment, intent, volume };
}

/** Rollback of a create whose connect failed: delete the reservation (its own connection, if any, was released already). */
async function removeQuietly(attachmentId: string): Promise<void> {
  try {
    await withRetries(async () => {
      const read = await readAttachment(attachmentId);
      const attachment = read?.attachment;
      if (!attachment || attachment.deleted) return;
      const volume = read.volume ?? (await loadVolumeOf(attachment));
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

/**
 * The volume a complete or delete starts from: as this process last saw it stored (the previous
 * call's write, or a failed attempt's transaction), else read. Their transaction is conditional on
 * its version, so a record moved since is refused and the retry starts from the current one.
 */
async function startingVolumeOf(attachment: Attachment): Promise<LoadedVolume> {
  return knownVolume(attachment.volumeId) ?? (await loadVolumeOf(attachment));
}

/** The attachment's volume and project as this process knows them, when the caller may see it; one the caller may not see goes by id, which answers the 404. */
function knownToCaller(input: AttachmentRef): AttachmentIdentity | undefined {
  const known = knownAttachment(input.attachmentId);
  return known && (input.auth.isAdmin || known.projectId === input.auth.projectId) ? known : undefined;
}

/**
 * POST /attachments/{id}/action os-complete: no state check, as upstream. From the volume's record
 * when this process knows the attachment (listed-complete.ts: 1 request in the API's cycle), else
 * by id: the attachment read, then the transaction.
 */
export async function completeAttachment(input: AttachmentRef): Promise<void> {
  const known = knownToCaller(input);
  if (known && (await completeListed({ ...input, ...known }))) return;
  await withRetries(async () => {
    const attachment = await loadAttachment(input.auth, input.attachmentId, ATTACHMENT_POLICIES.complete);
    const volume = await startingVolumeOf(attachment);
    const result = complete(volume.volume, attachment, now());
    await writeAttachmentState({ volume: volume.volume, attachment }, result);
  }, RETRY);
}

export interface RemainingAttachment {
  id: string;
  volumeId: string;
  summary: AttachmentSummary;
}

const remainingOf = (removed: RemoveResult): RemainingAttachment[] => removed.remaining.map((r) => ({ id: r.id, volumeId: removed.volume.id, summary: r.summary }));

/**
 * DELETE /attachments/{id}: returns the volume's remaining attachments. When this process knows the
 * attachment's volume (it read or wrote the attachment), from the volume's record with no read of
 * the attachment (listed-removal.ts): the transaction from the volume as last seen (else one read
 * more) and, when it removed a host's last connection, the fence; 2 requests in the API's cycle, 3
 * from a volume not seen lately (were 3 and 4). Else, or when the record does not stand for the
 * attachment, by id (deleteById).
 */
export async function deleteAttachment(input: AttachmentRef & { callId?: string }): Promise<RemainingAttachment[]> {
  const known = knownToCaller(input);
  if (known) {
    const outcome = await removeListed({ ...input, ...known });
    if (typeof outcome === 'object') {
      await finishDisconnect(input.attachmentId, outcome.removed);
      return remainingOf(outcome.removed);
    }
  }
  return deleteById(input);
}

/** A pre-3.27 detach action: the attachment its route's record of the volume lists, from that record (404 when it lists none); by id when it cannot stand for it. */
export async function deleteListedAttachment(input: Omit<ListedRemovalInput, 'volumeId' | 'projectId'> & { volume: LoadedVolume; callId?: string }): Promise<void> {
  const outcome = await removeListed({ ...input, volumeId: input.volume.volume.id });
  if (outcome === 'volume-gone') throw volumeNotFound(input.volume.volume.id);
  if (outcome === 'by-id') await deleteById(input);
  else if (outcome === 'unlisted') assertAttachmentLive(undefined, input.attachmentId);
  else await finishDisconnect(input.attachmentId, outcome.removed);
}

/** The delete by id (removal-by-id.ts): at most 3 requests, the host's connection gone with it. */
async function deleteById(input: AttachmentRef & { callId?: string }): Promise<RemainingAttachment[]> {
  return remainingOf(await removeById(input));
}

/** GET /attachments/{id} */
export async function getAttachment(input: AttachmentRef): Promise<Attachment> {
  return loadAttachment(input.auth, input.attachmentId, ATTACHMENT_POLICIES.show);
}
