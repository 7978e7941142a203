/**
 * A DynamoDB that accepts the connection and never answers must not hang Ferry for good: the
 * client from dynamoConfigFromEnv carries a request timeout (functions/core/db.ts). The SDK takes
 * `requestHandler` as plain options only in recent versions; this shows ours honours them, against
 * a real socket that swallows every request.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createDocumentClient, dynamoConfigFromEnv, DYNAMO_REQUEST_TIMEOUT_MS } from '../../functions/core/db.js';

describe('a DynamoDB that never answers', () => {
  let server: Server;
  const sockets: Socket[] = [];
  let endpoint = '';

  beforeAll(async () => {
    server = createServer((socket) => {
      sockets.push(socket);
      socket.on('data', () => undefined); // reads the request, answers nothing
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  });

  test('the configured client carries a bounded request timeout', () => {
    const config = dynamoConfigFromEnv();
    expect(config.requestHandler).toMatchObject({ requestTimeout: DYNAMO_REQUEST_TIMEOUT_MS, throwOnRequestTimeout: true });
    expect(DYNAMO_REQUEST_TIMEOUT_MS).toBeGreaterThan(0);
  });

  test('a request to it fails with a timeout instead of hanging', async () => {
    const base = { ...dynamoConfigFromEnv(), endpoint, credentials: { accessKeyId: 'ferry', secretAccessKey: 'ferry' }, maxAttempts: 1 };
    // The same options shape as production, at a bound a test can wait for.
    const client = createDocumentClient({ ...base, requestHandler: { ...(base.requestHandler as object), requestTimeout: 300 } });
    const started = Date.now();
    const err = await client.send(new GetCommand({ TableName: 't', Key: { pk: 'x' } })).then(() => undefined, (e: Error) => e);
    expect(err?.name).toBe('TimeoutError');
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(sockets.length).toBeGreaterThan(0);
  });
});
