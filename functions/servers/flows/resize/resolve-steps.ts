/**
 * The steps of server-confirm-resize and server-revert-resize (reference §2.1 rows "Confirm (same
 * cell)", "Revert (same cell)"; trace vol_test_14), each machine's rollback after its steps; the
 * API half is api.ts.
 *
 * Confirm (source): source port binding deleted, confirm_migration (kept disks removed), the
 *   migration's allocation released; no Cinder calls.
 * Revert: dest destroy, `_terminate_volume_connections` on dest, dest claim dropped, migration
 *   reverted; then source: host and flavor back, allocations migration -> instance, source binding
 *   activated and dest binding deleted, attachment_update(placeholder, source connector),
 *   attachment_get, finish_revert_migration, attachment_complete.
 */
import { releaseAll, releaseOn } from '../../../compute/placement.js';
import { logger } from '../../../core/logger.js';
import { driverOfHost, endOperation, faultOf, guestOn, loadStep, nodeOfHost, reasonOf, updateOp, withEvent, type ServerStepInput } from '../../engine.js';
import { updateMigration } from '../../migrations.js';
import type { VmState } from '../../model.js';
import { deletePortBinding, listPortsOf } from '../../network.js';
import { setRequestSpecFlavor } from '../../repo.js';
import { blockDeviceSpecs } from '../block-devices.js';
import { allocationsBackTo, bindingsBackTo, completeAttachments, connectAttachments, migrationOf, MOVE_KEYS, oldVmState, powerFor, terminateVolumeConnections, withoutKeys } from './shared.js';

// ---------------------------------------------------------------------------------------------
// server-confirm-resize

/** confirm_resize on the source: network teardown, confirm_migration, drop_move_claim_at_source. */
async function resizeConfirm(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  await withEvent(s, 'compute_confirm_resize', source, async () => {
    for (const port of await listPortsOf(s.instance.uuid)) if (source !== s.instance.host) await deletePortBinding(port.id, source);
    await (await driverOfHost(source)).confirmMigration(s.instance.uuid);
  });
  await releaseAll(m.uuid);
  await updateMigration(s.cell, m.uuid, { status: 'confirmed' });
  await setRequestSpecFlavor(s.instance.uuid, s.instance.flavor);
  const vm = oldVmState(s.instance);
  await endOperation(s, ({ instance }) => ({
    instance: { ...instance, vmState: vm, taskState: null, oldFlavor: null, newFlavor: null, systemMetadata: withoutKeys(instance.systemMetadata, MOVE_KEYS) },
  }));
  return {};
}

/**
 * Confirm failed on the source (upstream: instance ERROR). The guest runs on the destination, so it
 * stays usable there: the migration's allocation is released anyway (upstream's finally), migration
 * 'error', a fault; `move_source` stays in system_metadata so the kept disks the source may still
 * have are visible to the audit and removed by a later delete.
 */
async function resizeConfirmRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const reason = reasonOf(input.error);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  await releaseAll(m.uuid);
  for (const port of await listPortsOf(s.instance.uuid)) if (source !== s.instance.host) await deletePortBinding(port.id, source);
  await updateMigration(s.cell, m.uuid, { status: 'error' });
  const onDest = s.instance.host ? await (await driverOfHost(s.instance.host)).getGuest(s.instance.uuid) : undefined;
  const vm: VmState = onDest?.defined ? oldVmState(s.instance) : 'error';
  if (vm === 'error') logger.error('confirm failed and the guest is not on its host', { serverId: s.instance.uuid });
  await endOperation(s, ({ instance }) => ({
    instance: {
      ...instance,
      vmState: vm,
      taskState: null,
      oldFlavor: null,
      newFlavor: null,
      systemMetadata: withoutKeys(instance.systemMetadata, ['old_vm_state', 'move_dest']),
      fault: faultOf(reason),
    },
  }));
  return { vmState: vm };
}

// ---------------------------------------------------------------------------------------------
// server-revert-resize

/** revert_resize on the destination. */
async function revertAtDest(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  if (m.status === 'reverted') return {};
  const dest = m.destCompute!;
  await withEvent(s, 'compute_revert_resize', dest, async () => {
    await (await driverOfHost(dest)).destroy(s.instance.uuid);
    s = await terminateVolumeConnections(s, 'resize-revert-dest');
    // drop_move_claim_at_dest
    await releaseOn((await nodeOfHost(dest)).node.uuid, s.instance.uuid);
    await updateMigration(s.cell, m.uuid, { status: 'reverted' });
  });
  return {};
}

/** finish_revert_resize on the source. */
async function finishRevert(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  const dest = m.destCompute!;
  const sourceNode = (await nodeOfHost(source)).node;
  const vm = oldVmState(s.instance);
  await withEvent(s, 'compute_finish_revert_resize', source, async () => {
    s = await updateOp(s, ({ instance }) => ({
      instance: { ...instance, host: source, node: sourceNode.hypervisorHostname, flavor: instance.oldFlavor ?? instance.flavor },
    }));
    await allocationsBackTo(s.instance.uuid, m.uuid, sourceNode.uuid);
    await bindingsBackTo(s.instance.uuid, source, dest);
    s = await connectAttachments(s, source);
    await (await driverOfHost(source)).finishRevertMigration(s.instance.uuid, { blockDevices: blockDeviceSpecs(s.bdms), powerOn: vm === 'active' });
    await completeAttachments(s);
  });
  await endOperation(s, ({ instance }) => ({
    instance: {
      ...instance,
      vmState: vm,
      taskState: null,
      powerState: powerFor(vm),
      oldFlavor: null,
      newFlavor: null,
      systemMetadata: withoutKeys(instance.systemMetadata, MOVE_KEYS),
    },
  }));
  return {};
}

/**
 * Revert failed (upstream: ERROR). Before the destination was torn down (its guest still defined,
 * the migration not reverted) nothing changed: back to VERIFY_RESIZE with migration 'finished',
 * so revert or confirm can be asked again. Past that point the guest exists only as kept disks on
 * the source: ERROR with a fault (upstream), migration 'error'.
 */
async function revertRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const reason = reasonOf(input.error);
  const m = await migrationOf(s);
  const dest = m.destCompute!;
  const onDest = await guestOn(dest, s.instance.uuid);
  const untouched = m.status !== 'reverted' && s.instance.host === dest && onDest?.defined === true && !s.op.holds.newAttachments;
  if (untouched) {
    await updateMigration(s.cell, m.uuid, { status: 'finished' });
    await endOperation(s, ({ instance }) => ({ instance: { ...instance, taskState: null, fault: faultOf(reason) } }));
    return { vmState: 'resized' };
  }
  await updateMigration(s.cell, m.uuid, { status: 'error' });
  await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'error', taskState: null, fault: faultOf(reason) } }));
  return { vmState: 'error' };
}

export const RESOLVE_RESIZE_STEPS = {
  'resize-confirm': resizeConfirm,
  'resize-confirm-rollback': resizeConfirmRollback,
  'resize-revert-dest': revertAtDest,
  'resize-finish-revert': finishRevert,
  'resize-revert-rollback': revertRollback,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;
