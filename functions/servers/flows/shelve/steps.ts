/**
 * The steps of server-shelve and server-unshelve (traces vol_test_09, vol_test_10); the API half
 * is api.ts.
 *
 * server-shelve (shelve and shelveOffload):
 *   snapshot (image-backed `shelve` only: power off, the root disk to an S3 image `<name>-shelved`,
 *   system_metadata shelved_image_id, vm SHELVED; Nova's default shelved_offload_time 0 offloads at
 *   once) -> offload (`_shelve_offload_instance`: power off, driver.destroy,
 *   `_terminate_volume_connections` per volume BDM: attachment_create empty, BDM = new,
 *   attachment_delete(old); host bindings deleted; allocations released; host/node None;
 *   SHELVED_OFFLOADED). A volume-backed `shelve` goes straight to the offload, as upstream.
 *   Failure: the image made by this operation is deleted, a guest powered off is powered on again,
 *   vm_state as it was (reverts_task_state), a fault.
 *
 * server-unshelve: schedule + claim (task `unshelving` -> `spawning`) -> network (bind + activate) ->
 *   block devices (device names for BDMs attached while offloaded, then attachment_update + complete)
 *   -> spawn from the shelved image or the boot volume, the shelved image deleted -> ACTIVE.
 *   Failure (vol_10): guest destroyed, allocations deleted, `_terminate_volume_connections`, bindings
 *   deleted, host/node None, task None: stays SHELVED_OFFLOADED with its shelved image.
 */
import { releaseAll } from '../../../compute/placement.js';
import { Conflict } from '../../../core/errors.js';
import { intentId } from '../../../core/intents.js';
import { POWER_STATE } from '../../../drivers/compute/driver.js';
import { driverOfHost, endOperation, failEvent, faultOf, loadStep, reasonOf, updateOp, withEvent, type ServerStepInput, type StepState } from '../../engine.js';
import { createImageRecord, deleteImage, getImage, imageSourceFor, savingImagePut, type NewImage } from '../../images.js';
import { SNAPSHOT_IMAGE_FORMAT, snapshotToImage } from '../../snapshot-upload.js';
import type { Instance, OperationHolds } from '../../model.js';
import { activatePortBinding, bindPortToHost, deletePortBinding, listPortsOf } from '../../network.js';
import { scheduleAndClaim } from '../../scheduler.js';
import { blockDeviceSpecs, connectVolumes, deleteIntendedAttachment, isVolumeBacked, nextDeviceName, terminateConnection } from '../block-devices.js';

const now = () => new Date().toISOString();

/**
 * Nova's `[DEFAULT]shelved_offload_time` (FERRY_SHELVED_OFFLOAD_TIME): 0, the default, offloads a
 * shelved server at once; -1 never does (it stays SHELVED on its host until `shelveOffload`).
 * Ferry has no periodic task, so a positive delay is treated as -1.
 */
export function shelvedOffloadTime(): number {
  const v = Number(process.env.FERRY_SHELVED_OFFLOAD_TIME ?? 0);
  return Number.isInteger(v) && v === 0 ? 0 : -1;
}

// ---------------------------------------------------------------------------------------------
// server-shelve

const setHolds = (s: StepState, change: (h: OperationHolds) => OperationHolds) =>
  updateOp(s, ({ instance, op }) => ({ instance: { ...instance, operation: { ...op, holds: change(op.holds) } } }));

/** `_shelve_instance` of an image-backed server: power off, snapshot to `<name>-shelved`, vm SHELVED. */
async function shelveSnapshot(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  if (s.op.kind !== 'shelve' || isVolumeBacked(s.instance) || s.instance.vmState === 'shelved') return { skipped: true };
  const host = s.instance.host!;
  const driver = await driverOfHost(host);
  await withEvent(s, 'compute_shelve_instance', host, async () => {
    await driver.powerOff(s.instance.uuid);
    // The image's id is derived from the request and recorded on the operation in the same
    // transaction as the task state and the image's record (made in `saving`, as its upload follows
    // at once): one write, not three. A re-run finds them written and uploads the same object again.
    const imageId = s.op.holds.imageId ?? intentId(s.op.requestId, 'shelve-snapshot', s.instance.uuid);
    const record: NewImage & { id: string } = {
      id: imageId,
      name: `${s.instance.name}-shelved`,
      ownerProjectId: s.instance.projectId,
      visibility: 'private',
      diskFormat: SNAPSHOT_IMAGE_FORMAT,
      properties: { image_type: 'snapshot', instance_uuid: s.instance.uuid, ...(s.instance.imageRef ? { base_image_ref: s.instance.imageRef } : {}) },
    };
    let recordSaving = false;
    if (s.op.holds.imageId !== imageId || s.instance.taskState !== 'shelving_image_uploading' || s.instance.powerState !== POWER_STATE.SHUTDOWN) {
      // An operation begun before the record rode with this write may have made it already.
      const made = s.op.holds.imageId === imageId;
      s = await updateOp(s, ({ instance, op }) => ({
        instance: { ...instance, taskState: 'shelving_image_uploading', powerState: POWER_STATE.SHUTDOWN, operation: { ...op, holds: { ...op.holds, imageId } } },
        ...(made ? {} : { extra: [savingImagePut(record)] }),
      }));
      recordSaving = !made;
    }
    if (!recordSaving) {
      try {
        await createImageRecord(record);
      } catch (e) {
        if (!(e instanceof Conflict)) throw e; // a re-run: the record is ours already
      }
    }
    await snapshotToImage(driver, s.instance.uuid, imageId, { recordSaving });
    const shelvedImage = imageId;
    const shelved = (instance: Instance): Instance => ({
      ...instance,
      vmState: 'shelved',
      systemMetadata: { ...instance.systemMetadata, shelved_image_id: shelvedImage, shelved_at: now(), shelved_host: host },
    });
    if (shelvedOffloadTime() === 0) {
      // shelved_offload_time 0 (Nova's default): offloaded at once, by the next step.
      s = await updateOp(s, ({ instance }) => ({ instance: { ...shelved(instance), taskState: 'shelving_offloading' } }));
    } else {
      // -1: the server stays SHELVED on its host until `shelveOffload`; the offload step finds the operation over.
      s = await endOperation(s, ({ instance }) => ({ instance: { ...shelved(instance), taskState: null } }));
    }
  });
  return { imageId: s.instance.systemMetadata.shelved_image_id };
}

