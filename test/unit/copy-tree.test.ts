/**
 * The copy engine in-process, without DynamoDB: metadata, lost+found, special files, verification,
 * progress throttling, cancel within a file, and resume from the journal.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, existsSync, linkSync, lutimesSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { eventually } from '../support/poll.js';
import { CopySourceChanged, CopyVerificationFailed } from '../../functions/copy/errors.js';
import { copyFileVerified, singleThreadState } from '../../functions/copy/file-copy.js';
import { planCopy } from '../../functions/copy/tree.js';
import { journalName } from '../../functions/copy/journal.js';
import type { CopyProgress, ProgressSink } from '../../functions/copy/progress.js';
import { copyTree } from '../../functions/copy/worker.js';
import { clearFault, clearFaults, injectFault } from '../../functions/core/faults.js';
import { bigStat, content, sameTime, tempDir, treeDigest, writeManyFiles } from '../support/copy-fixtures.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  clearFaults();
  for (const c of cleanups.splice(0)) c();
});

function workspace(): { src: string; dst: string } {
  const dir = tempDir('copy-unit');
  cleanups.push(dir.remove);
  const src = join(dir.path, 'src');
  mkdirSync(src);
  return { src, dst: join(dir.path, 'dst') };
}

/** Records every report; answers cancel once `cancelWhen` holds. */
class RecordingSink implements ProgressSink {
  reports: CopyProgress[] = [];
  constructor(private readonly cancelWhen: (p: CopyProgress) => boolean = () => false) {}
  async report(progress: CopyProgress) {
    this.reports.push(progress);
    return { cancelRequested: this.cancelWhen(progress) };
  }
}

const OLD = new Date('2001-02-03T04:05:06.789Z');
const OLDER = new Date('1999-12-31T23:59:58.123Z');

describe('metadata', () => {
  test('mode, owner, times, symlinks (never followed) and hard links are kept', async () => {
    // Prepare
    const { src, dst } = workspace();
    mkdirSync(join(src, 'private'));
    writeFileSync(join(src, 'private', 'secret.txt'), 'secret');
    chmodSync(join(src, 'private', 'secret.txt'), 0o640);
    chownSync(join(src, 'private', 'secret.txt'), 1234, 5678);
    writeFileSync(join(src, 'tool'), 'run me');
    chmodSync(join(src, 'tool'), 0o4755);
    symlinkSync('private/secret.txt', join(src, 'relative-link'));
    symlinkSync('/etc/hostname', join(src, 'absolute-link'));
    symlinkSync('nowhere', join(src, 'dangling-link'));
    lutimesSync(join(src, 'relative-link'), OLDER, OLDER);
    writeFileSync(join(src, 'data.bin'), content(10_000, 1));
    linkSync(join(src, 'data.bin'), join(src, 'private', 'same-data.bin'));
    utimesSync(join(src, 'tool'), OLDER, OLD);
    utimesSync(join(src, 'private', 'secret.txt'), OLDER, OLD);
    chmodSync(join(src, 'private'), 0o750);
    utimesSync(join(src, 'private'), OLDER, OLD);

    // Act
    const result = await copyTree({ source: src, destination: dst, operationId: 'meta' });

    // Assess
    expect(result.status).toBe('completed');
    const secret = bigStat(join(dst, 'private', 'secret.txt'));
    expect(Number(secret.mode) & 0o7777).toBe(0o640);
    expect([secret.uid, secret.gid]).toEqual([1234n, 5678n]);
    expect(sameTime(secret.mtimeNs, bigStat(join(src, 'private', 'secret.txt')).mtimeNs)).toBe(true);
    // The source's atime moves when it is read (relatime); the destination keeps the one walked.
    expect(sameTime(secret.atimeNs, BigInt(OLDER.getTime()) * 1_000_000n)).toBe(true);
    expect(Number(bigStat(join(dst, 'tool')).mode) & 0o7777).toBe(0o4755);
    expect(sameTime(bigStat(join(dst, 'tool')).mtimeNs, BigInt(OLD.getTime()) * 1_000_000n)).toBe(true);
    // Directory times were set after everything inside it was created.
    const privateDir = bigStat(join(dst, 'private'));
    expect(Number(privateDir.mode) & 0o7777).toBe(0o750);
    expect(sameTime(privateDir.mtimeNs, BigInt(OLD.getTime()) * 1_000_000n)).toBe(true);
    expect(sameTime(bigStat(dst).mtimeNs, bigStat(src).mtimeNs)).toBe(true);
    // Symlinks are links with the same targets, dangling ones included, with their own times.
    const digest = treeDigest(dst);
    expect(digest.get('relative-link')).toBe('-> private/secret.txt');
    expect(digest.get('absolute-link')).toBe('-> /etc/hostname');
    expect(digest.get('dangling-link')).toBe('-> nowhere');
    expect(bigStat(join(dst, 'relative-link')).isSymbolicLink()).toBe(true);
    expect(sameTime(bigStat(join(dst, 'relative-link')).mtimeNs, BigInt(OLDER.getTime()) * 1_000_000n)).toBe(true);
    // A hard-linked file is one inode in the destination too, copied once.
    expect(bigStat(join(dst, 'data.bin')).ino).toBe(bigStat(join(dst, 'private', 'same-data.bin')).ino);
    expect(bigStat(join(dst, 'data.bin')).nlink).toBe(2n);
    expect(result.progress.filesTotal).toBe(3);
    expect(result.ownerPreserved).toBe(true);
  });

  test('lost+found is skipped at the top level only; special files are skipped with a note', async () => {
    // Prepare
    const { src, dst } = workspace();
    mkdirSync(join(src, 'lost+found'));
    writeFileSync(join(src, 'lost+found', '#1234'), 'orphan');
    mkdirSync(join(src, 'app', 'lost+found'), { recursive: true });
    writeFileSync(join(src, 'app', 'lost+found', 'kept'), 'tenant data');
    execFileSync('mkfifo', [join(src, 'app', 'pipe')]);

    // Act
    const result = await copyTree({ source: src, destination: dst, operationId: 'skip' });

    // Assess
    expect(result.status).toBe('completed');
    expect(existsSync(join(dst, 'lost+found'))).toBe(false);
    expect(existsSync(join(dst, 'app', 'lost+found', 'kept'))).toBe(true);
    expect(existsSync(join(dst, 'app', 'pipe'))).toBe(false);
    expect(result.skipped).toEqual([{ rel: 'app/pipe', type: 'fifo' }]);
  });
});

