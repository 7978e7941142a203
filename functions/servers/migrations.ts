/**
 * Persistence of migrations (Nova's Migration records) in their cell's table: the integer id from
 * an atomic per-cell counter, puts conditional on creation or on the status they leave, and field
 * updates conditional on the `updatedAt` read (or last written by this process: last-written.ts; a
 * lost race re-reads and re-applies).
 */
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { CellMapping } from '../compute/model.js';
import { cellTable, fromItem, listCells, type TransactItem } from '../compute/repo.js';
import { db, isConditionFailure, queryAll, withRetries } from '../core/db.js';
import { NotFound } from '../core/errors.js';
import { LastWritten, stampAfter } from './last-written.js';
import { migrationCounterKey, migrationKey, SERVER_GSI, type Migration } from './model.js';

const now = () => new Date().toISOString();

function migrationItem(m: Migration): Record<string, unknown> {
  return { ...migrationKey(m.uuid), gsi1pk: SERVER_GSI.migrations, gsi1sk: `${m.createdAt}#${m.uuid}`, ...m };
}

/** The next integer migration id of the cell (Nova's autoincrement; an atomic counter). */
export async function nextMigrationId(cell: CellMapping): Promise<number> {
  const out = await db().send(
    new UpdateCommand({
      TableName: cellTable(cell),
      Key: migrationCounterKey(),
      UpdateExpression: 'ADD #n :one',
      ExpressionAttributeNames: { '#n': 'next' },
      ExpressionAttributeValues: { ':one': 1 },
      ReturnValues: 'UPDATED_NEW',
    }),
  );
  return Number(out.Attributes?.next);
}

/** Each migration as this process last read or wrote it, the base of its next update (last-written.ts). */
const lastMigrations = new LastWritten<Migration>();
const memoKey = (cell: CellMapping, uuid: string) => `${cellTable(cell)}|${uuid}`;

export async function getMigration(cell: CellMapping, uuid: string): Promise<Migration | undefined> {
  const out = await db().send(new GetCommand({ TableName: cellTable(cell), Key: migrationKey(uuid), ConsistentRead: true }));
  const found = out.Item ? fromItem<Migration>(out.Item) : undefined;
  if (found) lastMigrations.set(memoKey(cell, uuid), found);
  else lastMigrations.drop(memoKey(cell, uuid));
  return found;
}

export function migrationPutItem(cell: CellMapping, m: Migration, options: { create?: boolean; expectedStatus?: string } = {}): TransactItem {
  return {
    Put: {
      TableName: cellTable(cell),
      Item: migrationItem(m),
      ...(options.create
        ? { ConditionExpression: 'attribute_not_exists(pk)' }
        : options.expectedStatus
          ? { ConditionExpression: '#s = :s', ExpressionAttributeNames: { '#s': 'status' }, ExpressionAttributeValues: { ':s': options.expectedStatus } }
          : {}),
    },
  };
}

/**
 * A transaction item moving a migration to `status` without reading it: for a write whose own
 * conditions decide (the cross-cell mapping flip). Its stamp must be later than the stored one, so
 * a base another process remembers (last-written.ts) is refused afterwards as after any write.
 */
export function migrationStatusItem(cell: CellMapping, uuid: string, status: Migration['status']): TransactItem {
  return {
    Update: {
      TableName: cellTable(cell),
      Key: migrationKey(uuid),
      UpdateExpression: 'SET #s = :s, updatedAt = :u',
      ConditionExpression: 'attribute_exists(pk) AND updatedAt < :u',
      ExpressionAttributeNames: { '#s': 'status' },
      ExpressionAttributeValues: { ':s': status, ':u': now() },
    },
  };
}

/**
 * Sets fields of a migration (its status among them); a status move is idempotent when already
 * there. The first attempt builds on the migration as this process last read or wrote it, when it
 * has it: the put's condition on `updatedAt` refuses a stale base, and the retry reads afresh.
 */
export async function updateMigration(cell: CellMapping, uuid: string, patch: Partial<Migration>): Promise<Migration> {
  const key = memoKey(cell, uuid);
  return withRetries(
    async (attempt) => {
      const current = (attempt === 0 ? lastMigrations.get(key) : undefined) ?? (await getMigration(cell, uuid));
      if (!current) throw new NotFound(`Migration ${uuid} could not be found.`);
      const next: Migration = { ...current, ...patch, updatedAt: stampAfter(current.updatedAt) };
      await lastMigrations.putIfStamp(key, cellTable(cell), migrationItem(next), current.updatedAt, next);
      return next;
    },
    { retryable: (e) => isConditionFailure(e) },
  );
}

export async function listMigrations(): Promise<{ cell: CellMapping; migration: Migration }[]> {
  const cells = await listCells();
  const per = await Promise.all(
    cells.map(async (cell) =>
      (await queryAll({ TableName: cellTable(cell), IndexName: 'gsi1', KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': SERVER_GSI.migrations } })).map((i) => ({
        cell,
        migration: fromItem<Migration>(i),
      })),
    ),
  );
  return per.flat();
}

/**
 * The migrations the API lists: during a cross-cell move a migration exists in both cells' tables
 * (TargetDBSetupTask copies it), so one per uuid, the newer by updatedAt (createdAt when equal),
 * as upstream's list merges cells and drops `hidden` ones.
 */
export async function listShownMigrations(): Promise<Migration[]> {
  const newest = new Map<string, Migration>();
  for (const { migration: m } of await listMigrations()) {
    if ((m as Migration & { hidden?: boolean }).hidden === true) continue;
    const seen = newest.get(m.uuid);
    const newer = !seen || (m.updatedAt ?? m.createdAt).localeCompare(seen.updatedAt ?? seen.createdAt) > 0;
    if (newer) newest.set(m.uuid, m);
  }
  return [...newest.values()];
}
