/**
 * Every change of a volume's lifecycle as a pure function: (volume, event) -> volume | FerryError.
 * Nothing here reads or writes DynamoDB; repo.ts persists the result with a condition on
 * `version`, so a transition computed from a stale read never lands.
 *
 * The guards and messages follow C/volume/api.py (delete, begin_detaching, roll_detaching,
 * _extend, update) and C/api/contrib/admin_actions.py (reset_status).
 */
import { BadRequest, FerryError, InvalidVolume, NotFound } from '../core/errors.js';
import type { HeldCapacity, Volume, VolumeAttachStatus, VolumeStatus } from './model.js';

/** Every status upstream's reset-state accepts (C/objects/fields.py VolumeStatus.ALL, as our model spells them). */
export const VOLUME_STATUSES: readonly VolumeStatus[] = [
  'creating', 'available', 'deleting', 'error', 'error_deleting', 'error_managing', 'managing', 'attaching', 'in-use',
  'detaching', 'maintenance', 'reserved', 'downloading', 'uploading', 'retyping', 'extending', 'error_extending',
  'backing-up', 'restoring-backup', 'error_restoring',
];

/** validation.ts MAX_MAP_ITEMS: the volume item must stay one DynamoDB item. */
const MAX_METADATA_ITEMS = 128;

/** Statuses a volume may be deleted (or unmanaged) from, in upstream's order (it builds the message from this list). */
export const DELETABLE_STATUSES: readonly VolumeStatus[] = ['available', 'error', 'error_restoring', 'error_extending', 'error_managing'];

/** `AVAILABLE_MIGRATION_STATUS` of C/volume/api.py: a volume with any other migration status is migrating. */
export const AVAILABLE_MIGRATION_STATUSES: readonly (string | null)[] = [null, 'deleting', 'error', 'success'];

/** reset-state: attach statuses and migration statuses an admin may set (VolumeAdminController). */
export const RESETTABLE_ATTACH_STATUSES: readonly VolumeAttachStatus[] = ['attached', 'detached'];
export const RESETTABLE_MIGRATION_STATUSES = ['migrating', 'error', 'success', 'completing', 'none', 'starting'] as const;

export type VolumeEvent =
  /** The scheduler reserved capacity on a pool (repo writes the pool item in the same transaction). */
  | { type: 'scheduled'; at: string; capacity: HeldCapacity; serviceUuid: string; sharedTargets: boolean | null; availabilityZone?: string }
  /** The driver created (or found, for manage) the backend object. */
  | { type: 'created-on-backend'; at: string; providerLocation: string | null; sizeGb?: number }
  | { type: 'mark-available'; at: string }
  /** Any create/manage step failed; the rollback has run. */
  | { type: 'create-failed'; at: string; reason: string }
  | { type: 'capacity-released'; at: string }
  | { type: 'backend-object-released'; at: string }
  | { type: 'pending-attach-done'; at: string; reason?: string }
  /** API delete / unmanage. `resume` (the delete machine's first step) accepts a volume already deleting. */
  /** force: os-force_delete, which drops only the status guard (C/volume/api.py delete(force=True)). */
  | { type: 'begin-delete'; at: string; resume?: boolean; force?: boolean }
  | { type: 'set-bootable'; at: string; bootable: boolean }
  /** The metadata API (C/api/v3/volume_metadata.py): merge `set` (replace: the whole map), or remove one key. */
  | { type: 'metadata'; at: string; set?: Record<string, string>; replace?: boolean; remove?: string }
  | { type: 'set-readonly'; at: string; readonly: boolean }
  /** os-set_image_metadata (`set`, merged) or os-unset_image_metadata (`remove`, one key). */
  | { type: 'image-metadata'; at: string; set?: Record<string, string>; remove?: string }
  | { type: 'delete-failed'; at: string; reason: string }
  | { type: 'update'; at: string; name?: string | null; description?: string | null; metadata?: Record<string, string> }
  | { type: 'reset-status'; at: string; status?: VolumeStatus; attachStatus?: VolumeAttachStatus; migrationStatus?: string | null }
  | { type: 'begin-detaching'; at: string }
  | { type: 'roll-detaching'; at: string }
  | { type: 'begin-extend'; at: string; newSize: number }
  | { type: 'extend-done'; at: string }
  | { type: 'extend-failed'; at: string; reason: string }
  /** A snapshot of the volume is recorded (snapshots/). `allowInUse`: force, or 3.66+, lets an in-use volume be snapshotted. */
  | { type: 'snapshot-added'; at: string; snapshotId: string; allowInUse: boolean }
  | { type: 'snapshot-removed'; at: string; snapshotId: string }
  /** os-retype on the same backend: the new type and the replication status it implies. */
  | { type: 'retype'; at: string; typeId: string; typeName: string; multiattach: boolean; replicationStatus: string };

