/**
 * Phase 2 of a share migration (share-migration-complete): the driver's final sync or the host
 * path, the share's rules onto the destination, the flip, the retired source deleted with its
 * capacity, migration_success (with the new type's share count moved).
 */
import { reasonOf } from '../core/errors.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { rulesForDriver } from '../shares/access.js';
import { backendShareName } from '../shares/model.js';
import { getShare, getShareBackend, networkCountItem, releaseSharePoolItem, typeCountItem } from '../shares/repo.js';
import { getShareTypeById } from '../shares/types.js';
import { syncDestinationRules, syncSourceRules } from './access.js';
import { deleteCopyRecord, deregisterCopyTaskDefinition } from './host-copy.js';
import { apply, applyWith, load, migrationRequest, now, ShareMigrationFailed, sourceDriver, zoneOf, type MigrationStepInput } from './flow.js';
import type { MigrationEvent } from './transitions.js';

/** Driver-assisted phase 2: driver.migration_complete gives the destination's export locations. */
export async function driverComplete(input: MigrationStepInput): Promise<{ exportLocations: string[] }> {
  let { s, m } = await load(input);
  if (m.retired) return { exportLocations: s.exportLocations };
  const d = m.destination!;
  // Phase 2 is disruptive (nondisruptive is never reported): the source stops taking writes
  // before the driver's final sync, so nothing written during it is lost.
  if (!m.readOnlyCast) s = await apply(input, { type: 'read-only', at: now(), migrationId: m.id, cast: true });
  const driver = await sourceDriver(s);
  // A re-run after a crash that followed the driver's migration_complete: the driver removed the
  // source already (its migration_complete is idempotent and answers again); its rules have
  // nowhere to go.
  if (await driver.getShare(backendShareName(s.instanceId))) await syncSourceRules(s);
  const paths = await driver.migrationComplete(migrationRequest(s, d, await getShareBackend(d.host)));
  s = await apply(input, { type: 'destination-update', at: now(), migrationId: m.id, changes: { exportLocations: paths } });
  return { exportLocations: paths };
}

/** Phase 2 of a driver-assisted migration failed: upstream's outcome, both instances error, no rollback (§1.9). */
export async function phase2DriverFailed(input: MigrationStepInput): Promise<{ taskState: string | null }> {
  const after = await apply(input, { type: 'phase2-driver-failed', at: now(), migrationId: input.migrationId, reason: reasonOf(input.error) });
  return { taskState: after.taskState };
}

/** apply_new_access_rules: the share's rules, as they are (not read-only), onto the destination. */
export async function applyRules(input: MigrationStepInput): Promise<{ rules: number }> {
  const { s, m } = await load(input);
  if (m.retired) return { rules: 0 };
  const rules = rulesForDriver(s);
  await syncDestinationRules(s, rules);
  return { rules: rules.length };
}

/** The share takes the destination instance; the source is retired (inactive). */
export async function flip(input: MigrationStepInput): Promise<{ host: string }> {
  const { m } = await load(input);
  const zone = m.destination ? zoneOf(await getShareBackend(m.destination.host)) : undefined;
  const s = await apply(input, { type: 'flip', at: now(), migrationId: input.migrationId, ...(zone ? { availabilityZone: zone } : {}) });
  return { host: s.host! };
}

/**
 * Deletes the retired source's backend share (host-assisted; the driver did it for driver-assisted)
 * and gives back its capacity; a copy task definition registered for the migration is deregistered
 * here too (the migration needs no copy task past the flip).
 */
export async function deleteRetired(input: MigrationStepInput): Promise<{ deleted: string | null }> {
  const { s, m } = await load(input);
  await deregisterCopyTaskDefinition(s);
  const r = m.retired;
  if (!r) throw new ShareMigrationFailed(`share ${input.shareId} has no retired source to delete.`);
  if (r.ownsBackendShare) {
    await shareDriverFor(await getShareBackend(r.host)).deleteShare(backendShareName(r.id));
    await apply(input, { type: 'retired-update', at: now(), migrationId: m.id, changes: { ownsBackendShare: false, exportLocations: [] } });
  }
  await applyWith(input.shareId, (cur) => {
    const cap = cur.migration?.retired?.capacity;
    if (!cap) return undefined;
    return { event: { type: 'retired-update', at: now(), migrationId: m.id, changes: { capacity: null } }, items: [releaseSharePoolItem(cap.pool, cap.gb)] };
  });
  return { deleted: r.id };
}

/** migration_success, with the new share type's attributes (reference §1.7 "Success"). */
export async function finishSuccess(input: MigrationStepInput): Promise<{ taskState: string | null }> {
  const s = await getShare(input.shareId);
  if (!s?.migration || s.migration.id !== input.migrationId) return { taskState: s?.taskState ?? null };
  const m = s.migration;
  const type = m.newShareTypeId && m.newShareTypeId !== s.shareTypeId ? await getShareTypeById(m.newShareTypeId) : undefined;
  await deleteCopyRecord(m);
  const event: MigrationEvent = { type: 'finish', at: now(), migrationId: m.id, outcome: 'migration_success', ...(type ? { newShareType: { id: type.id, name: type.name } } : {}) };
  const movesNetwork = m.newShareNetworkId !== null && m.newShareNetworkId !== s.shareNetworkId;
  if (!type && !movesNetwork) return { taskState: (await apply(input, event)).taskState };
  // A retype (a move to a new network) moves the share between the types' (networks') share counts in the same transaction.
  const after = await applyWith(input.shareId, (cur) => {
    if (cur.migration?.id !== m.id) return undefined;
    const items = type ? [typeCountItem(cur.shareTypeId, -1), typeCountItem(type.id, 1)] : [];
    if (movesNetwork) {
      if (cur.shareNetworkId) items.push(networkCountItem(cur.shareNetworkId, -1));
      items.push(networkCountItem(m.newShareNetworkId!, 1));
    }
    return { event, items };
  });
  return { taskState: after.taskState };
}
