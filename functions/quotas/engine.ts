/**
 * Quotas as DynamoDB items, shared by Cinder's and Manila's quota APIs (volumes/quotas.ts,
 * shares/quotas.ts), which name the resources, the defaults and the errors.
 *
 * Items (in the service's own table):
 * - `QUOTA#<project>` / `LIMITS`: the project's own limits, one attribute `l:<resource>` each;
 * - `QUOTACLASS#<class>` / `LIMITS`: a quota class's limits (class `default` gives every project's
 *   defaults, as upstream's use_default_quota_class);
 * - `QUOTA#<project>` / `USAGE`: what the project's records hold, `u:<resource>` each, and
 *   `counted` once the records written before quotas existed have been counted (countLegacy).
 *
 * A record (a volume, a share) that holds quota carries what it took (`quota`: resource -> n). It
 * takes it in the very transaction that writes it, whose usage update is conditioned on
 * `u:<r> <= limit - n` for each limited resource (DynamoDB conditions cannot add, so the caller's
 * side subtracts), and on the limits read being still the limits (ConditionChecks on the limit
 * items): concurrent creates serialize on the usage item and none lands over the limit. Removing
 * the record gives back exactly its `quota`, in the transaction that removes it.
 *
 * Records from before quotas carry no `quota`: they are counted once per project, lazily, the first
 * time that project takes quota. Each is moved from uncounted to counted by one transaction (the
 * record gets its `quota`, the usage grows, conditioned on the record's version), so a record is
 * never counted twice however many counters run at once, and the usage is `counted` only after all
 * of them. Until then a create's condition (`counted = true`) fails, and the creator counts first.
 */
import { DeleteCommand, GetCommand, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { batchGetAll, cancellationCodes, db } from '../core/db.js';
import { tableName, type TableKey } from '../core/tables.js';
import type { TransactWriteCommandInput } from '@aws-sdk/lib-dynamodb';

export type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];
export type Deltas = Record<string, number>;

export const projectLimitsKey = (project: string) => ({ pk: `QUOTA#${project}`, sk: 'LIMITS' });
export const classLimitsKey = (quotaClass: string) => ({ pk: `QUOTACLASS#${quotaClass}`, sk: 'LIMITS' });
export const usageKey = (project: string) => ({ pk: `QUOTA#${project}`, sk: 'USAGE' });
export const DEFAULT_CLASS = 'default';

const L = (r: string) => `l:${r}`;
const U = (r: string) => `u:${r}`;

/** Where a resource's limit came from, so the charge can check it is still that. */
export type LimitSource = 'project' | 'class' | 'builtin';

export interface Limits {
  project: Record<string, number>;
  defaults: Record<string, number>;
}

function attrs(item: Record<string, unknown> | undefined, prefix: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(item ?? {})) if (k.startsWith(prefix) && typeof v === 'number') out[k.slice(prefix.length)] = v;
  return out;
}

/** A project's own limits and the default class's, read consistently. */
export async function readLimits(table: TableKey, project: string): Promise<Limits> {
  const items = await batchGetAll(tableName(table), [projectLimitsKey(project), classLimitsKey(DEFAULT_CLASS)]);
  const find = (k: { pk: string }) => items.find((i) => i.pk === k.pk);
  return { project: attrs(find(projectLimitsKey(project)), 'l:'), defaults: attrs(find(classLimitsKey(DEFAULT_CLASS)), 'l:') };
}

export async function readClassLimits(table: TableKey, quotaClass: string): Promise<Record<string, number>> {
  const out = await db().send(new GetCommand({ TableName: tableName(table), Key: classLimitsKey(quotaClass), ConsistentRead: true }));
  return attrs(out.Item, 'l:');
}

export async function readUsage(table: TableKey, project: string): Promise<{ usage: Record<string, number>; counted: boolean }> {
  const out = await db().send(new GetCommand({ TableName: tableName(table), Key: usageKey(project), ConsistentRead: true }));
  return { usage: attrs(out.Item, 'u:'), counted: out.Item?.counted === true };
}

let parsedDefaults: { raw: string; values: Record<string, number> } | undefined;

