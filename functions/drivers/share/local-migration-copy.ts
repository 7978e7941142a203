/**
 * Driver-assisted migration for the local share driver (kind `local-a`): the sliced copy that
 * moves a share's tree between two backends, recording what it finished in the migration's state
 * (local-migration-state.ts).
 *
 * The copy reuses the copy engine's pieces (functions/copy): planCopy walks the source (top-level
 * `lost+found` skipped, hard links found, fifos/sockets/devices skipped), copyFileVerified copies
 * and verifies one regular file with its owner, mode and times. Around them this module adds what a
 * migration of a writable share needs:
 * - a time budget per call (FERRY_SHARE_MIGRATION_SLICE_MS, default 2000 ms): files are copied in
 *   plan order until the budget is spent, at least one file per call; a file is the smallest unit
 *   of work, so a call may overrun its budget by the time one file takes;
 * - a record per finished file (the source's size, mtime, mode and owner when it was planned): a
 *   file is copied again only if the source changed since, or its destination is missing or
 *   differs in size or mtime;
 * - pruning: destination entries that the source no longer has (or has as another type) are
 *   removed, at every pass, so the final pass leaves an exact image of the source;
 * - symlinks, hard links and directory owner/mode/times are done once all files are, at the end
 *   of phase 1 and again at the final sync.
 */
import {
  chmodSync,
  lchownSync,
  linkSync,
  lstatSync,
  lutimesSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  type BigIntStats,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { DriverError } from '../../core/errors.js';
import { logger } from '../../core/logger.js';
import { copyFileVerified, singleThreadState } from '../../copy/file-copy.js';
import { CopySourceChanged } from '../../copy/errors.js';
import { applyDirectoryMetadata, createDirectories, OwnerPolicy } from '../../copy/tree-write.js';
import { IGNORED_TOP_LEVEL, MTIME_TOLERANCE_NS, nsToSeconds, planCopy, type CopyPlan, type PlannedFile } from '../../copy/tree.js';
import type { FinishedFile, MigrationEndpoints, MigrationState } from './local-migration-state.js';

function errnoCode(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException)?.code;
}

function lstatOrUndefined(path: string): BigIntStats | undefined {
  try {
    return lstatSync(path, { bigint: true });
  } catch (e) {
    if (errnoCode(e) === 'ENOENT' || errnoCode(e) === 'ENOTDIR') return undefined;
    throw e;
  }
}

/** Walks the source; a source that is gone is the caller's error, not an internal one. */
export function planSource(sourceDir: string): CopyPlan {
  try {
    return planCopy(sourceDir);
  } catch (e) {
    if (errnoCode(e) === 'ENOENT') throw new DriverError(`Source share ${sourceDir} does not exist.`, { cause: e });
    throw e;
  }
}

/**
 * Gives the owner rwx on every directory of a tree, so a process that is not root can write into
 * (or remove) directories whose copied mode forbids it. Directory modes are put back afterwards
 * from the plan (applyDirectoryMetadata) where the tree is kept.
 */
export function makeDirectoriesWritable(root: string): void {
  if (process.getuid?.() === 0) return;
  const walk = (dir: string): void => {
    const st = lstatOrUndefined(dir);
    if (!st || !st.isDirectory()) return;
    if ((Number(st.mode) & 0o700) !== 0o700) chmodSync(dir, (Number(st.mode) & 0o7777) | 0o700);
    for (const name of readdirSync(dir)) walk(join(dir, name));
  };
  walk(root);
}

/** Removes a tree that may hold read-only directories. */
export function removeTree(path: string): void {
  makeDirectoriesWritable(path);
  rmSync(path, { recursive: true, force: true });
}

type EntryType = 'dir' | 'file' | 'symlink';

function typeOf(st: BigIntStats): EntryType | 'other' {
  if (st.isDirectory()) return 'dir';
  if (st.isFile()) return 'file';
  if (st.isSymbolicLink()) return 'symlink';
  return 'other';
}

/**
 * Removes from the destination everything the source does not have as the same type, and forgets
 * the finished-file records of whatever is no longer a regular file of the plan.
 */
