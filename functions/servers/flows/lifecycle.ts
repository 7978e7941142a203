/**
 * Boot, delete, stop, start and hard reboot: the steps of server-create, server-delete and
 * server-power (statemachines/server-*.asl.json).
 *
 * Boot (conductor schedule_and_build_instances + compute _build_and_run_instance):
 *   schedule (claim on a host) -> network (port, binding on the host) -> block-devices (per volume
 *   BDM: attachment_create (empty) recorded first, attachment_update with the host connector,
 *   attachment_complete) -> spawn (root disk from the S3 image, or the boot volume) -> ACTIVE.
 *   Any failure: create-rollback destroys the guest, deletes the attachments, ports and the
 *   allocation, and leaves the instance ERROR with a fault (Nova's build failure without reschedule).
 *
 * Delete (_shutdown_instance): destroy the guest (unless its host is down), attachment_delete per
 * volume BDM (the volume deleted too when delete_on_termination), ports, every allocation the
 * instance or its migrations hold, then the records.
 */
import { POWER_STATE, type BlockDeviceSpec } from '../../drivers/compute/driver.js';
import { logger } from '../../core/logger.js';
import { startVolumeExecution } from '../../volumes/routes.js';
import { getVolume, updateVolume } from '../../volumes/repo.js';
import { attachmentComplete, attachmentCreate, attachmentDelete, attachmentUpdate } from '../cinder.js';
import { driverOfHost, endOperation, faultOf, loadStep, reasonOf, updateOp, withEvent, type ServerStepInput, type StepState } from '../engine.js';
import { getImage, imageSourceFor } from '../images.js';
import { hostConnector, type BlockDeviceMapping, type Instance } from '../model.js';
import { bindPortToHost, createPort, deletePortsOf } from '../network.js';
import { allocationsOf, hardDeleteServer, listMigrations, releaseAll } from '../repo.js';
import { scheduleAndClaim } from '../scheduler.js';
import { SANDBOX_NETWORK } from '../../compute/seed.js';

const now = () => new Date().toISOString();

export const isVolumeBacked = (i: Pick<Instance, 'imageRef'>) => i.imageRef === '';

/** The driver's view of the volume BDMs that are connected (have connection_info). */
export function blockDeviceSpecs(bdms: readonly BlockDeviceMapping[]): BlockDeviceSpec[] {
  return bdms
    .filter((b) => b.destinationType === 'volume' && b.connectionInfo && b.deviceName)
    .map((b) => ({ mountpoint: b.deviceName!, connectionInfo: b.connectionInfo!, volumeId: b.volumeId ?? undefined }));
}

/**
 * `_prep_block_device` for one host: per volume BDM, attachment_update with the host's connector
 * (the attachment is created empty first if the BDM has none, recorded before), then the
 * connection_info saved on the BDM, then attachment_complete. Idempotent: an attachment already
 * connected to this host is updated again (Cinder's update is idempotent for the same host).
 */
export async function connectVolumes(s: StepState, host: string, options: { onlyBdm?: string } = {}): Promise<StepState> {
  let state = s;
  for (const bdm of state.bdms.filter((b) => b.destinationType === 'volume' && b.volumeId && (!options.onlyBdm || b.uuid === options.onlyBdm))) {
    let attachmentId = bdm.attachmentId;
    if (!attachmentId) {
      const created = await attachmentCreate(bdm.volumeId!, state.instance.uuid);
      attachmentId = created.id;
      state = await updateOp(state, ({ bdms }) => ({ putBdms: bdms.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, attachmentId, updatedAt: now() })) }));
    }
    const connected = await attachmentUpdate(attachmentId, hostConnector(host, bdm.deviceName), bdm.deviceName);
    state = await updateOp(state, ({ bdms }) => ({
      putBdms: bdms.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, attachmentId, connectionInfo: connected.connectionInfo, updatedAt: now() })),
    }));
    await attachmentComplete(attachmentId);
  }
  return state;
}

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

async function createNetwork(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const host = s.instance.host!;
  const portId = (s.op.params.portId as string | undefined) ?? s.instance.uuid;
  const port = await createPort({ networkId: (s.op.params.networkId as string | undefined) ?? SANDBOX_NETWORK.id, instanceUuid: s.instance.uuid, projectId: s.instance.projectId, portId });
  await bindPortToHost(port.id, host, { active: true });
  await updateOp(s, ({ instance }) => ({ instance: { ...instance, taskState: 'block_device_mapping' } }));
  return { port: port.id };
}

async function createBlockDevices(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  s = await connectVolumes(s, s.instance.host!);
  await updateOp(s, ({ instance }) => ({ instance: { ...instance, taskState: 'spawning' } }));
  return {};
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

/** Build failure: undo what the build made, instance ERROR with a fault, allocation released. */
async function createRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const reason = reasonOf(input.error);
  if (s.instance.host) {
    try {
      await (await driverOfHost(s.instance.host)).destroy(s.instance.uuid);
    } catch (e) {
      logger.error('build rollback: could not destroy the guest; the audit will list it', { serverId: s.instance.uuid, error: e as Error });
      throw e;
    }
  }
  for (const bdm of s.bdms) if (bdm.attachmentId) await attachmentDelete(bdm.attachmentId);
  await deletePortsOf(s.instance.uuid);
  await releaseAll(s.instance.uuid);
  await endOperation(s, ({ instance, bdms }) => ({
    instance: { ...instance, vmState: 'error', taskState: null, powerState: POWER_STATE.NOSTATE, fault: faultOf(reason) },
    putBdms: bdms.filter((b) => b.attachmentId).map((b) => ({ ...b, attachmentId: null, connectionInfo: null, updatedAt: now() })),
  }));
  return { vmState: 'error' };
}

// ---------------------------------------------------------------------------------------------
// server-delete

async function deleteShutdown(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
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

/** delete_on_termination: the volume is deleted like `cinder delete` would (errors logged, as upstream). */
export async function deleteVolumeQuietly(volumeId: string): Promise<void> {
  try {
    const v = await getVolume(volumeId);
    if (!v || v.status === 'deleting') return;
    await updateVolume(volumeId, { type: 'begin-delete', at: now() });
    await startVolumeExecution('volume-delete', volumeId, async () => {
      await updateVolume(volumeId, { type: 'reset-status', at: now(), status: 'available' });
    });
  } catch (e) {
    logger.error('could not delete a delete_on_termination volume', { volumeId, error: e as Error });
  }
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
// server-power: stop, start, reboot (one step each)

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
    default:
      throw new Error(`server-power cannot run ${s.op.kind}`);
  }
  return {};
}

/** A failed power action leaves the vm_state as it was (reverts_task_state) with a fault. */
async function powerRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
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

