/**
 * Boot, delete, stop, start and hard reboot: the steps of server-create, server-delete and
 * server-power (statemachines/server-*.asl.json); the API half is api.ts.
 *
 * Boot (conductor schedule_and_build_instances + compute _build_and_run_instance):
 *   schedule (claim on a host) -> network (port, binding on the host) -> block-devices (per volume
 *   BDM: attachment_create (empty) recorded first, attachment_update with the host connector,
 *   attachment_complete) -> spawn (root disk from the S3 image, or the boot volume) -> ACTIVE.
 *   Any failure: create-rollback undoes each step in reverse (each undo sits beside its step): the
 *   guest destroyed, the attachments deleted, the ports deleted, the allocation released; the
 *   instance ERROR with a fault (Nova's build failure without reschedule).
 *
 * Delete (_shutdown_instance): destroy the guest (unless its host is down), attachment_delete per
 * volume BDM (the volume deleted too when delete_on_termination), ports, every allocation the
 * instance or its migrations hold, then the records.
 */
import { allocationsOf, releaseAll } from '../../../compute/placement.js';
import { InvariantViolation } from '../../../core/errors.js';
import { logger } from '../../../core/logger.js';
import { POWER_STATE } from '../../../drivers/compute/driver.js';
import { SANDBOX_NETWORK } from '../../../compute/seed.js';
import { attachmentDelete } from '../../cinder.js';
import { driverOfHost, endOperation, faultOf, loadStep, reasonOf, updateOp, withEvent, type ServerStepInput, type StepState } from '../../engine.js';
import { getImage, imageSourceFor } from '../../images.js';
import { listMigrations } from '../../migrations.js';
import { bindPortToHost, createPort, deletePortsOf } from '../../network.js';
import { hardDeleteServer } from '../../repo.js';
import { scheduleAndClaim } from '../../scheduler.js';
import { blockDeviceSpecs, connectVolumes, deleteIntendedAttachment, isVolumeBacked } from '../block-devices.js';
import { deleteVolumeQuietly } from '../../volume-cleanup.js';
import { confirmCrossCellFirst } from '../cross-cell/confirm-steps.js';

const now = () => new Date().toISOString();

// ---------------------------------------------------------------------------------------------
// server-create

async function createSchedule(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  if (s.instance.host) return { host: s.instance.host };
  const requested = s.op.params.host as string | undefined;
  const chosen = await scheduleAndClaim({
    flavor: s.instance.flavor,
    consumer: s.instance.uuid,
    volumeBacked: isVolumeBacked(s.instance),
    host: requested,
    // The API put the instance in a cell (its table); it is placed on a host of that cell.
    cellUuid: s.cell.uuid,
    availabilityZone: s.instance.availabilityZone,
  });
  await updateOp(s, ({ instance }) => ({ instance: { ...instance, host: chosen.node.host, node: chosen.node.hypervisorHostname, taskState: 'networking' } }));
  return { host: chosen.node.host };
}

/** Undoes createSchedule: the claim released. */
async function undoCreateSchedule(s: StepState): Promise<void> {
  await releaseAll(s.instance.uuid);
}

async function createNetwork(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const host = s.instance.host!;
  const portId = (s.op.params.portId as string | undefined) ?? s.instance.uuid;
  const port = await createPort({ networkId: (s.op.params.networkId as string | undefined) ?? SANDBOX_NETWORK.id, instanceUuid: s.instance.uuid, projectId: s.instance.projectId, portId });
  await bindPortToHost(port.id, host, { active: true });
  await updateOp(s, ({ instance }) => ({ instance: { ...instance, taskState: 'block_device_mapping' } }));
  return { port: port.id };
}

/** Undoes createNetwork: the server's ports deleted. */
async function undoCreateNetwork(s: StepState): Promise<void> {
  await deletePortsOf(s.instance.uuid);
}

async function createBlockDevices(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  s = await connectVolumes(s, s.instance.host!, 'create-block-devices');
  await updateOp(s, ({ instance }) => ({ instance: { ...instance, taskState: 'spawning' } }));
  return {};
}

/**
 * Undoes createBlockDevices: every attachment a BDM records is deleted, and one recorded as an
 * intent that no BDM records yet if it was made (the BDMs are cleared when the operation ends).
 */
