/**
 * The compute half of volume attach, detach and swap: the steps of server-attach-volume,
 * server-detach-volume and server-swap-volume, each machine's rollback right after its step (the
 * API half is api.ts).
 */
import { copyBlockData } from '../../../drivers/compute/block-copy.js';
import { InvariantViolation } from '../../../core/errors.js';
import { getVolume } from '../../../volumes/repo.js';
import { attachmentComplete, attachmentDelete, attachmentUpdate, hostConnector, rollDetaching } from '../../cinder.js';
import { driverOfHost, endOperation, faultOf, loadStep, reasonOf, recordHolds, updateOp, withEvent, type ServerStepInput } from '../../engine.js';

const now = () => new Date().toISOString();

// ---------------------------------------------------------------------------------------------
// Attach

/** Compute attach_volume: attachment_update, driver attach (attachment_delete on failure), save, attachment_complete. */
async function attachStep(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const bdm = s.bdms.find((b) => b.uuid === s.op.params.bdmUuid);
  // The API recorded the attachment on the BDM before it started the machine.
  if (!bdm?.attachmentId) throw new InvariantViolation(`attach: BDM ${String(s.op.params.bdmUuid)} has no attachment`);
  const host = s.instance.host!;
  await withEvent(s, 'compute_attach_volume', host, async () => {
    const connected = await attachmentUpdate(bdm.attachmentId!, hostConnector(host, bdm.deviceName), bdm.deviceName);
    const driver = await driverOfHost(host);
    try {
      await driver.attachVolume(s.instance.uuid, connected.connectionInfo!, bdm.deviceName!, bdm.volumeId!);
    } catch (e) {
      await attachmentDelete(bdm.attachmentId!);
      throw e;
    }
    s = await updateOp(s, ({ bdms }) => ({ putBdms: bdms.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, connectionInfo: connected.connectionInfo, updatedAt: now() })) }));
    await attachmentComplete(bdm.attachmentId!);
  });
  await endOperation(s, ({ instance }) => ({ instance }));
  return {};
}

/** _attach_volume's failure path: attachment_delete again (404 ignored), bdm.destroy, fault; vm_state unchanged. */
async function attachRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const bdm = s.bdms.find((b) => b.uuid === s.op.params.bdmUuid);
  if (bdm?.connectionInfo && s.instance.host) {
    // The driver attached but a later call failed: detach the guest first (block_device's cleanup).
    await (await driverOfHost(s.instance.host)).detachVolume(s.instance.uuid, bdm.deviceName!);
  }
  if (bdm?.attachmentId) await attachmentDelete(bdm.attachmentId);
  await endOperation(s, ({ instance }) => ({ instance: { ...instance, fault: faultOf(reasonOf(input.error)) }, deleteBdms: bdm ? [bdm.uuid] : [] }));
  return {};
}

// ---------------------------------------------------------------------------------------------
// Detach

/** Compute detach_volume: driver detach (roll_detaching on failure), attachment_delete, bdm.destroy. */
async function detachStep(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const bdm = s.bdms.find((b) => b.uuid === s.op.params.bdmUuid);
  if (bdm) {
    const host = s.instance.host!;
    await withEvent(s, 'compute_detach_volume', host, async () => {
      try {
        await (await driverOfHost(host)).detachVolume(s.instance.uuid, bdm.deviceName!);
      } catch (e) {
        await rollDetaching(bdm.volumeId!);
        throw e;
      }
      if (bdm.attachmentId) await attachmentDelete(bdm.attachmentId);
    });
  }
  await endOperation(s, ({ instance }) => ({ instance, deleteBdms: bdm ? [bdm.uuid] : [] }));
  return {};
}

/** Detach failed: attachment and BDM kept, the volume back in-use, a fault; vm_state unchanged. */
async function detachRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const volumeId = s.op.params.volumeId as string;
  // The failing step rolled the volume back already unless it died first: roll only if still detaching.
  if ((await getVolume(volumeId))?.status === 'detaching') await rollDetaching(volumeId);
  await endOperation(s, ({ instance }) => ({ instance: { ...instance, fault: faultOf(reasonOf(input.error)) } }));
  return {};
}

// ---------------------------------------------------------------------------------------------
// Swap