/** `_shelve_offload_instance`: destroy, terminate volume connections, bindings and allocations gone, SHELVED_OFFLOADED. */
async function shelveOffload(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const host = s.instance.host;
  await withEvent(s, 'compute_shelve_offload_instance', host, async () => {
    if (host) {
      const driver = await driverOfHost(host);
      const guest = await driver.getGuest(s.instance.uuid);
      if (guest) {
        // Kept disks only (no definition): nothing to power off.
        if (guest.defined) await driver.powerOff(s.instance.uuid);
        await driver.destroy(s.instance.uuid);
      }
    }
    for (const bdm of s.bdms.filter((b) => b.destinationType === 'volume' && b.volumeId)) {
      // A re-run finds a BDM already switched to its empty attachment (recorded before it was made).
      s = await terminateConnection(s, bdm.uuid, 'shelve-offload');
    }
    if (host) for (const port of await listPortsOf(s.instance.uuid)) await deletePortBinding(port.id, host);
    await releaseAll(s.instance.uuid);
  });
  await endOperation(s, ({ instance }) => ({
    instance: { ...instance, vmState: 'shelved_offloaded', taskState: null, powerState: POWER_STATE.SHUTDOWN, host: null, node: null, availabilityZone: null },
  }));
  return {};
}

/**
 * Shelve failed (reverts_task_state): the image this operation made is deleted unless the
 * instance already records it as its shelved image (then it is SHELVED and keeps it); a guest that
 * was running is powered on again; task None and a fault.
 */
async function shelveRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const reason = reasonOf(input.error);
  const shelvedAlready = s.instance.vmState === 'shelved' && s.instance.systemMetadata.shelved_image_id === s.op.holds.imageId;
  if (s.op.holds.imageId && !shelvedAlready) await deleteImage(s.op.holds.imageId);
  const wasRunning = s.op.params.oldPowerState === POWER_STATE.RUNNING;
  if (s.instance.host && wasRunning && !shelvedAlready && s.instance.vmState !== 'shelved_offloaded') {
    const driver = await driverOfHost(s.instance.host);
    if (await driver.getGuest(s.instance.uuid)) await driver.powerOn(s.instance.uuid);
  }
  await failEvent(s, s.op.kind === 'shelve' && !isVolumeBacked(s.instance) && !shelvedAlready ? 'compute_shelve_instance' : 'compute_shelve_offload_instance', reason);
  await endOperation(s, ({ instance }) => ({
    instance: {
      ...instance,
      taskState: null,
      fault: faultOf(reason),
      ...(shelvedAlready ? {} : { powerState: wasRunning ? POWER_STATE.RUNNING : instance.powerState }),
    },
  }));
  return {};
}

// ---------------------------------------------------------------------------------------------
// server-unshelve

/** Conductor unshelve_instance: a SHELVED guest is only powered on; an offloaded one is scheduled and claimed. */
async function unshelveSchedule(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  if (s.instance.vmState === 'shelved' || s.instance.host) return { host: s.instance.host };
  const chosen = await scheduleAndClaim({
    flavor: s.instance.flavor,
    consumer: s.instance.uuid,
    volumeBacked: isVolumeBacked(s.instance),
    host: s.op.params.host as string | undefined,
    cellUuid: s.cell.uuid,
    availabilityZone: s.instance.availabilityZone,
  });
  await updateOp(s, ({ instance }) => ({
    instance: { ...instance, host: chosen.node.host, node: chosen.node.hypervisorHostname, availabilityZone: 'nova', taskState: 'spawning' },
  }));
  return { host: chosen.node.host };
}