async function undoCreateBlockDevices(s: StepState): Promise<void> {
  for (const bdm of s.bdms) if (bdm.attachmentId) await attachmentDelete(bdm.attachmentId);
  const onBdms = new Set(s.bdms.map((b) => b.attachmentId));
  for (const id of Object.values(s.op.holds.newAttachments ?? {})) if (!onBdms.has(id)) await deleteIntendedAttachment(id);
}

async function createSpawn(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const host = s.instance.host!;
  const driver = await driverOfHost(host);
  const image = isVolumeBacked(s.instance) ? undefined : await getImage(s.instance.imageRef);
  await withEvent(s, 'compute_build_and_run_instance', host, () =>
    driver.spawn({
      uuid: s.instance.uuid,
      flavor: s.instance.flavor,
      ...(image ? { image: imageSourceFor(image), imageRef: image.id } : {}),
      blockDevices: blockDeviceSpecs(s.bdms),
      powerOn: true,
    }),
  );
  await endOperation(s, ({ instance }) => ({
    instance: { ...instance, vmState: 'active', taskState: null, powerState: POWER_STATE.RUNNING, launchedAt: now(), progress: 0 },
  }));
  return {};
}

/** Undoes createSpawn: the guest (or what a failed spawn left) destroyed on the host. */
async function undoCreateSpawn(s: StepState): Promise<void> {
  if (!s.instance.host) return;
  try {
    await (await driverOfHost(s.instance.host)).destroy(s.instance.uuid);
  } catch (e) {
    logger.error('build rollback: could not destroy the guest; the audit will list it', { serverId: s.instance.uuid, error: e as Error });
    throw e;
  }
}

/** Build failure: every step undone in reverse, instance ERROR with a fault. */
async function createRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const reason = reasonOf(input.error);
  await undoCreateSpawn(s);
  await undoCreateBlockDevices(s);
  await undoCreateNetwork(s);
  await undoCreateSchedule(s);
  await endOperation(s, ({ instance, bdms }) => ({
    instance: { ...instance, vmState: 'error', taskState: null, powerState: POWER_STATE.NOSTATE, fault: faultOf(reason) },
    putBdms: bdms.filter((b) => b.attachmentId).map((b) => ({ ...b, attachmentId: null, connectionInfo: null, updatedAt: now() })),
  }));
  return { vmState: 'error' };
}

// ---------------------------------------------------------------------------------------------
// server-delete (its rollback keeps what is left and marks the server ERROR: a delete is retried, not undone)

async function deleteShutdown(input: ServerStepInput): Promise<unknown> {
  // Delete while VERIFY_RESIZE after a cross-cell resize confirms it first (trace xcell_g).
  const s = await confirmCrossCellFirst(await loadStep(input));
  await withEvent(s, 'compute_terminate_instance', s.instance.host, async () => {
    // Every host the guest may be on: its host, and a move's other end (a kept source or a destination).
    const hosts = new Set<string>();
    if (s.instance.host) hosts.add(s.instance.host);
    for (const h of [s.instance.systemMetadata.move_source, s.instance.systemMetadata.move_dest]) if (h) hosts.add(h);
    for (const host of hosts) {
      const driver = await driverOfHost(host);
      const info = await driver.getHostInfo();
      // A down host cannot be reached; its guest is destroyed when it comes back (the audit lists it meanwhile).
      if (info.up) await driver.destroy(s.instance.uuid);
    }
  });
  return {};
}

async function deleteVolumes(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  for (const bdm of s.bdms.filter((b) => b.destinationType === 'volume')) {
    if (bdm.attachmentId) await attachmentDelete(bdm.attachmentId);
    if (bdm.deleteOnTermination && bdm.volumeId) await deleteVolumeQuietly(bdm.volumeId);
    s = await updateOp(s, () => ({ deleteBdms: [bdm.uuid] }));
  }
  return {};
}

async function deleteFinish(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  await deletePortsOf(s.instance.uuid);
  await releaseAll(s.instance.uuid);
  for (const { migration } of (await listMigrations()).filter((m) => m.migration.instanceUuid === s.instance.uuid)) await releaseAll(migration.uuid);
  for (const leftover of await allocationsOf(s.instance.uuid)) logger.warn('allocation left after delete', { ...leftover });
  await hardDeleteServer(s.cell, s.instance.uuid);
  return { deleted: true };
}

async function deleteRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'error', taskState: null, fault: faultOf(reasonOf(input.error)) } }));
  return { vmState: 'error' };
}

// ---------------------------------------------------------------------------------------------
// server-power: stop, start, reboot, pause, unpause, suspend, resume, rebuild (one step each)

