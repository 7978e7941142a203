/**
 * Servers: the Nova model of an instance and what hangs off it, with DynamoDB keys.
 *
 * Where each lives (DESIGN: one table per database of the reference; a cell is its own failure domain):
 *
 * | item | table | pk | sk | gsi1pk / gsi1sk |
 * |---|---|---|---|---|
 * | instance mapping (uuid -> cell) | compute-api | `INSTMAP#<uuid>` | `INSTMAP` | `INSTMAPS` / `<createdAt>#<uuid>` |
 * | request spec (what the scheduler is asked) | compute-api | `INSTMAP#<uuid>` | `REQSPEC` | - |
 * | image (bytes in S3 `images/<id>`) | compute-api | `IMAGE#<id>` | `IMAGE` | `IMAGES` / name |
 * | port | compute-api | `PORT#<id>` | `PORT` | `DEVICE#<instance uuid>` / port id |
 * | fixed IP claim | compute-api | `IP#<network>#<ip>` | `IP` | - |
 * | instance | cell<N> | `INSTANCE#<uuid>` | `INSTANCE` | `INSTANCES` / `<createdAt>#<uuid>` |
 * | block device mapping | cell<N> | `INSTANCE#<uuid>` | `BDM#<bdm uuid>` | - |
 * | instance action (events inside) | cell<N> | `INSTANCE#<uuid>` | `ACTION#<request id>` | `ACTIONS` / `<startTime>#<uuid>#<request id>` |
 * | migration | cell<N> | `MIGRATION#<uuid>` | `MIGRATION` | `MIGRATIONS` / `<createdAt>#<uuid>` |
 *
 * An instance, its BDMs and its actions share a partition, so one transaction can change the
 * instance and its BDMs together, conditional on the instance's version. Allocations and the
 * nodes' free capacity are Placement's (compute/model.ts, compute/placement.ts).
 */
import type { Flavor } from '../compute/model.js';

export { newMigration, type Migration, type MigrationStatus, type MigrationType } from './migration-model.js';

/** nova/compute/vm_states.py */
export type VmState = 'building' | 'active' | 'stopped' | 'paused' | 'suspended' | 'resized' | 'shelved' | 'shelved_offloaded' | 'deleted' | 'error' | 'soft-delete' | 'rescued';

/** nova/compute/task_states.py (the ones Ferry's flows use). */
export type TaskState =
  | 'scheduling'
  | 'block_device_mapping'
  | 'networking'
  | 'spawning'
  | 'deleting'
  | 'powering-off'
  | 'powering-on'
  | 'rebooting_hard'
  | 'pausing'
  | 'unpausing'
  | 'suspending'
  | 'resuming'
  | 'reboot_started_hard'
  | 'resize_prep'
  | 'resize_migrating'
  | 'resize_migrated'
  | 'resize_finish'
  | 'resize_reverting'
  | 'resize_confirming'
  | 'migrating'
  | 'rebuilding'
  | 'rebuild_spawning'
  | 'shelving'
  | 'shelving_image_pending_upload'
  | 'shelving_image_uploading'
  | 'shelving_offloading'
  | 'unshelving'
  | 'spawning_unshelve';

/** The flavor as the instance carries it (Nova's instance.flavor / old_flavor / new_flavor). */
export type InstanceFlavor = Pick<Flavor, 'flavorid' | 'id' | 'name' | 'vcpus' | 'memoryMb' | 'rootGb' | 'ephemeralGb' | 'swap' | 'extraSpecs'>;

export function instanceFlavorOf(f: Flavor): InstanceFlavor {
  return { flavorid: f.flavorid, id: f.id, name: f.name, vcpus: f.vcpus, memoryMb: f.memoryMb, rootGb: f.rootGb, ephemeralGb: f.ephemeralGb, swap: f.swap, extraSpecs: f.extraSpecs };
}

export interface InstanceFault {
  code: number;
  message: string;
  details: string;
  created: string;
}

