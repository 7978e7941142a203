/**
 * The steps of server-live-migrate (reference §2.1 row Live migration, traces vol_test_03/04/05),
 * each step's undo right after it; the API half is api.ts.
 *
 *   schedule (conductor): source allocation instance -> migration, destination claimed for the
 *     instance (same cell, never the source);
 *   pre (destination pre_live_migration): per volume BDM attachment_create with the destination's
 *     connector (old and new ids recorded with the BDM switch), attachment_get per BDM (refresh),
 *     can-connect check of each on the destination, driver.preLiveMigration, inactive port bindings, attachment_complete per BDM;
 *   run (source live_migration): driver.liveMigration with progress on the Migration, then the
 *     switch: instance.host/node = destination, destination bindings active;
 *   post: driver.postLiveMigration on the source, attachment_delete(old) per volume (logged, never
 *     raised), driver.postLiveMigrationAtDestination, source bindings deleted, the migration's
 *     source allocation released, Migration completed.
 *
 * The rollback step asks the hosts where the guest runs: still on the source, everything the
 * operation made is undone (Nova's _rollback_live_migration: undoPre, then undoSchedule); already on
 * the destination (a failure after the switch), the migration is finished forward instead of
 * leaving the instance ERROR. Only the destination driver's NotFound means "not switched over":
 * any other failure to ask fails the rollback step, which is retried, never a blind teardown.
 */
import { allocationsOf, moveAllocationOn, releaseAll, releaseOn } from '../../../compute/placement.js';
import { ConfigurationError, DriverError, InvariantViolation, NotFound } from '../../../core/errors.js';
import { intentId } from '../../../core/intents.js';
import { logger } from '../../../core/logger.js';
import type { MigrationProgress } from '../../../drivers/compute/driver.js';
import { attachmentComplete, attachmentCreate, attachmentDelete, attachmentGet, hostConnector } from '../../cinder.js';
import { computeNodes, driverOfHost, endOperation, guestOn, faultOf, loadStep, nodeOfHost, reasonOf, recordHolds, updateOp, withEvent, type ServerStepInput, type StepState } from '../../engine.js';
import { getMigration, updateMigration } from '../../migrations.js';
import type { Migration, MigrationStatus } from '../../model.js';
import { activatePortBinding, bindPortToHost, deletePortBinding, listPortsOf } from '../../network.js';
import { scheduleAndClaim } from '../../scheduler.js';
import { blockDeviceSpecs, isVolumeBacked, volumeBdms } from '../block-devices.js';
import { latestWins } from './progress.js';

const now = () => new Date().toISOString();

interface LiveState extends StepState {
  migration: Migration;
  source: string;
}

async function loadLive(input: ServerStepInput): Promise<LiveState> {
  const s = await loadStep(input);
  const migration = await getMigration(s.cell, s.op.migrationUuid!);
  // The API put the migration in the same write as the operation.
  if (!migration) throw new InvariantViolation(`live migration: migration ${s.op.migrationUuid} of ${s.instance.uuid} is missing`);
  return { ...s, migration, source: migration.sourceCompute! };
}

/** Conductor: source allocation to the migration, a destination claimed for the instance, the checks there. */
async function scheduleStep(input: ServerStepInput): Promise<unknown> {
  const s = await loadLive(input);
  const migrationUuid = s.migration.uuid;
  const dest = await withEvent(s, 'conductor_live_migrate_instance', null, async () => {
    const sourceNode = (await nodeOfHost(s.source)).node;
    // Nova's replace_allocation_with_migration: the source is held by the migration from here on.
    await moveAllocationOn(sourceNode.uuid, s.instance.uuid, migrationUuid);
    // A retried step keeps the destination it already claimed.
    const held = (await allocationsOf(s.instance.uuid)).find((a) => a.nodeUuid !== sourceNode.uuid);
    let destHost: string;
    let destNode: string;
    if (held) {
      const node = (await computeNodes()).find((n) => n.node.uuid === held.nodeUuid)!.node;
      destHost = node.host;
      destNode = node.hypervisorHostname;
    } else {
      const chosen = await scheduleAndClaim({
        flavor: s.instance.flavor,
        consumer: s.instance.uuid,
        volumeBacked: isVolumeBacked(s.instance),
        ignoreHosts: [s.source],
        host: (s.op.params.host as string | null) ?? undefined,
        cellUuid: s.cell.uuid,
        availabilityZone: s.instance.availabilityZone,
      });
      destHost = chosen.node.host;
      destNode = chosen.node.hypervisorHostname;
    }
    await updateMigration(s.cell, migrationUuid, { destCompute: destHost, destNode, destHost });
    return destHost;
  });
  return { dest };
}

