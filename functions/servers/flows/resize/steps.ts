/**
 * The steps of server-resize (cold migration and same-cell resize; traces vol_test_06, 07), each
 * step's undo right after it; the API half is api.ts, confirm and revert are resolve-steps.ts.
 *
 * One migration record, type 'resize' when the flavor changes else 'migration':
 *   prep (conductor + prep_resize): the source allocation moves instance -> migration, the
 *     destination is scheduled in the same cell (the source ignored) and claimed for the instance
 *     with the new flavor; migration dest recorded.
 *   resize_instance (source): migrate_disk_and_power_off, `_terminate_volume_connections`
 *     (attachment_create empty, attachment_delete old, BDM = new), dest port binding made and
 *     activated, migration post-migrating, instance.host = dest.
 *   finish_resize (dest): attachment_update(new, dest connector) per BDM, attachment_get per BDM
 *     (connection_info saved), finish_migration, attachment_complete per BDM; migration finished;
 *     vm resized (VERIFY_RESIZE).
 *
 * Failures roll back to something usable instead of upstream's ERROR (docs/compatibility.md, "Cold migration and same-cell resize"): the
 * rollback step undoes resize_instance (and what finish made on the destination), then prep.
 */
import { allocationsOf, moveAllocations } from '../../../compute/placement.js';
import { POWER_STATE } from '../../../drivers/compute/driver.js';
import { intentId } from '../../../core/intents.js';
import { attachmentCreate, attachmentDelete } from '../../cinder.js';
import { computeNodes, driverOfHost, endOperation, loadStep, nodeOfHost, reasonOf, recordHolds, updateOp, withEvent, type ServerStepInput, type StepState } from '../../engine.js';
import { updateMigration } from '../../migrations.js';
import type { InstanceFlavor, Migration, VmState } from '../../model.js';
import { activatePortBinding, bindPortToHost, listPortsOf } from '../../network.js';
import { scheduleAndClaim } from '../../scheduler.js';
import { blockDeviceSpecs, deleteIntendedAttachment, isVolumeBacked, volumeBdms } from '../block-devices.js';
import { allocationsBackTo, bindingsBackTo, completeAttachments, connectAttachments, endBackOnSource, migrationOf, oldVmState, powerFor, terminateVolumeConnections } from './shared.js';

const now = () => new Date().toISOString();

/** Conductor's MigrationTask + prep_resize on the destination. */
async function resizePrep(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const m = await migrationOf(s);
  const crossCellOf = async (host: string) => (await nodeOfHost(host)).cell.uuid !== s.cell.uuid;
  if (m.destCompute) return { dest: m.destCompute, crossCell: m.crossCellMove || (await crossCellOf(m.destCompute)) };
  const source = m.sourceCompute!;
  const sourceNode = (await nodeOfHost(source)).node;
  const newFlavor = s.op.params.newFlavor as InstanceFlavor;
  const allowCrossCell = s.op.params.allowCrossCell === true;
  // Upstream's conductor wraps _cold_migrate in a 'cold_migrate' event inside 'conductor_migrate_server'.
  const dest = await withEvent(s, 'conductor_migrate_server', null, () => withEvent(s, 'cold_migrate', null, async () => {
    // replace_allocation_with_migration: from here the source is held by the migration.
    if ((await allocationsOf(m.uuid)).length === 0) await moveAllocations(s.instance.uuid, m.uuid);
    // A claim made by an earlier attempt of this step is the destination (never claim twice).
    const held = (await allocationsOf(s.instance.uuid)).find((a) => a.nodeUuid !== sourceNode.uuid);
    if (held) return (await computeNodes()).find((n) => n.node.uuid === held.nodeUuid)!;
    return scheduleAndClaim({
      flavor: newFlavor,
      consumer: s.instance.uuid,
      volumeBacked: isVolumeBacked(s.instance),
      ignoreHosts: [source],
      ...(s.op.params.host ? { host: s.op.params.host as string } : {}),
      // Cross-cell allowed: every cell, the source's preferred (CrossCellWeigher); else the source cell only.
      ...(allowCrossCell ? { preferCellUuid: s.cell.uuid } : { cellUuid: s.cell.uuid }),
      availabilityZone: s.instance.availabilityZone,
    });
  }));
  const destPatch = { destCompute: dest.node.host, destNode: dest.node.hypervisorHostname, destHost: dest.node.host };
  if (dest.cell.uuid !== s.cell.uuid) {
    // CrossCellMigrationTask: the destination's prep runs in the cross-cell states (no same-cell prep_resize).
    await updateMigration(s.cell, m.uuid, { ...destPatch, crossCellMove: true });
    return { dest: dest.node.host, crossCell: true };
  }
  await withEvent(s, 'compute_prep_resize', dest.node.host, async () => {
    await updateMigration(s.cell, m.uuid, destPatch);
  });
  return { dest: dest.node.host, crossCell: false };
}

