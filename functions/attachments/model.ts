/**
 * The Attachment entity (Cinder's VolumeAttachment) and how it is laid out in the volume table.
 *
 *   pk `ATT#<id>`, sk `ATT`                       the attachment
 *   gsi1pk `PROJ#<project>#ATT`, gsi1sk `<created>#<id>`   a project's attachments, oldest first
 *
 * The project is the volume's project (attachments have no owner of their own upstream; they are
 * visible to whoever sees the volume), copied here for the listing's index and the policy checks.
 *
 * The item is the attachment's identity (volume, project, created, volume host), its disconnect
 * intents and, once deleted, its tombstone: only the create and the delete write it (each in one
 * transaction with its volume), and a tombstone copies the last state. The attachment's mutable
 * state (status, instance, host, mode, connector, connection info...) is its volume's summary of
 * it (volumes/model.ts AttachmentSummary), which connect, complete and os-attach write alone;
 * readers merge the two (attachmentOf, attachment-reads.ts). Items and summaries written before
 * (a summary without `updatedAt`) keep the state on the item until their next write.
 *
 * A deleted attachment stays as a tombstone (upstream soft-deletes too) without GSI keys, so it
 * drops out of listings, and with `disconnect` when the delete was the last user of a host's
 * backend connection: a delete retried after a crash finds the tombstone and finishes the
 * disconnect. Tombstones expire through the table's TTL.
 *
 * Connect INTENTS of the synchronous connect (PUT /attachments/{id}, create with a connector) live
 * on the VOLUME item, in its top-level map `connectIntents` (by intent id, each naming its
 * attachment), one per call: written before the driver's initializeConnection and removed by the
 * write that records the connection (or by the failed connect's cleanup), so a process that dies
 * in between leaves an intent, never an export nothing knows about; recovery.ts undoes such
 * intents. Top-level, not inside `attachments.<id>`: a versioned write sets a summary whole and
 * would erase an intent written after its read. Intent writes leave the volume's version alone
 * (concurrent connects do not make each other retry), so a remembered volume record
 * (volume-records.ts knownVolume) may not show them: only recovery and a connect's retry decide on
 * them, from a fresh read. A volume deleted while it holds one is refused (volumes/repo.ts
 * removeVolumeRecord), and an attachment's delete leaves its intents to recovery.
 * `pendingConnect` on attachment items is where intents were written before; recovery still
 * honours what is left there.
 *
 * `pendingDisconnect` holds the disconnect INTENTS of deletes by id (service.ts deleteById), one
 * per call: written by the update that also reads the attachment, before the terminate of its
 * host's connection, and removed by the transaction that writes the tombstone (or by the failed
 * delete's cleanup). A live attachment with one left over is a delete that died between its
 * terminate and its transaction: recovery.ts makes the connection it records again.
 */
import { Conflict } from '../core/errors.js';
import { intentId } from '../core/intents.js';
import type { Connector } from '../drivers/volume/driver.js';
import type { AttachmentSummary, AttachMode, AttachWait } from '../volumes/model.js';

/** C/objects/fields.py VolumeAttachStatus. */
export type AttachStatus = 'attached' | 'attaching' | 'detached' | 'reserved' | 'error_attaching' | 'error_detaching' | 'deleted';