async function powerStep(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const host = s.instance.host!;
  const driver = await driverOfHost(host);
  switch (s.op.kind) {
    case 'stop':
      await withEvent(s, 'compute_stop_instance', host, () => driver.powerOff(s.instance.uuid));
      await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'stopped', taskState: null, powerState: POWER_STATE.SHUTDOWN } }));
      break;
    case 'start':
      await withEvent(s, 'compute_start_instance', host, () => driver.powerOn(s.instance.uuid));
      await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'active', taskState: null, powerState: POWER_STATE.RUNNING } }));
      break;
    case 'reboot':
      await withEvent(s, 'compute_reboot_instance', host, () => driver.reboot(s.instance.uuid, 'HARD'));
      await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'active', taskState: null, powerState: POWER_STATE.RUNNING } }));
      break;
    // Nova's manager: the driver call under the action's event, then vm_state and power_state in one save.
    case 'pause':
      await withEvent(s, 'compute_pause_instance', host, () => driver.pause(s.instance.uuid));
      await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'paused', taskState: null, powerState: POWER_STATE.PAUSED } }));
      break;
    case 'unpause':
      await withEvent(s, 'compute_unpause_instance', host, () => driver.unpause(s.instance.uuid));
      await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'active', taskState: null, powerState: POWER_STATE.RUNNING } }));
      break;
    case 'suspend':
      await withEvent(s, 'compute_suspend_instance', host, () => driver.suspend(s.instance.uuid));
      await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'suspended', taskState: null, powerState: POWER_STATE.SUSPENDED } }));
      break;
    case 'resume':
      await withEvent(s, 'compute_resume_instance', host, () => driver.resume(s.instance.uuid));
      await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'active', taskState: null, powerState: POWER_STATE.RUNNING } }));
      break;
    case 'rebuild':
      await rebuildGuest(s, host);
      break;
    default:
      // Only the power actions start server-power (api.ts): another kind here is a broken operation record.
      throw new InvariantViolation(`server-power cannot run ${s.op.kind}`);
  }
  return {};
}

/**
 * Rebuild (compute manager _do_rebuild_instance, image-backed only: the API refuses the rest):
 * the guest destroyed (its volumes disconnected on the host) and spawned again from the new image
 * with the same block devices, powered on unless it was stopped. Both calls are idempotent under
 * the instance's uuid, so a re-run after a crash in between finishes the job.
 */
async function rebuildGuest(s: StepState, host: string): Promise<void> {
  const driver = await driverOfHost(host);
  const image = await getImage(s.instance.imageRef);
  const stopped = s.op.params.oldVmState === 'stopped';
  await withEvent(s, 'compute_rebuild_instance', host, async () => {
    await driver.destroy(s.instance.uuid);
    await driver.spawn({ uuid: s.instance.uuid, flavor: s.instance.flavor, image: imageSourceFor(image), imageRef: image.id, blockDevices: blockDeviceSpecs(s.bdms), powerOn: !stopped });
  });
  await endOperation(s, ({ instance }) => ({
    instance: { ...instance, vmState: stopped ? 'stopped' : 'active', taskState: null, powerState: stopped ? POWER_STATE.SHUTDOWN : POWER_STATE.RUNNING, launchedAt: now(), progress: 0 },
  }));
}

/**
 * A failed power action leaves the vm_state as it was (reverts_task_state) with a fault; a failed
 * rebuild may have destroyed the guest, so it is ERROR (as Nova's rebuild failure), with what the
 * spawn left destroyed.
 */
async function powerRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  if (s.op.kind === 'rebuild') {
    await undoCreateSpawn(s);
    await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'error', taskState: null, powerState: POWER_STATE.NOSTATE, fault: faultOf(reasonOf(input.error)) } }));
    return {};
  }
  await endOperation(s, ({ instance }) => ({ instance: { ...instance, taskState: null, fault: faultOf(reasonOf(input.error)) } }));
  return {};
}

export const LIFECYCLE_STEPS = {
  'create-schedule': createSchedule,
  'create-network': createNetwork,
  'create-block-devices': createBlockDevices,
  'create-spawn': createSpawn,
  'create-rollback': createRollback,
  'delete-shutdown': deleteShutdown,
  'delete-volumes': deleteVolumes,
  'delete-finish': deleteFinish,
  'delete-rollback': deleteRollback,
  power: powerStep,
  'power-rollback': powerRollback,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;
