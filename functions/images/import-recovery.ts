/**
 * Web-download imports no machine will finish: the reconciler's pass over images left `importing`.
 * An import's intent is its task on the image (import-task.ts); its machine, image-import-<task id>,
 * owns it while that execution runs. One begun before `before` (the grace cut-off) whose execution
 * is not running — it never started (the API died between its write and StartExecution), or it
 * ended without ending the import (timed out, aborted) — is undone as the machine's Failed step
 * would: what it stored under images/<id> removed, the image back to queued with the reason.
 *
 * Locally, an execution the stack was running when it died is RUNNING in its record and resumes at
 * the next start (after the start's reconcile, which therefore leaves it alone), and its Download
 * step downloads again. When Step Functions cannot say, the image is left for the next pass.
 */
import { logger } from '../core/logger.js';
import { imageImportExecutionName, imageImportStatus } from './import-machine.js';
import { importFailed } from './import-steps.js';
import { importsBegunBefore } from './import-task.js';

export interface ImportRecovery {
  imageId: string;
  taskId: string;
  /** failed: put back to queued; owner-unknown: Step Functions could not say whether the machine runs, nothing done. */
  action: 'failed' | 'owner-unknown';
  detail: string;
}

export async function recoverStuckImports(options: { before: Date }): Promise<ImportRecovery[]> {
  const out: ImportRecovery[] = [];
  for (const image of await importsBegunBefore(options.before)) {
    const taskId = image.importTask.id;
    let status: string | undefined;
    try {
      status = await imageImportStatus(taskId);
    } catch (e) {
      logger.error('could not tell whether an importing image belongs to a running image-import; left for the next pass', { imageId: image.id, taskId, error: e as Error });
      out.push({ imageId: image.id, taskId, action: 'owner-unknown', detail: `could not read execution ${imageImportExecutionName(taskId)}: ${(e as Error).message}` });
      continue;
    }
    if (status === 'RUNNING') continue;
    const why = status === undefined ? 'its image-import execution never started' : `its image-import execution ended ${status} without ending it`;
    const reason = `The import was abandoned: ${why}.`;
    const { status: outcome } = await importFailed(image.id, taskId, { Error: 'ImportAbandoned', Cause: reason });
    out.push({ imageId: image.id, taskId, action: 'failed', detail: `importing since ${image.importTask.createdAt}, ${why}: ${outcome === 'failed' ? 'put back to queued, its object removed' : `left (${outcome})`}` });
  }
  return out;
}
