/**
 * A new volume's source (C/volume/flows/api/create_volume.py: snapshot_id, source_volid): the
 * checks upstream makes, in its order and wording, and the hold a volume being created keeps on
 * its source so the source is not deleted under the copy.
 *
 * The hold is a counter, `dependentCreates`, on the source's item (a volume or a snapshot, both in
 * the volume table), added in the same transaction as the new volume's record under a condition on
 * the source's status, and taken back in the same transaction as the new volume's `source.held`
 * going false. Both writes bump the source's `version`, so a delete computed from a read before
 * the hold is refused by its own version condition and re-decides on the counter (transitions.ts,
 * snapshots/model.ts): an invariant in conditions, never a read.
 *
 * Snapshots are a capability above volumes: what volumes needs of them comes through the
 * SnapshotSources port, which the entry point registers (api/volume.ts), as attachments/ports.ts does.
 */
import { isConditionFailure, withRetries } from '../core/db.js';
import type { AuthContext } from '../core/auth.js';
import { BadRequest, ConfigurationError, DriverError, FerryError, InvalidVolume } from '../core/errors.js';
import { bucket, s3, s3Sdk } from '../core/s3.js';
import { tableName } from '../core/tables.js';
import { backendOf } from './backends.js';
import { volumeKey, type Volume, type VolumeSourceRef } from './model.js';
import { cancellationCodes, getVolume, getVolumeOrThrow, getVolumeScoped, releaseSourceItem, writeVolumeWith, type TransactItem } from './repo.js';

/** What create needs of a snapshot. */
export interface SnapshotSourceInfo {
  id: string;
  volumeId: string;
  projectId: string;
  status: string;
  /** GiB: the snapshot's volume_size. */
  size: number;
  backendHost: string;
  volumeBackendName: string;
  backendName: string;
  /** The snapshot's item in the volume table (the hold is written there). */
  key: { pk: string; sk: string };
}

export interface SnapshotSources {
  /** The snapshot as the caller may see it (another project's does not exist for a non-admin): NotFound otherwise. */
  getSnapshotScoped(auth: AuthContext, id: string): Promise<SnapshotSourceInfo>;
}

/** What create needs of an image (the servers' image store, functions/servers/images.ts). */
export interface ImageSourceInfo {
  id: string;
  name: string;
  status: string;
  sizeBytes: number;
  minDisk: number;
  diskFormat: string;
  containerFormat: string;
  /** The bytes' key in the bucket. */
  objectKey: string;
}

export interface ImageSources {
  /** The image as the caller may see it (public, or its project's; all for an admin): NotFound otherwise. */
  getImageScoped(auth: AuthContext, id: string): Promise<ImageSourceInfo>;
}

let images: ImageSources | undefined;

export function registerImageSources(impl: ImageSources): void {
  images = impl;
}

let registered: SnapshotSources | undefined;

export function registerSnapshotSources(impl: SnapshotSources): void {
  registered = impl;
}

function snapshotSources(): SnapshotSources {
  if (!registered) throw new ConfigurationError('No SnapshotSources port is registered: the entry point must call registerSnapshotSources (functions/volumes/sources.ts).');
  return registered;
}

/** Upstream's _extract_resource message. */
const originating = (res: string, vals: readonly string[]) => `Originating ${res} status must be one of '${vals.join(', ')}' values`;

export const SNAPSHOT_PROCEED_STATUS = ['available'] as const;
export const SRC_VOL_PROCEED_STATUS = ['available', 'in-use'] as const;

/** A resolved source: what the record takes from it (size, type, zone) and the hold to write. */
export interface ResolvedSource {
  ref: VolumeSourceRef;
  /** The size a volume from it defaults to (none for an image: the request must give one). */
  size: number;
  /** The type and zone a volume from it defaults to (none for an image). */
  volumeTypeId: string | null;
  availabilityZone: string | null;
  statuses: readonly string[];
  image?: ImageSourceInfo;
  /**
   * A volume or snapshot source's originating volume was bootable: create_volume.py's
   * _create_from_source_volume and _create_from_snapshot make the new volume bootable and copy its
   * volume_glance_metadata (_handle_bootable_volume_glance_meta).
   */
  bootableFrom?: { imageMetadata: Record<string, string> | null };
}

const bootableFrom = (v: Volume): ResolvedSource['bootableFrom'] => (v.bootable ? { imageMetadata: v.imageMetadata ?? null } : undefined);

const GIB = 1024 ** 3;

/** C/volume/volume_utils.py check_image_metadata, in its order and wording. */
export function checkImageFits(image: ImageSourceInfo, size: number): void {
  if (image.status !== 'active') throw new BadRequest(`Invalid input received: Image ${image.id} is not active.`);
  const imageGb = Math.ceil(image.sizeBytes / GIB);
  if (imageGb > size) throw new BadRequest(`Invalid input received: Size of specified image ${imageGb}GB is larger than volume size ${size}GB.`);
  if (size < image.minDisk) throw new BadRequest(`Invalid input received: Volume size ${size}GB cannot be smaller than the image minDisk size ${image.minDisk}GB.`);
}

/** Cinder's volume_image_metadata of a volume made from `image` (the glance metadata it copies). */
export function imageMetadataOf(image: ImageSourceInfo): Record<string, string> {
  return {
    image_id: image.id,
    image_name: image.name,
    size: String(image.sizeBytes),
    min_disk: String(image.minDisk),
    disk_format: image.diskFormat,
    container_format: image.containerFormat,
  };
}

/**
 * Looks the source up (404 when it is not there for the caller) and checks its status (400), as
 * upstream's API then flow do; the status is checked again by the hold's condition when the record is written.
 */
