/**
 * API tokens. A token is a random secret shown once; the table keeps only its SHA-256, with the
 * user, project and roles it stands for, and its expiry in the table's TTL attribute. Two kinds
 * live here: the tokens `ferry token create` mints, and Keystone tokens the identity API issues
 * (functions/identity), which also keep the token's Keystone body (`identity`). The authorizer
 * accepts both; revoking deletes the item, so a revoked token stops working at once.
 */
import { DeleteCommand, GetCommand, PutCommand, QueryCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { createHash, randomBytes } from 'node:crypto';
import { db } from '../core/db.js';
import { GSI1, tableName } from '../core/tables.js';
import type { AuthorizerContext } from '../core/auth.js';

/** What a Keystone token stands for (functions/identity builds its body from this). */
export interface TokenSubject {
  userId: string;
  userName: string;
  userDomainId: string;
  /** The names of the domains, for the token body (absent: the default domain's, or the id). */
  userDomainName?: string;
  /** Absent for an unscoped token. */
  project?: { id: string; name: string; domainId: string; domainName?: string };
  roles: { id: string; name: string }[];
  methods: string[];
  auditIds: string[];
  issuedAt: string;
  expiresAt: string;
  applicationCredentialId?: string;
}

export const tokenHash = (token: string) => createHash('sha256').update(token).digest('hex');
const tokenKey = (hash: string) => ({ pk: `TOKEN#${hash}`, sk: 'TOKEN' });

export interface TokenRecord extends AuthorizerContext {
  createdAt: string;
  /** epoch seconds; the table's TTL attribute */
  expiresAt?: number;
  /** Keystone tokens only: what the token body says. */
  identity?: TokenSubject;
}

export async function createToken(req: { userId: string; projectId: string; admin: boolean; ttlSeconds?: number }): Promise<{ token: string; record: TokenRecord }> {
  const token = `ferry_${randomBytes(32).toString('base64url')}`;
  const record: TokenRecord = {
    userId: req.userId,
    projectId: req.projectId,
    roles: req.admin ? 'admin,member,reader' : 'member,reader',
    createdAt: new Date().toISOString(),
    ...(req.ttlSeconds ? { expiresAt: Math.floor(Date.now() / 1000) + req.ttlSeconds } : {}),
  };
  await putToken(token, record);
  return { token, record };
}

async function putToken(token: string, record: TokenRecord, index: Record<string, string> = {}): Promise<void> {
  await db().send(
    new PutCommand({ TableName: tableName('tokens'), Item: { ...tokenKey(tokenHash(token)), ...index, ...record }, ConditionExpression: 'attribute_not_exists(pk)' }),
  );
}

/** The index entry of a user's Keystone tokens: what revokeUserTokens finds them by. */
const userTokensIndex = (userId: string) => `TOKENS#${userId}`;

/** A Keystone token for `subject` (expiry and issue time are the subject's). */
export async function createIdentityToken(subject: TokenSubject): Promise<string> {
  const token = randomBytes(48).toString('base64url');
  const record: TokenRecord = {
    userId: subject.userId,
    // Unscoped: no project, so the authorizer refuses it for the project APIs (as Cinder does).
    projectId: subject.project?.id ?? '',
    roles: subject.roles.map((r) => r.name).join(','),
    createdAt: subject.issuedAt,
    expiresAt: Math.ceil(Date.parse(subject.expiresAt) / 1000),
    identity: subject,
  };
  const index = { gsi1pk: userTokensIndex(subject.userId), gsi1sk: subject.expiresAt };
  if (!subject.project) {
    await putToken(token, record, index);
    return token;
  }
  // A project-scoped token also gets an entry under its project (expiring with it), so deleting
  // the project finds its tokens the way deleting a user does; both items in one transaction.
  const hash = tokenHash(token);
  await db().send(
    new TransactWriteCommand({
      TransactItems: [
        { Put: { TableName: tableName('tokens'), Item: { ...tokenKey(hash), ...index, ...record }, ConditionExpression: 'attribute_not_exists(pk)' } },
        { Put: { TableName: tableName('tokens'), Item: { ...projectTokenKey(subject.project.id, hash), expiresAt: record.expiresAt } } },
      ],
    }),
  );
  return token;
}

const projectTokenKey = (projectId: string, hash: string) => ({ pk: `PROJECT_TOKENS#${projectId}`, sk: hash });

/**
 * Revokes every Keystone token scoped to the project, as Keystone does when the project is deleted
 * or disabled (or its domain is). Conditional deletes, as revokeUserTokens.
 */
export async function revokeProjectTokens(projectId: string): Promise<number> {
  let count = 0;
  let start: Record<string, unknown> | undefined;
  do {
    const out = await db().send(
      new QueryCommand({ TableName: tableName('tokens'), KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': `PROJECT_TOKENS#${projectId}` }, ConsistentRead: true, ExclusiveStartKey: start }),
    );
    for (const item of out.Items ?? []) {
      const hash = item.sk as string;
      try {
        await db().send(new DeleteCommand({ TableName: tableName('tokens'), Key: tokenKey(hash), ConditionExpression: 'attribute_exists(pk)' }));
        count++;
      } catch (e) {
        if ((e as Error).name !== 'ConditionalCheckFailedException') throw e;
      }
      await db().send(new DeleteCommand({ TableName: tableName('tokens'), Key: projectTokenKey(projectId, hash) }));
    }
    start = out.LastEvaluatedKey;
  } while (start);
  return count;
}

/** The stored record, expired or not (the identity API answers an expired token differently from an unknown one). */
export async function readToken(token: string): Promise<TokenRecord | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('tokens'), Key: tokenKey(tokenHash(token)), ConsistentRead: true }));
  return out.Item as TokenRecord | undefined;
}

// TTL deletion is lazy on DynamoDB: an expired token is refused even while its item remains.
export const isExpired = (record: TokenRecord, now = Date.now()) => record.expiresAt !== undefined && record.expiresAt * 1000 <= now;

export async function lookupToken(token: string): Promise<AuthorizerContext | undefined> {
  const item = await readToken(token);
  if (!item || isExpired(item) || !item.projectId) return undefined;
  return { userId: item.userId, projectId: item.projectId, roles: item.roles };
}

/** Deletes the token; false when there was none. */
export async function revokeToken(token: string): Promise<boolean> {
  try {
    await db().send(new DeleteCommand({ TableName: tableName('tokens'), Key: tokenKey(tokenHash(token)), ConditionExpression: 'attribute_exists(pk)' }));
    return true;
  } catch (e) {
    if ((e as Error).name === 'ConditionalCheckFailedException') return false;
    throw e;
  }
}

/**
 * Revokes every Keystone token of the user, as Keystone does when a user is deleted, disabled or
 * given a new password. Each delete is conditional on the item, so a token revoked meanwhile is no error.
 */
export async function revokeUserTokens(userId: string): Promise<number> {
  let count = 0;
  let start: Record<string, unknown> | undefined;
  do {
    const out = await db().send(
      new QueryCommand({ TableName: tableName('tokens'), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': userTokensIndex(userId) }, ExclusiveStartKey: start }),
    );
    for (const item of out.Items ?? []) {
      try {
        await db().send(new DeleteCommand({ TableName: tableName('tokens'), Key: { pk: item.pk, sk: item.sk }, ConditionExpression: 'attribute_exists(pk)' }));
        count++;
      } catch (e) {
        if ((e as Error).name !== 'ConditionalCheckFailedException') throw e;
      }
    }
    start = out.LastEvaluatedKey;
  } while (start);
  return count;
}