export type TransitionResult = Volume | FerryError;

/** What an extend takes from the quota (C/volume/api.py _extend: gigabytes and the type's gigabytes, by the increase). */
export function extendTakes(v: Pick<Volume, 'size' | 'volumeTypeName'>, newSize: number): Record<string, number> {
  const inc = newSize - v.size;
  return { gigabytes: inc, [`gigabytes_${v.volumeTypeName}`]: inc };
}

function isMigrating(v: Volume): boolean {
  return !AVAILABLE_MIGRATION_STATUSES.includes(v.migrationStatus);
}

function hasAttachments(v: Volume): boolean {
  return Object.keys(v.attachments ?? {}).length > 0;
}

/** "a or b or c" as upstream's utils.build_or_str. */
function orList(items: readonly string[]): string {
  return items.join(' or ');
}

/** The message upstream's delete gives whenever its conditional update does not match. */
export function deleteRefusedMessage(): string {
  return `Volume status must be ${orList(DELETABLE_STATUSES)} and must not be migrating, attached, belong to a group, have snapshots or be disassociated from snapshots after volume transfer.`;
}

const creatingStatuses: readonly VolumeStatus[] = ['creating', 'managing'];

/** Applies one event. Returns the new volume (the input is not modified) or the error that refuses it. */
export function transition(v: Volume, e: VolumeEvent): TransitionResult {
  const next = (changes: Partial<Volume>): Volume => ({ ...v, ...changes, updatedAt: e.at });
  switch (e.type) {
    case 'scheduled': {
      if (!creatingStatuses.includes(v.status)) return new InvalidVolume(`Volume ${v.id} status must be creating or managing to be scheduled, but the current status is ${v.status}.`);
      if (v.capacity) return v.capacity.pool === e.capacity.pool ? v : new InvalidVolume(`Volume ${v.id} is already scheduled to ${v.capacity.pool}.`);
      // A volume asked for no zone (ANY_ZONE) takes its pool's.
      return next({ capacity: e.capacity, host: e.capacity.pool, serviceUuid: e.serviceUuid, sharedTargets: e.sharedTargets, availabilityZone: v.availabilityZone || (e.availabilityZone ?? v.availabilityZone) });
    }
    case 'created-on-backend': {
      if (!creatingStatuses.includes(v.status)) return new InvalidVolume(`Volume ${v.id} status must be creating or managing, but the current status is ${v.status}.`);
      if (!v.host) return new InvalidVolume(`Volume ${v.id} has not been scheduled.`);
      return next({ providerLocation: e.providerLocation, ...(e.sizeGb !== undefined ? { size: e.sizeGb } : {}), ownsBackendObject: v.managed ? v.ownsBackendObject ?? false : true });
    }
    case 'mark-available': {
      if (v.status === 'available') return v;
      if (!creatingStatuses.includes(v.status)) return new InvalidVolume(`Volume ${v.id} status must be creating or managing to become available, but the current status is ${v.status}.`);
      if (!v.host) return new InvalidVolume(`Volume ${v.id} has not been scheduled.`);
      // A managed object becomes Ferry's to delete only once manage succeeded (upstream deletes managed volumes).
      return next({ status: 'available', attachStatus: 'detached', ownsBackendObject: true, errorReason: null });
    }
    case 'create-failed': {
      const failed: VolumeStatus = v.managed ? 'error_managing' : 'error';
      if (v.status === failed) return v;
      // The rollback has run whatever the status (an admin may have reset it meanwhile), so any
      // volume not in use is marked failed; one with attachments is left to the attachments API.
      if (v.status === 'available' || hasAttachments(v)) return new InvalidVolume(`Volume ${v.id} is ${v.status}${hasAttachments(v) ? ' with attachments' : ''}; its creation cannot be marked failed.`);
      return next({ status: failed, errorReason: e.reason, pendingServerId: null });
    }
    case 'capacity-released':
      return v.capacity ? next({ capacity: null }) : v;
    case 'backend-object-released':
      return v.ownsBackendObject ? next({ ownsBackendObject: false }) : v;
    case 'pending-attach-done':
      return v.pendingServerId ? next({ pendingServerId: null, ...(e.reason ? { errorReason: e.reason } : {}) }) : v;
    case 'begin-delete': {
      if (e.resume && v.status === 'deleting') return v;
      // Volumes being created from this one (sources.ts) read it until they are available: not even a force delete.
      if ((v.dependentCreates ?? 0) > 0) return new InvalidVolume(`Volume ${v.id} has dependent volumes being created from it.`, { volumeId: v.id, status: v.status });
      if (e.force && (v.attachStatus === 'attached' || hasAttachments(v) || isMigrating(v) || (v.snapshotIds ?? []).length > 0)) {
        // Upstream builds the status part from an empty list: hence its two spaces.
        return new InvalidVolume('Volume  must not be migrating, attached, belong to a group, have snapshots or be disassociated from snapshots after volume transfer.', { volumeId: v.id, status: v.status });
      }
      if (e.force) return next({ status: 'deleting', previousStatus: v.status });
      if (!DELETABLE_STATUSES.includes(v.status) || v.attachStatus === 'attached' || hasAttachments(v) || isMigrating(v) || (v.snapshotIds ?? []).length > 0) {
        return new InvalidVolume(deleteRefusedMessage(), { volumeId: v.id, status: v.status });
      }
      return next({ status: 'deleting', previousStatus: v.status });
    }
    case 'delete-failed':
      if (v.status === 'error_deleting') return v;
      if (v.status !== 'deleting') return new InvalidVolume(`Volume ${v.id} status must be deleting, but the current status is ${v.status}.`);
      return next({ status: 'error_deleting', errorReason: e.reason });
    case 'update': {
      if (v.status === 'maintenance') return new InvalidVolume('The volume cannot be updated during maintenance.');
      return next({
        ...(e.name !== undefined ? { name: e.name } : {}),
        ...(e.description !== undefined ? { description: e.description } : {}),
        ...(e.metadata !== undefined ? { metadata: e.metadata } : {}),
      });
    }
    case 'set-bootable':
      // os-set_bootable is volume_api.update({'bootable': ...}): the update guard.
      if (v.status === 'maintenance') return new InvalidVolume('The volume cannot be updated during maintenance.');
      return next({ bootable: e.bootable });
    case 'metadata': {
      if (['maintenance', 'uploading'].includes(v.status)) {
        return new InvalidVolume(`${e.remove !== undefined ? 'Deleting' : 'Updating'} volume metadata is not allowed for volumes in ${v.status} status.`);
      }
      const current = v.metadata ?? {};
      if (e.remove !== undefined) {
        if (!(e.remove in current)) return new NotFound(`Volume ${v.id} has no metadata with key ${e.remove}.`);
        const { [e.remove]: _removed, ...rest } = current;
        return next({ metadata: rest });
      }
      const metadata = e.replace ? { ...(e.set ?? {}) } : { ...current, ...(e.set ?? {}) };
      if (Object.keys(metadata).length > MAX_METADATA_ITEMS) return new BadRequest(`Invalid input received: Maximum number of metadata items exceeds ${MAX_METADATA_ITEMS}.`);
      return next({ metadata });
    }
    case 'image-metadata': {
      // C/volume/api.py update_volume_metadata / delete_volume_metadata (meta_type image).
      if (v.status === 'maintenance' || v.status === 'uploading') return new InvalidVolume(`Updating volume metadata is not allowed for volumes in ${v.status} status.`);
      const current = v.imageMetadata ?? {};
      if (e.remove === undefined) return next({ imageMetadata: { ...current, ...e.set } });
      if (!(e.remove in current)) return new NotFound(`Glance metadata for volume ${v.id} cannot be found.`);
      return next({ imageMetadata: Object.fromEntries(Object.entries(current).filter(([k]) => k !== e.remove)) });
    }
    case 'set-readonly':
      if (v.status !== 'available') return new InvalidVolume(`Volume ${v.id} status must be available to update readonly flag, but current status is: ${v.status}.`);
      return next({ adminMetadata: { ...v.adminMetadata, readonly: e.readonly ? 'True' : 'False' } });
    case 'reset-status': {
      if (e.status === undefined && e.attachStatus === undefined && e.migrationStatus === undefined) {
        return new BadRequest("Must specify 'status', 'attach_status' or 'migration_status' for update.");
      }
      if (e.attachStatus === 'detached' && hasAttachments(v)) {
        // Upstream would also soft-delete the attachment rows; Ferry's attachment items belong to the
        // attachments API, so an admin deletes them there first rather than leaving orphans.
        return new InvalidVolume(`Volume ${v.id} has attachments ${Object.keys(v.attachments).join(', ')}; delete them with the attachments API before resetting attach_status to detached.`);
      }
      return next({
        ...(e.status !== undefined ? { status: e.status, previousStatus: v.status } : {}),
        ...(e.attachStatus !== undefined ? { attachStatus: e.attachStatus } : {}),
        ...(e.migrationStatus !== undefined ? { migrationStatus: e.migrationStatus } : {}),
      });
    }
    case 'begin-detaching': {
      if (v.status === 'in-use' && v.attachStatus === 'attached' && !isMigrating(v)) return next({ status: 'detaching' });
      // Upstream: a migrating volume silently keeps its status (migration_status hides it).
      if (isMigrating(v)) return v;
      return new InvalidVolume("Unable to detach volume. Volume status must be 'in-use' and attach_status must be 'attached' to detach.");
    }
    case 'roll-detaching':
      // Upstream's conditional update simply matches nothing when the volume is not detaching.
      return v.status === 'detaching' ? next({ status: 'in-use' }) : v;
    case 'begin-extend': {
      if (!Number.isInteger(e.newSize) || e.newSize <= v.size) {
        return new BadRequest(`Invalid input received: New size for extend must be greater than current size. (current: ${v.size}, extended: ${e.newSize}).`);
      }
      if (v.status !== 'available') return new InvalidVolume(`Volume ${v.id} status must be 'available' to extend, currently ${v.status}.`);
      if (!v.capacity) return new InvalidVolume(`Volume ${v.id} holds no capacity on a pool and cannot be extended.`);
      // The record carries what it took from the quota: the extend's charge (C/volume/api.py _extend
      // reserves gigabytes and the type's gigabytes by the increase) joins it, so delete gives it all back.
      const takes = extendTakes(v, e.newSize);
      const quota = v.quota ? { ...v.quota, ...Object.fromEntries(Object.entries(takes).map(([r, n]) => [r, (v.quota![r] ?? 0) + n])) } : v.quota;
      return next({ status: 'extending', previousStatus: v.status, capacity: { pool: v.capacity.pool, gb: e.newSize }, quota });
    }
    case 'extend-done': {
      if (v.status !== 'extending') return new InvalidVolume(`Volume ${v.id} status must be extending, but the current status is ${v.status}.`);
      return next({ status: 'available', size: v.capacity?.gb ?? v.size });
    }
    case 'extend-failed': {
      if (v.status !== 'extending') return new InvalidVolume(`Volume ${v.id} status must be extending, but the current status is ${v.status}.`);
      // The capacity stays held at the new size: the backend may be partly extended, and delete releases it.
      return next({ status: 'error_extending', errorReason: e.reason });
    }
    case 'snapshot-added': {
      if ((v.snapshotIds ?? []).includes(e.snapshotId)) return v;
      // C/volume/api.py _create_snapshot_in_db_validate, in its order.
      if (v.status === 'maintenance') return new InvalidVolume('The snapshot cannot be created when the volume is in maintenance mode.');
      if (isMigrating(v)) return new InvalidVolume('Snapshot cannot be created while volume is migrating.');
      const valid = e.allowInUse ? ['available', 'in-use'] : ['available'];
      if (!valid.includes(v.status)) return new InvalidVolume(`Volume ${v.id} status must be ${valid.join(', ')}, but current status is: ${v.status}.`);
      return next({ snapshotIds: [...(v.snapshotIds ?? []), e.snapshotId] });
    }
    case 'snapshot-removed':
      if (!(v.snapshotIds ?? []).includes(e.snapshotId)) return v;
      return next({ snapshotIds: (v.snapshotIds ?? []).filter((s) => s !== e.snapshotId) });
    case 'retype': {
      if (v.volumeTypeId === e.typeId) return new BadRequest(`Invalid input received: New volume_type same as original: ${e.typeName}.`);
      if (!['available', 'in-use'].includes(v.status)) return new InvalidVolume(`Volume ${v.id} status must be available or in-use, but current status is: ${v.status}.`);
      if (isMigrating(v)) return new InvalidVolume(`Volume ${v.id} is already part of an active migration.`);
      // Ferry does not re-export a volume: multiattach may change only while nothing is attached.
      if (e.multiattach !== v.multiattach && hasAttachments(v)) return new InvalidVolume(`Volume ${v.id} has attachments; detach it before retyping between multiattach and non-multiattach types.`);
      return next({ volumeTypeId: e.typeId, volumeTypeName: e.typeName, multiattach: e.multiattach, replicationStatus: e.replicationStatus });
    }
  }
}

/** Applies an event and throws its refusal, for callers that answer a request with it. */
export function apply(v: Volume, e: VolumeEvent): Volume {
  const out = transition(v, e);
  if (out instanceof FerryError) throw out;
  return out;
}
