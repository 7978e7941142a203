/**
 * A sparse raw disk streamed as a qcow2 image, written here rather than by `qemu-img convert`: a
 * shelve or cross-cell snapshot of a 1 GiB disk holding 10 MiB then costs no process start, no
 * temporary qcow2 file written and read back, and no fsync of it (qemu-img flushes the file it
 * writes four times), only the ~10 MiB read once on their way to the image store. qemu-img still
 * reads every qcow2 image into a disk (qcow2.ts: any image, also one a user uploaded, is checked by
 * the reference implementation first); this writer only ever writes the one layout below, which
 * `qemu-img check` finds clean (test/unit/qcow2-writer.test.ts).
 *
 * The layout (qcow2 version 3, docs/interop/qcow2.txt of QEMU), everything before the data so the
 * image can be streamed in one pass with its length known up front (PutObject needs it):
 *   cluster 0            the header (104 bytes; no extensions, no backing file, no encryption)
 *   refcount table       one entry per refcount block
 *   refcount blocks      16-bit refcounts (refcount_order 4), 1 for every cluster of the image
 *   L1 table             one entry per 512 MiB of the disk; 0 where no cluster of it holds data
 *   L2 tables            one per L1 entry that has data, in order
 *   data clusters        the disk's clusters that the data extents touch, in the disk's order
 * Every table entry carries QCOW_OFLAG_COPIED (bit 63: its refcount is exactly 1), as qemu's own
 * images do. A cluster that no extent touches is left unallocated: it reads as zeros.
 */
import type { FileHandle } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type { DataExtent } from './sparse.js';

const CLUSTER_BITS = 16;
/** qemu-img's default cluster size (64 KiB). */
export const QCOW2_CLUSTER_BYTES = 1 << CLUSTER_BITS;
/** Entries of one L2 table (8 bytes each): one table maps 512 MiB of the disk. */
const L2_ENTRIES = QCOW2_CLUSTER_BYTES / 8;
/** 16-bit refcounts (refcount_order 4, qemu's default): one block counts 2 GiB of the image. */
const REFCOUNT_ORDER = 4;
const REFCOUNTS_PER_BLOCK = QCOW2_CLUSTER_BYTES / 2;
const HEADER_BYTES = 104;
const COPIED = 1n << 63n;
/** The most data one read of the disk takes into memory. */
const READ_CHUNK_BYTES = 8 * 1024 * 1024;

/** A run of consecutive disk clusters that hold data: [first, first + count). */
interface ClusterRun {
  first: number;
  count: number;
}

/** Where everything of the image goes, in clusters; what qcow2Stream writes. */
export interface Qcow2Layout {
  /** The disk's size as the image states it (a multiple of 512, as qemu's block layer counts). */
  virtualBytes: number;
  l1Entries: number;
  refcountTableClusters: number;
  refcountBlocks: number;
  l1Clusters: number;
  /** The L1 indexes that have an L2 table, ascending. */
  l2Indexes: number[];
  runs: ClusterRun[];
  dataClusters: number;
  totalClusters: number;
  /** The image's length in bytes. */
  imageBytes: number;
}

const ceilDiv = (a: number, b: number) => Math.ceil(a / b);

/** The disk clusters the extents touch (below the virtual size), as ascending, coalesced runs. */
function clusterRuns(extents: readonly DataExtent[], virtualBytes: number): ClusterRun[] {
  const lastCluster = ceilDiv(virtualBytes, QCOW2_CLUSTER_BYTES);
  const runs: ClusterRun[] = [];
  for (const e of [...extents].sort((a, b) => a.offset - b.offset)) {
    if (e.length <= 0) continue;
    const first = Math.floor(e.offset / QCOW2_CLUSTER_BYTES);
    const end = Math.min(lastCluster, ceilDiv(e.offset + e.length, QCOW2_CLUSTER_BYTES));
    if (end <= first) continue;
    const last = runs.at(-1);
    if (last && first <= last.first + last.count) last.count = Math.max(last.count, end - last.first);
    else runs.push({ first, count: end - first });
  }
  return runs;
}

