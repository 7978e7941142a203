/**
 * The audit of instances with copies in several cells (issue 12, cross-cell resize): during a
 * move the same uuid has a shown copy and a hidden one, one per cell table, and the instance
 * mapping points at the shown one. functions/audit/servers.ts reads every cell and hands the
 * copies here; the legitimate two-copy states (VERIFY_RESIZE, a move or revert in flight) give no
 * finding.
 *
 * Invariants (each finding names the one it breaks):
 * - a hidden copy exists only while a move of that uuid is in flight: an operation on some copy
 *   of it, or a migration of it not yet final in some cell (`hidden-copy-without-move`);
 * - the instance mapping points at a cell holding a copy of the instance
 *   (`mapping-cell-without-instance`; an instance in no cell at all stays `mapping-mismatch`);
 * - at most one copy of a uuid is shown (`two-visible-copies`);
 * - BDMs and actions live in a partition whose instance item exists: a hard delete removes the
 *   instance item last, so leftovers are a delete that stopped half-way (`bdms-of-deleted-copy`).
 */
import type { Find } from './findings.js';
import type { Instance, InstanceMapping, Migration } from '../servers/model.js';

/** One copy of an instance: the cell table holding it and the instance item. */
export interface InstanceCopy {
  cellUuid: string;
  instance: Instance;
}

/** What the cell scan saw of one cell's instance partitions. */
export interface CellPartitions {
  cellUuid: string;
  /** Uuids whose partition has an INSTANCE item in this cell. */
  instances: Set<string>;
  /** Uuid -> sort keys of the BDM# and ACTION# items in its partition in this cell. */
  children: Map<string, string[]>;
}

export function auditCrossCell(input: {
  copies: InstanceCopy[];
  partitions: CellPartitions[];
  mappings: InstanceMapping[];
  /** Every migration item of every cell, with the cell holding it. */
  migrations: { cellUuid: string; migration: Migration }[];
  finalMigration: ReadonlySet<string>;
  find: Find;
}): void {
  const { copies, partitions, mappings, migrations, finalMigration, find } = input;
  const copiesOf = new Map<string, InstanceCopy[]>();
  for (const c of copies) copiesOf.set(c.instance.uuid, [...(copiesOf.get(c.instance.uuid) ?? []), c]);
  const moving = new Set<string>();
  for (const c of copies) if (c.instance.operation) moving.add(c.instance.uuid);
  for (const { migration: m } of migrations) if (!finalMigration.has(m.status)) moving.add(m.instanceUuid);

  for (const [uuid, all] of copiesOf) {
    const shown = all.filter((c) => !c.instance.hidden);
    if (shown.length > 1) find('two-visible-copies', `server ${uuid}`, `shown in cells ${shown.map((c) => c.cellUuid).join(', ')}`);
    for (const c of all) {
      if (c.instance.hidden && !moving.has(uuid)) {
        find('hidden-copy-without-move', `server ${uuid} in cell ${c.cellUuid}`, 'hidden, but no copy has an operation and no migration of it is in progress');
      }
    }
  }
  for (const m of mappings) {
    const all = copiesOf.get(m.instanceUuid);
    if (!all) continue; // no copy anywhere: servers.ts reports mapping-mismatch
    if (!all.some((c) => c.cellUuid === m.cellUuid)) {
      find('mapping-cell-without-instance', `instance mapping ${m.instanceUuid}`, `points at cell ${m.cellUuid ?? 'none'}, which has no copy of it (copies in ${all.map((c) => c.cellUuid).join(', ')})`);
    }
  }
  for (const p of partitions) {
    for (const [uuid, keys] of p.children) {
      if (p.instances.has(uuid)) continue;
      find('bdms-of-deleted-copy', `partition INSTANCE#${uuid} in cell ${p.cellUuid}`, `${keys.length} item(s) (${keys.slice(0, 3).join(', ')}${keys.length > 3 ? ', …' : ''}) without the instance item`);
    }
  }
}
