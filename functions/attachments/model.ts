/**
 * The Attachment entity (Cinder's VolumeAttachment) and how it is laid out in the volume table.
 *
 *   pk `ATT#<id>`, sk `ATT`                       the attachment
 *   gsi1pk `PROJ#<project>#ATT`, gsi1sk `<created>#<id>`   a project's attachments, oldest first
 *
 * The project is the volume's project (attachments have no owner of their own upstream; they are
 * visible to whoever sees the volume), copied here so GET and list need no volume read.
 *
 * A deleted attachment stays as a tombstone (upstream soft-deletes too) without GSI keys, so it
 * drops out of listings, and with `disconnect` when the delete was the last user of a host's
 * backend connection: a delete retried after a crash finds the tombstone and finishes the
 * disconnect. Tombstones expire through the table's TTL.
 */
import type { Connector } from '../drivers/volume/driver.js';
import type { AttachMode } from '../volumes/model.js';

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
