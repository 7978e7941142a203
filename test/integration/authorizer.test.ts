/**
 * The HTTP API authorizer in both modes: noauth (the local stack's upstream `user:project`
 * convention) and token (the AWS deployment, tokens minted by `ferry token create` and checked
 * against the token table in DynamoDB Local).
 */
import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from 'vitest';
import { handler } from '../../functions/auth/authorizer.js';
import { createToken, tokenHash } from '../../functions/auth/tokens.js';
import { db } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';

const withToken = (token: string | undefined) => ({ headers: token === undefined ? {} : { 'X-Auth-Token': token } });
const savedMode = process.env.FERRY_AUTH_MODE;
afterAll(() => {
  if (savedMode === undefined) delete process.env.FERRY_AUTH_MODE;
  else process.env.FERRY_AUTH_MODE = savedMode;
});

describe('noauth mode', () => {
  beforeAll(() => {
    process.env.FERRY_AUTH_MODE = 'noauth';
  });

  test('user:project is that user in that project, not admin', async () => {
    expect(await handler(withToken('alice:proj1'))).toEqual({ isAuthorized: true, context: { userId: 'alice', projectId: 'proj1', roles: 'member,reader' } });
  });

  test('the user admin gets the admin role', async () => {
    const result = await handler(withToken('admin:ops'));
    expect(result.isAuthorized).toBe(true);
    expect(result.context?.roles.split(',')).toContain('admin');
  });

  test('a percent-encoded noauth token (glanceclient encodes header values) is read decoded', async () => {
    expect(await handler(withToken('demo%3Ademo'))).toEqual({ isAuthorized: true, context: { userId: 'demo', projectId: 'demo', roles: 'member,reader' } });
  });

  test('the header name is matched case-insensitively', async () => {
    expect((await handler({ headers: { 'x-auth-token': 'carol:p' } })).context?.userId).toBe('carol');
  });

  test.each([
    ['an empty token', withToken('')],
    ['no X-Auth-Token header', withToken(undefined)],
    ['no headers at all', {}],
    ['a token with no user', withToken(':proj1')],
  ])('%s is not authorized', async (_what, event) => {
    expect(await handler(event)).toEqual({ isAuthorized: false });
  });
});

describe('token mode (DynamoDB Local)', () => {
  let ddb: LocalDynamo;
  beforeAll(async () => {
    ddb = await useLocalDynamo();
    process.env.FERRY_AUTH_MODE = 'token';
  });
  afterAll(async () => ddb?.stop());
  afterEach(() => vi.restoreAllMocks());

  test('a minted token authorizes as its user, project and roles', async () => {
    const { token } = await createToken({ userId: 'alice', projectId: 'proj1', admin: false });
    expect(await handler(withToken(token))).toEqual({ isAuthorized: true, context: { userId: 'alice', projectId: 'proj1', roles: 'member,reader' } });
  });

  test('an admin token carries the admin role', async () => {
    const { token } = await createToken({ userId: 'root', projectId: 'ops', admin: true });
    expect((await handler(withToken(token))).context?.roles.split(',')).toContain('admin');
  });

  test('a wrong token is not authorized', async () => {
    const { token } = await createToken({ userId: 'alice', projectId: 'proj1', admin: false });
    expect(await handler(withToken(token.slice(0, -1) + (token.endsWith('A') ? 'B' : 'A')))).toEqual({ isAuthorized: false });
  });

  test('noauth mode: a token with no colon is no noauth token, refused unless it is in the token table', async () => {
    const { token } = await createToken({ userId: 'alice', projectId: 'proj1', admin: false });
    process.env.FERRY_AUTH_MODE = 'noauth';
    try {
      // demo%3a%ZZ: an encoded colon but a malformed escape, so not decoded and no noauth token.
      for (const t of ['bob', 'notused', 'admin', 'demo%3a%ZZ']) expect(await handler(withToken(t))).toEqual({ isAuthorized: false });
      expect((await handler(withToken(token))).context?.userId).toBe('alice');
    } finally {
      process.env.FERRY_AUTH_MODE = 'token';
    }
  });

  test('the noauth form is not accepted in token mode', async () => {
    expect(await handler(withToken('admin:admin'))).toEqual({ isAuthorized: false });
    expect(await handler(withToken('admin%3Aadmin'))).toEqual({ isAuthorized: false });
  });

  test('a missing token is not authorized', async () => {
    expect(await handler(withToken(undefined))).toEqual({ isAuthorized: false });
  });

  test('an expired token is refused even while DynamoDB still holds it (TTL deletes lazily)', async () => {
    const { token, record } = await createToken({ userId: 'dave', projectId: 'p', admin: false, ttlSeconds: 60 });
    expect((await handler(withToken(token))).isAuthorized).toBe(true);
    // Only the authorizer's clock moves on; the SDK's request signing keeps the real time.
    vi.spyOn(Date, 'now').mockReturnValue((record.expiresAt! + 1) * 1000);
    expect(await handler(withToken(token))).toEqual({ isAuthorized: false });
  });

  test('the table stores the token hash, never the token', async () => {
    const { token } = await createToken({ userId: 'erin', projectId: 'p', admin: false });
    const items = (await db().send(new ScanCommand({ TableName: tableName('tokens') }))).Items ?? [];
    const mine = items.filter((i) => i.userId === 'erin');
    expect(mine).toHaveLength(1);
    expect(mine[0]!.pk).toBe(`TOKEN#${tokenHash(token)}`);
    expect(JSON.stringify(items)).not.toContain(token);
    expect(JSON.stringify(items)).not.toContain(token.slice('ferry_'.length));
  });
});
