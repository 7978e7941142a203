/**
 * The pre-3.27 attach actions of POST /volumes/{id}/action (C/api/contrib/volume_actions.py, as
 * Nova's legacy path and older clients use them), mapped onto Ferry's attachments so that a volume
 * attached the old way is an attachment like any other (the audit sees it, DELETE /attachments/{id}
 * detaches it):
 * - os-reserve: a `reserved` attachment with no instance; the volume shows `attaching`, as upstream.
 * - os-initialize_connection: connects that reservation (or a new attachment) to the connector's
 *   host, the same connect as PUT /attachments/{id}; answers the connection info in the legacy
 *   shape `{driver_volume_type, data}`.
 * - os-attach: that attachment (or a new one) attached to the instance/host at the mountpoint.
 * - os-unreserve, os-terminate_connection: delete a reservation or a connection never attached.
 * - os-detach: deletes the attachment (and its host connection, when it was the last user).
 * - os-force_detach (admin): the same in any volume status.
 * os-begin_detaching and os-roll_detaching are volume transitions (functions/volumes/actions.ts).
 * Each write is the service's (service.ts) or a versioned write of the legacyAttach transition.
 *
 * The action route has read the volume already (volumes/actions.ts): each action starts from that
 * record (remembered for the service's complete and delete, passed to its create and connect)
 * instead of reading it again, its write conditional on that record's version as always. An
 * os-attach with nothing to attach yet reserves and attaches in ONE transaction. DynamoDB requests,
 * the route's read included: os-reserve 2, os-attach 2 (3 onto an earlier reservation),
 * os-initialize_connection 3, os-unreserve 2, os-detach and os-terminate_connection 2 (+1, the
 * fence, when they remove a host's last connection): the detaching actions delete from the route's
 * record of the volume, with no read of the attachment (listed-removal.ts).
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type ApiResponse } from '../core/api.js';
import { withRetries } from '../core/db.js';
import { BadRequest, InvalidVolume } from '../core/errors.js';
import { authorize, registerPolicies } from '../core/policy.js';
import type { Connector } from '../drivers/volume/driver.js';
import type { AttachmentSummary, Volume } from '../volumes/model.js';
import { attachmentOf } from './model.js';
import { invalidField, isObject, isUuidLike, pyRepr } from '../volumes/validation.js';
import { loadVolumeOf, now, RETRY, volumeNotFound } from './connections.js';
import { getAttachmentItem, getVolumeRecord, writeReserve, type LoadedVolume } from './repo.js';
import { writeAttachmentState } from './repo-from-volume.js';
import { ATTACHMENT_POLICIES, createAttachment, deleteListedAttachment, updateAttachment } from './service.js';
import { assertAttachmentLive, checkLegacyAttach, legacyAttach, needsMultiattachBootablePolicy, reserve } from './transitions.js';
import { rememberVolume } from './volume-records.js';

const P = {
  reserve: 'volume:reserve_volume',
  unreserve: 'volume:unreserve_volume',
  initialize: 'volume:initialize_connection',
  terminate: 'volume:terminate_connection',
  attach: 'volume:attach',
  detach: 'volume:detach',
  forceDetach: 'volume_extension:volume_admin_actions:force_detach',
};
registerPolicies(Object.fromEntries(Object.values(P).map((p) => [p, p === P.forceDetach ? ('admin_api' as const) : ('admin_or_owner' as const)])));

type Handler = (req: ApiRequest, v: Volume, args: unknown) => Promise<ApiResponse>;

/** The action's object, with only `allowed` properties (upstream's schemas: additionalProperties false). */
function argsOf(action: string, args: unknown, allowed: string[]): Record<string, unknown> {
  if (args === null || args === undefined) return {};
  if (!isObject(args)) throw invalidField(action, args, `${pyRepr(args)} is not of type 'object'`);
  const extra = Object.keys(args).find((k) => !allowed.includes(k));
  if (extra !== undefined) throw invalidField(action, args, `Additional properties are not allowed (${pyRepr(extra)} was unexpected)`);
  return args;
}

function connectorOf(action: string, args: unknown): Connector {
  const a = argsOf(action, args, ['connector']);
  if (!('connector' in a)) throw invalidField(action, args, "'connector' is a required property");
  if (!isObject(a.connector)) throw invalidField('connector', a.connector, `${pyRepr(a.connector)} is not of type 'object'`);
  const connector = a.connector as unknown as Connector;
  if (typeof connector.host !== 'string' || connector.host === '') throw new BadRequest("Invalid input received: connector must have a 'host' property naming the host to connect.");
  return connector;
}

