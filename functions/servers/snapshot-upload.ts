/**
 * A server's root disk stored as an image (shelve's `<name>-shelved`, cross-cell resize's
 * `<name>-resize-temp`): the driver is asked for qcow2, Nova's `[libvirt] snapshot_image_format`,
 * so the image holds the disk's data clusters, not its holes (a 1 GiB disk holding 10 MiB is a
 * ~10 MiB image, which a spawn reads back into a sparse disk), and is streamed to the store with its
 * length, never held in memory. A driver that writes only raw gets the raw path: the disk up to its
 * last non-zero byte (the spawn sparse-extends it to the flavor again).
 */
import type { Readable } from 'node:stream';
import { OverLimit } from '../core/errors.js';
import type { ComputeDriver, SnapshotFormat } from '../drivers/compute/driver.js';
import { snapshotDataStream } from '../drivers/compute/snapshot-data.js';
import { uploadImage } from './images.js';
import type { Image } from './model.js';

/** The format server snapshots are asked in. */
export const SNAPSHOT_IMAGE_FORMAT: SnapshotFormat = 'qcow2';

/** A raw snapshot larger than this (past its last non-zero byte) is refused rather than held in memory. */
const MAX_RAW_SNAPSHOT_BYTES = 1 << 30;

/**
 * Snapshots the root disk of `uuid` through `driver` and uploads it as image `imageId` (its record
 * made by the caller), with the disk_format the driver wrote. A re-run uploads the same bytes again
 * (uploadImage: a no-op once active with the same bytes). `recordSaving`: the caller made the
 * record in `saving` with SNAPSHOT_IMAGE_FORMAT just now (uploadImage's option).
 */
export async function snapshotToImage(driver: ComputeDriver, uuid: string, imageId: string, options: { recordSaving?: boolean } = {}): Promise<Image> {
  const snap = await driver.snapshot(uuid, imageId, { diskFormat: SNAPSHOT_IMAGE_FORMAT });
  // A driver that wrote raw instead moves the record's disk_format with the usual transition.
  const recordSaving = options.recordSaving === true && snap.diskFormat === SNAPSHOT_IMAGE_FORMAT;
  try {
    if (snap.diskFormat === 'qcow2') return await uploadImage(imageId, snap.stream, snap.imageBytes, { diskFormat: 'qcow2', recordSaving });
    return await uploadImage(imageId, await withoutTrailingZeros(snapshotDataStream(snap)), undefined, { diskFormat: 'raw', recordSaving });
  } finally {
    // Consumed already, or left by a failure: either way its file handle goes now.
    snap.stream.destroy();
  }
}

/**
 * A raw root disk up to its last non-zero byte. A root disk is the image sparse-extended to the
 * flavor's root_gb; the zeros past the data come back when the spawn extends the disk again.
 */
export async function withoutTrailingZeros(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let held = 0;
  let pendingZeros = 0;
  let zeros = Buffer.alloc(0);
  for await (const raw of stream) {
    const chunk = Buffer.from(raw as Uint8Array);
    if (zeros.length < chunk.length) zeros = Buffer.alloc(chunk.length);
    // An all-zero chunk (most of a sparse disk) is recognised by one native compare, not byte by byte.
    let last = chunk.equals(zeros.subarray(0, chunk.length)) ? -1 : chunk.length - 1;
    while (last >= 0 && chunk[last] === 0) last--;
    if (last < 0) {
      pendingZeros += chunk.length;
      continue;
    }
    held += pendingZeros + last + 1;
    if (held > MAX_RAW_SNAPSHOT_BYTES) {
      stream.destroy();
      throw new OverLimit(`the root disk holds more than ${MAX_RAW_SNAPSHOT_BYTES} bytes of data: too large to store as a raw image here`);
    }
    if (pendingZeros) chunks.push(Buffer.alloc(pendingZeros));
    chunks.push(chunk.subarray(0, last + 1));
    pendingZeros = chunk.length - last - 1;
  }
  return Buffer.concat(chunks);
}
