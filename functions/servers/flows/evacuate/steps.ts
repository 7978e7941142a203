/**
 * The steps of server-evacuate (reference §2.1 row Evacuate; trace vol_test_08): conductor
 * rebuild_instance + the destination compute's rebuild_instance(recreate); the API half is api.ts,
 * the source's clean-up once it comes back is host-restart.ts.
 *
 * Machine server-evacuate (conductor rebuild_instance + dest compute rebuild_instance(recreate)):
 *   schedule (claim for the instance on another host of the cell; migration `pre-migrating`) ->
 *   network (dest port binding, activated) -> block-devices (`detach_block_devices`: per volume BDM
 *   attachment_create empty, BDM = new, attachment_delete(old) with no driver detach since the source
 *   is down; then `_prep_block_device`: attachment_update(dest connector) + attachment_complete) ->
 *   spawn (driver.spawnEvacuated, task `rebuild_spawning`) -> finish (host = dest, source binding and
 *   source allocation dropped, migration `done` in the same write as the instance).
 * Failures: before a destination was claimed, vm_state kept and migration `failed`; after, the dest
 *   guest, binding and allocation are removed, every switched volume is left with one empty
 *   (reserved, no connector) attachment recorded on its BDM, the instance ERROR, migration `failed`.
 */
import { releaseOn } from '../../../compute/placement.js';
import { POWER_STATE } from '../../../drivers/compute/driver.js';
import { attachmentCreate, attachmentDelete, attachmentGet } from '../../cinder.js';
import { driverOfHost, endOperation, faultOf, loadStep, nodeOfHost, reasonOf, recordAttachmentIntents, updateOp, type ServerStepInput, type StepState } from '../../engine.js';
import { getImage, imageSourceFor } from '../../images.js';
import { finishEvent, startEvent } from '../../instance-actions.js';
import { getMigration, migrationPutItem, updateMigration } from '../../migrations.js';
import { activatePortBinding, bindPortToHost, deletePortBinding, listPortsOf } from '../../network.js';
import { scheduleAndClaim } from '../../scheduler.js';
import { blockDeviceSpecs, connectVolumes, deleteIntendedAttachment, isVolumeBacked, terminateConnection } from '../block-devices.js';

const now = () => new Date().toISOString();

const REBUILD_EVENT = 'compute_rebuild_instance';

const destOf = (s: StepState) => s.op.params.dest as string | undefined;
const sourceOf = (s: StepState) => s.op.params.source as string;

/** Conductor: schedule on another host of the cell (or the requested one) and claim there for the instance. */
async function evacuateSchedule(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  if (destOf(s)) return { host: destOf(s) };
  await startEvent(s.cell, s.instance.uuid, s.op.requestId, 'rebuild_server', null);
  const chosen = await scheduleAndClaim({
    flavor: s.instance.flavor,
    consumer: s.instance.uuid,
    volumeBacked: isVolumeBacked(s.instance),
    host: s.op.params.host as string | undefined,
    ignoreHosts: [sourceOf(s)],
    cellUuid: s.cell.uuid,
  });
  // The claim is found again by node (allocationsOf the instance on a node other than the source's).
  await updateOp(s, ({ instance, op }) => ({ instance: { ...instance, operation: { ...op, params: { ...op.params, dest: chosen.node.host, destNode: chosen.node.hypervisorHostname } } } }));
  await updateMigration(s.cell, s.op.migrationUuid!, { status: 'pre-migrating', destCompute: chosen.node.host, destNode: chosen.node.hypervisorHostname, destHost: chosen.node.host });
  await finishEvent(s.cell, s.instance.uuid, s.op.requestId, 'rebuild_server');
  return { host: chosen.node.host };
}

