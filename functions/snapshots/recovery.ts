/**
 * Snapshots whose synchronous API call died mid-way (a crash inside POST /snapshots or DELETE
 * /snapshots/{id}, functions/snapshots/routes.ts): nothing resumes those calls, so the reconciler
 * finishes them. The record written before the driver call is the intent: its backend name derives
 * from the snapshot id, so the driver call is idempotent under it. A record still `creating` or
 * `deleting` and unchanged since `before` (the grace cut-off: no live call still owns it) is
 * finished — the create made again and recorded available, the delete made again and the record
 * removed — or, when the backend refuses, put in the error state the API call would have recorded.
 */
import { BackendNotReady } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { isSnapshotDriver } from '../drivers/volume/registry.js';
import { driverForHost } from '../volumes/backends.js';
import { listSnapshots, removeSnapshotRecord, updateSnapshot } from './repo.js';

export interface SnapshotRecovery {
  snapshotId: string;
  /** created / deleted: finished; create-failed / delete-failed: the backend refused, the error state recorded; pending: the backend is still at it. */
  action: 'created' | 'deleted' | 'create-failed' | 'delete-failed' | 'pending';
  detail: string;
}

export async function recoverPendingSnapshots(options: { before: Date }): Promise<SnapshotRecovery[]> {
  const out: SnapshotRecovery[] = [];
  const pending = (await listSnapshots()).filter((s) => (s.status === 'creating' || s.status === 'deleting') && Date.parse(s.updatedAt) < options.before.getTime());
  for (const s of pending) {
    const at = new Date().toISOString();
    const creating = s.status === 'creating';
    try {
      const driver = await driverForHost(s.backendHost);
      if (!isSnapshotDriver(driver)) throw new Error(`backend ${s.backendHost} does not support snapshots`);
      if (creating) {
        await driver.createSnapshot(s.volumeBackendName, s.backendName);
        await updateSnapshot(s.id, { type: 'created', at });
      } else {
        await driver.deleteSnapshot(s.volumeBackendName, s.backendName);
        await removeSnapshotRecord(s.id);
      }
      out.push({ snapshotId: s.id, action: creating ? 'created' : 'deleted', detail: `a ${creating ? 'create' : 'delete'} left ${s.status} since ${s.updatedAt}, finished` });
    } catch (e) {
      if (e instanceof BackendNotReady) {
        // Not a failure: the next pass looks again.
        out.push({ snapshotId: s.id, action: 'pending', detail: e.message });
        continue;
      }
      const reason = e instanceof Error ? e.message : String(e);
      logger.error(`snapshot ${creating ? 'create' : 'delete'} left by a crash could not be finished`, { snapshotId: s.id, error: e as Error });
      await updateSnapshot(s.id, { type: creating ? 'create-failed' : 'delete-failed', at, reason });
      out.push({ snapshotId: s.id, action: creating ? 'create-failed' : 'delete-failed', detail: reason });
    }
  }
  return out;
}
