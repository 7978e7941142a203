/**
 * POST /volumes (C/api/v3/volumes.py create): the body's validation in upstream's order and
 * wording, the `creating` record, and the start of the volume-create machine. The create machine's
 * console start records a volume the same way (steps.ts).
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest } from '../core/api.js';
import type { AuthContext } from '../core/auth.js';
import { BadRequest } from '../core/errors.js';
import { replicationStatusForType } from './capabilities.js';
import { executionName, startExecution } from '../core/executions.js';
import { logger } from '../core/logger.js';
import { authorize } from '../core/policy.js';
import { listBackends } from './backends.js';
import { fillsFromImages } from '../drivers/volume/driver.js';
import { defaultBackendName, type Volume } from './model.js';
import { insertVolume, removeVolumeRecord } from './repo.js';
import { ANY_ZONE, availabilityZoneOf, DEFAULT_AVAILABILITY_ZONE } from './scheduler.js';
import { checkSizeAgainst, holdRefused, holdSourceItem, imageMetadataOf, resolveSource } from './sources.js';
import { DEFAULT_VOLUME_TYPE, getVolumeTypeById, getVolumeTypeByName, getVolumeTypeByNameOrId, isMultiattachType, visibleType } from './types.js';
import { invalidField, isUuidLike, metadataField, optionalString, pyRepr, sizeField, wrapped } from './validation.js';
import { viewContext, volumeDetail } from './views.js';
import { VOLUME_POLICIES } from './policies.js';

export const MULTIATTACH_REMOVED =
  'multiattach parameter has been removed. The default behavior is to use multiattach enabled volume types. Contact your administrator to create a multiattach enabled volume type and use it to create multiattach volumes.';

/** Sources of a new volume upstream supports and Ferry does not (yet): refused rather than silently ignored. */
const UNSUPPORTED_SOURCES = ['backup_id', 'consistencygroup_id', 'group_id'];

const now = () => new Date().toISOString();

export interface NewVolumeRequest {
  /** null: the source's size (a create from a snapshot or a volume). */
  size: number | null;
  name: string | null;
  description: string | null;
  volumeType: string | null;
  availabilityZone: string | null;
  metadata: Record<string, string>;
  serverId: string | null;
  /** The source of the new volume's data (sources.ts); absent = a blank volume. */
  snapshotId?: string | null;
  sourceVolid?: string | null;
  /** `imageRef` (or `image_id`): the image whose bytes the new volume starts with. */
  imageId?: string | null;
}

/** parameter_types.optional_uuid: null, or a uuid. */
function optionalUuid(volume: Record<string, unknown>, field: string): string | null {
  const v = volume[field];
  if (v === undefined || v === null) return null;
  if (!isUuidLike(v)) throw invalidField(field, v, `${pyRepr(v)} is not a 'uuid'`);
  return v;
}

/** Validates a `{"volume": {...}}` create body (upstream's schema, then the create flow's size check). Writes nothing. */
export function parseCreateBody(body: unknown): NewVolumeRequest {
  const volume = wrapped(body, 'volume');
  if (volume.multiattach) throw new BadRequest(MULTIATTACH_REMOVED);
  const name = optionalString(volume, 'name') ?? optionalString(volume, 'display_name') ?? null;
  const description = optionalString(volume, 'description') ?? optionalString(volume, 'display_description') ?? null;
  const volumeType = optionalString(volume, 'volume_type') ?? null;
  const availabilityZone = optionalString(volume, 'availability_zone') ?? null;
  const metadata = metadataField(volume, 'metadata', { nullable: true }) ?? {};
  for (const k of UNSUPPORTED_SOURCES) {
    if (volume[k] !== undefined && volume[k] !== null) throw new BadRequest(`Invalid input received: Creating a volume from ${k} is not supported by Ferry.`);
  }
  let serverId: string | null = null;
  if (volume.server_id !== undefined && volume.server_id !== null) {
    if (!isUuidLike(volume.server_id)) throw invalidField('server_id', volume.server_id, `${pyRepr(volume.server_id)} is not a 'uuid'`);
    serverId = volume.server_id;
  }
  const snapshotId = optionalUuid(volume, 'snapshot_id');
  const sourceVolid = optionalUuid(volume, 'source_volid');
  // C/api/v3/volumes.py: `image_id` is another name for `imageRef`; an image is named by its uuid.
  const imageId = optionalUuid(volume, volume.imageRef !== undefined && volume.imageRef !== null ? 'imageRef' : 'image_id');
  if ([snapshotId, sourceVolid, imageId].filter(Boolean).length > 1) throw new BadRequest('Invalid input received: Only one of snapshot_id, source_volid and imageRef may be given.');
  // Without a size, a volume from a source takes the source's (C/api/v3/volumes.py create).
  if ((volume.size === undefined || volume.size === null) && !snapshotId && !sourceVolid) {
    throw new BadRequest("Invalid input received: Volume size 'None' must be an integer and greater than 0");
  }
  const size = volume.size === undefined || volume.size === null ? null : sizeField('size', volume.size);
  return { size, name, description, volumeType, availabilityZone, metadata, serverId, snapshotId, sourceVolid, imageId };
}

/**
 * A volume from an image is filled by its backend's driver from the bucket; an aws-ebs backend
 * cannot write an EBS volume without an instance, so a type that can only land on such backends is
 * refused here (and the scheduler skips them for any other type): docs/compatibility.md.
 */
