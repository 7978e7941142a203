/**
 * `ferry inventory apply` and `show` the way an operator runs them against a deployed stack: the
 * stack's physical table names in FERRY_TABLE_*, AWS credentials and region, no local endpoint, so
 * the command takes its AWS path (the AWS rules, no local data directory). DynamoDB is DynamoDB
 * Local standing in for the account's, reached through the SDK's own endpoint setting
 * (AWS_ENDPOINT_URL_DYNAMODB), so nothing in Ferry knows it is not AWS. The command is the real
 * `bin/ferry.ts` in a child process.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { TABLES, tableEnvName } from '../../functions/core/tables.js';
import type { Inventory } from '../../functions/inventory/schema.js';
import { REPO_ROOT } from '../../infra/aws/ferry-stack.js';
import { readInventoryFile } from '../../infra/inventory-file.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';

const run = promisify(execFile);
const AWS_EXAMPLE = resolve(REPO_ROOT, 'inventories/aws-sandbox.yaml');
// Names as CloudFormation makes them (stack, logical id, suffix), nothing like the local prefix.
const suffix = randomBytes(4).toString('hex').toUpperCase();
const tableEnv = Object.fromEntries(TABLES.map((t) => [tableEnvName(t.key), `Ferry-Table${t.key.replace(/(^|-)(\w)/g, (_, __, c: string) => c.toUpperCase())}-${suffix}`]));
let dynamo: LocalDynamo;
let dir: string;

async function ferry(...args: string[]): Promise<{ code: number; out: string }> {
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? '/root',
    ...tableEnv,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'ferry',
    AWS_SECRET_ACCESS_KEY: 'ferry',
    AWS_ENDPOINT_URL_DYNAMODB: dynamo.endpoint,
    // A data directory with no stack in it: the command must not look there.
    FERRY_DATA_DIR: join(dir, 'no-stack'),
  };
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', 'bin/ferry.ts', ...args], { cwd: REPO_ROOT, env, timeout: 120_000 });
    return { code: 0, out: stdout + stderr };
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number };
    return { code: typeof err.code === 'number' ? err.code : 1, out: (err.stdout ?? '') + (err.stderr ?? '') };
  }
}

async function inventoryFile(name: string, change: (inv: Inventory) => void): Promise<string> {
  const inv = structuredClone(readInventoryFile(AWS_EXAMPLE)) as Inventory;
  change(inv);
  const file = join(dir, name);
  await writeFile(file, stringify(inv));
  return file;
}

beforeAll(async () => {
  Object.assign(process.env, tableEnv);
  dynamo = await useLocalDynamo();
  dir = await mkdtemp(join(tmpdir(), 'ferry-inventory-deployed-'));
}, 120_000);
afterAll(async () => {
  await dynamo?.stop();
  for (const name of Object.keys(tableEnv)) delete process.env[name];
});

describe('ferry inventory against a deployed stack (its tables, AWS credentials)', () => {
  test('the example without share backends: applied, then nothing to change, and shown', async () => {
    const file = await inventoryFile('ebs-only.yaml', (inv) => {
      inv.shareBackends = [];
      inv.shareTypes = [];
    });

    const first = await ferry('inventory', 'apply', file);
    const second = await ferry('inventory', 'apply', file);
    const shown = await ferry('inventory', 'show');

    expect(first.code, first.out).toBe(0);
    expect(first.out).toMatch(/^\+ volume backend ferry@ebs-multi$/m);
    expect(first.out).toMatch(/applied/);
    expect(second.code, second.out).toBe(0);
    expect(second.out).toMatch(/nothing to change/);
    expect(shown.code, shown.out).toBe(0);
    for (const host of ['ferry@ebs-a', 'ferry@ebs-b', 'ferry@ebs-multi']) expect(shown.out).toContain(host);
    expect(shown.out).not.toContain('/tmp');
  });

  test('a share backend of a local kind is refused from here (its root is on the stack\'s EFS), nothing written', async () => {
    const file = await inventoryFile('local-shares.yaml', (inv) => {
      for (const n of ['nfs-a', 'nfs-b']) inv.shareBackends.push({ host: `ferry@${n}`, driver: 'local-a', root: `/mnt/ferry-shares/${n}`, shareBackendName: n, protocols: ['NFS'], pools: [{ name: 'pool0', totalCapacityGb: 100 }] });
    });
    const withShares = await ferry('inventory', 'apply', file);
    const shown = await ferry('inventory', 'show');

    expect(withShares.code).toBe(2);
    expect(withShares.out).toMatch(/share backend\(s\) ferry@nfs-a, ferry@nfs-b: .*only the deployed functions mount; apply this inventory with `cdk deploy -c inventory=FILE`/);
    expect(shown.out).not.toContain('ferry@nfs-a');
    expect(shown.out).not.toContain('ferry@efs-a');
  });

  test('aws-efs share backends apply from here (no root to make): the example as it is, then nothing to change', async () => {
    const first = await ferry('inventory', 'apply', AWS_EXAMPLE);
    const second = await ferry('inventory', 'apply', AWS_EXAMPLE);
    const shown = await ferry('inventory', 'show');

    expect(first.code, first.out).toBe(0);
    expect(first.out).toMatch(/^\+ share backend ferry@efs-a$/m);
    expect(first.out).toMatch(/^\+ share backend ferry@efs-b$/m);
    expect(second.code, second.out).toBe(0);
    expect(second.out).toMatch(/nothing to change/);
    expect(shown.out).toContain('ferry@efs-b');
  });

  test('the AWS rules apply: the local sandbox inventory is refused with the reason', async () => {
    const local = await ferry('inventory', 'apply', resolve(REPO_ROOT, 'inventories/sandbox.yaml'));

    expect(local.code).toBe(2);
    expect(local.out).toMatch(/driver local keeps volumes in one Lambda's \/tmp; on AWS use aws-ebs/);
  });
});
