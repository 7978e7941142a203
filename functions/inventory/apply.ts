/**
 * `ferry inventory apply`: validate, read what is there, plan (plan.ts), and unless it is a dry run
 * or something is refused, make the changes and record the document as the last applied
 * inventory — conditional on the record read before, so two applies racing each other cannot both
 * record (the second is told to run again; every write it made is one the next run finds done).
 *
 * Idempotent: a second apply of the same document plans no change and writes nothing.
 */
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure } from '../core/db.js';
import { BadRequest, Conflict } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { BackendConfig } from '../drivers/volume/driver.js';
import type { ShareBackendConfig } from '../drivers/share/driver.js';
import { getBackend } from '../volumes/backends.js';
import { getShareBackend } from '../shares/repo.js';
import * as compute from './compute.js';
import { KINDS, planInventory, type Change, type Kind, type LiveView, type Plan, type View } from './plan.js';
import { canonical, flavorFields, hostConfig, hasShareRoot, shareBackendConfig, typeFields, volumeBackendConfig } from './records.js';
import { parseInventory, resolveRoots, type Inventory, type InventoryTarget } from './schema.js';
import * as storage from './storage.js';
import { applyInWaves } from './waves.js';

const RECORD_KEY = { pk: 'INVENTORY', sk: 'APPLIED' };

export interface AppliedRecord {
  version: number;
  appliedAt: string;
  document: Inventory;
}

export async function lastApplied(): Promise<AppliedRecord | undefined> {
  const item = (await db().send(new GetCommand({ TableName: tableName('volume'), Key: RECORD_KEY, ConsistentRead: true }))).Item;
  return item ? { version: item.version as number, appliedAt: item.appliedAt as string, document: item.document as Inventory } : undefined;
}

/** Each kind's entries as keys with their canonical fields (records.ts), as plan.ts compares them. */
export function desiredViews(inv: Inventory): Map<Kind, View> {
  const hosts = inv.cells.flatMap((c) => c.hosts.map((h) => [h.host, canonical(hostConfig(c, h))] as const));
  return new Map<Kind, View>([
    ['project', new Map(inv.projects.map((p) => [p, canonical({})]))],
    ['volume backend', new Map(inv.volumeBackends.map((b) => [b.host, canonical(volumeBackendConfig(b))]))],
    ['volume type', new Map(inv.volumeTypes.map((t) => [t.name, canonical(typeFields(t))]))],
    ['share backend', new Map(inv.shareBackends.map((b) => [b.host, canonical(shareBackendConfig(b))]))],
    ['share type', new Map(inv.shareTypes.map((t) => [t.name, canonical(typeFields(t))]))],
    ['cell', new Map(inv.cells.map((c) => [c.name, canonical({ table: c.table })]))],
    ['compute host', new Map(hosts)],
    ['flavor', new Map(inv.flavors.map((f) => [f.id, canonical(flavorFields(f))]))],
    ['network', new Map(inv.networks.map((n) => [n.name, canonical({ cidr: n.cidr })]))],
    ['image', new Map(inv.images.map((i) => [i.name, canonical({ sizeBytes: i.sizeBytes })]))],
  ]);
}

/**
 * What is there, kind by kind. `inUse` is read only where `usesOf` says (plan.ts consults it for a
 * removal alone: an apply passes `removable`, so a restart with nothing to remove reads no claim,
 * allocation, share list or host capacity, only the records its check compares).
 */
async function liveViews(want: Map<Kind, View>, before: Map<Kind, Set<string>>, usesOf?: (kind: Kind) => ReadonlySet<string>): Promise<Map<Kind, LiveView>> {
  const named = (kind: Kind) => [...(want.get(kind)?.keys() ?? []), ...(before.get(kind) ?? [])];
  // Reads only, independent of each other: all at once (an apply at every start waits for them).
  const reads: [Kind, Promise<LiveView>][] = [
    ['project', compute.liveProjects(named('project'))],
    ['volume backend', storage.liveVolumeBackends(usesOf?.('volume backend'))],
    ['volume type', storage.liveVolumeTypes()],
    ['share backend', storage.liveShareBackends(usesOf?.('share backend'))],
    ['share type', storage.liveShareTypes()],
    ['cell', compute.liveCells()],
    ['compute host', compute.liveHosts(usesOf?.('compute host'))],
    ['flavor', compute.liveFlavors()],
    ['network', compute.liveNetworks()],
    ['image', compute.liveImages(named('image'))],
  ];
  const views = await Promise.all(reads.map(([, view]) => view));
  return new Map<Kind, LiveView>(reads.map(([kind], i) => [kind, views[i]!]));
}