/** Dest compute: the ports get (and activate) a binding on the destination; the source's stays until finish. */
async function evacuateNetwork(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const dest = destOf(s)!;
  await startEvent(s.cell, s.instance.uuid, s.op.requestId, REBUILD_EVENT, dest);
  if (s.op.holds.boundHost !== dest) s = await updateOp(s, ({ instance, op }) => ({ instance: { ...instance, operation: { ...op, holds: { ...op.holds, boundHost: dest } } } }));
  for (const port of await listPortsOf(s.instance.uuid)) {
    await bindPortToHost(port.id, dest, { active: true });
    await activatePortBinding(port.id, dest);
  }
  return {};
}

/**
 * `detach_block_devices` then `_prep_block_device` on the destination. The new empty attachments'
 * ids are recorded first (one write), each made under its id, then each BDM's switch is recorded
 * (old attachment in holds, BDM = new) before the old one is deleted, so a re-run finds the
 * attachment it made, skips BDMs already switched and only repeats the (404-tolerant) delete.
 */
async function evacuateBlockDevices(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const dest = destOf(s)!;
  const volumes = s.bdms.filter((b) => b.destinationType === 'volume' && b.volumeId);
  const intended = await recordAttachmentIntents(s, 'newAttachments', 'evacuate-block-devices', volumes.map((b) => b.uuid));
  s = intended.s;
  for (const bdm of volumes) {
    const old = s.op.holds.oldAttachments?.[bdm.uuid];
    if (old !== undefined) {
      if (old) await attachmentDelete(old);
      continue;
    }
    const id = intended.ids[bdm.uuid]!;
    await attachmentCreate(id, bdm.volumeId!, s.instance.uuid);
    s = await updateOp(s, ({ instance, op, bdms }) => ({
      instance: { ...instance, operation: { ...op, holds: { ...op.holds, oldAttachments: { ...op.holds.oldAttachments, [bdm.uuid]: bdm.attachmentId ?? '' } } } },
      putBdms: bdms.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, attachmentId: id, connectionInfo: null, updatedAt: now() })),
    }));
    // _detach_volume(destroy_bdm=False): the driver detach is skipped (the source host is down).
    if (bdm.attachmentId) await attachmentDelete(bdm.attachmentId);
  }
  s = await connectVolumes(s, dest, 'evacuate-block-devices');
  await updateOp(s, ({ instance }) => ({ instance: { ...instance, taskState: 'rebuild_spawning' } }));
  return {};
}

/** driver.spawnEvacuated on the destination: the image from S3 (image-backed) or the boot volume. */
async function evacuateSpawn(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const dest = destOf(s)!;
  if (s.op.holds.destGuest !== dest) s = await updateOp(s, ({ instance, op }) => ({ instance: { ...instance, operation: { ...op, holds: { ...op.holds, destGuest: dest } } } }));
  const image = isVolumeBacked(s.instance) ? undefined : await getImage(s.instance.imageRef);
  const stopped = s.op.params.oldVmState === 'stopped';
  await (await driverOfHost(dest)).spawnEvacuated(
    {
      uuid: s.instance.uuid,
      flavor: s.instance.flavor,
      ...(image ? { image: imageSourceFor(image), imageRef: image.id } : {}),
      blockDevices: blockDeviceSpecs(s.bdms),
      powerOn: !stopped,
    },
    // The API accepted the evacuation because the source's service is down: forced down is the
    // operator fencing the host, so the driver treats it as down even if it still seems to answer.
    { host: sourceOf(s), down: true },
  );
  return {};
}

