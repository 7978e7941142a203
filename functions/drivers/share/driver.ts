/**
 * The share driver interface (Manila's ShareDriver, the subset Ferry uses), including the
 * migration methods the migration work calls (M/share/driver.py migration_*, connection_get_info,
 * update_access). A share on a backend is named `share-<instance id>` (Manila's
 * share_name_template), stable for the instance's life.
 */

export type ShareDriverKind = 'local-a' | 'local-b';

export interface SharePoolConfig {
  name: string;
  totalCapacityGb: number;
}

/** A share backend (a manila-share service `host@backend`) as recorded in the share table. */
export interface ShareBackendConfig {
  /** `ferry@nfs-a` */
  host: string;
  driver: ShareDriverKind;
  /** Directory holding the backend's shares (local kinds). */
  root: string;
  pools: SharePoolConfig[];
  /** What a share type's `share_backend_name` extra spec matches. */
  shareBackendName: string;
  availabilityZone?: string;
  /** Protocols the backend exports. */
  protocols: string[];
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
  /** Absolute path of the export. */
  exportPath: string;
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

export interface ShareDriver {
  readonly kind: ShareDriverKind;
  capabilities(): Promise<SharePoolCapabilities[]>;
  /** Idempotent: a share already there is returned as it is. */
  createShare(req: { name: string; sizeGb: number; proto: string; pool: string }): Promise<BackendShare>;
  /** Idempotent: a share not there is fine. */
  deleteShare(name: string): Promise<void>;
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
  /** Returns the destination's export paths. */
  migrationComplete(req: MigrationRequest): Promise<string[]>;
  migrationCancel(req: MigrationRequest): Promise<void>;
  migrationGetProgress(req: MigrationRequest): Promise<MigrationProgress>;
  connectionGetInfo(name: string): Promise<ConnectionInfo>;
}
