/**
 * What the engine writes on the destination besides file contents: directories (owner-only while
 * the copy runs), symlinks, hard links, and directories' owner, mode and times once all is in.
 */
import { chmodSync, lchownSync, linkSync, lstatSync, lutimesSync, mkdirSync, readlinkSync, symlinkSync, unlinkSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import type { JournalEntry } from './journal.js';
import { MTIME_TOLERANCE_NS, nsToSeconds, type CopyPlan, type PlannedEntry, type PlannedFile } from './tree.js';

function errnoCode(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException)?.code;
}

function removeIfPresent(path: string): void {
  try {
    unlinkSync(path);
  } catch (e) {
    if (errnoCode(e) !== 'ENOENT') throw e;
  }
}

/** Owner is kept where permitted; the first EPERM turns it off quietly for the rest of the run. */
export class OwnerPolicy {
  allowed = true;
  apply(set: () => void): void {
    if (!this.allowed) return;
    try {
      set();
    } catch (e) {
      if (errnoCode(e) !== 'EPERM') throw e;
      this.allowed = false;
    }
  }
}

export function createDirectories(plan: CopyPlan, destination: string): void {
  mkdirSync(destination, { recursive: true });
  for (const dir of plan.directories) {
    if (dir.rel === '') continue;
    try {
      // Owner-only until the end: the final mode may forbid writing into it.
      mkdirSync(join(destination, dir.rel), 0o700);
    } catch (e) {
      if (errnoCode(e) !== 'EEXIST') throw e;
    }
  }
}

export function createSymlinks(plan: CopyPlan, source: string, destination: string, owner: OwnerPolicy): void {
  for (const link of plan.symlinks) {
    const dst = join(destination, link.rel);
    removeIfPresent(dst);
    symlinkSync(readlinkSync(join(source, link.rel)), dst);
    owner.apply(() => lchownSync(dst, link.uid, link.gid));
    // Linux has no symlink modes (always 0777); times are kept with lutimes, which never follows.
    lutimesSync(dst, nsToSeconds(link.atimeNs), nsToSeconds(link.mtimeNs));
  }
}

export function createHardLinks(plan: CopyPlan, destination: string): void {
  for (const link of plan.hardLinks) {
    const dst = join(destination, link.rel);
    const target = join(destination, link.primary);
    const existing = lstatOrUndefined(dst);
    if (existing && existing.ino === lstatSync(target, { bigint: true }).ino) continue;
    if (existing) unlinkSync(dst);
    linkSync(target, dst);
  }
}

export function applyDirectoryMetadata(dir: PlannedEntry, destination: string, owner: OwnerPolicy): void {
  const path = join(destination, dir.rel);
  owner.apply(() => lchownSync(path, dir.uid, dir.gid));
  chmodSync(path, dir.mode & 0o7777);
  utimesSync(path, nsToSeconds(dir.atimeNs), nsToSeconds(dir.mtimeNs));
}

function lstatOrUndefined(path: string) {
  try {
    return lstatSync(path, { bigint: true });
  } catch (e) {
    if (errnoCode(e) === 'ENOENT') return undefined;
    throw e;
  }
}

/** True when an earlier run finished this file and neither side changed since. */
export function finishedEarlier(file: PlannedFile, entry: JournalEntry | undefined, destination: string): boolean {
  if (!entry || entry.size !== file.size || entry.mtimeNs !== String(file.mtimeNs)) return false;
  const dst = lstatOrUndefined(join(destination, file.rel));
  if (!dst || !dst.isFile() || Number(dst.size) !== file.size) return false;
  const drift = dst.mtimeNs - file.mtimeNs;
  return drift <= MTIME_TOLERANCE_NS && drift >= -MTIME_TOLERANCE_NS;
}
