/**
 * Host connections of attachments (reference §3.6, seed 004): the backend connection of (volume,
 * connector host) is shared by every attachment of the volume on that host and refcounted in the
 * volume item's `connections[host]`. Ordering, so a failure at any point leaks nothing:
 * - connect: driver.initializeConnection (idempotent), then the transaction that records the
 *   attachment as connected; if the connect finally fails and no attachment uses the host, the
 *   connection is terminated again.
 * - release: terminateConnection only when no attachment uses the host, then a fence write.
 */
import { isConditionFailure, isTransactionConflict, withRetries } from '../core/db.js';
import { InvalidVolume, NotFound } from '../core/errors.js';
import { logger } from '../core/logger.js';
import type { Connector, VolumeDriver } from '../drivers/volume/driver.js';
import { driverForHost } from '../volumes/backends.js';
import type { Volume } from '../volumes/model.js';
import type { Attachment } from './model.js';
import { fenceHost, getAttachmentRecord, getVolumeRecord, writeVersioned, type LoadedVolume } from './repo.js';
import { assertAttachmentLive, checkConnect, connect, type ConnectOptions } from './transitions.js';

/** Lost races (a reserve rule or version no longer holding, or a concurrent transaction) re-read and re-apply. */
export const RETRY = { retryable: (e: unknown) => isConditionFailure(e) || isTransactionConflict(e) };

export const now = () => new Date().toISOString();

/** How long a backend's driver is reused before its record is read again (keeps the happy path at 3 DynamoDB requests). */
export const DRIVER_CACHE_MS = 10_000;
const drivers = new Map<string, { driver: VolumeDriver; until: number }>();

async function driverForVolume(volume: Volume): Promise<VolumeDriver> {
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

/**
 * initializeConnection, then the transaction recording it; on a lost race both again (a fence
 * write by a concurrent disconnect may have removed the connection in between). If the connect
 * finally fails, the connection is removed again unless another attachment uses the host.
 */
export async function connectAttachment(
  attachmentId: string,
  connector: Connector,
  options: ConnectOptions,
  first: { attachment: Attachment; volume: LoadedVolume },
): Promise<Attachment> {
  let state: typeof first | undefined = first;
  let connectedVolume: Volume | undefined;
  try {
    return await withRetries(async () => {
      if (!state) {
        const attachment = await getAttachmentRecord(attachmentId);
        assertAttachmentLive(attachment, attachmentId);
        state = { attachment, volume: await loadVolumeOf(attachment) };
      }
      const { attachment, volume } = state;
      state = undefined;
      checkConnect(volume.volume, attachment, options);
      const driver = await driverForVolume(volume.volume);
      connectedVolume = volume.volume;
      const connection = await driver.initializeConnection(volume.volume.backendName, connector);
      const result = connect(volume.volume, attachment, { connector, connection, now: now() }, options);
      await writeVersioned({ volume: volume.volume, attachment }, result);
      if (result.releasedHost) {
        // The attachment moved to another host; its old host's connection has no user left. The
        // update itself succeeded, so a failure here is the audit's to report, not the caller's.
        await releaseHost(result.volume, result.releasedHost, { knownUnused: true }).catch((e: unknown) =>
          logger.error('could not remove the connection of a host the attachment left; the audit will list it', {
            attachmentId,
            host: result.releasedHost!.host,
            error: e as Error,
          }),
        );
      }
      return result.attachment;
    }, RETRY);
  } catch (e) {
    if (connectedVolume) await releaseHost(connectedVolume, { host: connector.host, connector }, { knownUnused: false }).catch((cleanupError: unknown) => {
      logger.error('could not remove the backend connection of a failed connect; the audit will list it', {
        volumeId: connectedVolume!.id,
        host: connector.host,
        error: cleanupError as Error,
      });
    });
    throw e;
  }
}

/**
 * Removes a host's backend connection if no attachment uses it, then fences: a connect that read
 * the volume before the fence must retry (and so reconnect). If an attachment recorded a
 * connection on the host meanwhile, the terminate may have removed it: connect it again.
 */
export async function releaseHost(volume: Volume, target: { host: string; connector: Connector }, options: { knownUnused: boolean }): Promise<void> {
  if (!options.knownUnused) {
    const fresh = await getVolumeRecord(volume.id);
    if (!fresh || (fresh.volume.connections[target.host]?.length ?? 0) > 0) return;
  }
  const driver = await driverForVolume(volume);
  await driver.terminateConnection(volume.backendName, target.connector);
  if ((await fenceHost(volume.id, target.host)) === 'in-use') {
    const latest = await getVolumeRecord(volume.id);
    const userId = latest?.volume.connections[target.host]?.[0];
    const user = userId ? await getAttachmentRecord(userId) : undefined;
    await driver.initializeConnection(volume.backendName, user?.connector ?? target.connector);
  }
}
