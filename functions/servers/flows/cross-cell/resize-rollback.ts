/**
 * `xcell-rollback`: any failure of the cross-cell resize before the mapping flip (or a failed
 * flip). Undoes what the holds say: dest guest, att_D, the source guest back on its kept disks with
 * its volumes connected (undoResizeInstance), the snapshot image, dest bindings, the TGT copy,
 * allocations. Ferry leaves the server usable where upstream leaves ERROR (bug B1: task_state too).
 */
import { getCell } from '../../../compute/repo.js';
import { driverOfHost, failEvent, loadStep, nodeOfHost, reasonOf, type ServerStepInput } from '../../engine.js';
import { deleteImage } from '../../images.js';
import { deleteIntendedAttachment } from '../block-devices.js';
import { allocationsBackTo, endBackOnSource, migrationOf, oldVmState } from '../resize/shared.js';
import { undoResizeInstance } from '../resize/steps.js';
import { hardDeleteCopy } from './copies.js';

export async function crossCellRollback(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const reason = reasonOf(input.error);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  const sourceNode = (await nodeOfHost(source)).node;
  const vm = oldVmState(s.instance);
  const h = s.op.holds;
  if (h.destGuest) await (await driverOfHost(h.destGuest)).destroy(s.instance.uuid);
  // att_D goes before the source's placeholders are made: Cinder refuses a new attachment of a
  // volume while another one is still attaching.
  for (const att of Object.values(h.destAttachments ?? {})) await deleteIntendedAttachment(att);
  // The source guest back on its kept disks (volumes connected to the source), bindings back on the source.
  s = await undoResizeInstance(s, m, vm);
  if (h.imageId) await deleteImage(h.imageId);
  if (h.targetCell) {
    const target = await getCell(h.targetCell);
    if (target) await hardDeleteCopy(target, s.instance.uuid);
  }
  await allocationsBackTo(s.instance.uuid, m.uuid, sourceNode.uuid);
  // Upstream's conductor events wrap the whole CrossCellMigrationTask: a failure anywhere ends both
  // in Error (trace xcell_d), which marks the action, also when the failing step had no event of its own.
  for (const event of ['conductor_migrate_server', 'cold_migrate']) await failEvent(s, event, reason);
  await endBackOnSource(s, m, sourceNode, vm, reason);
  return { vmState: vm };
}
