/**
 * API tokens for the AWS deployment. A token is a random secret shown once; the table keeps only
 * its SHA-256, with the user, project and roles it stands for. `ferry token create` mints one.
 */
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { createHash, randomBytes } from 'node:crypto';
import { db } from '../core/db.js';
import { tableName } from '../core/tables.js';
import type { AuthorizerContext } from '../core/auth.js';

export const tokenHash = (token: string) => createHash('sha256').update(token).digest('hex');
const tokenKey = (hash: string) => ({ pk: `TOKEN#${hash}`, sk: 'TOKEN' });

export interface TokenRecord extends AuthorizerContext {
  createdAt: string;
  /** epoch seconds; the table's TTL attribute */
  expiresAt?: number;
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
  await db().send(
    new PutCommand({ TableName: tableName('tokens'), Item: { ...tokenKey(tokenHash(token)), ...record }, ConditionExpression: 'attribute_not_exists(pk)' }),
  );
  return { token, record };
}

export async function lookupToken(token: string): Promise<AuthorizerContext | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('tokens'), Key: tokenKey(tokenHash(token)) }));
  const item = out.Item as TokenRecord | undefined;
  if (!item) return undefined;
  // TTL deletion is lazy on DynamoDB: an expired token is refused even while its item remains.
  if (item.expiresAt !== undefined && item.expiresAt * 1000 < Date.now()) return undefined;
  return { userId: item.userId, projectId: item.projectId, roles: item.roles };
}
