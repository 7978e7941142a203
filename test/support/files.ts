/** Byte-level reads and writes into volume files, for driver tests that check what a copy holds. */
import { open } from 'node:fs/promises';

export async function writeAt(path: string, offset: number, data: string | Buffer): Promise<void> {
  const fh = await open(path, 'r+');
  try {
    const bytes = typeof data === 'string' ? Buffer.from(data) : data;
    await fh.write(bytes, 0, bytes.length, offset);
  } finally {
    await fh.close();
  }
}

export async function readAt(path: string, offset: number, length: number): Promise<string> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(length);
    await fh.read(buf, 0, length, offset);
    return buf.toString();
  } finally {
    await fh.close();
  }
}
