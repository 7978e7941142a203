/**
 * `GET /v2/images/{id}/file`: the image's bytes. Locally they stream through the function. On AWS
 * a Lambda response is at most 6 MB, and API Gateway carries binary base64-encoded, so an image
 * over about 4.5 MB could never come back that way: there the API answers 302 to a presigned S3 GET
 * of the object, valid for DOWNLOAD_URL_SECONDS and signed with the function's own role (which is
 * why that role holds s3:GetObject on `images/*`: wiring.ts `bucketPrefix`).
 *
 * What the upstream clients do with the redirect, read in Debian's python3-keystoneauth1 5.0,
 * python3-glanceclient 4.1 and python3-openstacksdk 0.101 (the ones test/e2e drives):
 * - keystoneauth's Session follows 301/302/303/305/307/308 itself (up to 30 hops), sending the same
 *   headers, X-Auth-Token too, to the new location; glanceclient without a session uses requests,
 *   which follows a GET's redirect as well. S3 authenticates a presigned URL by its query string and
 *   signs only `host`, so a stray X-Auth-Token header changes nothing there.
 * - glanceclient takes a body as image data only when its Content-Type is exactly
 *   `application/octet-stream` (otherwise it reads it as text): the URL makes S3 answer with that
 *   type (`response-content-type`), whatever the object was stored with.
 * - both read the headers of the final (S3) response, which has no Content-MD5: glanceclient checks
 *   the bytes against the image's os_hash_value (or checksum) it reads before the download, and
 *   openstacksdk, finding no Content-MD5, reads the image and checks its `checksum`. So the checks
 *   still happen; the Content-MD5 on the 302 is for a client that stops at the redirect.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { NotFound } from '../core/errors.js';
import type { PlainResponse } from '../core/plain-api.js';
import { bucket, s3ConfigFromEnv, s3Sdk } from '../core/s3.js';
import { imageObjectKey, openImage } from '../servers/images.js';
import type { Image } from '../servers/model.js';

/** How long a download URL stays valid: long enough to start a large download, short enough that a leaked URL soon dies. */
export const DOWNLOAD_URL_SECONDS = 300;
/** The only Content-Type glanceclient streams as image data. */
const IMAGE_DATA_TYPE = 'application/octet-stream';

/**
 * Whether downloads redirect to S3: on AWS, where the image store is the stack's bucket. The local
 * stack points the functions at its S3 server (FERRY_S3_ENDPOINT, infra/local/stack.ts), which its
 * clients could not always reach, and its HTTP server has no response limit to avoid: it streams.
 */
export const redirectsDownloads = (env: NodeJS.ProcessEnv = process.env): boolean => !env.FERRY_S3_ENDPOINT;

export type Presign = (client: S3Client, input: { Bucket: string; Key: string; ResponseContentType: string }, expiresIn: number) => Promise<string>;

let presignClient: S3Client | undefined;
let presign: Presign | undefined;

/** Replace the presigning client and signer (tests). */
export function setPresigner(client: S3Client | undefined, signer?: Presign): void {
  presignClient = client;
  presign = signer;
}

/**
 * A client of its own for presigning: with the SDK's default checksum modes, a presigned GetObject
 * carries `x-amz-checksum-mode=ENABLED` (or an empty body's `x-amz-checksum-crc32`), which no
 * Glance client asks for; WHEN_REQUIRED for both leaves only what S3 needs in the URL.
 */
async function signer(): Promise<{ client: S3Client; sign: Presign }> {
  if (!presignClient) {
    const { S3Client: Client } = await s3Sdk();
    presignClient = new Client({ ...s3ConfigFromEnv(), requestChecksumCalculation: 'WHEN_REQUIRED', responseChecksumValidation: 'WHEN_REQUIRED' });
  }
  if (!presign) {
    // Loaded on the first download only, so the API's cold start does not pay for it.
    const [{ getSignedUrl }, { GetObjectCommand }] = await Promise.all([import('@aws-sdk/s3-request-presigner'), s3Sdk()]);
    presign = (client, input, expiresIn) => getSignedUrl(client, new GetObjectCommand(input), { expiresIn });
  }
  return { client: presignClient, sign: presign };
}

/** A presigned GET of the image's object, answered as Glance's octet-stream. */
export async function imageDownloadUrl(id: string, expiresIn = DOWNLOAD_URL_SECONDS): Promise<string> {
  const { client, sign } = await signer();
  return sign(client, { Bucket: bucket(), Key: imageObjectKey(id), ResponseContentType: IMAGE_DATA_TYPE }, expiresIn);
}

/** Glance sends the image's MD5 as Content-MD5 so that glanceclient can check what it saved. */
const md5Header = (image: Image): Record<string, string> => (image.md5 ? { 'Content-MD5': image.md5 } : {});

/** The response to a download of `image`, which the caller may see (routes.ts checked it). */
export async function downloadResponse(image: Image): Promise<PlainResponse> {
  // Glance answers an image without data with 204 and no body.
  if (image.status !== 'active') return { status: 204 };
  if (redirectsDownloads()) {
    // Signing reads no object: an object gone since the record said active is S3's 404 at the client.
    return { status: 302, headers: { Location: await imageDownloadUrl(image.id), ...md5Header(image) } };
  }
  const chunks: Buffer[] = [];
  try {
    for await (const c of await openImage(image.id)) chunks.push(Buffer.from(c as Uint8Array));
  } catch (e) {
    if (e instanceof NotFound) throw new NotFound(`Image ${image.id} has no data.`, { objectKey: imageObjectKey(image.id) });
    throw e;
  }
  return { status: 200, bytes: Buffer.concat(chunks), headers: { 'Content-Type': IMAGE_DATA_TYPE, ...md5Header(image) } };
}
