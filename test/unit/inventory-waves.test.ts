/**
 * The order and the failure path of an inventory apply's changes (functions/inventory/waves.ts):
 * independent changes side by side, a type after its backend and a host after its cell, removals
 * the other way round and after every add; a failing change leaves the rest of its wave made,
 * starts nothing that may depend on it, says what happened, and a second run finishes the apply.
 */
import { describe, expect, test } from 'vitest';
import { Conflict } from '../../functions/core/errors.js';
import type { Change, Kind } from '../../functions/inventory/plan.js';
import { APPLY_CONCURRENCY, InventoryApplyIncomplete, applyInWaves, changeWaves } from '../../functions/inventory/waves.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const add = (kind: Kind, key: string): Change => ({ kind, key, action: 'add' });
const remove = (kind: Kind, key: string): Change => ({ kind, key, action: 'remove' });
const say = (c: Change) => `${c.action} ${c.kind} ${c.key}`;
const waveOf = (waves: Change[][], c: Change) => waves.findIndex((w) => w.some((x) => say(x) === say(c)));

describe('changeWaves', () => {
  test('a type waits for its backend, a host for its cell; the independent kinds go in the first wave', () => {
    // Prepare
    const changes = [add('project', 'demo'), add('volume backend', 'b1'), add('volume type', 't1'), add('share backend', 's1'), add('share type', 'st1'), add('cell', 'cell1'), add('compute host', 'h1'), add('flavor', 'f1'), add('network', 'n1'), add('image', 'i1')];
    // Act
    const waves = changeWaves(changes);
    // Assess
    expect(waves.flat().map(say).sort()).toEqual(changes.map(say).sort());
    expect(waves).toHaveLength(2);
    expect(waveOf(waves, add('volume type', 't1'))).toBeGreaterThan(waveOf(waves, add('volume backend', 'b1')));
    expect(waveOf(waves, add('share type', 'st1'))).toBeGreaterThan(waveOf(waves, add('share backend', 's1')));
    expect(waveOf(waves, add('compute host', 'h1'))).toBeGreaterThan(waveOf(waves, add('cell', 'cell1')));
    expect(waves[0]!.map((c) => c.kind).sort()).toEqual(['cell', 'flavor', 'image', 'network', 'project', 'share backend', 'volume backend']);
  });

  test('removals come after every add, a type or host before the backend or cell it names', () => {
    const changes = [remove('volume type', 'old-t'), remove('volume backend', 'old-b'), remove('compute host', 'old-h'), add('volume backend', 'new-b'), add('volume type', 'new-t'), { kind: 'flavor', key: 'f', action: 'update' } as Change];
    const waves = changeWaves(changes);
    const lastAdd = Math.max(...changes.filter((c) => c.action !== 'remove').map((c) => waveOf(waves, c)));
    for (const c of changes.filter((c) => c.action === 'remove')) expect(waveOf(waves, c)).toBeGreaterThan(lastAdd);
    expect(waveOf(waves, remove('volume backend', 'old-b'))).toBeGreaterThan(waveOf(waves, remove('volume type', 'old-t')));
    expect(waveOf(waves, remove('compute host', 'old-h'))).toBe(waveOf(waves, remove('volume type', 'old-t')));
  });

  test('no changes, no waves', () => {
    expect(changeWaves([])).toEqual([]);
  });
});

/** A store of made changes with a writer that can be told to fail once per key, as a conditional write refused by a concurrent apply. */
function fakeStore(failOnce: Set<string>) {
  const made = new Set<string>();
  let running = 0;
  let mostAtOnce = 0;
  const execute = async (c: Change) => {
    running++;
    mostAtOnce = Math.max(mostAtOnce, running);
    try {
      await new Promise((r) => setTimeout(r, 5));
      // A type is written only when its backend exists (the order the waves must keep).
      if (c.kind === 'volume type' && c.action === 'add' && !made.has('add volume backend b1')) throw new Error(`type ${c.key} before its backend`);
      if (failOnce.delete(say(c))) throw new Conflict(`${c.key} was changed by someone else meanwhile; run the apply again`);
      made.add(say(c));
    } finally {
      running--;
    }
  };
  return { made, execute, mostAtOnce: () => mostAtOnce };
}

