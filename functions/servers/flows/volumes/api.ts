/**
 * The API half of volume attach, detach and swap (reference §2.1 rows Attach, Detach, the
 * SHELVED_OFFLOADED variants, Swap volume): the `os-volume_attachments` routes (body checks per
 * microversion in Nova's order), then the actions: checks (the host driver's capabilities among
 * them), the BDM, attachment_create / begin_detaching, the instance action and the machine. The
 * compute half is steps.ts.
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type ApiResponse, type RouteSpec, type StartedAs } from '../../../core/api.js';
import type { AuthContext } from '../../../core/auth.js';
import { BadRequest, Conflict, NotFound } from '../../../core/errors.js';
import { intentId } from '../../../core/intents.js';
import { logger } from '../../../core/logger.js';
import { authorize } from '../../../core/policy.js';
import { isUuidLike } from '../../../compute/model.js';
import { invalid, isObject } from '../../../compute/validation.js';
import type { Volume } from '../../../volumes/model.js';
import { requireSwapVolume, requireVolumeConnectable } from '../../capabilities.js';
import { attachmentComplete, attachmentCreate, attachmentDelete, beginDetaching, volumeGet } from '../../cinder.js';
import { assertState, beginOperation } from '../../engine.js';
import type { BlockDeviceMapping, VmState } from '../../model.js';
import { SERVER_POLICIES, visibleServer } from '../../policies.js';
import { loadPartition, updateServer, type LoadedServer } from '../../repo.js';
import { volumeAttachmentCreateView, volumeAttachmentView } from '../../views.js';
import { nextDeviceName } from '../block-devices.js';
import { deleteVolumeQuietly } from '../../volume-cleanup.js';

const now = () => new Date().toISOString();

/** check_instance_state of attach_volume / detach_volume (SHELVED ones need 2.20, checked by the route). */
export const ATTACH_VM_STATES: readonly VmState[] = ['active', 'paused', 'stopped', 'resized', 'soft-delete', 'shelved', 'shelved_offloaded'];
export const SWAP_VM_STATES: readonly VmState[] = ['active', 'paused', 'resized'];

const DEVICE_PATTERN = /^\/dev\/x?[a-z]?d?[a-z]+\d*$/;

const volumeNotFound = (id: string) => new NotFound(`Volume ${id} could not be found.`);

async function visibleVolume(auth: AuthContext, volumeId: string): Promise<Volume> {
  const v = await volumeGet(volumeId);
  if (!v || (!auth.isAdmin && v.projectId !== auth.projectId)) throw volumeNotFound(volumeId);
  return v;
}

/** `_check_volume_already_attached`: a non-multiattach volume with attachments, or one on this server. */
function checkNotAttached(volume: Volume, bdms: readonly BlockDeviceMapping[]): void {
  if (bdms.some((b) => b.volumeId === volume.id)) throw new BadRequest(`Invalid volume: volume ${volume.id} already attached`);
  if (!volume.multiattach && Object.keys(volume.attachments).length > 0) throw new BadRequest(`Invalid volume: volume ${volume.id} already attached`);
}

// ---------------------------------------------------------------------------------------------
// Attach

export interface AttachRequest {
  server: LoadedServer;
  auth: AuthContext;
  requestId: string;
  /** The request's startedAs (a console start of the machine: it runs already). */
  startedAs: StartedAs | undefined;
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
  // Offloaded, no host connects it now: unshelve's host is chosen later.
  if (!offloaded && r.server.instance.host) await requireVolumeConnectable(r.server.instance.host, volume);
  const bdmUuid = randomUUID();
  // The attachment's id, derived from the request and recorded on the BDM in the first write: a
  // crash before the machine starts leaves a record that says exactly what to undo.
  const attachmentId = intentId(r.requestId, 'attach', bdmUuid);
  let bdm: BlockDeviceMapping | undefined;
  await beginOperation({
    server: r.server,
    auth: r.auth,
    kind: 'attach_volume',
    action: 'attach_volume',
    vmStates: ATTACH_VM_STATES,
    machine: 'server-attach-volume',
    requestId: r.requestId,
    startedAs: r.startedAs,
    params: { bdmUuid, volumeId: r.volumeId },
    apiOnly: offloaded,
    check: (_instance, bdms) => checkNotAttached(volume, bdms),
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
        attachmentId,
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
      await attachmentCreate(attachmentId, r.volumeId, instance.uuid);
      if (offloaded) {
        // api_attach_volume: complete without a connector, so Cinder says in-use (upstream semantics).
        await attachmentComplete(attachmentId);
      }
    },
  });
  return bdm!;
}

// ---------------------------------------------------------------------------------------------
// Detach

