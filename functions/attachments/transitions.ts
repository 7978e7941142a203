/**
 * The attachment state transitions (reference §3.3, §3.4) as pure functions over the volume
 * aggregate and one attachment. The attachment's state goes to the volume's summary of it
 * (summaryOf); its item's version moves only with the item (the reserve, the tombstone). Each returns the new volume and attachment, or throws the typed
 * error the API answers with; nothing here reads or writes storage, so each rule is tested alone
 * and the repository re-applies them after a lost race.
 */
import { BadRequest, Conflict, InvalidVolume, NotFound } from '../core/errors.js';
import type { ConnectionProperties, Connector } from '../drivers/volume/driver.js';
import { ERROR_STATUSES, type AttachMode, type AttachmentSummary, type Volume, type VolumeAttachStatus, type VolumeStatus } from '../volumes/model.js';
import type { Attachment } from './model.js';

/** Statuses a non-multiattach volume can be reserved from (upstream `_attachment_reserve`). */
export const RESERVE_FROM: readonly VolumeStatus[] = ['available', 'downloading'];
/**
 * Statuses a multiattach volume can be reserved from. Upstream allows available, in-use and
 * downloading only, so a second attach racing the first one's reserve/connect fails with 400;
 * Ferry also accepts reserved and attaching, so concurrent attaches to a multiattach volume all
 * succeed (deliberate deviation).
 */
export const MULTIATTACH_RESERVE_FROM: readonly VolumeStatus[] = ['available', 'in-use', 'downloading', 'reserved', 'attaching'];
/** Statuses in which a non-multiattach volume accepts another attachment for an instance it already has (LP #1694530). */
export const SAME_INSTANCE_RESERVE_FROM: readonly VolumeStatus[] = ['in-use', 'reserved'];

export type ReservePath = 'available' | 'multiattach' | 'same-instance';

