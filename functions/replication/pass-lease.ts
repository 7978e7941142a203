/**
 * One replication pass per backend at a time: the replication-pass machine's first step takes a
 * lease on the backend item, each page renews it, the last step (or the Catch) gives it back. A
 * lease is a single conditional write (no read first): a pass that loses learns who holds it from
 * ReturnValuesOnConditionCheckFailure. A pass that died without giving it back (an execution
 * stopped or timed out) holds it until PASS_LEASE_MS after its last renewal, then the next pass
 * takes it over.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { db, isConditionFailure } from '../core/db.js';
import { Conflict } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { backendOf } from '../volumes/backends.js';

/**
 * How long a lease lasts after its last renewal: longer than one page step with its retries (a
 * page Task's 310 s, plus the 1-2-4 s waits), so a live pass renews it before it runs out.
 */
export const PASS_LEASE_MS = 15 * 60_000;

export interface PassLease {
  /** The execution holding it (its name). */
  holder: string;
  /** Epoch ms after which another pass may take it. */
  until: number;
}

/** A pass found its lease taken over (it outlived PASS_LEASE_MS without a renewal): it stops, the pass holding the lease carries on. */
export class PassLeaseLost extends Conflict {}

const keyOf = (host: string) => ({ pk: `BACKEND#${backendOf(host)}`, sk: 'BACKEND' });

/**
 * Takes the backend's pass lease for `holder`, or renews it when `holder` has it. Returns
 * `{taken: false, heldBy}` when another live pass holds it, and `{taken: false}` with no holder
 * when the backend is gone.
 */
export async function takePassLease(host: string, holder: string, now: number): Promise<{ taken: true } | { taken: false; heldBy?: PassLease }> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: keyOf(host),
        UpdateExpression: 'SET passLease = :lease',
        ConditionExpression: 'attribute_exists(pk) AND (attribute_not_exists(passLease) OR passLease.holder = :holder OR passLease.#until < :now)',
        ExpressionAttributeNames: { '#until': 'until' },
        ExpressionAttributeValues: { ':lease': { holder, until: now + PASS_LEASE_MS } satisfies PassLease, ':holder': holder, ':now': now },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    return { taken: true };
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    // The old item comes back as DynamoDB attribute values, not through the document client.
    const raw = (e as { Item?: Parameters<typeof unmarshall>[0] }).Item;
    const lease = raw ? (unmarshall(raw).passLease as PassLease | undefined) : undefined;
    return { taken: false, ...(lease ? { heldBy: lease } : {}) };
  }
}

/** Gives the lease back if `holder` still has it; returns whether it did (false: another pass took it over, or the backend is gone). */
export async function releasePassLease(host: string, holder: string): Promise<boolean> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: keyOf(host),
        UpdateExpression: 'REMOVE passLease',
        ConditionExpression: 'passLease.holder = :holder',
        ExpressionAttributeValues: { ':holder': holder },
      }),
    );
    return true;
  } catch (e) {
    if (isConditionFailure(e)) return false;
    throw e;
  }
}
