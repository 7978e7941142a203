/**
 * The order an apply makes its changes in: waves of changes that do not depend on each other, each
 * wave made side by side (issue 16: 25 changes one at a time cost a first start 1.4 s). The
 * dependencies are the ones plan.ts's order stood for: a type names its backend, a host its cell,
 * so those adds wait for the backend or cell; removals go the other way round (a type before its
 * backend, a host before its cell); and, as before, every add and update comes before any removal.
 *
 * A change that fails does not stop the others of its wave (they are independent of it); the waves
 * after it are not started (they may depend on it). The apply then reports what was made and what
 * failed, and records nothing: a second apply plans only what is still missing and finishes it.
 */
import { FerryError } from '../core/errors.js';
import type { Change, Kind } from './plan.js';

/** The kinds whose adds must exist before an add or update of this kind (and be removed after it). */
export const NEEDS: Partial<Record<Kind, readonly Kind[]>> = {
  'volume type': ['volume backend'],
  'share type': ['share backend'],
  'compute host': ['cell'],
};

/**
 * Kinds whose adds keep the plan's order among themselves, one after another within their wave: a
 * compute host's hypervisor gets the next integer id when it is made (Nova's compute_nodes.id, the
 * id before 2.53 and the order of os-hypervisors), so side by side the sandbox's cmp1..cmp4 came
 * out numbered by whichever write landed first.
 */
export const ORDERED_KINDS: readonly Kind[] = ['compute host'];

/**
 * Kinds whose adds take the most round trips one after another, started first in their wave (in
 * this order) so they do not queue behind quick ones for a worker: an image (its record, the
 * upload to S3, two transitions), a cell (its mapping and its control services), the compute hosts'
 * chain. Issue 16: on a first start the sandbox's images started last of the first wave's 17
 * changes, after 8 workers had made the others, and ended it ~2 s after the rest (100 ms added per
 * request at a load of 28).
 */
export const SLOW_KINDS_FIRST: readonly Kind[] = ['compute host', 'image', 'cell'];

/** At most this many changes at once: enough for the sandbox's 25, polite to a deployed table. */
export const APPLY_CONCURRENCY = 8;

function depth(kind: Kind, next: (k: Kind) => readonly Kind[]): number {
  const deps = next(kind);
  return deps.length === 0 ? 0 : 1 + Math.max(...deps.map((d) => depth(d, next)));
}

const dependents = (kind: Kind): Kind[] => (Object.keys(NEEDS) as Kind[]).filter((k) => NEEDS[k]!.includes(kind));

/** The plan's changes in waves: adds and updates by how deep their kind's needs go, then removals the other way round. */
export function changeWaves(changes: readonly Change[]): Change[][] {
  const waves: Change[][] = [];
  const place = (offset: number, level: number, c: Change) => (waves[offset + level] ??= []).push(c);
  const adds = changes.filter((c) => c.action !== 'remove');
  const removes = changes.filter((c) => c.action === 'remove');
  const addLevels = Math.max(-1, ...adds.map((c) => depth(c.kind, (k) => NEEDS[k] ?? []))) + 1;
  for (const c of adds) place(0, depth(c.kind, (k) => NEEDS[k] ?? []), c);
  for (const c of removes) place(addLevels, depth(c.kind, dependents), c);
  return waves.filter((w) => w !== undefined && w.length > 0);
}

/** Some changes of an apply failed: what was made, what failed and why, and what was not tried. */
export class InventoryApplyIncomplete extends FerryError {
  override name = 'InventoryApplyIncomplete';
  constructor(
    readonly done: readonly Change[],
    readonly failed: readonly { change: Change; error: unknown }[],
    readonly notTried: readonly Change[],
  ) {
    const say = (c: Change) => `${c.action} ${c.kind} ${c.key}`;
    const why = failed.map(({ change, error }) => `${say(change)}: ${error instanceof Error ? error.message : String(error)}`);
    // A refusal among them (a conflict with a concurrent change) is the caller's to retry: 409; else a fault.
    const refused = failed.some(({ error }) => error instanceof FerryError && error.status < 500);
    super(
      refused ? 409 : 500,
      refused ? 'conflictingRequest' : 'computeFault',
      `inventory apply incomplete: ${failed.length} change(s) failed (${why.join('; ')}); ${done.length} made, ${notTried.length} not tried; ` +
        'nothing was recorded as applied: run the apply again to finish it',
      { cause: failed[0]?.error, context: { done: done.map(say), failed: failed.map(({ change }) => say(change)), notTried: notTried.map(say) } },
    );
  }
}

/** Makes every change, wave by wave, up to APPLY_CONCURRENCY at once; returns them in the order they were made. */
export async function applyInWaves(changes: readonly Change[], execute: (c: Change) => Promise<void>, concurrency = APPLY_CONCURRENCY): Promise<Change[]> {
  const done: Change[] = [];
  const waves = changeWaves(changes);
  for (const [i, wave] of waves.entries()) {
    const failed: { change: Change; error: unknown }[] = [];
    const units = orderedUnits(wave);
    let next = 0;
    const worker = async () => {
      while (next < units.length) {
        // A unit's changes one after another; the first that fails ends the unit (the later ones may need its id order).
        for (const change of units[next++]!) {
          try {
            await execute(change);
            done.push(change);
          } catch (error) {
            failed.push({ change, error });
            break;
          }
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, units.length) }, worker));
    if (failed.length > 0) {
      const attempted = new Set([...done, ...failed.map((f) => f.change)]);
      throw new InventoryApplyIncomplete(done, failed, [...wave.filter((c) => !attempted.has(c)), ...waves.slice(i + 1).flat()]);
    }
  }
  return done;
}

/**
 * A wave as units of work: each ORDERED_KINDS add with the others of its kind, in plan order; every
 * other change alone; the units of SLOW_KINDS_FIRST first (a stable sort: the plan's order otherwise).
 */
function orderedUnits(wave: readonly Change[]): Change[][] {
  const chains = new Map<Kind, Change[]>();
  const units: Change[][] = [];
  for (const c of wave) {
    if (c.action === 'add' && ORDERED_KINDS.includes(c.kind)) {
      const chain = chains.get(c.kind);
      if (chain) chain.push(c);
      else {
        const first = [c];
        chains.set(c.kind, first);
        units.push(first);
      }
    } else units.push([c]);
  }
  const rank = (unit: Change[]) => {
    const i = SLOW_KINDS_FIRST.indexOf(unit[0]!.kind);
    return i === -1 ? SLOW_KINDS_FIRST.length : i;
  };
  return units.sort((a, b) => rank(a) - rank(b));
}