/** Undoes scheduleStep: the destination's claim dropped, the source's allocation back to the instance. */
async function undoSchedule(s: LiveState): Promise<void> {
  const sourceNode = (await nodeOfHost(s.source)).node;
  for (const a of await allocationsOf(s.instance.uuid)) if (a.nodeUuid !== sourceNode.uuid) await releaseOn(a.nodeUuid, s.instance.uuid);
  await moveAllocationOn(sourceNode.uuid, s.migration.uuid, s.instance.uuid);
}

/** Destination pre_live_migration: new attachments for the destination, the driver's preparation, inactive bindings. */
async function preStep(input: ServerStepInput): Promise<unknown> {
  let s: StepState = await loadLive(input);
  const migration = (s as LiveState).migration;
  const source = (s as LiveState).source;
  const dest = migration.destCompute!;
  if (migration.status === 'accepted') await updateMigration(s.cell, migration.uuid, { status: 'preparing' });
  await withEvent(s, 'compute_pre_live_migration', dest, async () => {
    // What the source uses (what a rollback restores) and the ids of the destination's attachments
    // (derived from the request), recorded in one write before any is made: a re-run after a crash
    // makes each under the same id and finds it instead of making a second one.
    if (!s.op.holds.oldAttachments || volumeBdms(s.bdms).some((b) => !s.op.holds.newAttachments?.[b.uuid])) {
      const first = !s.op.holds.oldAttachments;
      s = await recordHolds(s, (h) => ({
        ...h,
        ...(first
          ? {
              oldAttachments: Object.fromEntries(volumeBdms(s.bdms).map((b) => [b.uuid, b.attachmentId ?? ''])),
              oldConnectionInfo: Object.fromEntries(volumeBdms(s.bdms).map((b) => [b.uuid, b.connectionInfo])),
            }
          : {}),
        newAttachments: { ...Object.fromEntries(volumeBdms(s.bdms).map((b) => [b.uuid, intentId(s.op.requestId, 'live-migrate-pre', b.uuid)])), ...h.newAttachments },
      }));
    }
    for (const bdm of volumeBdms(s.bdms)) {
      const id = s.op.holds.newAttachments![bdm.uuid]!;
      if (bdm.attachmentId === id) continue;
      await attachmentCreate(id, bdm.volumeId!, s.instance.uuid, hostConnector(dest, bdm.deviceName), bdm.deviceName);
      s = await updateOp(s, ({ bdms }) => ({ putBdms: bdms.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, attachmentId: id, updatedAt: now() })) }));
    }
    // refresh_connection_info: the destination's connection_info on each BDM.
    const refreshed: Record<string, Record<string, unknown> | null> = {};
    for (const bdm of volumeBdms(s.bdms)) {
      const att = await attachmentGet(bdm.attachmentId!);
      if (!att) throw new NotFound(`attachment ${bdm.attachmentId} of volume ${bdm.volumeId} is gone`);
      refreshed[bdm.uuid] = att.connectionInfo;
    }
    // Every volume reachable from the destination through its own export (Cinder exports per host).
    const driver = await driverOfHost(dest);
    for (const [bdmUuid, info] of Object.entries(refreshed)) {
      const can = info ? await driver.canConnectVolume(info) : { canConnect: false, reason: 'no connection_info' };
      if (!can.canConnect) throw new DriverError(`volume of BDM ${bdmUuid} cannot be connected on ${dest}: ${can.reason ?? 'unreachable'}`);
    }
    // One write: the refreshed connection_info, and the holds of the guest prepared on the destination
    // and of its port bindings, both recorded before either is made (undoPre undoes each, and
    // deleting a binding never made is a no-op).
    s = await updateOp(s, ({ instance, bdms, op }) => ({
      instance: { ...instance, operation: { ...op, holds: { ...op.holds, destGuest: dest, boundHost: dest } } },
      putBdms: bdms.filter((b) => b.uuid in refreshed).map((b) => ({ ...b, connectionInfo: refreshed[b.uuid]!, updatedAt: now() })),
    }));
    // Idempotent for the same source: a retry finds its own preparation.
    await driver.preLiveMigration(
      { uuid: s.instance.uuid, flavor: s.instance.flavor, ...(s.instance.imageRef ? { imageRef: s.instance.imageRef } : {}), blockDevices: blockDeviceSpecs(s.bdms) },
      source,
    );
    for (const port of await listPortsOf(s.instance.uuid)) await bindPortToHost(port.id, dest, { active: false });
    for (const bdm of volumeBdms(s.bdms)) await attachmentComplete(bdm.attachmentId!);
  });
  return {};
}

/**
 * Undoes preStep before the switch-over: the destination's preparation rolled back, each BDM's
 * destination attachment deleted and the source's restored on it (_rollback_volume_bdms), the
 * destination's port bindings deleted.
 */