/** Undoes resizePrep: the destination's claim dropped and the source's allocation back to the instance. */
async function undoPrep(s: StepState, m: Migration, sourceNodeUuid: string): Promise<void> {
  await allocationsBackTo(s.instance.uuid, m.uuid, sourceNodeUuid);
}

/** resize_instance on the source. */
async function resizeInstance(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  const dest = m.destCompute!;
  if (s.instance.host === dest) return {};
  const newFlavor = s.op.params.newFlavor as InstanceFlavor;
  await updateMigration(s.cell, m.uuid, { status: 'migrating' });
  s = await updateOp(s, ({ instance, op }) => ({
    instance: {
      ...instance,
      taskState: 'resize_migrating',
      systemMetadata: { ...instance.systemMetadata, move_source: source, move_dest: dest },
      // The disk copy lands on the destination: recorded before it is made.
      operation: { ...op, holds: { ...op.holds, destGuest: dest } },
    },
  }));
  await withEvent(s, 'compute_resize_instance', source, async () => {
    await (await driverOfHost(source)).migrateDiskAndPowerOff(s.instance.uuid, dest, newFlavor);
    s = await terminateVolumeConnections(s, 'resize-instance');
    s = await updateOp(s, ({ instance, op }) => ({ instance: { ...instance, operation: { ...op, holds: { ...op.holds, boundHost: dest } } } }));
    // migrate_instance_start: the destination binding is made (inactive) and activated.
    for (const port of await listPortsOf(s.instance.uuid)) {
      await bindPortToHost(port.id, dest);
      await activatePortBinding(port.id, dest);
    }
    await updateMigration(s.cell, m.uuid, { status: 'post-migrating' });
    s = await updateOp(s, ({ instance }) => ({ instance: { ...instance, host: dest, node: m.destNode, taskState: 'resize_migrated', powerState: POWER_STATE.SHUTDOWN } }));
  });
  return {};
}

/**
 * Undoes resizeInstance (and what finish made on the destination): a destination copy or guest is
 * destroyed; if the disks already left the guest (kept disks on the source), each moved volume gets
 * a placeholder attachment connected to the source and completed and the guest is defined again on
 * its kept disks (finish_revert_migration); a guest still defined is powered on again if it ran;
 * the bindings go back to the source.
 */
