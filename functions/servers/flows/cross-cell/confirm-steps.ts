/**
 * The steps of server-cross-cell-confirm (reference §1.2 ConfirmResizeTask, §1.3
 * confirm_snapshot_based_resize_at_source, §1.5; traces xcell_a, xcell_g, xcell_i), and the
 * confirm a delete of a cross-cell-resized server runs first (`_confirm_resize_on_deleting`).
 *
 * The operation lives on the shown TGT copy throughout. Source: kept disks removed, source
 * bindings deleted, att_S2 deleted, the migration's allocations released; then the SRC copy is
 * hard-deleted and the TGT migration 'confirmed'.
 */
import { releaseAll } from '../../../compute/placement.js';
import { intentId } from '../../../core/intents.js';
import { logger } from '../../../core/logger.js';
import { attachmentDelete } from '../../cinder.js';
import { driverOfHost, endOperation, faultOf, guestOn, loadStep, reasonOf, updateOp, withEvent, type ServerStepInput, type StepState } from '../../engine.js';
import { actionPutItem, finishEvent, newAction, startEvent } from '../../instance-actions.js';
import { getMigration, listMigrations, updateMigration } from '../../migrations.js';
import type { Instance, Migration, VmState } from '../../model.js';
import { deletePortBinding, listPortsOf } from '../../network.js';
import { setRequestSpecFlavor } from '../../repo.js';
import { volumeBdms } from '../block-devices.js';
import { migrationOf, MOVE_KEYS, oldVmState, withoutKeys } from '../resize/shared.js';
import { cellOfHost, hardDeleteCopy, loadPartition } from './copies.js';

const CONDUCTOR_EVENT = 'conductor_confirm_snapshot_based_resize';
const SOURCE_EVENT = 'compute_confirm_snapshot_based_resize_at_source';

/** vm_state after confirm: from the power state of the guest on dest (upstream), as before the move. */
function confirmedVmState(i: Instance): VmState {
  return oldVmState(i);
}

/**
 * confirm_snapshot_based_resize_at_source, done against the SRC copy if it is still there: every
 * effect is idempotent (confirmMigration of a host without the guest, a binding or attachment
 * already gone are no-ops), so a re-run repeats it safely until the SRC copy is hard-deleted.
 */
async function cleanupSource(s: StepState, m: Migration): Promise<void> {
  const source = m.sourceCompute!;
  const srcCell = await cellOfHost(source);
  const src = await loadPartition(srcCell, s.instance.uuid);
  if (!src.instance) return; // hard-deleted by a finished run: the source was cleaned before that
  await withEvent(s, SOURCE_EVENT, source, async () => {
    await (await driverOfHost(source)).confirmMigration(s.instance.uuid);
    for (const port of await listPortsOf(s.instance.uuid)) if (source !== s.instance.host) await deletePortBinding(port.id, source);
    // att_S2 placeholders; att_D (TGT) stays.
    const tgtAttachments = new Set(s.bdms.map((b) => b.attachmentId).filter(Boolean));
    for (const b of volumeBdms(src.bdms)) if (b.attachmentId && !tgtAttachments.has(b.attachmentId)) await attachmentDelete(b.attachmentId);
  });
  // upstream's `finally`: the migration consumer's allocations are deleted even on failure (rollback repeats it)
  await releaseAll(m.uuid);
  const srcMigration = await getMigration(srcCell, m.uuid);
  if (srcMigration && srcMigration.status !== 'confirmed') await updateMigration(srcCell, m.uuid, { status: 'confirmed' });
}

/** SRC hard-deleted, TGT migration 'confirmed', request spec flavor: the part after the source. */
async function finishInTarget(s: StepState, m: Migration): Promise<void> {
  await hardDeleteCopy(await cellOfHost(m.sourceCompute!), s.instance.uuid);
  if (m.status !== 'confirmed') await updateMigration(s.cell, m.uuid, { status: 'confirmed' });
  await setRequestSpecFlavor(s.instance.uuid, s.instance.flavor);
}

/**
 * What a failed confirm still cleans of the source (upstream [i] leaves the SRC copy, ERROR): the
 * migration's allocations released, the att_S2 placeholders deleted (att_D stays), the SRC copy
 * hard-deleted. The source host may still hold the kept disks: the caller keeps `move_source`.
 */
async function dropSourceCopy(s: StepState, m: Migration): Promise<void> {
  await releaseAll(m.uuid);
  const srcCell = await cellOfHost(m.sourceCompute!);
  const src = await loadPartition(srcCell, s.instance.uuid);
  const tgtAttachments = new Set(s.bdms.map((b) => b.attachmentId).filter(Boolean));
  for (const b of volumeBdms(src.bdms)) if (b.attachmentId && !tgtAttachments.has(b.attachmentId)) await attachmentDelete(b.attachmentId);
  await hardDeleteCopy(srcCell, s.instance.uuid);
}

const confirmedFields = (instance: Instance): Instance => ({
  ...instance,
  vmState: confirmedVmState(instance),
  taskState: null,
  oldFlavor: null,
  newFlavor: null,
  systemMetadata: withoutKeys(instance.systemMetadata, MOVE_KEYS),
});