async function undoPre(state: LiveState): Promise<LiveState> {
  let s = state;
  const dest = s.migration.destCompute;
  if (dest && s.op.holds.destGuest) {
    await withEvent(s, 'compute_rollback_live_migration_at_destination', dest, async () => (await driverOfHost(dest)).rollbackLiveMigrationAtDestination(s.instance.uuid));
  }
  const old = s.op.holds.oldAttachments ?? {};
  const oldInfo = s.op.holds.oldConnectionInfo ?? {};
  for (const bdm of volumeBdms(s.bdms)) {
    const made = s.op.holds.newAttachments?.[bdm.uuid];
    // Recorded but the BDM never switched to it: made or not (a crash between), it goes (404 is done).
    if (made && made !== bdm.attachmentId && made !== old[bdm.uuid]) await attachmentDelete(made);
    if (!(bdm.uuid in old) || bdm.attachmentId === (old[bdm.uuid] || null)) continue;
    if (bdm.attachmentId) await attachmentDelete(bdm.attachmentId);
    s = { ...s, ...(await updateOp(s, ({ bdms }) => ({ putBdms: bdms.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, attachmentId: old[bdm.uuid] || null, connectionInfo: oldInfo[bdm.uuid] ?? null, updatedAt: now() })) }))) };
  }
  if (dest && s.op.holds.boundHost) for (const port of await listPortsOf(s.instance.uuid)) await deletePortBinding(port.id, dest);
  return s;
}

/**
 * Writes progress to the migration at most every 10 % (each write is a conditional put), the newest
 * report winning while a write is in flight or the last one is recent (progress.ts).
 */
function progressWriter(s: LiveState): { onProgress: (p: MigrationProgress) => void; flush: () => Promise<void> } {
  let lastOffered = -10;
  const memoryTotal = s.instance.flavor.memoryMb * 1024 * 1024;
  const writer = latestWins<MigrationProgress>((p) => {
    // The local driver copies the disk only; memory is reported in step with it (a guest's RAM would move alongside).
    const memoryProcessed = Math.floor((memoryTotal * p.percent) / 100);
    return updateMigration(s.cell, s.migration.uuid, {
      diskTotal: p.totalBytes,
      diskProcessed: p.processedBytes,
      diskRemaining: p.totalBytes - p.processedBytes,
      memoryTotal,
      memoryProcessed,
      memoryRemaining: memoryTotal - memoryProcessed,
    }).then(
      () => undefined,
      (e: unknown) => logger.warn('live migration progress not recorded', { error: e as Error }),
    );
  });
  return {
    onProgress: (p) => {
      if (p.percent < lastOffered + 10 && p.phase !== 'complete') return;
      lastOffered = p.percent;
      writer.offer(p);
    },
    flush: () => writer.flush(),
  };
}

/** Bigger than the driver's default: fewer reads of a large sparse root disk, progress still fine-grained. */
const COPY_CHUNK_BYTES = 8 * 1024 * 1024;

/**
 * FERRY_LIVE_MIGRATION_BANDWIDTH: MiB/s a live migration's copy may use (Nova's [libvirt]
 * live_migration_bandwidth; unset or 0 = no cap). Read per step, like the machines' other settings.
 */
function liveMigrationBandwidth(): { bytesPerSecond?: number } {
  const raw = process.env.FERRY_LIVE_MIGRATION_BANDWIDTH;
  if (raw === undefined || raw === '' || raw === '0') return {};
  const mib = Number(raw);
  if (!Number.isFinite(mib) || mib < 0) throw new ConfigurationError(`FERRY_LIVE_MIGRATION_BANDWIDTH must be MiB per second, not "${raw}"`);
  return { bytesPerSecond: mib * 1024 * 1024 };
}

/** Source live_migration: the copy and switch-over, then the instance recorded on the destination. */
async function runStep(input: ServerStepInput): Promise<unknown> {
  const s = await loadLive(input);
  const dest = s.migration.destCompute!;
  if (s.migration.status !== 'running') await updateMigration(s.cell, s.migration.uuid, { status: 'running' });
  const progress = progressWriter(s);
  await withEvent(s, 'compute_live_migration', s.source, async () => {
    try {
      await (await driverOfHost(s.source)).liveMigration(s.instance.uuid, dest, { onProgress: progress.onProgress, chunkBytes: COPY_CHUNK_BYTES, ...liveMigrationBandwidth() });
    } finally {
      await progress.flush();
    }
  });
  await switchToDest(s, dest);
  return {};
}

/** The guest runs on the destination: record it there and make its bindings the active ones. */
async function switchToDest(s: LiveState, dest: string): Promise<StepState> {
  const { node } = await nodeOfHost(dest);
  const out = await updateOp(s, ({ instance }) => ({ instance: { ...instance, host: dest, node: node.hypervisorHostname } }));
  for (const port of await listPortsOf(s.instance.uuid)) {
    await bindPortToHost(port.id, dest, { active: false });
    await activatePortBinding(port.id, dest);
  }
  return out;
}