export interface Attachment {
  id: string;
  volumeId: string;
  /** The volume's project. */
  projectId: string;
  instanceUuid: string | null;
  attachStatus: AttachStatus;
  /** 'null' until a mode is chosen (upstream stores the string 'null', and the API shows it). */
  attachMode: AttachMode;
  /** The volume's `host` when the attachment was made (upstream `volume_host`). */
  volumeHost: string | null;
  connector: Connector | null;
  /** connector.host once connected. */
  attachedHost: string | null;
  mountpoint: string | null;
  /** ISO-8601 */
  attachTime: string | null;
  detachTime: string | null;
  /** Flattened connection info (reference §3.5), once connected. */
  connectionInfo: Record<string, unknown> | null;
  createdAt: string;
  updatedAt: string;
  version: number;
  /** Tombstone only. */
  deleted?: boolean;
  /** Tombstone only: the host connection this delete must remove (it was the last user). */
  disconnect?: { host: string; connector: Connector } | null;
  /** Connects in flight written on the item before intents moved to the volume (`connectIntents`); read by recovery only. */
  pendingConnect?: Record<string, ConnectIntent>;
  /** Deletes in flight (or abandoned by a crash) that may terminate the attachment's host connection, by intent id. Absent until the first. */
  pendingDisconnect?: Record<string, DisconnectIntent>;
  /**
   * The wait for a connection the backend accepted but had not finished, as items written before
   * the volume's `attachWaits` map held it (attach-wait.ts): still honoured until none remain; no
   * new one is written here.
   */
  attachWait?: AttachWait;
}

/** The wait's record (volumes/model.ts): on the volume's `attachWaits`, or on the attachment items written before that map. */
export type { AttachWait };

/** A connect's intent: the backend connection it is about to make, and since when. */
export interface ConnectIntent {
  /** The intent's own key in the volume's `connectIntents` (connectIntentId: one per connect call; two calls for one host each have theirs). Names no effect. */
  id: string;
  /** The attachment connecting (intents written on attachment items before they moved to the volume lack it: the item names it). */
  attachmentId: string;
  /** The connector's host: the backend connection is that of (volume, host). */
  host: string;
  connector: Connector;
  /** ISO-8601, when the intent was written. */
  startedAt: string;
  /** ISO-8601: a live connect has answered (or died) by then; a recovery pass treats it as abandoned after. */
  expiresAt: string;
}

/**
 * A delete's intent: it may terminate the connection of the host the attachment records
 * (attachedHost, with the attachment's connector) before the transaction that tombstones it. Names
 * no host of its own: the attachment item it is written on says which.
 */
export interface DisconnectIntent {
  /** The intent's own key in `pendingDisconnect`: one per delete call (removal-by-id.ts disconnectIntentId). */
  id: string;
  /** ISO-8601, when the intent was written. */
  startedAt: string;
  /** ISO-8601: a live delete has answered (or died) by then; a recovery pass treats it as abandoned after. */
  expiresAt: string;
}

/** The volume item's map of connect intents, by intent id. */
export const CONNECT_INTENTS = 'connectIntents';

/** The connect intents a volume item (or a record read from one) holds; a record remembered may be behind (they leave the version alone). */
export function connectIntentsOf(volume: object): Record<string, ConnectIntent> {
  return (volume as { connectIntents?: Record<string, ConnectIntent> }).connectIntents ?? {};
}

/** Longer than any synchronous API call may run (API Gateway answers by 29 s, the API Lambda stops at its timeout). */
export const CONNECT_INTENT_TIMEOUT_MS = 5 * 60_000;

/**
 * A connect intent's id, from the attachment, the connector's host and the call (core/intents.ts),
 * as a delete's disconnect intent is named (removal-by-id.ts disconnectIntentId): a call retrying
 * its connect, or a flow's step re-run after a crash (no call id: the step is the call), writes the
 * intent its first run left, which its transaction then ends, instead of leaving it beside a second
 * one. Two API calls connecting the same attachment at once have their own request ids, so the one
 * whose connect fails clears only its own intent.
 */
export const connectIntentId = (attachmentId: string, host: string, callId = 'no-call-id') => intentId('attachment-connect', attachmentId, host, callId);

/** The connect intent of call `callId` (the API's request id; none for a flow's step) connecting `attachmentId` to the connector's host. */
export function newConnectIntent(attachmentId: string, connector: Connector, now: string, callId?: string): ConnectIntent {
  return {
    id: connectIntentId(attachmentId, connector.host, callId),
    attachmentId,
    host: connector.host,
    connector,
    startedAt: now,
    expiresAt: new Date(Date.parse(now) + CONNECT_INTENT_TIMEOUT_MS).toISOString(),
  };
}