/** The volume's live attachments, by id, with their summaries (the volume item lists them). */
const summaries = (v: Volume) => Object.entries(v.attachments ?? {});

/**
 * The route's record of the volume, remembered as the stored one (volume-records.ts), so the
 * service's delete starts from it. `hasMaps` false: a reserve from it writes the whole aggregate
 * under its version instead of adding to maps the item may not have.
 */
const routeVolume = (v: Volume): LoadedVolume =>
  rememberVolume({
    volume: { ...v, attachments: v.attachments ?? {}, instances: v.instances ?? {}, connections: v.connections ?? {}, adminMetadata: v.adminMetadata ?? {}, version: v.version ?? 0 },
    hasMaps: false,
  });

async function reserveRoute(req: ApiRequest, v: Volume): Promise<ApiResponse> {
  authorize(req.auth, P.reserve, { projectId: v.projectId });
  let first: LoadedVolume | undefined = routeVolume(v);
  await withRetries(async () => {
    const loaded = first ?? (await getVolumeRecord(v.id));
    first = undefined;
    if (!loaded) throw new BadRequest(`Volume ${v.id} could not be found.`);
    const volume = loaded.volume;
    const expected = volume.multiattach ? ['available', 'in-use'] : ['available'];
    if (!expected.includes(volume.status)) throw new InvalidVolume(`Volume status must be ${expected.join(' or ')} to reserve, but the status is ${volume.status}.`);
    const result = reserve(volume, { attachmentId: randomUUID(), instanceUuid: null, now: now() });
    // One versioned write of the volume read (its version is the condition): upstream shows `attaching`.
    await writeReserve({ volume, hasMaps: false }, { ...result, volume: { ...result.volume, status: 'attaching' } });
  }, RETRY);
  return json(202);
}

/** A reservation nothing attached or connected yet: what os-reserve made. */
const pendingReservation = (v: Volume) => summaries(v).find(([, s]) => s.status === 'reserved' && !s.instanceUuid && !s.connected)?.[0];

async function unreserveRoute(req: ApiRequest, v: Volume): Promise<ApiResponse> {
  authorize(req.auth, P.unreserve, { projectId: v.projectId });
  const id = pendingReservation(v);
  const volume = routeVolume(v);
  if (id) await deleteListedAttachment({ auth: req.auth, attachmentId: id, volume, callId: req.requestId });
  return json(202);
}

async function initializeRoute(req: ApiRequest, v: Volume, args: unknown): Promise<ApiResponse> {
  const connector = connectorOf('os-initialize_connection', args);
  authorize(req.auth, P.initialize, { projectId: v.projectId });
  const onHost = summaries(v).find(([, s]) => s.connected && s.host === connector.host && s.status !== 'attached')?.[0];
  const reserved = onHost ?? pendingReservation(v);
  const volume = routeVolume(v);
  const attachment = reserved
    ? await updateAttachment({ auth: req.auth, attachmentId: reserved, connector, volume, callId: req.requestId })
    : await createAttachment({ auth: req.auth, volumeId: v.id, instanceUuid: null, connector, volume, callId: req.requestId });
  const { driver_volume_type: driverVolumeType, ...data } = attachment.connectionInfo ?? {};
  return json(200, { connection_info: { driver_volume_type: driverVolumeType, data } });
}

/**
 * The attachment os-terminate_connection deletes: a connection that was never attached goes with its
 * attachment (one of no instance on the connector's host); an attached one stays until os-detach. A
 * connected one first: a failed attach (error_attaching) keeps its host in the volume's summary but
 * holds no connection (attach-wait.ts failAttach), and deleted in place of a connected one on the
 * same host it would leave the connection this call is to end.
 */
export function attachmentToTerminate(v: Volume, host: string): string | undefined {
  const onHost = summaries(v).filter(([, s]) => s.host === host && s.status !== 'attached' && !s.instanceUuid);
  return (onHost.find(([, s]) => s.connected) ?? onHost[0])?.[0];
}

async function terminateRoute(req: ApiRequest, v: Volume, args: unknown): Promise<ApiResponse> {
  const connector = connectorOf('os-terminate_connection', args);
  authorize(req.auth, P.terminate, { projectId: v.projectId });
  const id = attachmentToTerminate(v, connector.host);
  const volume = routeVolume(v);
  if (id) await deleteListedAttachment({ auth: req.auth, attachmentId: id, volume, callId: req.requestId });
  return json(202);
}