export interface DetachRequest {
  server: LoadedServer;
  auth: AuthContext;
  requestId: string;
  /** The request's startedAs (a console start of the machine: it runs already). */
  startedAs: StartedAs | undefined;
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
    startedAs: r.startedAs,
    params: { bdmUuid: bdm.uuid, volumeId: r.volumeId },
    apiOnly: offloaded,
    prepare: async () => {
      if (offloaded) {
        // api_detach_volume: _local_cleanup_bdm_volumes (errors logged and ignored upstream).
        try {
          if (bdm.attachmentId) await attachmentDelete(bdm.attachmentId);
          if (bdm.deleteOnTermination) await deleteVolumeQuietly(r.volumeId);
        } catch (e) {
          logger.error('offloaded detach: the attachment (or the delete_on_termination volume) is left; the audit lists it', { volumeId: r.volumeId, attachmentId: bdm.attachmentId, error: e as Error });
        }
        await updateServer(r.server.cell, r.server.instance.uuid, ({ instance }) => ({ instance, deleteBdms: [bdm.uuid] }));
        return;
      }
      await beginDetaching(r.volumeId);
    },
  });
}

// ---------------------------------------------------------------------------------------------
// Swap

export interface SwapRequest {
  server: LoadedServer;
  auth: AuthContext;
  requestId: string;
  /** The request's startedAs (a console start of the machine: it runs already). */
  startedAs: StartedAs | undefined;
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
  const host = r.server.instance.host;
  if (host) {
    await requireSwapVolume(host);
    await requireVolumeConnectable(host, newVolume);
  }
  const newAttachmentId = intentId(r.requestId, 'swap', bdm.uuid);
  await beginOperation({
    server: r.server,
    auth: r.auth,
    kind: 'swap_volume',
    action: 'swap_volume',
    vmStates: SWAP_VM_STATES,
    machine: 'server-swap-volume',
    requestId: r.requestId,
    startedAs: r.startedAs,
    params: { bdmUuid: bdm.uuid, oldVolumeId: r.oldVolumeId, newVolumeId: r.newVolumeId, ...(r.deleteOnTermination !== undefined ? { deleteOnTermination: r.deleteOnTermination } : {}) },
    check: (_instance, bdms) => checkNotAttached(newVolume, bdms),
    // The new volume's attachment id, derived from the request, recorded in the first write.
    holds: { newAttachments: { [bdm.uuid]: newAttachmentId } },
    prepare: async (instance) => {
      // A failure from here on is undone by abandonOperation: roll_detaching, the attachment deleted.
      await beginDetaching(r.oldVolumeId);
      await attachmentCreate(newAttachmentId, r.newVolumeId, instance.uuid);
    },
  });
}

// ---------------------------------------------------------------------------------------------
// os-volume_attachments

async function listVolumeAttachments(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.attachmentsIndex, { projectId: server.instance.projectId });
  const { bdms } = await loadPartition(server.cell, server.instance.uuid);
  return json(200, { volumeAttachments: bdms.filter((b) => b.volumeId).map((b) => volumeAttachmentView(b, server.instance.uuid, req.version)) });
}

async function showVolumeAttachment(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.attachmentsShow, { projectId: server.instance.projectId });
  const { bdms } = await loadPartition(server.cell, server.instance.uuid);
  const bdm = bdms.find((b) => b.volumeId === req.params.volume_id);
  if (!bdm) throw new NotFound(`Volume ${req.params.volume_id} is not attached to server ${server.instance.uuid}.`);
  return json(200, { volumeAttachment: volumeAttachmentView(bdm, server.instance.uuid, req.version) });
}

