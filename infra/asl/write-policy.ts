/**
 * `npm run asl:policy`: writes the policy of infra/asl/policy.ts into every ASL file of the wiring
 * table (the machine's TimeoutSeconds, each Task's Retry, the copy task's TimeoutSeconds), then
 * prints what still drifts from it, which needs a person (a Lambda Task without its TimeoutSeconds,
 * a Catch of another shape), and each machine's worst case into functions/core/machine-bounds.ts
 * (infra/asl/machine-bounds.ts). Exit 1 while anything drifts. `--check` writes nothing.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { STATE_MACHINES } from '../../functions/wiring.js';
import { applyPolicy, policyDrift } from './check.js';
import { MACHINE_BOUNDS_FILE, machineBoundsSource } from './machine-bounds.js';
import { MACHINE_POLICIES } from './policy.js';
import type { JsonObject } from './subset.js';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** As the files are written: two-space JSON, non-ASCII escaped, a final newline. */
export function formatAsl(definition: JsonObject): string {
  return JSON.stringify(definition, null, 2).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`) + '\n';
}

function main(check: boolean): number {
  let drifting = 0;
  for (const machine of STATE_MACHINES) {
    const file = resolve(REPO_ROOT, machine.file);
    const text = readFileSync(file, 'utf8');
    const policy = MACHINE_POLICIES[machine.name];
    const definition = check ? (JSON.parse(text) as JsonObject) : applyPolicy(JSON.parse(text) as JsonObject, policy);
    const out = formatAsl(definition);
    if (!check && out !== text) {
      writeFileSync(file, out);
      console.log(`wrote ${machine.file}`);
    }
    for (const problem of policyDrift(definition, policy)) {
      console.error(`${machine.file}: ${problem}`);
      drifting++;
    }
  }
  const boundsFile = resolve(REPO_ROOT, MACHINE_BOUNDS_FILE);
  const bounds = machineBoundsSource(REPO_ROOT);
  if (readFileSync(boundsFile, 'utf8') !== bounds) {
    if (check) {
      console.error(`${MACHINE_BOUNDS_FILE}: not the machines' worst cases: run npm run asl:policy`);
      drifting++;
    } else {
      writeFileSync(boundsFile, bounds);
      console.log(`wrote ${MACHINE_BOUNDS_FILE}`);
    }
  }
  return drifting > 0 ? 1 : 0;
}

process.exitCode = main(process.argv.includes('--check'));