/** Upstream `utils.build_or_str`: "a, b or c". */
export function orList(items: readonly string[]): string {
  return items.length <= 1 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} or ${items[items.length - 1]}`;
}

/** Deprecated admin-metadata read-only flag; it overrides the requested mode. */
export function isReadonly(volume: Pick<Volume, 'adminMetadata'>): boolean {
  return (volume.adminMetadata?.readonly ?? '').toLowerCase() === 'true';
}

/** True when reserving needs the extra policy `volume:multiattach_bootable_volume` (§3.2 row 5). */
export function needsMultiattachBootablePolicy(volume: Pick<Volume, 'multiattach' | 'status' | 'bootable'>): boolean {
  return volume.multiattach && volume.status === 'in-use' && volume.bootable;
}

export function assertNotErrorForCreate(volume: Pick<Volume, 'id' | 'status'>): void {
  if (ERROR_STATUSES(volume.status)) {
    throw new InvalidVolume(
      `Volume attachments can not be created if the volume is in an error state. The Volume ${volume.id} currently has a status of: ${volume.status} `,
      { volumeId: volume.id, status: volume.status },
    );
  }
}

/** Which reserve rule admits this attachment, or the 400 upstream answers. */
export function reservePath(volume: Volume, instanceUuid: string | null): ReservePath {
  assertNotErrorForCreate(volume);
  const allowed = volume.multiattach ? MULTIATTACH_RESERVE_FROM : RESERVE_FROM;
  if (allowed.includes(volume.status)) return volume.multiattach ? 'multiattach' : 'available';
  if (instanceUuid && SAME_INSTANCE_RESERVE_FROM.includes(volume.status) && (volume.instances[instanceUuid] ?? 0) > 0) return 'same-instance';
  throw new InvalidVolume(`Volume ${volume.id} status must be ${orList(allowed)} to reserve, but the current status is ${volume.status}.`, {
    volumeId: volume.id,
    status: volume.status,
  });
}

export interface ReserveInput {
  attachmentId: string;
  instanceUuid: string | null;
  /** From 3.54; undefined means upstream's 'null'. */
  mode?: 'rw' | 'ro';
  now: string;
}

export interface ReserveResult {
  path: ReservePath;
  volume: Volume;
  attachment: Attachment;
}

/** The volume's summary of `a`: its whole mutable state (attachments/model.ts attachmentOf reads it back). */
export function summaryOf(a: Attachment): AttachmentSummary {
  return {
    status: a.attachStatus as VolumeAttachStatus,
    instanceUuid: a.instanceUuid,
    host: a.attachedHost,
    mode: a.attachMode,
    attachedAt: a.attachTime,
    connected: a.connectionInfo !== null,
    mountpoint: a.mountpoint,
    // What a delete from the volume's record alone needs to terminate the host's connection; kept
    // once given (a failed attach's pending detach needs it too): `connected` says whether it is in use.
    ...(a.connector ? { connector: a.connector } : {}),
    connectionInfo: a.connectionInfo,
    // Not while the item holds a wait still unfinished (written before the volume's attachWaits):
    // its writes leave the volume's version alone, so a write from the summary alone could not
    // see it; without updatedAt such writes take the transaction conditioned on the item.
    ...(unfinishedItemWait(a) ? {} : { updatedAt: a.updatedAt }),
  };
}

/** A wait on the attachment item (attach-wait.ts, items written before the volume's map) still watched, or failed with its detach pending. */
function unfinishedItemWait(a: Attachment): boolean {
  const wait = a.attachWait;
  return !!wait && (wait.status === 'waiting' || (wait.status === 'failed' && !!wait.detachPending));
}

/** Create without connector: a new `reserved` attachment; the volume goes `reserved` (unless the same instance already holds it). */
export function reserve(volume: Volume, input: ReserveInput): ReserveResult {
  const path = reservePath(volume, input.instanceUuid);
  const attachment: Attachment = {
    id: input.attachmentId,
    volumeId: volume.id,
    projectId: volume.projectId,
    instanceUuid: input.instanceUuid,
    attachStatus: 'reserved',
    attachMode: isReadonly(volume) ? 'ro' : (input.mode ?? 'null'),
    volumeHost: volume.host,
    connector: null,
    attachedHost: null,
    mountpoint: null,
    attachTime: null,
    detachTime: null,
    connectionInfo: null,
    createdAt: input.now,
    updatedAt: input.now,
    version: 1,
  };
  const instances = { ...volume.instances };
  if (input.instanceUuid) instances[input.instanceUuid] = (instances[input.instanceUuid] ?? 0) + 1;
  const next: Volume = {
    ...volume,
    // attach_status is unchanged: detached, or attached for an in-use multiattach volume.
    status: path === 'same-instance' ? volume.status : 'reserved',
    attachments: { ...volume.attachments, [attachment.id]: summaryOf(attachment) },
    instances,
    updatedAt: input.now,
    version: volume.version + 1,
  };
  return { path, volume: next, attachment };
}

/**
 * The attach mode, as the volume manager resolves it (§3.3): the connector's `mode` (default rw),
 * overridden by a mode chosen at create time.
 */
export function resolveMode(attachMode: AttachMode, connector: Pick<Connector, 'mode'>): 'rw' | 'ro' {
  if (attachMode !== 'null') return attachMode;
  return connector.mode === 'ro' ? 'ro' : 'rw';
}

/** The flattened connection_info of §3.5. */
export function buildConnectionInfo(
  props: ConnectionProperties,
  options: { accessMode: 'rw' | 'ro'; attachmentId: string; format?: string },
): Record<string, unknown> {
  const info: Record<string, unknown> = {
    ...props.data,
    qos_specs: null,
    access_mode: options.accessMode,
    encrypted: false,
    cacheable: false,
    driver_volume_type: props.driverVolumeType,
  };
  if (options.format) info.format = options.format;
  info.attachment_id = options.attachmentId;
  return info;
}

export interface ConnectOptions {
  /**
   * The §3.4 race guard for non-multiattach volumes. Upstream checks it only in PUT; create with a
   * connector (Nova's live migration) skips it.
   */
  checkDuplicates: boolean;
}

export function assertAttachmentLive(attachment: Attachment | undefined, attachmentId: string): asserts attachment is Attachment {
  if (!attachment || attachment.deleted) throw attachmentNotFound(attachmentId);
}

export const attachmentNotFound = (attachmentId: string) => new NotFound(`Volume attachment could not be found with filter: attachment_id = ${attachmentId}.`, { attachmentId });

/** Everything that would refuse a connect, checked before the driver is called (and again in `connect`). */
export function checkConnect(volume: Volume, attachment: Attachment, options: ConnectOptions): void {
  if (ERROR_STATUSES(volume.status)) {
    throw new InvalidVolume(
      `Volume attachments can not be updated if the volume is in an error state. The Volume ${volume.id} currently has a status of: ${volume.status} `,
      { volumeId: volume.id, status: volume.status },
    );
  }
  if (!volume.attachments[attachment.id]) {
    // The volume no longer lists it: deleted between our reads.
    assertAttachmentLive(undefined, attachment.id);
  }
  if (options.checkDuplicates && !volume.multiattach && Object.keys(volume.attachments).length > 1) {
    const other = Object.entries(volume.attachments).find(([id, s]) => id !== attachment.id && s.connected);
    if (other) {
      throw new Conflict(
        `Volume ${volume.id} is not multiattach and its attachment ${other[0]} is already connected (duplicate connectors); ` +
          `delete that attachment before connecting attachment ${attachment.id}.`,
        { volumeId: volume.id, attachmentId: attachment.id, connectedAttachmentId: other[0] },
      );
    }
  }
}

export interface ConnectInput {
  connector: Connector;
  connection: ConnectionProperties;
  now: string;
}

export interface ConnectResult {
  volume: Volume;
  attachment: Attachment;
  /** A host this attachment was connected on before (a re-update to another host) that no attachment uses any more. */
  releasedHost: { host: string; connector: Connector } | null;
}

function withoutId(list: string[] | undefined, id: string): string[] {
  return (list ?? []).filter((x) => x !== id);
}

/** Update (or create with connector): the attachment becomes `attaching` with its connection; so does the volume. */
export function connect(volume: Volume, attachment: Attachment, input: ConnectInput, options: ConnectOptions): ConnectResult {
  checkConnect(volume, attachment, options);
  const host = input.connector.host;
  const mode = resolveMode(attachment.attachMode, input.connector);
  const connector: Connector = attachment.attachMode !== 'null' ? { ...input.connector, mode } : { ...input.connector };
  const next: Attachment = {
    ...attachment,
    attachStatus: 'attaching',
    connector,
    attachedHost: host,
    mountpoint: input.connector.mountpoint || 'na',
    attachTime: input.now,
    attachMode: mode,
    connectionInfo: buildConnectionInfo(input.connection, {
      accessMode: isReadonly(volume) ? 'ro' : mode,
      attachmentId: attachment.id,
      format: volume.adminMetadata?.format,
    }),
    updatedAt: input.now,
  };

  const connections = { ...volume.connections };
  let releasedHost: ConnectResult['releasedHost'] = null;
  const previousHost = volume.attachments[attachment.id]?.host ?? null;
  if (previousHost && previousHost !== host && connections[previousHost]?.includes(attachment.id)) {
    const rest = withoutId(connections[previousHost], attachment.id);
    if (rest.length === 0) {
      delete connections[previousHost];
      if (attachment.connector) releasedHost = { host: previousHost, connector: attachment.connector };
    } else connections[previousHost] = rest;
  }
  connections[host] = [...withoutId(connections[host], attachment.id), attachment.id];

  return {
    volume: {
      ...volume,
      status: 'attaching',
      attachStatus: 'attaching',
      attachments: { ...volume.attachments, [attachment.id]: summaryOf(next) },
      connections,
      updatedAt: input.now,
      version: volume.version + 1,
    },
    attachment: next,
    releasedHost,
  };
}

/** os-complete: no state check upstream; the attachment is `attached`, the volume `in-use`/`attached`. */
export function complete(volume: Volume, attachment: Attachment, now: string): { volume: Volume; attachment: Attachment } {
  if (!volume.attachments[attachment.id]) assertAttachmentLive(undefined, attachment.id);
  const next: Attachment = { ...attachment, attachStatus: 'attached', updatedAt: now };
  return {
    volume: {
      ...volume,
      status: 'in-use',
      attachStatus: 'attached',
      attachments: { ...volume.attachments, [attachment.id]: summaryOf(next) },
      updatedAt: now,
      version: volume.version + 1,
    },
    attachment: next,
  };
}

/** The order in which remaining attachments decide the volume's state (alphabetical upstream). */
const DECIDING_ORDER: readonly VolumeAttachStatus[] = ['attached', 'attaching', 'detaching', 'reserved'];

/**
 * The volume's status and attach_status after a detach (upstream `db.volume_detached`): the
 * smallest remaining non-error status wins; attached -> in-use; none left -> available/detached,
 * except that a migrating or uploading volume keeps its status.
 */
export function volumeStateAfterDetach(
  volume: Pick<Volume, 'status' | 'migrationStatus'>,
  remaining: readonly AttachmentSummary[],
): { status: VolumeStatus; attachStatus: VolumeAttachStatus } {
  const winner = DECIDING_ORDER.find((s) => remaining.some((a) => a.status === s));
  if (winner) return { status: winner === 'attached' ? 'in-use' : (winner as VolumeStatus), attachStatus: winner };
  const migrating = !!volume.migrationStatus && !['success', 'error'].includes(volume.migrationStatus);
  const keepStatus = migrating || volume.status === 'uploading';
  return { status: keepStatus ? volume.status : 'available', attachStatus: 'detached' };
}

export interface RemoveResult {
  volume: Volume;
  tombstone: Attachment;
  /** The volume's remaining attachments (the DELETE response). */
  remaining: { id: string; summary: AttachmentSummary }[];
  /** Set when this attachment was the last one using its host's backend connection. */
  disconnect: { host: string; connector: Connector } | null;
}

/** Delete: the attachment becomes a tombstone; the volume's state is recomputed from what remains. */
export function remove(volume: Volume, attachment: Attachment, now: string): RemoveResult {
  const attachments = { ...volume.attachments };
  delete attachments[attachment.id];
  const instances = { ...volume.instances };
  if (attachment.instanceUuid && instances[attachment.instanceUuid] !== undefined) {
    const left = instances[attachment.instanceUuid]! - 1;
    if (left > 0) instances[attachment.instanceUuid] = left;
    else delete instances[attachment.instanceUuid];
  }
  const connections = { ...volume.connections };
  let disconnect: RemoveResult['disconnect'] = null;
  for (const [host, ids] of Object.entries(volume.connections)) {
    if (!ids.includes(attachment.id)) continue;
    const rest = withoutId(ids, attachment.id);
    if (rest.length > 0) connections[host] = rest;
    else {
      delete connections[host];
      if (attachment.connector) disconnect = { host, connector: attachment.connector };
    }
  }
  const remaining = Object.entries(attachments).map(([id, summary]) => ({ id, summary }));
  const deciding = remaining.map((r) => r.summary).filter((s) => !s.status.startsWith('error'));
  const state = volumeStateAfterDetach(volume, deciding);
  // Its wait (attach-wait.ts) ends with it, but for a failed attach's detach still pending, which the machine or the reconciler finishes.
  const { [attachment.id]: wait, ...attachWaits } = volume.attachWaits ?? {};
  const waits = wait && !wait.detachPending ? { attachWaits } : {};
  return {
    volume: { ...volume, ...state, attachments, instances, connections, ...waits, updatedAt: now, version: volume.version + 1 },
    tombstone: {
      ...attachment,
      attachStatus: 'detached',
      detachTime: now,
      deleted: true,
      disconnect,
      updatedAt: now,
      version: attachment.version + 1,
    },
    remaining,
    disconnect,
  };
}

export interface LegacyAttachInput {
  instanceUuid: string | null;
  hostName: string | null;
  mountpoint: string;
  mode: 'rw' | 'ro';
  now: string;
}

/** What refuses an os-attach whatever the attachment (checked before one is made, and again on write). */
export function checkLegacyAttach(volume: Volume, mode: 'rw' | 'ro'): void {
  if (volume.status === 'maintenance') throw new InvalidVolume('The volume cannot be attached in maintenance mode.');
  if (isReadonly(volume) && mode !== 'ro') throw new BadRequest(`Invalid attaching mode '${mode}' for volume ${volume.id}.`);
}

/**
 * The pre-3.27 os-attach on an attachment the same request or an earlier os-reserve /
 * os-initialize_connection made (C/volume/manager.py attach_volume): attached to the instance (or
 * host) at the mountpoint, the volume `in-use`. A read-only volume takes only mode `ro`.
 */
export function legacyAttach(volume: Volume, attachment: Attachment, input: LegacyAttachInput): { volume: Volume; attachment: Attachment } {
  if (!volume.attachments[attachment.id]) assertAttachmentLive(undefined, attachment.id);
  checkLegacyAttach(volume, input.mode);
  const instanceUuid = attachment.instanceUuid ?? input.instanceUuid;
  const next: Attachment = {
    ...attachment,
    instanceUuid,
    attachStatus: 'attached',
    attachMode: input.mode,
    attachedHost: attachment.attachedHost ?? input.hostName,
    mountpoint: input.mountpoint,
    attachTime: input.now,
    updatedAt: input.now,
  };
  const instances = { ...volume.instances };
  if (instanceUuid && !attachment.instanceUuid) instances[instanceUuid] = (instances[instanceUuid] ?? 0) + 1;
  return {
    volume: { ...volume, status: 'in-use', attachStatus: 'attached', instances, attachments: { ...volume.attachments, [attachment.id]: summaryOf(next) }, updatedAt: input.now, version: volume.version + 1 },
    attachment: next,
  };
}
