/**
 * The compute driver interface, after Nova's virt API (`nova/virt/driver.py:ComputeDriver`): the
 * subset the server flows need (boot, delete, power, volume attach/detach, snapshot, cold
 * migration/resize, live migration, evacuate). Drivers do hypervisor work on ONE compute host and
 * return what they did; the orchestrator (Nova's compute manager role) persists state in DynamoDB.
 *
 * Every call is idempotent: spawning a guest that exists with the same spec, destroying one that is
 * gone, powering off a stopped guest, detaching a volume that is not attached all succeed without
 * change, so a retried step never fails on its own earlier success. Failures are DriverErrors.
 *
 * What a host has USED (allocations) is not the driver's business: Ferry accounts allocations in
 * DynamoDB (Placement's role). The driver reports configured capacity and which guests exist.
 *
 * Vocabulary:
 * - a guest is DEFINED on a host when it exists there as a server (Nova: the libvirt domain);
 * - its disks may be KEPT without a definition (`destroy(uuid, {keepDisks: true})`, the source
 *   of a cold migration until confirm/revert): they are listed by `listKeptDisks`, not `listGuests`;
 * - a volume CONNECTION is host-level (os-brick's `connect_volume`): an entry under the host that
 *   points at what the volume driver exported; a guest's attached volume is a connection plus a
 *   mountpoint in the guest's definition.
 */
import type { Readable } from 'node:stream';
import type { DataExtent } from '../sparse.js';

export type { DataExtent } from '../sparse.js';

/** Nova's `nova/compute/power_state.py` values. */
export const POWER_STATE = {
  NOSTATE: 0,
  RUNNING: 1,
  PAUSED: 3,
  SHUTDOWN: 4,
  CRASHED: 6,
  SUSPENDED: 7,
} as const;
export type PowerState = (typeof POWER_STATE)[keyof typeof POWER_STATE];

/** The device name of a guest's root disk (local disk or boot volume), as Nova's libvirt driver defaults it. */
export const ROOT_DEVICE_NAME = '/dev/vda';

/** A compute host as recorded by the operator (or seeded by the local stack). */
export interface ComputeHostConfig {
  /** The compute service host (also the hypervisor hostname), e.g. `cmp1`. One path component. */
  host: string;
  driver: 'local';
  /**
   * Directory holding every local host: this host lives in `<root>/<host>`, and the hosts it
   * migrates to or evacuates from live beside it (one root is one shared storage domain).
   */
  root: string;
  /** Configured capacity (what the resource provider inventory says). */
  vcpus: number;
  memoryMb: number;
  diskGb: number;
  /** Configured down (besides the `<root>/<host>/down` flag file): every call but getHostInfo fails. */
  down?: boolean;
  /**
   * When set, a volume connection may only point into these directories (after resolving
   * symlinks): the volume backends' roots. Unset: any regular file a connection_info names.
   */
  allowedVolumeRoots?: string[];
  /**
   * The host's hardware generation: the scheduler only places a flavor with `hw:generation=N` on a
   * host of generation N (the sandbox: cell1 hosts 1, cell2 hosts 2, so moving a server to newer
   * hardware is a cross-cell resize). Unset: the host takes any flavor.
   */
  generation?: number;
}

/**
 * The source of an evacuation. The host is named only: where it lives is the driver's business
 * (a local driver finds it beside its own host under the same root).
 */
export interface EvacuationSource {
  /** The compute service host the guest is evacuated from. */
  host: string;
  /**
   * The control plane established that the source is down (its compute service is down or forced
   * down: the operator fencing it), so the driver need not see it down itself. Unset: the driver
   * refuses unless it sees the source down.
   */
  down?: boolean;
}

/**
 * What a driver can do, declared up front so the API refuses an operation before anything starts
 * (the driver still refuses deep inside as a safety net).
 */
export interface ComputeDriverCapabilities {
  /** The `driver_volume_type` values of Cinder's connection_info this host can connect (local driver: `local`). */
  readonly volumeTypes: readonly string[];
  /** Whether it live-migrates (preLiveMigration/liveMigration); false: those calls fail with a DriverError. */
  readonly liveMigration: boolean;
  /** Whether a guest's volume can be swapped under it (Nova's swap_volume: attach the new one, copy, detach the old one). */
  readonly swapVolume: boolean;
}

export interface Flavor {
  vcpus: number;
  memoryMb: number;
  /** Root disk size; 0 = the image's size (Nova's root_gb 0). */
  rootGb: number;
}

