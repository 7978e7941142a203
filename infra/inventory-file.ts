/**
 * Reading an inventory file (YAML or JSON: YAML is a superset) for the places that take one from
 * an operator: `npm start` (the sandbox, or FERRY_INVENTORY), `ferry inventory apply FILE`, and
 * `cdk deploy -c inventory=FILE`. Validation is functions/inventory/schema.ts's, at apply.
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

/** The local sandbox's inventory, applied by `npm start` unless FERRY_INVENTORY names another. */
export const SANDBOX_INVENTORY = resolve(dirname(fileURLToPath(import.meta.url)), '../inventories/sandbox.yaml');

export class InventoryFileError extends Error {
  override name = 'InventoryFileError';
}

export function readInventoryFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new InventoryFileError(`cannot read inventory ${path}: ${(e as Error).message}`);
  }
  try {
    return parse(text, { prettyErrors: true });
  } catch (e) {
    throw new InventoryFileError(`inventory ${path} is not valid YAML or JSON: ${(e as Error).message}`);
  }
}
