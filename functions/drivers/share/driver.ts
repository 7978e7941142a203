/**
 * The share driver interface (Manila's ShareDriver, the subset Ferry uses), including the
 * migration methods the migration work calls (M/share/driver.py migration_*, connection_get_info,
 * update_access). A share on a backend is named `share-<instance id>` (Manila's
 * share_name_template), stable for the instance's life.
 *
 * What flows see is kind-neutral: a backend's common record (ShareBackendConfig), share names,
 * export locations (opaque strings that only the driver and the data node resolve) and what each
 * driver declares it can do (ShareDriverFeatures). Where a backend keeps its shares (a directory
 * for the local kinds, an EFS file system per share for `aws-efs`) is in the kind's own
 * configuration type, which only its driver reads. The contract every driver keeps is
 * docs/drivers.md "Share drivers", checked by test/contracts/share-driver.ts.
 */

import { DriverError } from '../../core/errors.js';

export type ShareDriverKind = 'local-a' | 'local-b' | 'aws-efs';

export interface SharePoolConfig {
  name: string;
  totalCapacityGb: number;
}

/**
 * A share backend (a manila-share service `host@backend`) as recorded in the share table: what
 * every kind has. The kind's own settings ride along on the same record (LocalShareBackendConfig)
 * and are read by its driver only.
 */
export interface ShareBackendConfig {
  /** `ferry@nfs-a` */
  host: string;
  driver: ShareDriverKind;
  pools: SharePoolConfig[];
  /** What a share type's `share_backend_name` extra spec matches. */
  shareBackendName: string;
  availabilityZone?: string;
  /** Protocols the backend exports. */
  protocols: string[];
}

/** A backend of the local kinds: its shares are directories under `root` on this machine. */
export interface LocalShareBackendConfig extends ShareBackendConfig {
  driver: 'local-a' | 'local-b';
  /** Directory holding the backend's shares. */
  root: string;
}

/**
 * A backend of the `aws-efs` kind: each share is an EFS file system of its own in `region`, with a
 * mount target in each of `subnetIds` (one per availability zone) behind a security group of its
 * own in `vpcId` (functions/drivers/share/aws-efs.ts). Read by that driver only.
 */
export interface AwsEfsShareBackendConfig extends ShareBackendConfig {
  driver: 'aws-efs';
  /** `eu-west-1`: where the file systems are made. */
  region: string;
  /** The VPC of the subnets: each share's security group is made there. */
  vpcId: string;
  /** One subnet per availability zone the shares are mounted from (EFS allows one mount target per zone). */
  subnetIds: string[];
  /** EFS performance mode; default `generalPurpose` (AWS's recommendation; `maxIO` cannot go with elastic throughput). */
  performanceMode?: 'generalPurpose' | 'maxIO';
  /** EFS throughput mode; default `elastic`. */
  throughputMode?: 'elastic' | 'bursting';
}

export interface SharePoolCapabilities {
  pool: string;
  totalCapacityGb: number;
  driverHandlesShareServers: false;
  storageProtocol: string;
  vendorName: string;
  driverVersion: string;
  snapshotSupport: boolean;
}

export interface BackendShare {
  /** `share-<instance id>` */
  name: string;
  /**
   * Where clients mount the share, as the API shows it (export_locations). Opaque to flows: they
   * store and show it, and hand it to the data node (the copy worker), which mounts it.
   */
  exportLocation: string;
}

export interface DriverAccessRule {
  id: string;
  accessType: 'ip' | 'user';
  accessTo: string;
  accessLevel: 'rw' | 'ro';
}

/** Manila's migration_check_compatibility answer. */
export interface MigrationCompatibility {
  compatible: boolean;
  writable: boolean;
  preserve_metadata: boolean;
  nondisruptive: boolean;
  preserve_snapshots: boolean;
}

/**
 * What a driver declares it can do, before any call: the migrations it does by itself
 * (driver-assisted) and what such a migration keeps. migration_check_compatibility answers from
 * it for one destination; a driver that declares no destination kind refuses every migration
 * method with a DriverError (the migration falls back to host-assisted).
 */
