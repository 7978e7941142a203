import { mkdtempSync, rmSync } from 'node:fs';
import { acquireDataDirLock, writeStackFile } from '../../infra/local/data-dir-lock.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { main } from '../../bin/ferry.js';
import { lookupToken } from '../../functions/auth/tokens.js';
import { createDocumentClient, setDb } from '../../functions/core/db.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';

function capture() {
  const out: string[] = [];
  const err: string[] = [];
  return { io: { out: (l: string) => out.push(l), err: (l: string) => err.push(l) }, out, err };
}

let ddb: LocalDynamo;
let dataDir: string;
beforeAll(async () => {
  ddb = await useLocalDynamo();
  dataDir = mkdtempSync(join(tmpdir(), 'ferry-cli-'));
});
afterAll(async () => {
  await ddb.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('ferry CLI', () => {
  test('usage mistakes exit 2 and print the usage', async () => {
    const c = capture();
    expect(await main(['frobnicate'], c.io)).toBe(2);
    expect(c.err.join('\n')).toMatch(/unknown command "frobnicate"[\s\S]*usage:/);
    expect(await main(['token', 'create', '--project', 'p'], capture().io)).toBe(2);
  });

  test('token create prints a token the authorizer then accepts', async () => {
    const c = capture();
    expect(await main(['token', 'create', '--user', 'alice', '--project', 'demo'], c.io)).toBe(0);
    const token = c.out.find((l) => l.startsWith('token:'))!.split(/\s+/)[1]!;
    expect(await lookupToken(token)).toEqual({ userId: 'alice', projectId: 'demo', roles: 'member,reader' });
  });

  test('audit finds a running local stack through <data dir>/stack.json', async () => {
    // Prepare: no endpoint in the environment, only the file `npm start` writes.
    const endpoint = process.env.FERRY_DYNAMODB_ENDPOINT!;
    delete process.env.FERRY_DYNAMODB_ENDPOINT;
    process.env.FERRY_DATA_DIR = dataDir;
    // The stack.json of the stack holding the directory (a left-over one of a dead stack is ignored: below).
    const lock = acquireDataDirLock(dataDir);
    writeStackFile(lock, { url: 'http://127.0.0.1:8780', dynamodbEndpoint: endpoint });
    const sfnEndpoint = process.env.FERRY_SFN_ENDPOINT;
    delete process.env.FERRY_SFN_ENDPOINT;
    setDb(undefined);
    try {
      const c = capture();
      // Act
      const code = await main(['audit'], c.io);
      // Assess
      expect(process.env.FERRY_DYNAMODB_ENDPOINT).toBe(endpoint);
      // --repair's Step Functions reads go to the stack's own endpoint under its URL.
      expect(process.env.FERRY_SFN_ENDPOINT).toBe('http://127.0.0.1:8780/_aws/stepfunctions');
      expect(code).toBe(0);
      expect(c.out.join('\n')).toContain('audit clean');
      // Once the holder is gone, its stack.json names nothing running: "no local stack", exit 2.
      lock.release();
      delete process.env.FERRY_DYNAMODB_ENDPOINT;
      const gone = capture();
      expect(await main(['audit'], gone.io)).toBe(2);
      expect(gone.err.join('\n')).toContain(`no local stack is running for FERRY_DATA_DIR=${dataDir}`);
    } finally {
      delete process.env.FERRY_DATA_DIR;
      if (sfnEndpoint === undefined) delete process.env.FERRY_SFN_ENDPOINT;
      else process.env.FERRY_SFN_ENDPOINT = sfnEndpoint;
      process.env.FERRY_DYNAMODB_ENDPOINT = endpoint;
      setDb(createDocumentClient());
    }
  });

  test('audit against a stack it cannot reach exits 2 with the reason, not 1', async () => {
    // Prepare: an endpoint nothing listens on (port 9 on loopback: discard, closed here).
    const endpoint = process.env.FERRY_DYNAMODB_ENDPOINT!;
    process.env.FERRY_DYNAMODB_ENDPOINT = 'http://127.0.0.1:9';
    setDb(undefined);
    try {
      const c = capture();
      // Act
      const code = await main(['audit'], c.io);
      // Assess
      expect(code).toBe(2);
      expect(c.err.join('\n')).toContain('the audit could not read the stack (DynamoDB at http://127.0.0.1:9)');
    } finally {
      process.env.FERRY_DYNAMODB_ENDPOINT = endpoint;
      setDb(createDocumentClient());
    }
  }, 60_000);
});
