/**
 * Driver-assisted share migration by the local share driver (kind local-a), on real directories:
 * start, sliced continue (resumable from the state file in a new driver instance and a new
 * process), progress, final sync at complete, cancel, refusals, idempotency.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
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
  unlinkSync,
  utimesSync,
  writeFileSync,
  type BigIntStats,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import type { LocalShareBackendConfig, MigrationProgress, MigrationRequest } from '../../functions/drivers/share/driver.js';
import { LocalShareDriver } from '../../functions/drivers/share/local.js';

const SRC = 'share-11111111-1111-4111-a111-111111111111';
const DST = 'share-22222222-2222-4222-a222-222222222222';
const BIG = 6 * 1024 * 1024;
const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

let root: string;
const cfg = (host: string, driver: 'local-a' | 'local-b' = 'local-a'): LocalShareBackendConfig => ({
  host,
  driver,
  root: join(root, host),
  pools: [{ name: 'pool0', totalCapacityGb: 10 }],
  shareBackendName: host.split('@')[1]!,
  protocols: ['NFS', 'CIFS'],
});
const request = (dest: LocalShareBackendConfig, destName = DST, srcName = SRC): MigrationRequest => ({
  source: { name: srcName, sizeGb: 1, proto: 'NFS' },
  destination: { name: destName, host: `${dest.host}#pool0`, backend: dest },
});

let a: LocalShareBackendConfig;
let b: LocalShareBackendConfig;
let srcDir: string;
let dstDir: string;
let statePath: string;

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

/** Seconds with a fraction that utimes keeps (microseconds). */
const t = (s: number) => s + 0.123456;

