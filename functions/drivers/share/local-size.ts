/**
 * The size of a local share. A directory has no size of its own, so the local drivers keep the
 * share's size as a recorded quota in `<root>/<name>.size.json` (written at create, changed by
 * extend and shrink) and meter what the directory holds by walking it. Nothing withholds writes
 * over the size: the record is what shrink checks against, as Manila's drivers check the space used.
 */
import { lstat, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DriverError } from '../../core/errors.js';

export const SIZE_SUFFIX = '.size.json';
export const GIB = 1024 ** 3;

function errnoCode(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException)?.code;
}

/** The recorded size in GiB; undefined for a share made before sizes were recorded (or by a migration). */
export async function readRecordedSize(sharePath: string): Promise<number | undefined> {
  let raw: string;
  try {
    raw = await readFile(sharePath + SIZE_SUFFIX, 'utf8');
  } catch (e) {
    if (errnoCode(e) === 'ENOENT') return undefined;
    throw e;
  }
  const sizeGb = (JSON.parse(raw) as { sizeGb?: unknown }).sizeGb;
  if (typeof sizeGb !== 'number' || !Number.isInteger(sizeGb) || sizeGb < 1) throw new DriverError(`${sharePath + SIZE_SUFFIX} holds no valid size: ${raw.slice(0, 80)}`);
  return sizeGb;
}

export async function writeRecordedSize(sharePath: string, sizeGb: number): Promise<void> {
  await writeFile(sharePath + SIZE_SUFFIX, JSON.stringify({ sizeGb }));
}

export async function removeRecordedSize(sharePath: string): Promise<void> {
  await rm(sharePath + SIZE_SUFFIX, { force: true });
}

/** Bytes the tree holds: regular files' sizes (a hard link counted once per inode), symlinks not followed. */
export async function usedBytes(dir: string): Promise<number> {
  const seen = new Set<string>();
  let total = 0;
  const walk = async (d: string): Promise<void> => {
    for (const entry of await readdir(d, { withFileTypes: true })) {
      const p = join(d, entry.name);
      if (entry.isDirectory()) {
        await walk(p);
      } else if (entry.isFile()) {
        const st = await lstat(p);
        const inode = `${st.dev}:${st.ino}`;
        if (st.nlink > 1 && seen.has(inode)) continue;
        seen.add(inode);
        total += st.size;
      }
    }
  };
  await walk(dir);
  return total;
}