async function createVolumeAttachment(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.attachmentsCreate, { projectId: server.instance.projectId });
  const body = req.body;
  if (!isObject(body) || !isObject(body.volumeAttachment)) throw invalid('volumeAttachment', isObject(body) ? body.volumeAttachment : body, "'volumeAttachment' is a required property");
  const va = body.volumeAttachment;
  const allowedKeys = ['volumeId', 'device', ...(req.version.atLeast('2.49') ? ['tag'] : []), ...(req.version.atLeast('2.79') ? ['delete_on_termination'] : [])];
  const extra = Object.keys(va).filter((k) => !allowedKeys.includes(k));
  if (extra.length) throw invalid('volumeAttachment', va, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length === 1 ? 'was' : 'were'} unexpected)`);
  if (typeof va.volumeId !== 'string' || !isUuidLike(va.volumeId)) throw invalid('volumeId', va.volumeId, `${JSON.stringify(va.volumeId ?? null)} is not a 'uuid'`);
  const device = va.device === undefined || va.device === null ? null : String(va.device);
  if ((server.instance.vmState === 'shelved' || server.instance.vmState === 'shelved_offloaded') && !req.version.atLeast('2.20')) {
    throw new Conflict(`Cannot 'attach_volume' instance ${server.instance.uuid} while it is in vm_state ${server.instance.vmState}`);
  }
  const bdm = await attachVolume({
    server,
    auth: req.auth,
    requestId: req.requestId,
    startedAs: req.startedAs,
    volumeId: va.volumeId,
    device,
    tag: typeof va.tag === 'string' ? va.tag : null,
    deleteOnTermination: va.delete_on_termination === true,
  });
  return json(200, {
    volumeAttachment: volumeAttachmentCreateView({ volumeId: bdm.volumeId!, device: bdm.deviceName, tag: bdm.tag, deleteOnTermination: bdm.deleteOnTermination }, server.instance.uuid, req.version),
  });
}

async function updateVolumeAttachment(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  const oldVolumeId = req.params.volume_id!;
  const body = req.body;
  if (!isObject(body) || !isObject(body.volumeAttachment)) throw invalid('volumeAttachment', isObject(body) ? body.volumeAttachment : body, "'volumeAttachment' is a required property");
  const va = body.volumeAttachment;
  if (typeof va.volumeId !== 'string' || !isUuidLike(va.volumeId)) throw invalid('volumeId', va.volumeId, `${JSON.stringify(va.volumeId ?? null)} is not a 'uuid'`);
  const modern = req.version.atLeast('2.85');
  const allowedKeys = ['volumeId', ...(modern ? ['device', 'tag', 'serverId', 'id', 'delete_on_termination'] : [])];
  const extra = Object.keys(va).filter((k) => !allowedKeys.includes(k));
  if (extra.length) throw invalid('volumeAttachment', va, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length === 1 ? 'was' : 'were'} unexpected)`);
  const swap = !modern || va.volumeId !== oldVolumeId;
  authorize(req.auth, swap ? SERVER_POLICIES.attachmentsSwap : SERVER_POLICIES.attachmentsUpdate, swap ? {} : { projectId: server.instance.projectId });
  const { bdms } = await loadPartition(server.cell, server.instance.uuid);
  const bdm = bdms.find((b) => b.volumeId === oldVolumeId);
  if (!bdm) throw new NotFound(`Volume ${oldVolumeId} is not attached to server ${server.instance.uuid}.`);
  if (modern) {
    for (const [key, current] of [['device', bdm.deviceName], ['tag', bdm.tag], ['serverId', server.instance.uuid], ['id', oldVolumeId]] as const) {
      if (key in va && va[key] !== current) throw new BadRequest(`Updating '${key}' is not supported.`);
    }
  }
  const dot = modern && typeof va.delete_on_termination === 'boolean' ? va.delete_on_termination : undefined;
  if (!swap) {
    if (dot !== undefined) {
      await updateServer(server.cell, server.instance.uuid, ({ instance, bdms: current }) => ({
        instance,
        putBdms: current.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, deleteOnTermination: dot, updatedAt: now() })),
      }));
    }
    return json(202);
  }
  await swapVolume({ server, auth: req.auth, requestId: req.requestId, startedAs: req.startedAs, oldVolumeId, newVolumeId: va.volumeId, bdms, ...(dot !== undefined ? { deleteOnTermination: dot } : {}) });
  return json(202);
}

async function deleteVolumeAttachment(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.attachmentsDelete, { projectId: server.instance.projectId });
  if ((server.instance.vmState === 'shelved' || server.instance.vmState === 'shelved_offloaded') && !req.version.atLeast('2.20')) {
    throw new Conflict(`Cannot 'detach_volume' instance ${server.instance.uuid} while it is in vm_state ${server.instance.vmState}`);
  }
  const { bdms } = await loadPartition(server.cell, server.instance.uuid);
  await detachVolume({ server, auth: req.auth, requestId: req.requestId, startedAs: req.startedAs, volumeId: req.params.volume_id!, bdms });
  return json(202);
}

export const VOLUME_ATTACHMENT_ROUTES: RouteSpec[] = [
  { method: 'GET', path: '/servers/{server_id}/os-volume_attachments', action: SERVER_POLICIES.attachmentsIndex, authorizeBy: 'resource', handler: listVolumeAttachments },
  { method: 'POST', path: '/servers/{server_id}/os-volume_attachments', action: SERVER_POLICIES.attachmentsCreate, authorizeBy: 'resource', handler: createVolumeAttachment },
  { method: 'GET', path: '/servers/{server_id}/os-volume_attachments/{volume_id}', action: SERVER_POLICIES.attachmentsShow, authorizeBy: 'resource', handler: showVolumeAttachment },
  { method: 'PUT', path: '/servers/{server_id}/os-volume_attachments/{volume_id}', action: SERVER_POLICIES.attachmentsUpdate, authorizeBy: 'resource', handler: updateVolumeAttachment },
  { method: 'DELETE', path: '/servers/{server_id}/os-volume_attachments/{volume_id}', action: SERVER_POLICIES.attachmentsDelete, authorizeBy: 'resource', handler: deleteVolumeAttachment },
];
