/**
 * The embedded local stack as `npm start` runs it (DynamoDB Local, s3rver, local Step Functions,
 * the HTTP server), with fixture functions and machines injected (test/fixtures/local-stack).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { request } from 'node:http';
import { createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { DescribeExecutionCommand, StartExecutionCommand } from '@aws-sdk/client-sfn';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { db } from '../../functions/core/db.js';
import { sfn } from '../../functions/core/executions.js';
import { bucket, s3 } from '../../functions/core/s3.js';
import { tableName } from '../../functions/core/tables.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';
import { FIXTURE_FUNCTIONS, FIXTURE_MACHINES, fixtureMachineArn } from '../fixtures/local-stack/wiring.js';

let stack: TestLocalStack;

/** Each start's reconcile, as the stack called it, with what was true at that moment. */
const reconciles: { before: Date; at: Date; serverAnswered: boolean; runs: unknown }[] = [];
const RESTART_RUNS_KEY = { pk: 'FIXTURE#restart-1', sk: 'RUNS' };

beforeAll(async () => {
  // The fixture's 300 s Wait takes 3 s.
  process.env.FERRY_LOCAL_WAIT_SCALE = '0.01';
  stack = await useLocalStack({
    // Its restart test shows DynamoDB Local's data surviving the JVM's own stop and start.
    dedicatedDynamo: true,
    functions: FIXTURE_FUNCTIONS,
    machines: FIXTURE_MACHINES,
    reconciler: async ({ before }) => {
      const serverAnswered = stack ? await fetch(`${stack.url}/healthz`).then(() => true, () => false) : false;
      const runs = (await db().send(new GetCommand({ TableName: tableName('volume'), Key: RESTART_RUNS_KEY }))).Item?.runs;
      reconciles.push({ before, at: new Date(), serverAnswered, runs });
      return { repaired: [], left: [], remaining: [] };
    },
  });
});
afterAll(async () => stack?.stop());

interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A request with full control of headers (repeated headers, cookies), unlike fetch. */
function send(method: string, path: string, headers: Record<string, string | string[]> = {}, body?: Buffer | string): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request(`${stack.url}${path}`, { method }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
    });
    for (const [k, v] of Object.entries(headers)) req.setHeader(k, v);
    req.on('error', reject);
    req.end(body);
  });
}

describe('HTTP server', () => {
  test('GET /healthz answers ok', async () => {
    // Act
    const res = await send('GET', '/healthz');

    // Assess
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toEqual({ status: 'ok' });
  });

  test('an authenticated route without a token is 401 with the unauthorized fault body', async () => {
    // Act
    const res = await send('GET', '/echo/v1/things');

    // Assess
    expect(res.status).toBe(401);
    expect(JSON.parse(res.body)).toEqual({ unauthorized: { code: 401, message: 'Authentication required' } });
  });

  test('a path no function serves is 404 with the itemNotFound body', async () => {
    // Act
    const res = await send('GET', '/echoes/v1', { 'X-Auth-Token': 'alice:proj' });

    // Assess
    expect(res.status).toBe(404);
    expect(JSON.parse(res.body)).toEqual({ itemNotFound: { code: 404, message: 'The resource could not be found.' } });
  });

  test('the handler gets the API Gateway payload 2.0 event, with the authorizer context, and its result is written back', async () => {
    // Act
    const res = await send(
      'POST',
      '/echo/v1/things/a%20b?x=1&x=2&y=z',
      { 'X-Auth-Token': 'alice:proj', 'Content-Type': 'application/json', 'X-Multi': ['a', 'b'], Cookie: 'c1=1; c2=2', 'User-Agent': 'ferry-test' },
      JSON.stringify({ thing: { name: 'n' } }),
    );

    // Assess
    expect(res.status).toBe(201);
    expect(res.headers['x-echo']).toBe('yes');
    const { event, context } = JSON.parse(res.body);
    expect(event).toMatchObject({
      version: '2.0',
      routeKey: 'ANY /echo/{proxy+}',
      rawPath: '/echo/v1/things/a%20b',
      rawQueryString: 'x=1&x=2&y=z',
      cookies: ['c1=1', 'c2=2'],
      queryStringParameters: { x: '1,2', y: 'z' },
      pathParameters: { proxy: 'v1/things/a%20b' },
      body: JSON.stringify({ thing: { name: 'n' } }),
      isBase64Encoded: false,
      requestContext: {
        accountId: '000000000000',
        apiId: 'local',
        domainName: `127.0.0.1:${stack.port}`,
        routeKey: 'ANY /echo/{proxy+}',
        stage: '$default',
        http: { method: 'POST', path: '/echo/v1/things/a%20b', protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'ferry-test' },
        authorizer: { lambda: { userId: 'alice', projectId: 'proj', roles: 'member,reader' } },
      },
    });
    expect(event.headers).toMatchObject({ 'x-auth-token': 'alice:proj', 'x-multi': 'a,b', 'content-type': 'application/json' });
    expect(event.headers.cookie).toBeUndefined();
    expect(typeof event.requestContext.requestId).toBe('string');
    expect(typeof event.requestContext.timeEpoch).toBe('number');
    expect(event.requestContext.time).toMatch(/^\d{2}\/[A-Z][a-z]{2}\/\d{4}:\d{2}:\d{2}:\d{2} \+0000$/);
    expect(context.functionName).toBe('ferry-echo-api');
    expect(context.remainingMs).toBeGreaterThan(0);
    expect(context.remainingMs).toBeLessThanOrEqual(29_000);
  });

  test('a binary body arrives base64-encoded', async () => {
    // Prepare
    const bytes = randomBytes(300);

    // Act
    const res = await send('PUT', '/echo/v1/blob', { 'X-Auth-Token': 'alice:alice', 'Content-Type': 'application/octet-stream' }, bytes);

    // Assess
    const { event } = JSON.parse(res.body);
    expect(event.isBase64Encoded).toBe(true);
    expect(Buffer.from(event.body, 'base64').equals(bytes)).toBe(true);
  });

  test('a GET of a public path (trailing slash ignored) needs no token and carries no authorizer context', async () => {
    // Act
    const root = await send('GET', '/echo');
    const versioned = await send('GET', '/echo/v1/');

    // Assess
    expect(root.status).toBe(201);
    const rootEvent = JSON.parse(root.body).event;
    expect(rootEvent.routeKey).toBe('ANY /echo');
    expect(rootEvent.pathParameters).toBeUndefined();
    expect(rootEvent.requestContext.authorizer).toBeUndefined();
    expect(versioned.status).toBe(201);
  });

  test('a plain object result becomes a 200 JSON response, as API Gateway does', async () => {
    // Act
    const res = await send('GET', '/echo/v1/plain', { 'X-Auth-Token': 'alice:alice' });

    // Assess
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('application/json');
    expect(JSON.parse(res.body)).toEqual({ plain: true });
  });
});

