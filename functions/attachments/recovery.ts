/**
 * Recovery of the attachments' synchronous connects and disconnects after a crash: what a process
 * that died mid-call left is finished or undone. The local stack runs it at start (a restart's
 * time is `before`: every call from before it is dead); the reconciler and `ferry audit --repair`
 * run it on a schedule with `before` = now minus CONNECT_INTENT_TIMEOUT_MS (model.ts), so a live
 * call is never taken for a dead one.
 *
 * A move that died between its terminate of the old host's connection and its transaction has its
 * old host's connection made again (restoreHost, under its fence) before its intent is undone; so
 * has a delete by id that died between its terminate and its transaction (its disconnect intent on
 * an attachment the volume still records on that host: removal-by-id.ts).
 *
 * Every backend connection is removed through releaseHost (connections.ts): only when no
 * attachment of the volume records the host, followed by the fence that makes a concurrent
 * connect retry and connect again. So a repair never races a live operation: it works under the
 * conditions the operations use. Each repair is logged with what it saw and returned.
 */
import { FerryError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import type { BackendConnection, Connector } from '../drivers/volume/driver.js';
import type { Volume } from '../volumes/model.js';
import { driverForVolume, releaseHost, restoreHost, type ReleaseOutcome } from './connections.js';
import { attachmentOf, type Attachment, type DisconnectIntent } from './model.js';
import { clearConnectIntent, clearDisconnectIntent, getAttachmentRecord, getVolumeRecord } from './repo.js';
import { clearItemConnectIntent } from './repo-intents.js';
import { markDisconnectDone, scanConnectIntents, scanPendingDisconnects, type FoundConnectIntent } from './repo-recovery.js';

/** One repair: its kind (an audit finding's kind where there is one), what it was about, what it saw, what it did. */
export type AttachmentRepair = { kind: string; resource: string; saw: string; did: string };

const reasonOf = (e: unknown) => (e instanceof FerryError || e instanceof Error ? e.message : String(e));

function logged(repair: AttachmentRepair): AttachmentRepair {
  if (repair.did.startsWith('failed')) logger.error('attachment repair failed; the next pass tries again', { ...repair });
  else logger.info('attachment repair', { ...repair });
  return repair;
}

const RELEASED: Record<ReleaseOutcome, string> = {
  terminated: 'terminated the backend connection',
  'in-use': 'kept the backend connection (an attachment uses the host)',
  'volume-gone': 'nothing to terminate (the volume is gone)',
};

/**
 * Undoes every connect intent recorded before `before` (its call died between writing the intent
 * and recording the connection, or its cleanup failed): the backend connection of the volume on
 * that host is terminated unless an attachment records it, then the intent is cleared (if it is
 * still there: each intent has its own key). Kind `pending-connect`.
 */
export async function recoverPendingConnects(options: { before: Date }): Promise<AttachmentRepair[]> {
  const before = options.before.getTime();
  const repairs: AttachmentRepair[] = [];
  for (const found of await scanConnectIntents()) {
    const { intent, volumeId } = found;
    if (Date.parse(intent.startedAt) >= before) continue;
    const host = intent.host;
    const resource = `attachment ${intent.attachmentId}`;
    let saw = `attachment of volume ${volumeId} with a connect intent to host ${host} from ${intent.startedAt}`;
    try {
      const attachment = await attachmentOfIntent(found);
      const status = attachment ? (attachment.deleted ? 'deleted' : attachment.attachStatus) : 'item' in found ? 'deleted' : (found.summary?.status ?? 'deleted');
      saw = `${status} ${saw}`;
      const restored = attachment ? await restoreMovedFrom(attachment, host) : '';
      const released = await releaseIfUnused(volumeId, host, intent.connector);
      const cleared = 'item' in found ? await clearItemConnectIntent(found.item.id, intent.id) : await clearConnectIntent(volumeId, intent.id);
      repairs.push(logged({ kind: 'pending-connect', resource, saw, did: `${restored}${RELEASED[released]}; ${cleared === 'cleared' ? 'cleared the intent' : 'the intent was already gone'}` }));
    } catch (e) {
      repairs.push(logged({ kind: 'pending-connect', resource, saw, did: `failed: ${reasonOf(e)}` }));
    }
  }
  return repairs;
}

/**
 * The attachment a dead connect intent is of, as restoreMovedFrom needs it (its recorded host,
 * connector and connection): the item it was found on, else, when its volume still lists it on
 * another host than the intent's (a move), its item read; undefined when there is nothing to
 * restore (deleted: the volume no longer lists it; or listed on the intent's own host).
 */
async function attachmentOfIntent(found: FoundConnectIntent): Promise<Attachment | undefined> {
  if ('item' in found) return found.item;
  if (!found.summary || found.summary.host === found.intent.host) return undefined;
  return getAttachmentRecord(found.intent.attachmentId);
}

/**
 * A connect intent to another host than the one a live attachment is recorded connected on is a
 * move, which terminates the old host's connection before its transaction (connections.ts): if it
 * died in between, the record still counts the attachment on the old host, whose connection is
 * made again (restoreHost, under its fence). What it did, as the start of the repair's `did`.
 */
async function restoreMovedFrom(attachment: Attachment, intentHost: string): Promise<string> {
  if (attachment.attachedHost === intentHost) return '';
  return restoreRecordedHost(attachment, "the move's old host");
}

/** The connection of the host a live attachment is recorded connected on, made again while the volume records it there; what it did, as the start of a repair's `did`. */
async function restoreRecordedHost(attachment: Attachment, which: string): Promise<string> {
  const host = attachment.attachedHost;
  if (attachment.deleted || !attachment.connector || attachment.connectionInfo === null || !host) return '';
  const loaded = await getVolumeRecord(attachment.volumeId);
  if (!loaded?.volume.connections[host]?.includes(attachment.id)) return '';
  const restored = await restoreHost(loaded.volume, { host, connector: attachment.connector });
  return restored === 'restored' ? `made the connection on host ${host} (${which}) again; ` : '';
}

/**
 * A delete's disconnect intent left before `before`: its call died between writing it and its
 * transaction (or could not clear it). The connection of the host the attachment records is made
 * again if the volume still records the attachment there (the terminate may have happened), else
 * removed unless an attachment uses the host (a tombstone's: a restore of the failed delete may
 * have made it), then the intent is cleared. Kind `pending-disconnect`.
 */
async function recoverDisconnectIntent(item: Attachment, intent: DisconnectIntent): Promise<AttachmentRepair> {
  // A live attachment's host and connector as its volume's summary holds them (attachmentOf).
  const attachment = item.deleted ? item : attachmentOf(item, (await getVolumeRecord(item.volumeId))?.volume.attachments[item.id]);
  const host = attachment.attachedHost;
  const resource = `attachment ${attachment.id}`;
  const saw = `${attachment.deleted ? 'deleted' : attachment.attachStatus} attachment of volume ${attachment.volumeId} on host ${host ?? 'None'} with a delete's disconnect intent from ${intent.startedAt}`;
  try {
    const restored = await restoreRecordedHost(attachment, "the delete's");
    const released = host && attachment.connector ? `${RELEASED[await releaseIfUnused(attachment.volumeId, host, attachment.connector)]}; ` : '';
    const cleared = await clearDisconnectIntent(attachment.id, intent.id);
    return logged({ kind: 'pending-disconnect', resource, saw, did: `${restored}${released}${cleared === 'cleared' ? 'cleared the intent' : 'the intent was already gone'}` });
  } catch (e) {
    return logged({ kind: 'pending-disconnect', resource, saw, did: `failed: ${reasonOf(e)}` });
  }
}

/**
 * Undoes the disconnect intents of deletes by id begun before `before` (recoverDisconnectIntent), and
 * finishes the disconnects of deletes that ended before `before` (the tombstone records the host
 * connection the delete had to remove; a crash or a driver failure after the tombstone write left
 * it): the connection goes unless an attachment uses the host again, and the tombstone is marked
 * seen through. Kind `pending-disconnect` (the audit's finding) when the backend still held the
 * connection; tombstones whose delete had finished are only marked, and not reported.
 */
export async function recoverPendingDisconnects(options: { before: Date }): Promise<AttachmentRepair[]> {
  const before = options.before.getTime();
  const repairs: AttachmentRepair[] = [];
  const held = new BackendConnections();
  for (const found of await scanPendingDisconnects()) {
    for (const intent of Object.values(found.pendingDisconnect ?? {})) {
      if (Date.parse(intent.startedAt) < before) repairs.push(await recoverDisconnectIntent(found, intent));
    }
    const tombstone = found;
    if (!tombstone.deleted || Date.parse(tombstone.updatedAt) >= before || !tombstone.disconnect) continue;
    const { host, connector } = tombstone.disconnect;
    const resource = `attachment ${tombstone.id}`;
    try {
      const loaded = await getVolumeRecord(tombstone.volumeId);
      const connected = loaded ? await held.has(loaded.volume, host) : false;
      if (loaded && connected) {
        const saw = `deleted attachment of volume ${tombstone.volumeId} whose delete had to remove the connection on host ${host}, which ${loaded.volume.host} still holds`;
        const released = await releaseHost(loaded.volume, { host, connector }, { knownUnused: false });
        repairs.push(logged({ kind: 'pending-disconnect', resource, saw, did: RELEASED[released] }));
      }
      await markDisconnectDone(tombstone);
    } catch (e) {
      const saw = `deleted attachment of volume ${tombstone.volumeId} with a disconnect of host ${host} to see through`;
      repairs.push(logged({ kind: 'pending-disconnect', resource, saw, did: `failed: ${reasonOf(e)}` }));
    }
  }
  return repairs;
}

/**
 * For the audit's `orphan-host-connection` repair: terminates the backend connection of the
 * volume on `host` only if, at that moment, no attachment of the volume records the host (and
 * fences, as every release does). 'in-use' when one does (or connected it again meanwhile).
 */
export async function terminateUnusedConnection(volumeId: string, host: string, connector: Connector): Promise<'terminated' | 'in-use' | 'volume-gone'> {
  return releaseIfUnused(volumeId, host, connector);
}

async function releaseIfUnused(volumeId: string, host: string, connector: Connector): Promise<ReleaseOutcome> {
  const loaded = await getVolumeRecord(volumeId);
  if (!loaded) return 'volume-gone';
  if ((loaded.volume.connections[host]?.length ?? 0) > 0) return 'in-use';
  // Unused as just read; a connect recording the host after this read is what the fence catches.
  return releaseHost(loaded.volume, { host, connector }, { knownUnused: true });
}

/** The connections each backend holds, listed once per pass. */
class BackendConnections {
  private readonly byBackend = new Map<string, Promise<BackendConnection[]>>();

  async has(volume: Volume, host: string): Promise<boolean> {
    const key = volume.host ?? '';
    let listing = this.byBackend.get(key);
    if (!listing) {
      listing = driverForVolume(volume).then((driver) => driver.listConnections());
      this.byBackend.set(key, listing);
    }
    return (await listing).some((c) => c.backendName === volume.backendName && c.host === host);
  }
}