/** Compute _do_swap_volume: update the new attachment, copy and switch the guest, complete, delete the old. */
async function swapStep(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const bdm = s.bdms.find((b) => b.uuid === s.op.params.bdmUuid)!;
  const newAtt = s.op.holds.newAttachments?.[bdm.uuid];
  // The API recorded the new attachment in the holds before it started the machine.
  if (!newAtt) throw new InvariantViolation('swap: no new attachment recorded');
  const newVolumeId = s.op.params.newVolumeId as string;
  const host = s.instance.host!;
  const driver = await driverOfHost(host);
  await withEvent(s, 'compute_swap_volume', host, async () => {
    if (bdm.attachmentId === newAtt) {
      // A re-run after the switch was recorded (a crash in or after the old attachment's delete):
      // copy, guest and new attachment are done and the BDM holds the new one; only the delete of
      // the one it replaced is repeated (a tombstone finishes its disconnect; 404 is done).
      const replaced = s.op.holds.replacedAttachments?.[newAtt];
      if (replaced) await attachmentDelete(replaced);
      return;
    }
    const connected = await attachmentUpdate(newAtt, hostConnector(host, bdm.deviceName), bdm.deviceName);
    // driver.swap_volume: copy the old device's bytes to the new volume, then point the guest at it.
    const guestInfo = await driver.getGuest(s.instance.uuid);
    if (guestInfo?.volumes.some((v) => v.mountpoint === bdm.deviceName && v.volumeId === bdm.volumeId)) {
      // os-brick connects the new volume on the host first; the guest is switched after the copy.
      s = await recordHolds(s, (h) => ({ ...h, hostConnections: [...(h.hostConnections ?? []), { host, connectionInfo: connected.connectionInfo! }] }));
      await driver.connectVolume(connected.connectionInfo!);
      // Each device closed whatever fails after it opened (a new volume that cannot be opened
      // left the old device's handle to the garbage collector).
      const from = await driver.openGuestDevice(s.instance.uuid, bdm.deviceName!);
      try {
        const to = await driver.openConnection(connected.connectionInfo!);
        try {
          // The hypervisor's block copy: only the old device's data extents; the new volume stays sparse.
          await copyBlockData(from, to);
        } finally {
          await to.close();
        }
      } finally {
        await from.close();
      }
      await driver.detachVolume(s.instance.uuid, bdm.deviceName!);
    }
    await driver.attachVolume(s.instance.uuid, connected.connectionInfo!, bdm.deviceName!, newVolumeId);
    await attachmentComplete(newAtt);
    const oldAtt = bdm.attachmentId;
    const dot = s.op.params.deleteOnTermination as boolean | undefined;
    // The switch and the attachment it replaces in one write: a re-run that finds the BDM switched
    // knows which attachment is still to delete.
    s = await updateOp(s, ({ instance, bdms, op }) => ({
      ...(oldAtt ? { instance: { ...instance, operation: { ...op, holds: { ...op.holds, replacedAttachments: { ...op.holds.replacedAttachments, [newAtt]: oldAtt } } } } } : {}),
      putBdms: bdms
        .filter((b) => b.uuid === bdm.uuid)
        .map((b) => ({ ...b, volumeId: newVolumeId, attachmentId: newAtt, connectionInfo: connected.connectionInfo, ...(dot !== undefined ? { deleteOnTermination: dot } : {}), updatedAt: now() })),
    }));
    if (oldAtt) await attachmentDelete(oldAtt);
  });
  await endOperation(s, ({ instance }) => ({ instance }));
  return {};
}

/** Swap failed: roll_detaching(old), attachment_delete(new); the old BDM and attachment untouched; vm_state unchanged. */
async function swapRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const bdm = s.bdms.find((b) => b.uuid === s.op.params.bdmUuid);
  const newAtt = bdm ? s.op.holds.newAttachments?.[bdm.uuid] : undefined;
  const newVolumeId = s.op.params.newVolumeId as string;
  if (bdm && bdm.volumeId === newVolumeId) {
    // The switch was recorded before the failure: only the old attachment's delete is left (404 is done).
    const replaced = newAtt ? s.op.holds.replacedAttachments?.[newAtt] : undefined;
    if (replaced) await attachmentDelete(replaced);
    await endOperation(s, ({ instance }) => ({ instance }));
    return {};
  }
  if (s.instance.host && bdm) {
    // The guest may have been switched to the new volume before the failure: point it back.
    const driver = await driverOfHost(s.instance.host);
    const guest = await driver.getGuest(s.instance.uuid);
    const on = guest?.volumes.find((v) => v.mountpoint === bdm.deviceName);
    if (on && on.volumeId !== bdm.volumeId) {
      await driver.detachVolume(s.instance.uuid, bdm.deviceName!);
      if (bdm.connectionInfo) await driver.attachVolume(s.instance.uuid, bdm.connectionInfo, bdm.deviceName!, bdm.volumeId!);
    } else if (!on && bdm.connectionInfo) {
      await driver.attachVolume(s.instance.uuid, bdm.connectionInfo, bdm.deviceName!, bdm.volumeId!);
    }
  }
  // The host connection the swap made for the new volume: removed unless a guest uses it.
  for (const c of s.op.holds.hostConnections ?? []) await (await driverOfHost(c.host)).disconnectVolume(c.connectionInfo);
  await rollDetaching(s.op.params.oldVolumeId as string);
  if (newAtt) await attachmentDelete(newAtt);
  await endOperation(s, ({ instance }) => ({ instance: { ...instance, fault: faultOf(reasonOf(input.error)) } }));
  return {};
}

export const VOLUME_STEPS = {
  attach: attachStep,
  'attach-rollback': attachRollback,
  detach: detachStep,
  'detach-rollback': detachRollback,
  swap: swapStep,
  'swap-rollback': swapRollback,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;
