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
  return (await readBytesAt(path, offset, length)).toString();
}

/** `length` bytes from `offset` (zeros past the end), without reading the rest of a 1 GiB volume file. */
export async function readBytesAt(path: string, offset: number, length: number): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(length);
    await fh.read(buf, 0, length, offset);
    return buf;
  } finally {
    await fh.close();
  }
}