async function unshelveNetwork(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  if (s.instance.vmState === 'shelved') return {};
  const host = s.instance.host!;
  if (s.op.holds.boundHost !== host) s = await setHolds(s, (h) => ({ ...h, boundHost: host }));
  for (const port of await listPortsOf(s.instance.uuid)) {
    await bindPortToHost(port.id, host, { active: true });
    await activatePortBinding(port.id, host);
  }
  return {};
}

/** `_prep_block_device`: BDMs attached while offloaded get a device name first, then every volume is connected to the host. */
async function unshelveBlockDevices(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  if (s.instance.vmState === 'shelved') return {};
  for (const bdm of s.bdms.filter((b) => b.destinationType === 'volume' && !b.deviceName)) {
    s = await updateOp(s, ({ bdms }) => {
      const name = bdm.bootIndex === 0 ? '/dev/vda' : nextDeviceName(bdms);
      return { putBdms: bdms.filter((b) => b.uuid === bdm.uuid && !b.deviceName).map((b) => ({ ...b, deviceName: name, updatedAt: now() })) };
    });
  }
  await connectVolumes(s, s.instance.host!, 'unshelve-block-devices');
  return {};
}

/** Spawn from the shelved image (then deleted, as upstream) or the boot volume; ACTIVE. */
async function unshelveSpawn(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const host = s.instance.host!;
  const driver = await driverOfHost(host);
  const shelvedImageId = s.instance.systemMetadata.shelved_image_id;
  await withEvent(s, 'compute_unshelve_instance', host, async () => {
    if (s.instance.vmState === 'shelved') {
      await driver.powerOn(s.instance.uuid);
      return;
    }
    if (s.op.holds.destGuest !== host) s = await setHolds(s, (h) => ({ ...h, destGuest: host }));
    const image = isVolumeBacked(s.instance) ? undefined : await getImage(shelvedImageId ?? s.instance.imageRef);
    await driver.spawn({
      uuid: s.instance.uuid,
      flavor: s.instance.flavor,
      ...(image ? { image: imageSourceFor(image), imageRef: image.id } : {}),
      blockDevices: blockDeviceSpecs(s.bdms),
      powerOn: true,
    });
  });
  await endOperation(s, ({ instance }) => {
    const { shelved_image_id: _i, shelved_at: _a, shelved_host: _h, ...systemMetadata } = instance.systemMetadata;
    return { instance: { ...instance, vmState: 'active', taskState: null, powerState: POWER_STATE.RUNNING, systemMetadata, launchedAt: now(), fault: null } };
  });
  if (shelvedImageId) await deleteImage(shelvedImageId);
  return {};
}

/** vol_10: guest and allocations gone, `_terminate_volume_connections`, host None, task None; stays as it was (SHELVED_OFFLOADED). */
async function unshelveRollback(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const reason = reasonOf(input.error);
  if (s.instance.vmState === 'shelved') {
    await failEvent(s, 'compute_unshelve_instance', reason);
    await endOperation(s, ({ instance }) => ({ instance: { ...instance, taskState: null, fault: faultOf(reason) } }));
    return {};
  }
  const host = s.instance.host;
  if (host && s.op.holds.destGuest === host) await (await driverOfHost(host)).destroy(s.instance.uuid);
  await releaseAll(s.instance.uuid);
  if (host) {
    // An attachment the block-devices step intended for a BDM that had none but never recorded on it.
    for (const bdm of s.bdms) {
      const intended = s.op.holds.newAttachments?.[bdm.uuid];
      if (intended && bdm.attachmentId !== intended) await deleteIntendedAttachment(intended);
    }
    for (const bdm of s.bdms.filter((b) => b.destinationType === 'volume' && b.volumeId)) {
      s = await terminateConnection(s, bdm.uuid, 'unshelve-rollback', 'rollbackAttachments');
    }
    for (const port of await listPortsOf(s.instance.uuid)) await deletePortBinding(port.id, host);
  }
  await failEvent(s, 'compute_unshelve_instance', reason);
  await endOperation(s, ({ instance }) => ({ instance: unshelveUndone(instance, reason) }));
  return { vmState: s.instance.vmState };
}

function unshelveUndone(instance: Instance, reason: string): Instance {
  return { ...instance, host: null, node: null, availabilityZone: null, taskState: null, powerState: POWER_STATE.SHUTDOWN, fault: faultOf(reason) };
}

export const SHELVE_STEPS = {
  'shelve-snapshot': shelveSnapshot,
  'shelve-offload': shelveOffload,
  'shelve-rollback': shelveRollback,
  'unshelve-schedule': unshelveSchedule,
  'unshelve-network': unshelveNetwork,
  'unshelve-block-devices': unshelveBlockDevices,
  'unshelve-spawn': unshelveSpawn,
  'unshelve-rollback': unshelveRollback,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;
