/**
 * POST /volumes/{id}/action (C/api/contrib/volume_actions.py, admin_actions.py,
 * volume_unmanage.py): os-reset_status, os-begin_detaching, os-roll_detaching, os-extend,
 * os-unmanage, os-retype, os-set_bootable, os-update_readonly_flag and os-force_delete, each a pure transition (transitions.ts) persisted conditionally.
 */
import { own } from '../core/lookup.js';
import { json, type ApiRequest } from '../core/api.js';
import { isConditionFailure } from '../core/db.js';
import { BadRequest, ConcurrentModification, InvalidVolume, NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { isReplicationDriver } from '../drivers/volume/registry.js';
import { replicationStatusForType } from './capabilities.js';
import { logger } from '../core/logger.js';
import { authorize } from '../core/policy.js';
import { backendOf, driverForHost, getBackend } from './backends.js';
import { type Volume, type VolumeAttachStatus, type VolumeStatus } from './model.js';
import { writeExtendCharged } from './quotas.js';
import { setImageMetadata, showImageMetadata, unsetImageMetadata } from './image-metadata.js';
import { cancellationCodes, getVolumeScoped, removeVolumeRecord, updateVolume, volumeUpdate, writeVolumeWith } from './repo.js';
import { filterAndWeigh, gatherPools, poolTotalGb, reservePoolItem } from './scheduler.js';
import { apply, RESETTABLE_ATTACH_STATUSES, RESETTABLE_MIGRATION_STATUSES, VOLUME_STATUSES } from './transitions.js';
import { getVolumeTypeByNameOrId, isMultiattachType, visibleType, volumeTypeKey } from './types.js';
import { boolParam, invalidField, isObject, pyRepr, sizeField } from './validation.js';
import { deleteVolume } from './delete.js';
import { VOLUME_POLICIES } from './policies.js';

const now = () => new Date().toISOString();

export type ActionHandler = (req: ApiRequest, v: Volume, args: unknown) => Promise<ReturnType<typeof json>>;

async function resetStatus(req: ApiRequest, v: Volume, args: unknown) {
  authorize(req.auth, VOLUME_POLICIES.resetStatus, { projectId: v.projectId });
  if (!isObject(args)) throw invalidField('os-reset_status', args, `${pyRepr(args)} is not of type 'object'`);
  for (const k of Object.keys(args)) {
    if (!['status', 'attach_status', 'migration_status'].includes(k)) throw invalidField('os-reset_status', args, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
  }
  const pick = (k: string) => {
    const x = args[k];
    if (x === undefined || x === null || x === '') return undefined;
    if (typeof x !== 'string') throw invalidField(k, x, `${pyRepr(x)} is not of type 'string', 'null'`);
    return x.toLowerCase();
  };
  const status = pick('status');
  const attachStatus = pick('attach_status');
  const migrationStatus = pick('migration_status');
  if (status !== undefined && !VOLUME_STATUSES.includes(status as VolumeStatus)) throw new BadRequest('Must specify a valid status');
  if (attachStatus !== undefined && !RESETTABLE_ATTACH_STATUSES.includes(attachStatus as VolumeAttachStatus)) throw new BadRequest('Must specify a valid attach status');
  if (migrationStatus !== undefined && !(RESETTABLE_MIGRATION_STATUSES as readonly string[]).includes(migrationStatus)) throw new BadRequest('Must specify a valid migration status');
  await updateVolume(v.id, {
    type: 'reset-status',
    at: now(),
    status: status as VolumeStatus | undefined,
    attachStatus: attachStatus as VolumeAttachStatus | undefined,
    migrationStatus: migrationStatus === undefined ? undefined : migrationStatus === 'none' ? null : migrationStatus,
  });
  return json(202);
}

async function beginDetaching(req: ApiRequest, v: Volume) {
  authorize(req.auth, VOLUME_POLICIES.beginDetaching, { projectId: v.projectId });
  await updateVolume(v.id, { type: 'begin-detaching', at: now() });
  return json(202);
}

async function rollDetaching(req: ApiRequest, v: Volume) {
  authorize(req.auth, VOLUME_POLICIES.rollDetaching, { projectId: v.projectId });
  await updateVolume(v.id, { type: 'roll-detaching', at: now() });
  return json(202);
}

/**
 * os-extend, run in the request: reserve the extra capacity and charge the quota together with
 * `extending` (one transaction), extend on the backend, then `available` at the new size, or `error_extending`
 * (capacity kept held at the new size: the backend may be partly extended; delete releases it).
 */
async function extend(req: ApiRequest, v: Volume, args: unknown) {
  authorize(req.auth, VOLUME_POLICIES.extend, { projectId: v.projectId });
  if (!isObject(args) || !('new_size' in args)) throw new BadRequest("'new_size' is a required property");
  const newSize = sizeField('new_size', args.new_size);
  const before = v;
  const after = apply(before, { type: 'begin-extend', at: now(), newSize });
  const backend = await getBackend(before.host!);
  const total = await poolTotalGb(backend, before.capacity!.pool);
  try {
    await writeExtendCharged(before, newSize, [{ Update: volumeUpdate(before, after) }, reservePoolItem(before.capacity!.pool, newSize - before.size, total)]);
  } catch (e) {
    const codes = cancellationCodes(e);
    if (codes[1] === 'ConditionalCheckFailed') {
      throw new BadRequest(`Invalid input received: Pool ${before.capacity!.pool} does not have ${newSize - before.size} GiB free to extend volume ${v.id}.`);
    }
    if (isConditionFailure(e)) throw new ConcurrentModification(`Volume ${v.id}`, e);
    throw e;
  }
  try {
    // The driver of the site the backend runs on (after a failover: the target).
    await (await driverForHost(backend.host)).extendVolume(before.backendName, newSize);
    await updateVolume(v.id, { type: 'extend-done', at: now() });
  } catch (e) {
    logger.error('extend failed on the backend', { volumeId: v.id, error: e as Error });
    await updateVolume(v.id, { type: 'extend-failed', at: now(), reason: e instanceof Error ? e.message : String(e) });
  }
  return json(202);
}

/** os-unmanage: forget the volume, keep its backend object (capacity and claim released in the same transaction). */
async function unmanage(req: ApiRequest, v: Volume) {
  authorize(req.auth, VOLUME_POLICIES.unmanage, { projectId: v.projectId });
  // The delete guard decides (upstream's unmanage is delete with unmanage_only).
  apply(v, { type: 'begin-delete', at: now() });
  try {
    await removeVolumeRecord(v, undefined, { unmanaged: true });
  } catch (e) {
    if (isConditionFailure(e)) throw new ConcurrentModification(`Volume ${v.id}`, e);
    throw e;
  }
  return json(202);
}

/**
 * os-retype, minimal: the new type's replication_status (and multiattach) on the same backend. A
 * retype whose type the volume's pool does not satisfy would need a migration, which Ferry does
 * not do: 400 (docs/compatibility.md). Replication is enabled on the backend before the record
 * changes (an extra replica is harmless) and disabled after (a stale replica is harmless).
 */
async function retype(req: ApiRequest, v: Volume, args: unknown) {
  authorize(req.auth, VOLUME_POLICIES.retype, { projectId: v.projectId });
  if (!isObject(args)) throw invalidField('os-retype', args, `${pyRepr(args)} is not of type 'object'`);
  for (const k of Object.keys(args)) {
    if (!['new_type', 'migration_policy'].includes(k)) throw invalidField('os-retype', args, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
  }
  if (!('new_type' in args)) throw invalidField('os-retype', args, "'new_type' is a required property");
  if (typeof args.new_type !== 'string') throw invalidField('new_type', args.new_type, `${pyRepr(args.new_type)} is not of type 'string'`);
  const policy = args.migration_policy;
  if (policy !== undefined && policy !== null && policy !== 'on-demand' && policy !== 'never') {
    throw invalidField('migration_policy', policy, `${pyRepr(policy)} is not one of ['on-demand', 'never']`);
  }
  if (!['available', 'in-use'].includes(v.status)) {
    throw new InvalidVolume(`Unable to update type due to incorrect status: ${v.status} on volume: ${v.id}. Volume status must be available or in-use.`);
  }
  const type = await visibleType(req.auth, args.new_type, getVolumeTypeByNameOrId);
  const replicationStatus = replicationStatusForType(type.extraSpecs);
  if (!v.host) throw new InvalidVolume(`Volume ${v.id} has no host.`);
  const pool = (await gatherPools(v.host)).find((p) => p.host === (v.capacity?.pool ?? v.host));
  if (!pool) throw new BadRequest(`Invalid input received: Pool ${v.host} of volume ${v.id} is not reported by its backend.`);
  const { rejected } = filterAndWeigh([{ ...pool, allocatedGb: 0 }], { sizeGb: 0, extraSpecs: type.extraSpecs, availabilityZone: v.availabilityZone });
  if (rejected.length) {
    throw new BadRequest(`Invalid input received: Retyping volume ${v.id} to ${type.name} needs a migration off ${backendOf(v.host)} (${rejected.map((r) => r.reason).join('; ')}); Ferry does not migrate volumes.`);
  }
  const after = apply(v, { type: 'retype', at: now(), typeId: type.id, typeName: type.name, multiattach: isMultiattachType(type), replicationStatus });
  const driver = await driverForHost(v.host);
  const replicating = isReplicationDriver(driver) && !!pool.replication?.enabled;
  if (replicating && replicationStatus === 'enabled' && v.replicationStatus !== 'enabled') await driver.enableReplication(v.backendName);
  try {
    await writeVolumeWith(v, after, [
      { Update: { TableName: tableName('volume'), Key: volumeTypeKey(v.volumeTypeId), UpdateExpression: 'ADD volumeCount :minus', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':minus': -1 } } },
      { Update: { TableName: tableName('volume'), Key: volumeTypeKey(type.id), UpdateExpression: 'ADD volumeCount :one', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':one': 1 } } },
    ]);
  } catch (e) {
    if (cancellationCodes(e)[2] === 'ConditionalCheckFailed') throw new NotFound(`Volume type ${type.id} could not be found.`);
    if (isConditionFailure(e)) throw new ConcurrentModification(`Volume ${v.id}`, e);
    throw e;
  }
  if (replicating && replicationStatus === 'disabled' && v.replicationStatus !== 'disabled') {
    await driver.disableReplication(v.backendName).catch((e) => logger.error('disabling replication after retype failed', { volumeId: v.id, error: e as Error }));
  }
  return json(202);
}

/** `{"<action>": {"<field>": <boolean>}}`, the only property, as upstream's schemas ask; strict bool_from_string. */
function boolArg(action: string, field: string, args: unknown): boolean {
  if (!isObject(args)) throw invalidField(action, args, `${pyRepr(args)} is not of type 'object'`);
  for (const k of Object.keys(args)) if (k !== field) throw invalidField(action, args, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
  if (!(field in args)) throw invalidField(action, args, `'${field}' is a required property`);
  return boolParam(field, args[field]);
}

/** os-set_bootable: volume_api.update({'bootable': ...}); 200 with no body. */
async function setBootable(req: ApiRequest, v: Volume, args: unknown) {
  const bootable = boolArg('os-set_bootable', 'bootable', args);
  authorize(req.auth, VOLUME_POLICIES.update, { projectId: v.projectId });
  await updateVolume(v.id, { type: 'set-bootable', at: now(), bootable });
  return json(200);
}

/** os-update_readonly_flag: the `readonly` admin metadata of an available volume. */
async function updateReadonly(req: ApiRequest, v: Volume, args: unknown) {
  const readonly = boolArg('os-update_readonly_flag', 'readonly', args);
  authorize(req.auth, VOLUME_POLICIES.updateReadonlyFlag, { projectId: v.projectId });
  await updateVolume(v.id, { type: 'set-readonly', at: now(), readonly });
  return json(202);
}

/** os-force_delete (admin_actions.py): delete with the status guard dropped. */
async function forceDelete(req: ApiRequest, v: Volume) {
  authorize(req.auth, VOLUME_POLICIES.forceDelete, { projectId: v.projectId });
  await deleteVolume(v, true);
  return json(202);
}

const ACTIONS: Record<string, ActionHandler> = {
  'os-set_bootable': setBootable,
  'os-update_readonly_flag': updateReadonly,
  'os-force_delete': forceDelete,
  'os-retype': retype,
  'os-reset_status': resetStatus,
  'os-begin_detaching': beginDetaching,
  'os-roll_detaching': rollDetaching,
  'os-extend': extend,
  'os-unmanage': unmanage,
  'os-set_image_metadata': setImageMetadata,
  'os-unset_image_metadata': unsetImageMetadata,
  'os-show_image_metadata': showImageMetadata,
};

/**
 * A port for actions a higher layer implements (the pre-3.27 attach actions live with the
 * attachments, functions/attachments/legacy.ts); the entry point (functions/api/volume.ts) fills it.
 */
export function registerVolumeActions(actions: Record<string, ActionHandler>): void {
  for (const [name, handler] of Object.entries(actions)) if (!own(ACTIONS, name)) ACTIONS[name] = handler;
}

export async function volumeAction(req: ApiRequest) {
  if (!isObject(req.body) || Object.keys(req.body).length === 0) throw new BadRequest('Malformed request body');
  const name = Object.keys(req.body).find((k) => own(ACTIONS, k));
  if (!name) throw new BadRequest(`There is no such action: ${Object.keys(req.body)[0]}`);
  const v = await getVolumeScoped(req.auth, req.params.volume_id!);
  return own(ACTIONS, name)!(req, v, req.body[name]);
}
