/**
 * The last reconciler pass, kept for the operator console (one item in the volume table, pk
 * `AUDIT#LAST`, sk `AUDIT`): when it ran, what it checked, repaired and left, and the first findings
 * that remain. Newest wins: a slower pass that ends after a newer one does not overwrite it.
 */
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure } from '../core/db.js';
import { tableName } from '../core/tables.js';
import type { AuditFinding } from './findings.js';

const KEY = { pk: 'AUDIT#LAST', sk: 'AUDIT' } as const;
/** Findings listed on the record (the count is always exact): the console shows the first ones. */
export const LISTED_FINDINGS = 50;

export interface LastAudit {
  /** When the pass ended. */
  at: string;
  checked: Record<string, number>;
  repaired: number;
  left: number;
  findingCount: number;
  findings: AuditFinding[];
}

/** Records a pass unless a newer one is recorded already; true when it was. */
export async function recordLastAudit(audit: LastAudit): Promise<boolean> {
  try {
    await db().send(
      new PutCommand({
        TableName: tableName('volume'),
        Item: { ...KEY, ...audit, findings: audit.findings.slice(0, LISTED_FINDINGS).map(({ kind, resource, detail }) => ({ kind, resource, detail })) },
        ConditionExpression: 'attribute_not_exists(pk) OR #at < :at',
        ExpressionAttributeNames: { '#at': 'at' },
        ExpressionAttributeValues: { ':at': audit.at },
      }),
    );
    return true;
  } catch (e) {
    if (isConditionFailure(e)) return false;
    throw e;
  }
}

/** The last pass recorded, or undefined when none ran yet. */
export async function getLastAudit(): Promise<LastAudit | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: KEY, ConsistentRead: true }));
  if (!out.Item) return undefined;
  const { pk: _pk, sk: _sk, ...audit } = out.Item;
  return audit as LastAudit;
}
