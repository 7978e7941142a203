/**
 * functions/core/db.ts's client: without a logger of its own it carries no SDK logger middleware
 * (which would build a redacted copy of every input and output for a no-op logger), and still
 * sends and parses requests; with a logger, the middleware stays and logs.
 */
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createDocumentClient, SDK_LOGGER_MIDDLEWARE } from '../../functions/core/db.js';

/**
 * A request handler standing in for DynamoDB (the unit tier opens no port): every request gets
 * the JSON protocol's answer to a GetItem of one item, through the whole middleware stack.
 */
const requestHandler = {
  handle: async () => ({
    response: {
      statusCode: 200,
      headers: { 'content-type': 'application/x-amz-json-1.0', 'x-amzn-requestid': 'r1' },
      body: Readable.from([Buffer.from(JSON.stringify({ Item: { pk: { S: 'A' }, sk: { S: 'B' }, n: { N: '7' } } }))]),
    },
  }),
};

const config = () => ({ region: 'us-east-1', endpoint: 'http://dynamodb.invalid', credentials: { accessKeyId: 'x', secretAccessKey: 'y' }, maxAttempts: 1, requestHandler });
const middlewareNames = (client: ReturnType<typeof createDocumentClient>) => client.middlewareStack.identify().map((m) => m.split(' ')[0]);

describe('the DynamoDB document client', () => {
  it('has no SDK logger middleware when no logger is given, and still gets and unmarshalls an item', async () => {
    // Prepare
    const client = createDocumentClient(config());
    // Act
    const out = await client.send(new GetCommand({ TableName: 't', Key: { pk: 'A', sk: 'B' } }));
    // Assess
    expect(middlewareNames(client)).not.toContain(SDK_LOGGER_MIDDLEWARE);
    expect(out.Item).toEqual({ pk: 'A', sk: 'B', n: 7 });
    client.destroy();
  });

  it('keeps the logger middleware for a logger of its own, which gets each request', async () => {
    // Prepare
    const logged: unknown[] = [];
    const logger = { debug: () => undefined, info: (x: unknown) => logged.push(x), warn: () => undefined, error: () => undefined };
    const client = createDocumentClient({ ...config(), logger });
    // Act
    await client.send(new GetCommand({ TableName: 't', Key: { pk: 'A', sk: 'B' } }));
    // Assess
    expect(middlewareNames(client)).toContain(SDK_LOGGER_MIDDLEWARE);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ commandName: 'GetItemCommand' });
    client.destroy();
  });
});