describe('applyInWaves', () => {
  test('every change is made, side by side up to the limit, in dependency order', async () => {
    const changes = [add('volume backend', 'b1'), add('volume type', 't1'), ...Array.from({ length: 20 }, (_, i) => add('flavor', `f${i}`))];
    const store = fakeStore(new Set());
    const done = await applyInWaves(changes, store.execute);
    expect(done.map(say).sort()).toEqual(changes.map(say).sort());
    expect(store.made.size).toBe(changes.length);
    expect(store.mostAtOnce()).toBe(APPLY_CONCURRENCY);
  });

  test('a failing change leaves the rest of its wave made, starts no later wave, says so; a second run finishes', async () => {
    // Prepare: the backend's add fails once, so its type (the next wave) must not be tried.
    const changes = [add('volume backend', 'b1'), add('volume type', 't1'), add('flavor', 'f1'), add('network', 'n1')];
    const store = fakeStore(new Set(['add volume backend b1']));
    // Act
    const first = await applyInWaves(changes, store.execute).catch((e: unknown) => e);
    // Assess
    expect(first).toBeInstanceOf(InventoryApplyIncomplete);
    const incomplete = first as InventoryApplyIncomplete;
    expect(incomplete.done.map(say).sort()).toEqual(['add flavor f1', 'add network n1']);
    expect(incomplete.failed.map(({ change }) => say(change))).toEqual(['add volume backend b1']);
    expect(incomplete.notTried.map(say)).toEqual(['add volume type t1']);
    expect(incomplete.status).toBe(409);
    expect(incomplete.message).toMatch(/1 change\(s\) failed \(add volume backend b1: b1 was changed by someone else.*2 made, 1 not tried.*run the apply again/);
    expect([...store.made].sort()).toEqual(['add flavor f1', 'add network n1']);

    // Act: the second apply plans only what is missing (plan.ts would; here the rest of the list).
    const rest = changes.filter((c) => !store.made.has(say(c)));
    const second = await applyInWaves(rest, store.execute);
    // Assess
    expect(second.map(say)).toEqual(['add volume backend b1', 'add volume type t1']);
    expect(store.made.size).toBe(changes.length);
  });

  test('a failure that is not a refusal is a fault (500), with the error as its cause', async () => {
    const boom = new Error('the table is gone');
    const failure = await applyInWaves([add('flavor', 'f1')], async () => Promise.reject(boom)).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(InventoryApplyIncomplete);
    expect((failure as InventoryApplyIncomplete).status).toBe(500);
    expect((failure as InventoryApplyIncomplete).cause).toBe(boom);
  });
});

describe('applyInWaves keeps the hosts in order', () => {
  test('compute hosts are made one after another in plan order (their hypervisor ids follow it), beside the other changes', async () => {
    const hosts = ['cmp1', 'cmp2', 'cmp3', 'cmp4'].map((h) => add('compute host', h));
    const made: string[] = [];
    // The first host is the slowest: side by side, the later ones would be made before it.
    const execute = async (c: Change) => {
      await sleep(c.key === 'cmp1' ? 30 : c.kind === 'compute host' ? 5 : 1);
      made.push(say(c));
    };

    await applyInWaves([add('cell', 'cell1'), ...hosts, add('flavor', 'f1'), add('volume type', 't1'), add('volume backend', 'b1')], execute);

    expect(made.filter((m) => m.includes('compute host'))).toEqual(hosts.map(say));
    // The other changes of the hosts' wave did not wait for them.
    expect(made.indexOf(say(add('volume type', 't1')))).toBeLessThan(made.indexOf(say(hosts[0]!)));
  });

  test('a host that fails ends its chain: the later hosts are not tried and are named so', async () => {
    const hosts = ['cmp1', 'cmp2', 'cmp3'].map((h) => add('compute host', h));
    const execute = async (c: Change) => {
      if (c.key === 'cmp2') throw new Conflict('cmp2 refused');
    };

    const failure = await applyInWaves([add('cell', 'cell1'), ...hosts], execute).catch((e: unknown) => e);

    expect(failure).toBeInstanceOf(InventoryApplyIncomplete);
    const incomplete = failure as InventoryApplyIncomplete;
    expect(incomplete.done.map(say)).toEqual([say(add('cell', 'cell1')), say(hosts[0]!)]);
    expect(incomplete.failed.map((f) => say(f.change))).toEqual([say(hosts[1]!)]);
    expect(incomplete.notTried.map(say)).toEqual([say(hosts[2]!)]);
  });
});

describe('applyInWaves starts the slow kinds first', () => {
  test("a wave's images and cells start before its quick changes, whatever the plan's order, so none waits behind them for a worker", async () => {
    // Prepare: more quick changes than workers, the slow ones last in the plan.
    const quick = Array.from({ length: 6 }, (_, i) => add('flavor', `f${i}`));
    const changes = [...quick, add('network', 'n1'), add('cell', 'cell1'), add('image', 'i1')];
    const started: string[] = [];
    // Act
    await applyInWaves(changes, async (c) => {
      started.push(say(c));
      await sleep(5);
    }, 2);
    // Assess
    expect(started.slice(0, 2)).toEqual([say(add('image', 'i1')), say(add('cell', 'cell1'))]);
    expect(started.slice(2)).toEqual([...quick, add('network', 'n1')].map(say));
  });
});
