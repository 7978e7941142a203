/**
 * The local volume driver's copies read only where a file holds data (SEEK_DATA/SEEK_HOLE):
 * a snapshot (sparseCopyFile) of a large, mostly empty volume, and a replication pass after a
 * one-byte write. Before, both read every byte of the volume (a snapshot of a new 2 GiB volume
 * took 11-18 s on a busy machine); the byte counts here fail on that code.
 */
import { mkdir, mkdtemp, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, test } from 'vitest';
import { LocalVolumeDriver } from '../../functions/drivers/volume/local.js';
import { REPLICATION_CHUNK_BYTES, sparseCopyFile } from '../../functions/drivers/volume/sparse-copy.js';
import { readAt, writeAt } from '../support/files.js';
import { replicatedLocalBackend } from '../support/local-backends.js';

const MIB = 1024 * 1024;
const FILE_BYTES = 256 * MIB;
let base: string;

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), 'ferry-sparse-reads-'));
});
afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

async function sparseFile(path: string, marks: [number, string][]): Promise<void> {
  await writeFile(path, '');
  await truncate(path, FILE_BYTES);
  for (const [offset, data] of marks) await writeAt(path, offset, data);
}

test('a snapshot copy reads the data extents only, keeps every byte and every hole', async () => {
  const src = join(base, 'vol');
  const marks: [number, string][] = [[0, 'first'], [100 * MIB + 5, 'middle'], [FILE_BYTES - 4, 'last']];
  await sparseFile(src, marks);

  const { readBytes } = await sparseCopyFile(src, join(base, 'snap'));

  // Each mark sits in one file-system block, so at most one chunk per mark is read.
  expect(readBytes).toBeGreaterThan(0);
  expect(readBytes).toBeLessThanOrEqual(marks.length * REPLICATION_CHUNK_BYTES);
  for (const [offset, data] of marks) expect(await readAt(join(base, 'snap'), offset, data.length)).toBe(data);
  const st = await stat(join(base, 'snap'));
  expect(st.size).toBe(FILE_BYTES);
  expect(st.blocks * 512).toBeLessThan(4 * MIB);
});

test('a replication pass after a one-byte write reads the chunks holding data, not the volume', async () => {
  const primaryRoot = join(base, 'primary');
  const siteB = join(base, 'site-b');
  await mkdir(join(primaryRoot, 'pool0'), { recursive: true });
  await mkdir(siteB);
  const driver = new LocalVolumeDriver(replicatedLocalBackend(primaryRoot, { 'site-b': siteB }));
  const vol = join(primaryRoot, 'pool0', 'vol-1');
  await sparseFile(vol, [[5 * MIB, 'A-bytes']]);
  await driver.enableReplication('vol-1');

  await writeAt(vol, 40 * MIB + 3, 'x');
  const report = await driver.syncNow();

  expect(report.errors).toEqual([]);
  expect(report.bytesCopied).toBe(REPLICATION_CHUNK_BYTES);
  // The source's two chunks with data; the replica's digests are cached from the first sync.
  expect(report.bytesRead).toBeGreaterThan(0);
  expect(report.bytesRead).toBeLessThanOrEqual(2 * REPLICATION_CHUNK_BYTES);
  expect(await readAt(join(siteB, 'pool0', 'vol-1'), 40 * MIB + 3, 1)).toBe('x');
  expect(await readAt(join(siteB, 'pool0', 'vol-1'), 5 * MIB, 7)).toBe('A-bytes');
});
