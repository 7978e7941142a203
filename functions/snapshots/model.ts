/**
 * The Snapshot entity (Cinder's snapshots table) and its pure transitions: (snapshot, event) ->
 * snapshot | FerryError. repo.ts persists each result conditioned on `version`.
 *
 * Layout in the volume table: pk `SNAP#<id>`, sk `SNAP`, gsi1pk `PROJ#<project>#SNAP`,
 * gsi1sk `<createdAt>#<id>` (a project's snapshots, oldest first). The volume item lists its
 * snapshots' ids (`snapshotIds`), written in the same transaction, so "a volume with snapshots is
 * not deleted" and "a failover errors a volume's snapshots" need no query.
 */
import { BadRequest, FerryError, NotFound } from '../core/errors.js';

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
  /** The last progress os-update_snapshot_status reported ('NN%'); the view derives it from the status otherwise. */
  progress?: string;
  /** Volumes being created from this snapshot (volumes/sources.ts): no delete while > 0. */
  dependentCreates?: number;
  /** What the snapshot took from its project's quota (quotas/engine.ts), given back when its record is removed. */
  quota?: Record<string, number> | null;
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
  /** force: os-force_delete, any status (C/volume/api.py delete_snapshot(force=True)). */
  | { type: 'begin-delete'; at: string; force?: boolean }
  | { type: 'delete-failed'; at: string; reason: string }
  /** The volume's failover made it unusable (reference §2.4). */
  | { type: 'failover-error'; at: string }
  /** os-reset_status (admin_actions.py SnapshotAdminController): any status, no guard. */
  | { type: 'reset-status'; at: string; status: SnapshotStatus }
  /** PUT /snapshots/{id} (C/volume/api.py update_snapshot): name and description, any status. */
  | { type: 'update'; at: string; name?: string | null; description?: string | null }
  /** The snapshot metadata API (update_snapshot_metadata / delete_snapshot_metadata): merge, replace or remove one key. */
  | { type: 'metadata'; at: string; set?: Record<string, string>; replace?: boolean; remove?: string }
  /**
   * os-update_snapshot_status (snapshot_actions.py): a backend's progress report, allowed only
   * along upstream's status_map (creating -> creating/available/error, deleting -> deleting/error_deleting).
   */
  | { type: 'update-status'; at: string; status: SnapshotStatus; progress?: string };

/** snapshot_actions.py `status_map`: the statuses os-update_snapshot_status may go to from each. */
export const SNAPSHOT_STATUS_MAP: Partial<Record<SnapshotStatus, readonly SnapshotStatus[]>> = {
  creating: ['creating', 'available', 'error'],
  deleting: ['deleting', 'error_deleting'],
};

/** Items a snapshot's metadata may hold (one DynamoDB item, as volumes/validation.ts MAX_MAP_ITEMS). */
const MAX_SNAPSHOT_METADATA = 128;

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
      // Volumes being created from it (volumes/sources.ts holds) copy from it until they are available: not even a force delete.
      if ((s.dependentCreates ?? 0) > 0) return new InvalidSnapshot(`Snapshot ${s.id} has dependent volumes being created from it.`);
      if (!e.force && !SNAPSHOT_DELETABLE.includes(s.status)) return new InvalidSnapshot('Snapshot status must be available or error and must not be part of a group.');
      return next({ status: 'deleting' });
    case 'delete-failed':
      if (s.status !== 'deleting') return s;
      return next({ status: 'error_deleting', errorReason: e.reason });
    case 'failover-error':
      return s.status === 'error' ? s : next({ status: 'error' });
    case 'reset-status':
      return next({ status: e.status });
    case 'update':
      return next({ ...(e.name !== undefined ? { name: e.name } : {}), ...(e.description !== undefined ? { description: e.description } : {}) });
    case 'metadata': {
      const current = s.metadata ?? {};
      if (e.remove !== undefined) {
        if (!(e.remove in current)) return new NotFound(`Snapshot ${s.id} has no metadata with key ${e.remove}.`);
        const { [e.remove]: _removed, ...rest } = current;
        return next({ metadata: rest });
      }
      const metadata = e.replace ? { ...(e.set ?? {}) } : { ...current, ...(e.set ?? {}) };
      if (Object.keys(metadata).length > MAX_SNAPSHOT_METADATA) return new BadRequest(`Invalid input received: Maximum number of metadata items exceeds ${MAX_SNAPSHOT_METADATA}.`);
      return next({ metadata });
    }
    case 'update-status': {
      const allowed = SNAPSHOT_STATUS_MAP[s.status];
      if (!allowed) return new BadRequest(`Snapshot status ${s.status} not allowed for update_snapshot_status`);
      if (!allowed.includes(e.status)) return new BadRequest(`Provided snapshot status ${e.status} not allowed for snapshot with status ${s.status}.`);
      return next({ status: e.status, ...(e.progress !== undefined ? { progress: e.progress } : {}) });
    }
  }
}
