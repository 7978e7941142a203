/**
 * Phase 1 of a share migration up to the copy (share-migration-start): the approach, the
 * destination's capacity (undone by releaseDestinationCapacity), the driver-assisted start (undone
 * by undoDriverDestination) and its polls. The host-assisted copy is host-copy.ts.
 */
import { cancellationCodes } from '../core/db.js';
import { FerryError, reasonOf } from '../core/errors.js';
import { intentId } from '../core/intents.js';
import { logger } from '../core/logger.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import type { MigrationProgress } from '../drivers/share/driver.js';
import { backendShareName, sharePoolOf, type DriverMigrationProgress, type MigrationInstance, type Share } from '../shares/model.js';
import { allocatedOnSharePool, getShareBackend, getShareOrThrow, releaseSharePoolItem, writeShareWith } from '../shares/repo.js';
import { filterAndWeighShares, NoValidHost, reserveSharePoolItem } from '../shares/scheduler.js';
import { getShareTypeById } from '../shares/types.js';
import { syncSourceRules } from './access.js';
import { apply, applyWith, load, maxDriverPolls, migrationRequest, now, ShareMigrationFailed, sourceDriver, task, type MigrationStepInput } from './flow.js';
import { migrationTransition } from './transitions.js';

/**
 * migration_in_progress; picks the approach (reference §1.7 step 2-3): driver-assisted when the
 * source's driver says the destination is compatible and supports every requested flag;
 * otherwise host-assisted, which can honour none of the four flags.
 */
export async function begin(input: MigrationStepInput): Promise<{ approach: string }> {
  let { s, m } = await load(input);
  if (m.approach) return { approach: m.approach };
  s = await task(input, ['migration_starting'], 'migration_in_progress');
  m = s.migration!;
  const destBackend = await getShareBackend(m.destinationHost);
  const destination: MigrationInstance = m.destination ?? {
    // Named by the migration: the destination's backend share is made under this id, so a re-run names the same one.
    id: intentId(m.id, 'destination'),
    host: m.destinationHost,
    status: 'creating',
    exportLocations: [],
    capacity: null,
    ownsBackendShare: false,
  };
  if (!m.destination) s = await apply(input, { type: 'destination', at: now(), migrationId: m.id, destination });
  const flags = { writable: m.writable, preserve_metadata: m.preserveMetadata, nondisruptive: m.nondisruptive, preserve_snapshots: m.preserveSnapshots };
  const wanted = Object.entries(flags).filter(([, v]) => v).map(([k]) => k);
  let approach: 'driver' | 'host' = 'host';
  if (!m.forceHostAssisted) {
    const compat = await (await sourceDriver(s)).migrationCheckCompatibility(migrationRequest(s, destination, destBackend));
    const unsupported = wanted.filter((k) => !compat[k as keyof typeof compat]);
    if (compat.compatible && unsupported.length === 0) approach = 'driver';
    else if (wanted.length) {
      throw new ShareMigrationFailed(
        compat.compatible
          ? `the driver cannot honour ${unsupported.join(', ')} and host-assisted migration honours none of them.`
          : `the backends are not compatible for driver-assisted migration and host-assisted migration cannot honour ${wanted.join(', ')}.`,
      );
    }
  }
  await apply(input, { type: 'approach', at: now(), migrationId: m.id, approach });
  return { approach };
}

/** Reserves the share's size on the destination pool (the scheduler's host_passes_filters). */
export async function reserveDestination(input: MigrationStepInput): Promise<{ pool: string }> {
  for (let attempt = 0; attempt < 10; attempt++) {
    const { s, m } = await load(input);
    const d = m.destination!;
    if (d.capacity) return { pool: d.capacity.pool };
    const destBackend = await getShareBackend(d.host);
    const poolName = sharePoolOf(d.host);
    const caps = (await shareDriverFor(destBackend).capabilities()).find((c) => c.pool === poolName);
    if (!caps) throw new NoValidHost(`Pool ${poolName ?? '(none given)'} does not exist on ${destBackend.host}; give the destination as host@backend#pool.`);
    const type = await getShareTypeById(m.newShareTypeId ?? s.shareTypeId);
    const pool = { host: d.host, backend: destBackend, caps, allocatedGb: await allocatedOnSharePool(d.host) };
    const { chosen, rejected } = filterAndWeighShares([pool], { sizeGb: s.size, proto: s.shareProto, extraSpecs: type.extraSpecs, availabilityZone: null });
    if (!chosen.length) throw new NoValidHost(`${rejected.join('; ')}.`);
    const after = migrationTransition(s, { type: 'destination-update', at: now(), migrationId: m.id, changes: { capacity: { pool: d.host, gb: s.size } } });
    if (after instanceof FerryError) throw after;
    try {
      await writeShareWith(s, after, [reserveSharePoolItem(d.host, s.size, caps.totalCapacityGb)]);
      return { pool: d.host };
    } catch (e) {
      const codes = cancellationCodes(e);
      if (codes[1] === 'ConditionalCheckFailed') throw new NoValidHost(`${d.host} was filled by another request.`);
      if (codes[0] === 'ConditionalCheckFailed' || codes.includes('TransactionConflict')) continue;
      throw e;
    }
  }
  throw new ShareMigrationFailed(`share ${input.shareId} kept changing while its destination was reserved.`);
}

export async function releaseDestinationCapacity(s: Share): Promise<void> {
  await applyWith(s.id, (cur) => {
    const cap = cur.migration?.destination?.capacity;
    if (!cap) return undefined;
    return { event: { type: 'destination-update', at: now(), migrationId: cur.migration!.id, changes: { capacity: null } }, items: [releaseSharePoolItem(cap.pool, cap.gb)] };
  });
}