async function attachRoute(req: ApiRequest, v: Volume, args: unknown): Promise<ApiResponse> {
  const a = argsOf('os-attach', args, ['instance_uuid', 'host_name', 'mountpoint', 'mode']);
  if (!('mountpoint' in a)) throw invalidField('os-attach', args, "'mountpoint' is a required property");
  if (typeof a.mountpoint !== 'string') throw invalidField('mountpoint', a.mountpoint, `${pyRepr(a.mountpoint)} is not of type 'string'`);
  if (!('instance_uuid' in a) && !('host_name' in a)) throw invalidField('os-attach', args, `${pyRepr(args)} is not valid under any of the given schemas`);
  if ('instance_uuid' in a && !isUuidLike(a.instance_uuid)) throw invalidField('instance_uuid', a.instance_uuid, `${pyRepr(a.instance_uuid)} is not a 'uuid'`);
  if ('host_name' in a && (typeof a.host_name !== 'string' || a.host_name.length > 255)) throw invalidField('host_name', a.host_name, `${pyRepr(a.host_name)} is not of type 'string'`);
  const mode = a.mode ?? 'rw';
  if (mode !== 'rw' && mode !== 'ro') throw invalidField('mode', mode, `${pyRepr(mode)} is not one of ['rw', 'ro']`);
  authorize(req.auth, P.attach, { projectId: v.projectId });
  const instanceUuid = (a.instance_uuid as string | undefined) ?? null;
  const hostName = (a.host_name as string | undefined) ?? null;
  // The attachment os-reserve / os-initialize_connection made for this attach, else a new one.
  checkLegacyAttach(v, mode);
  const mine = summaries(v).find(([, s]) => attachable(s) && (instanceUuid ? s.instanceUuid === instanceUuid : false))?.[0];
  const existing = mine ?? pendingOrConnected(v, hostName);
  const input: LegacyAttachArgs = { instanceUuid, hostName, mountpoint: a.mountpoint as string, mode };
  if (existing) await attachWith(existing, input, routeVolume(v));
  else await reserveAndAttach(req, routeVolume(v), input);
  return json(202);
}

type LegacyAttachArgs = { instanceUuid: string | null; hostName: string | null; mountpoint: string; mode: 'rw' | 'ro' };

/** os-attach onto an attachment an earlier action made: its first attempt starts from the route's volume. */
async function attachWith(id: string, input: LegacyAttachArgs, volume: LoadedVolume): Promise<void> {
  let first: LoadedVolume | undefined = volume;
  await withRetries(async () => {
    // The item for its identity; its state from the volume it is attached on (the route's, first).
    const found = await getAttachmentItem(id);
    const item = found?.deleted ? undefined : found;
    assertAttachmentLive(item, id);
    const loaded = first?.volume.id === item.volumeId ? first : await loadVolumeOf(item);
    first = undefined;
    const attachment = attachmentOf(item, loaded.volume.attachments[id]);
    const result = legacyAttach(loaded.volume, attachment, { ...input, now: now() });
    await writeAttachmentState({ volume: loaded.volume, attachment }, result);
  }, RETRY);
}

/**
 * os-attach with nothing reserved: the reserve (as POST /attachments without a connector, its
 * policies and rules) and the attach, applied one after the other to the volume read and written
 * as one transaction (the new attachment put, the volume under its version). A refused attach so
 * leaves nothing behind to clean up.
 */
async function reserveAndAttach(req: ApiRequest, volume: LoadedVolume, input: LegacyAttachArgs): Promise<void> {
  const attachmentId = randomUUID();
  let first: LoadedVolume | undefined = volume;
  await withRetries(async () => {
    const loaded = first ?? (await getVolumeRecord(volume.volume.id));
    first = undefined;
    if (!loaded || (!req.auth.isAdmin && loaded.volume.projectId !== req.auth.projectId)) throw volumeNotFound(volume.volume.id);
    authorize(req.auth, ATTACHMENT_POLICIES.create, { projectId: loaded.volume.projectId });
    if (needsMultiattachBootablePolicy(loaded.volume)) authorize(req.auth, ATTACHMENT_POLICIES.multiattachBootable, { projectId: loaded.volume.projectId });
    const at = now();
    const reserved = reserve(loaded.volume, { attachmentId, instanceUuid: input.instanceUuid, now: at });
    const attached = legacyAttach(reserved.volume, reserved.attachment, { ...input, now: at });
    // The attached volume computed from the record read: a versioned write of the whole aggregate.
    await writeReserve({ volume: loaded.volume, hasMaps: false }, { path: reserved.path, volume: attached.volume, attachment: attached.attachment });
  }, RETRY);
}

