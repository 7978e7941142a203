/**
 * The reconciler: what `ferry audit --repair` runs once, the local stack at start and on a timer,
 * and AWS from an EventBridge schedule (the `reconciler` function of the wiring table).
 *
 * One pass, in this order:
 * 1. unfinished intents older than `before`: connects of crashed PUT /attachments calls (finished
 *    or undone by the attachments service), attach waits whose machine never started, ended without
 *    ending them (repaired from one look at the backend) or whose
 *    detach is still pending (attach-wait-recovery.ts), server operations whose machine never started
 *    (abandoned by the servers' engine, which undoes what their API part made), and the share
 *    backend repairs an earlier pass recorded but did not finish (share-backend-repairs.ts);
 * 2. an audit, and the repairs of repair.ts for the kinds it may repair (each re-checked);
 * 3. an audit again if anything was repaired: its findings are what remains for an operator.
 *
 * `before` is the grace cut-off: nothing that changed after it is touched. Locally at start it is
 * the start time (nothing ran before it that is still running); otherwise now less the grace,
 * which must exceed any synchronous API call (29 s) and any step.
 *
 * `signal` ends a pass early (the local stack's stop while its start pass runs): it is checked
 * between repairs, never inside one, so an interrupted pass leaves each repair done or not begun,
 * as a pass that ended there would, and the next pass picks up what it left.
 */
