/**
 * Placement's claims and moves (functions/compute/placement.ts) on DynamoDB Local: a claim is one
 * conditional transaction and reads only when refused (a retried step's own claim is still true,
 * another allocation of the consumer is a Conflict, a full node is false); a move reads only the
 * allocation it moves, and the put's condition refuses a consumer that holds there already.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { allocationsOf, claim, freeOf, moveAllocationOn, releaseAll } from '../../functions/compute/placement.js';
import { dynamoRequests } from '../../functions/core/db.js';
import { Conflict } from '../../functions/core/errors.js';
import { nodeOfHost } from '../../functions/servers/engine.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
let node: string;
const consumers: string[] = [];

beforeAll(async () => {
  stack = await useLocalStack();
  node = (await nodeOfHost('cmp1')).node.uuid;
}, 120_000);

afterAll(async () => {
  for (const c of consumers) await releaseAll(c);
  await stack?.stop();
});

const consumer = () => {
  const c = randomUUID();
  consumers.push(c);
  return c;
};
const SMALL = { vcpus: 1, memoryMb: 64, diskGb: 0 };
const counted = async <T>(act: () => Promise<T>) => {
  const before = dynamoRequests().byCommand;
  const out = await act();
  const after = dynamoRequests().byCommand;
  const delta = Object.fromEntries(Object.keys(after).map((k) => [k, after[k]! - (before[k] ?? 0)]).filter(([, n]) => n !== 0));
  return { out, delta };
};

describe('claim', () => {
  test('a new claim is one transaction; claimed again with the same amounts it is true and changes nothing', async () => {
    // Prepare
    const c = consumer();
    const free0 = (await freeOf(node))!;

    // Act
    const first = await counted(() => claim({ consumer: c, nodeUuid: node, ...SMALL }));
    const again = await claim({ consumer: c, nodeUuid: node, ...SMALL });

    // Assess
    expect(first.out).toBe(true);
    expect(first.delta).toEqual({ TransactWriteItemsCommand: 1 });
    expect(again).toBe(true);
    expect(await allocationsOf(c)).toEqual([expect.objectContaining({ nodeUuid: node, ...SMALL })]);
    expect((await freeOf(node))!.memoryMb).toBe(free0.memoryMb - SMALL.memoryMb);
  });

  test('a consumer holding other amounts there is a Conflict, and its allocation stays', async () => {
    // Prepare
    const c = consumer();
    await claim({ consumer: c, nodeUuid: node, ...SMALL });

    // Act
    const refused = await claim({ consumer: c, nodeUuid: node, ...SMALL, memoryMb: 128 }).catch((e: unknown) => e);

    // Assess
    expect(refused).toBeInstanceOf(Conflict);
    expect(await allocationsOf(c)).toEqual([expect.objectContaining({ memoryMb: 64 })]);
  });

  test('a node without room answers false and holds nothing for the consumer', async () => {
    // Prepare
    const c = consumer();
    const free = (await freeOf(node))!;

    // Act
    const out = await claim({ consumer: c, nodeUuid: node, ...SMALL, memoryMb: free.memoryMb + 1 });

    // Assess
    expect(out).toBe(false);
    expect(await allocationsOf(c)).toEqual([]);
    expect(await freeOf(node)).toEqual(free);
  });
});

describe('moveAllocationOn', () => {
  test('moves with one read and one transaction; moved again it does nothing', async () => {
    // Prepare
    const [from, to] = [consumer(), consumer()];
    await claim({ consumer: from, nodeUuid: node, ...SMALL });

    // Act
    const moved = await counted(() => moveAllocationOn(node, from, to));
    await moveAllocationOn(node, from, to);

    // Assess
    expect(moved.delta).toEqual({ GetItemCommand: 1, TransactWriteItemsCommand: 1 });
    expect(await allocationsOf(from)).toEqual([]);
    expect(await allocationsOf(to)).toEqual([expect.objectContaining({ nodeUuid: node, ...SMALL })]);
  });

  test('to a consumer that holds on the node already: Conflict, both allocations as they were', async () => {
    // Prepare
    const [from, to] = [consumer(), consumer()];
    await claim({ consumer: from, nodeUuid: node, ...SMALL });
    await claim({ consumer: to, nodeUuid: node, ...SMALL, memoryMb: 128 });

    // Act
    const refused = await moveAllocationOn(node, from, to).catch((e: unknown) => e);

    // Assess
    expect(refused).toBeInstanceOf(Conflict);
    expect(await allocationsOf(from)).toEqual([expect.objectContaining({ memoryMb: 64 })]);
    expect(await allocationsOf(to)).toEqual([expect.objectContaining({ memoryMb: 128 })]);
  });
});
