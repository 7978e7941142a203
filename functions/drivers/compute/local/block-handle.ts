/** Bytes through a file: a guest's root disk, or the volume file a connection points at. */
import type { FileHandle } from 'node:fs/promises';
import { logger } from '../../../core/logger.js';
import { DriverError } from '../../../core/errors.js';
import { writebackWhileWriting } from '../../files.js';
import { copyRangeInKernel } from '../../range-copy.js';
import { dataExtents, dataExtentsOf, type DataExtent } from '../../sparse.js';
import type { BlockHandle } from '../driver.js';
import { KERNEL_COPY_MIN_BYTES, writeFully } from './files.js';

export class FileBlockHandle implements BlockHandle {
  constructor(
    private readonly fh: FileHandle,
    readonly sizeBytes: number,
    private readonly what: string,
    /** The file's path: where its data extents are asked (by a seek in it). */
    private readonly path: string,
  ) {}

  private check(position: number, length: number): void {
    if (!Number.isInteger(position) || !Number.isInteger(length) || position < 0 || length < 0 || position + length > this.sizeBytes) {
      throw new DriverError(`${this.what}: ${length} bytes at ${position} is outside the device (${this.sizeBytes} bytes)`, { context: { position, length } });
    }
  }

  async read(position: number, length: number, into?: Buffer): Promise<Buffer> {
    this.check(position, length);
    const buf = into && into.length >= length ? into.subarray(0, length) : Buffer.alloc(length);
    let got = 0;
    while (got < length) {
      const { bytesRead } = await this.fh.read(buf, got, length - got, position + got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    // Past the file's end the device reads zeros (a reused buffer holds older bytes there).
    if (got < length) buf.fill(0, got);
    return buf;
  }

  async write(position: number, data: Uint8Array, options: { deferSync?: boolean } = {}): Promise<void> {
    this.check(position, data.length);
    await writeFully(this.fh, data, position);
    if (!options.deferSync) await this.fh.datasync();
  }

  async flush(): Promise<void> {
    await this.fh.datasync();
  }

  /**
   * The kernel copy of a block copy: only between two files of this host, `length` of at least
   * KERNEL_COPY_MIN_BYTES (smaller copies keep the chunk loop), and a source with no hole (every byte
   * of it is written here, a hole as zeros: a sparse source keeps the chunk loop, whose holes stay
   * holes). Its writeback runs beside it (writebackWhileWriting) and it is fsynced before it returns.
   */
  async copyFromInKernel(from: Pick<BlockHandle, 'sizeBytes'>, length: number): Promise<boolean> {
    if (!(from instanceof FileBlockHandle) || length < KERNEL_COPY_MIN_BYTES) return false;
    from.check(0, length);
    this.check(0, length);
    const source = await dataExtentsOf(from.fh, from.path);
    if (!source.dense || source.size < length) return false;
    const writeback = writebackWhileWriting(this.fh);
    let copied: boolean;
    try {
      copied = await copyRangeInKernel(from.fh, this.fh, length);
    } catch (e) {
      // The copy's own failure is the one reported; the writeback loop is ended first (its error, if any, is logged).
      await writeback.stop().catch((syncError: unknown) => logger.warn('block copy: a writeback sync failed too, after the kernel copy failed', { what: this.what, error: syncError as Error }));
      throw e;
    }
    await writeback.stop();
    if (copied) await this.fh.datasync();
    return copied;
  }

  async dataExtents(): Promise<DataExtent[]> {
    // The device is sizeBytes long even if the file is shorter or longer (what reads see).
    return dataExtents(this.path, this.sizeBytes);
  }

  async close(): Promise<void> {
    await this.fh.close();
  }
}
