/**
 * The second half of server-cross-cell-revert, after the flip (op on SRC), shared by its steps and
 * its rollback (which finishes forward): revert_snapshot_based_resize_at_dest then
 * finish_revert_snapshot_based_resize_at_source (reference §1.3, §1.10, §1.11, §1.14).
 */
import { releaseOn } from '../../../compute/placement.js';
import { attachmentDelete } from '../../cinder.js';
import { driverOfHost, nodeOfHost, updateOp, withEvent, type StepState } from '../../engine.js';
import { updateMigration } from '../../migrations.js';
import type { Instance, Migration } from '../../model.js';
import { blockDeviceSpecs, volumeBdms } from '../block-devices.js';
import { allocationsBackTo, bindingsBackTo, completeAttachments, connectAttachments, MOVE_KEYS, oldVmState, powerFor, withoutKeys } from '../resize/shared.js';
import { cellOfHost, hardDeleteCopy, loadPartition, withEventIn } from './copies.js';

/**
 * revert_snapshot_based_resize_at_dest + TGT hard delete: the dest guest destroyed with its disks,
 * the source bindings active and the dest ones deleted, att_D (and any attachment the TGT copy got
 * while resized) deleted, the dest claim dropped, TGT migration 'reverted', then the TGT copy
 * gone. A TGT copy already gone means all that was done.
 */
export async function revertAtDest(s: StepState, m: Migration): Promise<void> {
  const source = m.sourceCompute!;
  const dest = m.destCompute!;
  const tgtCell = await cellOfHost(dest);
  const tgt = await loadPartition(tgtCell, s.instance.uuid);
  if (!tgt.instance) return;
  await withEventIn([s.cell, tgtCell], s.instance.uuid, s.op.requestId, 'compute_revert_snapshot_based_resize_at_dest', dest, async () => {
    await (await driverOfHost(dest)).destroy(s.instance.uuid);
    await bindingsBackTo(s.instance.uuid, source, dest);
    const srcAttachments = new Set(s.bdms.map((b) => b.attachmentId).filter(Boolean));
    for (const b of volumeBdms(tgt.bdms)) if (b.attachmentId && !srcAttachments.has(b.attachmentId)) await attachmentDelete(b.attachmentId);
    await releaseOn((await nodeOfHost(dest)).node.uuid, s.instance.uuid);
    await updateMigration(tgtCell, m.uuid, { status: 'reverted' });
  });
  await hardDeleteCopy(tgtCell, s.instance.uuid);
}

/**
 * finish_revert_snapshot_based_resize_at_source up to (not including) the end of the operation:
 * old flavor and host/node source, allocations migration -> instance, att_S2 connected to the
 * source with connection_info refreshed (B5 fixed), the guest defined again on its kept disks,
 * attachments completed (also when the driver failed, as upstream's finally), SRC migration
 * 'reverted'. Returns the state for the caller to end the operation.
 */
export async function finishRevertAtSource(s0: StepState, m: Migration): Promise<StepState> {
  let s = s0;
  const source = m.sourceCompute!;
  const sourceNode = (await nodeOfHost(source)).node;
  const vm = oldVmState(s.instance);
  await withEvent(s, 'compute_finish_revert_snapshot_based_resize_at_source', source, async () => {
    s = await updateOp(s, ({ instance }) => ({
      instance: { ...instance, host: source, node: sourceNode.hypervisorHostname, flavor: instance.oldFlavor ?? instance.flavor },
    }));
    await allocationsBackTo(s.instance.uuid, m.uuid, sourceNode.uuid);
    s = await connectAttachments(s, source);
    try {
      await (await driverOfHost(source)).finishRevertMigration(s.instance.uuid, { blockDevices: blockDeviceSpecs(s.bdms), powerOn: vm === 'active' });
    } finally {
      await completeAttachments(s);
    }
  });
  await updateMigration(s.cell, m.uuid, { status: 'reverted' });
  return s;
}

/** The SRC copy once reverted: as before the move (vm_state from old_vm_state), the move's keys gone. */
export function revertedFields(instance: Instance): Instance {
  const vm = oldVmState(instance);
  return {
    ...instance,
    vmState: vm,
    taskState: null,
    powerState: powerFor(vm),
    oldFlavor: null,
    newFlavor: null,
    systemMetadata: withoutKeys(instance.systemMetadata, MOVE_KEYS),
  };
}