/**
 * FERRY_QUOTA_DEFAULTS: a JSON object of resource -> limit that replaces the built-in defaults
 * (upstream's quota_* options of cinder.conf and manila.conf), e.g. `{"volumes": 100}`. The test
 * tiers set every resource unlimited (test/support/setup.ts), so suites about other things are
 * not held to 10 volumes a project; the quota tests clear it.
 */
export function configuredDefaults(): Record<string, number> {
  const raw = process.env.FERRY_QUOTA_DEFAULTS ?? '';
  if (parsedDefaults?.raw === raw) return parsedDefaults.values;
  let values: Record<string, number> = {};
  if (raw) {
    const parsed = JSON.parse(raw) as Record<string, unknown>;
    values = Object.fromEntries(Object.entries(parsed).filter(([, v]) => Number.isInteger(v)).map(([k, v]) => [k, v as number]));
  }
  parsedDefaults = { raw, values };
  return values;
}

/** The limit in force for a resource: the project's, else the default class's, else the configured or built-in default. */
export function effectiveLimit(limits: Limits, resource: string, builtin: number): { limit: number; source: LimitSource } {
  if (limits.project[resource] !== undefined) return { limit: limits.project[resource]!, source: 'project' };
  if (limits.defaults[resource] !== undefined) return { limit: limits.defaults[resource]!, source: 'class' };
  return { limit: configuredDefaults()[resource] ?? builtin, source: 'builtin' };
}

/** A resource a charge would take past its limit: what upstream's OverQuota carries to build its message. */
export interface Over {
  resource: string;
  limit: number;
  inUse: number;
  requested: number;
}

/** A quota charge ready to join a transaction: `items` go in it, `explain` reads why it was refused. */
export interface Charge {
  items: TransactItem[];
  /** Resources already over before any write (n > limit), in the order of the deltas. */
  overs: Over[];
}

/**
 * The transaction items that take `deltas` from the project's quota, or the resources that cannot
 * fit even in an empty project. `builtin(r)` is the configured default of a resource.
 */
