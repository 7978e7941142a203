/** Trees for the copy worker tests: build one on disk, hash one, compare metadata. */
import { createCipheriv, createHash } from 'node:crypto';
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync, type BigIntStats } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function tempDir(prefix: string): { path: string; remove: () => void } {
  const path = mkdtempSync(join(tmpdir(), `ferry-${prefix}-`));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/** Deterministic bytes that differ per seed and per position (an AES-CTR keystream, fast for large files). */
export function content(bytes: number, seed: number): Buffer {
  const iv = Buffer.alloc(16);
  iv.writeUInt32BE(seed >>> 0, 0);
  return createCipheriv('aes-128-ctr', Buffer.from('ferry-copy-tests'), iv).update(Buffer.alloc(bytes));
}

/** Many small files over a few directories: `count` files of `bytes` each. */
export function writeManyFiles(root: string, count: number, bytes: number): string[] {
  const names: string[] = [];
  for (let i = 0; i < count; i++) {
    const dir = join(root, `d${i % 10}`);
    mkdirSync(dir, { recursive: true });
    const rel = `d${i % 10}/f${i}.bin`;
    writeFileSync(join(root, rel), content(bytes, i));
    names.push(rel);
  }
  return names;
}

/** sha256 of every regular file, and the target of every symlink, by relative path. */
export function treeDigest(root: string, rel = ''): Map<string, string> {
  const out = new Map<string, string>();
  for (const name of readdirSync(join(root, rel)).sort()) {
    const path = rel === '' ? name : `${rel}/${name}`;
    const st = lstatSync(join(root, path));
    if (st.isDirectory()) for (const [k, v] of treeDigest(root, path)) out.set(k, v);
    else if (st.isSymbolicLink()) out.set(path, `-> ${readlinkSync(join(root, path))}`);
    else if (st.isFile()) out.set(path, createHash('sha256').update(readFileSync(join(root, path))).digest('hex'));
  }
  return out;
}

export function bigStat(path: string): BigIntStats {
  return lstatSync(path, { bigint: true });
}

/** Node's utimes keeps times to about a microsecond (libuv truncates), not to the nanosecond. */
export function sameTime(a: bigint, b: bigint): boolean {
  const d = a - b;
  return d <= 2000n && d >= -2000n;
}
