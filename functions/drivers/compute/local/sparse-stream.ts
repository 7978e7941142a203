/**
 * A sparse file as a raw byte stream (a snapshot's image): the data extents are read from the file,
 * the holes between them are produced as zeros without reading, so streaming a 1 GiB disk that holds
 * 1 MiB reads 1 MiB.
 */
import type { FileHandle } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type { DataExtent } from '../../sparse.js';
import { readChunk } from './files.js';

/** Largest chunk the stream emits. */
const STREAM_CHUNK_BYTES = 8 * 1024 * 1024;

/**
 * Streams `size` bytes of `fh`: `extents` (sorted, disjoint) read from the file, zeros elsewhere.
 * The handle is closed when the stream ends or is destroyed (also before any read). Hole chunks
 * are views of one zero buffer shared within the stream: like any Readable's chunks, a consumer
 * copies what it keeps and never writes into them.
 */
export function sparseFileStream(fh: FileHandle, size: number, extents: readonly DataExtent[]): Readable {
  const zeros = Buffer.alloc(Math.min(STREAM_CHUNK_BYTES, Math.max(size, 1)));
  let pos = 0;
  let index = 0;
  let closing: Promise<void> | undefined;
  const close = () => (closing ??= fh.close());

  async function next(): Promise<Buffer | null> {
    while (index < extents.length && extents[index]!.offset + extents[index]!.length <= pos) index++;
    if (pos >= size) return null;
    const extent = extents[index];
    const dataStart = extent ? Math.min(extent.offset, size) : size;
    if (pos < dataStart) {
      const n = Math.min(zeros.length, dataStart - pos);
      pos += n;
      return zeros.subarray(0, n);
    }
    const n = Math.min(STREAM_CHUNK_BYTES, Math.min(extent!.offset + extent!.length, size) - pos);
    // A fresh buffer per data chunk: the consumer may keep it.
    const chunk = await readChunk(fh, Buffer.alloc(n), n, pos);
    pos += n;
    return chunk;
  }

  return new Readable({
    read() {
      next()
        .then(async (chunk) => {
          if (chunk === null) await close();
          this.push(chunk);
        })
        .catch((e: unknown) => this.destroy(e as Error));
    },
    destroy(error, callback) {
      close().then(
        () => callback(error),
        (closeError: unknown) => callback(error ?? (closeError as Error)),
      );
    },
  });
}