function prune(plan: CopyPlan, destDir: string, state: MigrationState): void {
  const expected = new Map<string, EntryType>();
  for (const d of plan.directories) expected.set(d.rel, 'dir');
  for (const f of plan.files) expected.set(f.rel, 'file');
  for (const l of plan.hardLinks) expected.set(l.rel, 'file');
  for (const s of plan.symlinks) expected.set(s.rel, 'symlink');
  const walk = (dirRel: string): void => {
    let names: string[];
    try {
      names = readdirSync(join(destDir, dirRel));
    } catch (e) {
      if (errnoCode(e) === 'ENOENT' || errnoCode(e) === 'ENOTDIR') return;
      throw e;
    }
    for (const name of names) {
      // The destination's own lost+found (if its filesystem has one) is not the share's.
      if (dirRel === '' && IGNORED_TOP_LEVEL.includes(name)) continue;
      const rel = dirRel === '' ? name : `${dirRel}/${name}`;
      const path = join(destDir, rel);
      const st = lstatOrUndefined(path);
      if (!st) continue;
      const type = typeOf(st);
      if (expected.get(rel) === type) {
        if (type === 'dir') walk(rel);
        continue;
      }
      if (type === 'dir') removeTree(path);
      else rmSync(path, { force: true });
    }
  };
  walk('');
  const planned = new Set(plan.files.map((f) => f.rel));
  for (const rel of Object.keys(state.done)) if (!planned.has(rel)) delete state.done[rel];
}

function createSymlinks(plan: CopyPlan, sourceDir: string, destDir: string, owner: OwnerPolicy): void {
  for (const link of plan.symlinks) {
    let target: string;
    try {
      target = readlinkSync(join(sourceDir, link.rel));
    } catch (e) {
      // Removed (or replaced) on the writable source since the walk: the next pass sees it.
      if (errnoCode(e) === 'ENOENT' || errnoCode(e) === 'EINVAL') continue;
      throw e;
    }
    const dst = join(destDir, link.rel);
    rmSync(dst, { force: true });
    symlinkSync(target, dst);
    owner.apply(() => lchownSync(dst, link.uid, link.gid));
    // Linux has no symlink modes; times are kept with lutimes, which never follows.
    lutimesSync(dst, nsToSeconds(link.atimeNs), nsToSeconds(link.mtimeNs));
  }
}

function createHardLinks(plan: CopyPlan, destDir: string): void {
  for (const link of plan.hardLinks) {
    const dst = join(destDir, link.rel);
    const target = lstatOrUndefined(join(destDir, link.primary));
    // The primary vanished from the source while it was being copied: nothing to link to.
    if (!target || !target.isFile()) continue;
    const existing = lstatOrUndefined(dst);
    if (existing && existing.ino === target.ino && existing.dev === target.dev) continue;
    if (existing) unlinkSync(dst);
    linkSync(join(destDir, link.primary), dst);
  }
}

function finishedRecord(file: PlannedFile): FinishedFile {
  return { size: file.size, mtimeNs: String(file.mtimeNs), mode: file.mode, uid: file.uid, gid: file.gid };
}

/** The source has not changed since the file was copied (as far as size, mtime, mode and owner tell). */
function sourceUnchanged(file: PlannedFile, record: FinishedFile | undefined): boolean {
  return (
    record !== undefined &&
    record.size === file.size &&
    record.mtimeNs === String(file.mtimeNs) &&
    record.mode === file.mode &&
    record.uid === file.uid &&
    record.gid === file.gid
  );
}

/** ...and the destination still holds what was copied. */
function finished(file: PlannedFile, record: FinishedFile | undefined, destDir: string): boolean {
  if (!sourceUnchanged(file, record)) return false;
  const dst = lstatOrUndefined(join(destDir, file.rel));
  if (!dst || !dst.isFile() || Number(dst.size) !== file.size) return false;
  const drift = dst.mtimeNs - file.mtimeNs;
  return drift <= MTIME_TOLERANCE_NS && drift >= -MTIME_TOLERANCE_NS;
}

/**
 * The file's directory on the source is still the directory the walk saw, not a symlink put in
 * its place since (the source is writable): the copy must never read outside the source share.
 * The remaining window (between this check and the open) is that of any copy of a live tree.
 */
function stillInsideSource(sourceReal: string, file: PlannedFile, sourceDir: string): 'ok' | 'gone' | 'moved' {
  const src = join(sourceDir, file.rel);
  const st = lstatOrUndefined(src);
  if (!st) return 'gone';
  if (!st.isFile()) return 'moved';
  const relDir = dirname(file.rel);
  const expected = relDir === '.' ? sourceReal : join(sourceReal, relDir);
  try {
    return realpathSync(dirname(src)) === expected ? 'ok' : 'moved';
  } catch (e) {
    if (errnoCode(e) === 'ENOENT' || errnoCode(e) === 'ENOTDIR') return 'gone';
    throw e;
  }
}

const yieldToEventLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export interface PassResult {
  /** Every regular file of the source is on the destination (and links and directories are done). */
  complete: boolean;
  filesCopied: number;
  bytesCopied: number;
}

/**
 * One pass over the source: prune, create directories, copy the files that are not finished (in
 * plan order, until the budget is spent, at least one), and when none is left, symlinks, hard
 * links and directory metadata. Updates `state` (totals, progress, records, cursor); the caller
 * persists it, also when this throws.
 */
