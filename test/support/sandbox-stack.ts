/**
 * A fresh local stack (./stack.ts) whose inventory is the sandbox's as `change` leaves it: how the
 * tests of AWS backends put their backends beside the sandbox's (ebs-stack.ts, efs-stack.ts).
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { Inventory } from '../../functions/inventory/schema.js';
import { SANDBOX_INVENTORY, readInventoryFile } from '../../infra/inventory-file.js';
import { useLocalStack, type TestLocalStack } from './stack.js';

export async function useSandboxStackWith(change: (inventory: Inventory) => void, options: Omit<Parameters<typeof useLocalStack>[0] & object, 'inventory'> = {}): Promise<TestLocalStack> {
  const inventory = structuredClone(readInventoryFile(SANDBOX_INVENTORY)) as Inventory;
  change(inventory);
  const file = join(await mkdtemp(join(tmpdir(), 'ferry-inventory-')), 'inventory.yaml');
  await writeFile(file, stringify(inventory));
  return useLocalStack({ ...options, inventory: file });
}
