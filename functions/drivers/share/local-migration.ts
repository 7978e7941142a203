/**
 * Driver-assisted migration for the local share driver (kind `local-a`): the state a backend
 * keeps for a migration, and the sliced copy that moves a share's tree between two backends.
 *
 * The state lives ON THE DESTINATION BACKEND, beside the destination share and outside it:
 * `<destRoot>/<destName>.migration.json` (STATE_SUFFIX). It is what a real backend would keep, so
 * a later call, maybe in a new process, continues where an earlier one stopped. It is replaced
 * atomically (written to `<file>.tmp`, then renamed). Its shape is MigrationState below.
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
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
  type BigIntStats,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { DriverError } from '../../core/errors.js';
import { copyFileVerified, type CopyThreadState } from '../../copy/file-copy.js';
import { IGNORED_TOP_LEVEL, nsToSeconds, planCopy, type CopyPlan, type PlannedEntry, type PlannedFile, type SkippedEntry } from '../../copy/tree.js';
import type { MigrationProgress } from './driver.js';

export const STATE_SUFFIX = '.migration.json';
export const SLICE_ENV = 'FERRY_SHARE_MIGRATION_SLICE_MS';
export const DEFAULT_SLICE_MS = 2000;
/** The copy engine's chunk size (worker.ts DEFAULT_CHUNK_BYTES), not imported: worker.ts pulls in the AWS SDK. */
const CHUNK_BYTES = 256 * 1024;
/** utimes keeps about a microsecond (tree.ts nsToSeconds); the copy engine allows the same drift. */
const MTIME_TOLERANCE_NS = 2000n;

export type MigrationStatus = 'copying' | 'phase1-done' | 'completed';

/** What was copied of one regular file: the source as it was planned just before the copy. */
export interface FinishedFile {
  size: number;
  mtimeNs: string;
  mode: number;
  uid: number;
  gid: number;
}

export interface MigrationState {
  kind: 'ferry-local-share-migration';
  version: 1;
  source: { host: string; root: string; name: string };
  destination: { host: string; root: string; name: string };
  status: MigrationStatus;
  startedAt: string;
  updatedAt: string;
  /** Calls of migration_continue that did work (and the final sync). */
  slices: number;
  /** Totals as of the last pass (the source may change while it stays writable). */
  bytesTotal: number;
  filesTotal: number;
  bytesDone: number;
  filesDone: number;
  /** 0..100, never decreasing; 100 only once phase 1 is done. */
  totalProgress: number;
  /** Bytes and files actually written over the whole migration, copies of changed files included. */
  bytesCopied: number;
  filesCopied: number;
  /** The last file copied (relative path), '' before the first. */
  cursor: string;
  /** False once setting an owner failed with EPERM (not root): files then belong to Ferry. */
  ownerPreserved: boolean;
  /** Source entries that are not copied (fifos, sockets, devices). */
  skipped: SkippedEntry[];
  /** Finished regular files by relative path. */
  done: Record<string, FinishedFile>;
}

export interface MigrationEndpoints {
  sourceHost: string;
  sourceRoot: string;
  sourceName: string;
  sourceDir: string;
  destHost: string;
  destRoot: string;
  destName: string;
  destDir: string;
  statePath: string;
}

export function sliceBudgetMs(): number {
  const raw = process.env[SLICE_ENV];
  if (raw === undefined || raw.trim() === '') return DEFAULT_SLICE_MS;
  const n = Number(raw);
  return Number.isFinite(n) && n >= 0 ? n : DEFAULT_SLICE_MS;
}

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

// ---------------------------------------------------------------------------------------------
// The state file

export function readState(statePath: string): MigrationState | undefined {
  let text: string;
  try {
    text = readFileSync(statePath, 'utf8');
  } catch (e) {
    if (errnoCode(e) === 'ENOENT') return undefined;
    throw e;
  }
  try {
    const state = JSON.parse(text) as MigrationState;
    if (state.kind !== 'ferry-local-share-migration' || state.version !== 1) throw new Error('not a Ferry local share migration state');
    return state;
  } catch (e) {
    throw new DriverError(`Migration state ${statePath} is unreadable: ${(e as Error).message}`, { cause: e });
  }
}

export function writeState(statePath: string, state: MigrationState): void {
  state.updatedAt = new Date().toISOString();
  const tmp = `${statePath}.tmp`;
  writeFileSync(tmp, JSON.stringify(state));
  renameSync(tmp, statePath);
}

export function removeState(statePath: string): void {
  rmSync(statePath, { force: true });
  rmSync(`${statePath}.tmp`, { force: true });
}