export async function undoResizeInstance(state: StepState, m: Migration, vm: VmState): Promise<StepState> {
  let s = state;
  const source = m.sourceCompute!;
  const dest = m.destCompute;
  const sourceDriver = await driverOfHost(source);
  if (dest && (s.op.holds.destGuest || s.instance.host === dest)) await (await driverOfHost(dest)).destroy(s.instance.uuid);

  // A placeholder the move recorded but never switched a BDM to (a crash between its create and the switch).
  for (const bdm of volumeBdms(s.bdms)) {
    const placeholder = s.op.holds.newAttachments?.[bdm.uuid];
    if (placeholder && placeholder !== bdm.attachmentId && placeholder !== s.op.holds.rollbackAttachments?.[bdm.uuid]) await deleteIntendedAttachment(placeholder);
  }
  const onSource = await sourceDriver.getGuest(s.instance.uuid);
  if (onSource && !onSource.defined) {
    // The disks left the guest: volumes that moved get a fresh placeholder for the source, its id
    // recorded before it is made (a re-run finds it).
    for (const { uuid: bdmUuid } of volumeBdms(s.bdms)) {
      const current = s.bdms.find((b) => b.uuid === bdmUuid)!;
      const recorded = s.op.holds.rollbackAttachments?.[bdmUuid];
      if (!s.op.holds.oldAttachments?.[bdmUuid] || (recorded && recorded === current.attachmentId)) continue;
      const id = recorded ?? intentId(s.op.requestId, 'resize-rollback', bdmUuid);
      if (!recorded) s = await recordHolds(s, (h) => ({ ...h, rollbackAttachments: { ...h.rollbackAttachments, [bdmUuid]: id } }));
      // The destination's attachment goes first: Cinder refuses a second attachment of a volume still attaching.
      if (current.attachmentId) await attachmentDelete(current.attachmentId);
      await attachmentCreate(id, current.volumeId!, s.instance.uuid);
      s = await updateOp(s, ({ bdms }) => ({
        putBdms: bdms.filter((b) => b.uuid === bdmUuid).map((b) => ({ ...b, attachmentId: id, connectionInfo: null, updatedAt: now() })),
      }));
    }
    const moved = new Set(Object.keys(s.op.holds.rollbackAttachments ?? {}));
    const toConnect = { ...s, bdms: s.bdms.filter((b) => moved.has(b.uuid)) };
    s = { ...(await connectAttachments(toConnect, source)) };
    await sourceDriver.finishRevertMigration(s.instance.uuid, { blockDevices: blockDeviceSpecs(s.bdms), powerOn: vm === 'active' });
    await completeAttachments({ ...s, bdms: s.bdms.filter((b) => moved.has(b.uuid)) });
  } else if (onSource?.defined && vm === 'active') {
    // The failure came before the disks moved; the guest may have been powered off already.
    await sourceDriver.powerOn(s.instance.uuid);
  }

  if (s.op.holds.boundHost) await bindingsBackTo(s.instance.uuid, source, s.op.holds.boundHost);
  return s;
}

/** finish_resize on the destination. */
async function resizeFinish(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  const dest = m.destCompute!;
  const newFlavor = s.op.params.newFlavor as InstanceFlavor;
  const vm = oldVmState(s.instance);
  s = await updateOp(s, ({ instance }) => ({ instance: { ...instance, taskState: 'resize_finish' } }));
  await withEvent(s, 'compute_finish_resize', dest, async () => {
    s = await connectAttachments(s, dest);
    await (await driverOfHost(dest)).finishMigration(
      { uuid: s.instance.uuid, flavor: newFlavor, blockDevices: blockDeviceSpecs(s.bdms), powerOn: vm === 'active' },
      source,
    );
    await completeAttachments(s);
  });
  await updateMigration(s.cell, m.uuid, { status: 'finished' });
  await endOperation(s, ({ instance }) => ({
    instance: { ...instance, vmState: 'resized', taskState: null, flavor: newFlavor, powerState: powerFor(vm), progress: 100 },
  }));
  return {};
}

/**
 * Any failure of the move: back to the source as it was, undoing resize_instance then prep;
 * migration 'error', the old vm_state, a fault.
 */
async function resizeRollback(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const reason = reasonOf(input.error);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  const sourceNode = (await nodeOfHost(source)).node;
  const vm = oldVmState(s.instance);
  s = await undoResizeInstance(s, m, vm);
  await undoPrep(s, m, sourceNode.uuid);
  await endBackOnSource(s, m, sourceNode, vm, reason);
  return { vmState: vm };
}

export const RESIZE_STEPS = {
  'resize-prep': resizePrep,
  'resize-instance': resizeInstance,
  'resize-finish': resizeFinish,
  'resize-rollback': resizeRollback,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;
