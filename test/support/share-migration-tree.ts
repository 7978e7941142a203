/**
 * Fixtures of the local share driver's driver-assisted migration tests
 * (test/unit/share-driver-migration-*.test.ts): two local backends in a fresh temporary root per
 * test (useShareMigrationDirs), a source share with every kind of entry a migration must keep,
 * snapshots of a tree and their differences, the driver's state file, and continue run to the end.
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  lchownSync,
  linkSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
  type BigIntStats,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, vi } from 'vitest';
import type { LocalShareBackendConfig, MigrationProgress, MigrationRequest } from '../../functions/drivers/share/driver.js';
import { LocalShareDriver } from '../../functions/drivers/share/local.js';

export const SRC = 'share-11111111-1111-4111-a111-111111111111';
export const DST = 'share-22222222-2222-4222-a222-222222222222';
export const BIG = 6 * 1024 * 1024;
export const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

export let root: string;
export const cfg = (host: string, driver: 'local-a' | 'local-b' = 'local-a'): LocalShareBackendConfig => ({
  host,
  driver,
  root: join(root, host),
  pools: [{ name: 'pool0', totalCapacityGb: 10 }],
  shareBackendName: host.split('@')[1]!,
  protocols: ['NFS', 'CIFS'],
});
export const request = (dest: LocalShareBackendConfig, destName = DST, srcName = SRC): MigrationRequest => ({
  source: { name: srcName, sizeGb: 1, proto: 'NFS' },
  destination: { name: destName, host: `${dest.host}#pool0`, backend: dest },
});

export let a: LocalShareBackendConfig;
export let b: LocalShareBackendConfig;
export let srcDir: string;
export let dstDir: string;
export let statePath: string;

/** Registers the per-test temporary root, the two backends and the 0 ms slice budget. */
export function useShareMigrationDirs(): void {
  beforeEach(async () => {
    root = mkdtempSync(join(tmpdir(), 'ferry-share-migration-'));
    a = cfg('ferry@nfs-a');
    b = cfg('ferry@nfs-b');
    srcDir = join(a.root, SRC);
    dstDir = join(b.root, DST);
    statePath = join(b.root, `${DST}.migration.json`);
    // A budget of 0 ms: every call copies exactly one file (at least one always is), so slicing is deterministic.
    vi.stubEnv('FERRY_SHARE_MIGRATION_SLICE_MS', '0');
  });
  afterEach(() => {
    vi.unstubAllEnvs();
    rmSync(root, { recursive: true, force: true });
  });
}

/** Seconds with a fraction that utimes keeps (microseconds). */
export const t = (s: number) => s + 0.123456;