/** The layout of the image of a disk of `sizeBytes` whose data lies in `extents` (sorted or not). */
export function qcow2Layout(sizeBytes: number, extents: readonly DataExtent[]): Qcow2Layout {
  const virtualBytes = ceilDiv(sizeBytes, 512) * 512;
  const runs = clusterRuns(extents, virtualBytes);
  const dataClusters = runs.reduce((n, r) => n + r.count, 0);
  const l1Entries = Math.max(1, ceilDiv(virtualBytes, L2_ENTRIES * QCOW2_CLUSTER_BYTES));
  const l1Clusters = ceilDiv(l1Entries * 8, QCOW2_CLUSTER_BYTES);
  const l2 = new Set<number>();
  for (const r of runs) for (let i = Math.floor(r.first / L2_ENTRIES); i <= Math.floor((r.first + r.count - 1) / L2_ENTRIES); i++) l2.add(i);
  const l2Indexes = [...l2].sort((a, b) => a - b);
  // The refcount blocks count themselves and the table that points at them: grow both until they cover everything.
  let refcountBlocks = 1;
  let refcountTableClusters = 1;
  for (;;) {
    const total = 1 + refcountTableClusters + refcountBlocks + l1Clusters + l2Indexes.length + dataClusters;
    const blocks = ceilDiv(total, REFCOUNTS_PER_BLOCK);
    const tableClusters = ceilDiv(blocks * 8, QCOW2_CLUSTER_BYTES);
    if (blocks === refcountBlocks && tableClusters === refcountTableClusters) break;
    refcountBlocks = Math.max(refcountBlocks, blocks);
    refcountTableClusters = Math.max(refcountTableClusters, tableClusters);
  }
  const totalClusters = 1 + refcountTableClusters + refcountBlocks + l1Clusters + l2Indexes.length + dataClusters;
  return { virtualBytes, l1Entries, refcountTableClusters, refcountBlocks, l1Clusters, l2Indexes, runs, dataClusters, totalClusters, imageBytes: totalClusters * QCOW2_CLUSTER_BYTES };
}

/** The first cluster of each part of the image. */
function offsetsOf(layout: Qcow2Layout) {
  const refcountTable = 1;
  const refcountBlocks = refcountTable + layout.refcountTableClusters;
  const l1 = refcountBlocks + layout.refcountBlocks;
  const l2 = l1 + layout.l1Clusters;
  const data = l2 + layout.l2Indexes.length;
  return { refcountTable, refcountBlocks, l1, l2, data };
}

function header(layout: Qcow2Layout): Buffer {
  const at = offsetsOf(layout);
  const h = Buffer.alloc(QCOW2_CLUSTER_BYTES);
  h.write('QFI\xfb', 0, 'latin1');
  h.writeUInt32BE(3, 4); // version
  // 8: backing_file_offset 0, 16: backing_file_size 0
  h.writeUInt32BE(CLUSTER_BITS, 20);
  h.writeBigUInt64BE(BigInt(layout.virtualBytes), 24);
  // 32: crypt_method 0
  h.writeUInt32BE(layout.l1Entries, 36);
  h.writeBigUInt64BE(BigInt(at.l1 * QCOW2_CLUSTER_BYTES), 40);
  h.writeBigUInt64BE(BigInt(at.refcountTable * QCOW2_CLUSTER_BYTES), 48);
  h.writeUInt32BE(layout.refcountTableClusters, 56);
  // 60: nb_snapshots 0, 64: snapshots_offset 0, 72/80/88: incompatible, compatible, autoclear features 0
  h.writeUInt32BE(REFCOUNT_ORDER, 96);
  h.writeUInt32BE(HEADER_BYTES, 100);
  // 104: the end of the header extensions (type 0, length 0): the zeros already there.
  return h;
}

/** A table of 8-byte big-endian entries, `clusters` clusters long. */
function table(clusters: number, entries: Iterable<[index: number, value: bigint]>): Buffer {
  const t = Buffer.alloc(clusters * QCOW2_CLUSTER_BYTES);
  for (const [i, v] of entries) t.writeBigUInt64BE(v, i * 8);
  return t;
}

