/**
 * The first half of server-cross-cell-revert (reference §1.2 RevertResizeTask steps 3-4, §1.6,
 * §1.10 "revert: conductor"; traces xcell_b, xcell_c, xcell_h): the SRC copy brought up to date
 * from the shown TGT copy, then the mapping flipped to it, the operation moving with it.
 *
 * Both steps run while the op is on TGT (input.cellUuid); once the flip landed, loadStep finds the
 * op on SRC, which is how a re-run recognises that both are done.
 */
import { attachmentCreate, attachmentDelete } from '../../cinder.js';
import { loadStep, recordHolds, type ServerStepInput, type StepState } from '../../engine.js';
import { actionPutItem, startEvent } from '../../instance-actions.js';
import { updateMigration } from '../../migrations.js';
import type { CellMapping } from '../../../compute/model.js';
import type { BlockDeviceMapping, Migration } from '../../model.js';
import { volumeBdms } from '../block-devices.js';
import { migrationOf } from '../resize/shared.js';
import { intentId } from '../../../core/intents.js';
import { cellOfHost, flipInstanceMapping, loadPartition, updateCopy } from './copies.js';

export const REVERT_CONDUCTOR_EVENT = 'conductor_revert_snapshot_based_resize';
const now = () => new Date().toISOString();

/** The op still on the copy it started on (TGT): the flip has not landed. */
const beforeFlip = (s: StepState, input: ServerStepInput) => s.cell.uuid === input.cellUuid;

/**
 * `_update_bdms_in_source_cell`, by BDM uuid. A volume attached while resized (TGT only) gets an
 * empty attachment in SRC, its id recorded in holds.rollbackAttachments first, and its BDM cloned
 * into SRC with it; one detached while resized (SRC only) has its SRC attachment deleted and its
 * SRC BDM removed. Returns the BDM changes for SRC (made in one write with the rest).
 */
async function reconcileBdms(s: StepState, src: BlockDeviceMapping[]): Promise<{ s: StepState; put: BlockDeviceMapping[]; remove: string[] }> {
  const srcUuids = new Set(src.map((b) => b.uuid));
  const tgtUuids = new Set(s.bdms.map((b) => b.uuid));
  const attached = volumeBdms(s.bdms).filter((b) => !srcUuids.has(b.uuid));
  const detached = volumeBdms(src).filter((b) => !tgtUuids.has(b.uuid));
  let state = s;
  const missing = attached.filter((b) => !state.op.holds.rollbackAttachments?.[b.uuid]);
  if (missing.length) {
    const made = Object.fromEntries(missing.map((b) => [b.uuid, intentId(s.op.requestId, 'xcell-revert-bdm', b.uuid)]));
    state = await recordHolds(state, (h) => ({ ...h, rollbackAttachments: { ...h.rollbackAttachments, ...made } }));
  }
  const put: BlockDeviceMapping[] = [];
  for (const b of attached) {
    const id = state.op.holds.rollbackAttachments![b.uuid]!;
    await attachmentCreate(id, b.volumeId!, s.instance.uuid);
    put.push({ ...b, attachmentId: id, connectionInfo: null, updatedAt: now() });
  }
  for (const b of detached) if (b.attachmentId) await attachmentDelete(b.attachmentId);
  return { s: state, put, remove: detached.map((b) => b.uuid) };
}

/** `_update_migration_in_source_cell`: every field but the per-cell ones copied from TGT. */
async function copyMigration(srcCell: CellMapping, m: Migration): Promise<void> {
  const { id: _id, createdAt: _c, updatedAt: _u, ...fields } = m;
  await updateMigration(srcCell, m.uuid, fields);
}

/** xcell-revert-source-cell: SRC sysmeta/task, BDMs, the revertResize action, the migration. */
export async function revertSourceCell(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  if (!beforeFlip(s, input)) return {};
  const m = await migrationOf(s);
  const srcCell = await cellOfHost(m.sourceCompute!);
  // Started on TGT before the action is cloned, so SRC's clone carries the started event.
  await startEvent(s.cell, s.instance.uuid, s.op.requestId, REVERT_CONDUCTOR_EVENT, null);
  const tgt = await loadPartition(s.cell, s.instance.uuid);
  const src = await loadPartition(srcCell, s.instance.uuid);
  const reconciled = await reconcileBdms(s, src.bdms);
  s = reconciled.s;
  const action = tgt.actions.find((a) => a.requestId === s.op.requestId);
  const cloneAction = action && !src.actions.some((a) => a.requestId === s.op.requestId);
  const oldVmState = s.instance.systemMetadata.old_vm_state;
  await updateCopy(srcCell, s.instance.uuid, ({ instance }) => ({
    instance: {
      ...instance,
      taskState: 'resize_reverting',
      systemMetadata: oldVmState ? { ...instance.systemMetadata, old_vm_state: oldVmState } : instance.systemMetadata,
    },
    putBdms: reconciled.put,
    deleteBdms: reconciled.remove,
    extra: cloneAction ? [actionPutItem(srcCell, action)] : [],
  }));
  await copyMigration(srcCell, m);
  return {};
}

/**
 * xcell-revert-flip: one transaction shows SRC (REVERT_RESIZE, carrying the op) and hides TGT
 * (op cleared), the mapping pointing at the source cell. Upstream shows ACTIVE from here (B4);
 * Ferry keeps REVERT_RESIZE until the revert is done.
 */
export async function revertFlip(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  if (!beforeFlip(s, input)) return {};
  const m = await migrationOf(s);
  const srcCell = await cellOfHost(m.sourceCompute!);
  await flipInstanceMapping({
    uuid: s.instance.uuid,
    show: { cell: srcCell, change: (i) => ({ ...i, operation: s.op, vmState: 'resized', taskState: 'resize_reverting' }) },
    hide: { cell: s.cell, change: (i) => ({ ...i, operation: null }) },
  });
  return {};
}
