/**
 * User messages (C/message/api.py, M/message/api.py): what an asynchronous operation that failed
 * tells its user, kept for Cinder's and Manila's `message_ttl` (30 days) through the table's TTL
 * attribute. One item per message in the service's table:
 * pk `MSG#<id>`, sk `MSG`, gsi1 `PROJ#<project>#MSG` / `<createdAt>#<id>` (a project's, in order).
 *
 * A message's id is derived from what it is about (the resource, the action and the operation's
 * own key, e.g. the migration id), so a step that runs again records the same message, not a second.
 */
import { DeleteCommand, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { createHash } from 'node:crypto';
import { db, isConditionFailure, listKind } from '../core/db.js';
import { logger } from '../core/logger.js';
import { tableName, TTL_ATTRIBUTE, type TableKey } from '../core/tables.js';

/** Both services' message_ttl default: 2592000 s. */
export const MESSAGE_TTL_SECONDS = 2_592_000;

export interface UserMessage {
  id: string;
  projectId: string;
  requestId: string | null;
  /** VOLUME, VOLUME_SNAPSHOT (Cinder); SHARE, SHARE_SNAPSHOT... (Manila). */
  resourceType: string;
  resourceId: string;
  actionId: string;
  detailId: string;
  level: 'ERROR' | 'WARNING' | 'INFO';
  /** Ferry's own text for an action upstream has no message for (a share migration): shown as its user_message. */
  text?: string | null;
  createdAt: string;
  /** Epoch seconds: the TTL attribute, and upstream's expires_at / guaranteed_until. */
  expiresAt: number;
}

const messageKey = (id: string) => ({ pk: `MSG#${id}`, sk: 'MSG' });
const messageGsi1 = (m: Pick<UserMessage, 'projectId' | 'createdAt' | 'id'>) => ({ gsi1pk: `PROJ#${m.projectId}#MSG`, gsi1sk: `${m.createdAt}#${m.id}` });

/** A uuid derived from the message's subject: the same failure recorded twice is one message. */
export function messageId(...parts: string[]): string {
  const h = createHash('sha256').update(`ferry-message:${parts.join(':')}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

export interface NewMessage {
  /** What makes it one message (the resource and the operation's key); the id is derived from it. */
  key: string[];
  projectId: string;
  resourceType: string;
  resourceId: string;
  actionId: string;
  detailId: string;
  text?: string | null;
  requestId?: string | null;
  at?: string;
}

/**
 * Records a message once (conditional Put on a derived id). A failure to record is logged, never
 * thrown: the operation's own outcome (the error status) is already written and must not be undone
 * or retried because its message could not be.
 */
export async function recordMessage(table: TableKey, m: NewMessage): Promise<UserMessage | undefined> {
  const createdAt = m.at ?? new Date().toISOString();
  const msg: UserMessage = {
    id: messageId(...m.key),
    projectId: m.projectId,
    requestId: m.requestId ?? null,
    resourceType: m.resourceType,
    resourceId: m.resourceId,
    actionId: m.actionId,
    detailId: m.detailId,
    level: 'ERROR',
    text: m.text ?? null,
    createdAt,
    expiresAt: Math.floor(Date.parse(createdAt) / 1000) + MESSAGE_TTL_SECONDS,
  };
  try {
    await db().send(
      new PutCommand({
        TableName: tableName(table),
        Item: { ...messageKey(msg.id), ...messageGsi1(msg), ...msg, [TTL_ATTRIBUTE]: msg.expiresAt },
        ConditionExpression: 'attribute_not_exists(pk)',
      }),
    );
    return msg;
  } catch (e) {
    if (isConditionFailure(e)) return msg;
    logger.error('could not record a user message', { table, resourceId: m.resourceId, error: e as Error });
    return undefined;
  }
}

function toMessage(item: Record<string, unknown>): UserMessage {
  const { pk: _pk, sk: _sk, gsi1pk: _g, gsi1sk: _s, ...rest } = item;
  return rest as unknown as UserMessage;
}

/** DynamoDB removes expired items within days, not at once: an expired message is gone for the API already. */
const live = (m: UserMessage, nowSec: number) => m.expiresAt > nowSec;

export async function getMessage(table: TableKey, id: string): Promise<UserMessage | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName(table), Key: messageKey(id), ConsistentRead: true }));
  const m = out.Item ? toMessage(out.Item) : undefined;
  return m && live(m, Date.now() / 1000) ? m : undefined;
}

/** A project's messages, or every project's (undefined: an admin's list), oldest first. */
export async function listMessages(table: TableKey, projectId?: string): Promise<UserMessage[]> {
  const items = await listKind(tableName(table), { sk: 'MSG', pkPrefix: 'MSG#', gsi1pk: projectId === undefined ? undefined : `PROJ#${projectId}#MSG` });
  const nowSec = Date.now() / 1000;
  return items
    .map(toMessage)
    .filter((m) => live(m, nowSec))
    .sort((a, b) => (a.createdAt === b.createdAt ? a.id.localeCompare(b.id) : a.createdAt.localeCompare(b.createdAt)));
}

export async function deleteMessage(table: TableKey, id: string): Promise<void> {
  await db().send(new DeleteCommand({ TableName: tableName(table), Key: messageKey(id) }));
}