describe('S3', () => {
  test('a streamed put and a get through s3() are byte-identical', async () => {
    // Prepare: 5 MiB in 64 KiB chunks, streamed (not a buffer).
    const chunks = Array.from({ length: 80 }, () => randomBytes(64 * 1024));
    const expected = createHash('sha256').update(Buffer.concat(chunks)).digest('hex');

    // Act
    await (await s3()).send(new PutObjectCommand({ Bucket: bucket(), Key: 'roundtrip/blob', Body: Readable.from(chunks), ContentLength: 80 * 64 * 1024 }));
    const got = await (await s3()).send(new GetObjectCommand({ Bucket: bucket(), Key: 'roundtrip/blob' }));
    const bytes = Buffer.from(await got.Body!.transformToByteArray());

    // Assess
    expect(bytes.length).toBe(80 * 64 * 1024);
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(expected);
  });
});

describe('restart', () => {
  test('an execution stopped mid-run resumes after a restart and finishes, and DynamoDB and S3 keep their data', async () => {
    // Prepare: the execution has recorded its first run in DynamoDB and sits in its Wait state.
    const runsKey = RESTART_RUNS_KEY;
    const { executionArn } = await (await sfn()).send(
      new StartExecutionCommand({ stateMachineArn: fixtureMachineArn('fixture-pause'), name: 'restart-1', input: JSON.stringify({ id: 'restart-1' }) }),
    );
    await eventually(async () => (await db().send(new GetCommand({ TableName: tableName('volume'), Key: runsKey }))).Item, 'the first run to be recorded');
    await (await s3()).send(new PutObjectCommand({ Bucket: bucket(), Key: 'restart/marker', Body: 'kept' }));

    // Act
    let statusWhileStopped: string | undefined;
    const restartBegan = new Date();
    await stack.restart(async () => {
      const file = join(stack.dataDir, 'stepfunctions', 'executions', 'fixture-pause@restart-1.json');
      statusWhileStopped = JSON.parse(await readFile(file, 'utf8')).status;
    });
    const out = await eventually(async () => {
      const d = await (await sfn()).send(new DescribeExecutionCommand({ executionArn }));
      return d.status === 'RUNNING' ? undefined : d;
    }, 'the resumed execution to finish');

    // Assess: it was still RUNNING on disk while stopped, then ran again from the start.
    expect(statusWhileStopped).toBe('RUNNING');
    expect(out.status).toBe('SUCCEEDED');
    expect(JSON.parse(out.output!)).toEqual({ id: 'restart-1', done: true, runs: 2 });
    const item = (await db().send(new GetCommand({ TableName: tableName('volume'), Key: runsKey }))).Item;
    expect(item?.runs).toBe(2);
    const marker = await (await s3()).send(new GetObjectCommand({ Bucket: bucket(), Key: 'restart/marker' }));
    expect(await marker.Body!.transformToString()).toBe('kept');
    // The reconciler ran at each start, with `before` = that start's time: at the restart once
    // the server answered (the pass runs in the background) and before the stopped execution
    // resumed (its second run not begun).
    expect(reconciles).toHaveLength(2);
    const atRestart = reconciles[1]!;
    expect(atRestart.before.getTime()).toBeGreaterThanOrEqual(restartBegan.getTime());
    expect(atRestart.before.getTime()).toBeLessThanOrEqual(atRestart.at.getTime());
    expect(atRestart).toMatchObject({ serverAnswered: true, runs: 1 });
  });
});