/**
 * _post_live_migration and post_live_migration_at_destination. `tolerant` (finishing forward from
 * the rollback step): every cleanup is attempted and what could not be cleaned is returned.
 */
async function finishOnDest(s: LiveState, tolerant: boolean): Promise<string[]> {
  const dest = s.migration.destCompute!;
  const leftovers: string[] = [];
  const attempt = async (what: string, body: () => Promise<unknown>) => {
    try {
      await body();
    } catch (e) {
      if (!tolerant) throw e;
      logger.error(`live migration: ${what} failed; finishing on the destination anyway`, { serverId: s.instance.uuid, error: e as Error });
      leftovers.push(`${what}: ${(e as Error).message}`);
    }
  };
  await attempt(`post_live_migration on ${s.source}`, async () => (await driverOfHost(s.source)).postLiveMigration(s.instance.uuid));
  // _post_live_migration_remove_source_vol_connections: errors logged, never raised.
  // In BDM order (boot volume first): the holds are a map, stored without order.
  const oldAttachments = s.op.holds.oldAttachments ?? {};
  for (const bdm of volumeBdms(s.bdms)) {
    const old = oldAttachments[bdm.uuid];
    if (!old || old === bdm.attachmentId) continue;
    await attachmentDelete(old).catch((e: unknown) => logger.error('live migration: source attachment not deleted', { attachmentId: old, error: e as Error }));
  }
  await attempt(`post_live_migration_at_destination on ${dest}`, () =>
    withEvent(s, 'compute_post_live_migration_at_destination', dest, async () => {
      await (await driverOfHost(dest)).postLiveMigrationAtDestination(s.instance.uuid);
      for (const port of await listPortsOf(s.instance.uuid)) await deletePortBinding(port.id, s.source);
    }),
  );
  await attempt('release of the source allocation', () => releaseAll(s.migration.uuid));
  return leftovers;
}

async function postStep(input: ServerStepInput): Promise<unknown> {
  const s = await loadLive(input);
  await finishOnDest(s, false);
  await updateMigration(s.cell, s.migration.uuid, { status: 'completed' });
  const guest = await (await driverOfHost(s.migration.destCompute!)).getGuest(s.instance.uuid);
  await endOperation(s, ({ instance }) => ({ instance: { ...instance, taskState: null, powerState: guest?.powerState ?? instance.powerState, progress: 0 } }));
  return {};
}

/** Where the guest runs now: on the destination only once the driver switched over. */
async function switchedOver(s: LiveState): Promise<boolean> {
  const dest = s.migration.destCompute;
  if (!dest) return false;
  return (await guestOn(dest, s.instance.uuid))?.defined === true;
}

/** Any failure: undo everything before the switch (Nova's _rollback_live_migration), or finish forward after it. */
async function rollbackStep(input: ServerStepInput): Promise<unknown> {
  let s = await loadLive(input);
  const reason = reasonOf(input.error);
  if (await switchedOver(s)) {
    const dest = s.migration.destCompute!;
    if (s.instance.host !== dest) s = { ...s, ...(await switchToDest(s, dest)) };
    const leftovers = await finishOnDest(s, true);
    await updateMigration(s.cell, s.migration.uuid, { status: leftovers.length ? 'error' : 'completed' });
    const guest = await guestOn(dest, s.instance.uuid);
    await endOperation(s, ({ instance }) => ({
      instance: {
        ...instance,
        taskState: null,
        powerState: guest?.powerState ?? instance.powerState,
        progress: 0,
        ...(leftovers.length ? { fault: faultOf(`Live migration finished on ${dest}; not cleaned up: ${leftovers.join('; ')}`) } : {}),
      },
    }));
    return { finishedForward: true, leftovers };
  }

  // Failed before the copy ran: 'error' (Nova's _cleanup_pre_live_migration); the copy failed: 'failed'.
  const status: MigrationStatus = s.migration.status === 'running' ? 'failed' : 'error';
  s = await undoPre(s);
  await undoSchedule(s);
  await updateMigration(s.cell, s.migration.uuid, { status });
  await endOperation(s, ({ instance }) => ({ instance: { ...instance, taskState: null, host: s.source, node: s.migration.sourceNode, fault: faultOf(reason) } }));
  return { status };
}

export const LIVE_MIGRATION_STEPS = {
  'live-migrate-schedule': scheduleStep,
  'live-migrate-pre': preStep,
  'live-migrate-run': runStep,
  'live-migrate-post': postStep,
  'live-migrate-rollback': rollbackStep,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;
