/**
 * Host connections of attachments (reference §3.6, seed 004): the backend connection of (volume,
 * connector host) is shared by every attachment of the volume on that host and refcounted in the
 * volume item's `connections[host]`. Ordering, so a failure at any point leaks nothing:
 * - connect: the connect intent (on the volume: model.ts `connectIntents`), then driver.initializeConnection
 *   (idempotent), then the transaction that records the attachment as connected and clears the
 *   intent; if the connect finally fails and no attachment uses the host, the connection is
 *   terminated again and the intent cleared. A process that dies in between leaves the intent,
 *   which recovery.ts undoes.
 * - a move off a host nobody else uses: that host's terminate between the connect's initialize
 *   and its transaction (the transaction is its fence); restoreHost is its compensation.
 * - release: terminateConnection only when no attachment uses the host, then a fence write.
 */
import { isConditionFailure, isTransactionConflict, withRetries } from '../core/db.js';
import { InvalidVolume, NotFound } from '../core/errors.js';
import { logger } from '../core/logger.js';
import type { Connector, VolumeDriver } from '../drivers/volume/driver.js';
import { driverForHost } from '../volumes/backends.js';
import type { Volume } from '../volumes/model.js';
import { startAttachWait, withAttachWait } from './attach-wait.js';
import { connectIntentsOf, type Attachment, type ConnectIntent } from './model.js';
import { clearConnectIntent, fenceHost, getAttachmentRecord, getVolumeRecord, readAttachment, writeConnectIntent, type LoadedVolume } from './repo.js';
import { AttachmentNotListed, writeAttachmentState, writeConnectFromVolume } from './repo-from-volume.js';
import { assertAttachmentLive, checkConnect, connect, type ConnectOptions } from './transitions.js';

/** Lost races (a reserve rule or version no longer holding, or a concurrent transaction) re-read and re-apply. */
export const RETRY = { retryable: (e: unknown) => isConditionFailure(e) || isTransactionConflict(e) };

export const now = () => new Date().toISOString();

/** How long a backend's driver is reused before its record is read again (keeps the happy path at 3 DynamoDB requests). */
export const DRIVER_CACHE_MS = 10_000;
const drivers = new Map<string, { driver: VolumeDriver; until: number }>();

/** Forgets the drivers kept (a test that counts requests starts its 10 s with a fresh one). */
export function forgetConnectionDrivers(): void {
  drivers.clear();
}

export async function driverForVolume(volume: Volume): Promise<VolumeDriver> {
  if (!volume.host) throw new InvalidVolume(`Volume ${volume.id} has no host yet; it cannot be connected.`, { volumeId: volume.id });
  const cached = drivers.get(volume.host);
  if (cached && cached.until > Date.now()) return cached.driver;
  const driver = await driverForHost(volume.host);
  drivers.set(volume.host, { driver, until: Date.now() + DRIVER_CACHE_MS });
  return driver;
}

export const volumeNotFound = (id: string) => new NotFound(`Volume ${id} could not be found.`, { volumeId: id });

export async function loadVolumeOf(attachment: Attachment): Promise<LoadedVolume> {
  const loaded = await getVolumeRecord(attachment.volumeId);
  if (!loaded) throw volumeNotFound(attachment.volumeId);
  return loaded;
}

/** A connect about to start: the attachment, its intent (written), and the volume if already read (the intent write returns it). */
export interface ConnectStart {
  attachment: Attachment;
  intent: ConnectIntent;
  volume?: LoadedVolume;
  /**
   * Set when `attachment` is the volume's summary of it, not the item (listed-connect.ts): the
   * attachment's project, which the connect's transaction is then conditioned on.
   */
  listedProjectId?: string;
}

/**
 * initializeConnection, then the transaction recording it (and ending the intent); on a lost
 * race both again after a re-read (a fence write by a concurrent disconnect may have removed the
 * connection in between). If the connect finally fails, the connection is removed again unless
 * another attachment uses the host, then the intent is cleared.
 *
 * An attachment moving off a host nobody else uses: that host's connection is terminated BEFORE
 * the transaction, which then is its fence (it moves the volume's version, so a connect on that
 * host that read the volume before the terminate retries and connects again) and its record of
 * done, in the same write that records the new host: no fence or intent write of its own. The
 * intent of the terminate is the connect intent itself on an attachment still recorded on the old
 * host (recovery.ts restores that host's connection if the call died in between). If the
 * transaction does not happen, the old host's connection is made again (restoreHost) before the
 * retry or the failure.
 */
