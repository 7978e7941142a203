/**
 * The data-extent helper (functions/drivers/data-seeker.ts): one perl process answers every
 * SEEK_DATA/SEEK_HOLE query of the process, in any order and concurrently, for any path; a helper
 * that dies fails only the queries it owed and is replaced at the next one; an idle helper keeps
 * no process alive.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, open, rm, truncate } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataSeekerPid, seekDataExtents, stopDataSeeker } from '../../functions/drivers/data-seeker.js';
import { DriverError } from '../../functions/core/errors.js';
import { dataExtents } from '../../functions/drivers/sparse.js';

const MIB = 1024 * 1024;
let tmp: string;

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'ferry-data-seeker-'));
});

afterAll(async () => {
  stopDataSeeker();
  await rm(tmp, { recursive: true, force: true });
});

/** A sparse file of `size` bytes holding one MiB at each of `atMib`. */
async function sparseFile(name: string, size: number, atMib: number[]): Promise<string> {
  const path = join(tmp, name);
  await (await open(path, 'wx')).close();
  await truncate(path, size);
  const fh = await open(path, 'r+');
  try {
    for (const m of atMib) await fh.write(Buffer.alloc(MIB, 1), 0, MIB, m * MIB);
  } finally {
    await fh.close();
  }
  return path;
}

describe('data-extent helper', () => {
  it('answers concurrent queries for many files, each its own extents, from one process', async () => {
    // Prepare: files whose names need the hex encoding (space, newline), each with data elsewhere.
    const files = await Promise.all(Array.from({ length: 12 }, (_, k) => sparseFile(`disk ${k}\nx`, 64 * MIB, [k, 40 + k])));

    // Act
    const answers = await Promise.all(files.map((f) => dataExtents(f, 64 * MIB)));
    const pid = dataSeekerPid();
    await dataExtents(files[0]!, 64 * MIB);

    // Assess
    answers.forEach((extents, k) => {
      expect(extents.some((e) => e.offset <= k * MIB && e.offset + e.length >= (k + 1) * MIB)).toBe(true);
      expect(extents.some((e) => e.offset <= (40 + k) * MIB && e.offset + e.length >= (41 + k) * MIB)).toBe(true);
      expect(extents.every((e) => e.offset + e.length <= (41 + k) * MIB + 1 && e.offset >= k * MIB - 1)).toBe(true);
    });
    expect(pid).toBeGreaterThan(0);
    expect(dataSeekerPid()).toBe(pid);
  });

  it('fails a query for a file it cannot open with a DriverError naming the file, and answers the next', async () => {
    // Prepare
    const missing = join(tmp, 'no-such-disk');
    const present = await sparseFile('present', 8 * MIB, [2]);

    // Act
    const failed = await dataExtents(missing, MIB).catch((e: unknown) => e);
    const next = await dataExtents(present, 8 * MIB);

    // Assess
    expect(failed).toBeInstanceOf(DriverError);
    expect((failed as Error).message).toContain(missing);
    expect(next).toEqual([{ offset: 2 * MIB, length: MIB }]);
  });

  it('fails the queries a killed helper owed and starts another at the next query', async () => {
    // Prepare: a helper running, held up by a stopped process so a query is still owed when it dies.
    const path = await sparseFile('killed', 8 * MIB, [1]);
    await dataExtents(path, 8 * MIB);
    const first = dataSeekerPid()!;
    process.kill(first, 'SIGSTOP');

    // Act
    const owed = seekDataExtents(path, 8 * MIB).catch((e: unknown) => e);
    process.kill(first, 'SIGKILL');
    const failure = await owed;
    const after = await dataExtents(path, 8 * MIB);

    // Assess
    expect(failure).toBeInstanceOf(DriverError);
    expect((failure as Error).message).toMatch(/exited \(SIGKILL\)/);
    expect(after).toEqual([{ offset: MIB, length: MIB }]);
    expect(dataSeekerPid()).not.toBe(first);
  });

  it('keeps no process alive once idle: a process that asked exits by itself', async () => {
    // Prepare: a Node process that asks once and then has nothing left to do.
    const path = await sparseFile('exit', 8 * MIB, [3]);
    const script = `import { dataExtents } from ${JSON.stringify(join(process.cwd(), 'functions/drivers/sparse.ts'))};
      console.log(JSON.stringify(await dataExtents(${JSON.stringify(path)}, ${8 * MIB})));`;

    // Act
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { timeout: 60_000 });

    // Assess: it answered and exited (a helper keeping it alive would hit the timeout).
    expect(JSON.parse(stdout.trim().split('\n').at(-1)!)).toEqual([{ offset: 3 * MIB, length: MIB }]);
  }, 90_000);
});