/** The finished cross-cell migration of a resized copy in its own cell, if any. */
export async function crossCellMigrationOf(s: StepState): Promise<Migration | undefined> {
  if (s.instance.vmState !== 'resized') return undefined;
  const found = (await listMigrations()).filter(({ cell, migration }) => cell.uuid === s.cell.uuid && migration.instanceUuid === s.instance.uuid);
  return found.map((f) => f.migration).find((m) => m.crossCellMove && (m.status === 'finished' || m.status === 'confirming'));
}

/**
 * Delete while VERIFY_RESIZE (trace xcell_g): the cross-cell confirm runs first, synchronously,
 * under action `confirmResize`. Ferry keys actions by (instance, request id), so the confirm's
 * action gets a request id derived from the delete's (upstream: the same one). Recognises its own
 * finished work: the action and events are reused, the source steps skip what is gone. Returns the
 * state with the instance no longer resized (task left to the delete).
 */
export async function confirmCrossCellFirst(s: StepState): Promise<StepState> {
  const m = await crossCellMigrationOf(s);
  if (!m) return s;
  const requestId = intentId(s.op.requestId, 'xcell-confirm-on-delete', s.instance.uuid);
  const { actions } = await loadPartition(s.cell, s.instance.uuid);
  let state = s;
  if (!actions.some((a) => a.requestId === requestId)) {
    state = await updateOp(state, () => ({ extra: [actionPutItem(state.cell, newAction(state.instance, 'confirmResize', requestId))] }));
  }
  const asConfirm: StepState = { ...state, op: { ...state.op, requestId } };
  await startEvent(state.cell, state.instance.uuid, requestId, CONDUCTOR_EVENT, null);
  if (m.status !== 'confirming') await updateMigration(state.cell, m.uuid, { status: 'confirming' });
  try {
    await cleanupSource(asConfirm, m);
    await finishInTarget(state, m);
    await finishEvent(state.cell, state.instance.uuid, requestId, CONDUCTOR_EVENT);
  } catch (e) {
    // The server is being deleted: a source that failed its part does not stop that. What is left
    // on it (the kept disks) the delete destroys through move_source, kept in system_metadata.
    await finishEvent(state.cell, state.instance.uuid, requestId, CONDUCTOR_EVENT, { message: (e as Error).message, traceback: (e as Error).stack });
    logger.warn('delete: the cross-cell confirm failed at the source; the delete cleans it', { serverId: state.instance.uuid, error: (e as Error).message });
    await dropSourceCopy(state, m);
    await updateMigration(state.cell, m.uuid, { status: 'error' });
    const source = m.sourceCompute!;
    return updateOp(state, ({ instance }) => ({
      instance: { ...confirmedFields(instance), taskState: instance.taskState, systemMetadata: { ...withoutKeys(instance.systemMetadata, MOVE_KEYS), move_source: source } },
    }));
  }
  // The delete's task_state ('deleting') stays.
  return updateOp(state, ({ instance }) => ({ instance: { ...confirmedFields(instance), taskState: instance.taskState } }));
}

// ---------------------------------------------------------------------------------------------
// server-cross-cell-confirm

async function confirmSource(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const m = await migrationOf(s);
  if (m.status === 'confirmed') return {};
  await startEvent(s.cell, s.instance.uuid, s.op.requestId, CONDUCTOR_EVENT, null);
  await cleanupSource(s, m);
  return {};
}

async function confirmFinish(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const m = await migrationOf(s);
  await finishInTarget(s, m);
  await finishEvent(s.cell, s.instance.uuid, s.op.requestId, CONDUCTOR_EVENT);
  await endOperation(s, ({ instance }) => ({ instance: confirmedFields(instance) }));
  return {};
}

/**
 * Confirm failed (upstream [i]: TGT and SRC ERROR, SRC left). The guest runs on dest, so TGT stays
 * usable with its old vm_state and a fault; the migration 'error'; what can be cleaned on the
 * source is: allocations released, att_S2 deleted, the SRC copy hard-deleted. `move_source` is
 * kept in system_metadata so a later delete also removes the kept disks left on the source.
 */
async function confirmRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const reason = reasonOf(input.error);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  await finishEvent(s.cell, s.instance.uuid, s.op.requestId, CONDUCTOR_EVENT, { message: reason });
  await dropSourceCopy(s, m);
  await updateMigration(s.cell, m.uuid, { status: 'error' });
  const onDest = s.instance.host ? await guestOn(s.instance.host, s.instance.uuid) : undefined;
  const vm: VmState = onDest?.defined ? confirmedVmState(s.instance) : 'error';
  if (vm === 'error') logger.error('cross-cell confirm failed and the guest is not on its host', { serverId: s.instance.uuid });
  await endOperation(s, ({ instance }) => ({
    instance: {
      ...instance,
      vmState: vm,
      taskState: null,
      oldFlavor: null,
      newFlavor: null,
      systemMetadata: { ...withoutKeys(instance.systemMetadata, MOVE_KEYS), move_source: source },
      fault: faultOf(reason),
    },
  }));
  return { vmState: vm };
}

export const CROSS_CELL_CONFIRM_STEPS = {
  'xcell-confirm-source': confirmSource,
  'xcell-confirm-finish': confirmFinish,
  'xcell-confirm-rollback': confirmRollback,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;
