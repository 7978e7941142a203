/**
 * Glance's interoperable image import, `web-download` only: the way into Ferry for an image larger
 * than a request body may be (API Gateway refuses bodies over 10 MB, and Lambda's payload limit is
 * 6 MB). As Glance, the API answers 202 at once and the import runs in the background: the
 * image-import state machine downloads the URI to S3 (import-steps.ts) while the image shows
 * `importing`, then `active`, or `queued` again with the failure recorded on its import task
 * (`GET /v2/images/{id}/tasks`). What it may fetch is import-filter.ts's to say, at every redirect.
 *
 * Before it answers, the API refuses what it can tell at once: a body Glance refuses, a URI the
 * filter refuses, an image the caller may not change, an image not queued (409), and a source
 * that does not answer 2xx or redirects somewhere the filter refuses (400; Glance finds those only
 * in its task; the API opens the URI, follows the redirects and lets the body go).
 */
import { BadRequest, DependencyError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { jsonBody, type PlainRequest, type PlainResponse } from '../core/plain-api.js';
import { checkImportUri } from './import-filter.js';
import { startImageImport } from './import-machine.js';
import { openImportSource } from './import-source.js';
import { beginImport, failImport, importRefusal } from './import-task.js';
import { ownImage } from './repo.js';

export const IMPORT_METHODS = ['web-download'];

/** How long the API waits for the source's first answer; past it the 202 goes out and the machine finds out. */
export const IMPORT_PROBE_SECONDS = 10;

export function importInfo(): unknown {
  return { 'import-methods': { description: 'Import methods available.', type: 'array', value: IMPORT_METHODS } };
}

/** `POST /v2/images/{id}/import` with `{"method": {"name": "web-download", "uri": "http(s)://..."}}`. */
export async function importImage(req: PlainRequest): Promise<PlainResponse> {
  const body = jsonBody(req) as { method?: { name?: unknown; uri?: unknown } } | undefined;
  const name = body?.method?.name;
  if (typeof name !== 'string') throw new BadRequest('Import request requires a \'method\' field.');
  if (!IMPORT_METHODS.includes(name)) throw new BadRequest(`Import method ${name} is not valid. Valid methods: ${IMPORT_METHODS.join(', ')}`);
  const uri = body!.method!.uri;
  let url: URL;
  try {
    url = new URL(String(uri));
  } catch {
    throw new BadRequest(`URI for web-download is not valid: ${String(uri)}`);
  }
  const verdict = checkImportUri(url);
  if (!verdict.ok) throw new BadRequest(`URI for web-download does not pass filtering: ${verdict.reason}.`);
  const image = await ownImage(req.params.image_id!, req.auth);
  if (image.status !== 'queued') throw importRefusal(image);
  await probe(url);
  // The intent and the lock: queued -> importing, one conditional write (a concurrent import gets 409 here).
  const task = await beginImport({ imageId: image.id, uri: url.href, ownerProjectId: image.ownerProjectId, userId: req.auth.userId });
  try {
    await startImageImport({ imageId: image.id, taskId: task.id });
  } catch (e) {
    // No machine will run it (or one did and will find the task ended): give the image back at once.
    const reason = `the import could not be started: ${(e as Error).message}`;
    const outcome = await failImport(image.id, task.id, reason);
    logger.error('image import not started', { imageId: image.id, taskId: task.id, outcome, error: e as Error });
    // An execution that did start (a lost reply) and already ended the task owns the image.
    if (outcome === 'failed') throw new DependencyError(`Image ${image.id}: ${reason}`, { cause: e });
  }
  return { status: 202 };
}

/**
 * Opens the URI (every redirect hop filtered) and lets the body go: a source that refuses or does
 * not exist is a 400 now rather than a failed task later. One that has not answered within
 * IMPORT_PROBE_SECONDS is left to the machine.
 * @throws ImportSourceRefused, ImportSourceUnavailable (both 400)
 */
async function probe(url: URL): Promise<void> {
  const timeout = AbortSignal.timeout(IMPORT_PROBE_SECONDS * 1000);
  try {
    const res = await openImportSource(url, timeout);
    await res.body?.cancel();
  } catch (e) {
    if (timeout.aborted) return;
    throw e;
  }
}