/** The keys of `kind` an apply could remove: named by the last applied inventory, not by this one. */
function removable(want: Map<Kind, View>, before: Map<Kind, Set<string>>, kind: Kind): ReadonlySet<string> {
  return new Set([...(before.get(kind) ?? [])].filter((key) => !want.get(kind)?.has(key)));
}

/**
 * The last applied record and what is there, read side by side (issue 16: a restart waited for the
 * record, then for the reads): the reads start as if the last applied inventory named nothing this
 * one does not, which is so for every apply of an unchanged file (each start's). Then they are
 * exactly the reads liveViews makes for that record: the same names, no removal to check a use
 * for. When the record names more (an entry since dropped from the file), the reads are made again
 * for it, with its names and removals; the first ones are dropped (an error they met is met again).
 */
async function readLive(want: Map<Kind, View>): Promise<{ record: AppliedRecord | undefined; before: Map<Kind, Set<string>>; live: Map<Kind, LiveView> }> {
  const nothingRemovable = new Set<string>();
  const [recordRead, assumedRead] = await Promise.allSettled([lastApplied(), liveViews(want, new Map(), () => nothingRemovable)]);
  if (recordRead.status === 'rejected') throw recordRead.reason;
  const record = recordRead.value;
  const before = managedKeys(record?.document);
  const beyondThisDocument = KINDS.some((kind) => removable(want, before, kind).size > 0);
  if (beyondThisDocument) return { record, before, live: await liveViews(want, before, (kind) => removable(want, before, kind)) };
  if (assumedRead.status === 'rejected') throw assumedRead.reason;
  return { record, before, live: assumedRead.value };
}

/** The keys of each kind a document names (what an apply of it manages). */
export function managedKeys(inv: Inventory | undefined): Map<Kind, Set<string>> {
  const views = inv ? desiredViews(inv) : new Map<Kind, View>();
  return new Map(KINDS.map((k) => [k, new Set(views.get(k)?.keys() ?? [])]));
}

export interface ApplyResult {
  plan: Plan;
  applied: boolean;
  /** The changes made, in the order they were made (all of the plan's when applied; waves.ts). */
  done: Change[];
}

export interface ApplyOptions {
  target: InventoryTarget;
  /** Makes relative roots absolute (the local stack's data directory). */
  dataDir?: string;
  dryRun?: boolean;
  /**
   * Whether this process can make share backends' roots (default true): the local stack, and on
   * AWS the deploy function, which mounts the share storage. `ferry inventory apply` run against a
   * deployed stack cannot (the roots are on EFS, not on the operator's machine): a change to a
   * share backend of a local kind is refused there, before anything is written. An aws-efs backend
   * has no root (a file system is made per share), so it applies from anywhere.
   */
  makesShareRoots?: boolean;
}

export async function applyInventory(document: unknown, options: ApplyOptions): Promise<ApplyResult> {
  let inv = parseInventory(document, options.target);
  if (options.dataDir) inv = resolveRoots(inv, options.dataDir);
  const want = desiredViews(inv);
  const { record, before, live } = await readLive(want);
  const plan = planInventory(want, live, before);
  if (options.dryRun || plan.refusals.length > 0) return { plan, applied: false, done: [] };
  // Only the local kinds have a root to make; an aws-efs backend's record is all there is to write.
  const rooted = new Set(inv.shareBackends.filter(hasShareRoot).map((b) => b.host));
  const shareChanges = plan.changes.filter((c) => c.kind === 'share backend' && c.action !== 'remove' && rooted.has(c.key)).map((c) => c.key);
  if (options.makesShareRoots === false && shareChanges.length > 0) {
    throw new BadRequest(
      `share backend(s) ${shareChanges.join(', ')}: their roots are on the stack's share storage, which only the deployed functions mount; ` +
        'apply this inventory with `cdk deploy -c inventory=FILE` (nothing was written)',
    );
  }
  // Independent changes side by side (waves.ts); a failure reports what was made and records nothing.
  const done = await applyInWaves(plan.changes, (change) => execute(change, inv));
  if (plan.changes.length > 0 || !record || canonical(record.document) !== canonical(inv)) await recordApplied(inv, record?.version);
  return { plan, applied: true, done };
}

