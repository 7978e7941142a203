/**
 * What several flows do with a server's block devices: which BDMs are volumes, the driver's view of
 * the connected ones, Nova's `_prep_block_device` (attachment update + complete for one host) and
 * `_terminate_volume_connections` (an empty attachment in place of a connected one), device names.
 * Every attachment made here has an id derived from the operation and step, recorded before it is made.
 */
import { BadRequest } from '../../core/errors.js';
import { ROOT_DEVICE_NAME, type BlockDeviceSpec } from '../../drivers/compute/driver.js';
import { attachmentComplete, attachmentCreate, attachmentDelete, attachmentGet, attachmentUpdate, hostConnector } from '../cinder.js';
import { recordAttachmentIntents, updateOp, type StepState } from '../engine.js';
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
 * `_prep_block_device` for one host: per volume BDM, attachment_update with the host's connector,
 * then the connection_info saved on the BDM, then attachment_complete. A BDM without an attachment
 * gets one made empty first, under an id `step` derives and records before (one write for all of
 * them): a re-run finds it. Idempotent: an attachment already connected to this host is updated
 * again (Cinder's update is idempotent for the same host).
 */
export async function connectVolumes(s: StepState, host: string, step: string, options: { onlyBdm?: string } = {}): Promise<StepState> {
  const targets = s.bdms.filter((b) => b.destinationType === 'volume' && b.volumeId && (!options.onlyBdm || b.uuid === options.onlyBdm));
  const unattached = targets.filter((b) => !b.attachmentId).map((b) => b.uuid);
  let state = s;
  let intents: Record<string, string> = {};
  if (unattached.length) ({ s: state, ids: intents } = await recordAttachmentIntents(state, 'newAttachments', step, unattached));
  for (const bdm of targets) {
    let attachmentId = bdm.attachmentId;
    if (!attachmentId) {
      attachmentId = intents[bdm.uuid]!;
      await attachmentCreate(attachmentId, bdm.volumeId!, state.instance.uuid);
    }
    const connected = await attachmentUpdate(attachmentId, hostConnector(host, bdm.deviceName), bdm.deviceName);
    state = await updateOp(state, ({ bdms }) => ({
      putBdms: bdms.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, attachmentId, connectionInfo: connected.connectionInfo, updatedAt: now() })),
    }));
    await attachmentComplete(attachmentId);
  }
  return state;
}

/**
 * `_terminate_volume_connections` for one BDM: an empty attachment (its id derived from `step`
 * and recorded in `holds[field]` with the one it replaces, before it is made), BDM = new,
 * attachment_delete(old). A BDM already on its recorded attachment is done: only the delete of
 * the one it replaced is repeated (a crash may have come between; 404 is done).
 */
export async function terminateConnection(s: StepState, bdmUuid: string, step: string, field: 'newAttachments' | 'rollbackAttachments' = 'newAttachments'): Promise<StepState> {
  const before = s.bdms.find((b) => b.uuid === bdmUuid)!;
  const recorded = s.op.holds[field]?.[bdmUuid];
  if (recorded && before.attachmentId === recorded) {
    const replaced = s.op.holds.replacedAttachments?.[recorded];
    if (replaced) await attachmentDelete(replaced);
    return s;
  }
  const { s: intended, ids } = await recordAttachmentIntents(s, field, step, [bdmUuid]);
  const id = ids[bdmUuid]!;
  await attachmentCreate(id, before.volumeId!, s.instance.uuid);
  const state = await updateOp(intended, ({ bdms }) => ({ putBdms: bdms.filter((b) => b.uuid === bdmUuid).map((b) => ({ ...b, attachmentId: id, connectionInfo: null, updatedAt: now() })) }));
  if (before.attachmentId) await attachmentDelete(before.attachmentId);
  return state;
}

/**
 * Deletes an attachment an intent recorded but that may never have been made (a crash between
 * the record and the create): asked first, so a rollback makes no delete call for what is not there.
 */
export async function deleteIntendedAttachment(attachmentId: string): Promise<void> {
  if (await attachmentGet(attachmentId)) await attachmentDelete(attachmentId);
}
