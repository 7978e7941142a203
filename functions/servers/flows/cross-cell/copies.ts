/**
 * The two copies of an instance during a cross-cell move (reference §1.2 TargetDBSetupTask, §1.8
 * hard delete, §1.9 hidden flag and mapping flips): the copy made in the target cell's table, the
 * hard delete of one copy, and the flip of which copy is shown.
 *
 * Ferry flips in ONE transaction (the shown copy, the instance mapping, the hidden copy): upstream
 * saves the three one after another, which leaves a window with two visible copies and, when a
 * save fails, a mapping pointing at a deleted copy (§1.7 "mapping or hidden save fails").
 */
import { DeleteCommand, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import type { CellMapping } from '../../../compute/model.js';
import { cellTable, fromItem, transact, type TransactItem } from '../../../compute/repo.js';
import { cancellationCodes, db, isConditionFailure, isTransactionConflict, queryAll, withRetries } from '../../../core/db.js';
import { ConcurrentModification, InvariantViolation, NotFound } from '../../../core/errors.js';
import { faultPoint } from '../../../core/faults.js';
import { tableName } from '../../../core/tables.js';
import { nodeOfHost } from '../../engine.js';
import { finishEvent, startEvent } from '../../instance-actions.js';
import { instanceKey, instanceMappingKey, migrationKey, SERVER_GSI, type Instance, type InstanceMapping, type Migration } from '../../model.js';
import { instanceUpdateItem, loadPartition } from '../../repo.js';

export { updateServer as updateCopy, loadPartition } from '../../repo.js';

/** The cell of a compute host (through its compute node). @throws NotFound for an unknown host. */
export async function cellOfHost(host: string): Promise<CellMapping> {
  return (await nodeOfHost(host)).cell;
}

/** Every item of an instance's partition in a cell (instance, BDMs, actions), raw. */
function partitionItems(cell: CellMapping, uuid: string): Promise<Record<string, unknown>[]> {
  return queryAll({ TableName: cellTable(cell), KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': instanceKey(uuid).pk }, ConsistentRead: true });
}

/**
 * The instance's migrations in a cell, raw. Migrations are indexed by creation, not by instance:
 * the query reads the cell's migration index and filters (a cell's migrations are few; Nova's
 * table is the same shape).
 */
function migrationItemsOf(cell: CellMapping, uuid: string): Promise<Record<string, unknown>[]> {
  return queryAll({
    TableName: cellTable(cell),
    IndexName: 'gsi1',
    KeyConditionExpression: 'gsi1pk = :p',
    FilterExpression: 'instanceUuid = :u',
    ExpressionAttributeValues: { ':p': SERVER_GSI.migrations, ':u': uuid },
  });
}

/** A put that creates the item only when absent; an existing item (a re-run's) is left as it is. */
async function putIfAbsent(table: string, item: Record<string, unknown>): Promise<void> {
  try {
    await db().send(new PutCommand({ TableName: table, Item: item, ConditionExpression: 'attribute_not_exists(pk)' }));
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
  }
}

/**
 * TargetDBSetupTask: the instance (after `change`, hidden, no operation), its BDMs (still carrying
 * the source attachments), its actions with their events and every migration of the instance,
 * from `source`'s table into `target`'s. The instance goes first so the partition is never
 * without it; each put is conditional on absence, so a re-run completes a partial copy and
 * leaves what is there. The caller records `holds.targetCell` before (a rollback then deletes it).
 */
export async function cloneToCell(source: CellMapping, target: CellMapping, uuid: string, change: (i: Instance) => Instance = (i) => i): Promise<void> {
  if (source.uuid === target.uuid) throw new InvariantViolation(`instance ${uuid}: a copy into its own cell ${source.name}`);
  const items = await partitionItems(source, uuid);
  const instanceItem = items.find((i) => i.sk === 'INSTANCE');
  if (!instanceItem) throw new NotFound(`Instance ${uuid} could not be found in ${source.name}.`);
  const instance = change(fromItem<Instance>(instanceItem));
  const table = cellTable(target);
  // The instance first (its migrations read meanwhile); then the rest, independent items each put
  // only when absent, side by side.
  const [, migrations] = await Promise.all([putIfAbsent(table, { ...instanceItem, ...instance, hidden: true, operation: null }), migrationItemsOf(source, uuid)]);
  await Promise.all([...items.filter((i) => i.sk !== 'INSTANCE'), ...migrations].map((item) => putIfAbsent(table, item)));
}

/**
 * Instance.destroy(hard_delete=True) of one copy (§1.8): its migrations in that cell, its BDMs and
 * actions, then the instance item last (so a crash half-way leaves a findable instance, never
 * loose BDMs). Nothing there: done. The instance mapping is not touched.
 */
export async function hardDeleteCopy(cell: CellMapping, uuid: string): Promise<void> {
  const table = cellTable(cell);
  const del = (key: Record<string, unknown>) => db().send(new DeleteCommand({ TableName: table, Key: key }));
  // Everything but the instance side by side (each delete is idempotent), the instance after all of it.
  const [migrations, items] = await Promise.all([migrationItemsOf(cell, uuid), partitionItems(cell, uuid)]);
  await Promise.all([
    ...migrations.map((m) => del(migrationKey(fromItem<Migration>(m).uuid))),
    ...items.filter((i) => i.sk !== 'INSTANCE').map((i) => del({ pk: i.pk, sk: i.sk })),
  ]);
  if (items.some((i) => i.sk === 'INSTANCE')) await del(instanceKey(uuid));
}

async function getMapping(uuid: string): Promise<InstanceMapping | undefined> {
  const out = await db().send(new GetCommand({ TableName: tableName('compute-api'), Key: instanceMappingKey(uuid), ConsistentRead: true }));
  return out.Item ? fromItem<InstanceMapping>(out.Item) : undefined;
}

export interface FlipInput {
  uuid: string;
  /** The copy shown from now on (hidden=false after its change); the mapping points at its cell. */
  show: { cell: CellMapping; change: (i: Instance) => Instance };
  /** The copy hidden from now on (hidden=true after its change). */
  hide: { cell: CellMapping; change: (i: Instance) => Instance };
  /** More items of the same transaction (migration records). */
  extra?: TransactItem[];
}

const RACE = { retryable: (e: unknown) => (e instanceof ConcurrentModification && e.cause !== undefined) || isTransactionConflict(e) };

/**
 * The mapping flip (§1.9) as one transaction: both copies conditional on their versions, the
 * mapping conditional on pointing at the copy being hidden. 'already' when the mapping points at
 * `show` (a re-run after the flip landed): nothing is written.
 */
export async function flipInstanceMapping(input: FlipInput): Promise<'flipped' | 'already'> {
  const { uuid, show, hide } = input;
  return withRetries(async () => {
    const mapping = await getMapping(uuid);
    if (!mapping) throw new NotFound(`Instance ${uuid} could not be found.`);
    if (mapping.cellUuid === show.cell.uuid) return 'already' as const;
    if (mapping.cellUuid !== hide.cell.uuid) throw new InvariantViolation(`instance ${uuid} is mapped to cell ${mapping.cellUuid}, neither ${show.cell.name} nor ${hide.cell.name}`);
    const [shown, hidden] = await Promise.all([loadPartition(show.cell, uuid), loadPartition(hide.cell, uuid)]);
    if (!shown.instance) throw new InvariantViolation(`instance ${uuid} has no copy in ${show.cell.name} to show`);
    if (!hidden.instance) throw new InvariantViolation(`instance ${uuid} has no copy in ${hide.cell.name} to hide`);
    const at = new Date().toISOString();
    await faultPoint('nova', 'conductor', 'instance_mapping_flip');
    const items: TransactItem[] = [
      instanceUpdateItem(show.cell, shown.instance, { ...show.change(shown.instance), hidden: false, updatedAt: at }),
      instanceUpdateItem(hide.cell, hidden.instance, { ...hide.change(hidden.instance), hidden: true, updatedAt: at }),
      {
        Update: {
          TableName: tableName('compute-api'),
          Key: instanceMappingKey(uuid),
          UpdateExpression: 'SET cellUuid = :to',
          ConditionExpression: 'cellUuid = :from',
          ExpressionAttributeValues: { ':to': show.cell.uuid, ':from': hide.cell.uuid },
        },
      },
      ...(input.extra ?? []),
    ];
    try {
      await transact(items);
    } catch (e) {
      if (isConditionFailure(e) && cancellationCodes(e).slice(0, 3).some((c) => c === 'ConditionalCheckFailed')) throw new ConcurrentModification(`Instance ${uuid}`, e);
      throw e;
    }
    return 'flipped' as const;
  }, RACE);
}

/**
 * wrap_instance_event into several copies: the event starts and ends (Success, or Error with the
 * failure) in each of `cells` holding the action, so the history is whole whichever copy ends up
 * shown (upstream writes some events to one copy only and loses them with it: §4, bug B2).
 */
export async function withEventIn<T>(cells: readonly CellMapping[], uuid: string, requestId: string, event: string, host: string | null, body: () => Promise<T>): Promise<T> {
  // Each cell's action is its own item in its own table: the cells are written side by side.
  await Promise.all(cells.map((cell) => startEvent(cell, uuid, requestId, event, host)));
  try {
    const result = await body();
    await Promise.all(cells.map((cell) => finishEvent(cell, uuid, requestId, event)));
    return result;
  } catch (e) {
    await Promise.all(cells.map((cell) => finishEvent(cell, uuid, requestId, event, { message: (e as Error).message, traceback: (e as Error).stack })));
    throw e;
  }
}
