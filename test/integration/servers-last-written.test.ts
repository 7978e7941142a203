/**
 * A step's writes build on the record as the process last read or wrote it (a migration, an
 * instance action, the instance with its BDMs), skipping the read; these tests make another writer
 * come between and check that its change survives: the stale base is refused by the write's
 * condition and the change is applied again to a fresh read. Without the condition (or with a
 * base trusted blindly) the other writer's field would be lost and each test fails.
 */
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { CellMapping } from '../../functions/compute/model.js';
import { cellTable, fromItem, transact } from '../../functions/compute/repo.js';
import { db } from '../../functions/core/db.js';
import { actionPutItem, finishEvent, newAction, startEvent } from '../../functions/servers/instance-actions.js';
import { getMigration, migrationPutItem, updateMigration } from '../../functions/servers/migrations.js';
import { actionKey, instanceKey, migrationKey, newMigration, type Instance, type InstanceAction, type Migration } from '../../functions/servers/model.js';
import { updateServer } from '../../functions/servers/repo.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';

let ddb: LocalDynamo;
const cell: CellMapping = { uuid: randomUUID(), name: 'cell1', table: 'cell1', createdAt: new Date().toISOString() };

beforeAll(async () => {
  ddb = await useLocalDynamo();
});
afterAll(async () => {
  await ddb.stop();
});

/** Another process's write: the stored item changed and stamped anew, behind this process's back. */
async function foreignWrite(key: { pk: string; sk: string }, change: (item: Record<string, unknown>) => Record<string, unknown>): Promise<void> {
  const item = (await db().send(new GetCommand({ TableName: cellTable(cell), Key: key, ConsistentRead: true }))).Item!;
  await db().send(new PutCommand({ TableName: cellTable(cell), Item: { ...change(item), updatedAt: new Date(Date.now() + 5).toISOString() } }));
}

describe('writes built on the last written record', () => {
  test('a migration update after another writer keeps the field the other writer set', async () => {
    // Prepare
    const uuid = randomUUID();
    const at = new Date().toISOString();
    const m = newMigration({ id: 1, uuid, instance: { uuid: randomUUID(), host: 'cmp1', node: 'cmp1', flavor: { id: 1 }, projectId: 'p', userId: 'u' }, migrationType: 'live-migration', status: 'accepted', at });
    await transact([migrationPutItem(cell, m, { create: true })]);
    await updateMigration(cell, uuid, { status: 'preparing' }); // remembered as written
    await foreignWrite(migrationKey(uuid), (item) => ({ ...item, destCompute: 'cmp2' }));

    // Act
    const out = await updateMigration(cell, uuid, { status: 'running' });

    // Assess
    const stored = (await getMigration(cell, uuid)) as Migration;
    expect(stored).toMatchObject({ status: 'running', destCompute: 'cmp2' });
    expect(out.destCompute).toBe('cmp2');
  });

  test('two updates in the same millisecond carry different stamps', async () => {
    const uuid = randomUUID();
    const m = newMigration({ id: 2, uuid, instance: { uuid: randomUUID(), host: 'cmp1', node: 'cmp1', flavor: { id: 1 }, projectId: 'p', userId: 'u' }, migrationType: 'migration', status: 'accepted', at: new Date().toISOString() });
    await transact([migrationPutItem(cell, m, { create: true })]);
    const stamps: string[] = [];
    for (let i = 0; i < 5; i++) stamps.push((await updateMigration(cell, uuid, { diskProcessed: i })).updatedAt);
    expect(new Set(stamps).size).toBe(stamps.length);
    expect([...stamps].sort()).toEqual(stamps);
  });

  test('an event finished after another writer added one keeps both', async () => {
    // Prepare
    const instanceUuid = randomUUID();
    const action = newAction({ uuid: instanceUuid, projectId: 'p', userId: 'u' }, 'migrate', 'req-1');
    await transact([actionPutItem(cell, action)]);
    await startEvent(cell, instanceUuid, 'req-1', 'compute_mine', 'cmp1');
    await foreignWrite(actionKey(instanceUuid, 'req-1'), (item) => ({
      ...item,
      events: [...(item.events as unknown[]), { event: 'compute_theirs', startTime: new Date().toISOString(), finishTime: null, result: null, traceback: null, host: null, details: null }],
    }));

    // Act
    await finishEvent(cell, instanceUuid, 'req-1', 'compute_mine');

    // Assess
    const item = (await db().send(new GetCommand({ TableName: cellTable(cell), Key: actionKey(instanceUuid, 'req-1'), ConsistentRead: true }))).Item!;
    const events = fromItem<InstanceAction>(item).events;
    expect(events.map((e) => e.event).sort()).toEqual(['compute_mine', 'compute_theirs']);
    expect(events.find((e) => e.event === 'compute_mine')?.result).toBe('Success');
  });

  test('an instance write from a stale known state is applied to a fresh read', async () => {
    // Prepare: an instance item (only the fields the write path touches), written once through updateServer.
    const uuid = randomUUID();
    const base = { uuid, name: 'vm', version: 1, createdAt: new Date().toISOString(), updatedAt: new Date().toISOString(), metadata: {} } as unknown as Instance;
    await db().send(new PutCommand({ TableName: cellTable(cell), Item: { ...instanceKey(uuid), ...base } }));
    const first = await updateServer(cell, uuid, ({ instance }) => ({ instance: { ...instance, name: 'vm-1' } }));
    await updateServer(cell, uuid, ({ instance }) => ({ instance: { ...instance, metadata: { theirs: 'yes' } } })); // another write
    let calls = 0;

    // Act: built on `first` (stale by one version)
    const out = await updateServer(
      cell,
      uuid,
      ({ instance }) => {
        calls++;
        return { instance: { ...instance, name: 'vm-2' } };
      },
      first,
    );

    // Assess
    const stored = fromItem<Instance>((await db().send(new GetCommand({ TableName: cellTable(cell), Key: instanceKey(uuid), ConsistentRead: true }))).Item!);
    expect(stored).toMatchObject({ name: 'vm-2', metadata: { theirs: 'yes' }, version: 4 });
    expect(out.instance.version).toBe(4);
    expect(calls).toBe(2); // once on the stale base (refused), once on the fresh read
  });
});