/** A share with small files, a multi-MiB file, symlinks, a hard link pair, nested dirs, odd modes and times. */
async function buildSourceShare(): Promise<void> {
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

interface Entry {
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
function snapshot(dir: string): Map<string, Entry> {
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
function differences(expected: Map<string, Entry>, actual: Map<string, Entry>): string[] {
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

function readStateFile(): Record<string, unknown> & { status: string; done: Record<string, unknown>; bytesCopied: number; slices: number } {
  return JSON.parse(readFileSync(statePath, 'utf8'));
}

/** Runs continue until it returns true; every answer and progress along the way. */
async function continueToEnd(driver: LocalShareDriver, req: MigrationRequest, limit = 500): Promise<{ answers: boolean[]; progress: MigrationProgress[] }> {
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

function inodeOf(path: string): { ino: bigint; ctimeNs: bigint } {
  const st: BigIntStats = lstatSync(path, { bigint: true });
  return { ino: st.ino, ctimeNs: st.ctimeNs };
}

describe('local share driver: driver-assisted migration', () => {
  test('start, sliced continue with monotonic progress, byte- and metadata-identical copy, complete removes the source', async () => {
    await buildSourceShare();
    const driver = new LocalShareDriver(a);
    const req = request(b);
    expect(await driver.migrationGetProgress(req)).toMatchObject({ total_progress: 0 });

    await driver.migrationStart(req);
    expect(lstatSync(dstDir).isDirectory()).toBe(true);
    expect(lstatSync(dstDir).mode & 0o777).toBe(0o755);
    const started = readStateFile();
    expect(started).toMatchObject({ status: 'copying', source: { host: 'ferry@nfs-a', name: SRC }, destination: { host: 'ferry@nfs-b', name: DST } });
    expect(started.filesTotal).toBe(19); // 12 small, big, empty, 4 in odd/, hard-1 (hard-2 is a link)
    expect(started.bytesTotal).toBeGreaterThan(BIG);
    await driver.migrationStart(req); // idempotent
    expect(readStateFile().startedAt).toBe(started.startedAt);

    const before = snapshot(srcDir);
    const { answers, progress } = await continueToEnd(driver, req);
    expect(answers.length).toBe(19); // one file per slice; links and directories come with the last
    expect(answers.slice(0, -1).every((x) => x === false)).toBe(true);
    expect(answers.at(-1)).toBe(true);
    const totals = progress.map((p) => p.total_progress);
    for (let i = 1; i < totals.length; i++) expect(totals[i]!).toBeGreaterThanOrEqual(totals[i - 1]!);
    expect(totals.slice(0, -1).every((x) => x < 100)).toBe(true);
    expect(progress.at(-1)).toMatchObject({ total_progress: 100, files_done: 19, files_total: 19 });
    expect(progress.at(-1)!.bytes_done).toBe(progress.at(-1)!.bytes_total);
    expect(progress.some((p) => p.total_progress > 0 && p.total_progress < 100)).toBe(true);

    // The destination is an exact image: contents, modes, owners, times, symlinks, hard links.
    expect(differences(before, snapshot(dstDir))).toEqual([]);
    expect(lstatSync(join(dstDir, 'hard-1')).ino).toBe(lstatSync(join(dstDir, 'a/hard-2')).ino);
    expect(lstatSync(join(dstDir, 'link-to-small')).isSymbolicLink()).toBe(true);
    if (process.getuid?.() === 0) expect(lstatSync(join(dstDir, 'odd/tool.sh'))).toMatchObject({ uid: 1234, gid: 2345, mode: 0o100750 });
    expect(existsSync(join(dstDir, 'lost+found'))).toBe(false);
    // The state is beside the destination share, not in it.
    expect(readdirSync(dstDir)).not.toContain(`${DST}.migration.json`);
    const afterPhase1 = readStateFile();
    expect(afterPhase1).toMatchObject({ status: 'phase1-done' });
    expect(afterPhase1.bytesCopied).toBe(started.bytesTotal);

    // Idempotent after done: nothing copied again.
    expect(await driver.migrationContinue(req)).toBe(true);
    expect(readStateFile().bytesCopied).toBe(afterPhase1.bytesCopied);
    expect(await driver.migrationGetProgress(req)).toMatchObject({ total_progress: 100 });

    expect(await driver.migrationComplete(req)).toEqual([dstDir]);
    expect(existsSync(srcDir)).toBe(false);
    expect(existsSync(srcDir + '.access.json')).toBe(false);
    expect(existsSync(statePath)).toBe(false);
    expect(differences(before, snapshot(dstDir))).toEqual([]);
    // Idempotent: completed before, the path again.
    expect(await driver.migrationComplete(req)).toEqual([dstDir]);
    // A completed migration cannot be cancelled, and cancel does not touch the destination.
    await expect(driver.migrationCancel(req)).rejects.toBeInstanceOf(DriverError);
    expect(differences(before, snapshot(dstDir))).toEqual([]);
  });

  test('a new driver instance and a new process resume without copying finished files again', async () => {
    await buildSourceShare();
    const req = request(b);
    const first = new LocalShareDriver(a);
    await first.migrationStart(req);
    // A few slices in this instance, stopping before the end.
    let progress: MigrationProgress = await first.migrationGetProgress(req);
    for (let i = 0; i < 3; i++) {
      expect(await first.migrationContinue(req)).toBe(false);
      progress = await first.migrationGetProgress(req);
    }
    expect(progress.total_progress).toBeLessThan(100);
    const partial = readStateFile();
    const finishedFiles = Object.keys(partial.done);
    expect(finishedFiles.length).toBeGreaterThanOrEqual(3);
    const identities = new Map(finishedFiles.map((rel) => [rel, inodeOf(join(dstDir, rel))]));

    // One slice in another process (tsx runs the driver from source), with the same directories.
    const script = join(root, 'continue.mjs');
    writeFileSync(
      script,
      [
        `import { LocalShareDriver } from ${JSON.stringify(pathToFileURL(join(repoRoot, 'functions/drivers/share/local.ts')).href)};`,
        `const [config, req] = process.argv.slice(2).map((x) => JSON.parse(x));`,
        `const done = await new LocalShareDriver(config).migrationContinue(req);`,
        `process.stdout.write(JSON.stringify({ done, pid: process.pid }));`,
      ].join('\n'),
    );
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', script, JSON.stringify(a), JSON.stringify(req)], {
      cwd: repoRoot,
      env: { ...process.env, FERRY_SHARE_MIGRATION_SLICE_MS: '0' },
    });
    const child = JSON.parse(stdout) as { done: boolean; pid: number };
    expect(child.pid).not.toBe(process.pid);
    const afterChild = readStateFile();
    expect(afterChild.slices).toBe(partial.slices + 1);
    expect(child.done).toBe(false);
    expect(Object.keys(afterChild.done)).toEqual([...finishedFiles, afterChild.cursor]);

    // Then a fresh instance in this process finishes.
    const second = new LocalShareDriver(a);
    expect((await continueToEnd(second, req)).answers).toHaveLength(19 - 4);
    const final = readStateFile();
    expect(final.status).toBe('phase1-done');
    // Every byte was copied exactly once over all the slices, in three drivers.
    expect(final.bytesCopied).toBe(final.bytesTotal);
    expect(final.filesCopied).toBe(19);
    // And the files the first instance finished are the very same files (same inode, untouched).
    for (const [rel, id] of identities) expect(inodeOf(join(dstDir, rel))).toEqual(id);
    expect(differences(snapshot(srcDir), snapshot(dstDir))).toEqual([]);
  });

  test('writes to the writable source during phase 1 and before complete reach the destination; removals too', async () => {
    await buildSourceShare();
    const driver = new LocalShareDriver(a);
    const req = request(b);
    await driver.migrationStart(req);
    // Change a file the copy has already finished, between two slices.
    expect(await driver.migrationContinue(req)).toBe(false);
    const firstDone = Object.keys(readStateFile().done)[0]!;
    writeFileSync(join(srcDir, firstDone), 'changed during phase 1');
    await continueToEnd(driver, req);
    expect(readFileSync(join(dstDir, firstDone), 'utf8')).toBe('changed during phase 1');

    // After phase 1: new, changed, removed and retyped entries on the source.
    const at = (rel: string) => join(srcDir, rel);
    mkdirSync(at('new-dir/deeper'), { recursive: true });
    writeFileSync(at('new-dir/deeper/new.txt'), 'new after phase 1');
    writeFileSync(at('a/small-3.txt'), readFileSync(at('a/small-3.txt'), 'utf8') + ' appended');
    const sameSize = readFileSync(at('a/b/small-4.txt'));
    sameSize[0] = sameSize[0]! ^ 0x20;
    writeFileSync(at('a/b/small-4.txt'), sameSize); // same size, new mtime
    chmodSync(at('odd/private'), 0o640); // mode only
    unlinkSync(at('a/b/c/small-2.txt'));
    rmSync(at('a/b/c'), { recursive: true, force: true });
    unlinkSync(at('empty.txt'));
    mkdirSync(at('empty.txt')); // a file became a directory
    unlinkSync(at('link-to-small'));
    symlinkSync('big.bin', at('link-to-small')); // retargeted
    unlinkSync(at('a/hard-2')); // the hard link pair is a single file now
    writeFileSync(at('big.bin'), randomBytes(1024), { flag: 'a' });
    chmodSync(at('empty'), 0o755);
    writeFileSync(at('empty/now-not'), 'x');
    chmodSync(at('empty'), 0o555);

    const expected = snapshot(srcDir);
    const copiedBefore = readStateFile().bytesCopied;
    expect(await driver.migrationComplete(req)).toEqual([dstDir]);
    expect(differences(expected, snapshot(dstDir))).toEqual([]);
    expect(existsSync(join(dstDir, 'a/b/c'))).toBe(false);
    expect(lstatSync(join(dstDir, 'empty.txt')).isDirectory()).toBe(true);
    expect(readlinkSync(join(dstDir, 'link-to-small'))).toBe('big.bin');
    expect(lstatSync(join(dstDir, 'hard-1')).nlink).toBe(1);
    expect(existsSync(srcDir)).toBe(false);
    expect(existsSync(statePath)).toBe(false);
    expect(copiedBefore).toBeGreaterThan(0);
  });

  // Refusals before start, of bad names, to the same backend, and by a kind that declares no
  // driver-assisted migration are the contract's (test/contracts/share-driver.ts).
  test('complete refuses before phase 1 is done', async () => {
    await buildSourceShare();
    const driver = new LocalShareDriver(a);
    const req = request(b);
    await driver.migrationStart(req);
    await expect(driver.migrationComplete(req)).rejects.toThrow(/phase 1/);
    expect(await driver.migrationContinue(req)).toBe(false);
    await expect(driver.migrationComplete(req)).rejects.toThrow(/phase 1/);
    // Refusing changed nothing: the source is whole, the migration goes on.
    expect(existsSync(join(srcDir, 'big.bin'))).toBe(true);
    expect(readStateFile().status).toBe('copying');
    await continueToEnd(driver, req);
    expect(await driver.migrationComplete(req)).toEqual([dstDir]);
  });

  test('cancel removes the destination and the state, leaves the source intact; idempotent', async () => {
    await buildSourceShare();
    const driver = new LocalShareDriver(a);
    const req = request(b);
    const before = snapshot(srcDir);
    await driver.migrationCancel(req); // nothing started: fine
    await driver.migrationStart(req);
    expect(await driver.migrationContinue(req)).toBe(false);
    expect(await driver.migrationContinue(req)).toBe(false);
    await driver.migrationCancel(req);
    expect(existsSync(dstDir)).toBe(false);
    expect(existsSync(statePath)).toBe(false);
    expect(readdirSync(b.root)).toEqual([]);
    expect(differences(before, snapshot(srcDir))).toEqual([]);
    expect(existsSync(srcDir + '.access.json')).toBe(true);
    await driver.migrationCancel(req);
    expect(await driver.migrationGetProgress(req)).toMatchObject({ total_progress: 0 });
    // Cancel after phase 1 as well, then a new start begins from nothing.
    await driver.migrationStart(req);
    await continueToEnd(driver, req);
    await driver.migrationCancel(req);
    expect(existsSync(dstDir)).toBe(false);
    await driver.migrationStart(req);
    expect(readStateFile()).toMatchObject({ status: 'copying', bytesCopied: 0 });
  });

  test('refusals: another kind, a destination holding data, another migration state', async () => {
    await buildSourceShare();
    const driver = new LocalShareDriver(a);
    const c = cfg('ferry@nfs-c', 'local-b');
    await expect(driver.migrationStart(request(c))).rejects.toBeInstanceOf(DriverError); // other kind
    await expect(driver.migrationStart(request(cfg('ferry@nfs-a')))).rejects.toBeInstanceOf(DriverError); // same host
    await expect(driver.migrationStart(request(b, '../escape'))).rejects.toBeInstanceOf(DriverError);
    expect(existsSync(b.root)).toBe(false); // nothing was written anywhere
    // Cancel and progress of a migration that could never start: nothing to do, so no error (a rollback may ask).
    await driver.migrationCancel(request(c));
    expect(await driver.migrationGetProgress(request(c))).toMatchObject({ total_progress: 0 });
    await expect(driver.migrationCancel(request(b, '../escape'))).rejects.toBeInstanceOf(DriverError);

    // A destination directory with data and no migration state is somebody's share: not overwritten.
    mkdirSync(dstDir, { recursive: true });
    writeFileSync(join(dstDir, 'precious'), 'keep me');
    await expect(driver.migrationStart(request(b))).rejects.toThrow(/not an empty directory/);
    await expect(driver.migrationCancel(request(b))).rejects.toBeInstanceOf(DriverError);
    expect(readFileSync(join(dstDir, 'precious'), 'utf8')).toBe('keep me');
    rmSync(dstDir, { recursive: true });

    // An empty one (created ahead by the caller) is adopted.
    mkdirSync(dstDir, { recursive: true });
    await driver.migrationStart(request(b));
    // Another source into the same destination share is refused while this state is there.
    const other = 'share-33333333-3333-4333-a333-333333333333';
    await driver.createShare({ name: other, sizeGb: 1, proto: 'NFS', pool: 'pool0' });
    await expect(driver.migrationStart(request(b, DST, other))).rejects.toThrow(/holds the migration of/);
    // A missing source share is refused.
    await expect(driver.migrationStart(request(b, 'share-44444444-4444-4444-a444-444444444444', 'share-55555555-5555-4555-a555-555555555555'))).rejects.toThrow(/does not exist/);
  });

  test('the time budget: the default (2 s) copies this small share in one call, a tiny one needs several', async () => {
    await buildSourceShare();
    vi.stubEnv('FERRY_SHARE_MIGRATION_SLICE_MS', '');
    const driver = new LocalShareDriver(a);
    await driver.migrationStart(request(b));
    expect(await driver.migrationContinue(request(b))).toBe(true);
    expect(readStateFile().slices).toBe(1);
    await driver.migrationCancel(request(b));
    vi.stubEnv('FERRY_SHARE_MIGRATION_SLICE_MS', '1');
    await driver.migrationStart(request(b));
    const { answers } = await continueToEnd(driver, request(b));
    expect(answers.length).toBeGreaterThan(1);
    expect(readStateFile()).toMatchObject({ filesCopied: 19, slices: answers.length });
  });

  test('a multi-MiB file alone still progresses slice by slice and keeps its bytes', async () => {
    const driver = new LocalShareDriver(a);
    await driver.createShare({ name: SRC, sizeGb: 1, proto: 'NFS', pool: 'pool0' });
    const data = randomBytes(BIG);
    writeFileSync(join(srcDir, 'only.bin'), data);
    for (let i = 0; i < 5; i++) writeFileSync(join(srcDir, `z-${i}`), `tail ${i}`);
    const req = request(b);
    await driver.migrationStart(req);
    const { answers, progress } = await continueToEnd(driver, req);
    expect(answers.length).toBeGreaterThanOrEqual(2);
    expect(progress[0]!.total_progress).toBeGreaterThanOrEqual(90); // the big file first (plan order), then the small ones
    expect(progress[0]!.total_progress).toBeLessThan(100);
    expect(readFileSync(join(dstDir, 'only.bin')).equals(data)).toBe(true);
  });
});
