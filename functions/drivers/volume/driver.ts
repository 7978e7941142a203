/**
 * The volume driver interface, after Cinder's VolumeDriver: drivers do backend work and return
 * model updates; the orchestrator persists them. Every call is idempotent: creating a volume that
 * exists, deleting one that is gone, connecting a host that is connected all succeed without
 * change, so a retried step never fails on its own earlier success.
 *
 * A volume on the backend is named by its stable backend name (`Volume.backendName`), fixed for
 * the volume's whole life (seed 003: attachments never rename a volume).
 */
import { BadRequest } from '../../core/errors.js';

/** A host's connector, as Nova / os-brick send it (`connector` in the attachments API). */
export interface Connector {
  host: string;
  initiator?: string | null;
  ip?: string | null;
  platform?: string | null;
  os_type?: string | null;
  multipath?: boolean | null;
  mountpoint?: string | null;
  mode?: string | null;
  [key: string]: unknown;
}

export interface PoolCapabilities {
  /** Pool name; the full host string is `<backend.host>#<pool>`. */
  pool: string;
  totalCapacityGb: number;
  freeCapacityGb: number;
  multiattach: boolean;
  sharedTargets: boolean;
  storageProtocol: string;
  volumeBackendName: string;
  driverVersion: string;
  vendorName: string;
  /** Replication stats (reference §2.6 `replication_enabled`, `replication_targets`, `replication_count`, `replication_type`); absent = not replicated. */
  replicationEnabled?: boolean;
  replicationTargets?: string[];
  replicationCount?: number;
  replicationType?: string[];
}

/** What `initialize_connection` returns before the manager adds access_mode, qos_specs, ... (reference §3.5). */
export interface ConnectionProperties {
  driverVolumeType: string;
  data: Record<string, unknown>;
  /**
   * The backend accepted the connection but has not finished making it (an EBS attach still
   * `attaching`): the connection_info is final, and the volume-attach-wait machine watches the
   * backend (attachmentState) until it is made or fails. Absent or false: made (the local driver).
   */
  pending?: boolean;
}

/**
 * Where a pending connection stands on the backend (VolumeDriver.attachmentState): made, still
 * being made, or gone (the backend holds no connection of the volume to that host any more), with
 * the reason in words.
 */
export type AttachmentState = { state: 'attached' } | { state: 'attaching' } | { state: 'gone'; reason: string };

export interface BackendVolume {
  backendName: string;
  sizeGb: number;
}

export interface BackendConnection {
  backendName: string;
  host: string;
}

export interface VolumeDriver {
  /** `host@backend`, e.g. `ferry@lvm-a`. */
  readonly backendHost: string;
  /**
   * The `driver_volume_type` of every connection_info this driver returns (os-brick's connector
   * protocol: 'local', 'aws_ebs', ...). Declared, so a compute driver's support for it can be
   * checked before an attach starts rather than discovered when the connect fails.
   */
  readonly driverVolumeType: string;
  capabilities(): Promise<PoolCapabilities[]>;
  /** `multiattach`: the volume's type lets it attach to several hosts (a backend that must enable it per volume, as EBS io2 does, reads it). */
  createVolume(req: { backendName: string; sizeGb: number; pool: string; multiattach?: boolean }): Promise<{ providerLocation: string }>;
  deleteVolume(backendName: string): Promise<void>;
  extendVolume(backendName: string, newSizeGb: number): Promise<void>;
  /** Exports the volume to the connector's host. Connecting an already connected host returns the same properties. */
  initializeConnection(backendName: string, connector: Connector): Promise<ConnectionProperties>;
  /**
   * Where the connection initializeConnection answered `pending` for stands. Only drivers that
   * answer `pending` have it; a look that could not be made now (throttled) is BackendNotReady.
   */
  attachmentState?(backendName: string, connector: Connector): Promise<AttachmentState>;
  /** Removes the export to the host. Disconnecting a host that is not connected succeeds. */
  terminateConnection(backendName: string, connector: Connector): Promise<void>;
  /** Every volume the backend holds (the audit and manageable-volumes listing read this). */
  listVolumes(): Promise<BackendVolume[]>;
  /** Every host connection the backend holds (the audit reads this). */
  listConnections(): Promise<BackendConnection[]>;
  /** Size of an existing backend volume to be managed, or undefined if there is none by that name. */
  getVolume(backendName: string): Promise<BackendVolume | undefined>;
}

