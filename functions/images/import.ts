/**
 * Glance's interoperable image import, `web-download` only: the way into Ferry for an image larger
 * than a request body may be (API Gateway refuses bodies over 10 MB, and Lambda's payload limit is
 * 6 MB). The image API fetches the URI itself and streams it to S3 (functions/servers/images.ts
 * uploadImage: hashed on the way, status queued -> saving -> active, back to queued on failure).
 * Glance imports asynchronously and answers 202 at once; Ferry answers 202 once the bytes are in,
 * so the whole download must fit in the API's 29 s (docs/compatibility.md); clients poll the image
 * status either way. What it may fetch is import-filter.ts's to say, at every redirect.
 */
import { Readable } from 'node:stream';
import type { ReadableStream } from 'node:stream/web';
import { BadRequest, Conflict, FerryError } from '../core/errors.js';
import { jsonBody, type PlainRequest, type PlainResponse } from '../core/plain-api.js';
import { uploadImage } from '../servers/images.js';
import { checkImportUri } from './import-filter.js';
import { ownImage } from './repo.js';

/** Redirects followed at most, each hop checked by the filter (fetch's own limit is 20). */
const MAX_REDIRECTS = 5;

export const IMPORT_METHODS = ['web-download'];

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
  if (image.status !== 'queued') throw new Conflict(`Image status transition from ${image.status} to importing is not allowed`);
  const res = await fetchFiltered(url);
  const length = res.headers.get('content-length');
  const stream = Readable.fromWeb(res.body as ReadableStream<Uint8Array>);
  try {
    await uploadImage(image.id, stream, length === null ? undefined : Number(length));
  } catch (e) {
    if (e instanceof FerryError) throw e;
    throw new BadRequest(`web-download of ${url.href} failed: ${(e as Error).message}`);
  }
  return { status: 202 };
}

/** GET `first`, following redirects by hand so that the filter sees every hop. */
async function fetchFiltered(first: URL): Promise<Response> {
  let url = first;
  for (let hop = 0; ; hop++) {
    let res: Response;
    try {
      res = await fetch(url, { redirect: 'manual' });
    } catch (e) {
      throw new BadRequest(`web-download of ${url.href} failed: ${(e as Error).message}`);
    }
    const location = res.status >= 300 && res.status < 400 ? res.headers.get('location') : null;
    if (location === null) {
      if (!res.ok || !res.body) throw new BadRequest(`web-download of ${url.href} failed: HTTP ${res.status}`);
      return res;
    }
    await res.body?.cancel();
    if (hop >= MAX_REDIRECTS) throw new BadRequest(`web-download of ${first.href} failed: more than ${MAX_REDIRECTS} redirects`);
    const next = new URL(location, url);
    const verdict = checkImportUri(next);
    if (!verdict.ok) throw new BadRequest(`web-download of ${first.href} was redirected to ${next.href}, which does not pass filtering: ${verdict.reason}.`);
    url = next;
  }
}