export async function copyPass(ep: MigrationEndpoints, state: MigrationState, budgetMs: number): Promise<PassResult> {
  const startedAt = performance.now();
  const plan = planSource(ep.sourceDir);
  const sourceReal = realpathSync(ep.sourceDir);
  makeDirectoriesWritable(ep.destDir);
  prune(plan, ep.destDir, state);
  createDirectories(plan, ep.destDir);

  // Owners are kept where permitted; the first EPERM turns it off for the rest of the migration.
  const owner = new OwnerPolicy();
  owner.allowed = state.ownerPreserved;
  const threadState = singleThreadState((message, context) => logger.warn(message, context), state.ownerPreserved);

  const result: PassResult = { complete: false, filesCopied: 0, bytesCopied: 0 };
  let bytesDone = 0;
  let filesDone = 0;
  let bytesTotal = plan.bytesTotal;
  let filesTotal = plan.filesTotal;
  let stopped = false;
  let attempted = 0;
  try {
    for (let index = 0; index < plan.files.length; index++) {
      const file = plan.files[index]!;
      if (stopped) {
        // Out of budget: count what earlier passes finished, copy nothing more.
        if (sourceUnchanged(file, state.done[file.rel])) {
          bytesDone += file.size;
          filesDone += 1;
        }
        continue;
      }
      if (finished(file, state.done[file.rel], ep.destDir)) {
        bytesDone += file.size;
        filesDone += 1;
        continue;
      }
      if (attempted > 0 && performance.now() - startedAt >= budgetMs) {
        stopped = true;
        index--; // count this one in the out-of-budget branch
        continue;
      }
      if (attempted > 0) await yieldToEventLoop();
      attempted += 1;
      const where = stillInsideSource(sourceReal, file, ep.sourceDir);
      if (where !== 'ok') {
        // Removed or replaced on the writable source since the walk: not part of this copy.
        bytesTotal -= file.size;
        filesTotal -= 1;
        delete state.done[file.rel];
        rmSync(join(ep.destDir, file.rel), { force: true });
        continue;
      }
      try {
        const copied = copyFileVerified(
          {
            index,
            rel: file.rel,
            src: join(ep.sourceDir, file.rel),
            dst: join(ep.destDir, file.rel),
            mode: file.mode,
            uid: file.uid,
            gid: file.gid,
            atime: nsToSeconds(file.atimeNs),
            mtime: nsToSeconds(file.mtimeNs),
            size: file.size,
            mtimeNs: String(file.mtimeNs),
          },
          threadState,
        );
        if (!copied.ownerKept) state.ownerPreserved = false;
        state.done[file.rel] = finishedRecord(file);
        state.cursor = file.rel;
        state.bytesCopied += copied.bytes;
        state.filesCopied += 1;
        result.bytesCopied += copied.bytes;
        result.filesCopied += 1;
        bytesDone += file.size;
        filesDone += 1;
      } catch (e) {
        delete state.done[file.rel];
        if (e instanceof CopySourceChanged && state.status === 'copying') {
          // The source stays writable in phase 1: a file written while it was read is left undone,
          // never recorded half-old, and the final sync copies it. In the final sync the source is
          // read-only, so a change there fails the migration (below) instead of losing the file.
          continue;
        }
        if (!lstatOrUndefined(join(ep.sourceDir, file.rel))) {
          bytesTotal -= file.size;
          filesTotal -= 1;
          continue;
        }
        throw new DriverError(`Migration of ${ep.sourceName} to ${ep.destHost} could not copy ${file.rel}: ${(e as Error)?.message ?? e}`, { cause: e });
      }
    }

    if (!stopped) {
      createSymlinks(plan, ep.sourceDir, ep.destDir, owner);
      createHardLinks(plan, ep.destDir);
      // Children before parents: setting a directory's times is the last change inside its parent.
      for (const dir of [...plan.directories].reverse()) applyDirectoryMetadata(dir, ep.destDir, owner);
      result.complete = true;
    }
  } finally {
    if (!threadState.chownAllowed || !owner.allowed) state.ownerPreserved = false;
    state.bytesTotal = bytesTotal;
    state.filesTotal = filesTotal;
    state.bytesDone = Math.min(bytesDone, bytesTotal);
    state.filesDone = Math.min(filesDone, filesTotal);
    state.skipped = plan.skipped;
    const ratio = bytesTotal > 0 ? bytesDone / bytesTotal : filesTotal > 0 ? filesDone / filesTotal : 0;
    state.totalProgress = Math.max(state.totalProgress, Math.min(99, Math.floor(ratio * 100)));
    state.slices += 1;
  }
  return result;
}

export function isEmptyDirectory(path: string): boolean {
  return readdirSync(path).length === 0;
}

export function directoryExists(path: string): boolean {
  const st = lstatOrUndefined(path);
  return st !== undefined && st.isDirectory();
}

export function pathExists(path: string): boolean {
  return lstatOrUndefined(path) !== undefined;
}