/**
 * What an operation in flight has made so far, so a rollback undoes exactly that. Recorded BEFORE
 * it is made, under ids derived from the request and the step (core/intents.ts): a step re-run
 * after a crash finds the same id here and makes the effect idempotently under it.
 */
export interface OperationHolds {
  /** Attachments this operation makes (or made), by BDM uuid (destination or placeholder attachments). */
  newAttachments?: Record<string, string>;
  /** Attachments a rollback makes in place of the operation's ones (empty placeholders), by BDM uuid. */
  rollbackAttachments?: Record<string, string>;
  /** For an attachment made in place of a BDM's attachment: the one it replaces (deleted once the BDM switched), by the new id. */
  replacedAttachments?: Record<string, string>;
  /** The attachment each BDM had before the operation, by BDM uuid (what a rollback restores). */
  oldAttachments?: Record<string, string>;
  /** Connection info each BDM had before the operation, by BDM uuid. */
  oldConnectionInfo?: Record<string, Record<string, unknown> | null>;
  /** A destination host port bindings were made on. */
  boundHost?: string;
  /** A guest (or partial copy) exists on this destination host. */
  destGuest?: string;
  /** An image uploaded by this operation (shelve snapshot). */
  imageId?: string;
  /** A BDM this operation created (attach), to destroy on rollback. */
  bdmUuid?: string;
  /** Host-level volume connections this operation made outside a guest (swap's new volume), to disconnect on rollback. */
  hostConnections?: { host: string; connectionInfo: Record<string, unknown> }[];
  /**
   * Cross-cell move (reference §1): the cell a hidden copy of the instance is (being) made in by
   * this operation (TargetDBSetupTask), recorded before the first item of the copy is written.
   */
  targetCell?: string;
  /** Cross-cell move: the destination attachment (att_D, reserved without a connector) of each volume BDM, by BDM uuid. */
  destAttachments?: Record<string, string>;
}

/** Every attachment id an operation's record names (made, to be made, replaced or restored): none of them is an orphan while it runs. */
export function attachmentsNamedBy(op: Pick<ServerOperation, 'holds'>): string[] {
  const h = op.holds;
  const ids = [h.newAttachments, h.rollbackAttachments, h.oldAttachments, h.replacedAttachments, h.destAttachments].flatMap((m) => Object.values(m ?? {}));
  return [...new Set(ids.filter((id) => id !== ''))];
}

/** The operation an instance is in (one at a time, gated by task_state like Nova's expected_task_state). */
export interface ServerOperation {
  kind: OperationKind;
  /** The request id of the API call (also the instance action's key). */
  requestId: string;
  /** The Step Functions execution name. */
  executionName: string;
  migrationUuid?: string;
  /** Operation parameters (flavor, host, volume ids, ...). */
  params: Record<string, unknown>;
  holds: OperationHolds;
  startedAt: string;
}

export type OperationKind =
  | 'create'
  | 'delete'
  | 'stop'
  | 'start'
  | 'reboot'
  | 'pause'
  | 'unpause'
  | 'suspend'
  | 'resume'
  | 'rebuild'
  | 'attach_volume'
  | 'detach_volume'
  | 'swap_volume'
  | 'live_migration'
  | 'resize'
  | 'confirm_resize'
  | 'revert_resize'
  | 'cross_cell_confirm'
  | 'cross_cell_revert'
  | 'evacuate'
  | 'shelve'
  | 'shelve_offload'
  | 'unshelve';

