/**
 * Volume attach, detach and swap (reference §2.1 rows Attach, Detach, the SHELVED_OFFLOADED
 * variants, Swap volume): the API half (checks, BDM, attachment_create / begin_detaching, the
 * action) and the compute half (the steps of server-attach-volume, server-detach-volume,
 * server-swap-volume).
 */
import { randomUUID } from 'node:crypto';
import type { AuthContext } from '../../core/auth.js';
import { BadRequest, NotFound } from '../../core/errors.js';
import { logger } from '../../core/logger.js';
import { ROOT_DEVICE_NAME } from '../../drivers/compute/driver.js';
import type { Volume } from '../../volumes/model.js';
import { getVolume } from '../../volumes/repo.js';
import { attachmentComplete, attachmentCreate, attachmentDelete, attachmentUpdate, beginDetaching, rollDetaching, volumeGet } from '../cinder.js';
import { assertState, beginOperation, driverOfHost, endOperation, faultOf, loadStep, reasonOf, recordHolds, updateOp, withEvent, type ServerStepInput } from '../engine.js';
import { hostConnector, type BlockDeviceMapping, type Instance, type VmState } from '../model.js';
import { loadPartition, updateServer, type LoadedServer } from '../repo.js';
import { deleteVolumeQuietly } from './lifecycle.js';

const now = () => new Date().toISOString();

/** check_instance_state of attach_volume / detach_volume (SHELVED ones need 2.20, checked by the route). */
export const ATTACH_VM_STATES: readonly VmState[] = ['active', 'paused', 'stopped', 'resized', 'soft-delete', 'shelved', 'shelved_offloaded'];
export const SWAP_VM_STATES: readonly VmState[] = ['active', 'paused', 'resized'];

const DEVICE_PATTERN = /^\/dev\/x?[a-z]?d?[a-z]+\d*$/;

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

const volumeNotFound = (id: string) => new NotFound(`Volume ${id} could not be found.`);

async function visibleVolume(auth: AuthContext, volumeId: string): Promise<Volume> {
  const v = await volumeGet(volumeId);
  if (!v || (!auth.isAdmin && v.projectId !== auth.projectId)) throw volumeNotFound(volumeId);
  return v;
}

/** `_check_volume_already_attached`: a non-multiattach volume with attachments, or one on this server. */
function checkNotAttached(volume: Volume, instance: Instance, bdms: readonly BlockDeviceMapping[]): void {
  if (bdms.some((b) => b.volumeId === volume.id)) throw new BadRequest(`Invalid volume: volume ${volume.id} already attached`);
  if (!volume.multiattach && Object.keys(volume.attachments).length > 0) throw new BadRequest(`Invalid volume: volume ${volume.id} already attached`);
  void instance;
}

// ---------------------------------------------------------------------------------------------
// Attach

export interface AttachRequest {
  server: LoadedServer;
  auth: AuthContext;
  requestId: string;
  volumeId: string;
  device: string | null;
  tag: string | null;
  deleteOnTermination: boolean;
}

/** POST /servers/{id}/os-volume_attachments: the BDM, the reserved attachment, the action, the cast. */
export async function attachVolume(r: AttachRequest): Promise<BlockDeviceMapping> {
  if (r.device !== null && !DEVICE_PATTERN.test(r.device)) throw new BadRequest(`The supplied device path (${r.device}) is invalid.`);
  const volume = await visibleVolume(r.auth, r.volumeId);
  const offloaded = r.server.instance.vmState === 'shelved_offloaded';
  if (offloaded && r.tag) throw new BadRequest('Tagged block device attachment is not yet available for shelved-offloaded instances.');
  if (offloaded && volume.multiattach) throw new BadRequest(`Volume ${volume.id} has 'multiattach' set, which is not supported for shelved-offloaded instances.`);
  const bdmUuid = randomUUID();
  let bdm: BlockDeviceMapping | undefined;
  await beginOperation({
    server: r.server,
    auth: r.auth,
    kind: 'attach_volume',
    action: 'attach_volume',
    vmStates: ATTACH_VM_STATES,
    machine: 'server-attach-volume',
    requestId: r.requestId,
    params: { bdmUuid, volumeId: r.volumeId },
    apiOnly: offloaded,
    check: (instance, bdms) => checkNotAttached(volume, instance, bdms),
    change: (instance, bdms) => {
      const at = now();
      bdm = {
        uuid: bdmUuid,
        instanceUuid: instance.uuid,
        sourceType: 'volume',
        destinationType: 'volume',
        volumeId: r.volumeId,
        imageId: null,
        bootIndex: null,
        // Offloaded: no host picks a name; the device is chosen at unshelve (upstream: None).
        deviceName: offloaded ? null : (r.device ?? nextDeviceName(bdms)),
        attachmentId: null,
        connectionInfo: null,
        deleteOnTermination: r.deleteOnTermination,
        tag: r.tag,
        volumeSize: volume.size,
        createdAt: at,
        updatedAt: at,
      };
      if (r.device && bdms.some((b) => b.deviceName === r.device)) throw new BadRequest(`The supplied device path (${r.device}) is in use.`);
      return { putBdms: [bdm] };
    },
    prepare: async (instance) => {
      const att = await attachmentCreate(r.volumeId, instance.uuid);
      await saveBdm(r.server, bdmUuid, { attachmentId: att.id });
      bdm = { ...bdm!, attachmentId: att.id };
      if (offloaded) {
        // api_attach_volume: complete without a connector, so Cinder says in-use (upstream semantics).
        await attachmentComplete(att.id);
      }
    },
    abort: async () => {
      const { bdms } = await loadPartition(r.server.cell, r.server.instance.uuid);
      const mine = bdms.find((b) => b.uuid === bdmUuid);
      if (mine?.attachmentId) await attachmentDelete(mine.attachmentId);
      await updateServer(r.server.cell, r.server.instance.uuid, ({ instance }) => ({ instance, deleteBdms: [bdmUuid] }));
    },
  });
  return bdm!;
}

