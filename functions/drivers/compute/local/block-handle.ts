/** Bytes through a file: a guest's root disk, or the volume file a connection points at. */
import type { FileHandle } from 'node:fs/promises';
import { DriverError } from '../../../core/errors.js';
import { dataExtents, type DataExtent } from '../../sparse.js';
import type { BlockHandle } from '../driver.js';
import { writeFully } from './files.js';

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

  async dataExtents(): Promise<DataExtent[]> {
    // The device is sizeBytes long even if the file is shorter or longer (what reads see).
    return dataExtents(this.path, this.sizeBytes);
  }

  async close(): Promise<void> {
    await this.fh.close();
  }
}