/**
 * The image a guest boots from. `path`: a readable local file; `data`: bytes in memory; `stream`:
 * a readable (or a function opening one, called only when the bytes are needed: the S3 image
 * fetch plugs in here as `{ stream: () => getObject(...).Body }`). `diskFormat`: Glance's
 * disk_format of the bytes; a 'qcow2' image is read into a raw disk (a driver that cannot refuses
 * it), any other is the disk's bytes as they are (absent: raw).
 */
export type ImageSource = ({ path: string } | { data: Uint8Array } | { stream: Readable | (() => Readable | Promise<Readable>) }) & { diskFormat?: string };

/** The formats a driver may write a snapshot in: raw bytes of the disk, or qcow2 (its data clusters only). */
export type SnapshotFormat = 'raw' | 'qcow2';

/** A volume to attach: where in the guest, and the connection_info Cinder returned for THIS host. */
export interface BlockDeviceSpec {
  /** `/dev/vdb`; `/dev/vda` (ROOT_DEVICE_NAME) is the boot volume of a volume-backed guest. */
  mountpoint: string;
  /** Cinder's connection_info: Nova's nested `{driver_volume_type, data}` or the attachments API's flat form. */
  connectionInfo: Record<string, unknown>;
  /** The Cinder volume id, recorded for the audit (also read from connection_info `serial`/`volume_id`). */
  volumeId?: string;
}

export interface GuestSpec {
  /** The server uuid (lowercase 8-4-4-4-12 hex). */
  uuid: string;
  flavor: Flavor;
  /** Absent = volume-backed: a block device at ROOT_DEVICE_NAME is then required. */
  image?: ImageSource;
  /** Identifies the image for idempotency (a retried spawn with another imageRef is refused). */
  imageRef?: string;
  blockDevices?: BlockDeviceSpec[];
  /** Nova's `power_on` argument of spawn/finish_migration; default true. */
  powerOn?: boolean;
}

export interface AttachedVolume {
  mountpoint: string;
  /** The host-level connection the guest uses (an entry under `<host>/connections/`). */
  connectionKey: string;
  volumeId?: string;
  connectionInfo: Record<string, unknown>;
}

/** A migration the guest (or its kept disks) takes part in on this host. */
export interface GuestMigration {
  kind: 'resize' | 'live';
  role: 'source' | 'dest';
  /** The other host. */
  peer: string;
  /** Source of a resize: the volumes the guest had, for finishRevertMigration's default. */
  volumes?: AttachedVolume[];
  /** Source of a resize: the flavor before. */
  flavor?: Flavor;
}

export interface GuestInfo {
  uuid: string;
  host: string;
  defined: boolean;
  powerState: PowerState;
  flavor: Flavor;
  imageRef?: string;
  rootDisk: 'local' | 'volume';
  /** Size of the local root disk file; 0 for volume-backed guests. */
  rootDiskBytes: number;
  volumes: AttachedVolume[];
  /** Power-ons and reboots since spawn: lets a test see a reboot happened. */
  bootCount: number;
  migration?: GuestMigration;
  /** The host an evacuation rebuilt it from. */
  evacuatedFrom?: string;
}

export interface HostInfo {
  host: string;
  hypervisorType: string;
  hypervisorHostname: string;
  driverVersion: string;
  /** Configured capacity. */
  vcpus: number;
  memoryMb: number;
  diskGb: number;
  /** False when the host is down (flag file or config): then every other call fails. */
  up: boolean;
  /** Defined guests (uuids). Allocations are accounted in DynamoDB, not here. */
  guests: string[];
}

/** A host-level volume connection, as the audit sees it. */
export interface HostConnection {
  key: string;
  /** The entry's path (what a hypervisor would hand the guest). */
  entryPath: string;
  /** What it points at: the volume driver's export (local driver: `device_path`). */
  devicePath: string;
  driverVolumeType: string;
  volumeId?: string;
  backendName?: string;
  /** True when the export can be opened now (the volume driver still exports it). */
  reachable: boolean;
  /** Defined guests (or a pending migration) on this host using it. */
  users: { uuid: string; mountpoint: string }[];
}

