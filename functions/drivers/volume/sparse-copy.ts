/**
 * Sparse file copies by chunks: a chunk of zeros stays a hole. The local volume driver snapshots
 * with it, and the replication engine compares and copies replicas by the same chunks.
 */
import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { copyFile, open, rename } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { mkdir } from 'node:fs/promises';
import { isErrno, readChunk, tempName, unlinkIfPresent, writeFully } from '../files.js';
import { chunkPieces, dataExtentsOf } from '../sparse.js';

/** The unit of sparse copies and of replication's comparisons. */
export const REPLICATION_CHUNK_BYTES = 1024 * 1024;
/** The digest of a chunk of zeros (never hashed). */
export const ZERO_DIGEST = 'zero';

export function chunkDigest(chunk: Buffer, zeros: Buffer): string {
  // Most chunks of a volume are never written: a memcmp against zeros is much cheaper than a hash.
  if (chunk.equals(zeros.subarray(0, chunk.length))) return ZERO_DIGEST;
  return createHash('sha1').update(chunk).digest('base64');
}

/**
 * Copies a file keeping it sparse (chunks of zeros stay holes), published atomically at `dst`
 * (temp + fsync + rename). A reflink is tried first: on XFS or btrfs the copy is instant and shares blocks.
 */
export async function sparseCopyFile(src: string, dst: string, chunkBytes = REPLICATION_CHUNK_BYTES): Promise<{ readBytes: number }> {
  await mkdir(dirname(dst), { recursive: true });
  const temp = join(dirname(dst), tempName(basename(dst)));
  let readBytes = 0;
  try {
    try {
      await copyFile(src, temp, constants.COPYFILE_FICLONE_FORCE);
    } catch (e) {
      if (isErrno(e, 'ENOENT')) throw e;
      await unlinkIfPresent(temp);
      readBytes = await copyChunksSparse(src, temp, chunkBytes);
    }
    const fh = await open(temp, 'r+');
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(temp, dst);
  } finally {
    await unlinkIfPresent(temp);
  }
  return { readBytes };
}

/** Returns the bytes read: the source's data extents only. */
async function copyChunksSparse(src: string, dst: string, chunkBytes: number): Promise<number> {
  const input = await open(src, 'r');
  try {
    const output = await open(dst, 'wx');
    try {
      // Only the source's data extents are read (a new 2 GiB volume holds none): the rest is
      // holes, which the truncate leaves as holes. Zeros inside an extent stay holes too.
      const { size, extents } = await dataExtentsOf(input, src);
      await output.truncate(size);
      const buf = Buffer.alloc(chunkBytes);
      const zeros = Buffer.alloc(chunkBytes);
      let readBytes = 0;
      for (const piece of chunkPieces(extents, chunkBytes)) {
        const chunk = await readChunk(input, buf, piece.length, piece.offset);
        readBytes += piece.length;
        if (chunkDigest(chunk, zeros) !== ZERO_DIGEST) await writeFully(output, chunk, piece.offset);
      }
      return readBytes;
    } finally {
      await output.close();
    }
  } finally {
    await input.close();
  }
}

/**
 * Writes a stream into a new file from offset 0, chunks of zeros left as holes; stops once past
 * `maxBytes` and returns the bytes seen (the caller refuses more than it can hold).
 */
export async function writeStreamToFile(path: string, body: AsyncIterable<Uint8Array>, maxBytes: number): Promise<number> {
  const fh = await open(path, 'wx');
  try {
    let off = 0;
    for await (const chunk of body) {
      if (off + chunk.length > maxBytes) return off + chunk.length;
      const buf = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length);
      if (chunkDigest(buf, Buffer.alloc(buf.length)) !== ZERO_DIGEST) await writeFully(fh, buf, off);
      off += chunk.length;
    }
    await fh.sync();
    return off;
  } finally {
    await fh.close();
  }
}
