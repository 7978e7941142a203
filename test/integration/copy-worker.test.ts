/**
 * The copy worker with its operation record in DynamoDB Local: the record through a whole copy,
 * throttled progress writes, cancel through the record, a stale worker fenced off by generation,
 * and crash-resume of the real process (node --import tsx functions/copy/main.ts, killed -9).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { dynamoRequests } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { CopyLeaseLost } from '../../functions/copy/errors.js';
import { journalName, type JournalEntry } from '../../functions/copy/journal.js';
import { EXIT_CODES, main } from '../../functions/copy/main.js';
import {
  claimCopyOperation,
  getCopyOperation,
  manilaCopyProgress,
  recordCopyProgress,
  requestCopyCancel,
  type CopyOperationRecord,
} from '../../functions/copy/progress.js';
import { runCopyOperation } from '../../functions/copy/operation.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';
import { eventually } from '../support/poll.js';
import { bigStat, content, tempDir, treeDigest, writeManyFiles } from '../support/copy-fixtures.js';

let ddb: LocalDynamo;
beforeAll(async () => {
  ddb = await useLocalDynamo();
});
afterAll(async () => ddb?.stop());

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

let nextId = 1;
function workspace(): { src: string; dst: string; operationId: string } {
  const dir = tempDir('copy-int');
  cleanups.push(dir.remove);
  const src = join(dir.path, 'src');
  mkdirSync(src);
  return { src, dst: join(dir.path, 'dst'), operationId: `op-${process.pid}-${nextId++}` };
}

function updateRequests(): number {
  return dynamoRequests().byCommand.UpdateCommand ?? 0;
}

describe('the operation record', () => {
  test('a copy records running, then completed with totals; progress writes are throttled, not per file', async () => {
    // Prepare
    const { src, dst, operationId } = workspace();
    writeManyFiles(src, 300, 3000);
    const before = updateRequests();
    const t0 = performance.now();

    // Act
    const outcome = await runCopyOperation({ operationId, source: src, destination: dst, progressIntervalMs: 200 });

    // Assess
    const elapsedMs = performance.now() - t0;
    expect(outcome.status).toBe('completed');
    const record = (await getCopyOperation(operationId))!;
    expect(record).toMatchObject({ status: 'completed', generation: 1, filesTotal: 300, filesDone: 300, bytesTotal: 900_000, bytesDone: 900_000, totalProgress: 100 });
    expect(record.finishedAt).toBeDefined();
    expect(manilaCopyProgress(record)).toEqual({ total_progress: 100 });
    // claim + first report + one per interval elapsed + final: far fewer than 300 files.
    const writes = updateRequests() - before;
    expect(writes).toBeLessThanOrEqual(3 + Math.ceil(elapsedMs / 200));
    expect(treeDigest(dst)).toEqual(treeDigest(src));
  });

  test('cancel through the record stops within the large file and records cancelled', async () => {
    // Prepare: 32 MiB at 8 MiB/s, so the copy is still inside the file when the cancel lands.
    const { src, dst, operationId } = workspace();
    writeFileSync(join(src, 'huge.bin'), content(32 * 1024 * 1024, 9));
    const running = runCopyOperation({ operationId, source: src, destination: dst, progressIntervalMs: 100, bytesPerSecond: 8 * 1024 * 1024 });
    await eventually(async () => ((await getCopyOperation(operationId))?.currentFileBytes ?? 0) > 0, 'the copy to be inside huge.bin', { intervalMs: 20 });

    // Act
    await requestCopyCancel(operationId);
    const outcome = await running;

    // Assess
    expect(outcome.status).toBe('cancelled');
    const record = (await getCopyOperation(operationId))!;
    expect(record.status).toBe('cancelled');
    expect(record.cancelRequested).toBe(true);
    expect(record.bytesDone!).toBeLessThan(32 * 1024 * 1024);
    expect(existsSync(join(dst, 'huge.bin'))).toBe(false);
  });

  test('a cancelled operation is not started again', async () => {
    // Prepare
    const { src, dst, operationId } = workspace();
    writeManyFiles(src, 3, 100);
    await claimCopyOperation({ operationId, source: src, destination: dst });
    await requestCopyCancel(operationId);
    const first = await runCopyOperation({ operationId, source: src, destination: dst });

    // Act
    const second = await runCopyOperation({ operationId, source: src, destination: dst });

    // Assess
    expect(first.status).toBe('cancelled');
    expect(second.status).toBe('cancelled');
    expect(second.record?.generation).toBe(2);
    expect(existsSync(join(dst, 'd0'))).toBe(false);
  });

  test('bad configuration exits 2 without touching anything', async () => {
    // Act
    const code = await main({ FERRY_COPY_OPERATION_ID: 'has/slash', FERRY_COPY_SOURCE: '/tmp', FERRY_COPY_DESTINATION: '' });

    // Assess
    expect(code).toBe(EXIT_CODES.badConfiguration);
  });
});

describe('a stale worker', () => {
  test('cannot overwrite the progress of a newer generation', async () => {
    // Prepare
    const { src, dst, operationId } = workspace();
    const old = await claimCopyOperation({ operationId, source: src, destination: dst });
    const current = await claimCopyOperation({ operationId, source: src, destination: dst });
    await recordCopyProgress(operationId, current.record.generation, { bytesTotal: 100, filesTotal: 2, bytesDone: 70, filesDone: 1, filesResumed: 0 });

    // Act
    const stale = recordCopyProgress(operationId, old.record.generation, { bytesTotal: 100, filesTotal: 2, bytesDone: 10, filesDone: 0, filesResumed: 0 });

    // Assess
    await expect(stale).rejects.toBeInstanceOf(CopyLeaseLost);
    await expect(stale).rejects.toMatchObject({ context: { generation: 1, current: 2 } });
    const record = (await getCopyOperation(operationId))!;
    expect(record).toMatchObject({ generation: 2, bytesDone: 70, filesDone: 1 });
  });

  test('a running copy stops when a newer worker claims the operation, and writes no final state', async () => {
    // Prepare
    const { src, dst, operationId } = workspace();
    writeFileSync(join(src, 'huge.bin'), content(32 * 1024 * 1024, 4));
    const running = runCopyOperation({ operationId, source: src, destination: dst, progressIntervalMs: 100, bytesPerSecond: 8 * 1024 * 1024 });
    await eventually(async () => ((await getCopyOperation(operationId))?.currentFileBytes ?? 0) > 0, 'the copy to be under way', { intervalMs: 20 });

    // Act
    await claimCopyOperation({ operationId, source: src, destination: dst });
    const outcome = await running;

    // Assess
    expect(outcome.status).toBe('superseded');
    const record = (await getCopyOperation(operationId))!;
    expect(record).toMatchObject({ status: 'running', generation: 2 });
    expect(record.finishedAt).toBeUndefined();
  });
});

describe('crash and resume of the worker process', () => {
  function startWorker(env: Record<string, string>): { child: ChildProcess; exit: Promise<number | null> } {
    const child = spawn(process.execPath, ['--import', 'tsx', 'functions/copy/main.ts'], {
      cwd: process.cwd(),
      env: { ...process.env, ...env, FERRY_DYNAMODB_ENDPOINT: ddb.endpoint, FERRY_TABLE_SHARE: tableName('share') },
      stdio: 'ignore',
    });
    const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    return { child, exit };
  }

  function journalEntries(path: string): JournalEntry[] {
    if (!existsSync(path)) return [];
    return readFileSync(path, 'utf8')
      .split('\n')
      .filter((l) => l.endsWith('}'))
      .map((l) => JSON.parse(l) as JournalEntry);
  }

  test('kill -9 mid-copy, run again: completes, finished files are not rewritten, the tree is identical', async () => {
    // Prepare: 24 MiB in 96 files at 4 MiB/s, so the kill lands mid-copy.
    const { src, dst, operationId } = workspace();
    writeManyFiles(src, 96, 256 * 1024);
    const env = { FERRY_COPY_OPERATION_ID: operationId, FERRY_COPY_SOURCE: src, FERRY_COPY_DESTINATION: dst };
    const journal = join(dst, journalName(operationId));
    const first = startWorker({ ...env, FERRY_COPY_BYTES_PER_SECOND: String(4 * 1024 * 1024), FERRY_COPY_PROGRESS_INTERVAL_MS: '100' });
    cleanups.push(() => first.child.kill('SIGKILL'));
    await eventually((note) => note(journalEntries(journal).length) >= 10 || undefined, 'ten finished files in the journal', { intervalMs: 20 });
    first.child.kill('SIGKILL');
    expect(await first.exit).toBeNull();
    const finished = journalEntries(journal);
    const identity = new Map(finished.map((e) => [e.path, { ino: bigStat(join(dst, e.path)).ino, ctimeNs: bigStat(join(dst, e.path)).ctimeNs }]));
    const crashed = (await getCopyOperation(operationId))!;
    expect(crashed.status).toBe('running');
    expect(finished.length).toBeLessThan(96);

    // Act
    const second = startWorker(env);
    const code = await second.exit;

    // Assess
    expect(code).toBe(EXIT_CODES.completed);
    const record: CopyOperationRecord = (await getCopyOperation(operationId))!;
    expect(record).toMatchObject({ status: 'completed', generation: 2, filesDone: 96, filesTotal: 96 });
    expect(record.filesResumed).toBeGreaterThanOrEqual(finished.length);
    for (const [path, before] of identity) {
      const after = bigStat(join(dst, path));
      expect({ path, ino: after.ino, ctimeNs: after.ctimeNs }).toEqual({ path, ...before });
    }
    expect(treeDigest(dst)).toEqual(treeDigest(src));
    expect(existsSync(journal)).toBe(false);
  });
});
