/**
 * The state the local share driver (kind `local-a`) keeps for a driver-assisted migration, and
 * the endpoints (both shares) a migration call works on.
 *
 * The state lives ON THE DESTINATION BACKEND, beside the destination share and outside it:
 * `<destRoot>/<destName>.migration.json` (STATE_SUFFIX). It is what a real backend would keep, so
 * a later call, maybe in a new process, continues where an earlier one stopped. It is replaced
 * atomically (written to `<file>.tmp`, then renamed). Its shape is MigrationState below.
 * The copy that fills the destination is local-migration-copy.ts.
 */
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { DriverError } from '../../core/errors.js';
import type { CopyPlan, SkippedEntry } from '../../copy/tree.js';
import type { MigrationProgress } from './driver.js';

export const STATE_SUFFIX = '.migration.json';
export const SLICE_ENV = 'FERRY_SHARE_MIGRATION_SLICE_MS';
export const DEFAULT_SLICE_MS = 2000;

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
    if (state.kind !== 'ferry-local-share-migration' || state.version !== 1) throw new DriverError('not a Ferry local share migration state');
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

/** One operation at a time per migration in this process (a pass yields between files). */
const locks = new Map<string, Promise<unknown>>();
export async function serialized<T>(key: string, run: () => Promise<T>): Promise<T> {
  const previous = locks.get(key) ?? Promise.resolve();
  const mine = previous.then(run, run);
  // The next operation waits for this one to settle, however it ends (its caller gets the outcome).
  const tail = Promise.allSettled([mine]);
  locks.set(key, tail);
  try {
    return await mine;
  } finally {
    if (locks.get(key) === tail) locks.delete(key);
  }
}
