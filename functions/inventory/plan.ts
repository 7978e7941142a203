/**
 * The plan of an inventory apply, as a pure function of three views: what the document asks for,
 * what is there now, and what the last applied inventory named. Only what an inventory put there
 * is ever removed: a type, flavor or backend an operator made through the API is left alone.
 *
 * Each kind says what may change in place and what may be removed; a change that is not allowed,
 * or a removal of something in use, is a refusal, and an apply with any refusal writes nothing.
 */

export const KINDS = ['project', 'volume backend', 'volume type', 'share backend', 'share type', 'cell', 'compute host', 'flavor', 'network', 'image'] as const;
export type Kind = (typeof KINDS)[number];

/** What may be done to an existing item of a kind; a string is why not. */
const RULES: Record<Kind, { update: true | string; remove: true | string }> = {
  project: { update: true, remove: 'projects are not removed by an inventory (they own volumes, shares and servers)' },
  'volume backend': { update: true, remove: true },
  'volume type': { update: true, remove: true },
  'share backend': { update: true, remove: true },
  'share type': { update: true, remove: true },
  cell: { update: 'a cell keeps its table once made', remove: 'removing a cell is not supported: move its hosts out and keep it' },
  'compute host': { update: 'changing a host in place is not supported yet: remove it (when empty) and add it again', remove: true },
  flavor: { update: 'flavors are immutable in Nova: add one under a new id and remove the old one', remove: true },
  network: { update: 'a network keeps its CIDR once made', remove: 'removing a network is not supported (ports live on it)' },
  image: { update: 'an image\'s bytes are immutable: add one under a new name', remove: true },
};

/** One kind's view: key -> canonical fields (records.ts canonical). */
export type View = Map<string, string>;
/** What is there: fields, and why it is in use (undefined: free to remove; an apply reads it only for what it could remove, the one place it is consulted below). */
export type LiveView = Map<string, { fields: string; inUse?: string }>;

export interface Change {
  kind: Kind;
  key: string;
  action: 'add' | 'update' | 'remove';
}
export interface Refusal {
  kind: Kind;
  key: string;
  reason: string;
}
export interface Plan {
  changes: Change[];
  unchanged: number;
  refusals: Refusal[];
}

/**
 * Adds in kind order (backends before the types that name them, cells before hosts), removals in
 * reverse (hosts before their cell, types before backends).
 */
export function planInventory(desired: Map<Kind, View>, live: Map<Kind, LiveView>, lastApplied: Map<Kind, Set<string>>): Plan {
  const adds: Change[] = [];
  const removes: Change[] = [];
  const refusals: Refusal[] = [];
  let unchanged = 0;
  for (const kind of KINDS) {
    const want = desired.get(kind) ?? new Map();
    const have = live.get(kind) ?? new Map();
    for (const [key, fields] of want) {
      const now = have.get(key);
      if (!now) adds.push({ kind, key, action: 'add' });
      else if (now.fields === fields) unchanged++;
      else if (RULES[kind].update === true) adds.push({ kind, key, action: 'update' });
      else refusals.push({ kind, key, reason: RULES[kind].update as string });
    }
    for (const key of lastApplied.get(kind) ?? []) {
      const now = have.get(key);
      if (want.has(key) || !now) continue;
      if (RULES[kind].remove !== true) refusals.push({ kind, key, reason: RULES[kind].remove as string });
      else if (now.inUse) refusals.push({ kind, key, reason: `in use: ${now.inUse}` });
      else removes.push({ kind, key, action: 'remove' });
    }
  }
  return { changes: [...adds, ...removes.reverse()], unchanged, refusals };
}

export function formatPlan(plan: Plan): string[] {
  const lines = plan.changes.map((c) => `${c.action === 'add' ? '+' : c.action === 'update' ? '~' : '-'} ${c.kind} ${c.key}`);
  for (const r of plan.refusals) lines.push(`! ${r.kind} ${r.key}: refused, ${r.reason}`);
  lines.push(`${plan.changes.length} change(s), ${plan.unchanged} unchanged, ${plan.refusals.length} refused`);
  return lines;
}