/** How a backend is configured (a record in the volume table, seeded by the local stack or by the operator). */
export interface BackendConfig {
  /** `host@backend` */
  host: string;
  driver: 'local' | 'aws-ebs';
  /** local driver: directory under which volumes live. */
  root?: string;
  /** aws-ebs driver: availability zone and volume type. */
  availabilityZone?: string;
  ebsVolumeType?: string;
  /** aws-ebs driver, io1/io2: IOPS provisioned per GiB (default 50). */
  ebsIopsPerGb?: number;
  pools: { name: string; totalCapacityGb: number }[];
  /** The services-table uuid of this backend's volume service (reference §3.6 `service_uuid`). */
  serviceUuid: string;
  volumeBackendName: string;
  /** Replication targets (`replication_device`); none = not replicated. */
  replicationDevices?: ReplicationDevice[];
}

/**
 * A backend whose manage can take over an object it did not make (aws-ebs: any volume of the
 * account in the backend's zone, named by its id). Adoption marks the object as this backend's
 * under that same name, so the name stays stable through manage, unmanage and manage again.
 */
export interface AdoptingDriver {
  /** Objects in reach that no Ferry backend has taken (the manageable listing adds them); `inUse` when attached somewhere. */
  listAdoptable(): Promise<(BackendVolume & { inUse: boolean })[]>;
  /** Takes the object `sourceName` for this backend's `pool` (idempotent: one already this backend's is returned); refuses one in use or another backend's. */
  adoptVolume(sourceName: string, pool: string): Promise<BackendVolume>;
  /** Undoes adoptVolume after a failed manage; an object this backend made, or one not adopted, is left as it is. */
  releaseAdopted(sourceName: string): Promise<void>;
}

// ---- Replication v2.1 (seed 001, reference §2) -------------------------------------------------

/** One `replication_device` entry of a backend: `backend_id` (never `default`) plus driver keys (the local driver reads `root`). */
export interface ReplicationDevice {
  backend_id: string;
  [key: string]: string;
}

/** Upstream's InvalidReplicationTarget (an Invalid, so 400): an unknown secondary id, or failback while on the primary. */
export class InvalidReplicationTarget extends BadRequest {
  constructor(reason: string, context?: Record<string, unknown>) {
    super(`Invalid Replication Target: ${reason}`, { context });
  }
}

/** `failover_host(..., 'default')` means fail back (upstream `VolumeManager.FAILBACK_SENTINEL`): no replication_device may be named so. */
export const FAILBACK_SENTINEL = 'default';

/**
 * What is wrong with a backend's replication_device entries, whatever its driver (reference §2.6):
 * each needs a backend_id, never the failback sentinel, and no two alike. Empty when they are fine.
 * The registry refuses to build a driver for a backend with a problem; drivers add their own keys' checks.
 */
export function replicationDeviceProblems(config: BackendConfig): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const d of config.replicationDevices ?? []) {
    const id = d.backend_id;
    if (typeof id !== 'string' || id === '') problems.push(`backend ${config.host}: a replication_device has no backend_id`);
    else if (id === FAILBACK_SENTINEL) problems.push(`backend ${config.host}: replication_device backend_id must not be "${FAILBACK_SENTINEL}" (it means fail back to the primary)`);
    else if (seen.has(id)) problems.push(`backend ${config.host}: replication_device backend_id ${id} is configured twice`);
    if (typeof id === 'string') seen.add(id);
  }
  return problems;
}

/** The service-level replication state of a backend (reference §2.3), persisted beside its config. */
export interface BackendServiceState {
  /** `enabled` | `disabled` | `not-capable` | `failing-over` | `failed-over` | `failover-error` | `error` */
  replicationStatus: string;
  /** '' or absent = the primary; otherwise the replication_device backend_id the backend runs on. */
  activeBackendId: string;
  frozen: boolean;
  disabled: boolean;
  disabledReason: string;
}

