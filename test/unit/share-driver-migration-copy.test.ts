/**
 * Driver-assisted share migration by the local share driver (kind local-a), on real directories:
 * the copy — start, sliced continue (resumable from the state file in a new driver instance and a
 * new process), progress, writes to the source during phase 1, final sync at complete, the slice
 * time budget, a multi-MiB file. Refusals and cancel: share-driver-migration-control.test.ts.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, test, vi } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import type { MigrationProgress } from '../../functions/drivers/share/driver.js';
import { LocalShareDriver } from '../../functions/drivers/share/local.js';
import { SRC, DST, BIG, repoRoot, request, root, a, b, srcDir, dstDir, statePath, useShareMigrationDirs, buildSourceShare, snapshot, differences, readStateFile, continueToEnd, inodeOf } from '../support/share-migration-tree.js';

useShareMigrationDirs();

describe('local share driver: driver-assisted migration, the copy', () => {
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