async function assertImageFillable(extraSpecs: Record<string, string>): Promise<void> {
  const wanted = extraSpecs.volume_backend_name;
  const candidates = (await listBackends()).filter((b) => wanted === undefined || b.volumeBackendName === wanted);
  if (candidates.length > 0 && !candidates.some(fillsFromImages)) {
    throw new BadRequest(`Invalid input received: Creating a volume from an image is not supported on backend(s) ${candidates.map((b) => `${b.host} (${b.driver})`).join(', ')}.`);
  }
}

/** The availability zones Ferry's backends are in. */
async function knownZones(): Promise<Set<string>> {
  const zones = new Set((await listBackends()).map(availabilityZoneOf));
  if (zones.size === 0) zones.add(DEFAULT_AVAILABILITY_ZONE);
  return zones;
}

/**
 * Records a new volume (`creating`) the way the API and the create machine's console start both
 * do; the caller then starts (or is) the volume-create execution.
 */
export async function recordNewVolume(auth: AuthContext, r: NewVolumeRequest, id: string = randomUUID()): Promise<Volume> {
  authorize(auth, VOLUME_POLICIES.create, { projectId: auth.projectId });
  // Upstream's order: the requested type, then the snapshot, then the source volume (404s), then the flow's checks.
  const requestedType = r.volumeType ? await visibleType(auth, r.volumeType, getVolumeTypeByNameOrId) : undefined;
  const source = await resolveSource(auth, { snapshotId: r.snapshotId ?? null, sourceVolid: r.sourceVolid ?? null, imageId: r.imageId ?? null });
  if (r.size === null && !source?.size) throw new BadRequest("Invalid input received: Volume size 'None' must be an integer and greater than 0");
  const size = r.size ?? source!.size;
  if (source) checkSizeAgainst(size, source);
  // The type defaults to the source's (create_volume.py _get_volume_type).
  const type = requestedType ?? (source?.volumeTypeId ? await getVolumeTypeById(source.volumeTypeId) : await getVolumeTypeByName(DEFAULT_VOLUME_TYPE));
  if (source?.image) await assertImageFillable(type.extraSpecs);
  const known = await knownZones();
  // Upstream's default zone when Ferry has one by that name; otherwise (on AWS) the scheduler's choice.
  // A volume from a source defaults to the source's zone and must stay in it (cloned_volume_same_az, True by default).
  const zone = r.availabilityZone ?? source?.availabilityZone ?? (known.has(DEFAULT_AVAILABILITY_ZONE) ? DEFAULT_AVAILABILITY_ZONE : ANY_ZONE);
  if (zone !== ANY_ZONE && !known.has(zone)) throw new BadRequest(`Availability zone '${zone}' is invalid.`);
  if (source && source.availabilityZone && zone !== source.availabilityZone) {
    throw new BadRequest(`Invalid input received: Volume must be in the same availability zone as the ${source.ref.kind === 'snapshot' ? 'snapshot' : 'source volume'}`);
  }
  const at = now();
  const v: Volume = {
    id,
    projectId: auth.projectId,
    userId: auth.userId,
    name: r.name,
    description: r.description,
    size,
    status: 'creating',
    attachStatus: 'detached',
    previousStatus: null,
    migrationStatus: null,
    // create_volume.py: `enabled` for a type with replication_enabled='<is> True', else `disabled`.
    replicationStatus: replicationStatusForType(type.extraSpecs),
    volumeTypeId: type.id,
    volumeTypeName: type.name,
    multiattach: isMultiattachType(type),
    // create_volume.py enable_bootable_flag: a volume made from an image is bootable, and one made
    // from a bootable volume or its snapshot (recorded here rather than when the copy is done).
    bootable: !!source?.image || !!source?.bootableFrom,
    host: null,
    backendName: defaultBackendName(id),
    providerLocation: null,
    serviceUuid: null,
    sharedTargets: null,
    availabilityZone: zone,
    metadata: r.metadata,
    adminMetadata: {},
    attachments: {},
    instances: {},
    connections: {},
    pendingServerId: r.serverId,
    capacity: null,
    managed: false,
    ownsBackendObject: false,
    errorReason: null,
    snapshotId: source?.ref.kind === 'snapshot' ? source.ref.id : null,
    sourceVolid: source?.ref.kind === 'volume' ? source.ref.id : null,
    source: source?.ref ?? null,
    imageMetadata: source?.image ? imageMetadataOf(source.image) : (source?.bootableFrom?.imageMetadata ?? null),
    createdAt: at,
    updatedAt: at,
    version: 1,
  };
  await insertVolume(v, { hold: source?.ref.held ? { item: holdSourceItem(source), refused: () => holdRefused(source) } : undefined });
  return v;
}

/**
 * Starts a machine for a recorded volume. If the start fails, `undo` puts things back so the
 * request changes nothing, and the error goes to the client.
 */
export async function startVolumeExecution(machine: 'volume-create' | 'volume-delete', volumeId: string, undo: () => Promise<void>): Promise<void> {
  try {
    await startExecution(machine, executionName(machine, volumeId), { volumeId });
  } catch (e) {
    logger.error('could not start volume execution', { machine, volumeId, error: e as Error });
    await undo().catch((u) => logger.error('undo after failed start failed', { volumeId, error: u as Error }));
    throw e;
  }
}

export async function createVolumeRoute(req: ApiRequest) {
  const r = parseCreateBody(req.body);
  const v = await recordNewVolume(req.auth, r);
  await startVolumeExecution('volume-create', v.id, () => removeVolumeRecord(v));
  return json(202, { volume: volumeDetail(viewContext(req), v) });
}
