/**
 * Persistence of the Nova foundation: the API table (`compute-api`: cell and host mappings,
 * flavors, networks, allocations) and the cell tables (`cell1`, `cell2`: services and compute
 * nodes). Reads that span cells go to every cell (Nova's scatter-gather) and name the cell each
 * result came from; a service write is conditional on its `version` and bumps it, so an update
 * computed from a stale read is refused and re-applied to a fresh one.
 */
import { GetCommand, PutCommand, TransactWriteCommand, type TransactWriteCommandInput } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure, queryAll, withRetries } from '../core/db.js';
import { ConcurrentModification } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import {
  applyServiceUpdate,
  cellMappingKey,
  flavorKey,
  GSI,
  hostMappingKey,
  isCellTable,
  serviceKey,
  serviceSortKey,
  type CellMapping,
  type ComputeNode,
  type ComputeService,
  type Flavor,
  type HostMapping,
  type Network,
  type ServiceUpdate,
} from './model.js';

const KEY_ATTRIBUTES = new Set(['pk', 'sk', 'gsi1pk', 'gsi1sk']);

/** A record as stored, without its key attributes (every Nova table keys items the same way). */
export function fromItem<T>(item: Record<string, unknown>): T {
  return Object.fromEntries(Object.entries(item).filter(([k]) => !KEY_ATTRIBUTES.has(k))) as T;
}

export type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];

/** Writes the items together: a single Put as a plain (conditional) put, more in one transaction. */
export async function transact(items: TransactItem[]): Promise<void> {
  if (items.length === 1 && items[0]!.Put) {
    await db().send(new PutCommand(items[0]!.Put as ConstructorParameters<typeof PutCommand>[0]));
    return;
  }
  await db().send(new TransactWriteCommand({ TransactItems: items }));
}

const apiTable = () => tableName('compute-api');

/** The table holding a cell's database. */
export const cellTable = (cell: CellMapping) => tableName(cell.table);