export interface ShareDriverFeatures {
  /** Destination driver kinds this driver migrates to by itself (another backend only); empty: none. */
  driverAssistedMigrationTo: readonly ShareDriverKind[];
  /** The promises of its driver-assisted migration (Manila's migration_check_compatibility flags). */
  migrationKeeps: { writable: boolean; preserveMetadata: boolean; nondisruptive: boolean; preserveSnapshots: boolean };
  /**
   * How phase 1 is polled: `slices` (the default) when each migration_continue does a bounded slice
   * of the copy itself (polled again after seconds); `backend` when the backend copies by itself
   * (EFS replication) and migration_continue only looks (polled every few minutes).
   */
  migrationPoll?: 'slices' | 'backend';
}

/** Manila's connection_get_info: mount templates and the access mapping (protocol per access type). */
export interface ConnectionInfo {
  mount: string;
  unmount: string;
  access_mapping: Record<string, string[]>;
}

/** What the source's driver needs of a migration: both instances' names and the destination backend. */
export interface MigrationRequest {
  source: { name: string; sizeGb: number; proto: string };
  destination: { name: string; host: string; backend: ShareBackendConfig };
}

export interface MigrationProgress {
  total_progress: number;
  /** Bytes and regular files of the source that are on the destination, and the totals (as of the last pass). */
  bytes_done?: number;
  bytes_total?: number;
  files_done?: number;
  files_total?: number;
  [k: string]: unknown;
}

/** What a share holds against its size, as its backend meters it. */
export interface ShareUsage {
  name: string;
  /** The share's size: the quota the driver keeps. */
  sizeGb: number;
  /** What the backend meters as used (EFS: SizeInBytes, metered from time to time, so it lags the writes). */
  usedBytes: number;
  overQuota: boolean;
  /** True while the driver withholds writes because the share is over its size. */
  writesBlocked: boolean;
}

/**
 * A driver whose backend gives a share no size of its own (EFS grows without limit) keeps the
 * share's size as a quota: it records the size, grows it (Manila's extend_share), reports usage
 * and withholds writes from a share over its size (`enforceQuota`, idempotent, for a periodic
 * caller). The local kinds are not quota drivers: a directory has no size either, and nothing
 * enforces one there. Type guard: isShareQuotaDriver.
 */
export interface ShareQuotaDriver {
  /** Grows the share's size to newSizeGb and lifts a block of writes it no longer exceeds (the same size: no change; smaller: DriverError; a share not there: DriverError). */
  extendShare(name: string, newSizeGb: number): Promise<void>;
  /** Manila's shrink_share: below what the share holds is ShareShrinkingPossibleDataLoss, nothing changed (the same size: no change; larger: DriverError). */
  shrinkShare(name: string, newSizeGb: number): Promise<void>;
  /** undefined when the backend has no such share. */
  shareUsage(name: string): Promise<ShareUsage | undefined>;
  /**
   * Blocks writes to a share over its size, lifts the block once it is within it again; a share not
   * there: DriverError. With `rules` (the share's record), the whole rule set is pushed with it, so
   * a caller that races an access change re-asserts the record rather than what it read back.
   */
  enforceQuota(name: string, rules?: DriverAccessRule[]): Promise<ShareUsage>;
}

/**
 * A driver that can put a share's size back after a failed resize of its own (functions/shares/resize.ts
 * putBackendBack): the size set to sizeGb whichever way it moves, with no data-loss check. The undo
 * of a failed extend is not a user's shrink: what the share holds was written under the old size or
 * under the raised one for the moments the extend ran, and a size is only a record and a write block
 * (EFS, a directory): nothing is removed, a share left over its size has its writes withheld (by the
 * next enforcement on aws-efs), as after any write past its size. Idempotent; a share not there: DriverError.
 */
export interface ShareSizeRestorer {
  restoreShareSize(name: string, sizeGb: number): Promise<void>;
}

export function isShareSizeRestorer(driver: ShareDriver): driver is ShareDriver & ShareSizeRestorer {
  return typeof (driver as Partial<ShareSizeRestorer>).restoreShareSize === 'function';
}

/**
 * Manila's ShareShrinkingPossibleDataLoss (M/exception.py): the size asked is below what the share
 * holds. Manila's share manager answers it by setting the share back to `available` with a user
 * message (action shrink, detail 018 DRIVER_REFUSED_SHRINK), not with an error status.
 */
export class ShareShrinkingPossibleDataLoss extends DriverError {}

