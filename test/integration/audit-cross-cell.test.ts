/**
 * The audit knows cross-cell copies (issue 12): each broken copy state is planted in DynamoDB
 * Local through the repo functions on top of a booted server, and the audit names it; a hidden
 * copy with its move in flight (a non-final migration) gives no finding for that server.
 */
import { DeleteCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { listCells } from '../../functions/compute/repo.js';
import type { CellMapping } from '../../functions/compute/model.js';
import { db } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { cloneToCell } from '../../functions/servers/flows/cross-cell/copies.js';
import { migrationPutItem } from '../../functions/servers/migrations.js';
import { instanceKey, instanceMappingKey, type Migration } from '../../functions/servers/model.js';
import { findServer } from '../../functions/servers/repo.js';
import { bootServer, novaClient, settled, type Nova } from '../support/nova.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
let nova: Nova;
let cells: CellMapping[];

beforeAll(async () => {
  stack = await useLocalStack();
  nova = novaClient(stack);
  cells = await listCells();
}, 120_000);
afterAll(async () => stack?.stop());

/** A booted ACTIVE server in cell1 and the other cell. */
async function server(): Promise<{ uuid: string; source: CellMapping; target: CellMapping }> {
  const uuid = await bootServer(nova, { name: `xc-${randomUUID().slice(0, 8)}` });
  await settled(nova, uuid);
  const found = (await findServer(uuid))!;
  return { uuid, source: found.cell, target: cells.find((c) => c.uuid !== found.cell.uuid)! };
}

async function findingsOf(uuid: string): Promise<string[]> {
  const report = await runAudit();
  return report.findings.filter((f) => f.resource.includes(uuid)).map((f) => f.kind).sort();
}

async function plantMigration(cell: CellMapping, uuid: string, status: Migration['status']): Promise<void> {
  const now = new Date().toISOString();
  const m: Migration = {
    id: 9000 + Math.floor(Math.random() * 1000), uuid: randomUUID(), instanceUuid: uuid, migrationType: 'resize', status,
    sourceCompute: null, sourceNode: null, destCompute: null, destNode: null, destHost: null, oldInstanceTypeId: 1, newInstanceTypeId: 2,
    crossCellMove: true, memoryTotal: null, memoryProcessed: null, memoryRemaining: null, diskTotal: null, diskProcessed: null, diskRemaining: null,
    projectId: 'demo', userId: 'demo', createdAt: now, updatedAt: now,
  };
  const item = migrationPutItem(cell, m, { create: true });
  await db().send(new PutCommand({ TableName: item.Put!.TableName, Item: item.Put!.Item }));
}

describe('audit of cross-cell copies', () => {
  test('a booted server alone is clean', async () => {
    const { uuid } = await server();
    expect(await findingsOf(uuid)).toEqual([]);
  }, 120_000);

  test('a hidden copy without a move is hidden-copy-without-move; with its migrations in flight it is clean', async () => {
    const { uuid, source, target } = await server();
    await cloneToCell(source, target, uuid);
    expect(await findingsOf(uuid)).toEqual(['hidden-copy-without-move']);
    // The VERIFY_RESIZE-like picture: the source copy's migration post-migrating, the target's finished.
    await plantMigration(source, uuid, 'post-migrating');
    await plantMigration(target, uuid, 'finished');
    expect(await findingsOf(uuid)).toEqual([]);
  }, 120_000);

  test('two unhidden copies of one uuid are two-visible-copies', async () => {
    const { uuid, source, target } = await server();
    await cloneToCell(source, target, uuid);
    const found = (await findServer(uuid))!;
    const copy = await db().send(new UpdateCommand({
      TableName: tableName(target.table), Key: instanceKey(uuid), UpdateExpression: 'SET #hidden = :f', ExpressionAttributeNames: { '#hidden': 'hidden' }, ExpressionAttributeValues: { ':f': false }, ReturnValues: 'ALL_NEW',
    }));
    expect(copy.Attributes?.hidden).toBe(false);
    expect(found.cell.uuid).toBe(source.uuid);
    expect(await findingsOf(uuid)).toContain('two-visible-copies');
  }, 120_000);

  test('an instance mapping pointing at a cell without the instance is mapping-cell-without-instance', async () => {
    const { uuid, target } = await server();
    await db().send(new UpdateCommand({
      TableName: tableName('compute-api'), Key: instanceMappingKey(uuid), UpdateExpression: 'SET cellUuid = :c', ExpressionAttributeValues: { ':c': target.uuid },
    }));
    expect(await findingsOf(uuid)).toContain('mapping-cell-without-instance');
  }, 120_000);

  test('BDMs and actions left in a partition whose instance item is gone are bdms-of-deleted-copy', async () => {
    const { uuid, source, target } = await server();
    await cloneToCell(source, target, uuid);
    await plantMigration(source, uuid, 'post-migrating');
    // A hard delete that stopped before its last write (the instance item goes last).
    await db().send(new DeleteCommand({ TableName: tableName(target.table), Key: instanceKey(uuid) }));
    expect(await findingsOf(uuid)).toContain('bdms-of-deleted-copy');
  }, 120_000);
});

