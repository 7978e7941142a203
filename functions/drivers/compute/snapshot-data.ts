/**
 * A snapshot's bytes up to the end of its data: what a caller storing the image without its
 * trailing zeros (a shelved image) needs, without streaming the rest of a sparse 1 GiB disk.
 */
import { Readable } from 'node:stream';
import type { SnapshotImage } from './driver.js';

/**
 * The snapshot stream cut at the end of its last data extent (all that follows reads as zeros);
 * the snapshot's own stream is destroyed once the cut is reached. Without extents: the stream as it is.
 */
export function snapshotDataStream(snap: SnapshotImage): Readable {
  if (!snap.extents) return snap.stream;
  const end = snap.extents.reduce((m, e) => Math.max(m, e.offset + e.length), 0);
  async function* upToEnd(): AsyncGenerator<Buffer> {
    let pos = 0;
    try {
      if (end === 0) return;
      for await (const c of snap.stream) {
        const chunk = c as Buffer;
        const keep = Math.min(chunk.length, end - pos);
        pos += keep;
        yield keep === chunk.length ? chunk : chunk.subarray(0, keep);
        if (pos >= end) return;
      }
    } finally {
      snap.stream.destroy();
    }
  }
  return Readable.from(upToEnd());
}
