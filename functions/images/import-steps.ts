/**
 * The step handler of the image-import machine (statemachines/image-import.asl.json): one Lambda,
 * `image-import-steps`, `handler({step, imageId, taskId, error})`.
 *
 * POST /v2/images/{id}/import (import.ts) records the import on the image (queued -> importing,
 * import-task.ts), starts the machine and answers 202; the download runs here, in a function with
 * minutes to do it, not in the API's 29 s.
 *
 * - download: while the task holds the image, GETs the URI (every redirect hop filtered,
 *   import-source.ts), streams the body to `images/<id>` hashing it (a body of unknown length is
 *   spooled to a file first, import-spool.ts), then importing -> active. Idempotent: a run again downloads again to the same key, and an image the task already made
 *   active is done. A source that may answer next time (ImportSourceUnavailable) is retried by the
 *   machine; anything else goes to its Catch.
 * - import-failed: the compensation of download, right below it: the object of this import is
 *   removed (a PUT cut short stores nothing, but one that finished before the failure would be
 *   left), then importing -> queued with the task `failure` and the reason, as Glance reverts a
 *   failed web-download. An image another import or upload holds now is left alone.
 */
import { Readable } from 'node:stream';
import type { ReadableStream } from 'node:stream/web';
import { BadRequest, FerryError, reasonOf, type CaughtError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { deleteImageObject, putImageObject } from '../servers/images.js';
import { checkImportUri } from './import-filter.js';
import { ImportSourceRefused, ImportSourceUnavailable, openImportSource } from './import-source.js';
import { removeSpool, spool } from './import-spool.js';
import { failImport, finishImport, heldImage, ImportAborted, type FailOutcome } from './import-task.js';

/** The download's own deadline: under the function's 900 s, so it ends with its reason and not by Lambda's kill. */
export const IMPORT_DOWNLOAD_DEADLINE_SECONDS = 840;

export interface ImageImportStepInput {
  step: string;
  imageId?: string;
  taskId?: string;
  /** import-failed: what the Catch put in `$.error`. */
  error?: CaughtError;
}

/**
 * Downloads the task's URI into the image and makes it active. Undone by importFailed.
 * @throws ImportAborted (the task no longer holds the image), ImportSourceRefused, ImportSourceUnavailable
 */
export async function download(imageId: string, taskId: string, deadlineSeconds = IMPORT_DOWNLOAD_DEADLINE_SECONDS): Promise<{ status: string; size?: number }> {
  const held = await heldImage(imageId, taskId);
  if ('reason' in held) {
    const done = held.image?.status === 'active' && held.image.importTask?.id === taskId && held.image.importTask.status === 'success';
    if (done) return { status: 'active', size: held.image!.sizeBytes };
    throw new ImportAborted(`Import task ${taskId} does not hold the image: ${held.reason}.`);
  }
  const url = new URL(held.image.importTask!.uri);
  // A console start names no URI of its own, but the operator's filter may have changed since the API checked it.
  const verdict = checkImportUri(url);
  if (!verdict.ok) throw new ImportSourceRefused(`URI for web-download does not pass filtering: ${verdict.reason}.`);
  const deadline = AbortSignal.timeout(deadlineSeconds * 1000);
  try {
    const res = await openImportSource(url, deadline);
    const announced = res.headers.get('content-length');
    const stream = Readable.fromWeb(res.body as ReadableStream<Uint8Array>);
    const { data, length } = announced === null ? await spool(taskId, stream) : { data: stream, length: Number(announced) };
    const digests = await putImageObject(imageId, data, length);
    // Stored: the spool has done its job before the image shows active.
    await removeSpool(taskId);
    await finishImport(imageId, taskId, digests);
    return { status: 'active', size: digests.sizeBytes };
  } catch (e) {
    await removeSpool(taskId);
    throw sourceError(e, url, deadline, deadlineSeconds);
  }
}

/** A failure while reading the body, as the machine's Retry and the task's message should see it. */
function sourceError(e: unknown, url: URL, deadline: AbortSignal, deadlineSeconds: number): unknown {
  if (deadline.aborted) return new ImportSourceRefused(`web-download of ${url.href} did not finish within ${deadlineSeconds} s`, { cause: e });
  // A body shorter or longer than its Content-Length (putImageObject's count).
  if (e instanceof BadRequest && !(e instanceof ImportSourceRefused) && !(e instanceof ImportSourceUnavailable)) return new ImportSourceRefused(`web-download of ${url.href} failed: ${e.message}`, { cause: e });
  if (e instanceof FerryError) return e;
  // S3's own errors (the SDK retried them already) go to the Catch as they are.
  if ((e as { $metadata?: unknown }).$metadata !== undefined) return e;
  // The source's stream broke off (a reset connection, "terminated"): worth another try.
  return new ImportSourceUnavailable(`web-download of ${url.href} failed: ${(e as Error).message}`, { cause: e });
}

/**
 * The machine's Catch: removes this import's object and puts the image back to queued with the
 * reason, while the task holds it; an image deleted meanwhile has its object removed too (the
 * delete may have run before this import's PUT ended). Idempotent.
 */
export async function importFailed(imageId: string, taskId: string, error: CaughtError | undefined): Promise<{ status: FailOutcome }> {
  const reason = reasonOf(error);
  const held = await heldImage(imageId, taskId);
  const gone = 'reason' in held && !held.image;
  // A run that crashed mid-spool left its file (import-spool.ts).
  await removeSpool(taskId);
  if (!('reason' in held) || gone) await deleteImageObject(imageId);
  const outcome = gone ? 'gone' : await failImport(imageId, taskId, reason);
  logger.warn('image import failed', { imageId, taskId, reason, outcome });
  return { status: outcome };
}

function need(input: ImageImportStepInput): { imageId: string; taskId: string } {
  if (!input.imageId || !input.taskId) throw new BadRequest(`step ${input.step} needs imageId and taskId`);
  return { imageId: input.imageId, taskId: input.taskId };
}

export async function handler(input: ImageImportStepInput): Promise<unknown> {
  switch (input.step) {
    case 'download': {
      const { imageId, taskId } = need(input);
      return download(imageId, taskId);
    }
    case 'import-failed': {
      const { imageId, taskId } = need(input);
      return importFailed(imageId, taskId, input.error);
    }
    default:
      throw new BadRequest(`unknown image import step ${JSON.stringify(input.step)}`);
  }
}
