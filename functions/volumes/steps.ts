/**
 * The step handlers of the volume machines (statemachines/volume-create.asl.json,
 * volume-delete.asl.json): one Lambda, `handler({step, ...})` dispatching to small steps. The
 * create-and-attach states of volume-create run in attachments/steps.ts (attachments sit above
 * volumes).
 *
 * Every step is idempotent — it reads the volume, decides from its recorded state, and does
 * nothing a second time — so a retried Task, or a local stack that runs an execution again from
 * the start after a restart, leaves the same state. Each step's rollback sits right after it.
 */
import { DeleteCommand } from '@aws-sdk/lib-dynamodb';
import { createHash } from 'node:crypto';
import type { AuthContext } from '../core/auth.js';
import { db, isConditionFailure, withRetries } from '../core/db.js';
import { tableName } from '../core/tables.js';
import { BackendNotReady, BadRequest, Conflict, DriverError, reasonOf, type CaughtError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import type { VolumeDriver } from '../drivers/volume/driver.js';
import { isCopyingDriver, isImageFillingDriver } from '../drivers/volume/driver.js';
import { adoptingDriverFor, isReplicationDriver } from '../drivers/volume/registry.js';
import { openImageObject, releaseSource } from './sources.js';
import { driverForHost, poolOf } from './backends.js';
import { isReplicatedVolume } from './capabilities.js';
import type { Volume } from './model.js';
import { claimKey, getVolume, getVolumeOrThrow, removeVolumeRecord, updateVolume, VolumeConnectsPending } from './repo.js';
import { parseCreateBody, recordNewVolume } from './create.js';
import { releaseCapacity, scheduleVolume } from './scheduler.js';
import { recordMessage } from '../messages/store.js';

const now = () => new Date().toISOString();

/** What a Catch puts in `$.error`: the error name, and the message (AWS wraps it in Lambda's JSON). */
export type { CaughtError };

export interface StepInput {
  step: string;
  volumeId?: string;
  error?: CaughtError;
  /** record: the execution's input — `{volumeId}` (API start) or `{volume, projectId, userId}` (console start). */
  request?: { volumeId?: string; volume?: unknown; projectId?: string; userId?: string };
  executionName?: string;
}

export { reasonOf };

/** A UUID derived from the execution name, so a retried console `record` step records the same volume. */
export function volumeIdForExecution(executionName: string): string {
  const h = createHash('sha256').update(`ferry-volume-create:${executionName}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

// ---- volume-create ------------------------------------------------------------------------------

/**
 * First state of volume-create. An API start passes `{volumeId}` of a volume the API recorded; a
 * console start passes `{volume: <create body>, projectId, userId}` and gets the same validation
 * and recording as POST /volumes. No rollback: nothing is written when it fails.
 */
export async function record(input: StepInput): Promise<{ volumeId: string }> {
  const req = input.request ?? {};
  if (req.volumeId) {
    await getVolumeOrThrow(req.volumeId);
    return { volumeId: req.volumeId };
  }
  const request = parseCreateBody({ volume: req.volume });
  const projectId = req.projectId ?? 'admin';
  // A console start is an operator's: the volume belongs to the project named (default admin).
  const auth: AuthContext = { userId: req.userId ?? 'admin', projectId, isAdmin: true, roles: ['admin', 'member', 'reader'] };
  const id = volumeIdForExecution(input.executionName ?? 'console');
  try {
    await recordNewVolume(auth, request, id);
  } catch (e) {
    // Already recorded by an earlier run of this step.
    if (!(e instanceof Conflict && (await getVolume(id)))) throw e;
  }
  return { volumeId: id };
}

/** Reserves capacity on a pool (scheduler.ts). Undone by rollbackCreate (releaseCapacity). */
export async function schedule(volumeId: string): Promise<{ host: string }> {
  const v = await scheduleVolume(volumeId);
  return { host: v.host! };
}

/**
 * Creates the backend object under its stable name — or, for a managed volume, checks the legacy
 * object is there. Undone by rollbackCreate (deleteVolume; never for a managed object).
 */
export async function createOnBackend(volumeId: string): Promise<{ providerLocation: string | null }> {
  const v = await getVolumeOrThrow(volumeId);
  if (v.status === 'available') return { providerLocation: v.providerLocation };
  if (!v.host) throw new DriverError(`Volume ${volumeId} has no host: schedule did not run.`);
  const driver = await driverForHost(v.host);
  if (v.managed) {
    // A backend that can take over what it did not make (EBS) marks the object as its own first;
    // the volume record (`managing`, its backendName) is the intent, adoption is idempotent, and
    // rollbackCreate releases it.
    const adopting = adoptingDriverFor(driver);
    const found = adopting ? await adopting.adoptVolume(v.backendName, poolOf(v.host)!) : await driver.getVolume(v.backendName);
    if (!found) throw new DriverError(`Manage existing volume failed: backend object ${v.backendName} is not on ${v.host}.`);
    await enableReplicationIfReplicated(v, driver);
    const after = await updateVolume(volumeId, { type: 'created-on-backend', at: now(), providerLocation: v.providerLocation, sizeGb: found.sizeGb });
    return { providerLocation: after.providerLocation };
  }
  const { providerLocation } = await createOnDriver(v, driver);
  // Once the backend object exists (seed 001): a volume of a replicated type is kept in sync on
  // every target. A failure here rolls the create back like any other (the object is deleted).
  await enableReplicationIfReplicated(v, driver);
  await updateVolume(volumeId, { type: 'created-on-backend', at: now(), providerLocation });
  return { providerLocation };
}

/**
 * The backend object of a new volume: blank, or the copy of its source (the source is held, so it
 * is still there). The name is the volume's own, so a re-run finds what the first run made.
 */
async function createOnDriver(v: Volume, driver: VolumeDriver): Promise<{ providerLocation: string }> {
  const req = { backendName: v.backendName, sizeGb: v.size, pool: poolOf(v.host!)!, multiattach: v.multiattach };
  if (!v.source) return driver.createVolume(req);
  if (v.source.kind === 'image') {
    if (!isImageFillingDriver(driver)) throw new DriverError(`Backend ${v.host} cannot create a volume from an image.`);
    return driver.createVolumeFromImage(req, () => openImageObject(v.source!.imageObjectKey!));
  }
  if (!isCopyingDriver(driver)) throw new DriverError(`Backend ${v.host} cannot create a volume from a ${v.source.kind}.`);
  if (v.source.kind === 'snapshot') return driver.createVolumeFromSnapshot(req, { volumeBackendName: v.source.volumeBackendName, snapshotName: v.source.snapshotName! });
  return driver.cloneVolume(req, v.source.volumeBackendName);
}

/** enableReplication for a volume whose type asked for it (replication_status `enabled`); idempotent in the driver. */
async function enableReplicationIfReplicated(v: Volume, driver: VolumeDriver): Promise<void> {
  if (v.replicationStatus !== 'enabled') return;
  if (!isReplicationDriver(driver)) throw new DriverError(`Volume ${v.id} is of a replicated type but backend ${v.host} cannot replicate.`);
  await driver.enableReplication(v.backendName);
}

/** creating/managing -> available (conditional on the version read). */
export async function markAvailable(volumeId: string): Promise<{ pendingServerId: string | null }> {
  // The copy is made: the source may be deleted again — before the volume shows available, so a
  // client that waits for available and then deletes the source is never refused (idempotent).
  await releaseSource(volumeId);
  const v = await updateVolume(volumeId, { type: 'mark-available', at: now() });
  return { pendingServerId: v.pendingServerId ?? null };
}

/**
 * The create machine's Catch: undo whatever ran, then mark the volume `error` (`error_managing`).
 * - the backend object of a new volume is deleted (its name is the volume's own, so this is safe
 *   even if create never ran); a managed object is never touched;
 * - capacity is released only when no object of ours may remain, so the pool's accounting never
 *   drops below what the backend holds.
 */
export async function rollbackCreate(volumeId: string, error: CaughtError | undefined): Promise<{ status: string }> {
  const v = await getVolume(volumeId);
  if (!v) return { status: 'gone' };
  let reason = reasonOf(error);
  let objectGone = true;
  if (!v.managed && v.host) {
    try {
      const driver = await driverForHost(v.host);
      if (isReplicatedVolume(v) && isReplicationDriver(driver)) await driver.disableReplication(v.backendName);
      await driver.deleteVolume(v.backendName);
      if (v.source?.kind === 'volume' && isCopyingDriver(driver)) await driver.abandonCopy?.(v.backendName, v.source.volumeBackendName);
      await updateVolume(volumeId, { type: 'backend-object-released', at: now() });
    } catch (e) {
      // The backend is still at it (an EBS volume still creating): the machine runs the rollback again after its wait.
      if (e instanceof BackendNotReady) throw e;
      objectGone = false;
      reason = `${reason} (rollback could not delete ${v.backendName}: ${e instanceof Error ? e.message : String(e)}; capacity kept held until the volume is deleted)`;
      logger.error('rollback could not delete the backend object', { volumeId, error: e as Error });
    }
  }
  if (v.managed && v.host) {
    // An object adopted for this manage goes back as it was (its tags removed); one Ferry made, or
    // never adopted, is left alone by the driver. A failure here is kept in the reason, not hidden.
    try {
      await adoptingDriverFor(await driverForHost(v.host))?.releaseAdopted(v.backendName);
    } catch (e) {
      if (e instanceof BackendNotReady) throw e;
      reason = `${reason} (rollback could not release ${v.backendName}: ${e instanceof Error ? e.message : String(e)}; its ferry:* tags remain)`;
      logger.error('rollback could not release the adopted backend object', { volumeId, error: e as Error });
    }
  }
  if (objectGone) await releaseCapacity(volumeId);
  // Nothing copies from the source any more (the object is deleted, or left for the volume's delete).
  await releaseSource(volumeId);
  if (v.managed) await releaseManagedClaim(volumeId);
  const after = await updateVolume(volumeId, { type: 'create-failed', at: now(), reason });
  await recordCreateFailure(after, error);
  return { status: after.status };
}

/**
 * The user message of a failed create (C/scheduler/manager.py: SCHEDULE_ALLOCATE_VOLUME with the
 * detail of NoValidBackend; C/volume/flows/manager/create_volume.py: CREATE_VOLUME_FROM_BACKEND,
 * DRIVER_FAILED_CREATE for the driver's failure). One per volume: a rollback run again records none.
 */
async function recordCreateFailure(v: Volume, error: CaughtError | undefined): Promise<void> {
  const noBackend = error?.Error === 'NoValidBackend';
  await recordMessage('volume', {
    key: [v.id, 'create-failed'],
    projectId: v.projectId,
    resourceType: 'VOLUME',
    resourceId: v.id,
    actionId: noBackend ? '001' : '008',
    detailId: noBackend ? '003' : '012',
  });
}

/**
 * A failed manage gives the legacy object back (its claim is removed), so it can be managed again;
 * the error_managing record stays for the operator to see and delete, and that delete leaves the
 * object alone (ownsBackendObject is false).
 */
async function releaseManagedClaim(volumeId: string): Promise<void> {
  const v = await getVolume(volumeId);
  if (!v?.host) return;
  await db()
    .send(
      new DeleteCommand({
        TableName: tableName('volume'),
        Key: claimKey(v.host, v.backendName),
        ConditionExpression: 'volumeId = :vid',
        ExpressionAttributeValues: { ':vid': volumeId },
      }),
    )
    .catch((e) => {
      if (!isConditionFailure(e)) throw e;
    });
}

// ---- volume-delete ------------------------------------------------------------------------------

/**
 * First state of volume-delete: the same guarded transition the API applies (a console start is
 * as safe as DELETE /volumes/{id}); a volume the API already set `deleting` passes. No rollback.
 */
export async function beginDelete(volumeId: string): Promise<{ volumeId: string }> {
  const v = await getVolume(volumeId);
  if (!v) return { volumeId }; // removed by an earlier run
  await updateVolume(volumeId, { type: 'begin-delete', at: now(), resume: true });
  return { volumeId };
}

/** Whether deleting the volume may delete its backend object: a new volume's own object always; a managed one only once managed. */
export function mayDeleteBackendObject(v: Volume): boolean {
  return !!v.host && (!v.managed || !!v.ownsBackendObject);
}

/** Deletes the backend object (idempotent in the driver). Failure -> markErrorDeleting; the record is kept. */
export async function deleteOnBackend(volumeId: string): Promise<void> {
  const v = await getVolume(volumeId);
  if (!v) return;
  if (!mayDeleteBackendObject(v)) return;
  const driver = await driverForHost(v.host!);
  // Replicas first: a crash in between leaves a volume without replicas, which a retry deletes.
  if (isReplicatedVolume(v) && isReplicationDriver(driver)) await driver.disableReplication(v.backendName);
  await driver.deleteVolume(v.backendName);
}

/**
 * Releases capacity, the claim and the type count, and removes the record — one transaction. A
 * volume still holding connect intents (a connect that died: the only record of the connection it
 * may have made) is not removed: the step answers BackendNotReady, which the machine waits out
 * (infra/asl/policy.ts, BACKEND_WAIT) while the reconciler's recovery pass undoes the intents.
 */
export async function finishDelete(volumeId: string): Promise<void> {
  try {
    await withRetries(
      async () => {
        const v = await getVolume(volumeId);
        if (!v) return;
        await removeVolumeRecord(v, { expression: '#status = :deleting', names: { '#status': 'status' }, values: { ':deleting': 'deleting' } });
      },
      { retryable: isConditionFailure, attempts: 10 },
    );
  } catch (e) {
    if (e instanceof VolumeConnectsPending) throw new BackendNotReady(e.message, { cause: e, context: { volumeId } });
    throw e;
  }
}

/** The delete machine's Catch: deleting -> error_deleting. Nothing else changes (backend object, capacity). */
export async function markErrorDeleting(volumeId: string, error: CaughtError | undefined): Promise<void> {
  await updateVolume(volumeId, { type: 'delete-failed', at: now(), reason: reasonOf(error) });
}

// ---- dispatch -----------------------------------------------------------------------------------

function need(input: StepInput): string {
  if (!input.volumeId) throw new BadRequest(`step ${input.step} needs volumeId`);
  return input.volumeId;
}

export async function handler(input: StepInput): Promise<unknown> {
  switch (input.step) {
    case 'record':
      return record(input);
    case 'schedule':
      return schedule(need(input));
    case 'create-on-backend':
      return createOnBackend(need(input));
    case 'mark-available':
      return markAvailable(need(input));
    case 'rollback-create':
      return rollbackCreate(need(input), input.error);
    case 'begin-delete':
      return beginDelete(need(input));
    case 'delete-on-backend':
      await deleteOnBackend(need(input));
      return {};
    case 'finish-delete':
      await finishDelete(need(input));
      return {};
    case 'mark-error-deleting':
      await markErrorDeleting(need(input), input.error);
      return {};
    default:
      throw new BadRequest(`unknown volume step ${JSON.stringify(input.step)}`);
  }
}