/**
 * What os-attach may attach onto: an attachment not attached yet and not failed. A failed one
 * (error_attaching: its attach failed, attach-wait.ts failAttach, and it holds no connection) is
 * left as it is and another (or a new) one attached, as upstream's attach_volume attaches a new
 * attachment (C/objects/volume.py begin_attach) beside a failed one it does not find by server
 * or host; upstream's answer for a failed one of the same server differs (docs/compatibility.md).
 */
const attachable = (s: AttachmentSummary) => s.status !== 'attached' && !s.status.startsWith('error');

/** An attachable one with no instance: os-initialize_connection's on that host, else os-reserve's (not connected), else any. */
function pendingOrConnected(v: Volume, hostName: string | null): string | undefined {
  const free = summaries(v).filter(([, s]) => attachable(s) && !s.instanceUuid);
  return (free.find(([, s]) => hostName !== null && s.host === hostName) ?? free.find(([, s]) => !s.connected) ?? free[0])?.[0];
}

async function detachRoute(req: ApiRequest, v: Volume, args: unknown): Promise<ApiResponse> {
  const a = argsOf('os-detach', args, ['attachment_id']);
  if (a.attachment_id !== undefined && a.attachment_id !== null && !isUuidLike(a.attachment_id)) {
    throw invalidField('attachment_id', a.attachment_id, `${pyRepr(a.attachment_id)} is not a 'uuid'`);
  }
  authorize(req.auth, P.detach, { projectId: v.projectId });
  return detachOne(req, v, (a.attachment_id as string | null | undefined) ?? undefined, 'Error detaching volume');
}

/**
 * os-force_detach (admin_actions.py `_force_detach`): terminate_connection(force) then detach, in
 * any volume status (Tempest resets the volume to `error` first). Ferry's connection belongs to
 * its attachment, so the attachment's delete is both: the host's connection goes with the last
 * attachment using it, and the volume's status is recomputed (available when none is left).
 */
async function forceDetachRoute(req: ApiRequest, v: Volume, args: unknown): Promise<ApiResponse> {
  if (!isObject(args)) throw invalidField('os-force_detach', args, `${pyRepr(args)} is not of type 'object'`);
  const a = argsOf('os-force_detach', args, ['connector', 'attachment_id']);
  if (a.connector !== undefined && a.connector !== null && typeof a.connector !== 'string' && !isObject(a.connector)) {
    throw invalidField('connector', a.connector, `${pyRepr(a.connector)} is not of type 'string', 'object', 'null'`);
  }
  if (a.attachment_id !== undefined && a.attachment_id !== null && typeof a.attachment_id !== 'string') {
    throw invalidField('attachment_id', a.attachment_id, `${pyRepr(a.attachment_id)} is not of type 'string', 'null'`);
  }
  authorize(req.auth, P.forceDetach, { projectId: v.projectId });
  return detachOne(req, v, (a.attachment_id as string | null | undefined) ?? undefined, 'Error force detaching volume');
}

/** volume API detach: the named attachment, or the only one; upstream's refusals under `prefix`. */
async function detachOne(req: ApiRequest, v: Volume, attachmentId: string | undefined, prefix: string): Promise<ApiResponse> {
  const live = summaries(v).map(([id]) => id);
  let id = attachmentId;
  if (id !== undefined && !live.includes(id)) {
    throw new BadRequest(`${prefix} - VolumeAttachmentNotFound: Volume attachment could not be found with filter: attachment_id = ${id}, volume_id = ${v.id}.`);
  }
  if (id === undefined) {
    if (live.length > 1) throw new BadRequest(`${prefix} - InvalidVolume: Invalid volume: Detach volume failed: More than one attachment, but no attachment_id provided.`);
    // None: upstream just records the volume available; Ferry's volume already says what its attachments say.
    if (live.length === 0) return json(202);
    id = live[0]!;
  }
  await deleteListedAttachment({ auth: req.auth, attachmentId: id, volume: routeVolume(v), callId: req.requestId });
  return json(202);
}

export const LEGACY_ATTACH_ACTIONS: Record<string, Handler> = {
  'os-reserve': reserveRoute,
  'os-unreserve': unreserveRoute,
  'os-initialize_connection': initializeRoute,
  'os-terminate_connection': terminateRoute,
  'os-attach': attachRoute,
  'os-detach': detachRoute,
  'os-force_detach': forceDetachRoute,
};