/** A delete's intent under `id` (removal-by-id.ts names it from the attachment and the call). */
export function newDisconnectIntent(id: string, now: string): DisconnectIntent {
  return { id, startedAt: now, expiresAt: new Date(Date.parse(now) + CONNECT_INTENT_TIMEOUT_MS).toISOString() };
}

/**
 * A create with a caller-chosen attachment id found that id taken by something it may not return
 * as its own: a tombstone, or an attachment of another volume or instance. `existing` is the item
 * the conditional put found (ALL_OLD), as Powertools' IdempotencyItemAlreadyExistsError carries it.
 */
export class AttachmentIdTaken extends Conflict {
  readonly existing: Attachment;
  constructor(existing: Attachment) {
    const what = existing.deleted ? 'a deleted attachment' : `an attachment of volume ${existing.volumeId} for instance ${existing.instanceUuid ?? 'None'}`;
    super(`Attachment id ${existing.id} is already used by ${what}.`, { attachmentId: existing.id, volumeId: existing.volumeId });
    this.existing = existing;
  }
}

export const attachmentKey = (id: string) => ({ pk: `ATT#${id}`, sk: 'ATT' });
export const ATTACHMENT_SK = 'ATT';
export const attachmentGsi1 = (a: Pick<Attachment, 'projectId' | 'createdAt' | 'id'>) => ({
  gsi1pk: `PROJ#${a.projectId}#ATT`,
  gsi1sk: `${a.createdAt}#${a.id}`,
});
export const projectAttachmentsGsi1pk = (projectId: string) => `PROJ#${projectId}#ATT`;

/** How long a tombstone is kept for retried deletes and the audit. */
export const TOMBSTONE_TTL_SECONDS = 7 * 24 * 3600;

const ITEM_ONLY_FIELDS = ['pk', 'sk', 'gsi1pk', 'gsi1sk', 'expiresAt'] as const;

/** The stored item for an attachment (a live one with its GSI keys; a tombstone without, expiring). */
export function attachmentToItem(a: Attachment): Record<string, unknown> {
  if (a.deleted) {
    const now = Date.parse(a.updatedAt);
    return { ...attachmentKey(a.id), ...a, expiresAt: Math.floor(now / 1000) + TOMBSTONE_TTL_SECONDS };
  }
  return { ...attachmentKey(a.id), ...attachmentGsi1(a), ...a };
}

export function attachmentFromItem(item: Record<string, unknown>): Attachment {
  const out = { ...item };
  for (const f of ITEM_ONLY_FIELDS) delete out[f];
  return out as unknown as Attachment;
}

/**
 * An attachment's state from its item and its volume's summary of it. A summary that carries the
 * full mutable state (it has `updatedAt`: volumes/model.ts) is the authority for status, instance,
 * host, mode, attach time, mountpoint, connector, connection info and updatedAt; the item keeps the
 * identity (volume, project, created, volume host), its intents and the tombstone. A summary
 * written before (no `updatedAt`), a volume that no longer lists the attachment, or a tombstone:
 * the item as it is.
 */
export function attachmentOf(item: Attachment, summary: AttachmentSummary | undefined): Attachment {
  if (item.deleted || !summary || summary.updatedAt === undefined) return item;
  return {
    ...item,
    // A volume status ('detaching') may stand in a summary: the API shows it as the attachment's.
    attachStatus: summary.status as AttachStatus,
    instanceUuid: summary.instanceUuid,
    attachedHost: summary.host,
    attachMode: summary.mode,
    attachTime: summary.attachedAt,
    mountpoint: summary.mountpoint ?? null,
    connector: summary.connector ?? null,
    connectionInfo: summary.connectionInfo ?? null,
    updatedAt: summary.updatedAt,
  };
}
