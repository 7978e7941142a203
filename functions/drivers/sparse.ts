/**
 * Where a sparse file holds data: its data extents, found with lseek(SEEK_DATA/SEEK_HOLE) so that a
 * copy of a 1 GiB disk holding 1 MiB reads 1 MiB, not 1 GiB. The local drivers' files are sparse
 * (a guest's root disk, a volume file), and every move of them copies only these extents.
 *
 * Node has no lseek: the two seeks run in `perl` (in every Linux base image: Debian's perl-base is
 * essential), one long-lived helper process that answers every query of this process
 * (data-seeker.ts). Where perl is
 * missing, or the file system cannot tell holes (EINVAL), the whole file counts as data: the copy
 * stays correct, only slower (it reads everything and skips chunks of zeros).
 * Every byte outside the extents reads as zero (that is what a hole is); an extent may also hold
 * zeros (preallocated or written zeros), so copies still skip chunks of zeros inside extents.
 */
import type { FileHandle } from 'node:fs/promises';
import { DriverError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { seekDataExtents } from './data-seeker.js';
import { pathOfOpenFile } from './files.js';

export interface DataExtent {
  offset: number;
  length: number;
}

let perlMissingLogged = false;

/** The whole range [0, size) as one extent (nothing when empty). */
export const wholeFile = (size: number): DataExtent[] => (size > 0 ? [{ offset: 0, length: size }] : []);

/**
 * The data extents of the file at `path` within [0, size), sorted, disjoint. (A stat's block count
 * is no shortcut for "no data": some file systems report 0 blocks for files that hold data.)
 */
export async function dataExtents(path: string, size: number): Promise<DataExtent[]> {
  if (size <= 0) return [];
  const answer = await seekDataExtents(path, size);
  if (answer === undefined) {
    // Correct without it, only slower: said once, not per copy.
    if (!perlMissingLogged) logger.warn('sparse copies: perl is not installed; copies read whole files', { path });
    perlMissingLogged = true;
    return wholeFile(size);
  }
  if (answer === 'ok all') return wholeFile(size);
  const extents: DataExtent[] = [];
  for (const pair of answer.slice('ok '.length).split(';')) {
    if (!pair) continue;
    const [start, end] = pair.split(' ').map(Number);
    if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || end! <= start!) {
      throw new DriverError(`cannot find the data extents of ${path}: unexpected answer ${JSON.stringify(pair)}`, { context: { path } });
    }
    extents.push({ offset: start!, length: end! - start! });
  }
  return extents;
}

/**
 * The data extents of an open file within [0, size), found through the open descriptor
 * (/proc/<pid>/fd/<fd>) where Linux offers it, so a file renamed or removed since it was opened
 * still answers; elsewhere through `path`.
 */
export async function dataExtentsOfOpen(fh: FileHandle, path: string, size: number): Promise<DataExtent[]> {
  return dataExtents(pathOfOpenFile(fh, path), size);
}

/**
 * The data extents of an open file at `path`, within its size as of now, and whether it has no
 * hole at all (`dense`): one data extent over the whole file AND blocks allocated for every byte.
 * The block count is asked too because the extents alone say "all data" also where holes cannot
 * be told (no perl, EINVAL); it is never the only evidence either (some file systems report 0
 * blocks for files that hold data, which reads as "not dense": the safe side).
 */
export async function dataExtentsOf(fh: FileHandle, path: string): Promise<{ size: number; extents: DataExtent[]; dense: boolean }> {
  const { size, blocks } = await fh.stat();
  const extents = await dataExtents(path, size);
  const oneExtent = extents.length === 1 && extents[0]!.offset === 0 && extents[0]!.length === size;
  return { size, extents, dense: size > 0 && oneExtent && blocks * 512 >= size };
}

/** The union of two sorted extent lists, coalesced. */
export function unionExtents(a: readonly DataExtent[], b: readonly DataExtent[]): DataExtent[] {
  const all = [...a, ...b].sort((x, y) => x.offset - y.offset);
  const out: DataExtent[] = [];
  for (const e of all) {
    const last = out.at(-1);
    if (last && e.offset <= last.offset + last.length) last.length = Math.max(last.length, e.offset + e.length - last.offset);
    else out.push({ ...e });
  }
  return out;
}

/** Total bytes of the extents. */
export const extentBytes = (extents: readonly DataExtent[]): number => extents.reduce((n, e) => n + e.length, 0);

/**
 * The pieces of the extents cut at multiples of `chunkBytes` (so a piece never spans two chunks
 * of the file), each at most `chunkBytes` long, in order.
 */
export function* chunkPieces(extents: readonly DataExtent[], chunkBytes: number): Generator<DataExtent> {
  for (const e of extents) {
    const end = e.offset + e.length;
    for (let pos = e.offset; pos < end; ) {
      const next = Math.min(end, (Math.floor(pos / chunkBytes) + 1) * chunkBytes);
      yield { offset: pos, length: next - pos };
      pos = next;
    }
  }
}

/** The indexes of the `chunkBytes` chunks of the file that the extents touch: every other chunk is a hole. */
export function chunksHoldingData(extents: readonly DataExtent[], chunkBytes: number): Set<number> {
  const out = new Set<number>();
  for (const piece of chunkPieces(extents, chunkBytes)) out.add(Math.floor(piece.offset / chunkBytes));
  return out;
}