async function recordApplied(document: Inventory, previousVersion: number | undefined): Promise<void> {
  const version = (previousVersion ?? 0) + 1;
  try {
    await db().send(
      new PutCommand({
        TableName: tableName('volume'),
        Item: { ...RECORD_KEY, version, appliedAt: new Date().toISOString(), document },
        ConditionExpression: previousVersion === undefined ? 'attribute_not_exists(pk)' : 'version = :v',
        ...(previousVersion === undefined ? {} : { ExpressionAttributeValues: { ':v': previousVersion } }),
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw new Conflict('another inventory apply recorded meanwhile: run this one again (it will find its own changes made)');
    throw e;
  }
}

async function execute(c: Change, inv: Inventory): Promise<void> {
  const entry = <T extends { [k: string]: unknown }>(list: T[], field: keyof T) => list.find((x) => x[field] === c.key)!;
  const cellOfHost = (doc: Inventory) => doc.cells.find((cell) => cell.hosts.some((h) => h.host === c.key))!;
  switch (`${c.action} ${c.kind}`) {
    case 'add project':
    case 'update project':
      return compute.addProject(c.key);
    case 'add volume backend':
      return storage.addVolumeBackend(entry(inv.volumeBackends, 'host'));
    case 'update volume backend':
      return storage.updateVolumeBackend(entry(inv.volumeBackends, 'host'));
    case 'remove volume backend':
      return storage.removeVolumeBackend((await getBackend(c.key)) as BackendConfig);
    case 'add volume type':
      return storage.addVolumeType(entry(inv.volumeTypes, 'name'));
    case 'update volume type':
      return storage.updateVolumeTypeFields(entry(inv.volumeTypes, 'name'));
    case 'remove volume type':
      return storage.removeVolumeType(c.key);
    case 'add share backend':
      return storage.addShareBackend(entry(inv.shareBackends, 'host'));
    case 'update share backend':
      return storage.updateShareBackend(entry(inv.shareBackends, 'host'));
    case 'remove share backend':
      return storage.removeShareBackend((await getShareBackend(c.key)) as ShareBackendConfig);
    case 'add share type':
      return storage.addShareType(entry(inv.shareTypes, 'name'));
    case 'update share type':
      return storage.updateShareTypeFields(entry(inv.shareTypes, 'name'));
    case 'remove share type':
      return storage.removeShareType(c.key);
    case 'add cell':
      return compute.addCell(entry(inv.cells, 'name'));
    case 'add compute host': {
      const cell = cellOfHost(inv);
      return compute.addHost(cell, cell.hosts.find((h) => h.host === c.key)!);
    }
    case 'remove compute host':
      return compute.removeHost(c.key);
    case 'add flavor':
      return compute.addFlavor(entry(inv.flavors, 'id'));
    case 'remove flavor':
      return compute.removeFlavor(c.key);
    case 'add network':
      return compute.addNetwork(entry(inv.networks, 'name'));
    case 'add image':
      return compute.addImage(entry(inv.images, 'name'));
    case 'remove image':
      return compute.removeImage(c.key);
    default:
      throw new Error(`inventory: no writer for ${c.action} ${c.kind} (plan.ts RULES allow it; add one here)`);
  }
}

/** `ferry inventory show`: everything there now, kind by kind, marked when an inventory manages it and when it is in use. */
export async function showInventory(): Promise<string[]> {
  const record = await lastApplied();
  const managed = managedKeys(record?.document);
  const live = await liveViews(new Map(), managed);
  const lines = [record ? `last applied: version ${record.version} at ${record.appliedAt}` : 'no inventory applied yet'];
  for (const kind of KINDS) {
    const view = live.get(kind)!;
    lines.push(`${kind}s (${view.size}):`);
    for (const [key, { inUse }] of [...view].sort(([a], [b]) => a.localeCompare(b))) {
      const marks = [managed.get(kind)!.has(key) ? 'inventory' : 'api', ...(inUse ? [`in use: ${inUse}`] : [])];
      lines.push(`  ${key}  [${marks.join('; ')}]`);
    }
  }
  return lines;
}