export async function resolveSource(auth: AuthContext, r: { snapshotId: string | null; sourceVolid: string | null; imageId?: string | null }): Promise<ResolvedSource | undefined> {
  if (r.snapshotId) {
    const s = await snapshotSources().getSnapshotScoped(auth, r.snapshotId);
    const parent = await getVolumeOrThrow(s.volumeId);
    if (!(SNAPSHOT_PROCEED_STATUS as readonly string[]).includes(s.status)) throw new BadRequest(`Invalid snapshot: ${originating('snapshot', SNAPSHOT_PROCEED_STATUS)}`);
    return {
      ref: { kind: 'snapshot', id: s.id, key: s.key, backendHost: backendOf(s.backendHost), volumeBackendName: s.volumeBackendName, snapshotName: s.backendName, held: true },
      size: s.size,
      volumeTypeId: parent.volumeTypeId,
      availabilityZone: parent.availabilityZone,
      statuses: SNAPSHOT_PROCEED_STATUS,
      bootableFrom: bootableFrom(parent),
    };
  }
  if (r.sourceVolid) {
    const v = await getVolumeScoped(auth, r.sourceVolid);
    if (!(SRC_VOL_PROCEED_STATUS as readonly string[]).includes(v.status)) throw new InvalidVolume(originating('source volume', SRC_VOL_PROCEED_STATUS));
    if (!v.host) throw new InvalidVolume(`Volume ${v.id} has no backend object to clone.`);
    return {
      ref: { kind: 'volume', id: v.id, key: volumeKey(v.id), backendHost: backendOf(v.host), volumeBackendName: v.backendName, held: true },
      size: v.size,
      volumeTypeId: v.volumeTypeId,
      availabilityZone: v.availabilityZone,
      statuses: SRC_VOL_PROCEED_STATUS,
      bootableFrom: bootableFrom(v),
    };
  }
  if (r.imageId) {
    if (!images) throw new ConfigurationError('No ImageSources port is registered: the entry point must call registerImageSources (functions/volumes/sources.ts).');
    const image = await images.getImageScoped(auth, r.imageId);
    return {
      ref: { kind: 'image', id: image.id, key: null, backendHost: '', volumeBackendName: '', imageObjectKey: image.objectKey, held: false },
      size: 0,
      volumeTypeId: null,
      availabilityZone: null,
      statuses: [],
      image,
    };
  }
  return undefined;
}

/** Upstream's _extract_size checks, for a size the request gave. */
export function checkSizeAgainst(size: number, source: ResolvedSource): void {
  if (source.image) return checkImageFits(source.image, size);
  if (size >= source.size) return;
  if (source.ref.kind === 'snapshot') {
    throw new BadRequest(`Invalid input received: Volume size '${size}'GB cannot be smaller than the snapshot size ${source.size}GB. They must be >= original snapshot size.`);
  }
  throw new BadRequest(`Invalid input received: Volume size '${size}'GB cannot be smaller than original volume size  ${source.size}GB. They must be >= original volume size.`);
}

/** The hold, for the new volume's insert transaction: the source must still be in a status to proceed. */
export function holdSourceItem(source: ResolvedSource): TransactItem {
  const statuses = Object.fromEntries(source.statuses.map((s, i) => [`:s${i}`, s]));
  return {
    Update: {
      TableName: tableName('volume'),
      Key: source.ref.key!,
      UpdateExpression: 'ADD dependentCreates :one, #version :one',
      ConditionExpression: `attribute_exists(pk) AND #status IN (${Object.keys(statuses).join(', ')})`,
      ExpressionAttributeNames: { '#status': 'status', '#version': 'version' },
      ExpressionAttributeValues: { ':one': 1, ...statuses },
    },
  };
}

/** The refusal when the hold's condition failed: the source changed status between the check and the write. */
export function holdRefused(source: ResolvedSource): FerryError {
  if (source.ref.kind === 'snapshot') return new BadRequest(`Invalid snapshot: ${originating('snapshot', source.statuses)}`);
  return new InvalidVolume(originating('source volume', source.statuses));
}

/**
 * Releases a volume's hold on its source, once (`source.held` goes false in the same transaction);
 * idempotent, so create's last step and its rollback may both call it, and run again.
 */
export async function releaseSource(volumeId: string): Promise<void> {
  await withRetries(
    async () => {
      const v = await getVolume(volumeId);
      if (!v?.source?.held) return;
      const after: Volume = { ...v, source: { ...v.source, held: false }, updatedAt: new Date().toISOString() };
      await writeVolumeWith(v, after, [releaseSourceItem(v.source)]);
    },
    { retryable: (e) => isConditionFailure(e) || cancellationCodes(e).some((c) => c === 'ConditionalCheckFailed' || c === 'TransactionConflict'), attempts: 20 },
  );
}

/** The dependent-delete refusal both a volume's and a snapshot's delete give while volumes are being created from them. */
export function hasDependentCreates(item: { dependentCreates?: number }): boolean {
  return (item.dependentCreates ?? 0) > 0;
}

/**
 * The bytes of an image, by the object key recorded on the volume at create (the image store is
 * the servers' and sits above volumes). A missing object fails the create (the image was deleted meanwhile).
 */
export async function openImageObject(key: string): Promise<AsyncIterable<Uint8Array>> {
  const out = await (await s3()).send(new (await s3Sdk()).GetObjectCommand({ Bucket: bucket(), Key: key }));
  if (!out.Body) throw new DriverError(`image object ${key} has no body`);
  return out.Body as AsyncIterable<Uint8Array>;
}
