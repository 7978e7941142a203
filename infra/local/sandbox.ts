/**
 * What the local stack applies on every start: the sandbox inventory (inventories/sandbox.yaml), or
 * the file FERRY_INVENTORY names. An apply is idempotent, so a restart changes nothing; a data
 * directory seeded before inventories existed holds exactly what the sandbox inventory names, so
 * its first apply changes nothing either (test/integration/inventory.test.ts shows both).
 */
import { applyInventory } from '../../functions/inventory/apply.js';
import { formatPlan } from '../../functions/inventory/plan.js';
import { SANDBOX_INVENTORY, readInventoryFile } from '../inventory-file.js';

export async function seedSandbox(dataDir: string, options: { file?: string; log?: (line: string) => void } = {}): Promise<void> {
  const file = options.file ?? (process.env.FERRY_INVENTORY || SANDBOX_INVENTORY);
  const log = options.log ?? (() => {});
  const result = await applyInventory(readInventoryFile(file), { target: 'local', dataDir });
  if (result.plan.refusals.length > 0) throw new Error(`inventory ${file} cannot be applied:\n${formatPlan(result.plan).join('\n')}`);
  // One line: what it did in sum (`ferry inventory show` lists everything).
  if (result.done.length > 0) log(`inventory ${file}: ${formatPlan(result.plan).at(-1)}`);
}
