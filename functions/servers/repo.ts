/**
 * Persistence of servers: instance mappings (API table), instances, BDMs, actions and migrations
 * (their cell's table), allocations with guarded free capacity (API table).
 *
 * Invariants live in conditions:
 * - an instance write is conditional on the version read (and bumps it), so every state change is
 *   a pure transition of a fresh read; BDM changes ride in the same transaction;
 * - an allocation is a transaction that decrements the node's free capacity only while enough is
 *   free and puts the consumer's allocation only if it has none there: a node is never
 *   overcommitted and a consumer never holds twice on one node;
 * - moving an allocation between consumers (instance <-> migration) deletes one and puts the other
 *   in one transaction.
 */
import { DeleteCommand, GetCommand, PutCommand, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { TransactWriteCommandInput } from '@aws-sdk/lib-dynamodb';
import { cancellationCodes, db, isConditionFailure, isTransactionConflict, queryAll, withRetries } from '../core/db.js';
import { ConcurrentModification, Conflict, NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { CellMapping } from '../compute/model.js';
import { getCell, listCells } from '../compute/repo.js';
import {
  actionKey,
  bdmKey,
  instanceKey,
  instanceMappingKey,
  migrationCounterKey,
  migrationKey,
  nodeUsageKey,
  requestSpecKey,
  SERVER_GSI,
  type BlockDeviceMapping,
  type Instance,
  type InstanceAction,
  type InstanceActionEvent,
  type InstanceMapping,
  type Migration,
  type RequestSpec,
} from './model.js';

export type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];

const KEY_ATTRIBUTES = new Set(['pk', 'sk', 'gsi1pk', 'gsi1sk']);
function strip<T>(item: Record<string, unknown>): T {
  return Object.fromEntries(Object.entries(item).filter(([k]) => !KEY_ATTRIBUTES.has(k))) as T;
}

const apiTable = () => tableName('compute-api');
export const cellTable = (cell: CellMapping) => tableName(cell.table);
const now = () => new Date().toISOString();

export const serverNotFound = (uuid: string) => new NotFound(`Instance ${uuid} could not be found.`);

// ---------------------------------------------------------------------------------------------
// Items

export function instanceItem(i: Instance): Record<string, unknown> {
  return { ...instanceKey(i.uuid), gsi1pk: SERVER_GSI.instances, gsi1sk: `${i.createdAt}#${i.uuid}`, ...i };
}
export function bdmItem(b: BlockDeviceMapping): Record<string, unknown> {
  return { ...bdmKey(b.instanceUuid, b.uuid), ...b };
}
export function mappingItem(m: InstanceMapping): Record<string, unknown> {
  return { ...instanceMappingKey(m.instanceUuid), gsi1pk: SERVER_GSI.instanceMappings, gsi1sk: `${m.createdAt}#${m.instanceUuid}`, ...m };
}
export function actionItem(a: InstanceAction): Record<string, unknown> {
  return { ...actionKey(a.instanceUuid, a.requestId), ...a };
}
export function migrationItem(m: Migration): Record<string, unknown> {
  return { ...migrationKey(m.uuid), gsi1pk: SERVER_GSI.migrations, gsi1sk: `${m.createdAt}#${m.uuid}`, ...m };
}

// ---------------------------------------------------------------------------------------------
// Reads

export interface LoadedServer {
  cell: CellMapping;
  instance: Instance;
}

export async function getMapping(uuid: string): Promise<InstanceMapping | undefined> {
  const out = await db().send(new GetCommand({ TableName: apiTable(), Key: instanceMappingKey(uuid), ConsistentRead: true }));
  return out.Item ? strip<InstanceMapping>(out.Item) : undefined;
}

export async function getInstanceIn(cell: CellMapping, uuid: string): Promise<Instance | undefined> {
  const out = await db().send(new GetCommand({ TableName: cellTable(cell), Key: instanceKey(uuid), ConsistentRead: true }));
  return out.Item ? strip<Instance>(out.Item) : undefined;
}

/** The server through its instance mapping (GET /servers/{id} follows the mapping, reference §1.9). */
export async function findServer(uuid: string): Promise<LoadedServer | undefined> {
  const mapping = await getMapping(uuid);
  if (!mapping) return undefined;
  const cell = await getCell(mapping.cellUuid);
  if (!cell) return undefined;
  const instance = await getInstanceIn(cell, uuid);
  return instance ? { cell, instance } : undefined;
}

/** The instance and everything in its partition (BDMs, actions), one query. */
export async function loadPartition(cell: CellMapping, uuid: string): Promise<{ instance?: Instance; bdms: BlockDeviceMapping[]; actions: InstanceAction[] }> {
  const items = await queryAll({ TableName: cellTable(cell), KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': instanceKey(uuid).pk }, ConsistentRead: true });
  let instance: Instance | undefined;
  const bdms: BlockDeviceMapping[] = [];
  const actions: InstanceAction[] = [];
  for (const item of items) {
    const sk = item.sk as string;
    if (sk === 'INSTANCE') instance = strip<Instance>(item);
    else if (sk.startsWith('BDM#')) bdms.push(strip<BlockDeviceMapping>(item));
    else if (sk.startsWith('ACTION#')) actions.push(strip<InstanceAction>(item));
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
        instance: strip<Instance>(i),
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

export async function transact(items: TransactItem[]): Promise<void> {
  if (items.length === 1 && items[0]!.Put) {
    await db().send(new PutCommand(items[0]!.Put as ConstructorParameters<typeof PutCommand>[0]));
    return;
  }
  await db().send(new TransactWriteCommand({ TransactItems: items }));
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
 */
export async function updateServer(
  cell: CellMapping,
  uuid: string,
  change: (current: { instance: Instance; bdms: BlockDeviceMapping[] }) => InstanceChange,
): Promise<{ instance: Instance; bdms: BlockDeviceMapping[] }> {
  return withRetries(async () => {
    const { instance, bdms } = await loadPartition(cell, uuid);
    if (!instance) throw serverNotFound(uuid);
    const next = change({ instance, bdms });
    const at = now();
    const stored: Instance = { ...next.instance, updatedAt: at, version: instance.version + 1 };
    const items: TransactItem[] = [instanceUpdateItem(cell, instance, { ...next.instance, updatedAt: at })];
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
    const putIds = new Set((next.putBdms ?? []).map((b) => b.uuid));
    const deleted = new Set(next.deleteBdms ?? []);
    const merged = [...bdms.filter((b) => !putIds.has(b.uuid) && !deleted.has(b.uuid)), ...(next.putBdms ?? [])];
    return { instance: stored, bdms: merged };
  }, RACE);
}

/** Removes the instance, its BDMs and actions, its mapping (hard delete: reference §1.8). Idempotent. */
export async function hardDeleteServer(cell: CellMapping, uuid: string, options: { keepMapping?: boolean } = {}): Promise<void> {
  const items = await queryAll({ TableName: cellTable(cell), KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': instanceKey(uuid).pk }, ConsistentRead: true });
  for (const item of items) {
    await db().send(new DeleteCommand({ TableName: cellTable(cell), Key: { pk: item.pk, sk: item.sk } }));
  }
  if (!options.keepMapping) {
    await db().send(new DeleteCommand({ TableName: apiTable(), Key: requestSpecKey(uuid) }));
    await db().send(new DeleteCommand({ TableName: apiTable(), Key: instanceMappingKey(uuid) }));
  }
}

export async function getRequestSpec(uuid: string): Promise<RequestSpec | undefined> {
  const out = await db().send(new GetCommand({ TableName: apiTable(), Key: requestSpecKey(uuid), ConsistentRead: true }));
  return out.Item ? strip<RequestSpec>(out.Item) : undefined;
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

// ---------------------------------------------------------------------------------------------
// Instance actions

export function newAction(instance: Pick<Instance, 'uuid' | 'projectId' | 'userId'>, action: string, requestId: string, at = now()): InstanceAction {
  return { action, instanceUuid: instance.uuid, requestId, userId: instance.userId, projectId: instance.projectId, startTime: at, finishTime: null, message: null, updatedAt: at, events: [] };
}

export function actionPutItem(cell: CellMapping, a: InstanceAction): TransactItem {
  return { Put: { TableName: cellTable(cell), Item: actionItem(a), ConditionExpression: 'attribute_not_exists(pk)' } };
}

async function updateAction(cell: CellMapping, instanceUuid: string, requestId: string, change: (a: InstanceAction) => InstanceAction): Promise<void> {
  await withRetries(
    async () => {
      const out = await db().send(new GetCommand({ TableName: cellTable(cell), Key: actionKey(instanceUuid, requestId), ConsistentRead: true }));
      if (!out.Item) return; // the instance was hard-deleted (or the action never recorded): nothing to note
      const before = strip<InstanceAction>(out.Item);
      const after = change(before);
      await db().send(
        new PutCommand({
          TableName: cellTable(cell),
          Item: actionItem({ ...after, updatedAt: now() }),
          ConditionExpression: 'updatedAt = :u',
          ExpressionAttributeValues: { ':u': before.updatedAt },
        }),
      );
    },
    { retryable: (e) => isConditionFailure(e) },
  );
}

/** Starts an event of an action (`wrap_instance_event`); starting one already started is a no-op (retried steps). */
export async function startEvent(cell: CellMapping, instanceUuid: string, requestId: string, event: string, host: string | null): Promise<void> {
  await updateAction(cell, instanceUuid, requestId, (a) =>
    a.events.some((e) => e.event === event)
      ? a
      : { ...a, events: [...a.events, { event, startTime: now(), finishTime: null, result: null, traceback: null, host, details: null }] },
  );
}

/** Finishes an event: 'Success', or 'Error' with the traceback, which also sets the action's message. */
export async function finishEvent(cell: CellMapping, instanceUuid: string, requestId: string, event: string, error?: { message: string; traceback?: string }): Promise<void> {
  await updateAction(cell, instanceUuid, requestId, (a) => {
    const at = now();
    const found = a.events.find((e) => e.event === event);
    const base: InstanceActionEvent = found ?? { event, startTime: at, finishTime: null, result: null, traceback: null, host: null, details: null };
    const finished: InstanceActionEvent = {
      ...base,
      finishTime: at,
      result: error ? 'Error' : 'Success',
      traceback: error ? (error.traceback ?? error.message) : null,
      details: error ? error.message : null,
    };
    return {
      ...a,
      finishTime: at,
      message: error ? 'Error' : a.message,
      events: found ? a.events.map((e) => (e.event === event ? finished : e)) : [...a.events, finished],
    };
  });
}

// ---------------------------------------------------------------------------------------------
// Migrations

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

export async function getMigration(cell: CellMapping, uuid: string): Promise<Migration | undefined> {
  const out = await db().send(new GetCommand({ TableName: cellTable(cell), Key: migrationKey(uuid), ConsistentRead: true }));
  return out.Item ? strip<Migration>(out.Item) : undefined;
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

/** Sets fields of a migration (its status among them); a status move is idempotent when already there. */
export async function updateMigration(cell: CellMapping, uuid: string, patch: Partial<Migration>): Promise<Migration> {
  return withRetries(
    async () => {
      const current = await getMigration(cell, uuid);
      if (!current) throw new NotFound(`Migration ${uuid} could not be found.`);
      const next: Migration = { ...current, ...patch, updatedAt: now() };
      await db().send(
        new PutCommand({
          TableName: cellTable(cell),
          Item: migrationItem(next),
          ConditionExpression: 'updatedAt = :u',
          ExpressionAttributeValues: { ':u': current.updatedAt },
        }),
      );
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
        migration: strip<Migration>(i),
      })),
    ),
  );
  return per.flat();
}

// ---------------------------------------------------------------------------------------------
// Allocations (Placement's role)

export interface Amounts {
  vcpus: number;
  memoryMb: number;
  diskGb: number;
}

export interface AllocationRecord extends Amounts {
  consumer: string;
  nodeUuid: string;
}

function allocationItem(a: AllocationRecord): Record<string, unknown> {
  return { pk: `RP#${a.nodeUuid}`, sk: `ALLOC#${a.consumer}`, gsi1pk: SERVER_GSI.allocationsOf(a.consumer), gsi1sk: a.nodeUuid, ...a };
}

/** A node's free capacity counters, created from its inventory when the node is recorded (the seed); idempotent. */
export async function ensureNodeUsage(nodeUuid: string, capacity: Amounts): Promise<void> {
  try {
    await db().send(
      new PutCommand({
        TableName: apiTable(),
        Item: { ...nodeUsageKey(nodeUuid), nodeUuid, vcpusFree: capacity.vcpus, memoryMbFree: capacity.memoryMb, diskGbFree: capacity.diskGb },
        ConditionExpression: 'attribute_not_exists(pk)',
      }),
    );
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
  }
}

/** Transaction items of a claim: free capacity down (only while enough is free), the allocation in. */
export function claimItems(a: AllocationRecord): TransactItem[] {
  return [
    {
      Update: {
        TableName: apiTable(),
        Key: nodeUsageKey(a.nodeUuid),
        UpdateExpression: 'SET vcpusFree = vcpusFree - :c, memoryMbFree = memoryMbFree - :m, diskGbFree = diskGbFree - :d',
        ConditionExpression: 'vcpusFree >= :c AND memoryMbFree >= :m AND diskGbFree >= :d',
        ExpressionAttributeValues: { ':c': a.vcpus, ':m': a.memoryMb, ':d': a.diskGb },
      },
    },
    { Put: { TableName: apiTable(), Item: allocationItem(a), ConditionExpression: 'attribute_not_exists(pk)' } },
  ];
}

/** Transaction items of a release: the allocation out (only if it is there as read), free capacity up. */
export function releaseItems(a: AllocationRecord): TransactItem[] {
  return [
    {
      Delete: {
        TableName: apiTable(),
        Key: { pk: `RP#${a.nodeUuid}`, sk: `ALLOC#${a.consumer}` },
        ConditionExpression: 'attribute_exists(pk) AND vcpus = :c AND memoryMb = :m AND diskGb = :d',
        ExpressionAttributeValues: { ':c': a.vcpus, ':m': a.memoryMb, ':d': a.diskGb },
      },
    },
    {
      Update: {
        TableName: apiTable(),
        Key: nodeUsageKey(a.nodeUuid),
        UpdateExpression: 'SET vcpusFree = vcpusFree + :c, memoryMbFree = memoryMbFree + :m, diskGbFree = diskGbFree + :d',
        ExpressionAttributeValues: { ':c': a.vcpus, ':m': a.memoryMb, ':d': a.diskGb },
      },
    },
  ];
}

/** Transaction items moving an allocation to another consumer on the same node (no capacity change). */
export function moveItems(a: AllocationRecord, toConsumer: string): TransactItem[] {
  return [
    { Delete: { TableName: apiTable(), Key: { pk: `RP#${a.nodeUuid}`, sk: `ALLOC#${a.consumer}` }, ConditionExpression: 'attribute_exists(pk)' } },
    { Put: { TableName: apiTable(), Item: allocationItem({ ...a, consumer: toConsumer }), ConditionExpression: 'attribute_not_exists(pk)' } },
  ];
}

export async function allocationsOf(consumer: string): Promise<AllocationRecord[]> {
  const items = await queryAll({ TableName: apiTable(), IndexName: 'gsi1', KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': SERVER_GSI.allocationsOf(consumer) } });
  return items.map((i) => strip<AllocationRecord>(i));
}

export async function getAllocation(nodeUuid: string, consumer: string): Promise<AllocationRecord | undefined> {
  const out = await db().send(new GetCommand({ TableName: apiTable(), Key: { pk: `RP#${nodeUuid}`, sk: `ALLOC#${consumer}` }, ConsistentRead: true }));
  return out.Item ? strip<AllocationRecord>(out.Item) : undefined;
}

/** Claims on the node for the consumer; true if claimed now or held already with the same amounts, false if the node lacks room. */
export async function claim(a: AllocationRecord): Promise<boolean> {
  const held = await getAllocation(a.nodeUuid, a.consumer);
  if (held) {
    if (held.vcpus === a.vcpus && held.memoryMb === a.memoryMb && held.diskGb === a.diskGb) return true;
    throw new Conflict(`Consumer ${a.consumer} already holds a different allocation on node ${a.nodeUuid}.`);
  }
  try {
    await withRetries(() => transact(claimItems(a)));
    return true;
  } catch (e) {
    const codes = cancellationCodes(e);
    if (codes[1] === 'ConditionalCheckFailed') return (await getAllocation(a.nodeUuid, a.consumer)) !== undefined; // a concurrent retry of ours
    if (codes[0] === 'ConditionalCheckFailed') return false; // no room
    throw e;
  }
}

/** Releases every allocation of the consumer (idempotent). */
export async function releaseAll(consumer: string): Promise<void> {
  for (const a of await allocationsOf(consumer)) {
    try {
      await withRetries(() => transact(releaseItems(a)));
    } catch (e) {
      if (!isConditionFailure(e)) throw e; // already released by a concurrent retry
    }
  }
}

/** Releases the consumer's allocation on one node (idempotent). */
export async function releaseOn(nodeUuid: string, consumer: string): Promise<void> {
  const a = await getAllocation(nodeUuid, consumer);
  if (!a) return;
  try {
    await withRetries(() => transact(releaseItems(a)));
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
  }
}

/** Moves every allocation of `from` to `to` (Placement's move_allocations); idempotent. */
export async function moveAllocations(from: string, to: string): Promise<void> {
  for (const a of await allocationsOf(from)) {
    try {
      await withRetries(() => transact(moveItems(a, to)));
    } catch (e) {
      if (!isConditionFailure(e)) throw e;
    }
  }
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
    { Put: { TableName: cellTable(cell), Item: instanceItem(instance), ConditionExpression: 'attribute_not_exists(pk)' } },
    ...bdms.map((b): TransactItem => ({ Put: { TableName: cellTable(cell), Item: bdmItem(b), ConditionExpression: 'attribute_not_exists(pk)' } })),
    actionPutItem(cell, action),
  ]);
}

/** Whether the server (through its mapping) has a BDM of this volume using this attachment (Cinder's Nova check). */
export async function attachmentInUseByServer(instanceUuid: string, volumeId: string, attachmentId: string): Promise<boolean> {
  const found = await findServer(instanceUuid);
  if (!found) return false;
  const { bdms } = await loadPartition(found.cell, instanceUuid);
  return bdms.some((b) => b.volumeId === volumeId && b.attachmentId === attachmentId);
}
