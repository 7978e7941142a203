/**
 * Cinder's quota resources (C/quota.py VolumeTypeQuotaEngine + GroupQuotaEngine), their defaults
 * (the quota_* options), what a volume takes, and the 413s of C/quota_utils.py
 * process_reserve_over_quota, over the engine in functions/quotas/engine.ts.
 */
import { OverLimit } from '../core/errors.js';
import { countLegacy, effectiveLimit, writeCharged, type Deltas, type Limits, type Over, type TransactItem } from '../quotas/engine.js';
import { listKind, versionedUpdate } from '../core/db.js';
import { tableName } from '../core/tables.js';
import { volumeGsi1, volumeKey, type Volume } from './model.js';
import { extendTakes } from './transitions.js';

/** The global resources in upstream's order, with the quota_* defaults. */
export const CINDER_GLOBAL_DEFAULTS: Readonly<Record<string, number>> = {
  volumes: 10,
  per_volume_gigabytes: -1,
  snapshots: 10,
  gigabytes: 1000,
  backups: 10,
  backup_gigabytes: 1000,
  groups: 10,
};

export const PER_TYPE_PARTS = ['volumes', 'gigabytes', 'snapshots'] as const;

/** The built-in default of a resource: a per-type one (VolumeTypeResource) is unlimited. */
export function cinderBuiltin(resource: string): number {
  return CINDER_GLOBAL_DEFAULTS[resource] ?? -1;
}

/** Every quota resource, the per-type ones of each type after the global ones. */
export function cinderResources(typeNames: string[]): string[] {
  return [...Object.keys(CINDER_GLOBAL_DEFAULTS), ...typeNames.flatMap((t) => PER_TYPE_PARTS.map((p) => `${p}_${t}`))];
}

/** What a volume takes, in the order upstream reserves it (volumes, gigabytes, then the type's). */
export function volumeTakes(v: Pick<Volume, 'size' | 'volumeTypeName'>): Deltas {
  return { volumes: 1, gigabytes: v.size, [`volumes_${v.volumeTypeName}`]: 1, [`gigabytes_${v.volumeTypeName}`]: v.size };
}

/** process_reserve_over_quota for resource 'volumes': the first over names the error. */
export function volumeOverError(overs: Over[], size: number): OverLimit {
  const over = overs[0]!;
  if (over.resource.includes('gigabytes')) {
    return new OverLimit(`Requested volume or snapshot exceeds allowed ${over.resource} quota. Requested ${size}G, quota is ${over.limit}G and ${over.inUse}G has been consumed.`);
  }
  return new OverLimit(`Maximum number of volumes allowed (${over.limit}) exceeded for quota '${over.resource}'.`);
}

/** QUOTAS.limit_check(per_volume_gigabytes=size): VolumeSizeExceedsLimit. */
export function perVolumeCheck(size: number) {
  return (limits: Limits) => {
    const { limit } = effectiveLimit(limits, 'per_volume_gigabytes', cinderBuiltin('per_volume_gigabytes'));
    if (limit >= 0 && size > limit) throw new OverLimit(`Requested volume size ${size}G is larger than maximum allowed limit ${limit}G.`);
  };
}

/** The conditional update that gives an uncounted volume its `quota` (quotas/engine.ts countLegacy). */
function markCounted(v: Volume, taken: Deltas): TransactItem {
  return { Update: versionedUpdate({ TableName: tableName('volume'), Key: volumeKey(v.id) }, v, { ...v, quota: taken }, { expression: 'attribute_not_exists(#quota) OR #quota = :nullq', names: { '#quota': 'quota' }, values: { ':nullq': null } }) };
}

/** A project's volumes as stored (repo.ts imports this module, so it lists them itself). */
async function projectVolumes(project: string): Promise<Volume[]> {
  const items = await listKind(tableName('volume'), { sk: 'VOL', pkPrefix: 'VOL#', gsi1pk: volumeGsi1({ projectId: project, createdAt: '', id: '' }).gsi1pk });
  return items.map((i) => Object.fromEntries(Object.entries(i).filter(([k]) => !['pk', 'sk', 'gsi1pk', 'gsi1sk'].includes(k))) as unknown as Volume);
}

