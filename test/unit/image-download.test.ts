/**
 * Image downloads on AWS (functions/images/download.ts): the image API answers 302 to a presigned
 * S3 GET of `images/<id>` instead of carrying the bytes through Lambda. The URL is signed for real
 * (static credentials, no request leaves the process) and taken apart: bucket, key, expiry, only
 * `host` signed (so the X-Auth-Token keystoneauth re-sends to it is ignored by S3), Glance's
 * octet-stream asked of S3, no checksum parameters. The route reads its image record from a mocked
 * DynamoDB client whose replies follow GetItem's reference (an Item, or none).
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, GetCommand } from '@aws-sdk/lib-dynamodb';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { handler } from '../../functions/api/image.js';
import { setDb } from '../../functions/core/db.js';
import { DOWNLOAD_URL_SECONDS, imageDownloadUrl, redirectsDownloads, setPresigner, type Presign } from '../../functions/images/download.js';
import { imageKey, type Image } from '../../functions/servers/model.js';
import { DEMO, OTHER, apiEvent, lambdaContext } from '../support/events.js';
import { IMAGE_ID, imageFixture } from '../support/image-fixtures.js';

const BUCKET = 'ferry-bucket-1a2b3c';
const REGION = 'eu-west-1';
const credentials = { accessKeyId: 'AKIAIOSFODNN7EXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', sessionToken: 'session-token' };
const ID = IMAGE_ID;

/** An active image of project demo, 20 MiB: far over what a Lambda response could carry. */
const image = (over: Partial<Image> = {}): Image =>
  imageFixture({ name: 'cirros', status: 'active', sizeBytes: 20 * 1024 * 1024, sha256: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', md5: 'd41d8cd98f00b204e9800998ecf8427e', ...over });

type Handler = (event: APIGatewayProxyEventV2, context: Context) => Promise<APIGatewayProxyStructuredResultV2>;

const saved = { bucket: process.env.FERRY_BUCKET, endpoint: process.env.FERRY_S3_ENDPOINT, region: process.env.AWS_REGION };
const documents = DynamoDBDocumentClient.from(new DynamoDBClient({ region: REGION, credentials }));
const ddb = mockClient(documents);

beforeAll(() => {
  process.env.FERRY_BUCKET = BUCKET;
  process.env.AWS_REGION = REGION;
  // As on AWS: no local S3 server.
  delete process.env.FERRY_S3_ENDPOINT;
  setDb(documents);
});
afterEach(() => {
  ddb.reset();
  setPresigner(undefined);
});
afterAll(() => {
  setDb(undefined);
  for (const [k, v] of [['FERRY_BUCKET', saved.bucket], ['FERRY_S3_ENDPOINT', saved.endpoint], ['AWS_REGION', saved.region]] as const) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
});

const download = async (caller = DEMO, accept?: string) => {
  const res = await (handler as unknown as Handler)(apiEvent({ method: 'GET', path: `/image/v2/images/${ID}/file`, caller, headers: accept ? { Accept: accept } : {} }), lambdaContext);
  return { status: res.statusCode, headers: (res.headers ?? {}) as Record<string, string>, body: res.body ?? '' };
};

/** A signer that records what it was asked to sign. */
function recordingSigner(): { sign: Presign; calls: { Bucket: string; Key: string; ResponseContentType: string; expiresIn: number }[] } {
  const calls: { Bucket: string; Key: string; ResponseContentType: string; expiresIn: number }[] = [];
  return { calls, sign: async (_client, input, expiresIn) => (calls.push({ ...input, expiresIn }), `https://signed.example/${input.Key}`) };
}

describe('the presigned URL', () => {
  test('names the bucket and the image object, expires after DOWNLOAD_URL_SECONDS, signs only host, asks for octet-stream', async () => {
    // Prepare: the real signer, a client with fixed credentials (nothing is sent).
    setPresigner(new S3Client({ region: REGION, credentials, requestChecksumCalculation: 'WHEN_REQUIRED', responseChecksumValidation: 'WHEN_REQUIRED' }));
    // Act
    const url = new URL(await imageDownloadUrl(ID));
    // Assess
    expect(url.protocol).toBe('https:');
    expect(url.hostname).toBe(`${BUCKET}.s3.${REGION}.amazonaws.com`);
    expect(url.pathname).toBe(`/images/${ID}`);
    const q = url.searchParams;
    expect(q.get('X-Amz-Expires')).toBe(String(DOWNLOAD_URL_SECONDS));
    expect(q.get('X-Amz-Algorithm')).toBe('AWS4-HMAC-SHA256');
    expect(q.get('X-Amz-Credential')).toMatch(new RegExp(`^${credentials.accessKeyId}/\\d{8}/${REGION}/s3/aws4_request$`));
    expect(q.get('X-Amz-Security-Token')).toBe(credentials.sessionToken);
    expect(q.get('X-Amz-SignedHeaders')).toBe('host');
    expect(q.get('response-content-type')).toBe('application/octet-stream');
    expect([...q.keys()].filter((k) => k.toLowerCase().startsWith('x-amz-checksum'))).toEqual([]);
  });

  test('the client made for presigning leaves the checksum parameters out (the SDK default would add them)', async () => {
    // Prepare: only the signer is replaced, the client is the module's own.
    const { sign, calls } = recordingSigner();
    let seen: S3Client | undefined;
    setPresigner(undefined, async (client, input, expiresIn) => ((seen = client), sign(client, input, expiresIn)));
    // Act
    await imageDownloadUrl(ID, 60);
    // Assess
    expect(calls).toEqual([{ Bucket: BUCKET, Key: `images/${ID}`, ResponseContentType: 'application/octet-stream', expiresIn: 60 }]);
    expect(await seen!.config.requestChecksumCalculation()).toBe('WHEN_REQUIRED');
    expect(await seen!.config.responseChecksumValidation()).toBe('WHEN_REQUIRED');
  });
});

describe('GET /v2/images/{id}/file on AWS', () => {
  test('an active image: 302 to the presigned URL, with Glance\'s Content-MD5', async () => {
    const { sign, calls } = recordingSigner();
    setPresigner(new S3Client({ region: REGION, credentials }), sign);
    ddb.on(GetCommand, { Key: imageKey(ID) }).resolves({ Item: { ...imageKey(ID), ...image() } });
    const res = await download();
    expect(res.status).toBe(302);
    expect(res.headers.Location).toBe(`https://signed.example/images/${ID}`);
    expect(res.headers['Content-MD5']).toBe(image().md5);
    expect(res.body).toBe('');
    expect(calls).toEqual([{ Bucket: BUCKET, Key: `images/${ID}`, ResponseContentType: 'application/octet-stream', expiresIn: DOWNLOAD_URL_SECONDS }]);
  });

  test.each(['queued', 'saving'] as const)('a %s image (no data yet): 204, nothing signed', async (status) => {
    const { sign, calls } = recordingSigner();
    setPresigner(new S3Client({ region: REGION, credentials }), sign);
    ddb.on(GetCommand).resolves({ Item: { ...imageKey(ID), ...image({ status, md5: null }) } });
    const res = await download();
    expect(res.status).toBe(204);
    expect(res.headers.Location).toBeUndefined();
    expect(calls).toEqual([]);
  });

  test('another project\'s private image, or none: Glance\'s 404, nothing signed', async () => {
    const { sign, calls } = recordingSigner();
    setPresigner(new S3Client({ region: REGION, credentials }), sign);
    ddb.on(GetCommand).resolves({ Item: { ...imageKey(ID), ...image() } });
    const other = await download(OTHER, 'application/json');
    expect(other.status).toBe(404);
    expect(JSON.parse(other.body)).toEqual({ message: `No image found with ID ${ID}`, code: '404 Not Found', title: 'Not Found' });
    // GetItem of a key that is not there answers without an Item.
    ddb.on(GetCommand).resolves({});
    expect((await download(DEMO, 'application/json')).status).toBe(404);
    expect(calls).toEqual([]);
  });

  test('a throttled read of the image record is not answered as a redirect or a 404', async () => {
    const { sign, calls } = recordingSigner();
    setPresigner(new S3Client({ region: REGION, credentials }), sign);
    ddb.on(GetCommand).rejects(Object.assign(new Error('Rate of requests exceeds the allowed throughput.'), { name: 'ThrottlingException', $metadata: { httpStatusCode: 400 } }));
    const res = await download();
    expect(res.status).toBeGreaterThanOrEqual(500);
    expect(calls).toEqual([]);
  });

  test('the local stack (FERRY_S3_ENDPOINT set) streams instead', () => {
    expect(redirectsDownloads({})).toBe(true);
    expect(redirectsDownloads({ FERRY_S3_ENDPOINT: 'http://127.0.0.1:4569' })).toBe(false);
  });
});
