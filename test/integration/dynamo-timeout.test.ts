/**
 * A DynamoDB that accepts the connection and never answers must not hang Ferry for good: the
 * client from dynamoConfigFromEnv carries a request timeout (functions/core/db.ts). The SDK takes
 * `requestHandler` as plain options only in recent versions; this shows ours honours them, against
 * a real socket that swallows every request.
 */
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { describe, expect, test } from 'vitest';
import { createDocumentClient, dynamoConfigFromEnv, DYNAMO_REQUEST_TIMEOUT_MS } from '../../functions/core/db.js';
import { useSilentServer } from '../support/silent-server.js';

describe('a DynamoDB that never answers', () => {
  const silent = useSilentServer();

  test('the configured client carries a bounded request timeout', () => {
    const config = dynamoConfigFromEnv();
    expect(config.requestHandler).toMatchObject({ requestTimeout: DYNAMO_REQUEST_TIMEOUT_MS, throwOnRequestTimeout: true });
    expect(DYNAMO_REQUEST_TIMEOUT_MS).toBeGreaterThan(0);
  });

  test('a request to it fails with a timeout instead of hanging', async () => {
    const { endpoint, sockets } = silent();
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