export function isShareQuotaDriver(driver: ShareDriver): driver is ShareDriver & ShareQuotaDriver {
  const d = driver as Partial<Record<keyof ShareQuotaDriver, unknown>>;
  return typeof d.extendShare === 'function' && typeof d.shrinkShare === 'function' && typeof d.shareUsage === 'function' && typeof d.enforceQuota === 'function';
}

/** A replication whose source is one of a backend's shares (EFS replication), as the audit sees it. */
export interface ShareReplication {
  /** The source share (`share-<instance id>`). */
  name: string;
  sourceId: string;
  /** The replica; `host` and `name` when it is a share of a Ferry backend (its tags say so). */
  replica: { id: string; region: string; host?: string; name?: string };
  status: string;
  /** When the replication was made (ISO time), as the backend reports it. */
  createdAt?: string;
}

/**
 * A driver whose backend replicates shares by itself (aws-efs): the audit lists the replications
 * of a backend's shares to find those no migration holds, and its repair deletes one. Type guard:
 * isShareReplicationDriver.
 */
export interface ShareReplicationDriver {
  shareReplications(): Promise<ShareReplication[]>;
  /** Deletes the replication whose source is this share; none is success; BackendNotReady until it is gone. */
  deleteShareReplication(name: string): Promise<void>;
}

export function isShareReplicationDriver(driver: ShareDriver): driver is ShareDriver & ShareReplicationDriver {
  const d = driver as Partial<Record<keyof ShareReplicationDriver, unknown>>;
  return typeof d.shareReplications === 'function' && typeof d.deleteShareReplication === 'function';
}

/**
 * How Ferry's copy worker (the data node of a host-assisted migration) reaches a share that is a
 * file system of its own (aws-efs): the file system, and the network its mount targets are in.
 * On AWS the copy task mounts it as an EFS volume of a task definition registered for the migration
 * (functions/migration/copy-task-definition.ts), with an ENI in `subnetIds` behind
 * `securityGroupId`, the share's own group, which admits NFS from its members.
 */
export interface DataNodeMount {
  kind: 'efs';
  fileSystemId: string;
  region: string;
  vpcId: string;
  subnetIds: string[];
  securityGroupId: string;
}

/** A driver whose shares the copy worker mounts as file systems of their own (aws-efs). Type guard: isShareDataNodeDriver. */
export interface ShareDataNodeDriver {
  /** Where the data node mounts the share; makes the share's group admit NFS from its members (idempotent); a share not there: DriverError. */
  dataNodeMount(name: string): Promise<DataNodeMount>;
}

export function isShareDataNodeDriver(driver: ShareDriver): driver is ShareDriver & ShareDataNodeDriver {
  return typeof (driver as Partial<ShareDataNodeDriver>).dataNodeMount === 'function';
}

export interface ShareDriver {
  readonly kind: ShareDriverKind;
  readonly features: ShareDriverFeatures;
  capabilities(): Promise<SharePoolCapabilities[]>;
  /** Idempotent: a share already there is returned as it is. */
  createShare(req: { name: string; sizeGb: number; proto: string; pool: string }): Promise<BackendShare>;
  /** Idempotent: a share not there is fine. */
  deleteShare(name: string): Promise<void>;
  /** undefined when the backend has no such share (never for a failed read: that throws). */
  getShare(name: string): Promise<BackendShare | undefined>;
  listShares(): Promise<BackendShare[]>;
  /** Replaces the share's whole rule set (Manila's update_access with access_rules = all). */
  updateAccess(name: string, rules: DriverAccessRule[]): Promise<void>;
  /** The rules the backend holds for a share (for tests and the audit). */
  getAccess(name: string): Promise<DriverAccessRule[]>;

  migrationCheckCompatibility(req: MigrationRequest): Promise<MigrationCompatibility>;
  migrationStart(req: MigrationRequest): Promise<void>;
  /** True when phase 1 is done. */
  migrationContinue(req: MigrationRequest): Promise<boolean>;
  /** Returns the destination's export locations. */
  migrationComplete(req: MigrationRequest): Promise<string[]>;
  migrationCancel(req: MigrationRequest): Promise<void>;
  migrationGetProgress(req: MigrationRequest): Promise<MigrationProgress>;
  connectionGetInfo(name: string): Promise<ConnectionInfo>;
}
