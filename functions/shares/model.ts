/**
 * The Manila entities and their layout in the `share` table.
 *
 * A share item is the aggregate root for everything whose invariants span a share: its one
 * instance (id, host, export locations), the capacity it holds on a pool, its access rules (so
 * "no duplicate rule" and "no rule change while not available" are conditions on one item) and
 * its `task_state` (null until a migration; the migration work sets the §1.6 values).
 *
 * Items: share `SHARE#<id>`/`SHARE` (gsi1 `PROJ#<p>#SHARE`); share type `STYPE#<id>`/`STYPE`
 * (gsi1 `STYPES`) with a name claim `STYPENAME#<name>`/`STYPENAME`; share network
 * `SNET#<id>`/`SNET` (gsi1 `PROJ#<p>#SNET`); backend `SBACKEND#<host@backend>`/`SBACKEND`
 * (gsi1 `SBACKENDS`); pool allocation `SPOOL#<host@backend#pool>`/`SPOOL`.
 */

/** Manila share statuses (M/common/constants.py), the subset Ferry's operations reach. */
export type ShareStatus =
  | 'creating'
  | 'available'
  | 'deleting'
  | 'error'
  | 'error_deleting'
  | 'migrating'
  | 'migrating_to'
  | 'inactive'
  | 'extending'
  | 'extending_error'
  | 'shrinking'
  | 'shrinking_error'
  | 'shrinking_possible_data_loss_error';

/** M/common/constants.py task states (reference §1.6); null when no task runs. */
export const TASK_STATES = [
  'migration_starting',
  'migration_in_progress',
  'migration_driver_starting',
  'migration_driver_in_progress',
  'migration_driver_phase1_done',
  'data_copying_starting',
  'data_copying_in_progress',
  'data_copying_completing',
  'data_copying_completed',
  'data_copying_cancelled',
  'data_copying_error',
  'migration_completing',
  'migration_success',
  'migration_error',
  'migration_cancelled',
] as const;
export type TaskState = (typeof TASK_STATES)[number];

/** BUSY_TASK_STATES: these block delete (and migration_start, extend, ...). */
export const BUSY_TASK_STATES: readonly TaskState[] = [
  'migration_starting',
  'migration_in_progress',
  'migration_completing',
  'migration_driver_starting',
  'migration_driver_in_progress',
  'migration_driver_phase1_done',
  'data_copying_starting',
  'data_copying_in_progress',
  'data_copying_completing',
  'data_copying_completed',
];

export type AccessType = 'ip' | 'user';
export type AccessLevel = 'rw' | 'ro';
/** Access rule states (M/common/constants.py ACCESS_STATE_*). */
export type AccessState = 'queued_to_apply' | 'applying' | 'active' | 'error' | 'queued_to_deny' | 'denying';

export interface AccessRule {
  id: string;
  accessType: AccessType;
  accessTo: string;
  accessLevel: AccessLevel;
  state: AccessState;
  createdAt: string;
  updatedAt: string;
}

export interface HeldShareCapacity {
  /** `host@backend#pool` */
  pool: string;
  gb: number;
}

export interface Share {
  id: string;
  projectId: string;
  userId: string;
  name: string | null;
  description: string | null;
  size: number;
  shareProto: 'NFS' | 'CIFS';
  status: ShareStatus;
  /** null until a migration sets one (reference §1.6). */
  taskState: TaskState | null;
  shareTypeId: string;
  shareTypeName: string;
  shareNetworkId: string | null;
  availabilityZone: string | null;
  metadata: Record<string, string>;
  isPublic: boolean;
  /** The share's one instance (Manila's share_instances row). */
  instanceId: string;
  /** `host@backend#pool` once scheduled. */
  host: string | null;
  /** Export paths of the instance (the local driver: the directory). */
  exportLocations: string[];
  /** Capacity held on a pool; null once released. */
  capacity: HeldShareCapacity | null;
  /** True once a backend directory exists that Ferry must delete. */
  ownsBackendShare: boolean;
  /** rule id -> rule */
  accessRules: Record<string, AccessRule>;
  errorReason: string | null;
  /** The migration under way (functions/migration); null when none runs. */
  migration: ShareMigration | null;
  /** How the share's last migration ended, with the reason when it failed (what `ferry watch` shows); absent before the first. */
  lastMigration?: MigrationEnd | null;
  /** The extend or shrink under way (resize.ts): the intent of its driver call; null when none runs. */
  resize?: ShareResize | null;
  /** What the share took from its project's quota (resource -> amount), given back when its record is removed (quotas/engine.ts). Absent on shares from before quotas until counted. */
  quota?: Record<string, number> | null;
  createdAt: string;
  updatedAt: string;
  version: number;
}

/**
 * An extend or shrink recorded before its driver call (the intent): `id` is derived from the share
 * and the version the resize began at, so a retried or recovered call is the same resize.
 */
export interface ShareResize {
  id: string;
  kind: 'extend' | 'shrink';
  fromGb: number;
  toGb: number;
  /** Extend: the gigabytes charged to the quota and reserved on the pool at begin (given back if it fails). */
  chargedGb: number;
  startedAt: string;
}

/**
 * A second instance of a share during a migration: the destination (Manila's `migrating_to`
 * instance) until phase 2 flips it, and afterwards the retired source (`inactive`) until its
 * backend share and capacity are gone. Kept on the share item so every step is one conditional
 * write and the audit sees what a migration holds.
 */