async function byGsi<T>(table: string, gsi1pk: string): Promise<T[]> {
  const items = await queryAll({ TableName: table, IndexName: 'gsi1', KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': gsi1pk } });
  return items.map((i) => fromItem<T>(i));
}

async function getItem<T>(table: string, key: { pk: string; sk: string }): Promise<T | undefined> {
  const out = await db().send(new GetCommand({ TableName: table, Key: key, ConsistentRead: true }));
  return out.Item ? fromItem<T>(out.Item) : undefined;
}

/** Puts the item unless one with its key exists; true when it was put (seeds, idempotent). */
export async function putIfAbsent(table: string, item: Record<string, unknown>): Promise<boolean> {
  try {
    await db().send(new PutCommand({ TableName: table, Item: item, ConditionExpression: 'attribute_not_exists(pk)' }));
    return true;
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    return false;
  }
}

// ---------------------------------------------------------------------------------------------
// API database

/** Every cell mapping, by name. */
export async function listCells(): Promise<CellMapping[]> {
  const cells = await byGsi<CellMapping>(apiTable(), GSI.cells);
  return cells.filter((c) => isCellTable(c.table));
}

export async function getCell(uuid: string): Promise<CellMapping | undefined> {
  return getItem<CellMapping>(apiTable(), cellMappingKey(uuid));
}

export async function listFlavors(): Promise<Flavor[]> {
  return byGsi<Flavor>(apiTable(), GSI.flavors);
}

export async function getFlavor(flavorid: string): Promise<Flavor | undefined> {
  return getItem<Flavor>(apiTable(), flavorKey(flavorid));
}

export async function listNetworks(): Promise<Network[]> {
  return byGsi<Network>(apiTable(), GSI.networks);
}

// ---------------------------------------------------------------------------------------------
// Cell databases

export interface InCell<T> {
  cell: CellMapping;
  value: T;
}

/** Nova's scatter-gather: the same read in every cell, results in cell-name order, each with its cell. */
async function inEveryCell<T>(read: (cell: CellMapping) => Promise<T[]>): Promise<InCell<T>[]> {
  const cells = await listCells();
  const results = await Promise.all(cells.map(async (cell) => (await read(cell)).map((value) => ({ cell, value }))));
  return results.flat();
}

/** Every service of every cell (by cell, then integer id, as Nova lists them). */
export async function listServices(): Promise<InCell<ComputeService>[]> {
  const all = await inEveryCell((cell) => byGsi<ComputeService>(tableName(cell.table), GSI.services));
  return all.sort((a, b) => a.cell.name.localeCompare(b.cell.name) || a.value.id - b.value.id);
}

/** A service by uuid, looked for in every cell (`host_api.service_get_by_id` with a uuid). */
export async function findServiceByUuid(uuid: string): Promise<InCell<ComputeService> | undefined> {
  const found = await inEveryCell(async (cell) => {
    const s = await getItem<ComputeService>(tableName(cell.table), serviceKey(uuid));
    return s ? [s] : [];
  });
  return found[0];
}

/**
 * A service by host and binary: a nova-compute host through its host mapping (one cell), any
 * other binary in every cell (`_find_service_in_cell`).
 */
export async function findServiceByHostBinary(host: string, binary: string): Promise<InCell<ComputeService> | undefined> {
  const query = async (cell: CellMapping) =>
    (
      await queryAll({
        TableName: tableName(cell.table),
        IndexName: 'gsi1',
        KeyConditionExpression: 'gsi1pk = :p AND gsi1sk = :s',
        ExpressionAttributeValues: { ':p': GSI.services, ':s': serviceSortKey(host, binary) },
      })
    ).map((i) => fromItem<ComputeService>(i));
  const mapping = await getItem<HostMapping>(apiTable(), hostMappingKey(host));
  if (mapping) {
    const cell = await getCell(mapping.cellUuid);
    if (cell && isCellTable(cell.table)) {
      const s = (await query(cell))[0];
      if (s) return { cell, value: s };
    }
  }
  return (await inEveryCell(query))[0];
}

/** Every compute node of every cell, by cell then id. */
export async function listComputeNodes(): Promise<InCell<ComputeNode>[]> {
  const all = await inEveryCell((cell) => byGsi<ComputeNode>(tableName(cell.table), GSI.nodes));
  return all.sort((a, b) => a.cell.name.localeCompare(b.cell.name) || a.value.id - b.value.id);
}

/**
 * Applies an update to a service with a write conditional on the version read (and bumps it);
 * a lost race re-reads and re-applies. Returns the stored service.
 * @throws ConcurrentModification when the service vanished meanwhile or the races never end.
 */
export async function updateService(cell: CellMapping, uuid: string, update: ServiceUpdate): Promise<ComputeService> {
  const table = tableName(cell.table);
  return withRetries(
    async () => {
      const current = await getItem<ComputeService>(table, serviceKey(uuid));
      if (!current) throw new ConcurrentModification(`Service ${uuid}`);
      const next = { ...applyServiceUpdate(current, update, new Date().toISOString()), version: current.version + 1 };
      await putService(cell, next, current.version);
      return next;
    },
    // A condition failure (cause set) is a lost race: re-read and re-apply. A vanished item is not retried.
    { attempts: 10, retryable: (e) => e instanceof ConcurrentModification && e.cause !== undefined },
  );
}

/**
 * Writes a service item if its stored version is still `expectedVersion` (undefined: only if it
 * does not exist). @throws ConcurrentModification (with the condition failure as cause) otherwise.
 */
export async function putService(cell: CellMapping, svc: ComputeService, expectedVersion: number | undefined): Promise<void> {
  try {
    await db().send(
      new PutCommand({
        TableName: tableName(cell.table),
        Item: { ...serviceKey(svc.uuid), gsi1pk: GSI.services, gsi1sk: serviceSortKey(svc.host, svc.binary), ...svc },
        ConditionExpression: expectedVersion === undefined ? 'attribute_not_exists(pk)' : 'version = :v',
        ExpressionAttributeValues: expectedVersion === undefined ? undefined : { ':v': expectedVersion },
        ReturnValuesOnConditionCheckFailure: 'NONE',
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw new ConcurrentModification(`Service ${svc.uuid}`, e);
    throw e;
  }
}
