/**
 * `ferry inventory apply` against a real local stack (DynamoDB Local, S3, the drivers): the sandbox
 * applied at start; an apply twice changes nothing the second time; a backend holding a volume is
 * refused with its reason and nothing is written; an unused one is removed and nothing can land on
 * it; what the API made is never removed; a data directory seeded the old way is what the sandbox
 * inventory names; bad documents change nothing.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { stringify } from 'yaml';
import { main } from '../../bin/ferry.js';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { applyInventory, lastApplied, showInventory } from '../../functions/inventory/apply.js';
import { formatPlan } from '../../functions/inventory/plan.js';
import type { Inventory } from '../../functions/inventory/schema.js';
import { seedComputeSandbox } from '../../functions/compute/seed.js';
import { seedImages } from '../../functions/servers/images.js';
import { seedShareSandbox } from '../../functions/shares/seed.js';
import { seedVolumeSandbox } from '../../functions/volumes/seed.js';
import { TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { db } from '../../functions/core/db.js';
import { listBackends } from '../../functions/volumes/backends.js';
import { reservePoolItem } from '../../functions/volumes/scheduler.js';
import { SANDBOX_INVENTORY, readInventoryFile } from '../../infra/inventory-file.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
const sandbox = () => structuredClone(readInventoryFile(SANDBOX_INVENTORY)) as Inventory;
const withExtraBackend = (): Inventory => {
  const inv = sandbox();
  inv.volumeBackends.push({ host: 'ferry@lvm-x', driver: 'local', root: 'backends/lvm-x', volumeBackendName: 'lvm-x', pools: [{ name: 'pool0', totalCapacityGb: 10 }] });
  inv.volumeTypes.push({ name: 'on-x', extraSpecs: { volume_backend_name: 'lvm-x' } });
  return inv;
};
const apply = (doc: unknown, dryRun = false) => applyInventory(doc, { target: 'local', dataDir: stack.dataDir, dryRun });

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${stack.url}/volume/v3/demo${path}`, {
    method,
    headers: { 'X-Auth-Token': 'admin:admin', 'Content-Type': 'application/json', 'OpenStack-API-Version': 'volume 3.70' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined };
}

async function volumeStatus(id: string): Promise<string> {
  return (await api('GET', `/volumes/${id}`)).json?.volume?.status ?? 'gone';
}

beforeAll(async () => {
  stack = await useLocalStack();
}, 120_000);
afterAll(async () => stack?.stop());

describe('inventory apply', () => {
  test('the stack applied the sandbox at start: a second apply plans nothing and writes nothing', async () => {
    const before = await lastApplied();
    expect(before?.version).toBe(1);
    const again = await apply(sandbox());
    expect(again.plan.changes).toEqual([]);
    expect(again.plan.refusals).toEqual([]);
    expect(again.plan.unchanged).toBeGreaterThan(20);
    expect((await lastApplied())?.version).toBe(1);
  });

  test('an added backend and type: dry run shows them and writes nothing; apply adds them; twice changes nothing', async () => {
    const dry = await apply(withExtraBackend(), true);
    expect(formatPlan(dry.plan)).toContain('+ volume backend ferry@lvm-x');
    expect(dry.applied).toBe(false);
    expect((await listBackends()).map((b) => b.host)).not.toContain('ferry@lvm-x');

    const first = await apply(withExtraBackend());
    expect(first.done.map((c) => `${c.action} ${c.kind} ${c.key}`)).toEqual(['add volume backend ferry@lvm-x', 'add volume type on-x']);
    const second = await apply(withExtraBackend());
    expect(second.plan.changes).toEqual([]);
    expect((await lastApplied())?.version).toBe(2);
  });

  test('removing a backend that holds a volume is refused with the reason, and nothing is written', async () => {
    const created = await api('POST', '/volumes', { volume: { size: 1, name: 'on-x', volume_type: 'on-x' } });
    expect(created.status).toBe(202);
    const id = created.json.volume.id as string;
    await eventually(async (note) => note(await volumeStatus(id)) === 'available', `volume ${id} available`);

    const refused = await apply(sandbox());
    expect(refused.applied).toBe(false);
    expect(formatPlan(refused.plan)).toEqual(
      expect.arrayContaining([
        '! volume backend ferry@lvm-x: refused, in use: holds 1 volume(s), 1 GiB allocated',
        '! volume type on-x: refused, in use: 1 volume(s) of this type',
      ]),
    );
    expect((await listBackends()).map((b) => b.host)).toContain('ferry@lvm-x');
    expect((await lastApplied())?.version).toBe(2);
    expect((await showInventory()).join('\n')).toMatch(/ferry@lvm-x {2}\[inventory; in use: holds 1 volume/);

    expect((await api('DELETE', `/volumes/${id}`)).status).toBe(202);
    await eventually(async (note) => note(await volumeStatus(id)) === 'gone', `volume ${id} deleted`);
  });

  test('once empty, the backend and its type are removed; an API-made type stays; its retired pool takes no reservation until it is added back', async () => {
    expect((await api('POST', '/types', { volume_type: { name: 'made-by-api' } })).status).toBe(200);
    const removed = await apply(sandbox());
    expect(removed.done.map((c) => `${c.action} ${c.kind} ${c.key}`)).toEqual(['remove volume type on-x', 'remove volume backend ferry@lvm-x']);
    expect((await listBackends()).map((b) => b.host)).not.toContain('ferry@lvm-x');
    const types = (await api('GET', '/types')).json.volume_types.map((t: { name: string }) => t.name);
    expect(types).toContain('made-by-api');
    expect(types).not.toContain('on-x');
    // A scheduler that read the backend before it went cannot reserve on its retired pool.
    await expect(db().send(new TransactWriteCommand({ TransactItems: [reservePoolItem('ferry@lvm-x#pool0', 1, 10)] }))).rejects.toThrow(/ConditionalCheckFailed/);

    // Added back: the retired pool is in service again.
    await apply(withExtraBackend());
    const again = await api('POST', '/volumes', { volume: { size: 1, name: 'back-on-x', volume_type: 'on-x' } });
    await eventually(async (note) => note(await volumeStatus(again.json.volume.id)) === 'available', 'volume on the re-added backend available');
    expect((await api('DELETE', `/volumes/${again.json.volume.id}`)).status).toBe(202);
    await eventually(async (note) => note(await volumeStatus(again.json.volume.id)) === 'gone', 'volume deleted');
    await apply(sandbox());
  });

  test('bad documents are refused with their path and change nothing', async () => {
    const version = (await lastApplied())?.version;
    await expect(apply({ volumeBackends: [{ host: 'no-at-sign', driver: 'local', root: 'x', volumeBackendName: 'x', pools: [] }] })).rejects.toThrow(/volumeBackends\.0\.host: must be host@backend/);
    await expect(apply({ flavors: [{ id: '1', name: 'a', vcpus: 1, memoryMb: 1, rootGb: 1 }, { id: '1', name: 'b', vcpus: 1, memoryMb: 1, rootGb: 1 }] })).rejects.toThrow(/flavor id 1 appears more than once/);
    await expect(applyInventory(sandbox(), { target: 'aws', dryRun: true })).rejects.toThrow(/driver local keeps volumes in one Lambda's \/tmp/);
    const changedFlavor = sandbox();
    changedFlavor.flavors[0]!.vcpus = 2;
    const refused = await apply(changedFlavor);
    expect(formatPlan(refused.plan)).toContain('! flavor 1: refused, flavors are immutable in Nova: add one under a new id and remove the old one');
    expect((await lastApplied())?.version).toBe(version);
  });
});

describe('ferry inventory (the CLI)', () => {
  const run = async (...argv: string[]) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await main(argv, { out: (l) => out.push(l), err: (l) => err.push(l) });
    return { code, out: out.join('\n'), err: err.join('\n') };
  };

  test('apply twice: the first adds, the second changes nothing; show marks what the inventory manages; a refusal exits 1', async () => {
    const file = join(await mkdtemp(join(tmpdir(), 'ferry-inventory-')), 'with-x.yaml');
    await writeFile(file, stringify(withExtraBackend()));
    const first = await run('inventory', 'apply', file);
    expect(first).toMatchObject({ code: 0 });
    expect(first.out).toContain('+ volume backend ferry@lvm-x');
    expect(first.out).toContain('applied');
    const second = await run('inventory', 'apply', file);
    expect(second).toMatchObject({ code: 0 });
    expect(second.out).toMatch(/0 change\(s\), \d+ unchanged, 0 refused\nnothing to change/);
    const shown = await run('inventory', 'show');
    expect(shown.out).toMatch(/ferry@lvm-x {2}\[inventory\]/);
    expect(shown.out).toMatch(/made-by-api {2}\[api\]/);

    const bad = join(dirname(file), 'bad.yaml');
    await writeFile(bad, 'volumeBackends: [{ host: nope }]\n');
    const invalid = await run('inventory', 'apply', bad);
    expect(invalid.code).toBe(2);
    expect(invalid.err).toMatch(/Invalid inventory: volumeBackends\.0/);

    const sandboxFile = join(dirname(file), 'sandbox.yaml');
    const changed = sandbox();
    changed.flavors[0]!.rootGb = 5;
    await writeFile(sandboxFile, stringify(changed));
    const refused = await run('inventory', 'apply', sandboxFile);
    expect(refused.code).toBe(1);
    expect(refused.out).toContain('! flavor 1: refused');
    expect(refused.err).toContain('nothing was applied');
    expect((await run('inventory', 'apply', SANDBOX_INVENTORY)).code).toBe(0);
  });
});

describe('a data directory seeded before inventories', () => {
  let old: TestLocalStack;
  beforeAll(async () => {
    // A stack that applies nothing, then the old seeds: what every data directory held until now.
    const empty = join(await mkdtemp(join(tmpdir(), 'ferry-inventory-')), 'empty.yaml');
    await writeFile(empty, '{}\n');
    await stack.stop();
    old = await useLocalStack({ inventory: empty });
    await seedVolumeSandbox({ dataDir: old.dataDir });
    await seedShareSandbox({ dataDir: old.dataDir });
    await seedComputeSandbox({ dataDir: old.dataDir });
    await seedImages();
  }, 120_000);
  afterAll(async () => old?.stop());

  test('holds exactly what the sandbox inventory names: its first apply changes nothing', async () => {
    const result = await applyInventory(sandbox(), { target: 'local', dataDir: old.dataDir, dryRun: true });
    expect(formatPlan(result.plan)).toEqual([expect.stringMatching(/^0 change\(s\), \d+ unchanged, 0 refused$/)]);
  });
});
