/**
 * The image-import steps' tour for test/infra/permissions.test.ts: `download` (a local source, the
 * image importing in DynamoDB) and `import-failed` run against mocked S3 and DynamoDB clients whose
 * replies follow the API references (GetItem answers the item, UpdateItem `{}`, PutObject an ETag
 * once it has read the body, DeleteObject `{}`); each call becomes the IAM request AWS authorizes.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DeleteObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { setDb } from '../../functions/core/db.js';
import { setS3 } from '../../functions/core/s3.js';
import { handler } from '../../functions/images/import-steps.js';
import type { Image } from '../../functions/servers/model.js';
import type { Recorded } from './driver-tours.js';
import { IMAGE_ID, imageFixture } from './image-fixtures.js';

export const TOUR_BUCKET = 'ferry-images-test';
export const TOUR_TABLE_ARN = 'arn:aws:dynamodb:us-east-1:111122223333:table/ferry-compute-api';
/** The fixture image's id. */
export const TOUR_IMAGE_ID = IMAGE_ID;

const S3_ACTIONS: Record<string, string> = { PutObjectCommand: 's3:PutObject', DeleteObjectCommand: 's3:DeleteObject' };
const DYNAMO_ACTIONS: Record<string, string> = { GetCommand: 'dynamodb:GetItem', UpdateCommand: 'dynamodb:UpdateItem' };

/** Runs both steps once; the commands they sent, as IAM requests. */
export async function recordImageImportCalls(): Promise<Recorded[]> {
  const body = Buffer.alloc(4096, 3);
  const source = createServer((_req, res) => res.writeHead(200, { 'Content-Length': String(body.length) }).end(body));
  await new Promise<void>((r) => source.listen(0, '127.0.0.1', r));
  const at = new Date().toISOString();
  const taskId = 'c0ffee00-0000-4000-8000-000000000001';
  const image: Image = imageFixture({
    status: 'importing',
    importTask: { id: taskId, status: 'processing', method: 'web-download', uri: `http://127.0.0.1:${(source.address() as AddressInfo).port}/tour.img`, message: '', ownerProjectId: 'demo', userId: 'demo', createdAt: at, updatedAt: at },
  });

  const s3Client = new S3Client({ region: 'us-east-1' });
  const docClient = DynamoDBDocumentClient.from(new DynamoDBClient({ region: 'us-east-1' }));
  const s3Mock = mockClient(s3Client);
  const dbMock = mockClient(docClient);
  const recorded: Recorded[] = [];
  const note = (command: string, action: string, resource: string) => recorded.push({ command, requests: [{ action, resource, context: {} }] });
  s3Mock.on(PutObjectCommand).callsFake(async (input: { Bucket: string; Key: string; Body: AsyncIterable<Buffer> }) => {
    for await (const chunk of input.Body) void chunk;
    note('PutObjectCommand', S3_ACTIONS.PutObjectCommand!, `arn:aws:s3:::${input.Bucket}/${input.Key}`);
    return { ETag: '"tour"' };
  });
  s3Mock.on(DeleteObjectCommand).callsFake(async (input: { Bucket: string; Key: string }) => {
    note('DeleteObjectCommand', S3_ACTIONS.DeleteObjectCommand!, `arn:aws:s3:::${input.Bucket}/${input.Key}`);
    return {};
  });
  dbMock.on(GetCommand).callsFake(async () => (note('GetCommand', DYNAMO_ACTIONS.GetCommand!, TOUR_TABLE_ARN), { Item: { pk: `IMAGE#${TOUR_IMAGE_ID}`, sk: 'IMAGE', ...image } }));
  dbMock.on(UpdateCommand).callsFake(async () => (note('UpdateCommand', DYNAMO_ACTIONS.UpdateCommand!, TOUR_TABLE_ARN), {}));
  const saved = { bucket: process.env.FERRY_BUCKET, ports: process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS };
  process.env.FERRY_BUCKET = TOUR_BUCKET;
  process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS = 'any';
  setS3(s3Client);
  setDb(docClient);
  try {
    await handler({ step: 'download', imageId: TOUR_IMAGE_ID, taskId });
    await handler({ step: 'import-failed', imageId: TOUR_IMAGE_ID, taskId, error: { Error: 'ImportSourceRefused', Cause: 'tour' } });
  } finally {
    setS3(undefined);
    setDb(undefined);
    for (const [k, v] of [['FERRY_BUCKET', saved.bucket], ['FERRY_IMAGE_IMPORT_ALLOWED_PORTS', saved.ports]] as const) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    source.close();
  }
  return recorded;
}

/** The commands the steps' modules can send (the tour must make each). */
export const IMAGE_IMPORT_COMMANDS = new Set([...Object.keys(S3_ACTIONS), ...Object.keys(DYNAMO_ACTIONS)]);
