/**
 * Placement's role: what each compute node can still give (its free capacity counters) and what
 * every consumer (an instance, or a migration holding a move's source) has allocated where. Both
 * live in the API table, global like Placement's database, because a cross-cell move holds on a
 * node of one cell and a node of another at the same time.
 *
 * Invariants live in conditions, never in a read first:
 * - a claim is a transaction that decrements the node's free capacity only while enough is free
 *   and puts the consumer's allocation only if it has none there: a node is never overcommitted
 *   and a consumer never holds twice on one node;
 * - a release deletes the allocation only as it was read and gives its amounts back in the same
 *   transaction;
 * - moving an allocation between consumers (instance <-> migration) deletes one and puts the other
 *   in one transaction.
 */
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { cancellationCodes, db, isConditionFailure, queryAll, withRetries } from '../core/db.js';
import { Conflict } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { ALLOCATION_SK_PREFIX, allocationKey, consumerGsi, nodeUsageKey, resourceProviderPk, usageOf, type Allocation, type NodeUsage } from './model.js';
import { fromItem, transact, type TransactItem } from './repo.js';

const apiTable = () => tableName('compute-api');

/** Resources of a flavor (or what a node has free). */
export interface Amounts {
  vcpus: number;
  memoryMb: number;
  diskGb: number;
}

function allocationItem(a: Allocation): Record<string, unknown> {
  return { ...allocationKey(a.nodeUuid, a.consumer), gsi1pk: consumerGsi(a.consumer), gsi1sk: a.nodeUuid, ...a };
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

/** What a node has free; undefined for a node without counters (not recorded by the seed: nothing to claim on). */
export async function freeOf(nodeUuid: string): Promise<Amounts | undefined> {
  const out = await db().send(new GetCommand({ TableName: apiTable(), Key: nodeUsageKey(nodeUuid), ConsistentRead: true }));
  if (!out.Item) return undefined;
  return { vcpus: Number(out.Item.vcpusFree), memoryMb: Number(out.Item.memoryMbFree), diskGb: Number(out.Item.diskGbFree) };
}

/** What is allocated on a compute node (Placement's usages of its resource provider). */
export async function nodeUsage(nodeUuid: string): Promise<NodeUsage> {
  const items = await queryAll({
    TableName: apiTable(),
    KeyConditionExpression: 'pk = :p AND begins_with(sk, :s)',
    ExpressionAttributeValues: { ':p': resourceProviderPk(nodeUuid), ':s': ALLOCATION_SK_PREFIX },
  });
  return usageOf(items.map((i) => fromItem<Allocation>(i)));
}

/** Transaction items of a claim: free capacity down (only while enough is free), the allocation in. */
function claimItems(a: Allocation): TransactItem[] {
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
function releaseItems(a: Allocation): TransactItem[] {
  return [
    {
      Delete: {
        TableName: apiTable(),
        Key: allocationKey(a.nodeUuid, a.consumer),
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
function moveItems(a: Allocation, toConsumer: string): TransactItem[] {
  return [
    { Delete: { TableName: apiTable(), Key: allocationKey(a.nodeUuid, a.consumer), ConditionExpression: 'attribute_exists(pk)' } },
    { Put: { TableName: apiTable(), Item: allocationItem({ ...a, consumer: toConsumer }), ConditionExpression: 'attribute_not_exists(pk)' } },
  ];
}

export async function allocationsOf(consumer: string): Promise<Allocation[]> {
  const items = await queryAll({ TableName: apiTable(), IndexName: 'gsi1', KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': consumerGsi(consumer) } });
  return items.map((i) => fromItem<Allocation>(i));
}

async function getAllocation(nodeUuid: string, consumer: string): Promise<Allocation | undefined> {
  const out = await db().send(new GetCommand({ TableName: apiTable(), Key: allocationKey(nodeUuid, consumer), ConsistentRead: true }));
  return out.Item ? fromItem<Allocation>(out.Item) : undefined;
}

/**
 * Claims on the node for the consumer; true if claimed now or held already with the same amounts,
 * false if the node lacks room. The claim is tried first: only a refused one reads what is held (a
 * retried step's own claim, or another allocation of the consumer there), so a claim is one write.
 */
export async function claim(a: Allocation): Promise<boolean> {
  try {
    await withRetries(() => transact(claimItems(a)));
    return true;
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    const held = await getAllocation(a.nodeUuid, a.consumer);
    if (held) {
      if (held.vcpus === a.vcpus && held.memoryMb === a.memoryMb && held.diskGb === a.diskGb) return true;
      throw new Conflict(`Consumer ${a.consumer} already holds a different allocation on node ${a.nodeUuid}.`);
    }
    if (cancellationCodes(e)[0] === 'ConditionalCheckFailed') return false; // no room
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

/**
 * Moves the consumer's allocation on one node to another consumer (idempotent: nothing to move is
 * done). @throws Conflict when `to` holds on that node already (never two allocations merged): the
 * move's put refuses it, so only the allocation moved is read.
 */
export async function moveAllocationOn(nodeUuid: string, from: string, to: string): Promise<void> {
  const a = await getAllocation(nodeUuid, from);
  if (!a) return;
  try {
    await transact(moveItems(a, to));
  } catch (e) {
    const codes = cancellationCodes(e);
    if (codes[1] === 'ConditionalCheckFailed') throw new Conflict(`Consumer ${to} already holds an allocation on node ${nodeUuid}.`);
    if (codes[0] === 'ConditionalCheckFailed') return; // moved meanwhile by a concurrent retry
    throw e;
  }
}
