/**
 * The Volume entity and how it is laid out in the volume table.
 *
 * A volume item is the aggregate root for everything whose invariants span a volume: its
 * attachments' summaries, the instances attached (for the non-multiattach rule), and the host
 * connections with the attachments using each (for refcounted disconnects). Keeping them on one
 * item lets a single conditional write or transaction enforce each invariant, with no
 * read-then-write race.
 */
import type { Connector } from '../drivers/volume/driver.js';

/** Cinder volume status strings (C/objects/fields.py VolumeStatus), as the API shows them. */
export type VolumeStatus =
  | 'creating'
  | 'available'
  | 'deleting'
  | 'error'
  | 'error_deleting'
  | 'error_managing'
  | 'managing'
  | 'attaching'
  | 'in-use'
  | 'detaching'
  | 'maintenance'
  | 'reserved'
  | 'downloading'
  | 'uploading'
  | 'retyping'
  | 'extending'
  | 'error_extending'
  | 'backing-up'
  /** Offered for transfer to another project (functions/transfers/). */
  | 'awaiting-transfer'
  | 'restoring-backup'
  | 'error_restoring';

export type VolumeAttachStatus = 'attached' | 'attaching' | 'detached' | 'reserved' | 'error_attaching' | 'error_detaching' | 'detaching';

export type AttachMode = 'rw' | 'ro' | 'null';

/** What the volume item keeps of each of its attachments: since `updatedAt` is kept, its whole mutable state (the attachment item keeps its identity). */
export interface AttachmentSummary {
  status: VolumeAttachStatus;
  instanceUuid: string | null;
  /** connector.host once a connector is given. */
  host: string | null;
  mode: AttachMode;
  attachedAt: string | null;
  /** True once the attachment has connection_info (the duplicate-connector guard reads this). */
  connected: boolean;
  /** connector.mountpoint, shown as `device` in the volume view (optional: added by volumes). */
  mountpoint?: string | null;
  /**
   * The attachment's connector, once one was given (absent on summaries written before it was kept;
   * on summaries written before `updatedAt`, only while connected):
   * the pre-3.27 detach actions delete from the volume's record with no read of the attachment
   * (attachments/listed-removal.ts), and terminate the host's connection with it.
   */
  connector?: Connector;
  /**
   * The attachment's connection_info (flattened, reference §3.5), null until connected. With
   * `updatedAt`, absent from summaries written before they carried the attachment's full state.
   */
  connectionInfo?: Record<string, unknown> | null;
  /**
   * ISO-8601: when the attachment's state last changed. Its presence marks a summary that carries
   * the full mutable state, which attachments/model.ts attachmentOf then takes over the item's.
   */
  updatedAt?: string;
}

/**
 * The volume-attach-wait machine's record of one attachment's pending attach
 * (attachments/attach-wait.ts), in the volume's `attachWaits` map: written by the connect that
 * recorded a pending connection (the intent: its execution's name), ended by the machine:
 * `attached`, or `failed` with the reason (the attachment then `error_attaching`).
 */
export interface AttachWait {
  /**
   * The execution's name: `volume-attach-wait-<attachment id>-v<volume version the connect or renewal wrote>`
   * (the volume's version only grows, so one per connect). Waits on attachment items written before
   * the map (`-<attachment version>`, no `v`) keep the name they were started under.
   */
  execution: string;
  /** The connector host the backend is attaching to. */
  host: string;
  status: 'waiting' | 'attached' | 'failed';
  /** ISO-8601 */
  startedAt: string;
  endedAt?: string;
  /** Why the attach failed, in words (`failed`). */
  reason?: string;
  /** `failed`: the backend's connection is still to be removed (set with the failure, cleared once it is). */
  detachPending?: boolean;
}

/** Capacity a volume holds on a pool item (scheduler.ts); present exactly while it is held, so release happens once. */
export interface HeldCapacity {
  /** `host@backend#pool` */
  pool: string;
  gb: number;
}

