/**
 * A device-to-device copy through block handles (the hypervisor's block copy of a volume swap):
 * only where the source may hold data (`dataExtents`), skipping chunks of zeros, so a sparse 1 GiB
 * volume holding 1 MiB costs 1 MiB of reads.
 */
import { logger } from '../../core/logger.js';
import { chunkPieces, extentBytes, wholeFile } from '../sparse.js';
import type { BlockHandle } from './driver.js';

export const BLOCK_COPY_CHUNK_BYTES = 4 * 1024 * 1024;
/**
 * After this many bytes written unsynced, a flush of the destination is started beside the copy
 * (one at a time), so the writeback runs while the next chunks are copied and the closing flush finds
 * little left; the closing flush stays the durability point.
 */
export const BLOCK_COPY_WRITEBACK_BYTES = 64 * 1024 * 1024;

/**
 * Copies `from`'s bytes into `to` over their common size. Chunks that read all zeros are not
 * written: the destination must read zeros there already (a new volume). The next chunk is read
 * while the last one is written, and a destination that can defer its syncs (`flush`) is synced
 * once at the end rather than after every chunk: a fully written 1 GiB volume is 256 chunks, and a
 * sync each, and a fresh 4 MiB buffer each, made the swap's copy 20x `cp` and more
 * (docs/full-disk-moves.md); the chunks are read into two buffers in turn.
 * Every `writebackBytes` written a flush is started beside the copy (not awaited before the next
 * chunk), so the disk writes while the copy goes on; the closing flush is still the durability point.
 * Returns the bytes read and written.
 */
export async function copyBlockData(
  from: Pick<BlockHandle, 'read' | 'sizeBytes' | 'dataExtents'>,
  to: Pick<BlockHandle, 'write' | 'sizeBytes' | 'flush' | 'copyFromInKernel'>,
  chunkBytes = BLOCK_COPY_CHUNK_BYTES,
  writebackBytes = BLOCK_COPY_WRITEBACK_BYTES,
): Promise<{ readBytes: number; writtenBytes: number }> {
  const size = Math.min(from.sizeBytes, to.sizeBytes);
  const extents = (from.dataExtents ? await from.dataExtents() : wholeFile(size))
    .filter((e) => e.offset < size)
    .map((e) => ({ offset: e.offset, length: Math.min(e.length, size - e.offset) }));
  // A source that is all data: the kernel copies it when the destination can have it do so.
  const allData = extents.length === 1 && extents[0]!.offset === 0 && extents[0]!.length === size;
  if (allData && to.copyFromInKernel && (await to.copyFromInKernel(from, size))) return { readBytes: size, writtenBytes: size };
  const zeros = Buffer.alloc(Math.min(chunkBytes, Math.max(size, 1)));
  const deferSync = to.flush !== undefined;
  let writtenBytes = 0;
  const pieces = chunkPieces(extents, chunkBytes);
  // Two buffers in turn: one being written while the next chunk is read into the other.
  const buffers = [Buffer.alloc(zeros.length), Buffer.alloc(zeros.length)];
  let turn = 0;
  const readNext = (): Promise<{ offset: number; data: Buffer }> | undefined => {
    const piece = pieces.next();
    if (piece.done) return undefined;
    const into = buffers[turn++ % 2]!;
    return from.read(piece.value.offset, piece.value.length, into).then((data) => ({ offset: piece.value.offset, data }));
  };
  // A flush started beside the copy (writeback while writing); its error is the copy's, thrown at
  // the next chunk or at the end: a failed writeback is reported to one sync only.
  let flushing: Promise<void> | undefined;
  let flushFailed: { error: unknown } | undefined;
  let unflushed = 0;
  let reading = readNext();
  try {
    while (reading) {
      const { offset, data } = await reading;
      reading = readNext();
      if (flushFailed) throw flushFailed.error;
      if (data.equals(zeros.subarray(0, data.length))) continue;
      await to.write(offset, data, { deferSync });
      writtenBytes += data.length;
      unflushed += data.length;
      if (deferSync && !flushing && unflushed >= writebackBytes) {
        unflushed = 0;
        flushing = to.flush!().then(
          () => void (flushing = undefined),
          (error: unknown) => void (flushFailed ??= { error }),
        );
      }
    }
    await flushing;
    if (flushFailed) throw flushFailed.error;
  } catch (e) {
    // The read and flush already started are awaited, so nothing of this copy runs on after it
    // throws; its error is the copy's, and a read that failed too is logged beside it.
    await reading?.catch((readError: unknown) => logger.warn('block copy: the next chunk\'s read failed too, after the copy failed', { error: readError as Error }));
    await flushing;
    throw e;
  }
  if (writtenBytes > 0) await to.flush?.();
  return { readBytes: extentBytes(extents), writtenBytes };
}
