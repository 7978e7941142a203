/**
 * A device-to-device copy through block handles (the hypervisor's block copy of a volume swap):
 * only where the source may hold data (`dataExtents`), skipping chunks of zeros, so a sparse 1 GiB
 * volume holding 1 MiB costs 1 MiB of reads.
 */
import { chunkPieces, extentBytes, wholeFile } from '../sparse.js';
import type { BlockHandle } from './driver.js';

export const BLOCK_COPY_CHUNK_BYTES = 4 * 1024 * 1024;

/**
 * Copies `from`'s bytes into `to` over their common size. Chunks that read all zeros are not
 * written: the destination must read zeros there already (a new volume). Returns the bytes read and written.
 */
export async function copyBlockData(from: Pick<BlockHandle, 'read' | 'sizeBytes' | 'dataExtents'>, to: Pick<BlockHandle, 'write' | 'sizeBytes'>, chunkBytes = BLOCK_COPY_CHUNK_BYTES): Promise<{ readBytes: number; writtenBytes: number }> {
  const size = Math.min(from.sizeBytes, to.sizeBytes);
  const extents = (from.dataExtents ? await from.dataExtents() : wholeFile(size))
    .filter((e) => e.offset < size)
    .map((e) => ({ offset: e.offset, length: Math.min(e.length, size - e.offset) }));
  const zeros = Buffer.alloc(Math.min(chunkBytes, Math.max(size, 1)));
  let writtenBytes = 0;
  for (const piece of chunkPieces(extents, chunkBytes)) {
    const data = await from.read(piece.offset, piece.length);
    if (data.equals(zeros.subarray(0, data.length))) continue;
    await to.write(piece.offset, data);
    writtenBytes += data.length;
  }
  return { readBytes: extentBytes(extents), writtenBytes };
}
