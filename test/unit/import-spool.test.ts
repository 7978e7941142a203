/**
 * The spool of a web-download body of unknown length (functions/images/import-spool.ts): the file
 * holds the bytes and their count; a body past the limit or a source that errors leaves no file.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { removeSpool, spool, SpoolFull, spoolPath } from '../../functions/images/import-spool.js';

const dir = mkdtempSync(join(tmpdir(), 'ferry-spool-unit-'));
beforeAll(() => void (process.env.FERRY_IMPORT_SPOOL_DIR = dir));
afterAll(() => {
  delete process.env.FERRY_IMPORT_SPOOL_DIR;
  rmSync(dir, { recursive: true, force: true });
});

const chunks = (n: number, size: number) => Readable.from(Array.from({ length: n }, (_, i) => Buffer.alloc(size, i)));

async function readBack(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const part of stream) parts.push(part as Buffer);
  return Buffer.concat(parts);
}

describe('spool', () => {
  test('holds every byte, gives their count, and removeSpool removes the file', async () => {
    const { data, length } = await spool('t-ok', chunks(4, 1000));
    expect(length).toBe(4000);
    const back = await readBack(data);
    expect(back.subarray(2000, 3000).every((b) => b === 2)).toBe(true);
    expect(back.length).toBe(4000);
    expect(existsSync(spoolPath('t-ok'))).toBe(true);
    await removeSpool('t-ok');
    expect(existsSync(spoolPath('t-ok'))).toBe(false);
    await removeSpool('t-ok');
  });

  test('a body past the limit: SpoolFull, and no file', async () => {
    await expect(spool('t-full', chunks(4, 1000), 3500)).rejects.toBeInstanceOf(SpoolFull);
    expect(existsSync(spoolPath('t-full'))).toBe(false);
  });

  test('a source that errors mid-way: its error, and no file', async () => {
    const broken = new Readable({ read() {} });
    broken.push(Buffer.alloc(100));
    setImmediate(() => broken.destroy(new Error('connection reset')));
    await expect(spool('t-broken', broken)).rejects.toThrow('connection reset');
    expect(existsSync(spoolPath('t-broken'))).toBe(false);
  });

  test('a retried download writes the same file again, not a second one', async () => {
    await spool('t-again', chunks(2, 10));
    const { length } = await spool('t-again', chunks(1, 10));
    expect(length).toBe(10);
    await removeSpool('t-again');
  });
});