export async function connectAttachment(attachmentId: string, connector: Connector, options: ConnectOptions, first: ConnectStart): Promise<Attachment> {
  let state: ConnectStart | undefined = first;
  const intent = first.intent;
  let connectedVolume: Volume | undefined;
  let keepIntent = false;
  try {
    return await withRetries(async () => {
      if (!state) {
        const read = await readAttachment(attachmentId);
        const attachment = read?.attachment;
        assertAttachmentLive(attachment, attachmentId);
        let volume: LoadedVolume | undefined = read?.volume ?? (await loadVolumeOf(attachment));
        // Only a recovery pass that took this call for a dead one removes its intent: write it again (a fresh read shows it).
        if (!connectIntentsOf(volume.volume)[intent.id]) volume = await writeConnectIntent(attachment, intent);
        assertAttachmentLive(volume ? attachment : undefined, attachmentId);
        state = { attachment, intent, volume };
      }
      const { attachment, listedProjectId } = state;
      const volume = state.volume ?? (await loadVolumeOf(attachment));
      state = undefined;
      checkConnect(volume.volume, attachment, options);
      const driver = await driverForVolume(volume.volume);
      connectedVolume = volume.volume;
      const connection = await driver.initializeConnection(volume.volume.backendName, connector);
      const fromSummary = listedProjectId !== undefined;
      // A connection the backend has not finished gets its wait recorded on the volume in the same write, named from the version it writes (attach-wait.ts).
      const result = withAttachWait(connect(volume.volume, attachment, { connector, connection, now: now() }, options), connection, now());
      const left = result.releasedHost;
      try {
        if (left) await driver.terminateConnection(volume.volume.backendName, left.connector);
        if (fromSummary) await writeConnectFromVolume(volume.volume, result.volume, result.attachment, intent.id, listedProjectId);
        else await writeAttachmentState({ volume: volume.volume, attachment }, result, { endIntent: intent.id });
      } catch (e) {
        // Compensation of the terminate: the old host's connection again, while an attachment records it.
        if (left) keepIntent = !(await restoreLeftHost(attachmentId, volume.volume, left));
        // The item is not what the summary stands for (a wait on an item written before the volume's map, ...): the retry reads it.
        if (e instanceof AttachmentNotListed) throw e.cause;
        throw e;
      }
      await startAttachWait(attachmentId, result.volume.attachWaits?.[attachmentId]);
      return result.attachment;
    }, RETRY);
  } catch (e) {
    await undoFailedConnect(attachmentId, first.attachment.volumeId, connector, connectedVolume, keepIntent ? undefined : intent);
    throw e;
  }
}

/**
 * restoreHost after a terminate whose transaction did not happen (a move's of the host it left, a
 * delete's by id); false (logged) when it failed: the call's intent then stays for recovery.
 */
export async function restoreLeftHost(attachmentId: string, volume: Volume, left: { host: string; connector: Connector }): Promise<boolean> {
  try {
    await restoreHost(volume, left);
    return true;
  } catch (e) {
    logger.error('could not make again the connection of a host terminated before a transaction that did not happen; its intent stays for recovery', { attachmentId, host: left.host, error: e as Error });
    return false;
  }
}

/**
 * The cleanup of a failed connect: the connection it may have made goes unless another attachment
 * uses the host, then its intent (none: the intent is kept, as it is when the connection could not
 * be removed, so that a recovery pass, recoverPendingConnects, finishes the cleanup later).
 */
async function undoFailedConnect(attachmentId: string, volumeId: string, connector: Connector, connectedVolume: Volume | undefined, intent: ConnectIntent | undefined): Promise<void> {
  if (connectedVolume) {
    try {
      await releaseHost(connectedVolume, { host: connector.host, connector }, { knownUnused: false });
    } catch (e) {
      logger.error('could not remove the backend connection of a failed connect; its intent stays for recovery to undo', {
        attachmentId,
        volumeId: connectedVolume.id,
        host: connector.host,
        error: e as Error,
      });
      return;
    }
  }
  if (!intent) return;
  try {
    await clearConnectIntent(volumeId, intent.id);
  } catch (e) {
    logger.error('could not clear the intent of a failed connect; a recovery pass clears it', { attachmentId, host: connector.host, error: e as Error });
  }
}

/** What releaseHost did: removed the connection, left it (an attachment uses the host), or found no volume. */
export type ReleaseOutcome = 'terminated' | 'in-use' | 'volume-gone';

/**
 * Removes a host's backend connection if no attachment uses it, then fences: a connect that read
 * the volume before the fence must retry (and so reconnect). If an attachment recorded a
 * connection on the host meanwhile, the terminate may have removed it: connect it again.
 */
export async function releaseHost(volume: Volume, target: { host: string; connector: Connector }, options: { knownUnused: boolean }): Promise<ReleaseOutcome> {
  if (!options.knownUnused) {
    const fresh = await getVolumeRecord(volume.id);
    if (!fresh) return 'volume-gone';
    if ((fresh.volume.connections[target.host]?.length ?? 0) > 0) return 'in-use';
  }
  const driver = await driverForVolume(volume);
  await driver.terminateConnection(volume.backendName, target.connector);
  if ((await fenceHost(volume.id, target.host)) === 'in-use') {
    const latest = await getVolumeRecord(volume.id);
    const userId = latest?.volume.connections[target.host]?.[0];
    // The user's connector from its summary; one written before summaries kept it: from its read.
    const listed = userId ? latest?.volume.attachments[userId]?.connector : undefined;
    const user = userId && !listed ? await getAttachmentRecord(userId) : undefined;
    await driver.initializeConnection(volume.backendName, listed ?? user?.connector ?? target.connector);
    return 'in-use';
  }
  return 'terminated';
}

/** What restoreHost did: made the connection again, or found no attachment recording the host (nothing left made). */
export type RestoreOutcome = 'restored' | 'unused' | 'volume-gone';

/**
 * Makes a host's backend connection again (a move terminated it, then did not record its
 * transaction), then fences while an attachment still records the host: a move that read the
 * volume before this and would terminate the host again retries from the record instead. When no
 * attachment records the host any more, what this made is removed again (releaseHost).
 */
export async function restoreHost(volume: Volume, target: { host: string; connector: Connector }): Promise<RestoreOutcome> {
  const driver = await driverForVolume(volume);
  await driver.initializeConnection(volume.backendName, target.connector);
  const fenced = await fenceHost(volume.id, target.host, { whileUsed: true });
  if (fenced === 'fenced') return 'restored';
  if (fenced === 'gone') {
    await driver.terminateConnection(volume.backendName, target.connector);
    return 'volume-gone';
  }
  await releaseHost(volume, target, { knownUnused: false });
  return 'unused';
}