export function newState(ep: MigrationEndpoints, plan: CopyPlan): MigrationState {
  const now = new Date().toISOString();
  return {
    kind: 'ferry-local-share-migration',
    version: 1,
    source: { host: ep.sourceHost, root: ep.sourceRoot, name: ep.sourceName },
    destination: { host: ep.destHost, root: ep.destRoot, name: ep.destName },
    status: 'copying',
    startedAt: now,
    updatedAt: now,
    slices: 0,
    bytesTotal: plan.bytesTotal,
    filesTotal: plan.filesTotal,
    bytesDone: 0,
    filesDone: 0,
    totalProgress: 0,
    bytesCopied: 0,
    filesCopied: 0,
    cursor: '',
    ownerPreserved: true,
    skipped: plan.skipped,
    done: {},
  };
}

/** True when the state describes this very migration (same source and destination shares). */
export function sameMigration(state: MigrationState, ep: MigrationEndpoints): boolean {
  return (
    state.source.host === ep.sourceHost &&
    state.source.root === ep.sourceRoot &&
    state.source.name === ep.sourceName &&
    state.destination.host === ep.destHost &&
    state.destination.root === ep.destRoot &&
    state.destination.name === ep.destName
  );
}

export function progressOf(state: MigrationState | undefined): MigrationProgress {
  if (!state) return { total_progress: 0, bytes_done: 0, bytes_total: 0, files_done: 0, files_total: 0 };
  const done = state.status !== 'copying';
  return {
    total_progress: done ? 100 : Math.min(99, state.totalProgress),
    bytes_done: done ? state.bytesTotal : state.bytesDone,
    bytes_total: state.bytesTotal,
    files_done: done ? state.filesTotal : state.filesDone,
    files_total: state.filesTotal,
    phase: state.status,
    slices: state.slices,
    bytes_copied: state.bytesCopied,
    files_copied: state.filesCopied,
  };
}

// ---------------------------------------------------------------------------------------------
// The tree

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

function createDirectories(plan: CopyPlan, destDir: string): void {
  mkdirSync(destDir, { recursive: true });
  for (const dir of plan.directories) {
    if (dir.rel === '') continue;
    try {
      // Owner-only until the end of the pass: the final mode may forbid writing into it.
      mkdirSync(join(destDir, dir.rel), 0o700);
    } catch (e) {
      if (errnoCode(e) !== 'EEXIST') throw e;
    }
  }
}

/** Owner is kept where permitted; the first EPERM turns it off for the rest of the migration. */
function applyOwner(state: MigrationState, set: () => void): void {
  if (!state.ownerPreserved) return;
  try {
    set();
  } catch (e) {
    if (errnoCode(e) !== 'EPERM') throw e;
    state.ownerPreserved = false;
  }
}

function createSymlinks(plan: CopyPlan, sourceDir: string, destDir: string, state: MigrationState): void {
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
    applyOwner(state, () => lchownSync(dst, link.uid, link.gid));
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

function applyDirectoryMetadata(dir: PlannedEntry, destDir: string, state: MigrationState): void {
  const path = join(destDir, dir.rel);
  applyOwner(state, () => lchownSync(path, dir.uid, dir.gid));
  chmodSync(path, dir.mode & 0o7777);
  utimesSync(path, nsToSeconds(dir.atimeNs), nsToSeconds(dir.mtimeNs));
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

  const threadState: CopyThreadState = {
    data: Buffer.allocUnsafe(CHUNK_BYTES),
    check: Buffer.allocUnsafe(CHUNK_BYTES),
    stop: new Int32Array(1),
    progress: new Float64Array(1),
    current: new Int32Array([-1]),
    slot: 0,
    chownAllowed: state.ownerPreserved,
    bytesPerSecond: 0,
    throttle: { startedAt: performance.now(), bytes: 0 },
  };

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
        if (!lstatOrUndefined(join(ep.sourceDir, file.rel))) {
          bytesTotal -= file.size;
          filesTotal -= 1;
          continue;
        }
        throw new DriverError(`Migration of ${ep.sourceName} to ${ep.destHost} could not copy ${file.rel}: ${(e as Error)?.message ?? e}`, { cause: e });
      }
    }

    if (!stopped) {
      createSymlinks(plan, ep.sourceDir, ep.destDir, state);
      createHardLinks(plan, ep.destDir);
      // Children before parents: setting a directory's times is the last change inside its parent.
      for (const dir of [...plan.directories].reverse()) applyDirectoryMetadata(dir, ep.destDir, state);
      result.complete = true;
    }
  } finally {
    if (!threadState.chownAllowed) state.ownerPreserved = false;
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

/** One operation at a time per migration in this process (a pass yields between files). */
const locks = new Map<string, Promise<unknown>>();
export async function serialized<T>(key: string, run: () => Promise<T>): Promise<T> {
  const previous = locks.get(key) ?? Promise.resolve();
  const mine = previous.then(run, run);
  const tail = mine.catch(() => undefined);
  locks.set(key, tail);
  try {
    return await mine;
  } finally {
    if (locks.get(key) === tail) locks.delete(key);
  }
}