/** A volume handed to failover: the driver finds its replicas by the stable backend name. */
export interface ReplicatedVolumeRef {
  volumeId: string;
  backendName: string;
  sizeGb: number;
  /**
   * The replica this volume starts from, as recorded by an earlier run of the same batch (an opaque
   * value only the driver resolves; null: it had none). Absent: not chosen yet, the driver chooses.
   */
  replica?: string | null;
  /**
   * Where the volume is now (its record's providerLocation), when known: on a failback, the
   * target's volume to bring home, told apart from an older one of the same name left there.
   */
  location?: string;
}

/**
 * The failover step's record of the replicas a driver chose (volume id -> replica, null: none),
 * made before the driver acts on any of them: it answers what is recorded for the batch, which is
 * an earlier run's choice when there was one. A driver that starts volumes from one of several
 * replicas (aws-ebs: the newest copy, which a copy in flight can change between two runs) calls it
 * once per call, before its first effect, and uses what it answers. With `replacing` (volume id ->
 * the recorded choice found gone, e.g. a copy pruned before a re-run made anything from it), each
 * of those volumes' choices is replaced by `chosen`'s only where the record still names the gone
 * one; the answer is the record as it then is (another run's new choice, if it came first).
 */
export type RecordReplicaChoices = (chosen: Record<string, string | null>, replacing?: Record<string, string | null>) => Promise<Record<string, string | null>>;

/** `failover_host`'s answer: the backend now active, and model updates per volume (upstream's `volume_update_list`). */
export interface FailoverResult {
  activeBackendId: string;
  volumeUpdates: { volumeId: string; updates: { replicationStatus?: string; status?: string; providerLocation?: string } }[];
}

/** What a drill made: the target-side copies it brought up, to be removed by `endDrill`. */
export interface DrillCopy {
  volumeId: string;
  backendName: string;
  targetBackendId: string;
  /**
   * Where the copy can be opened (local driver: a file path; aws-ebs: the volume id). '' when only
   * the intent was recorded (a drill batch's choices, its run crashed before recording what it
   * made): endDrill then finds the copy by its own means (the driver's tags, the path by name).
   */
  location: string;
}

/**
 * Drivers of replicated backends implement this beside VolumeDriver. A driver is constructed with
 * the service's active backend id and then reads and writes that site. Every call is idempotent.
 */
export interface ReplicationDriver {
  /** The replication_device backend_ids, in configuration order (capability `replication_targets`). */
  replicationTargets(): string[];
  /** Starts keeping the volume in sync on every target (called once the volume exists). */
  enableReplication(backendName: string): Promise<void>;
  /** Stops replicating the volume and removes its replicas. */
  disableReplication(backendName: string): Promise<void>;
  /**
   * Upstream `failover_host(volumes, secondary_id)`: `secondaryId` null = the driver picks a target,
   * 'default' = fail back to the primary. Throws InvalidReplicationTarget (a FerryError 400) for an
   * unknown target. Volumes it cannot bring up get `{status: 'error'}` updates instead of throwing.
   * `recordReplicas` (the failover step's, not for failback) records which replica each volume
   * starts from before anything is made, and a volume's `replica` is an earlier run's record.
   */
  failoverHost(volumes: ReplicatedVolumeRef[], secondaryId: string | null, recordReplicas?: RecordReplicaChoices): Promise<FailoverResult>;
  freezeBackend(): Promise<void>;
  thawBackend(): Promise<void>;
  /** Beyond upstream: bring the volumes up on a target as copies, leaving the primary untouched (`recordReplicas` as failoverHost's). */
  startDrill(volumes: ReplicatedVolumeRef[], targetBackendId: string, recordReplicas?: RecordReplicaChoices): Promise<DrillCopy[]>;
  /** Removes every copy a drill made (idempotent). */
  endDrill(copies: DrillCopy[]): Promise<void>;
  /**
   * failoverHost's compensation: removes what it brought up on the target for volumes deleted
   * meanwhile, which no record will hold (`location`: the volume's failed-over providerLocation).
   * Idempotent: one already gone is done.
   */
  discardFailedOver(replicas: DrillCopy[]): Promise<void>;
}

/**
 * A volume a replication driver made on one of its sites (aws-ebs: an EBS volume in a region), as
 * the audit of unowned replicas (audit/replica-unowned.ts) reads it.
 */