import { recoverAttachWaits } from '../attachments/attach-wait-recovery.js';
import { recoverPendingConnects, recoverPendingDisconnects, type AttachmentRepair } from '../attachments/recovery.js';
import { DependencyError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { recoverStuckImports } from '../images/import-recovery.js';
import { abandonOperation, findOperationsWithoutExecution } from '../servers/abandon.js';
import { recoverPendingAccess } from '../shares/recovery.js';
import { recoverPendingResizes } from '../shares/resize-recovery.js';
import { recoverPendingSnapshots } from '../snapshots/recovery.js';
import { recoverPendingExtends } from '../volumes/recovery.js';
import { runAudit } from './audit.js';
import { ReconcileInterrupted } from './interrupted.js';
import { recordLastAudit } from './last-audit.js';
import type { AuditFinding } from './findings.js';
import { repairFinding, type RepairRecord } from './repair.js';
import { recoverShareRepairs } from './share-backend-repairs.js';

export type { RepairRecord } from './repair.js';
export { REPAIRABLE_KINDS } from './repair.js';
export { ReconcileInterrupted } from './interrupted.js';

/** On AWS: longer than any synchronous API call (29 s) and any state machine step (15 min Lambda max is the step bound; the steps that run that long hold their operation, which the repairs skip). */
export const RECONCILE_GRACE_SECONDS = 600;

export interface ReconcileOptions {
  /** The grace cut-off: only intents and records unchanged since then are finished, undone or repaired. */
  before: Date;
  /** Called with each record as it is made (the CLI prints them; the local stack logs them). */
  log?: (record: RepairRecord) => void;
  /** Once aborted, the pass stops before its next repair and throws ReconcileInterrupted. */
  signal?: AbortSignal;
}

export interface ReconcileResult {
  /** What was finished, undone, terminated or deleted. */
  repaired: RepairRecord[];
  /** Repairs the re-check refused (in use, changed) or that failed: their findings remain. */
  left: RepairRecord[];
  /** The findings after the repairs: an operator's. */
  remaining: AuditFinding[];
  /** What the last audit checked (counts by kind of resource). */
  checked: Record<string, number>;
}

export async function reconcile(options: ReconcileOptions): Promise<ReconcileResult> {
  const records: RepairRecord[] = [];
  const note = (r: RepairRecord) => {
    records.push(r);
    const log = r.outcome === 'failed' ? logger.error.bind(logger) : logger.info.bind(logger);
    log(`reconciler: ${r.outcome} ${r.kind} ${r.resource}`, { repair: r });
    options.log?.(r);
  };

  const checkpoint = () => {
    if (options.signal?.aborted) throw new ReconcileInterrupted(records.length);
  };

  checkpoint();
  await finishIntents(options.before, note, checkpoint);

  checkpoint();
  const audit = await runAudit();
  for (const finding of audit.findings) {
    checkpoint();
    const r = await repairFinding(finding, { before: options.before });
    if (r) note(r);
  }
  checkpoint();
  const after = records.some((r) => r.outcome === 'repaired') ? await runAudit() : audit;
  const result = {
    repaired: records.filter((r) => r.outcome === 'repaired'),
    left: records.filter((r) => r.outcome !== 'repaired'),
    remaining: after.findings,
    checked: after.checked,
  };
  // What the operator console shows as the last audit.
  await recordLastAudit({ at: new Date().toISOString(), checked: result.checked, repaired: result.repaired.length, left: result.left.length, findingCount: result.remaining.length, findings: result.remaining });
  return result;
}

/** Step 1: intents of crashed synchronous calls and operations whose machine never started, each noted as it is made; `checkpoint` between kinds and operations. */
async function finishIntents(before: Date, note: (r: RepairRecord) => void, checkpoint: () => void): Promise<void> {
  for (const r of [...(await recoverPendingConnects({ before })), ...(await recoverPendingDisconnects({ before }))]) note(fromAttachmentRepair(r));
  // Attach waits whose volume-attach-wait never started or ended without ending them, or whose detach after a failed attach is still pending (functions/attachments/attach-wait-recovery.ts).
  checkpoint();
  for (const r of await recoverAttachWaits({ before })) {
    note({ kind: r.kind, resource: `attachment ${r.attachmentId}`, saw: r.saw, did: r.did, outcome: r.action === 'failed' ? 'failed' : r.action === 'ended' || r.action === 'superseded' ? 'left' : 'repaired' });
  }
  // Snapshots a crashed POST/DELETE /snapshots left creating or deleting (functions/snapshots/recovery.ts);
  // a creating one whose snapshot-create machine is running is the machine's and not listed.
  checkpoint();
  for (const r of await recoverPendingSnapshots({ before })) {
    const outcome = r.action === 'pending' ? 'left' : r.action.endsWith('failed') || r.action === 'owner-unknown' ? 'failed' : 'repaired';
    const did =
      r.action === 'pending'
        ? 'nothing yet: the backend is still making it; the next run looks again'
        : r.action === 'owner-unknown'
          ? 'nothing: whether its snapshot-create machine is running could not be read; the next run looks again'
          : r.action;
    note({ kind: 'pending-snapshot', resource: `snapshot ${r.snapshotId}`, saw: r.detail, did, outcome });
  }
  // Image imports no machine runs any more (never started, or ended without ending them): back to queued (functions/images/import-recovery.ts).
  checkpoint();
  for (const r of await recoverStuckImports({ before })) {
    const did = r.action === 'owner-unknown' ? 'nothing: whether its image-import machine is running could not be read; the next run looks again' : 'put it back to queued with the reason on its import task, its object removed';
    note({ kind: 'stuck-image-import', resource: `image ${r.imageId}`, saw: r.detail, did, outcome: r.action === 'owner-unknown' ? 'failed' : 'repaired' });
  }
  // Extends a crashed os-extend left extending (functions/volumes/recovery.ts).
  checkpoint();
  for (const r of await recoverPendingExtends({ before })) {
    note({ kind: 'pending-extend', resource: `volume ${r.volumeId}`, saw: r.detail, did: r.action, outcome: r.action.endsWith('failed') ? 'failed' : 'repaired' });
  }
  // Share access rules a crashed allow_access / deny_access left pending (functions/shares/recovery.ts).
  checkpoint();
  for (const r of await recoverPendingAccess({ before })) {
    note({ kind: 'pending-access', resource: `share ${r.shareId}`, saw: r.detail, did: r.action, outcome: r.action === 'failed' ? 'failed' : 'repaired' });
  }
  // Share extends and shrinks a crashed action left extending or shrinking (functions/shares/resize-recovery.ts).
  checkpoint();
  for (const r of await recoverPendingResizes({ before })) {
    note({ kind: 'pending-resize', resource: `share ${r.shareId}`, saw: r.detail, did: r.action, outcome: r.action === 'failed' ? 'failed' : 'repaired' });
  }
  // Share backend repairs (quota, stray replications) a pass left as intents (functions/audit/share-backend-repairs.ts).
  checkpoint();
  for (const r of await recoverShareRepairs({ before })) note(r);
  checkpoint();
  for (const op of await findOperationsWithoutExecution({ before })) {
    checkpoint();
    const resource = `server ${op.instanceUuid}`;
    const saw = `operation ${op.requestId} with no execution of its machine, begun before ${before.toISOString()}`;
    try {
      const result = await abandonOperation(op.cellUuid, op.instanceUuid, op.requestId);
      const did: string = { abandoned: 'abandoned it: its API part undone, the task state cleared', 'not-found': 'left it: the server is gone', 'other-operation': 'left it: the server is in another operation now' }[result];
      note({ kind: 'operation-without-execution', resource, saw, did, outcome: result === 'abandoned' ? 'repaired' : 'left' });
    } catch (e) {
      logger.error('could not abandon an operation without execution; the next run tries again', { resource, requestId: op.requestId, error: e as Error });
      note({ kind: 'operation-without-execution', resource, saw, did: `abandoning it failed (${(e as Error).name}: ${(e as Error).message}); the next run tries again`, outcome: 'failed' });
    }
  }
}

/** The attachments service's account of one intent it finished or undid (it logged it already), as a repair record. */
function fromAttachmentRepair(r: AttachmentRepair): RepairRecord {
  return { ...r, outcome: r.did.startsWith('failed') ? 'failed' : 'repaired' };
}

/** Scheduled by EventBridge on AWS (infra/aws): one pass with the grace cut-off; throws when a repair failed, so the function's errors show it. */
export async function handler(): Promise<{ repaired: number; left: number; remaining: number }> {
  const result = await reconcile({ before: new Date(Date.now() - RECONCILE_GRACE_SECONDS * 1000) });
  const failed = result.left.filter((r) => r.outcome === 'failed');
  if (failed.length > 0) throw new DependencyError(`${failed.length} repair(s) failed: ${failed.map((r) => `${r.kind} ${r.resource}`).join(', ')}`);
  return { repaired: result.repaired.length, left: result.left.length, remaining: result.remaining.length };
}
