/**
 * The attachment operations, independent of HTTP: the attachments API calls them, so do the
 * volume-create state machine (attach to `server_id`) and, later, Nova's flows.
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
import { own } from '../core/lookup.js';
import { randomUUID } from 'node:crypto';
import type { AuthContext } from '../core/auth.js';
import { isConditionFailure, isTransactionConflict, withRetries } from '../core/db.js';
import { BadRequest, Conflict, DriverError, FerryError, InvalidVolume, NotFound } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { authorize, registerPolicies } from '../core/policy.js';
import type { Connector, VolumeDriver } from '../drivers/volume/driver.js';
import { driverForHost } from '../drivers/volume/registry.js';
import type { AttachmentSummary, Volume } from '../volumes/model.js';
import type { Attachment } from './model.js';
import {
  fenceHost,
  getAttachmentRecord,
  getVolumeRecord,
  queryProjectAttachments,
  scanAllAttachments,
  writeReserve,
  writeVersioned,
  type LoadedVolume,
} from './repo.js';
import { assertAttachmentLive, checkConnect, complete, connect, needsMultiattachBootablePolicy, remove, reserve, type ConnectOptions } from './transitions.js';

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

/** Lost races (a reserve rule or version no longer holding, or a concurrent transaction) re-read and re-apply. */
const RETRY = { retryable: (e: unknown) => isConditionFailure(e) || isTransactionConflict(e) };

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

/** For tests that replace a backend record between cases. */
export function forgetDrivers(): void {
  drivers.clear();
}

const now = () => new Date().toISOString();

export function assertConnectorHost(connector: Connector | null | undefined): void {
  if (connector && (typeof connector.host !== 'string' || connector.host === '')) {
    // Upstream answers 500 (a KeyError building its lock name); a client mistake is a 400.
    throw new BadRequest("Invalid input received: connector must have a 'host' property naming the host to connect.");
  }
}

const volumeNotFound = (id: string) => new NotFound(`Volume ${id} could not be found.`, { volumeId: id });

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

async function loadVolumeOf(attachment: Attachment): Promise<LoadedVolume> {
  const loaded = await getVolumeRecord(attachment.volumeId);
  if (!loaded) throw volumeNotFound(attachment.volumeId);
  return loaded;
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

/**
 * initializeConnection, then the transaction recording it; on a lost race both again (a fence
 * write by a concurrent disconnect may have removed the connection in between). If the connect
 * finally fails, the connection is removed again unless another attachment uses the host.
 */
async function connectAttachment(
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
async function releaseHost(volume: Volume, target: { host: string; connector: Connector }, options: { knownUnused: boolean }): Promise<void> {
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
  const { attachmentInUseByServer } = await import('../servers/repo.js');
  if (await attachmentInUseByServer(attachment.instanceUuid, attachment.volumeId, attachment.id)) {
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

export type SortDir = 'asc' | 'desc';

export interface ListAttachmentsInput {
  auth: AuthContext;
  /** Honoured for admins only, as upstream. */
  allTenants?: boolean;
  /** Column filters with API names (`volume_id`, `instance_uuid`, `attach_status`, ...). An unknown column matches nothing, as upstream. */
  filters?: Record<string, string>;
  sort?: { key: string; dir: SortDir }[];
  marker?: string;
  limit?: number;
  offset?: number;
}

/** Filterable and sortable columns: API name -> attachment field. */
export const ATTACHMENT_COLUMNS: Record<string, keyof Attachment> = {
  id: 'id',
  volume_id: 'volumeId',
  instance_uuid: 'instanceUuid',
  attach_status: 'attachStatus',
  attach_mode: 'attachMode',
  attached_host: 'attachedHost',
  mountpoint: 'mountpoint',
  volume_host: 'volumeHost',
  attach_time: 'attachTime',
  detach_time: 'detachTime',
  created_at: 'createdAt',
  updated_at: 'updatedAt',
};

/** osapi_max_limit */
export const MAX_LIMIT = 1000;
export const DEFAULT_SORT: { key: string; dir: SortDir }[] = [{ key: 'created_at', dir: 'desc' }];

function compareBy(sort: { key: string; dir: SortDir }[]) {
  const keys = [...sort, ...(sort.some((s) => s.key === 'id') ? [] : [{ key: 'id', dir: sort[sort.length - 1]?.dir ?? 'desc' }])];
  return (a: Attachment, b: Attachment): number => {
    for (const { key, dir } of keys) {
      const field = own(ATTACHMENT_COLUMNS, key)!;
      const x = String(a[field] ?? '');
      const y = String(b[field] ?? '');
      if (x !== y) return (x < y ? -1 : 1) * (dir === 'asc' ? 1 : -1);
    }
    return 0;
  };
}

/** GET /attachments[/detail]: the page and whether more follow. */
export async function listAttachments(input: ListAttachmentsInput): Promise<{ attachments: Attachment[]; more: boolean }> {
  const sort = input.sort?.length ? input.sort : DEFAULT_SORT;
  for (const s of sort) {
    if (!own(ATTACHMENT_COLUMNS, s.key)) throw new BadRequest(`Invalid input received: Invalid sort key ${s.key}`);
  }
  const filters = Object.entries(input.filters ?? {});
  if (filters.some(([k]) => !own(ATTACHMENT_COLUMNS, k))) return { attachments: [], more: false };

  const all = input.allTenants && input.auth.isAdmin ? await scanAllAttachments() : await queryProjectAttachments(input.auth.projectId);
  const matching = all
    .filter((a) => !a.deleted && filters.every(([k, v]) => String(a[own(ATTACHMENT_COLUMNS, k)!] ?? '') === v))
    .sort(compareBy(sort));
  let start = input.offset ?? 0;
  if (input.marker) {
    const i = matching.findIndex((a) => a.id === input.marker);
    if (i < 0) throw new NotFound(`Marker ${input.marker} could not be found.`);
    start += i + 1;
  }
  const limit = Math.min(input.limit ?? MAX_LIMIT, MAX_LIMIT);
  const page = matching.slice(start, start + limit);
  return { attachments: page, more: start + limit < matching.length };
}
