/**
 * The volume records the attachments code reads, and the ones this process last read or wrote:
 * complete and delete start from a remembered record instead of reading the volume again (the
 * version condition of their transaction guards it; repo.ts writeVersioned).
 */
import { GetCommand, TransactGetCommand } from '@aws-sdk/lib-dynamodb';
import { db } from '../core/db.js';
import { tableName } from '../core/tables.js';
import { volumeKey, type Volume } from '../volumes/model.js';

const table = () => tableName('volume');

/** A volume as read, and whether its item already has the aggregate maps an additive update needs. */
export interface LoadedVolume {
  volume: Volume;
  hasMaps: boolean;
}

export function loadedVolume(item: Record<string, unknown>): LoadedVolume {
  const { pk: _pk, sk: _sk, gsi1pk: _g1, gsi1sk: _g2, ...rest } = item;
  const hasMaps = ['attachments', 'instances', 'connections'].every((k) => typeof rest[k] === 'object' && rest[k] !== null);
  const volume = {
    ...rest,
    attachments: rest.attachments ?? {},
    instances: rest.instances ?? {},
    connections: rest.connections ?? {},
    adminMetadata: rest.adminMetadata ?? {},
    version: rest.version ?? 0,
  } as Volume;
  return { volume, hasMaps };
}

export async function getVolumeRecord(id: string): Promise<LoadedVolume | undefined> {
  const out = await db().send(new GetCommand({ TableName: table(), Key: volumeKey(id), ConsistentRead: true }));
  if (!out.Item) {
    forgetVolume(id);
    return undefined;
  }
  return rememberVolume(loadedVolume(out.Item));
}

/** An item of another capability's table to read with a volume (attachments/ports.ts). */
export interface ItemRef {
  TableName: string;
  Key: Record<string, unknown>;
}

/**
 * The volume and `others` as of one moment, in one request (TransactGetItems): a delete by id
 * learns whether a server uses the attachment with the volume it starts from. Each of `others`
 * as read, undefined when absent.
 */
export async function getVolumeRecordWith(id: string, others: readonly ItemRef[]): Promise<{ loaded: LoadedVolume | undefined; others: (Record<string, unknown> | undefined)[] }> {
  const out = await db().send(new TransactGetCommand({ TransactItems: [{ Get: { TableName: table(), Key: volumeKey(id) } }, ...others.map((Get) => ({ Get }))] }));
  const [volume, ...rest] = out.Responses ?? [];
  if (!volume?.Item) forgetVolume(id);
  return { loaded: volume?.Item ? rememberVolume(loadedVolume(volume.Item)) : undefined, others: others.map((_, i) => rest[i]?.Item) };
}

/**
 * The volume records this process last read or wrote, each exactly as stored at its version, for
 * a few seconds: create, complete and delete start from one instead of reading the volume again
 * (a create's refusal is answered from a read, as before: service.ts reserveAttachment). Sound
 * because what they write is conditional on that version (every writer of a volume bumps it): a
 * record another writer has moved since fails the transaction, whose failure returns the current
 * record (ALL_OLD), and the retry starts from that; a stale entry costs no more requests than the
 * read it replaces. A decision taken before an effect outside DynamoDB needs the record proven
 * current before the effect, not only at the write after it: a connect from a remembered record
 * records its intent in one transaction with a check of the volume's version
 * (listed-connect.ts), which proves it as a read would; else it reads afresh.
 */
const KNOWN_VOLUME_MS = 10_000;
const KNOWN_VOLUMES_MAX = 1_000;
const knownVolumes = new Map<string, { loaded: LoadedVolume; until: number }>();

/** Records `loaded` as the stored state of its volume (returns it). */
export function rememberVolume(loaded: LoadedVolume): LoadedVolume {
  knownVolumes.delete(loaded.volume.id);
  if (knownVolumes.size >= KNOWN_VOLUMES_MAX) knownVolumes.delete(knownVolumes.keys().next().value!);
  knownVolumes.set(loaded.volume.id, { loaded, until: Date.now() + KNOWN_VOLUME_MS });
  return loaded;
}

export function forgetVolume(id: string): void {
  knownVolumes.delete(id);
}

/** The volume as this process last saw it stored, if recently (a version condition must guard whatever is computed from it). */
export function knownVolume(id: string): LoadedVolume | undefined {
  const known = knownVolumes.get(id);
  if (known && known.until > Date.now()) return known.loaded;
  knownVolumes.delete(id);
  return undefined;
}

export { failedItem } from '../core/db.js';

/**
 * Which volume (and project) each attachment this process read or wrote belongs to: fixed for an
 * attachment's life, so a DELETE /attachments/{id} here starts from the volume's record
 * (listed-removal.ts) without reading the attachment to learn it. The delete's transaction is
 * conditioned on both (repo-from-volume.ts), so an entry that no longer holds falls
 * back to the delete by id.
 */
export interface AttachmentIdentity {
  volumeId: string;
  projectId: string;
}
const KNOWN_ATTACHMENTS_MAX = 10_000;
const knownAttachments = new Map<string, AttachmentIdentity>();

export function rememberAttachment(attachment: { id: string; volumeId: string; projectId: string; deleted?: boolean }): void {
  knownAttachments.delete(attachment.id);
  if (attachment.deleted) return;
  if (knownAttachments.size >= KNOWN_ATTACHMENTS_MAX) knownAttachments.delete(knownAttachments.keys().next().value!);
  knownAttachments.set(attachment.id, { volumeId: attachment.volumeId, projectId: attachment.projectId });
}

export function forgetAttachment(id: string): void {
  knownAttachments.delete(id);
}

export function knownAttachment(id: string): AttachmentIdentity | undefined {
  return knownAttachments.get(id);
}

/** Forgets every volume and attachment this process remembers: a process that served none of their calls (a fresh Lambda container), for tests that count requests. */
export function forgetAllRecords(): void {
  knownVolumes.clear();
  knownAttachments.clear();
}
