/**
 * Nova's `nova/volume/cinder.py:API`, the subset the server flows call (reference §2.0), over
 * Ferry's attachments service as Nova's service user (admin). The calls are in-process: the
 * compute functions are granted the volume table, so an attachment call costs no HTTP hop, but it
 * runs exactly the attachments API's operation (validation, conditions, driver connections).
 *
 * Upstream quirks kept: `attachment_delete` treats 404 as done (B6: retried deletes in rollback
 * paths are harmless); `attachment_create` injects the mountpoint into the connector.
 *
 * Every call is counted (bench/moves compares the count per flow with the reference's).
 */
import type { AuthContext } from '../core/auth.js';
import { NotFound } from '../core/errors.js';
import { faultPoint } from '../core/faults.js';
import { completeAttachment, createAttachment, deleteAttachment, getAttachment, updateAttachment } from '../attachments/service.js';
import type { Attachment } from '../attachments/model.js';
import { getVolume, updateVolume } from '../volumes/repo.js';
import type { Volume } from '../volumes/model.js';
import type { Connector } from '../drivers/volume/driver.js';

/** Nova's service user: admin, so project scoping never hides a tenant's volume from the flows. */
const NOVA: AuthContext = { userId: 'nova', projectId: 'service', isAdmin: true, roles: ['admin', 'service'] };

export type CinderCall = 'attachment_create' | 'attachment_update' | 'attachment_complete' | 'attachment_delete' | 'attachment_get' | 'begin_detaching' | 'roll_detaching' | 'get';

const calls: { call: CinderCall; id: string }[] = [];

/** The calls made since the last reset, in order (bench/moves and the flow tests read it). */
export function cinderCalls(): readonly { call: CinderCall; id: string }[] {
  return calls;
}
export function resetCinderCalls(): void {
  calls.length = 0;
}
function note(call: CinderCall, id: string): void {
  calls.push({ call, id });
  if (calls.length > 100_000) calls.splice(0, calls.length - 100_000);
}

/** A crash point right after a call's effect (kind 'cinder', backend 'nova', method = the call): crash tests stop a flow there. */
const after = (call: CinderCall) => faultPoint('cinder', 'nova', call);

const at = () => new Date().toISOString();

export interface NovaAttachment {
  id: string;
  connectionInfo: Record<string, unknown> | null;
  status: string;
}

/** Nova stamps the volume id into connection_info as `serial` (DriverVolumeBlockDevice), so a host connection names its volume. */
function view(a: Attachment): NovaAttachment {
  const info = (a.connectionInfo as Record<string, unknown> | null) ?? null;
  return { id: a.id, connectionInfo: info ? { ...info, serial: a.volumeId } : null, status: a.attachStatus };
}

/**
 * POST /attachments: reserve (no connector), or reserve and connect, under the id the flow derived
 * from its operation and step and recorded before this call (core/intents.ts): a step re-run after
 * a crash passes the same id and gets the attachment it made, never a second one.
 */
export async function attachmentCreate(attachmentId: string, volumeId: string, instanceUuid: string, connector?: Connector | null, mountpoint?: string | null): Promise<NovaAttachment> {
  note('attachment_create', volumeId);
  const c = connector ? { ...connector, ...(mountpoint ? { mountpoint } : {}) } : null;
  const created = view(await createAttachment({ auth: NOVA, volumeId, instanceUuid, connector: c, attachmentId }));
  await after('attachment_create');
  return created;
}

/** PUT /attachments/{id} with the host's connector (mountpoint inside). */
export async function attachmentUpdate(attachmentId: string, connector: Connector, mountpoint?: string | null): Promise<NovaAttachment> {
  note('attachment_update', attachmentId);
  const updated = view(await updateAttachment({ auth: NOVA, attachmentId, connector: { ...connector, ...(mountpoint ? { mountpoint } : {}) } }));
  await after('attachment_update');
  return updated;
}

/** POST /attachments/{id}/action os-complete */
export async function attachmentComplete(attachmentId: string): Promise<void> {
  note('attachment_complete', attachmentId);
  await completeAttachment({ auth: NOVA, attachmentId });
  await after('attachment_complete');
}

/** DELETE /attachments/{id}; a missing attachment is done already (upstream logs and ignores 404). */
export async function attachmentDelete(attachmentId: string): Promise<void> {
  note('attachment_delete', attachmentId);
  try {
    await deleteAttachment({ auth: NOVA, attachmentId });
  } catch (e) {
    if (!(e instanceof NotFound)) throw e;
  }
  await after('attachment_delete');
}

export async function attachmentGet(attachmentId: string): Promise<NovaAttachment | undefined> {
  note('attachment_get', attachmentId);
  try {
    return view(await getAttachment({ auth: NOVA, attachmentId }));
  } catch (e) {
    if (e instanceof NotFound) return undefined;
    throw e;
  }
}

export async function volumeGet(volumeId: string): Promise<Volume | undefined> {
  note('get', volumeId);
  return getVolume(volumeId);
}

/** os-begin_detaching: in-use -> detaching (Cinder's guard refuses other states with a 400). */
export async function beginDetaching(volumeId: string): Promise<void> {
  note('begin_detaching', volumeId);
  await updateVolume(volumeId, { type: 'begin-detaching', at: at() });
  await after('begin_detaching');
}

/** os-roll_detaching: detaching -> in-use again. */
export async function rollDetaching(volumeId: string): Promise<void> {
  note('roll_detaching', volumeId);
  await updateVolume(volumeId, { type: 'roll-detaching', at: at() });
  await after('roll_detaching');
}

/** The connector a compute host presents to Cinder (os-brick's `get_connector_properties`). */
export function hostConnector(host: string, mountpoint?: string | null): Connector {
  const c: Connector = { host, ip: '127.0.0.1', platform: 'x86_64', os_type: 'linux', multipath: false, initiator: `iqn.2026-11.ferry:${host}` } as Connector;
  if (mountpoint) (c as Record<string, unknown>).mountpoint = mountpoint;
  return c;
}
