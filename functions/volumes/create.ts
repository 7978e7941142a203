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
import { defaultBackendName, type Volume } from './model.js';
import { insertVolume, removeVolumeRecord } from './repo.js';
import { ANY_ZONE, availabilityZoneOf, DEFAULT_AVAILABILITY_ZONE } from './scheduler.js';
import { DEFAULT_VOLUME_TYPE, getVolumeTypeByName, getVolumeTypeByNameOrId, isMultiattachType, visibleType } from './types.js';
import { invalidField, isUuidLike, metadataField, optionalString, pyRepr, sizeField, wrapped } from './validation.js';
import { viewContext, volumeDetail } from './views.js';
import { VOLUME_POLICIES } from './policies.js';

export const MULTIATTACH_REMOVED =
  'multiattach parameter has been removed. The default behavior is to use multiattach enabled volume types. Contact your administrator to create a multiattach enabled volume type and use it to create multiattach volumes.';

/** Sources of a new volume upstream supports and Ferry does not (yet): refused rather than silently ignored. */
const UNSUPPORTED_SOURCES = ['snapshot_id', 'source_volid', 'imageRef', 'backup_id', 'consistencygroup_id', 'group_id'];

const now = () => new Date().toISOString();

export interface NewVolumeRequest {
  size: number;
  name: string | null;
  description: string | null;
  volumeType: string | null;
  availabilityZone: string | null;
  metadata: Record<string, string>;
  serverId: string | null;
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
  if (volume.size === undefined || volume.size === null) {
    throw new BadRequest("Invalid input received: Volume size 'None' must be an integer and greater than 0");
  }
  const size = sizeField('size', volume.size);
  return { size, name, description, volumeType, availabilityZone, metadata, serverId };
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
  const type = r.volumeType
    ? await visibleType(auth, r.volumeType, getVolumeTypeByNameOrId)
    : await getVolumeTypeByName(DEFAULT_VOLUME_TYPE);
  const known = await knownZones();
  // Upstream's default zone when Ferry has one by that name; otherwise (on AWS) the scheduler's choice.
  const zone = r.availabilityZone ?? (known.has(DEFAULT_AVAILABILITY_ZONE) ? DEFAULT_AVAILABILITY_ZONE : ANY_ZONE);
  if (zone !== ANY_ZONE && !known.has(zone)) throw new BadRequest(`Availability zone '${zone}' is invalid.`);
  const at = now();
  const v: Volume = {
    id,
    projectId: auth.projectId,
    userId: auth.userId,
    name: r.name,
    description: r.description,
    size: r.size,
    status: 'creating',
    attachStatus: 'detached',
    previousStatus: null,
    migrationStatus: null,
    // create_volume.py: `enabled` for a type with replication_enabled='<is> True', else `disabled`.
    replicationStatus: replicationStatusForType(type.extraSpecs),
    volumeTypeId: type.id,
    volumeTypeName: type.name,
    multiattach: isMultiattachType(type),
    bootable: false,
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
    createdAt: at,
    updatedAt: at,
    version: 1,
  };
  await insertVolume(v);
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