/** A share with small files, a multi-MiB file, symlinks, a hard link pair, nested dirs, odd modes and times. */
export async function buildSourceShare(): Promise<void> {
  const driver = new LocalShareDriver(a);
  await driver.createShare({ name: SRC, sizeGb: 1, proto: 'NFS', pool: 'pool0' });
  await driver.updateAccess(SRC, [{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.1', accessLevel: 'rw' }]);
  const at = (rel: string) => join(srcDir, rel);
  for (const d of ['a', 'a/b', 'a/b/c', 'empty', 'odd', 'lost+found']) mkdirSync(at(d), { recursive: true });
  for (let i = 0; i < 12; i++) writeFileSync(at(`${['a', 'a/b', 'a/b/c'][i % 3]}/small-${i}.txt`), `small file ${i} `.repeat(i * 37 + 1));
  writeFileSync(at('big.bin'), randomBytes(BIG));
  writeFileSync(at('empty.txt'), '');
  writeFileSync(at('lost+found/fsck-leftover'), 'not part of the share');
  writeFileSync(at('odd/private'), 'private');
  chmodSync(at('odd/private'), 0o600);
  writeFileSync(at('odd/readonly'), 'readonly');
  chmodSync(at('odd/readonly'), 0o444);
  writeFileSync(at('odd/tool.sh'), '#!/bin/sh\necho hi\n');
  chmodSync(at('odd/tool.sh'), 0o750);
  // Another owner where permitted (root): the copy keeps it (the snapshot compares uid and gid).
  if (process.getuid?.() === 0) {
    chownSync(at('odd/tool.sh'), 1234, 2345);
    lchownSync(at('odd'), 1234, 2345);
  }
  writeFileSync(at('odd/sticky-group'), 'g');
  chmodSync(at('odd/sticky-group'), 0o2640);
  writeFileSync(at('hard-1'), 'the same inode twice');
  linkSync(at('hard-1'), at('a/hard-2'));
  symlinkSync('a/small-0.txt', at('link-to-small'));
  symlinkSync('nowhere/at/all', at('a/dangling'));
  // Times: files, then symlinks, then directories deepest first (writing inside changes a directory's mtime).
  utimesSync(at('big.bin'), t(1_000_000_000), t(1_000_000_001));
  utimesSync(at('odd/readonly'), t(1_100_000_000), t(1_100_000_000));
  utimesSync(at('a/small-0.txt'), t(1_200_000_000), t(1_200_000_500));
  lutimesSync(at('link-to-small'), t(1_300_000_000), t(1_300_000_000));
  chmodSync(at('odd'), 0o750);
  chmodSync(at('a/b/c'), 0o711);
  chmodSync(at('empty'), 0o555);
  for (const [i, d] of ['a/b/c', 'a/b', 'a', 'empty', 'odd'].entries()) utimesSync(at(d), t(900_000_000 + i), t(900_000_100 + i));
}

export interface Entry {
  type: 'file' | 'dir' | 'symlink';
  mode: number;
  uid: number;
  gid: number;
  mtimeNs: bigint;
  sha256?: string;
  target?: string;
  /** For hard links: the first name (in sorted walk order) of the same inode. */
  sameAs?: string;
}

/** Everything a migration must preserve, by relative path (top-level lost+found left out). */
export function snapshot(dir: string): Map<string, Entry> {
  const out = new Map<string, Entry>();
  const inodes = new Map<string, string>();
  const walk = (rel: string) => {
    const names = readdirSync(join(dir, rel)).sort();
    for (const name of names) {
      if (rel === '' && name === 'lost+found') continue;
      const path = rel === '' ? name : `${rel}/${name}`;
      const st = lstatSync(join(dir, path), { bigint: true });
      const base = { mode: Number(st.mode) & 0o7777, uid: Number(st.uid), gid: Number(st.gid), mtimeNs: st.mtimeNs };
      if (st.isDirectory()) {
        out.set(path, { type: 'dir', ...base });
        walk(path);
      } else if (st.isSymbolicLink()) {
        out.set(path, { type: 'symlink', ...base, mode: 0, target: readlinkSync(join(dir, path)) });
      } else {
        const key = `${st.ino}`;
        const first = inodes.get(key);
        if (!first) inodes.set(key, path);
        out.set(path, { type: 'file', ...base, sha256: createHash('sha256').update(readFileSync(join(dir, path))).digest('hex'), ...(first ? { sameAs: first } : {}) });
      }
    }
  };
  const rootStat = lstatSync(dir, { bigint: true });
  out.set('', { type: 'dir', mode: Number(rootStat.mode) & 0o7777, uid: Number(rootStat.uid), gid: Number(rootStat.gid), mtimeNs: rootStat.mtimeNs });
  walk('');
  return out;
}

/** Differences between two snapshots, mtimes to within 2 µs (utimes keeps microseconds). */
export function differences(expected: Map<string, Entry>, actual: Map<string, Entry>): string[] {
  const diffs: string[] = [];
  for (const [rel, e] of expected) {
    const got = actual.get(rel);
    if (!got) {
      diffs.push(`missing ${rel}`);
      continue;
    }
    const { mtimeNs: em, ...eRest } = e;
    const { mtimeNs: gm, ...gRest } = got;
    if (JSON.stringify(eRest) !== JSON.stringify(gRest)) diffs.push(`${rel}: expected ${JSON.stringify(eRest)} got ${JSON.stringify(gRest)}`);
    const drift = em - gm;
    if (drift > 2000n || drift < -2000n) diffs.push(`${rel}: mtime ${em} vs ${gm}`);
  }
  for (const rel of actual.keys()) if (!expected.has(rel)) diffs.push(`unexpected ${rel}`);
  return diffs;
}

export function readStateFile(): Record<string, unknown> & { status: string; done: Record<string, unknown>; bytesCopied: number; slices: number } {
  return JSON.parse(readFileSync(statePath, 'utf8'));
}

/** Runs continue until it returns true; every answer and progress along the way. */
export async function continueToEnd(driver: LocalShareDriver, req: MigrationRequest, limit = 500): Promise<{ answers: boolean[]; progress: MigrationProgress[] }> {
  const answers: boolean[] = [];
  const progress: MigrationProgress[] = [];
  for (let i = 0; i < limit; i++) {
    const done = await driver.migrationContinue(req);
    answers.push(done);
    progress.push(await driver.migrationGetProgress(req));
    if (done) return { answers, progress };
  }
  throw new Error(`migration_continue did not finish in ${limit} calls`);
}

export function inodeOf(path: string): { ino: bigint; ctimeNs: bigint } {
  const st: BigIntStats = lstatSync(path, { bigint: true });
  return { ino: st.ino, ctimeNs: st.ctimeNs };
}