/** Bytes through a connection or a guest's disk. Writes never grow a device. */
export interface BlockHandle {
  readonly sizeBytes: number;
  /**
   * `into`: a buffer of at least `length` bytes to read into, returned as a view of it (a copy
   * reuses two buffers: a fresh 4 MiB buffer per chunk made a 1 GiB copy 5-10x slower). Optional:
   * a handle may ignore it and return a new buffer.
   */
  read(position: number, length: number, into?: Buffer): Promise<Buffer>;
  /**
   * Durable when it returns, unless `deferSync` is asked of a handle that has `flush`: then durable
   * at the next flush (a copy of many chunks syncs once, at its end).
   */
  write(position: number, data: Uint8Array, options?: { deferSync?: boolean }): Promise<void>;
  /**
   * Makes every write that completed before the call durable. May run beside a later write (a
   * block copy starts one while it copies, so the writeback overlaps the copy). Optional: without it
   * each write is durable on its own.
   */
  flush?(): Promise<void>;
  /**
   * Writes bytes [0, length) of `from` at the same offsets of this device inside the host's kernel,
   * durable when it returns, and true; false when it cannot for these two devices (then nothing was
   * written: the caller copies chunk by chunk). A block copy of a fully written device takes it: no
   * byte passes through the process (the chunk loop cost ~4x the kernel copy's CPU per GiB).
   * Optional.
   */
  copyFromInKernel?(from: Pick<BlockHandle, 'sizeBytes'>, length: number): Promise<boolean>;
  close(): Promise<void>;
  /**
   * Where the device may hold data, sorted and disjoint: every byte outside reads as zero (a
   * sparse device's holes). A copy reads only these (copyBlockData). Optional: without it the
   * whole device counts as data.
   */
  dataExtents?(): Promise<DataExtent[]>;
}

export interface SnapshotImage {
  imageId: string;
  /** The root disk's size (a qcow2 image's virtual size). */
  sizeBytes: number;
  /** What the stream holds: the raw disk, or a qcow2 image of it. */
  diskFormat: SnapshotFormat;
  /** The stream's length: sizeBytes for raw, the qcow2 file's length for qcow2. */
  imageBytes: number;
  /** The root disk as of the call, in `diskFormat`. Consume it once; nothing is left on the host when it closes. */
  stream: Readable;
  /** Raw only: where the stream may hold non-zero bytes (sorted, disjoint); all zeros elsewhere. Optional. */
  extents?: DataExtent[];
}

export interface MigrationProgress {
  /** 'disk' while the root disk copies; 'complete' once the guest runs on the destination. */
  phase: 'disk' | 'complete';
  processedBytes: number;
  totalBytes: number;
  /** 0..100, never decreasing within one call. */
  percent: number;
}

export interface LiveMigrationOptions {
  onProgress?: (p: MigrationProgress) => void;
  /** Abort before the switch-over: the call rejects (MigrationAborted) and the guest stays on the source. */
  signal?: AbortSignal;
  /** Copy granularity (default 1 MiB). */
  chunkBytes?: number;
  /** Bandwidth cap of the copy, bytes per second (Nova's [libvirt] live_migration_bandwidth); unlimited when absent. */
  bytesPerSecond?: number;
}

/** What pre_live_migration prepared on the destination (Nova's migrate_data, the parts the driver needs). */
export interface LiveMigrateData {
  uuid: string;
  sourceHost: string;
  destHost: string;
  rootDisk: 'local' | 'volume';
  /** Destination connection keys, by mountpoint. */
  destConnections: Record<string, string>;
}

export interface ConnectResult {
  key: string;
  entryPath: string;
  devicePath: string;
}

export interface CanConnect {
  canConnect: boolean;
  reason?: string;
}

export interface ComputeDriver {
  readonly host: string;

  /** Constant for a driver instance; answers without touching the host (also when it is down). */
  capabilities(): ComputeDriverCapabilities;

  // ---- host ---------------------------------------------------------------------------------
  /** Capacity as configured plus the guests that exist; never fails for a down host (up: false). */
  getHostInfo(): Promise<HostInfo>;
  listGuests(): Promise<GuestInfo[]>;
  /** uuids whose disks are kept without a definition (destroy keepDisks, cold-migration sources). */
  listKeptDisks(): Promise<GuestInfo[]>;
  /** A defined guest or kept disks; undefined when the host has nothing of that uuid. */
  getGuest(uuid: string): Promise<GuestInfo | undefined>;

