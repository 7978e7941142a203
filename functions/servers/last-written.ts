/**
 * The last version of a record this process read or wrote, so that a read-modify-write (an instance
 * action's event, a migration's fields) can skip its read when nothing else wrote the record since.
 * It is only ever the BASE of a write that stays conditional on the stamp it was computed from
 * (`updatedAt`): when another writer came between, the condition fails, the entry is dropped and
 * the write is re-applied to a fresh read, exactly as a lost race always was. So a stale entry
 * costs one refused write, never a wrong one; nothing reads it to decide anything else.
 *
 * Why: a server step starts and ends an event and moves its migration, each a read then a write,
 * and on DynamoDB Local (2 cores) every request costs ~5-20 ms of a move's time; the process that
 * wrote the record last (the usual case: one step after another of the same operation) has it.
 */
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { db } from '../core/db.js';

/** Entries kept at most (oldest dropped first): a few per operation in flight is plenty. */
const MAX_ENTRIES = 512;

export class LastWritten<T extends { updatedAt: string }> {
  private readonly entries = new Map<string, T>();

  get(key: string): T | undefined {
    return this.entries.get(key);
  }

  set(key: string, value: T): void {
    this.entries.delete(key);
    // A copy: the caller may keep and change its object; the entry must stay what was stored.
    this.entries.set(key, structuredClone(value));
    if (this.entries.size > MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
  }

  drop(key: string): void {
    this.entries.delete(key);
  }

  /**
   * Puts `item` on condition that the stored `updatedAt` is still `expected` (the stamp of the base
   * it was computed from), then remembers `value` as the record's last version. On any failure the
   * entry is dropped, so the caller's next attempt reads the record afresh.
   */
  async putIfStamp(key: string, table: string, item: Record<string, unknown>, expected: string, value: T): Promise<void> {
    try {
      await db().send(new PutCommand({ TableName: table, Item: item, ConditionExpression: 'updatedAt = :u', ExpressionAttributeValues: { ':u': expected } }));
    } catch (e) {
      this.drop(key);
      throw e;
    }
    this.set(key, value);
  }
}

/**
 * A stamp for the next write strictly after `before`: two writes in the same millisecond would
 * otherwise carry the same `updatedAt`, and a base read between them could not tell them apart.
 */
export function stampAfter(before: string): string {
  const at = new Date();
  const prev = Date.parse(before);
  return Number.isFinite(prev) && at.getTime() <= prev ? new Date(prev + 1).toISOString() : at.toISOString();
}
