/**
 * xcell-revert-rollback (reference §1.7 rows "revert fails before the mapping flip", "revert: dest
 * revert fails" [j], "revert: finish at source fails"). Upstream leaves ERROR and undoes nothing
 * (B3: the TGT copy stays). Ferry:
 * - before the flip (op on TGT): nothing the user sees changed, so back to VERIFY_RESIZE on TGT
 *   (migration 'finished', task None, a fault); SRC task back to resize_migrated and its migration
 *   back to 'post-migrating'. The SRC BDMs already reconciled stay (a later revert or confirm
 *   reconciles or deletes them by BDM uuid again).
 * - after the flip (op on SRC): the revert is finished forward on the source. What the dest part
 *   could not do (e.g. its host is down) is logged and left for the audit; ERROR only when the
 *   source cannot run the guest.
 */
import { logger } from '../../../core/logger.js';
import { endOperation, faultOf, loadStep, reasonOf, type ServerStepInput } from '../../engine.js';
import { finishEvent } from '../../instance-actions.js';
import { getMigration, updateMigration } from '../../migrations.js';
import { migrationOf } from '../resize/shared.js';
import { cellOfHost, updateCopy } from './copies.js';
import { REVERT_CONDUCTOR_EVENT } from './revert-source-cell.js';
import { finishRevertAtSource, revertAtDest, revertedFields } from './revert-work.js';

export async function revertRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const reason = reasonOf(input.error);
  const m = await migrationOf(s);
  const srcCell = await cellOfHost(m.sourceCompute!);
  await finishEvent(s.cell, s.instance.uuid, s.op.requestId, REVERT_CONDUCTOR_EVENT, { message: reason });

  if (s.cell.uuid === input.cellUuid && s.cell.uuid !== srcCell.uuid) {
    // Before the flip: s is TGT.
    const srcMigration = await getMigration(srcCell, m.uuid);
    if (srcMigration?.status === 'reverting') await updateMigration(srcCell, m.uuid, { status: 'post-migrating' });
    await updateCopy(srcCell, s.instance.uuid, ({ instance }) => ({
      instance: instance.taskState === 'resize_reverting' ? { ...instance, taskState: 'resize_migrated' } : instance,
    }));
    await updateMigration(s.cell, m.uuid, { status: 'finished' });
    await endOperation(s, ({ instance }) => ({ instance: { ...instance, taskState: null, fault: faultOf(reason) } }));
    return { vmState: 'resized' };
  }

  // After the flip: s is SRC.
  try {
    await revertAtDest(s, m);
  } catch (e) {
    logger.error('cross-cell revert: the destination could not be cleaned; left for the audit', { serverId: s.instance.uuid, dest: m.destCompute, error: (e as Error).message });
  }
  try {
    const done = await finishRevertAtSource(s, m);
    await endOperation(done, ({ instance }) => ({ instance: { ...revertedFields(instance), fault: faultOf(reason) } }));
    return { vmState: done.instance.systemMetadata.old_vm_state === 'stopped' ? 'stopped' : 'active' };
  } catch (e) {
    const why = `${reason}; finishing the revert on the source failed: ${(e as Error).message}`;
    logger.error('cross-cell revert could not finish on the source', { serverId: s.instance.uuid, error: (e as Error).message });
    await updateMigration(s.cell, m.uuid, { status: 'error' });
    await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'error', taskState: null, fault: faultOf(why) } }));
    return { vmState: 'error' };
  }
}
