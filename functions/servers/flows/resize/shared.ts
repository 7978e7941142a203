/**
 * What the steps of server-resize, server-confirm-resize and server-revert-resize share: the move's
 * system_metadata keys and vm_state, its migration record, Nova's volume connection dance around a
 * move (`_terminate_volume_connections`, `_update_volume_attachments`, attachment_complete), and
 * putting bindings and allocations back on the source.
 */
import { allocationsOf, moveAllocations, releaseOn } from '../../../compute/placement.js';
import { InvariantViolation } from '../../../core/errors.js';
import { intentId } from '../../../core/intents.js';
import { POWER_STATE } from '../../../drivers/compute/driver.js';
import { attachmentComplete, attachmentCreate, attachmentDelete, attachmentGet, attachmentUpdate, hostConnector } from '../../cinder.js';
import { endOperation, faultOf, updateOp, type StepState } from '../../engine.js';
import { getMigration, updateMigration } from '../../migrations.js';
import type { ComputeNode } from '../../../compute/model.js';
import type { Instance, Migration, VmState } from '../../model.js';
import { activatePortBinding, bindPortToHost, deletePortBinding, listPortsOf } from '../../network.js';
import { volumeBdms } from '../block-devices.js';

const now = () => new Date().toISOString();

/** Nova's system_metadata keys a move sets while it lasts (delete reads move_source/move_dest). */
export const MOVE_KEYS = ['old_vm_state', 'move_source', 'move_dest'] as const;
export function withoutKeys(meta: Record<string, string>, keys: readonly string[]): Record<string, string> {
  return Object.fromEntries(Object.entries(meta).filter(([k]) => !keys.includes(k)));
}

export const oldVmState = (i: Instance): VmState => (i.systemMetadata.old_vm_state === 'stopped' ? 'stopped' : 'active');
export const powerFor = (vm: VmState) => (vm === 'stopped' ? POWER_STATE.SHUTDOWN : POWER_STATE.RUNNING);

export async function migrationOf(s: StepState): Promise<Migration> {
  const m = s.op.migrationUuid ? await getMigration(s.cell, s.op.migrationUuid) : undefined;
  // The API put the migration in the same write as the operation.
  if (!m) throw new InvariantViolation(`operation ${s.op.requestId} of ${s.instance.uuid} has no migration`);
  return m;
}

/**
 * `_terminate_volume_connections`: per volume BDM an empty placeholder attachment. Their ids
 * (derived from the request and `step`) are recorded first with each BDM's old attachment and
 * connection_info, in one write; then per BDM the placeholder is made under its id, the BDM
 * switched to it, the old one deleted. A BDM already on its placeholder is done (only the old
 * delete is repeated, 404 ignored); one not switched yet gets the same placeholder again.
 */
export async function terminateVolumeConnections(s: StepState, step: string): Promise<StepState> {
  let state = s;
  const pending = volumeBdms(state.bdms).filter((b) => !state.op.holds.newAttachments?.[b.uuid]);
  if (pending.length) {
    state = await updateOp(state, ({ instance, op }) => {
      const h = op.holds;
      const made = Object.fromEntries(pending.map((b) => [b.uuid, intentId(op.requestId, step, b.uuid)]));
      const old = Object.fromEntries(pending.filter((b) => b.attachmentId).map((b) => [b.uuid, b.attachmentId!]));
      const info = Object.fromEntries(pending.map((b) => [b.uuid, b.connectionInfo]));
      return { instance: { ...instance, operation: { ...op, holds: { ...h, newAttachments: { ...h.newAttachments, ...made }, oldAttachments: { ...h.oldAttachments, ...old }, oldConnectionInfo: { ...h.oldConnectionInfo, ...info } } } } };
    });
  }
  for (const { uuid: bdmUuid } of volumeBdms(state.bdms)) {
    const current = state.bdms.find((b) => b.uuid === bdmUuid)!;
    const placeholder = state.op.holds.newAttachments![bdmUuid]!;
    if (current.attachmentId === placeholder) {
      const old = state.op.holds.oldAttachments?.[bdmUuid];
      if (old) await attachmentDelete(old);
      continue;
    }
    await attachmentCreate(placeholder, current.volumeId!, state.instance.uuid);
    state = await updateOp(state, ({ bdms }) => ({
      putBdms: bdms.filter((b) => b.uuid === bdmUuid).map((b) => ({ ...b, attachmentId: placeholder, connectionInfo: null, updatedAt: now() })),
    }));
    if (current.attachmentId) await attachmentDelete(current.attachmentId);
  }
  return state;
}

/**
 * `_update_volume_attachments` + the refresh of `_get_instance_block_device_info`: every volume
 * BDM's attachment updated with the host's connector, then read back and its connection_info saved.
 */
export async function connectAttachments(s: StepState, host: string): Promise<StepState> {
  const bdms = volumeBdms(s.bdms).filter((b) => b.attachmentId);
  for (const b of bdms) await attachmentUpdate(b.attachmentId!, hostConnector(host, b.deviceName), b.deviceName);
  const info: Record<string, Record<string, unknown> | null> = {};
  for (const b of bdms) info[b.uuid] = (await attachmentGet(b.attachmentId!))?.connectionInfo ?? null;
  return updateOp(s, ({ bdms: current }) => ({
    putBdms: current.filter((b) => b.uuid in info).map((b) => ({ ...b, connectionInfo: info[b.uuid]!, updatedAt: now() })),
  }));
}

export async function completeAttachments(s: StepState): Promise<void> {
  for (const b of volumeBdms(s.bdms)) if (b.attachmentId) await attachmentComplete(b.attachmentId);
}

/** The port bindings back on the source: its binding active, the destination's removed. */
export async function bindingsBackTo(instanceUuid: string, source: string, dest: string | null): Promise<void> {
  for (const port of await listPortsOf(instanceUuid)) {
    await bindPortToHost(port.id, source, { active: true });
    await activatePortBinding(port.id, source);
    if (dest && dest !== source) await deletePortBinding(port.id, dest);
  }
}

/** Allocations back as before the move: the instance holds on the source only. */
export async function allocationsBackTo(instanceUuid: string, migrationUuid: string, sourceNodeUuid: string): Promise<void> {
  for (const a of await allocationsOf(instanceUuid)) if (a.nodeUuid !== sourceNodeUuid) await releaseOn(a.nodeUuid, instanceUuid);
  await moveAllocations(migrationUuid, instanceUuid);
}

/**
 * The end of a failed move, once everything it made is undone: migration 'error', the operation
 * ended with the instance back on its source as it was (old flavor and vm_state, task None) and a
 * fault (upstream's rollbacks leave ERROR, or RESIZE for bug B1).
 */
export async function endBackOnSource(s: StepState, m: Migration, sourceNode: ComputeNode, vm: VmState, reason: string): Promise<void> {
  await updateMigration(s.cell, m.uuid, { status: 'error' });
  await endOperation(s, ({ instance }) => ({
    instance: {
      ...instance,
      host: m.sourceCompute!,
      node: sourceNode.hypervisorHostname,
      flavor: instance.oldFlavor ?? instance.flavor,
      oldFlavor: null,
      newFlavor: null,
      vmState: vm,
      taskState: null,
      powerState: powerFor(vm),
      systemMetadata: withoutKeys(instance.systemMetadata, MOVE_KEYS),
      fault: faultOf(reason),
    },
  }));
}