/** A project's snapshots as stored (the snapshots capability sits above this one). */
async function projectSnapshots(project: string): Promise<CountedSnapshot[]> {
  const items = await listKind(tableName('volume'), { sk: 'SNAP', pkPrefix: 'SNAP#', gsi1pk: `PROJ#${project}#SNAP` });
  return items.map((i) => Object.fromEntries(Object.entries(i).filter(([k]) => !['pk', 'sk', 'gsi1pk', 'gsi1sk'].includes(k))) as unknown as CountedSnapshot);
}

/** What countLegacy needs of a snapshot record. */
interface CountedSnapshot {
  id: string;
  version: number;
  size: number;
  quota?: Deltas | null;
}

/** Counts a project's volumes and snapshots from before quotas (a snapshot from then: snapshots and gigabytes, no per-type share). */
export async function countLegacyVolumes(project: string): Promise<void> {
  const snapTakes = (s: CountedSnapshot): Deltas => ({ snapshots: 1, gigabytes: s.size });
  const markSnap = (s: CountedSnapshot, taken: Deltas): TransactItem => ({
    Update: versionedUpdate({ TableName: tableName('volume'), Key: { pk: `SNAP#${s.id}`, sk: 'SNAP' } }, s, { ...s, quota: taken }, { expression: 'attribute_not_exists(#quota) OR #quota = :nullq', names: { '#quota': 'quota' }, values: { ':nullq': null } }),
  });
  // The snapshots are counted first; the volumes' pass then marks the usage counted.
  await countLegacy('volume', project, () => projectSnapshots(project), snapTakes, markSnap, { markCounted: false });
  await countLegacy('volume', project, () => projectVolumes(project), volumeTakes, markCounted);
}

/** What a snapshot takes (C/volume/api.py _create_snapshot_in_db_validate: snapshots, gigabytes, then the volume type's). */
export function snapshotTakes(size: number, volumeTypeName: string): Deltas {
  return { snapshots: 1, gigabytes: size, [`snapshots_${volumeTypeName}`]: 1, [`gigabytes_${volumeTypeName}`]: size };
}

/** process_reserve_over_quota for resource 'snapshots'. */
export function snapshotOverError(overs: Over[], size: number): OverLimit {
  const over = overs[0]!;
  if (over.resource.includes('gigabytes')) {
    return new OverLimit(`Requested volume or snapshot exceeds allowed ${over.resource} quota. Requested ${size}G, quota is ${over.limit}G and ${over.inUse}G has been consumed.`);
  }
  return new OverLimit(`Maximum number of snapshots allowed (${over.limit}) exceeded`);
}

/** Writes a new snapshot's items (its volume's update first) with its quota charge. */
export async function writeSnapshotCharged(projectId: string, size: number, deltas: Deltas, items: TransactItem[]): Promise<void> {
  await writeCharged({
    table: 'volume',
    project: projectId,
    deltas,
    builtin: cinderBuiltin,
    items,
    countLegacy: () => countLegacyVolumes(projectId),
    overError: (overs) => snapshotOverError(overs, size),
  });
}

/**
 * Writes a new volume's items (`items`, the record first) together with its quota charge; sets
 * `v.quota` to what it takes so the record itself carries it (the caller builds items after).
 */
export async function writeVolumeCharged(v: Volume, items: (v: Volume) => TransactItem[]): Promise<void> {
  const deltas = volumeTakes(v);
  v.quota = deltas;
  await writeCharged({
    table: 'volume',
    project: v.projectId,
    deltas,
    builtin: cinderBuiltin,
    items: items(v),
    countLegacy: () => countLegacyVolumes(v.projectId),
    overError: (overs) => volumeOverError(overs, v.size),
    precheck: perVolumeCheck(v.size),
  });
}

/**
 * Writes an extend's items (the volume's update first, then the pool's reservation) with its quota
 * charge: over the per-volume limit or the project's gigabytes, upstream's 413 and nothing written.
 */
export async function writeExtendCharged(v: Volume, newSize: number, items: TransactItem[]): Promise<void> {
  const deltas = extendTakes(v, newSize);
  await writeCharged({
    table: 'volume',
    project: v.projectId,
    deltas,
    builtin: cinderBuiltin,
    items,
    countLegacy: () => countLegacyVolumes(v.projectId),
    overError: (overs) => volumeOverError(overs, newSize - v.size),
    precheck: perVolumeCheck(newSize),
  });
}
