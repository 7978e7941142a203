/**
 * Walks the source share once, before any byte is copied, so progress has true totals from the
 * first report (upstream walks the tree twice with `ls` and `stat` per file for the same purpose).
 *
 * What is planned, and what is not:
 * - directories, regular files, symlinks (as links, never followed);
 * - a regular file with more than one link is copied once; its other names become hard links;
 * - `lost+found` at the top level is skipped (it belongs to the filesystem, not the share);
 * - fifos, sockets and device nodes are skipped with a note: Node cannot create them (no mknod),
 *   they hold no data, and a device node recreated on a tenant's share would be a way around the
 *   destination's access controls.
 */
import { lstatSync, readdirSync, type BigIntStats } from 'node:fs';
import { join } from 'node:path';
import { CopyFailed } from './errors.js';

/** Skipped at the top level of the source, as upstream's `migration_ignore_files` default. */
export const IGNORED_TOP_LEVEL = ['lost+found'];

export interface PlannedEntry {
  /** Path relative to the share root, '' for the root itself. */
  rel: string;
  mode: number;
  uid: number;
  gid: number;
  /** Nanoseconds since the epoch. */
  atimeNs: bigint;
  mtimeNs: bigint;
}

export interface PlannedFile extends PlannedEntry {
  size: number;
  /** `dev:ino`, the identity hard links share. */
  inode: string;
  nlink: number;
}

export interface PlannedLink {
  rel: string;
  /** The first name of the same inode; copied as a file, this one is linked to it. */
  primary: string;
}

export interface SkippedEntry {
  rel: string;
  type: 'fifo' | 'socket' | 'character-device' | 'block-device' | 'unknown';
}

export interface CopyPlan {
  /** Pre-order: a directory comes before everything inside it. */
  directories: PlannedEntry[];
  files: PlannedFile[];
  symlinks: PlannedEntry[];
  hardLinks: PlannedLink[];
  skipped: SkippedEntry[];
  bytesTotal: number;
  /** Regular files to copy, hard links not counted. */
  filesTotal: number;
}

function entryOf(rel: string, st: BigIntStats): PlannedEntry {
  return { rel, mode: Number(st.mode), uid: Number(st.uid), gid: Number(st.gid), atimeNs: st.atimeNs, mtimeNs: st.mtimeNs };
}

function specialType(st: BigIntStats): SkippedEntry['type'] {
  if (st.isFIFO()) return 'fifo';
  if (st.isSocket()) return 'socket';
  if (st.isCharacterDevice()) return 'character-device';
  if (st.isBlockDevice()) return 'block-device';
  return 'unknown';
}

/**
 * @param exclude top-level names to leave out besides lost+found (the journal, when the source and
 *   destination are the same directory in a test).
 */
export function planCopy(source: string, exclude: string[] = []): CopyPlan {
  const plan: CopyPlan = { directories: [], files: [], symlinks: [], hardLinks: [], skipped: [], bytesTotal: 0, filesTotal: 0 };
  const firstNameOfInode = new Map<string, string>();
  const ignored = new Set([...IGNORED_TOP_LEVEL, ...exclude]);
  const rootStat = lstatSync(source, { bigint: true });
  if (!rootStat.isDirectory()) throw new CopyFailed(`${source} is not a directory`);
  plan.directories.push(entryOf('', rootStat));

  const walk = (dirRel: string): void => {
    const names = readdirSync(join(source, dirRel)).sort();
    for (const name of names) {
      if (dirRel === '' && ignored.has(name)) continue;
      const rel = dirRel === '' ? name : `${dirRel}/${name}`;
      const st = lstatSync(join(source, rel), { bigint: true });
      if (st.isDirectory()) {
        plan.directories.push(entryOf(rel, st));
        walk(rel);
      } else if (st.isSymbolicLink()) {
        plan.symlinks.push(entryOf(rel, st));
      } else if (st.isFile()) {
        const inode = `${st.dev}:${st.ino}`;
        if (st.nlink > 1n) {
          const primary = firstNameOfInode.get(inode);
          if (primary !== undefined) {
            plan.hardLinks.push({ rel, primary });
            continue;
          }
          firstNameOfInode.set(inode, rel);
        }
        plan.files.push({ ...entryOf(rel, st), size: Number(st.size), inode, nlink: Number(st.nlink) });
        plan.bytesTotal += Number(st.size);
        plan.filesTotal += 1;
      } else {
        plan.skipped.push({ rel, type: specialType(st) });
      }
    }
  };
  walk('');
  return plan;
}

/**
 * fs.utimes takes fractional seconds (a double) and libuv truncates them to microseconds, so a
 * time survives to within about a microsecond, not to the nanosecond as with cp -a. Whole seconds
 * and the nanosecond part are converted separately so the only rounding is that of the final sum.
 */
export function nsToSeconds(ns: bigint): number {
  return Number(ns / 1_000_000_000n) + Number(ns % 1_000_000_000n) / 1e9;
}

/** Destination and source mtimes may differ by this much after a copy: utimes keeps about a microsecond (nsToSeconds). */
export const MTIME_TOLERANCE_NS = 2000n;
