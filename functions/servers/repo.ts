/**
 * Persistence of servers: instance mappings and request specs (API table), instances with their
 * BDMs (their cell's table; the instance item also records the attachments its BDMs use, which
 * Cinder's delete checks: attachment-users.ts). Instance
 * actions are in instance-actions.ts, migrations in migrations.ts, allocations in
 * compute/placement.ts (Placement's role).
 *
 * Invariants live in conditions: an instance write is conditional on the version read (and bumps
 * it), so every state change is a pure transition of a fresh read; BDM changes, and whatever else
 * the change names (a migration, an allocation move, an action), ride in the same transaction.
 */
import { DeleteCommand, GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { CellMapping } from '../compute/model.js';
import { cellTable, fromItem, getCell, listCells, transact, type TransactItem } from '../compute/repo.js';
import { cancellationCodes, db, isConditionFailure, isTransactionConflict, queryAll, withRetries } from '../core/db.js';
import { ConcurrentModification, NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { actionPutItem } from './instance-actions.js';
import {
  attachmentsInUseOf,
  bdmKey,
  instanceKey,
  instanceMappingKey,
  requestSpecKey,
  SERVER_GSI,
  type BlockDeviceMapping,
  type Instance,
  type InstanceAction,
  type InstanceMapping,
  type RequestSpec,
} from './model.js';

const apiTable = () => tableName('compute-api');
const now = () => new Date().toISOString();

export const serverNotFound = (uuid: string) => new NotFound(`Instance ${uuid} could not be found.`);

// ---------------------------------------------------------------------------------------------
// Items

function instanceItem(i: Instance): Record<string, unknown> {
  return { ...instanceKey(i.uuid), gsi1pk: SERVER_GSI.instances, gsi1sk: `${i.createdAt}#${i.uuid}`, ...i };
}
function bdmItem(b: BlockDeviceMapping): Record<string, unknown> {
  return { ...bdmKey(b.instanceUuid, b.uuid), ...b };
}
function mappingItem(m: InstanceMapping): Record<string, unknown> {
  return { ...instanceMappingKey(m.instanceUuid), gsi1pk: SERVER_GSI.instanceMappings, gsi1sk: `${m.createdAt}#${m.instanceUuid}`, ...m };
}

// ---------------------------------------------------------------------------------------------
// Reads

export interface LoadedServer {
  cell: CellMapping;
  instance: Instance;
}

async function getMapping(uuid: string): Promise<InstanceMapping | undefined> {
  const out = await db().send(new GetCommand({ TableName: apiTable(), Key: instanceMappingKey(uuid), ConsistentRead: true }));
  return out.Item ? fromItem<InstanceMapping>(out.Item) : undefined;
}

async function getInstanceIn(cell: CellMapping, uuid: string): Promise<Instance | undefined> {
  const out = await db().send(new GetCommand({ TableName: cellTable(cell), Key: instanceKey(uuid), ConsistentRead: true }));
  return out.Item ? fromItem<Instance>(out.Item) : undefined;
}

/** The server through its instance mapping (GET /servers/{id} follows the mapping, reference §1.9). */
export async function findServer(uuid: string): Promise<LoadedServer | undefined> {
  for (let attempt = 1; ; attempt++) {
    const mapping = await getMapping(uuid);
    if (!mapping) return undefined;
    const cell = await getCell(mapping.cellUuid);
    if (!cell) return undefined;
    const instance = await getInstanceIn(cell, uuid);
    // A mapping read just before a cross-cell flip names the copy the flip then hid: the flip is one
    // transaction, so a second read of the mapping sees it whole (never show the hidden copy).
    if (instance?.hidden && attempt < 3) continue;
    return instance ? { cell, instance } : undefined;
  }
}

/** The instance and everything in its partition (BDMs, actions), one query. */
export async function loadPartition(cell: CellMapping, uuid: string): Promise<{ instance?: Instance; bdms: BlockDeviceMapping[]; actions: InstanceAction[] }> {
  const items = await queryAll({ TableName: cellTable(cell), KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': instanceKey(uuid).pk }, ConsistentRead: true });
  let instance: Instance | undefined;
  const bdms: BlockDeviceMapping[] = [];
  const actions: InstanceAction[] = [];
  for (const item of items) {
    const sk = item.sk as string;
    if (sk === 'INSTANCE') instance = fromItem<Instance>(item);
    else if (sk.startsWith('BDM#')) bdms.push(fromItem<BlockDeviceMapping>(item));
    else if (sk.startsWith('ACTION#')) actions.push(fromItem<InstanceAction>(item));
  }
  bdms.sort((a, b) => (a.bootIndex ?? 1000) - (b.bootIndex ?? 1000) || a.createdAt.localeCompare(b.createdAt));
  actions.sort((a, b) => a.startTime.localeCompare(b.startTime));
  return { instance, bdms, actions };
}

/** Every instance of every cell (hidden ones included; callers filter), with its cell. */
export async function listInstances(): Promise<LoadedServer[]> {
  const cells = await listCells();
  const per = await Promise.all(
    cells.map(async (cell) =>
      (await queryAll({ TableName: cellTable(cell), IndexName: 'gsi1', KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': SERVER_GSI.instances } })).map((i) => ({
        cell,
        instance: fromItem<Instance>(i),
      })),
    ),
  );
  return per.flat();
}

// ---------------------------------------------------------------------------------------------
// Instance writes

/** A put of the next instance, conditional on the stored version being the one it was computed from. */
export function instanceUpdateItem(cell: CellMapping, before: Instance, after: Instance): TransactItem {
  return {
    Put: {
      TableName: cellTable(cell),
      Item: instanceItem({ ...after, version: before.version + 1 }),
      ConditionExpression: 'version = :v',
      ExpressionAttributeValues: { ':v': before.version },
    },
  };
}

export interface InstanceChange {
  instance: Instance;
  /** BDMs to put (created or changed). */
  putBdms?: BlockDeviceMapping[];
  /** BDM uuids to delete. */
  deleteBdms?: string[];
  /** More items of the same transaction (migrations, allocations, actions). */
  extra?: TransactItem[];
}

const RACE = { retryable: (e: unknown) => (e instanceof ConcurrentModification && e.cause !== undefined) || isTransactionConflict(e) };

/**
 * Reads the server's partition, applies `change` (pure; may throw to refuse) and writes the
 * instance (version-conditional) with its BDM changes in one transaction; a lost race re-reads and
 * re-applies. Returns the stored instance.
 *
 * `known`: the instance and BDMs as the caller last read or wrote them (a step's state). The first
 * attempt builds on them instead of reading: the version condition refuses a stale base exactly
 * as it refuses a lost race (every BDM change rides with a version bump, so a version names its
 * BDMs too), and only a change computed from a fresh read may refuse: one that throws on `known`
 * is applied again to a fresh read.
 */
export async function updateServer(
  cell: CellMapping,
  uuid: string,
  change: (current: { instance: Instance; bdms: BlockDeviceMapping[] }) => InstanceChange,
  known?: { instance: Instance; bdms: BlockDeviceMapping[] },
): Promise<{ instance: Instance; bdms: BlockDeviceMapping[] }> {
  const fresh = async () => {
    const { instance, bdms } = await loadPartition(cell, uuid);
    if (!instance) throw serverNotFound(uuid);
    return { instance, bdms, next: change({ instance, bdms }) };
  };
  const fromKnown = async (base: { instance: Instance; bdms: BlockDeviceMapping[] }) => {
    try {
      return { ...base, next: change(base) };
    } catch {
      return fresh();
    }
  };
  return withRetries(async (attempt) => {
    const { instance, bdms, next } = attempt === 0 && known ? await fromKnown(known) : await fresh();
    const at = now();
    const putIds = new Set((next.putBdms ?? []).map((b) => b.uuid));
    const deleted = new Set(next.deleteBdms ?? []);
    const merged = [...bdms.filter((b) => !putIds.has(b.uuid) && !deleted.has(b.uuid)), ...(next.putBdms ?? [])];
    // The BDMs after this write name the attachments in use: the instance item carries them (the
    // version condition makes `bdms` the stored ones), for Cinder's in-use condition.
    const written: Instance = { ...next.instance, updatedAt: at, attachmentsInUse: attachmentsInUseOf(merged) };
    const stored: Instance = { ...written, version: instance.version + 1 };
    const items: TransactItem[] = [instanceUpdateItem(cell, instance, written)];
    for (const b of next.putBdms ?? []) items.push({ Put: { TableName: cellTable(cell), Item: bdmItem(b) } });
    for (const id of next.deleteBdms ?? []) items.push({ Delete: { TableName: cellTable(cell), Key: bdmKey(uuid, id) } });
    items.push(...(next.extra ?? []));
    try {
      await transact(items);
    } catch (e) {
      if (isConditionFailure(e) && (cancellationCodes(e)[0] === 'ConditionalCheckFailed' || cancellationCodes(e).length === 0)) {
        throw new ConcurrentModification(`Instance ${uuid}`, e);
      }
      throw e;
    }
    return { instance: stored, bdms: merged };
  }, RACE);
}

/** Removes the instance, its BDMs and actions, its mapping (hard delete: reference §1.8). Idempotent. */
export async function hardDeleteServer(cell: CellMapping, uuid: string, options: { keepMapping?: boolean } = {}): Promise<void> {
  const items = await queryAll({ TableName: cellTable(cell), KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': instanceKey(uuid).pk }, ConsistentRead: true });
  const del = (table: string, key: Record<string, unknown>) => db().send(new DeleteCommand({ TableName: table, Key: key }));
  // BDMs and actions side by side, the instance after them (a crash half-way leaves it findable,
  // so a re-run finds the rest), the mapping last (until then the API still finds the server).
  await Promise.all(items.filter((i) => i.sk !== 'INSTANCE').map((i) => del(cellTable(cell), { pk: i.pk, sk: i.sk })));
  if (items.some((i) => i.sk === 'INSTANCE')) await del(cellTable(cell), instanceKey(uuid));
  if (!options.keepMapping) {
    await del(apiTable(), requestSpecKey(uuid));
    await del(apiTable(), instanceMappingKey(uuid));
  }
}

export async function getRequestSpec(uuid: string): Promise<RequestSpec | undefined> {
  const out = await db().send(new GetCommand({ TableName: apiTable(), Key: requestSpecKey(uuid), ConsistentRead: true }));
  return out.Item ? fromItem<RequestSpec>(out.Item) : undefined;
}

/** The request spec's flavor after a confirmed resize (later moves schedule for it). */
export async function setRequestSpecFlavor(uuid: string, flavor: RequestSpec['flavor']): Promise<void> {
  await db().send(
    new UpdateCommand({
      TableName: apiTable(),
      Key: requestSpecKey(uuid),
      UpdateExpression: 'SET flavor = :f, updatedAt = :u',
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeValues: { ':f': flavor, ':u': now() },
    }),
  ).catch((e: unknown) => {
    if (!isConditionFailure(e)) throw e; // an instance without a spec (made before specs existed) keeps none
  });
}

/** Creates the instance, its mapping and request spec, BDMs and first action in one transaction (the API's create). */
export async function createServerRecords(cell: CellMapping, instance: Instance, bdms: BlockDeviceMapping[], mapping: InstanceMapping, action: InstanceAction): Promise<void> {
  const spec: RequestSpec = {
    instanceUuid: instance.uuid,
    projectId: instance.projectId,
    flavor: instance.flavor,
    imageRef: instance.imageRef,
    isBfv: instance.imageRef === '',
    availabilityZone: instance.availabilityZone,
    numInstances: 1,
    createdAt: instance.createdAt,
    updatedAt: instance.createdAt,
  };
  await transact([
    { Put: { TableName: apiTable(), Item: mappingItem(mapping), ConditionExpression: 'attribute_not_exists(pk)' } },
    { Put: { TableName: apiTable(), Item: { ...requestSpecKey(instance.uuid), ...spec }, ConditionExpression: 'attribute_not_exists(pk)' } },
    { Put: { TableName: cellTable(cell), Item: instanceItem({ ...instance, attachmentsInUse: attachmentsInUseOf(bdms) }), ConditionExpression: 'attribute_not_exists(pk)' } },
    ...bdms.map((b): TransactItem => ({ Put: { TableName: cellTable(cell), Item: bdmItem(b), ConditionExpression: 'attribute_not_exists(pk)' } })),
    actionPutItem(cell, action),
  ]);
}

/**
 * Every copy of an instance, one per cell that holds it: one normally, two during a cross-cell move
 * (the hidden one included; reference §1.9). The mapped copy first.
 */
export async function findCopies(uuid: string): Promise<LoadedServer[]> {
  const mapping = await getMapping(uuid);
  const copies = (await Promise.all((await listCells()).map(async (cell) => ({ cell, instance: await getInstanceIn(cell, uuid) }))))
    .filter((c): c is LoadedServer => c.instance !== undefined);
  return copies.sort((a, b) => Number(b.cell.uuid === mapping?.cellUuid) - Number(a.cell.uuid === mapping?.cellUuid));
}