/** rt.finish_evacuation: host = dest; the source's binding and allocation dropped; migration `done` with the instance. */
async function evacuateFinish(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const dest = destOf(s)!;
  const source = sourceOf(s);
  for (const port of await listPortsOf(s.instance.uuid)) await deletePortBinding(port.id, source);
  // Nova keeps the source allocation until the source compute restarts; a dead host's claim only
  // blocks capacity nobody can use, so Ferry drops it now (docs/compat-evacuate-shelve.md).
  await releaseOn((await nodeOfHost(source)).node.uuid, s.instance.uuid);
  const migration = (await getMigration(s.cell, s.op.migrationUuid!))!;
  const stopped = s.op.params.oldVmState === 'stopped';
  await endOperation(s, ({ instance }) => ({
    instance: {
      ...instance,
      host: dest,
      node: (s.op.params.destNode as string | undefined) ?? dest,
      vmState: stopped ? 'stopped' : 'active',
      taskState: null,
      powerState: stopped ? POWER_STATE.SHUTDOWN : POWER_STATE.RUNNING,
      launchedAt: now(),
    },
    extra: [migrationPutItem(s.cell, { ...migration, status: 'done', updatedAt: now() })],
  }));
  await finishEvent(s.cell, s.instance.uuid, s.op.requestId, REBUILD_EVENT);
  return { host: dest };
}

/**
 * The BDMs this evacuation switched get one empty attachment each (create empty, then delete the
 * one connected to the destination), so Cinder shows exactly the attachment the BDM records, with
 * no connector: the server can be evacuated again. BDMs not reached yet keep their attachment.
 */
async function resetSwitchedVolumes(s: StepState): Promise<StepState> {
  let state = s;
  // Attachments the block-devices step intended for BDMs it had not switched yet: made or not.
  for (const bdm of state.bdms) {
    const intended = state.op.holds.newAttachments?.[bdm.uuid];
    if (intended && state.op.holds.oldAttachments?.[bdm.uuid] === undefined && bdm.attachmentId !== intended) await deleteIntendedAttachment(intended);
  }
  for (const bdm of state.bdms.filter((b) => b.destinationType === 'volume' && b.volumeId && state.op.holds.oldAttachments?.[b.uuid] !== undefined)) {
    const old = state.op.holds.oldAttachments![bdm.uuid];
    // The old attachment is deleted right after the switch is recorded; a crash in between leaves it.
    if (old && (await attachmentGet(old))) await attachmentDelete(old);
    if (!bdm.attachmentId) continue;
    const current = await attachmentGet(bdm.attachmentId);
    if (current && current.status === 'reserved' && !bdm.connectionInfo) continue;
    state = await terminateConnection(state, bdm.uuid, 'evacuate-rollback', 'rollbackAttachments');
  }
  return state;
}
async function evacuateRollback(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const reason = reasonOf(input.error);
  const dest = destOf(s);
  if (!dest) {
    // No destination (NoValidHost, claim failure): InstanceFaultRollback keeps the vm_state.
    await updateMigration(s.cell, s.op.migrationUuid!, { status: 'failed' });
    await finishEvent(s.cell, s.instance.uuid, s.op.requestId, 'rebuild_server', { message: reason });
    await endOperation(s, ({ instance }) => ({ instance: { ...instance, taskState: null, fault: faultOf(reason, 400) } }));
    return { vmState: s.instance.vmState };
  }
  if (s.op.holds.destGuest) await (await driverOfHost(dest)).destroy(s.instance.uuid);
  s = await resetSwitchedVolumes(s);
  if (s.op.holds.boundHost) {
    for (const port of await listPortsOf(s.instance.uuid)) {
      if (port.bindings[sourceOf(s)]) await activatePortBinding(port.id, sourceOf(s));
      await deletePortBinding(port.id, dest);
    }
  }
  await releaseOn((await nodeOfHost(dest)).node.uuid, s.instance.uuid);
  await updateMigration(s.cell, s.op.migrationUuid!, { status: 'failed' });
  await finishEvent(s.cell, s.instance.uuid, s.op.requestId, REBUILD_EVENT, { message: reason });
  await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'error', taskState: null, fault: faultOf(reason) } }));
  return { vmState: 'error' };
}

export const EVACUATE_STEPS = {
  'evacuate-schedule': evacuateSchedule,
  'evacuate-network': evacuateNetwork,
  'evacuate-block-devices': evacuateBlockDevices,
  'evacuate-spawn': evacuateSpawn,
  'evacuate-finish': evacuateFinish,
  'evacuate-rollback': evacuateRollback,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;