export interface SiteVolume {
  /** '' the primary, else a replication_device backend_id. */
  site: string;
  /** The driver's id of it (aws-ebs: the EBS volume id). */
  location: string;
  /** The backend name it is a copy of (a drill's) or a volume of (a failover's, a failback's, the primary's own). */
  backendName: string;
  kind: 'drill' | 'volume';
  /** The backend's word for its state (aws-ebs: creating, available, in-use, error). */
  state: string;
  /** When the backend made it (ms since the epoch); unknown counts as now, so it is never old enough to repair. */
  createdAt: number;
  /** Attached somewhere: a repair never removes it. */
  inUse: boolean;
}

/** One site's volumes, or why the site could not be read (never an empty list in its place). */
export type SiteListing = { site: string; volumes: SiteVolume[] } | { site: string; error: string };

/**
 * Optional beside ReplicationDriver: what the driver made on the sites the backend does not run on
 * (every volume tagged as the backend's there) and its drill copies on the one it runs on. The
 * audit's own listing (listVolumes) covers the rest of the active site.
 */
export interface SiteVolumeDriver {
  listSiteVolumes(): Promise<SiteListing[]>;
  /** One of them as it is now; undefined when gone or not this backend's. */
  getSiteVolume(site: string, location: string): Promise<SiteVolume | undefined>;
  /** Removes one (idempotent: one already gone is done); the backend refuses one in use. */
  deleteSiteVolume(site: string, location: string): Promise<void>;
}

export function isSiteVolumeDriver(driver: VolumeDriver): driver is VolumeDriver & SiteVolumeDriver {
  return typeof (driver as Partial<SiteVolumeDriver>).listSiteVolumes === 'function';
}

/** Snapshots (Cinder's create_snapshot / delete_snapshot), by stable names. */
export interface SnapshotDriver {
  createSnapshot(backendName: string, snapshotName: string): Promise<void>;
  deleteSnapshot(backendName: string, snapshotName: string): Promise<void>;
  listSnapshots(): Promise<{ backendName: string; snapshotName: string }[]>;
}

/** What createVolume takes; the copying calls take the same. */
export interface CreateVolumeRequest {
  backendName: string;
  sizeGb: number;
  pool: string;
  multiattach?: boolean;
}

/**
 * New volumes with data (Cinder's create_volume_from_snapshot, create_cloned_volume): the new
 * volume holds the source's bytes, then zeros up to its size (never smaller than the source). Same
 * idempotency as createVolume: a volume already made under the name is returned, so a retried step
 * finds what its first try made; it is published only once whole.
 */
export interface CopyingDriver {
  createVolumeFromSnapshot(req: CreateVolumeRequest, source: { volumeBackendName: string; snapshotName: string }): Promise<{ providerLocation: string }>;
  cloneVolume(req: CreateVolumeRequest, sourceBackendName: string): Promise<{ providerLocation: string }>;
  /** Removes what a failed clone made besides the volume (an EBS clone's snapshot); the create's rollback calls it. */
  abandonCopy?(backendName: string, sourceBackendName: string): Promise<void>;
}

export function isCopyingDriver(driver: VolumeDriver): driver is VolumeDriver & CopyingDriver {
  const d = driver as Partial<CopyingDriver>;
  return typeof d.createVolumeFromSnapshot === 'function' && typeof d.cloneVolume === 'function';
}

/**
 * A volume filled from an image's bytes (Cinder's copy_image_to_volume): the bytes from offset 0,
 * then zeros to the volume's size; published only once whole, idempotent like createVolume.
 * `open` streams the bytes (the caller knows where they are kept).
 */
export interface ImageFillingDriver {
  createVolumeFromImage(req: CreateVolumeRequest, open: () => Promise<AsyncIterable<Uint8Array>>): Promise<{ providerLocation: string }>;
}

export function isImageFillingDriver(driver: VolumeDriver): driver is VolumeDriver & ImageFillingDriver {
  return typeof (driver as Partial<ImageFillingDriver>).createVolumeFromImage === 'function';
}

/** Backends whose driver writes images into volumes: the local driver's files. An EBS volume is written only through an instance. */
export function fillsFromImages(backend: Pick<BackendConfig, 'driver'>): boolean {
  return backend.driver === 'local';
}
