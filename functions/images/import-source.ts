/**
 * Reaching the URI of a web-download import: a GET that follows redirects by hand, so that
 * import-filter.ts judges every hop, not only the first (fetch's own redirects would go anywhere).
 * The image API opens it once to refuse at once what is plainly wrong (a hop the filter refuses, a
 * host that does not answer, an HTTP error), then lets it go; the import state machine's Download
 * step (import-steps.ts) opens it again and streams the body to S3.
 *
 * Its failures are typed for the machine's Retry: ImportSourceUnavailable may pass if tried again
 * (no connection, a 5xx or 429, a body cut off), ImportSourceRefused will not (a 4xx, a refused hop).
 */
import { BadRequest } from '../core/errors.js';
import { checkImportUri } from './import-filter.js';

/** Redirects followed at most, each hop checked by the filter (fetch's own limit is 20). */
export const MAX_REDIRECTS = 5;

/** The source will not give the image: retrying is pointless. A 400 when the API finds it. */
export class ImportSourceRefused extends BadRequest {}

/** The source could not be read now (network, 5xx, 429, a cut body): the Download step is retried. A 400 when the API finds it. */
export class ImportSourceUnavailable extends BadRequest {}

/** HTTP answers worth another try: the server's own trouble, or its asking us to slow down. */
const retryableStatus = (status: number) => status >= 500 || status === 429 || status === 408;

/**
 * GET `first`, following redirects by hand so that the filter sees every hop; the answer of the
 * last hop, 2xx with a body (the caller reads or cancels it).
 * @throws ImportSourceRefused, ImportSourceUnavailable
 */
export async function openImportSource(first: URL, signal?: AbortSignal): Promise<Response> {
  let url = first;
  for (let hop = 0; ; hop++) {
    let res: Response;
    try {
      res = await fetch(url, { redirect: 'manual', signal });
    } catch (e) {
      throw new ImportSourceUnavailable(`web-download of ${url.href} failed: ${describe(e)}`, { cause: e });
    }
    const location = res.status >= 300 && res.status < 400 ? res.headers.get('location') : null;
    if (location === null) {
      if (!res.ok || !res.body) {
        await res.body?.cancel();
        const message = `web-download of ${url.href} failed: HTTP ${res.status}`;
        throw retryableStatus(res.status) ? new ImportSourceUnavailable(message) : new ImportSourceRefused(message);
      }
      return res;
    }
    await res.body?.cancel();
    if (hop >= MAX_REDIRECTS) throw new ImportSourceRefused(`web-download of ${first.href} failed: more than ${MAX_REDIRECTS} redirects`);
    const next = new URL(location, url);
    const verdict = checkImportUri(next);
    if (!verdict.ok) throw new ImportSourceRefused(`web-download of ${first.href} was redirected to ${next.href}, which does not pass filtering: ${verdict.reason}.`);
    url = next;
  }
}

/** fetch's own message is "fetch failed"; the reason (ECONNREFUSED...) is its cause's. */
function describe(e: unknown): string {
  const err = e as Error & { cause?: { code?: string; message?: string } };
  const why = err.cause?.code ?? err.cause?.message;
  return why ? `${err.message} (${why})` : err.message;
}