export interface Instance {
  uuid: string;
  name: string;
  projectId: string;
  userId: string;
  flavor: InstanceFlavor;
  oldFlavor: InstanceFlavor | null;
  newFlavor: InstanceFlavor | null;
  /** '' for a volume-backed server (Nova's image_ref ''). */
  imageRef: string;
  host: string | null;
  /** The hypervisor hostname (Nova's instance.node). */
  node: string | null;
  availabilityZone: string | null;
  vmState: VmState;
  taskState: TaskState | null;
  powerState: number;
  progress: number;
  metadata: Record<string, string>;
  keyName: string | null;
  /** Nova's system_metadata (old_vm_state, image_base_image_ref, shelved_image_id, ...). */
  systemMetadata: Record<string, string>;
  hidden: boolean;
  locked: boolean;
  /** Nova's locked_by: who set the lock (an unlock by the other kind needs unlock_override); absent on records from before it. */
  lockedBy?: 'owner' | 'admin' | null;
  fault: InstanceFault | null;
  operation: ServerOperation | null;
  launchedAt: string | null;
  terminatedAt: string | null;
  createdAt: string;
  updatedAt: string;
  /** Bumped by every write; every write is conditional on the version read. */
  version: number;
  /**
   * The Cinder attachments its BDMs use, attachment id -> volume id (attachmentsInUseOf), written
   * with every change of its BDMs, so Cinder's attachment delete checks in its own transaction,
   * not by a read, that no server uses the attachment (servers/attachment-users.ts). Absent on
   * records written before it; the first such check writes it from the BDMs.
   */
  attachmentsInUse?: Record<string, string>;
}

/** What `Instance.attachmentsInUse` holds for these BDMs: each attachment a volume BDM uses, with its volume. */
export function attachmentsInUseOf(bdms: readonly BlockDeviceMapping[]): Record<string, string> {
  return Object.fromEntries(bdms.flatMap((b) => (b.attachmentId && b.volumeId ? [[b.attachmentId, b.volumeId]] : [])));
}

export interface BlockDeviceMapping {
  uuid: string;
  instanceUuid: string;
  sourceType: 'image' | 'volume' | 'blank';
  destinationType: 'local' | 'volume';
  volumeId: string | null;
  imageId: string | null;
  bootIndex: number | null;
  deviceName: string | null;
  /** The Cinder attachment this BDM uses now. */
  attachmentId: string | null;
  /** The connection_info of the attachment on the instance's host (null while not connected). */
  connectionInfo: Record<string, unknown> | null;
  deleteOnTermination: boolean;
  tag: string | null;
  volumeSize: number | null;
  createdAt: string;
  updatedAt: string;
}

export interface InstanceActionEvent {
  event: string;
  startTime: string;
  finishTime: string | null;
  /** 'Success' | 'Error' | null while running */
  result: string | null;
  traceback: string | null;
  host: string | null;
  details: string | null;
}

export interface InstanceAction {
  action: string;
  instanceUuid: string;
  requestId: string;
  userId: string;
  projectId: string;
  startTime: string;
  finishTime: string | null;
  /** 'Error' once an event failed. */
  message: string | null;
  updatedAt: string;
  events: InstanceActionEvent[];
}

export interface InstanceMapping {
  instanceUuid: string;
  cellUuid: string;
  projectId: string;
  userId: string;
  queuedForDelete: boolean;
  createdAt: string;
}

/**
 * Nova's RequestSpec (API database): what the scheduler was asked for this instance. Its flavor
 * follows a confirmed resize, so it always equals the instance's settled flavor (Ferry's moves read
 * that); a move's own parameters (target host, ignore_hosts) ride on the operation, as Nova resets
 * them per request.
 */
export interface RequestSpec {
  instanceUuid: string;
  projectId: string;
  flavor: InstanceFlavor;
  imageRef: string;
  isBfv: boolean;
  availabilityZone: string | null;
  numInstances: number;
  createdAt: string;
  updatedAt: string;
}

export interface PortBinding {
  host: string;
  status: 'ACTIVE' | 'INACTIVE';
  vifType: string;
  vnicType: string;
  profile: Record<string, unknown>;
}