describe('content and verification', () => {
  test('the destination is byte-identical, large files and empty ones included, and the journal is gone', async () => {
    // Prepare
    const { src, dst } = workspace();
    writeManyFiles(src, 120, 3000);
    writeFileSync(join(src, 'large.bin'), content(5 * 1024 * 1024 + 17, 7));
    writeFileSync(join(src, 'empty'), '');

    // Act
    const result = await copyTree({ source: src, destination: dst, operationId: 'bytes', chunkBytes: 64 * 1024 });

    // Assess
    expect(result.status).toBe('completed');
    expect(treeDigest(dst)).toEqual(treeDigest(src));
    expect(result.progress).toMatchObject({ filesDone: 122, filesTotal: 122, bytesDone: result.progress.bytesTotal });
    expect(readdirSync(dst)).not.toContain(journalName('bytes'));
  });

  test('a destination corrupted between write and verify fails the copy, naming the file', async () => {
    // Prepare
    const { src, dst } = workspace();
    writeManyFiles(src, 20, 5000);

    // Act
    const result = await copyTree({ source: src, destination: dst, operationId: 'corrupt', testHooks: { corruptBeforeVerify: ['d3/f13.bin'] } });

    // Assess
    expect(result.status).toBe('failed');
    expect(result.error).toBeInstanceOf(Error);
    expect(result.error!.name).toBe(CopyVerificationFailed.name);
    expect(result.error!.message).toContain('d3/f13.bin');
    // Both digests, of the whole source and of the whole (corrupted) destination.
    const source = readFileSync(join(src, 'd3', 'f13.bin'));
    const corrupted = Buffer.from(source);
    corrupted[0] = corrupted[0]! ^ 0xff;
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    expect(result.error!.message).toContain(`source sha256 ${sha(source)}, destination sha256 ${sha(corrupted)}`);
    expect(existsSync(join(dst, 'd3', 'f13.bin'))).toBe(false);
  });

  test('a destination cut short between write and verify fails the copy, naming the file, and leaves no partial file', async () => {
    // Prepare: a file of several chunks, so the cut is inside the file.
    const { src, dst } = workspace();
    writeManyFiles(src, 10, 2000);
    writeFileSync(join(src, 'big.bin'), content(3 * 256 * 1024, 9));

    // Act
    const result = await copyTree({ source: src, destination: dst, operationId: 'truncated', threads: 1, testHooks: { truncateBeforeVerify: ['big.bin'] } });

    // Assess
    expect(result.status).toBe('failed');
    expect(result.error!.name).toBe(CopyVerificationFailed.name);
    expect(result.error!.message).toContain('Data corrupted while copying big.bin');
    expect(existsSync(join(dst, 'big.bin'))).toBe(false);
  });

  test('a source written during its copy fails the copy with the reason, leaving no partial file and the source as written', async () => {
    // Prepare
    const { src, dst } = workspace();
    writeManyFiles(src, 10, 2000);
    const original = content(2 * 256 * 1024 + 7, 10);
    writeFileSync(join(src, 'live.db'), original);

    // Act: the hook appends to live.db after its first chunk is written.
    const result = await copyTree({ source: src, destination: dst, operationId: 'live', threads: 1, testHooks: { changeSourceDuringCopy: ['live.db'] } });

    // Assess
    expect(result.status).toBe('failed');
    expect(result.error!.name).toBe(CopySourceChanged.name);
    expect(result.error!.message).toMatch(/^live\.db changed on the source during the copy \(when the copy began: 524295 bytes, .*after reading 524318 bytes: 524318 bytes/);
    expect(existsSync(join(dst, 'live.db'))).toBe(false);
    expect(readFileSync(join(src, 'live.db')).subarray(0, original.length).equals(original)).toBe(true);
  });

  test('a source changed between the walk and its copy fails the copy too', async () => {
    // Prepare: the walk sees one size; the file is rewritten before the thread opens it.
    const { src, dst } = workspace();
    writeFileSync(join(src, 'a.txt'), 'first');
    const plan = await planCopy(src);
    writeFileSync(join(src, 'a.txt'), 'rewritten, longer');
    const file = plan.files.find((f) => f.rel === 'a.txt')!;

    // Act
    const copy = () =>
      copyFileVerified(
        { index: 0, rel: 'a.txt', src: join(src, 'a.txt'), dst: join(dst, 'a.txt'), mode: file.mode, uid: file.uid, gid: file.gid, atime: 0, mtime: 0, size: file.size, mtimeNs: String(file.mtimeNs) },
        singleThreadState(() => undefined),
      );

    // Assess
    expect(copy).toThrow(CopySourceChanged);
    expect(copy).toThrow(/when the copy began: 5 bytes/);
    expect(existsSync(join(dst, 'a.txt'))).toBe(false);
  });

  test('the journal records each finished file by path, size and source mtime, with no digest of its content', async () => {
    // Prepare: several chunks and a partial last one; the smaller file fails verification, so the
    // run stops with the journal in place.
    const { src, dst } = workspace();
    const data = content(3 * 256 * 1024 + 12_345, 21);
    writeFileSync(join(src, 'multi.bin'), data);
    writeFileSync(join(src, 'small.bin'), content(10, 22));
    const mtimeNs = String(statSync(join(src, 'multi.bin'), { bigint: true }).mtimeNs);

    // Act
    const result = await copyTree({ source: src, destination: dst, operationId: 'digest', threads: 1, testHooks: { corruptBeforeVerify: ['small.bin'] } });

    // Assess: what resume checks, and nothing computed over the bytes (the comparison is the check).
    expect(result.status).toBe('failed');
    const lines = readFileSync(join(dst, journalName('digest')), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as unknown);
    expect(lines).toEqual([{ path: 'multi.bin', size: data.length, mtimeNs }]);
  });
});

describe('the copy_file fault point', () => {
  test('fail: the copy fails naming the file, and nothing of it is written', async () => {
    // Prepare
    const { src, dst } = workspace();
    writeManyFiles(src, 12, 3000);
    writeFileSync(join(src, 'big.bin'), content(100_000, 4));
    injectFault({ kind: 'copy', method: 'copy_file', mode: 'fail', times: 1 });

    // Act
    const result = await copyTree({ source: src, destination: dst, operationId: 'fault-fail' });

    // Assess
    expect(result.status).toBe('failed');
    expect(result.error!.message).toBe('Cannot copy big.bin: injected fault: copy.copy_file on fault-fail');
    expect(existsSync(join(dst, 'big.bin'))).toBe(false);
  });

  test('a fault for another operation (backend = operation id) does not apply', async () => {
    // Prepare
    const { src, dst } = workspace();
    writeManyFiles(src, 5, 100);
    injectFault({ kind: 'copy', backend: 'some-other-op', method: 'copy_file', mode: 'fail' });

    // Act
    const result = await copyTree({ source: src, destination: dst, operationId: 'fault-mine' });

    // Assess
    expect(result.status).toBe('completed');
  });

  test('hang holds that file until the fault is cleared; the others are copied meanwhile', async () => {
    // Prepare
    const { src, dst } = workspace();
    writeManyFiles(src, 40, 2000);
    writeFileSync(join(src, 'held.bin'), content(64_000, 5));
    const id = injectFault({ kind: 'copy', method: 'copy_file', mode: 'hang', times: 1 });

    // Act
    const running = copyTree({ source: src, destination: dst, operationId: 'fault-hang', threads: 2 });
    const copied = () => (existsSync(dst) ? readdirSync(dst, { recursive: true }).filter((f) => String(f).endsWith('.bin')).length : 0);
    // The first batch waits behind the held file; the second batch (other lanes) goes through.
    await eventually((note) => note(copied()) >= 5 || undefined, 'five files copied while held.bin is held', { timeoutMs: 10_000, intervalMs: 10 });
    const heldWhileHanging = existsSync(join(dst, 'held.bin'));
    clearFault(id);
    const result = await running;

    // Assess
    expect(heldWhileHanging).toBe(false);
    expect(result.status).toBe('completed');
    expect(treeDigest(dst)).toEqual(treeDigest(src));
  });

  test('hang does not hold up a cancel', async () => {
    // Prepare
    const { src, dst } = workspace();
    writeManyFiles(src, 4, 2000);
    injectFault({ kind: 'copy', method: 'copy_file', mode: 'hang' });
    const controller = new AbortController();

    // Act
    const running = copyTree({ source: src, destination: dst, operationId: 'fault-cancel', signal: controller.signal });
    await new Promise((r) => setTimeout(r, 200));
    controller.abort();
    const result = await running;

    // Assess
    expect(result.status).toBe('cancelled');
    expect(result.progress.filesDone).toBe(0);
  });
});

describe('progress and cancel', () => {
  test('progress reports are throttled: one per interval, not one per file', async () => {
    // Prepare
    const { src, dst } = workspace();
    writeManyFiles(src, 400, 2000);
    const sink = new RecordingSink();

    // Act
    const result = await copyTree({ source: src, destination: dst, operationId: 'throttle', sink, progressIntervalMs: 60_000 });

    // Assess: the first report (totals) and nothing more within the interval.
    expect(result.status).toBe('completed');
    expect(sink.reports.length).toBe(1);
    expect(sink.reports[0]).toMatchObject({ filesTotal: 400, bytesTotal: 800_000 });
  });

  test('cancel during a large file stops inside it and leaves no partial file', async () => {
    // Prepare: 32 MiB at 8 MiB/s takes 4 s; the cancel arrives once the file is under way.
    const { src, dst } = workspace();
    writeFileSync(join(src, 'huge.bin'), content(32 * 1024 * 1024, 3));
    writeFileSync(join(src, 'small.txt'), 'small');
    const sink = new RecordingSink((p) => (p.currentFileBytes ?? 0) > 0);

    // Act
    const result = await copyTree({ source: src, destination: dst, operationId: 'cancel', sink, progressIntervalMs: 100, bytesPerSecond: 8 * 1024 * 1024, threads: 1 });

    // Assess
    expect(result.status).toBe('cancelled');
    const last = sink.reports.at(-1)!;
    expect(last.currentFile).toBe('huge.bin');
    expect(last.currentFileBytes).toBeLessThan(32 * 1024 * 1024);
    expect(result.progress.bytesDone).toBeLessThan(32 * 1024 * 1024);
    expect(existsSync(join(dst, 'huge.bin'))).toBe(false);
  });
});

describe('resume', () => {
  test('a second run skips the files the first one finished (same inodes) and completes the tree', async () => {
    // Prepare: the first run fails on one file after finishing others.
    const { src, dst } = workspace();
    const names = writeManyFiles(src, 60, 4000);
    writeFileSync(join(src, 'last-by-size.txt'), 'x');
    const first = await copyTree({ source: src, destination: dst, operationId: 'resume', threads: 1, testHooks: { corruptBeforeVerify: ['last-by-size.txt'] } });
    expect(first.status).toBe('failed');
    expect(existsSync(join(dst, journalName('resume')))).toBe(true);
    const inodes = new Map(names.map((n) => [n, bigStat(join(dst, n)).ino]));

    // Act
    const second = await copyTree({ source: src, destination: dst, operationId: 'resume' });

    // Assess
    expect(second.status).toBe('completed');
    expect(second.progress.filesResumed).toBe(60);
    for (const n of names) expect(bigStat(join(dst, n)).ino).toBe(inodes.get(n));
    expect(treeDigest(dst)).toEqual(treeDigest(src));
    expect(existsSync(join(dst, journalName('resume')))).toBe(false);
  });

  test('a journaled file whose source changed since is copied again', async () => {
    // Prepare
    const { src, dst } = workspace();
    writeManyFiles(src, 5, 1000);
    writeFileSync(join(src, 'zz.txt'), 'z');
    await copyTree({ source: src, destination: dst, operationId: 'changed', threads: 1, testHooks: { corruptBeforeVerify: ['zz.txt'] } });
    writeFileSync(join(src, 'd0', 'f0.bin'), 'rewritten after the first run');

    // Act
    const second = await copyTree({ source: src, destination: dst, operationId: 'changed' });

    // Assess
    expect(second.status).toBe('completed');
    expect(second.progress.filesResumed).toBe(4);
    expect(treeDigest(dst)).toEqual(treeDigest(src));
  });
});