export interface Volume {
  id: string;
  projectId: string;
  userId: string;
  name: string | null;
  description: string | null;
  /** GiB */
  size: number;
  status: VolumeStatus;
  attachStatus: VolumeAttachStatus;
  previousStatus: string | null;
  migrationStatus: string | null;
  replicationStatus: string | null;
  volumeTypeId: string;
  volumeTypeName: string;
  multiattach: boolean;
  bootable: boolean;
  /** `host@backend#pool` once scheduled, null before. */
  host: string | null;
  /** The backend object's name, stable for the volume's life (volume-<id>, or the legacy name of a managed volume). */
  backendName: string;
  providerLocation: string | null;
  serviceUuid: string | null;
  sharedTargets: boolean | null;
  availabilityZone: string;
  metadata: Record<string, string>;
  adminMetadata: Record<string, string>;
  /** attachment id -> summary */
  attachments: Record<string, AttachmentSummary>;
  /** instance uuid -> number of attachments of this volume to it */
  instances: Record<string, number>;
  /** connector host -> attachment ids using the backend connection on that host (refcount = length) */
  connections: Record<string, string[]>;
  /**
   * attachment id -> the wait for its pending attach (AttachWait). A top-level map, not a field of
   * the summary: a versioned write sets a summary whole and would erase it. Every write of it moves
   * `version`. Absent until the first wait.
   */
  attachWaits?: Record<string, AttachWait>;
  /** Set by create with server_id: attach to this instance once available. */
  pendingServerId?: string | null;
  /** Capacity held on a pool; null once released (or never reserved). Added by volumes. */
  capacity?: HeldCapacity | null;
  /** True for a volume brought under Ferry by manage (its backend object predates it). Added by volumes. */
  managed?: boolean;
  /** True once the backend object is Ferry's to delete (created, or managed successfully). Added by volumes. */
  ownsBackendObject?: boolean;
  /** Why the volume went to an error status (scheduler or driver message), for operators. Added by volumes. */
  errorReason?: string | null;
  /** Ids of the volume's snapshots (functions/snapshots), kept on the volume so "no delete while it has snapshots" is a condition. Added by replication. */
  snapshotIds?: string[];
  /** The failover operation that last applied its rules to this volume: a re-run of that operation skips it. Added by replication. */
  failoverOperationId?: string | null;
  /** The snapshot this volume was created from (the view's `snapshot_id`). Added by create-from-source. */
  snapshotId?: string | null;
  /** The volume this one was cloned from (the view's `source_volid`). Added by create-from-source. */
  sourceVolid?: string | null;
  /** What create-on-backend copies from, recorded with the volume so the steps need no other capability (sources.ts). */
  source?: VolumeSourceRef | null;
  /** Cinder's volume_image_metadata of a volume made from an image (image_id, image_name, size, ...). */
  imageMetadata?: Record<string, string> | null;
  /** On a SOURCE (volume or snapshot item): how many volumes are being created from it; no delete while > 0. */
  dependentCreates?: number;
  /** What the volume took from its project's quota (resource -> amount), given back when its record is removed (quotas/engine.ts). Absent on volumes from before quotas until counted. */
  quota?: Record<string, number> | null;
  createdAt: string;
  updatedAt: string;
  /** Optimistic-concurrency version; every write conditions on it or bumps it. */
  version: number;
}

/**
 * A new volume's source, as recorded on it: the item whose `dependentCreates` it holds (`key`, in
 * the volume table), and the backend object to copy. `held` is true exactly while it holds one.
 */
export interface VolumeSourceRef {
  kind: 'snapshot' | 'volume' | 'image';
  id: string;
  /** The held item (snapshot, volume); an image is not held (Glance does not refuse its delete either). */
  key: { pk: string; sk: string } | null;
  /** `host@backend#pool` (volume) or `host@backend` (snapshot) the source lives on. */
  backendHost: string;
  /** The source volume's backend object (for a snapshot: the snapshotted volume's). */
  volumeBackendName: string;
  /** A snapshot's own backend name. */
  snapshotName?: string;
  /** An image's bytes: the object key in the bucket (`images/<id>`). */
  imageObjectKey?: string;
  held: boolean;
}

/** Cinder's ReplicationStatus enum (C/objects/fields.py): a volume's replication_status, and a backend service's. */
export const REPLICATION = {
  error: 'error',
  enabled: 'enabled',
  disabled: 'disabled',
  notCapable: 'not-capable',
  failingOver: 'failing-over',
  failoverError: 'failover-error',
  failedOver: 'failed-over',
} as const;

export const VOLUME_SK = 'VOL';
export const volumeKey = (id: string) => ({ pk: `VOL#${id}`, sk: VOLUME_SK });
/** GSI1 entry for listing a project's volumes, newest last. */
export const volumeGsi1 = (v: Pick<Volume, 'projectId' | 'createdAt' | 'id'>) => ({ gsi1pk: `PROJ#${v.projectId}#VOL`, gsi1sk: `${v.createdAt}#${v.id}` });

/** The backend object name Cinder's volume_name_template gives a new volume. */
export const defaultBackendName = (volumeId: string) => `volume-${volumeId}`;

export const ERROR_STATUSES = (s: string) => s.includes('error');

/** Upstream timestamps: `YYYY-MM-DDTHH:MM:SS.ffffff`, no zone. */
export function upstreamTime(iso: string | null | undefined): string | null {
  if (!iso) return null;
  return iso.replace('Z', '').replace(/\.(\d{3})$/, '.$1000');
}
