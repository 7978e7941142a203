/**
 * The step handlers of the share machines (statemachines/share-create.asl.json,
 * share-delete.asl.json): one Lambda, `handler({step, shareId, error?})`. Every step reads the
 * share and decides from its recorded state, so a retried Task leaves the same state.
 */
import { isConditionFailure, withRetries } from '../core/db.js';
import { BadRequest, DriverError, reasonOf, type CaughtError } from '../core/errors.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { backendShareName, sharePoolOf } from './model.js';
import { getShare, getShareBackend, getShareOrThrow, removeShareRecord, updateShare } from './repo.js';
import { releaseShareCapacity, scheduleShare } from './scheduler.js';
import { recordMessage } from '../messages/store.js';

const now = () => new Date().toISOString();

export interface ShareStepInput {
  step: string;
  shareId?: string;
  error?: CaughtError;
}

export async function schedule(shareId: string): Promise<{ host: string }> {
  const s = await scheduleShare(shareId);
  return { host: s.host! };
}

/** Creates the backend share (a directory for the local drivers). Undone by rollbackCreate. */
export async function createOnBackend(shareId: string): Promise<{ exportLocations: string[] }> {
  const s = await getShareOrThrow(shareId);
  if (s.status === 'available') return { exportLocations: s.exportLocations };
  if (!s.host) throw new DriverError(`Share ${shareId} has no host: schedule did not run.`);
  const driver = shareDriverFor(await getShareBackend(s.host));
  // Recorded as owned before the call, so a failure after the directory exists is still rolled back.
  const { exportLocation } = await driver.createShare({ name: backendShareName(s.instanceId), sizeGb: s.size, proto: s.shareProto, pool: sharePoolOf(s.host)! });
  const after = await updateShare(shareId, { type: 'created-on-backend', at: now(), exportLocations: [exportLocation] });
  return { exportLocations: after.exportLocations };
}

export async function markAvailable(shareId: string): Promise<{ status: string }> {
  const s = await updateShare(shareId, { type: 'mark-available', at: now() });
  return { status: s.status };
}

/** Any create failure: delete the backend share (if any was made), release capacity, mark error. */
export async function rollbackCreate(shareId: string, error: CaughtError | undefined): Promise<{ status: string }> {
  const s = await getShare(shareId);
  if (!s) return { status: 'gone' };
  if (s.host) {
    const driver = shareDriverFor(await getShareBackend(s.host));
    await driver.deleteShare(backendShareName(s.instanceId));
    await updateShare(shareId, { type: 'backend-share-released', at: now() });
  }
  await releaseShareCapacity(shareId);
  const after = await updateShare(shareId, { type: 'create-failed', at: now(), reason: reasonOf(error) });
  // M/scheduler/manager.py: ALLOCATE_HOST / NO_VALID_HOST when no backend took it; M/share/manager.py:
  // CREATE / UNKNOWN_ERROR for the driver's failure. One message per share.
  const noHost = error?.Error === 'NoValidHost';
  await recordMessage('share', { key: [shareId, 'create-failed'], projectId: after.projectId, resourceType: 'SHARE', resourceId: shareId, actionId: noHost ? '001' : '002', detailId: noHost ? '002' : '001' });
  return { status: after.status };
}

export async function beginDelete(shareId: string): Promise<{ shareId: string }> {
  await updateShare(shareId, { type: 'begin-delete', at: now(), resume: true });
  return { shareId };
}

export async function deleteOnBackend(shareId: string): Promise<void> {
  const s = await getShareOrThrow(shareId);
  if (s.host) {
    const driver = shareDriverFor(await getShareBackend(s.host));
    await driver.deleteShare(backendShareName(s.instanceId));
  }
  await updateShare(shareId, { type: 'backend-share-released', at: now() });
}

export async function finishDelete(shareId: string): Promise<void> {
  await releaseShareCapacity(shareId);
  await withRetries(
    async () => {
      const s = await getShare(shareId);
      if (!s) return;
      await removeShareRecord(s, 'deleting');
    },
    { retryable: isConditionFailure, attempts: 10 },
  );
}

export async function markErrorDeleting(shareId: string, error: CaughtError | undefined): Promise<void> {
  await updateShare(shareId, { type: 'delete-failed', at: now(), reason: reasonOf(error) });
}

function need(input: ShareStepInput): string {
  if (!input.shareId) throw new BadRequest(`step ${input.step} needs shareId`);
  return input.shareId;
}

export async function handler(input: ShareStepInput): Promise<unknown> {
  switch (input.step) {
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
      throw new BadRequest(`unknown share step ${JSON.stringify(input.step)}`);
  }
}
