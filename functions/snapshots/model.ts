/**
 * The Snapshot entity (Cinder's snapshots table) and its pure transitions: (snapshot, event) ->
 * snapshot | FerryError. repo.ts persists each result conditioned on `version`.
 *
 * Layout in the volume table: pk `SNAP#<id>`, sk `SNAP`, gsi1pk `PROJ#<project>#SNAP`,
 * gsi1sk `<createdAt>#<id>` (a project's snapshots, oldest first). The volume item lists its
 * snapshots' ids (`snapshotIds`), written in the same transaction, so "a volume with snapshots is
 * not deleted" and "a failover errors a volume's snapshots" need no query.
 */
import { FerryError } from '../core/errors.js';

/** C/objects/fields.py SnapshotStatus, the ones Ferry uses. */
export type SnapshotStatus = 'creating' | 'available' | 'deleting' | 'error' | 'error_deleting';

export interface Snapshot {
  id: string;
  volumeId: string;
  projectId: string;
  userId: string;
  name: string | null;
  description: string | null;
  metadata: Record<string, string>;
  /** GiB: the volume's size when the snapshot was taken. */
  size: number;
  status: SnapshotStatus;
  /** `host@backend` of the volume when the snapshot was taken (the frozen check and the audit read it). */
  backendHost: string;
  /** The volume's backend object, and the snapshot's own name on the backend. */
  volumeBackendName: string;
  backendName: string;
  errorReason?: string | null;
  createdAt: string;
  updatedAt: string;
  version: number;
}

export const snapshotKey = (id: string) => ({ pk: `SNAP#${id}`, sk: 'SNAP' });
export const snapshotGsi1 = (s: Pick<Snapshot, 'projectId' | 'createdAt' | 'id'>) => ({ gsi1pk: `PROJ#${s.projectId}#SNAP`, gsi1sk: `${s.createdAt}#${s.id}` });
/** Cinder's snapshot_name_template. */
export const snapshotBackendName = (id: string) => `snapshot-${id}`;

export class InvalidSnapshot extends FerryError {
  constructor(reason: string) {
    super(400, 'badRequest', `Invalid snapshot: ${reason}`);
  }
}

export type SnapshotEvent =
  | { type: 'created'; at: string }
  | { type: 'create-failed'; at: string; reason: string }
  | { type: 'begin-delete'; at: string }
  | { type: 'delete-failed'; at: string; reason: string }
  /** The volume's failover made it unusable (reference §2.4). */
  | { type: 'failover-error'; at: string };

/** Statuses a snapshot may be deleted from (C/volume/api.py delete_snapshot, not forced). */
export const SNAPSHOT_DELETABLE: readonly SnapshotStatus[] = ['available', 'error'];

export function snapshotTransition(s: Snapshot, e: SnapshotEvent): Snapshot | FerryError {
  const next = (changes: Partial<Snapshot>): Snapshot => ({ ...s, ...changes, updatedAt: e.at });
  switch (e.type) {
    case 'created':
      if (s.status === 'available') return s;
      if (s.status !== 'creating') return new InvalidSnapshot(`Snapshot ${s.id} status must be creating, but the current status is ${s.status}.`);
      return next({ status: 'available' });
    case 'create-failed':
      if (s.status === 'error') return s;
      if (s.status !== 'creating') return new InvalidSnapshot(`Snapshot ${s.id} status must be creating, but the current status is ${s.status}.`);
      return next({ status: 'error', errorReason: e.reason });
    case 'begin-delete':
      if (!SNAPSHOT_DELETABLE.includes(s.status)) return new InvalidSnapshot('Snapshot status must be available or error and must not be part of a group.');
      return next({ status: 'deleting' });
    case 'delete-failed':
      if (s.status !== 'deleting') return s;
      return next({ status: 'error_deleting', errorReason: e.reason });
    case 'failover-error':
      return s.status === 'error' ? s : next({ status: 'error' });
  }
}
