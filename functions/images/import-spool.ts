/**
 * A web-download source that announces no Content-Length (a chunked answer) is spooled to a file
 * before its PutObject, which needs the length up front. A file holds what the function's /tmp
 * holds (the image-import-steps function has 10 GiB of it, functions/wiring.ts); memory held only
 * what 1 GB of function memory left.
 *
 * The file is named by the import task (`ferry-import-<task id>`): a retried download writes the
 * same file again, and the machine's compensation (import-failed) removes it whatever ended the
 * run before, so a failed or crashed download leaves at most this one file, until then.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { BadRequest } from '../core/errors.js';

/** What a spool may hold unless FERRY_IMPORT_SPOOL_MAX_BYTES says otherwise: /tmp's 10 GiB less room for the runtime. */
export const DEFAULT_SPOOL_MAX_BYTES = 10 * 1024 ** 3 - 512 * 1024 ** 2;

/** The body went past what the spool may hold: it cannot be imported by this function. */
export class SpoolFull extends BadRequest {}

export function spoolPath(taskId: string): string {
  return join(process.env.FERRY_IMPORT_SPOOL_DIR ?? tmpdir(), `ferry-import-${taskId}`);
}

function spoolMaxBytes(): number {
  const configured = Number(process.env.FERRY_IMPORT_SPOOL_MAX_BYTES);
  return Number.isSafeInteger(configured) && configured > 0 ? configured : DEFAULT_SPOOL_MAX_BYTES;
}

/**
 * Writes the whole body to the task's spool file and returns it as a stream of known length.
 * @throws SpoolFull (the file is removed), or the source's own error (likewise).
 */
export async function spool(taskId: string, body: Readable, maxBytes = spoolMaxBytes()): Promise<{ data: Readable; length: number }> {
  const path = spoolPath(taskId);
  let counted = 0;
  const limit = new Transform({
    transform(chunk: Buffer, _enc, done) {
      counted += chunk.length;
      done(counted > maxBytes ? new SpoolFull(`the source sent more than ${maxBytes} bytes without a Content-Length; serve it with one`) : null, chunk);
    },
  });
  try {
    await pipeline(body, limit, createWriteStream(path));
  } catch (e) {
    await removeSpool(taskId);
    throw e;
  }
  const { size } = await stat(path);
  return { data: createReadStream(path), length: size };
}

/** Removes the task's spool file; a missing one is fine (force). */
export async function removeSpool(taskId: string): Promise<void> {
  await rm(spoolPath(taskId), { force: true });
}
