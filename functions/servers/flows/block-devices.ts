/**
 * What several flows do with a server's block devices: which BDMs are volumes, the driver's view of
 * the connected ones, Nova's `_prep_block_device` (attachment update + complete for one host) and
 * `_terminate_volume_connections` (an empty attachment in place of a connected one), device names,
 * and a delete_on_termination volume's delete.
 */
import { logger } from '../../core/logger.js';
import { BadRequest } from '../../core/errors.js';
import { ROOT_DEVICE_NAME, type BlockDeviceSpec } from '../../drivers/compute/driver.js';
import { startVolumeExecution } from '../../volumes/create.js';
import { getVolume, updateVolume } from '../../volumes/repo.js';
import { attachmentComplete, attachmentCreate, attachmentDelete, attachmentUpdate, hostConnector } from '../cinder.js';
import { updateOp, type StepState } from '../engine.js';
import type { BlockDeviceMapping, Instance } from '../model.js';

const now = () => new Date().toISOString();

export const isVolumeBacked = (i: Pick<Instance, 'imageRef'>) => i.imageRef === '';

/** The BDMs that are Cinder volumes. */
export const volumeBdms = (bdms: readonly BlockDeviceMapping[]) => bdms.filter((b) => b.destinationType === 'volume' && b.volumeId);

/** The driver's view of the volume BDMs that are connected (have connection_info). */
export function blockDeviceSpecs(bdms: readonly BlockDeviceMapping[]): BlockDeviceSpec[] {
  return bdms
    .filter((b) => b.destinationType === 'volume' && b.connectionInfo && b.deviceName)
    .map((b) => ({ mountpoint: b.deviceName!, connectionInfo: b.connectionInfo!, volumeId: b.volumeId ?? undefined }));
}

/** The next free /dev/vdX after the ones the server's BDMs use (reserve_block_device_name). */
export function nextDeviceName(bdms: readonly BlockDeviceMapping[]): string {
  const used = new Set(bdms.map((b) => b.deviceName).filter(Boolean));
  used.add(ROOT_DEVICE_NAME);
  for (let c = 'b'.charCodeAt(0); c <= 'z'.charCodeAt(0); c++) {
    const name = `/dev/vd${String.fromCharCode(c)}`;
    if (!used.has(name)) return name;
  }
  throw new BadRequest('The maximum allowed number of disk devices (26) to attach to a single instance has been exceeded.');
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

/** `_terminate_volume_connections` for one BDM: attachment_create (empty), BDM = new, attachment_delete(old). */
export async function terminateConnection(s: StepState, bdm: BlockDeviceMapping): Promise<StepState> {
  const created = await attachmentCreate(bdm.volumeId!, s.instance.uuid);
  const state = await updateOp(s, ({ bdms }) => ({ putBdms: bdms.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, attachmentId: created.id, connectionInfo: null, updatedAt: now() })) }));
  if (bdm.attachmentId) await attachmentDelete(bdm.attachmentId);
  return state;
}

/**
 * delete_on_termination: the volume is deleted like `cinder delete` would. Upstream logs and
 * ignores a failure here (the server's delete goes on); so does Ferry, naming the volume left.
 */
export async function deleteVolumeQuietly(volumeId: string): Promise<void> {
  try {
    const v = await getVolume(volumeId);
    if (!v || v.status === 'deleting') return;
    await updateVolume(volumeId, { type: 'begin-delete', at: now() });
    await startVolumeExecution('volume-delete', volumeId, async () => {
      await updateVolume(volumeId, { type: 'reset-status', at: now(), status: 'available' });
    });
  } catch (e) {
    logger.error('could not delete a delete_on_termination volume; it is left as it is', { volumeId, error: e as Error });
  }
}
