/**
 * The steps of server-cross-cell-revert (reference §1.2 RevertResizeTask, §1.6; traces xcell_b,
 * xcell_c, xcell_h, xcell_j). Before the flip (revert-source-cell.ts) the op is on TGT; after it,
 * on SRC (loadStep's fallback through the mapping).
 */
import { endOperation, loadStep, type ServerStepInput } from '../../engine.js';
import { finishEvent } from '../../instance-actions.js';
import { migrationOf } from '../resize/shared.js';
import { REVERT_CONDUCTOR_EVENT, revertFlip, revertSourceCell } from './revert-source-cell.js';
import { revertRollback } from './revert-rollback.js';
import { finishRevertAtSource, revertAtDest, revertedFields } from './revert-work.js';

async function revertDest(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  await revertAtDest(s, await migrationOf(s));
  return {};
}

async function revertFinishSource(input: ServerStepInput): Promise<unknown> {
  const loaded = await loadStep(input);
  const s = await finishRevertAtSource(loaded, await migrationOf(loaded));
  await finishEvent(s.cell, s.instance.uuid, s.op.requestId, REVERT_CONDUCTOR_EVENT);
  await endOperation(s, ({ instance }) => ({ instance: revertedFields(instance) }));
  return {};
}

export const CROSS_CELL_REVERT_STEPS = {
  'xcell-revert-source-cell': revertSourceCell,
  'xcell-revert-flip': revertFlip,
  'xcell-revert-dest': revertDest,
  'xcell-revert-finish-source': revertFinishSource,
  'xcell-revert-rollback': revertRollback,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;