  // ---- lifecycle ----------------------------------------------------------------------------
  /** Creates the root disk (image bytes, sparse-extended to rootGb), connects the block devices, defines and (by default) powers on. */
  spawn(spec: GuestSpec): Promise<GuestInfo>;
  /** Powers off, disconnects the guest's volumes on this host, removes the definition; the disks too unless keepDisks. */
  destroy(uuid: string, options?: { keepDisks?: boolean }): Promise<void>;
  powerOff(uuid: string): Promise<void>;
  powerOn(uuid: string): Promise<void>;
  reboot(uuid: string, type?: 'SOFT' | 'HARD'): Promise<void>;
  /** RUNNING -> PAUSED (Nova's pause: the guest keeps its memory, stops running); already PAUSED: done. */
  pause(uuid: string): Promise<void>;
  /** PAUSED -> RUNNING; already RUNNING: done. */
  unpause(uuid: string): Promise<void>;
  /** RUNNING or PAUSED -> SUSPENDED (Nova's suspend: state saved, guest stopped); already SUSPENDED: done. */
  suspend(uuid: string): Promise<void>;
  /** SUSPENDED -> RUNNING; already RUNNING: done. */
  resume(uuid: string): Promise<void>;
  /** NOSTATE when the guest is not defined here (Nova's manager maps InstanceNotFound so). */
  getPowerState(uuid: string): Promise<PowerState>;
  /**
   * The root disk as of now (defined guest or kept disks), as an image the caller stores (S3): raw
   * by default, or in `options.diskFormat` where the driver can write it (Nova's
   * `[libvirt] snapshot_image_format`); the image says which it is.
   */
  snapshot(uuid: string, imageId: string, options?: { diskFormat?: SnapshotFormat }): Promise<SnapshotImage>;

  // ---- volumes (os-brick + driver.attach_volume) ----------------------------------------------
  canConnectVolume(connectionInfo: Record<string, unknown>): Promise<CanConnect>;
  /** Host-level: makes (or finds) this host's entry for the export. */
  connectVolume(connectionInfo: Record<string, unknown>): Promise<ConnectResult>;
  /** Host-level: removes the entry unless a guest on this host still uses it (or `force`). */
  disconnectVolume(connectionInfo: Record<string, unknown>, options?: { force?: boolean }): Promise<void>;
  attachVolume(uuid: string, connectionInfo: Record<string, unknown>, mountpoint: string, volumeId?: string): Promise<AttachedVolume>;
  detachVolume(uuid: string, mountpoint: string): Promise<void>;
  listConnections(): Promise<HostConnection[]>;
  /** Opens the bytes behind a connection on this host. */
  openConnection(connectionInfo: Record<string, unknown>): Promise<BlockHandle>;
  /** Opens a guest's device: ROOT_DEVICE_NAME (local root disk or boot volume) or an attached mountpoint. */
  openGuestDevice(uuid: string, device: string): Promise<BlockHandle>;

  // ---- cold migration / resize --------------------------------------------------------------
  // The peer host is passed by name: the driver resolves where it lives from its own configuration.
  /** Source: powers off, copies the root disk to the destination, disconnects volumes, keeps the disks here until confirm/revert. */
  migrateDiskAndPowerOff(uuid: string, destHost: string, flavor: Flavor): Promise<void>;
  /** Destination: defines the guest on the copied disk (grown to the new flavor), connects the new block devices. */
  finishMigration(spec: Omit<GuestSpec, 'image'>, sourceHost: string): Promise<GuestInfo>;
  /** Source: removes the kept disks (also cross-cell confirm). Refuses while the guest is defined here. */
  confirmMigration(uuid: string): Promise<void>;
  /** Source: defines the guest again on its kept disks (old flavor) with the given (or recorded) volumes. */
  finishRevertMigration(uuid: string, options?: { blockDevices?: BlockDeviceSpec[]; powerOn?: boolean }): Promise<GuestInfo>;

  // ---- live migration -----------------------------------------------------------------------
  /** Destination: connects the destination's block devices and prepares to receive the guest. */
  preLiveMigration(spec: Omit<GuestSpec, 'image'>, sourceHost: string): Promise<LiveMigrateData>;
  /** Source: copies the root disk with progress, then switches the guest over to the destination. */
  liveMigration(uuid: string, destHost: string, options?: LiveMigrationOptions): Promise<void>;
  /** Source, after success: disconnects the source's volumes and removes the source's disks. */
  postLiveMigration(uuid: string): Promise<void>;
  /** Destination, after success: clears the migration mark. */
  postLiveMigrationAtDestination(uuid: string): Promise<GuestInfo>;
  /** Destination, after failure: disconnects what pre_live_migration connected and removes the partial copy. */
  rollbackLiveMigrationAtDestination(uuid: string): Promise<void>;

  // ---- evacuate -----------------------------------------------------------------------------
  /**
   * Nova's rebuild(recreate=True) on this (destination) host: the source must be down. The root
   * disk is copied from the source host's disk when it is readable (shared storage), else
   * built from `spec.image`; volume-backed guests need neither. The source is left as it is: when
   * it comes back, `destroy` there removes the stale guest.
   */
  spawnEvacuated(spec: GuestSpec, source: EvacuationSource): Promise<GuestInfo>;
}