export function chargeItems(table: TableKey, project: string, deltas: Deltas, limits: Limits, builtin: (r: string) => number): Charge {
  const names: Record<string, string> = {};
  const values: Record<string, unknown> = { ':true': true };
  const adds: string[] = [];
  const conds: string[] = ['#counted = :true'];
  names['#counted'] = 'counted';
  const projectConds: string[] = [];
  const classConds: string[] = [];
  const overs: Over[] = [];
  let i = 0;
  for (const [r, n] of Object.entries(deltas)) {
    if (n === 0) continue;
    const { limit, source } = effectiveLimit(limits, r, builtin(r));
    const k = i++;
    names[`#u${k}`] = U(r);
    names[`#l${k}`] = L(r);
    values[`:n${k}`] = n;
    adds.push(`#u${k} :n${k}`);
    // The limit read is the limit when the write lands (an admin lowering it meanwhile refuses it).
    if (source === 'project') {
      projectConds.push(`#l${k} = :lim${k}`);
      values[`:lim${k}`] = limit;
    } else {
      projectConds.push(`attribute_not_exists(#l${k})`);
      if (source === 'class') {
        classConds.push(`#l${k} = :lim${k}`);
        values[`:lim${k}`] = limit;
      } else classConds.push(`attribute_not_exists(#l${k})`);
    }
    if (limit >= 0 && n > 0) {
      if (n > limit) overs.push({ resource: r, limit, inUse: 0, requested: n });
      values[`:cap${k}`] = limit - n;
      conds.push(`(attribute_not_exists(#u${k}) OR #u${k} <= :cap${k})`);
    }
  }
  if (adds.length === 0) return { items: [], overs };
  const pick = (expr: string[]) => {
    const used = new Set((expr.join(' ').match(/[#:][a-z]+\d+|:true|#counted/g) ?? []));
    return {
      names: Object.fromEntries(Object.entries(names).filter(([k]) => used.has(k))),
      values: Object.fromEntries(Object.entries(values).filter(([k]) => used.has(k))),
    };
  };
  const usage = pick([...adds, ...conds]);
  const items: TransactItem[] = [
    {
      Update: {
        TableName: tableName(table),
        Key: usageKey(project),
        UpdateExpression: `ADD ${adds.join(', ')}`,
        ConditionExpression: conds.join(' AND '),
        ExpressionAttributeNames: usage.names,
        ExpressionAttributeValues: usage.values,
      },
    },
  ];
  for (const [key, expr] of [[projectLimitsKey(project), projectConds], [classLimitsKey(DEFAULT_CLASS), classConds]] as const) {
    if (expr.length === 0) continue;
    const p = pick(expr);
    items.push({
      ConditionCheck: {
        TableName: tableName(table),
        Key: key,
        ConditionExpression: expr.join(' AND '),
        ExpressionAttributeNames: p.names,
        ...(Object.keys(p.values).length ? { ExpressionAttributeValues: p.values } : {}),
      },
    });
  }
  return { items, overs };
}

/** The usage update that gives back what a record took (in the transaction that removes the record). */
export function releaseItem(table: TableKey, project: string, taken: Deltas | null | undefined): TransactItem | undefined {
  const entries = Object.entries(taken ?? {}).filter(([, n]) => n !== 0);
  if (entries.length === 0) return undefined;
  return {
    Update: {
      TableName: tableName(table),
      Key: usageKey(project),
      UpdateExpression: `ADD ${entries.map((_, k) => `#u${k} :n${k}`).join(', ')}`,
      ExpressionAttributeNames: Object.fromEntries(entries.map(([r], k) => [`#u${k}`, U(r)])),
      ExpressionAttributeValues: Object.fromEntries(entries.map(([, n], k) => [`:n${k}`, -n])),
    },
  };
}

/**
 * Why a transaction holding a charge at `index` was cancelled: 'uncounted' (the project's old
 * records are still to be counted), 'over' (a usage or limit condition failed: re-read and decide),
 * or undefined (another item's failure).
 */
export async function chargeFailure(table: TableKey, project: string, e: unknown, index: number, count: number): Promise<'uncounted' | 'over' | undefined> {
  const codes = cancellationCodes(e).slice(index, index + count);
  if (!codes.includes('ConditionalCheckFailed')) return undefined;
  if (codes[0] === 'ConditionalCheckFailed' && !(await readUsage(table, project)).counted) return 'uncounted';
  return 'over';
}

/** Which resources `deltas` would take past their limits now (for the error message after a refused charge). */
export async function oversNow(table: TableKey, project: string, deltas: Deltas, builtin: (r: string) => number): Promise<Over[]> {
  const [limits, { usage }] = await Promise.all([readLimits(table, project), readUsage(table, project)]);
  const out: Over[] = [];
  for (const [r, n] of Object.entries(deltas)) {
    const { limit } = effectiveLimit(limits, r, builtin(r));
    if (limit >= 0 && n > 0 && (usage[r] ?? 0) + n > limit) out.push({ resource: r, limit, inUse: usage[r] ?? 0, requested: n });
  }
  return out;
}

/**
 * Counts a project's records written before quotas (`records` lists them with what each would
 * take; `mark(record)` is the record's own conditional update giving it `quota`), then marks the
 * usage counted. Safe to run concurrently and again: each record is counted by the one
 * transaction that finds it uncounted at its version.
 */
export async function countLegacy<T extends { quota?: Deltas | null }>(
  table: TableKey,
  project: string,
  records: () => Promise<T[]>,
  takes: (r: T) => Deltas,
  mark: (r: T, taken: Deltas) => TransactItem,
  options: { markCounted?: boolean } = {},
): Promise<void> {
  for (const rec of await records()) {
    if (rec.quota) continue;
    const taken = takes(rec);
    // A release of minus what it takes is the usage growing by it, with no limit condition: the record exists already.
    const grow = releaseItem(table, project, Object.fromEntries(Object.entries(taken).map(([k, n]) => [k, -n])));
    try {
      await db().send(new TransactWriteCommand({ TransactItems: [mark(rec, taken), ...(grow ? [grow] : [])] }));
    } catch (e) {
      // Counted by a concurrent counter, changed (a later pass counts it), or removed: none is lost.
      if (!cancellationCodes(e).includes('ConditionalCheckFailed') && !cancellationCodes(e).includes('TransactionConflict')) throw e;
    }
  }
  if (options.markCounted === false) return;
  await db().send(
    new UpdateCommand({ TableName: tableName(table), Key: usageKey(project), UpdateExpression: 'SET #c = :true', ExpressionAttributeNames: { '#c': 'counted' }, ExpressionAttributeValues: { ':true': true } }),
  );
}

/** Sets (or, for `null`, removes) limits on a project's or a class's limits item. */
export async function writeLimits(table: TableKey, key: { pk: string; sk: string }, values: Record<string, number | null>): Promise<void> {
  const entries = Object.entries(values);
  if (entries.length === 0) return;
  const sets = entries.map(([, v], k) => (v === null ? null : `#l${k} = :v${k}`)).filter(Boolean);
  const removes = entries.map(([, v], k) => (v === null ? `#l${k}` : null)).filter(Boolean);
  const expr = [sets.length ? `SET ${sets.join(', ')}` : '', removes.length ? `REMOVE ${removes.join(', ')}` : ''].filter(Boolean).join(' ');
  const vals = Object.fromEntries(entries.flatMap(([, v], k) => (v === null ? [] : [[`:v${k}`, v]])));
  await db().send(
    new UpdateCommand({
      TableName: tableName(table),
      Key: key,
      UpdateExpression: expr,
      ExpressionAttributeNames: Object.fromEntries(entries.map(([r], k) => [`#l${k}`, L(r)])),
      ...(Object.keys(vals).length ? { ExpressionAttributeValues: vals } : {}),
    }),
  );
}

/** Removes a project's own limits (upstream's quota delete: the project falls back to the defaults). */
export async function deleteProjectLimits(table: TableKey, project: string): Promise<void> {
  await db().send(new DeleteCommand({ TableName: tableName(table), Key: projectLimitsKey(project) }));
}

/** How a charged write learns its record's own failures and turns over-quota into the service's error. */
export interface ChargedWrite {
  table: TableKey;
  project: string;
  deltas: Deltas;
  builtin: (r: string) => number;
  /** The record's own items: the charge's items are appended after them, so their indexes stay. */
  items: TransactItem[];
  /** Counts the project's records from before quotas (countLegacy with the capability's records). */
  countLegacy: () => Promise<void>;
  /** The service's over-quota error for the resources over, in the order of the deltas. */
  overError: (overs: Over[]) => Error;
  /** A check on the limits before any write (Cinder's per_volume_gigabytes): throws its error. */
  precheck?: (limits: Limits) => void;
}

/**
 * Writes `items` and the quota charge as one transaction. A refusal of the charge is re-read: the
 * project still uncounted -> count and retry; over a limit now -> the service's error; otherwise
 * (a limit changed, or a concurrent charge landed and left room) -> retry. Any other item's
 * failure is thrown as it came, for the caller to map.
 */
export async function writeCharged(w: ChargedWrite): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const limits = await readLimits(w.table, w.project);
    w.precheck?.(limits);
    const charge = chargeItems(w.table, w.project, w.deltas, limits, w.builtin);
    if (charge.overs.length) throw w.overError(charge.overs);
    try {
      await db().send(new TransactWriteCommand({ TransactItems: [...w.items, ...charge.items] }));
      return;
    } catch (e) {
      const codes = cancellationCodes(e);
      const conflict = (e as { name?: string }).name === 'TransactionConflictException' || (codes.includes('TransactionConflict') && !codes.includes('ConditionalCheckFailed'));
      if (attempt >= 60) throw e;
      if (conflict) {
        await new Promise((r) => setTimeout(r, Math.random() * Math.min(200, 5 * 2 ** Math.min(attempt, 6))));
        continue;
      }
      if (codes.slice(0, w.items.length).includes('ConditionalCheckFailed')) throw e;
      const why = await chargeFailure(w.table, w.project, e, w.items.length, charge.items.length);
      if (why === undefined) throw e;
      if (why === 'uncounted') {
        await w.countLegacy();
        continue;
      }
      const overs = await oversNow(w.table, w.project, w.deltas, w.builtin);
      if (overs.length) throw w.overError(overs);
    }
  }
}