async function saveBdm(server: LoadedServer, bdmUuid: string, patch: Partial<BlockDeviceMapping>): Promise<void> {
  await updateServer(server.cell, server.instance.uuid, ({ instance, bdms }) => ({
    instance,
    putBdms: bdms.filter((b) => b.uuid === bdmUuid).map((b) => ({ ...b, ...patch, updatedAt: now() })),
  }));
}

/** Compute attach_volume: attachment_update, driver attach (attachment_delete on failure), save, attachment_complete. */
async function attachStep(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const bdm = s.bdms.find((b) => b.uuid === s.op.params.bdmUuid);
  if (!bdm?.attachmentId) throw new Error(`attach: BDM ${String(s.op.params.bdmUuid)} has no attachment`);
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

export interface DetachRequest {
  server: LoadedServer;
  auth: AuthContext;
  requestId: string;
  volumeId: string;
  bdms: BlockDeviceMapping[];
}

function attachedBdm(bdms: readonly BlockDeviceMapping[], serverId: string, volumeId: string): BlockDeviceMapping {
  const bdm = bdms.find((b) => b.volumeId === volumeId && b.destinationType === 'volume');
  if (!bdm) throw new NotFound(`Volume ${volumeId} is not attached to server ${serverId}.`);
  return bdm;
}

/** DELETE /servers/{id}/os-volume_attachments/{volume}: begin_detaching, the action, the cast (API only when offloaded). */
export async function detachVolume(r: DetachRequest): Promise<void> {
  const bdm = attachedBdm(r.bdms, r.server.instance.uuid, r.volumeId);
  if (bdm.bootIndex === 0) throw new BadRequest("Can't detach root device volume");
  const offloaded = r.server.instance.vmState === 'shelved_offloaded';
  await beginOperation({
    server: r.server,
    auth: r.auth,
    kind: 'detach_volume',
    action: 'detach_volume',
    vmStates: ATTACH_VM_STATES,
    machine: 'server-detach-volume',
    requestId: r.requestId,
    params: { bdmUuid: bdm.uuid, volumeId: r.volumeId },
    apiOnly: offloaded,
    prepare: async () => {
      if (offloaded) {
        // api_detach_volume: _local_cleanup_bdm_volumes (errors logged and ignored upstream).
        try {
          if (bdm.attachmentId) await attachmentDelete(bdm.attachmentId);
          if (bdm.deleteOnTermination) await deleteVolumeQuietly(r.volumeId);
        } catch (e) {
          logger.error('offloaded detach: cleanup failed', { volumeId: r.volumeId, error: e as Error });
        }
        await updateServer(r.server.cell, r.server.instance.uuid, ({ instance }) => ({ instance, deleteBdms: [bdm.uuid] }));
        return;
      }
      await beginDetaching(r.volumeId);
    },
  });
}

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

export interface SwapRequest {
  server: LoadedServer;
  auth: AuthContext;
  requestId: string;
  oldVolumeId: string;
  newVolumeId: string;
  bdms: BlockDeviceMapping[];
  deleteOnTermination?: boolean;
}

/** PUT /servers/{id}/os-volume_attachments/{old} with another volumeId: API swap_volume. */
export async function swapVolume(r: SwapRequest): Promise<void> {
  const bdm = attachedBdm(r.bdms, r.server.instance.uuid, r.oldVolumeId);
  const oldVolume = await volumeGet(r.oldVolumeId);
  if (!oldVolume) throw volumeNotFound(r.oldVolumeId);
  const newVolume = await volumeGet(r.newVolumeId);
  if (!newVolume || (!r.auth.isAdmin && newVolume.projectId !== r.auth.projectId)) throw new BadRequest(`Volume ${r.newVolumeId} could not be found.`);
  if (newVolume.status !== 'available') throw new BadRequest(`Invalid volume: Volume ${newVolume.id} status must be available, but current status is: ${newVolume.status}`);
  if (newVolume.size < oldVolume.size) throw new BadRequest('Invalid volume: New volume must be the same size or larger.');
  assertState(r.server.instance, 'swap_volume', SWAP_VM_STATES);
  await beginOperation({
    server: r.server,
    auth: r.auth,
    kind: 'swap_volume',
    action: 'swap_volume',
    vmStates: SWAP_VM_STATES,
    machine: 'server-swap-volume',
    requestId: r.requestId,
    params: { bdmUuid: bdm.uuid, oldVolumeId: r.oldVolumeId, newVolumeId: r.newVolumeId, ...(r.deleteOnTermination !== undefined ? { deleteOnTermination: r.deleteOnTermination } : {}) },
    check: (instance, bdms) => checkNotAttached(newVolume, instance, bdms),
    prepare: async (instance) => {
      await beginDetaching(r.oldVolumeId);
      try {
        const att = await attachmentCreate(r.newVolumeId, instance.uuid);
        await updateServer(r.server.cell, instance.uuid, ({ instance: i }) => ({
          instance: i.operation ? { ...i, operation: { ...i.operation, holds: { ...i.operation.holds, newAttachments: { [bdm.uuid]: att.id } } } } : i,
        }));
      } catch (e) {
        await rollDetaching(r.oldVolumeId);
        throw e;
      }
    },
  });
}

/** Copies a device's bytes to another (the hypervisor's block copy of a swap). */
async function copyDevice(from: { read(p: number, n: number): Promise<Buffer>; sizeBytes: number }, to: { write(p: number, d: Uint8Array): Promise<void>; sizeBytes: number }): Promise<void> {
  const chunk = 4 << 20;
  const zeros = Buffer.alloc(chunk);
  const size = Math.min(from.sizeBytes, to.sizeBytes);
  for (let pos = 0; pos < size; pos += chunk) {
    const data = await from.read(pos, Math.min(chunk, size - pos));
    // Zero chunks are skipped: the new volume reads zeros there already and stays sparse.
    if (!data.equals(zeros.subarray(0, data.length))) await to.write(pos, data);
  }
}

/** Compute _do_swap_volume: update the new attachment, copy and switch the guest, complete, delete the old. */
async function swapStep(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const bdm = s.bdms.find((b) => b.uuid === s.op.params.bdmUuid)!;
  const newAtt = s.op.holds.newAttachments?.[bdm.uuid];
  if (!newAtt) throw new Error('swap: no new attachment recorded');
  const newVolumeId = s.op.params.newVolumeId as string;
  const host = s.instance.host!;
  const driver = await driverOfHost(host);
  await withEvent(s, 'compute_swap_volume', host, async () => {
    const connected = await attachmentUpdate(newAtt, hostConnector(host, bdm.deviceName), bdm.deviceName);
    // driver.swap_volume: copy the old device's bytes to the new volume, then point the guest at it.
    const guestInfo = await driver.getGuest(s.instance.uuid);
    if (guestInfo?.volumes.some((v) => v.mountpoint === bdm.deviceName && v.volumeId === bdm.volumeId)) {
      // os-brick connects the new volume on the host first; the guest is switched after the copy.
      s = await recordHolds(s, (h) => ({ ...h, hostConnections: [...(h.hostConnections ?? []), { host, connectionInfo: connected.connectionInfo! }] }));
      await driver.connectVolume(connected.connectionInfo!);
      const from = await driver.openGuestDevice(s.instance.uuid, bdm.deviceName!);
      const to = await driver.openConnection(connected.connectionInfo!);
      try {
        await copyDevice(from, to);
      } finally {
        await from.close();
        await to.close();
      }
      await driver.detachVolume(s.instance.uuid, bdm.deviceName!);
    }
    await driver.attachVolume(s.instance.uuid, connected.connectionInfo!, bdm.deviceName!, newVolumeId);
    await attachmentComplete(newAtt);
    const oldAtt = bdm.attachmentId;
    const dot = s.op.params.deleteOnTermination as boolean | undefined;
    s = await updateOp(s, ({ bdms }) => ({
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
    // The switch was recorded before the failure: only the old attachment's delete is left.
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