/** The metadata clusters of the image (everything before the data), one buffer at a time. */
function* metadata(layout: Qcow2Layout): Generator<Buffer> {
  const at = offsetsOf(layout);
  yield header(layout);
  yield table(
    layout.refcountTableClusters,
    Array.from({ length: layout.refcountBlocks }, (_, i): [number, bigint] => [i, BigInt((at.refcountBlocks + i) * QCOW2_CLUSTER_BYTES)]),
  );
  for (let b = 0; b < layout.refcountBlocks; b++) {
    const block = Buffer.alloc(QCOW2_CLUSTER_BYTES);
    const counted = Math.min(REFCOUNTS_PER_BLOCK, layout.totalClusters - b * REFCOUNTS_PER_BLOCK);
    for (let i = 0; i < counted; i++) block.writeUInt16BE(1, i * 2);
    yield block;
  }
  yield table(
    layout.l1Clusters,
    layout.l2Indexes.map((l1Index, n): [number, bigint] => [l1Index, BigInt((at.l2 + n) * QCOW2_CLUSTER_BYTES) | COPIED]),
  );
  // The L2 tables: each data cluster's host cluster follows the runs' order.
  let host = at.data;
  let run = 0;
  for (const l1Index of layout.l2Indexes) {
    const l2 = Buffer.alloc(QCOW2_CLUSTER_BYTES);
    const [from, to] = [l1Index * L2_ENTRIES, (l1Index + 1) * L2_ENTRIES];
    for (; run < layout.runs.length && layout.runs[run]!.first < to; run++) {
      const r = layout.runs[run]!;
      const start = Math.max(r.first, from);
      const end = Math.min(r.first + r.count, to);
      for (let g = start; g < end; g++) l2.writeBigUInt64BE(BigInt(host++ * QCOW2_CLUSTER_BYTES) | COPIED, (g - from) * 8);
      // A run that goes on past this table continues in the next one.
      if (r.first + r.count > to) break;
    }
    yield l2;
  }
}

/**
 * The image of the disk open as `fh` (`sizeBytes` long, data only within `extents`: every other
 * byte reads as zero) in the layout above, with its length. The disk must not change while the
 * stream reads it (the driver streams a point-in-time copy). `fh` is closed when the stream ends
 * or is destroyed, also before its first read.
 */
export function qcow2Stream(fh: FileHandle, sizeBytes: number, extents: readonly DataExtent[]): { layout: Qcow2Layout; stream: Readable } {
  const layout = qcow2Layout(sizeBytes, extents);
  async function* chunks(): AsyncGenerator<Buffer> {
    yield* metadata(layout);
    for (const r of layout.runs) {
      const end = (r.first + r.count) * QCOW2_CLUSTER_BYTES;
      for (let pos = r.first * QCOW2_CLUSTER_BYTES; pos < end; ) {
        const n = Math.min(READ_CHUNK_BYTES, end - pos);
        // A fresh buffer per chunk (the consumer may keep it); past the disk's end it stays zeros.
        const buf = Buffer.alloc(n);
        const readable = Math.max(0, Math.min(n, sizeBytes - pos));
        for (let got = 0; got < readable; ) {
          const { bytesRead } = await fh.read(buf, got, readable - got, pos + got);
          if (bytesRead === 0) break;
          got += bytesRead;
        }
        pos += n;
        yield buf;
      }
    }
  }
  const source = chunks();
  let closing: Promise<void> | undefined;
  const close = () => (closing ??= fh.close());
  const stream = new Readable({
    read() {
      source.next().then(
        async ({ value, done }) => {
          if (done) {
            await close();
            this.push(null);
          } else this.push(value);
        },
        (e: unknown) => this.destroy(e as Error),
      );
    },
    destroy(error, callback) {
      void source.return(undefined);
      close().then(
        () => callback(error),
        (closeError: unknown) => callback(error ?? (closeError as Error)),
      );
    },
  });
  return { layout, stream };
}