export interface Port {
  id: string;
  networkId: string;
  macAddress: string;
  fixedIps: { ipAddress: string; subnetId: string }[];
  deviceId: string;
  deviceOwner: string;
  projectId: string;
  /** binding:host_id: the host of the ACTIVE binding. */
  bindingHostId: string | null;
  /** Neutron's binding-extended: one binding per host, at most one ACTIVE. */
  bindings: Record<string, PortBinding>;
  status: 'ACTIVE' | 'DOWN' | 'BUILD';
  createdAt: string;
  updatedAt: string;
}

export interface Image {
  id: string;
  name: string;
  /** `importing`: a web-download import holds it (functions/images/import-task.ts), queued -> importing -> active, or back to queued. */
  status: 'queued' | 'saving' | 'importing' | 'active' | 'deleted';
  sizeBytes: number;
  minDisk: number;
  minRam: number;
  diskFormat: string;
  containerFormat: string;
  visibility: 'public' | 'private' | 'shared' | 'community';
  ownerProjectId: string | null;
  /** Properties (image_type snapshot, instance_uuid, ...). */
  properties: Record<string, string>;
  /** S3 key of the bytes. */
  objectKey: string;
  sha256: string | null;
  /** Glance's `checksum` (MD5) and `os_hash_value` (SHA-512) of the bytes; absent on images uploaded before Ferry recorded them. */
  md5?: string | null;
  sha512?: string | null;
  /** Glance's `tags` and `protected` (a protected image cannot be deleted). */
  tags?: string[];
  protected?: boolean;
  /** The image's latest import (Glance's task of type api_image_import): its lock while `processing`, its outcome after. */
  importTask?: ImageImportTask;
  createdAt: string;
  updatedAt: string;
}

/**
 * An import of an image's data (Glance's `api_image_import` task, as `GET /v2/images/{id}/tasks`
 * shows it). Recorded on the image by the conditional write that moves it queued -> importing: the
 * intent of the import state machine, whose execution is named after `id`.
 */
export interface ImageImportTask {
  id: string;
  /** Glance's task statuses: processing while the import runs, then success or failure. */
  status: 'processing' | 'success' | 'failure';
  method: 'web-download';
  uri: string;
  /** Why it failed (Glance's task message); empty otherwise. */
  message: string;
  ownerProjectId: string | null;
  userId: string;
  createdAt: string;
  updatedAt: string;
}

// ---------------------------------------------------------------------------------------------
// Keys

export const instanceMappingKey = (uuid: string) => ({ pk: `INSTMAP#${uuid}`, sk: 'INSTMAP' });
export const requestSpecKey = (uuid: string) => ({ pk: `INSTMAP#${uuid}`, sk: 'REQSPEC' });
export const imageKey = (id: string) => ({ pk: `IMAGE#${id}`, sk: 'IMAGE' });
export const portKey = (id: string) => ({ pk: `PORT#${id}`, sk: 'PORT' });
export const fixedIpKey = (networkId: string, ip: string) => ({ pk: `IP#${networkId}#${ip}`, sk: 'IP' });
export const instanceKey = (uuid: string) => ({ pk: `INSTANCE#${uuid}`, sk: 'INSTANCE' });
export const bdmKey = (instanceUuid: string, bdmUuid: string) => ({ pk: `INSTANCE#${instanceUuid}`, sk: `BDM#${bdmUuid}` });
export const actionKey = (instanceUuid: string, requestId: string) => ({ pk: `INSTANCE#${instanceUuid}`, sk: `ACTION#${requestId}` });
export const migrationCounterKey = () => ({ pk: 'COUNTER#MIGRATION', sk: 'COUNTER' });
export const migrationKey = (uuid: string) => ({ pk: `MIGRATION#${uuid}`, sk: 'MIGRATION' });

export const SERVER_GSI = {
  instanceMappings: 'INSTMAPS',
  images: 'IMAGES',
  instances: 'INSTANCES',
  migrations: 'MIGRATIONS',
  /** Instance actions by start time (`<startTime>#<uuid>#<request id>`): what ferry ops reads. */
  actions: 'ACTIONS',
  portsOf: (instanceUuid: string) => `DEVICE#${instanceUuid}`,
} as const;
