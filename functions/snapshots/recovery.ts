/**
 * Snapshots whose synchronous API call died mid-way (a crash inside POST /snapshots or DELETE
 * /snapshots/{id}, functions/snapshots/routes.ts): nothing resumes those calls, so the reconciler
 * finishes them. The record written before the driver call is the intent: its backend name derives
 * from the snapshot id, so the driver call is idempotent under it. A record still `creating` or
 * `deleting` and unchanged since `before` (the grace cut-off: no live call still owns it) is
 * finished — the create made again and recorded available, the delete made again and the record
 * removed — or, when the backend refuses, put in the error state the API call would have recorded.
 *
 * A `creating` snapshot whose snapshot-create execution is running (the backend was still making
 * it when the API answered, functions/snapshots/machine.ts) belongs to that machine and is not
 * touched; one whose execution ended without ending it (timed out, aborted) or never started (the
 * start failed: the API left it to this pass) is finished here. When Step Functions cannot say
 * whether the execution runs, the snapshot is left for the next pass and reported as a failure.
 */
import { BackendNotReady } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { isSnapshotDriver } from '../drivers/volume/registry.js';
import { driverForHost } from '../volumes/backends.js';
import { snapshotCreateExecutionName, snapshotCreateStatus } from './machine.js';
import { listSnapshots, removeSnapshotRecord, updateSnapshot } from './repo.js';

export interface SnapshotRecovery {
  snapshotId: string;
  /**
   * created / deleted: finished; create-failed / delete-failed: the backend refused, the error state
   * recorded; pending: the backend is still at it; owner-unknown: Step Functions could not say
   * whether a snapshot-create execution owns it, so nothing was done.
   */
  action: 'created' | 'deleted' | 'create-failed' | 'delete-failed' | 'pending' | 'owner-unknown';
  detail: string;
}

export async function recoverPendingSnapshots(options: { before: Date }): Promise<SnapshotRecovery[]> {
  const out: SnapshotRecovery[] = [];
  const pending = (await listSnapshots()).filter((s) => (s.status === 'creating' || s.status === 'deleting') && Date.parse(s.updatedAt) < options.before.getTime());
  for (const s of pending) {
    const at = new Date().toISOString();
    const creating = s.status === 'creating';
    if (creating) {
      try {
        // The machine's, while it runs: it waits for the backend and ends the snapshot itself.
        if ((await snapshotCreateStatus(s.id)) === 'RUNNING') continue;
      } catch (e) {
        logger.error('could not tell whether a creating snapshot belongs to a running snapshot-create; left for the next pass', { snapshotId: s.id, error: e as Error });
        out.push({ snapshotId: s.id, action: 'owner-unknown', detail: `could not read execution ${snapshotCreateExecutionName(s.id)}: ${e instanceof Error ? e.message : String(e)}` });
        continue;
      }
    }
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