export interface MigrationInstance {
  id: string;
  /** `host@backend#pool` */
  host: string;
  status: ShareStatus;
  exportLocations: string[];
  /** Capacity reserved on `host`'s pool; null once released (or not yet reserved). */
  capacity: HeldShareCapacity | null;
  /** True from just before the backend share can exist until it is deleted. */
  ownsBackendShare: boolean;
}

export type MigrationApproach = 'driver' | 'host';

/** The state of one migration (reference §1.6-§1.9): flags, the two instances, what is held. */
export interface ShareMigration {
  /** Names the executions and the copy operation. */
  id: string;
  /** The requested `host@backend#pool`. */
  destinationHost: string;
  newShareTypeId: string | null;
  newShareNetworkId: string | null;
  writable: boolean;
  preserveMetadata: boolean;
  nondisruptive: boolean;
  preserveSnapshots: boolean;
  forceHostAssisted: boolean;
  /** Decided by phase 1: driver-assisted, or host-assisted (forced or fallback). */
  approach: MigrationApproach | null;
  /** The destination instance (phase 1 and 2); null before it is recorded. */
  destination: MigrationInstance | null;
  /** The source instance after phase 2 flipped the share to the destination, until it is deleted. */
  retired: MigrationInstance | null;
  /** Manila's cast_rules_to_readonly on the source instance. */
  readOnlyCast: boolean;
  /** The data node's access rule is on both instances (host-assisted copy). */
  dataNodeAccess: boolean;
  /** Who the data node is to each instance's backend, recorded with the access (functions/migration/access.ts). */
  dataNode?: MigrationDataNode | null;
  /** The task definition registered for this migration's copy task (functions/migration/copy-task-definition.ts). */
  copyTaskDefinition?: CopyTaskDefinition | null;
  /** The copy operation record (COPY#<id>) of the host-assisted copy. */
  copyOperationId: string | null;
  copyAttempts: number;
  /** migration_continue polls made (bounded). */
  driverPolls: number;
  /** The driver's migration_get_progress as of the last poll (driver-assisted), recorded by that poll. */
  driverProgress?: DriverMigrationProgress | null;
  /** migration_cancel asked while phase 1 runs; the phase 1 machine acts on it. */
  cancelRequested: boolean;
  startedAt: string;
  error: string | null;
}

/** The data node's rule identity (access type and to) on a backend. */
export interface DataNodeIdentity {
  accessType: 'ip' | 'user';
  accessTo: string;
}

export interface MigrationDataNode {
  source: DataNodeIdentity;
  destination: DataNodeIdentity;
}

/**
 * A copy task definition registered for one migration (the copy worker's, with the migration's file
 * systems as its volumes): `family` is recorded before RegisterTaskDefinition (derived from the
 * migration id, so a retry finds what an unanswered call made), `arn` once it is known.
 */
export interface CopyTaskDefinition {
  family: string;
  arn: string | null;
}

/** What a driver-assisted poll read from migration_get_progress. */
export interface DriverMigrationProgress {
  /** 0-100 */
  percent: number;
  bytesDone?: number;
  bytesTotal?: number;
  filesDone?: number;
  filesTotal?: number;
  at: string;
}

/** How a migration ended: kept on the share after its migration record is gone. */
export interface MigrationEnd {
  id: string;
  outcome: 'migration_success' | 'migration_error' | 'migration_cancelled';
  /** Why it failed, in words (migration_error only). */
  reason: string | null;
  destinationHost: string;
  approach: MigrationApproach | null;
  startedAt: string;
  endedAt: string;
}

export interface ShareType {
  id: string;
  name: string;
  description: string | null;
  isPublic: boolean;
  extraSpecs: Record<string, string>;
  createdAt: string;
}

export interface ShareNetwork {
  id: string;
  projectId: string;
  userId: string;
  name: string | null;
  description: string | null;
  neutronNetId: string | null;
  neutronSubnetId: string | null;
  availabilityZone: string | null;
  createdAt: string;
  updatedAt: string;
}

export const shareKey = (id: string) => ({ pk: `SHARE#${id}`, sk: 'SHARE' });
export const shareGsi1 = (s: Pick<Share, 'projectId' | 'createdAt' | 'id'>) => ({ gsi1pk: `PROJ#${s.projectId}#SHARE`, gsi1sk: `${s.createdAt}#${s.id}` });
export const shareTypeKey = (id: string) => ({ pk: `STYPE#${id}`, sk: 'STYPE' });
export const shareTypeNameKey = (name: string) => ({ pk: `STYPENAME#${name}`, sk: 'STYPENAME' });
export const shareNetworkKey = (id: string) => ({ pk: `SNET#${id}`, sk: 'SNET' });
export const shareBackendKey = (host: string) => ({ pk: `SBACKEND#${host}`, sk: 'SBACKEND' });
export const sharePoolKey = (poolHost: string) => ({ pk: `SPOOL#${poolHost}`, sk: 'SPOOL' });

/** Manila's share_name_template applied to the instance id: the backend's name for it. */
export const backendShareName = (instanceId: string) => `share-${instanceId}`;

/** `ferry@nfs-a#pool0` -> `ferry@nfs-a` */
export function shareBackendOf(host: string): string {
  const i = host.indexOf('#');
  return i < 0 ? host : host.slice(0, i);
}

export function sharePoolOf(host: string): string | undefined {
  const i = host.indexOf('#');
  return i < 0 ? undefined : host.slice(i + 1);
}

/** Upstream timestamps: `YYYY-MM-DDTHH:MM:SS.ffffff`, no zone. */
export function upstreamTime(iso: string | null | undefined): string | null {
  if (!iso) return null;
  return iso.replace('Z', '').replace(/\.(\d{3})$/, '.$1000');
}