/** Driver-assisted start (reference §1.7 step 2): dest instance migrating_to, RO cast if needed, driver.migration_start. */
export async function driverStart(input: MigrationStepInput): Promise<{ taskState: string }> {
  let { s, m } = await load(input);
  // A resumed execution (the local stack re-runs RUNNING executions from the start) finds it done.
  if (s.taskState === 'migration_driver_in_progress' || s.taskState === 'migration_driver_phase1_done') return { taskState: s.taskState };
  const destBackend = await getShareBackend(m.destination!.host);
  const driver = await sourceDriver(s);
  // Recorded before the driver can create anything on the destination, so cleanup removes it.
  s = await apply(input, { type: 'destination-update', at: now(), migrationId: m.id, changes: { ownsBackendShare: true, status: 'migrating_to' } });
  m = s.migration!;
  const req = migrationRequest(s, m.destination!, destBackend);
  const compat = await driver.migrationCheckCompatibility(req);
  if (!compat.writable) {
    s = await apply(input, { type: 'read-only', at: now(), migrationId: m.id, cast: true });
    await syncSourceRules(s);
  }
  await task(input, ['migration_in_progress', 'migration_driver_starting'], 'migration_driver_starting');
  await driver.migrationStart(req);
  s = await task(input, ['migration_driver_starting'], 'migration_driver_in_progress');
  return { taskState: s.taskState! };
}

/** driver.migration_cancel plus the destination's backend share: the driver's half of a rollback. */
export async function undoDriverDestination(s: Share): Promise<void> {
  const m = s.migration!;
  const d = m.destination;
  if (!d?.ownsBackendShare) return;
  const destBackend = await getShareBackend(d.host);
  if (m.approach === 'driver') await (await sourceDriver(s)).migrationCancel(migrationRequest(s, d, destBackend));
  await shareDriverFor(destBackend).deleteShare(backendShareName(d.id));
  await apply({ shareId: s.id }, { type: 'destination-update', at: now(), migrationId: m.id, changes: { ownsBackendShare: false, exportLocations: [], status: 'creating' } });
}

/**
 * The driver could not start: undo what it may have made (reference §1.9 row 2) and fall back to
 * host-assisted when no flag forbids it; otherwise fail (the machine's rollback runs next).
 */
export async function driverStartFailed(input: MigrationStepInput): Promise<{ approach: string }> {
  let { s, m } = await load(input);
  logger.warn('driver-assisted migration could not start', { shareId: s.id, reason: reasonOf(input.error) });
  await undoDriverDestination(s);
  s = await getShareOrThrow(s.id);
  if (s.migration!.readOnlyCast) {
    s = await apply(input, { type: 'read-only', at: now(), migrationId: m.id, cast: false });
    await syncSourceRules(s);
  }
  m = s.migration!;
  if (m.writable || m.preserveMetadata || m.nondisruptive || m.preserveSnapshots) {
    throw new ShareMigrationFailed(`driver-assisted migration failed (${reasonOf(input.error)}) and host-assisted migration cannot honour the requested flags.`);
  }
  await apply(input, { type: 'approach', at: now(), migrationId: m.id, approach: 'host' });
  await task(input, ['migration_in_progress', 'migration_driver_starting', 'migration_driver_in_progress'], 'migration_in_progress');
  return { approach: 'host' };
}

/** One poll of the bounded Wait loop: migration_continue, or the cancel the API asked for. */
export async function driverContinue(input: MigrationStepInput): Promise<{ next: 'wait' | 'wait-backend' | 'done' | 'cancel' }> {
  const { s, m } = await load(input);
  if (m.cancelRequested) return { next: 'cancel' };
  if (s.taskState === 'migration_driver_phase1_done') return { next: 'done' };
  if (m.driverPolls >= maxDriverPolls()) throw new ShareMigrationFailed(`migration_continue did not finish within ${m.driverPolls} polls.`);
  const destBackend = await getShareBackend(m.destination!.host);
  const driver = await sourceDriver(s);
  const req = migrationRequest(s, m.destination!, destBackend);
  // The driver's progress goes on the record with the poll (no extra write), for ferry watch and the console.
  await apply(input, { type: 'driver-polled', at: now(), migrationId: m.id, ...(await driverProgress(s.id, () => driver.migrationGetProgress(req))) });
  const done = await driver.migrationContinue(req);
  // The next poll after the short Wait, or the long one when the backend copies by itself (EFS replication).
  if (!done) return { next: driver.features.migrationPoll === 'backend' ? 'wait-backend' : 'wait' };
  try {
    await task(input, ['migration_driver_in_progress'], 'migration_driver_phase1_done');
  } catch (e) {
    if ((await getShareOrThrow(s.id)).migration?.cancelRequested) return { next: 'cancel' };
    throw e;
  }
  return { next: 'done' };
}

/**
 * migration_get_progress as the poll records it. Only an observation: when the driver cannot say,
 * the poll goes on without it (logged; the record keeps the previous one) rather than failing the
 * migration over a progress figure.
 */
async function driverProgress(shareId: string, get: () => Promise<MigrationProgress>): Promise<{ progress?: DriverMigrationProgress }> {
  try {
    const p = await get();
    const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
    const progress: DriverMigrationProgress = { percent: Math.max(0, Math.min(100, n(p.total_progress) ?? 0)), at: now() };
    for (const [key, from] of [['bytesDone', 'bytes_done'], ['bytesTotal', 'bytes_total'], ['filesDone', 'files_done'], ['filesTotal', 'files_total']] as const) {
      const v = n(p[from]);
      if (v !== undefined) progress[key] = v;
    }
    return { progress };
  } catch (e) {
    logger.warn('migration_get_progress failed; the poll records no progress', { shareId, error: e as Error });
    return {};
  }
}
