/**
 * The cross-cell half of server-resize (reference §1.2, §1.10; traces xcell_a, b, d, e, f):
 * conductor's CrossCellMigrationTask after `resize-prep` chose a host in another cell.
 *   xcell-target-db    TargetDBSetupTask: the hidden TGT copy of the instance in the dest cell.
 *   xcell-prep-dest    PrepResizeAtDestTask: dest port bindings (inactive), att_D per volume, claim.
 *   xcell-prep-source  PrepResizeAtSourceTask: power off, snapshot (image-backed), guest destroyed
 *                      with its disks kept, att_S2 placeholders, dest bindings activated.
 *   xcell-finish-dest  FinishResizeAtDestTask: att_D connected, guest spawned, the mapping flipped.
 * The operation lives on the SRC copy until the flip, which ends it. Each step recognises its own
 * finished work (a local restart re-runs the machine from Prep). The rollback is resize-rollback.ts.
 */
import { Conflict } from '../../../core/errors.js';
import { faultPoint } from '../../../core/faults.js';
import { intentId } from '../../../core/intents.js';
import { POWER_STATE } from '../../../drivers/compute/driver.js';
import { attachmentComplete, attachmentCreate, attachmentGet, attachmentUpdate, hostConnector } from '../../cinder.js';
import { driverOfHost, loadStep, recordHolds, updateOp, withEvent, type ServerStepInput } from '../../engine.js';
import { createImageRecord, deleteImage, getImage, imageSourceFor } from '../../images.js';
import { stampAfter } from '../../last-written.js';
import { migrationPutItem, migrationStatusItem, updateMigration } from '../../migrations.js';
import type { InstanceFlavor, Migration } from '../../model.js';
import { activatePortBinding, bindPortToHost, listPortsOf } from '../../network.js';
import { blockDeviceSpecs, isVolumeBacked, volumeBdms } from '../block-devices.js';
import { migrationOf, oldVmState, powerFor, terminateVolumeConnections } from '../resize/shared.js';
import { snapshotToImage } from '../../snapshot-upload.js';
import { cellOfHost, cloneToCell, flipInstanceMapping, loadPartition, updateCopy, withEventIn } from './copies.js';
import { crossCellRollback } from './resize-rollback.js';

const now = () => new Date().toISOString();

/** TargetDBSetupTask: the hidden copy in the dest cell, recorded in holds.targetCell before it is written. */
async function targetDb(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  const target = await cellOfHost(m.destCompute!);
  await faultPoint('nova', 'conductor', 'external_api_checks');
  if (s.op.holds.targetCell !== target.uuid) s = await recordHolds(s, (h) => ({ ...h, targetCell: target.uuid }));
  // cloneToCell puts only what is absent: a re-run completes a partial copy.
  await cloneToCell(s.cell, target, s.instance.uuid, (i) => ({ ...i, taskState: 'resize_prep' }));
  return {};
}

/** PrepResizeAtDestTask: dest bindings (inactive), att_D per volume (no connector), the dest claim check. */
async function prepDest(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  const dest = m.destCompute!;
  const target = await cellOfHost(dest);
  const uuid = s.instance.uuid;
  await withEventIn([target, s.cell], uuid, s.op.requestId, 'compute_prep_snapshot_based_resize_at_dest', dest, async () => {
    // The bindings' host and the att_D ids, recorded in one write before any of them is made.
    const missing = volumeBdms(s.bdms).filter((b) => !s.op.holds.destAttachments?.[b.uuid]);
    if (missing.length || s.op.holds.boundHost !== dest) {
      const made = Object.fromEntries(missing.map((b) => [b.uuid, intentId(s.op.requestId, 'xcell-prep-dest', b.uuid)]));
      s = await recordHolds(s, (h) => ({ ...h, boundHost: dest, destAttachments: { ...h.destAttachments, ...made } }));
    }
    for (const port of await listPortsOf(uuid)) await bindPortToHost(port.id, dest);
    const loaded = await loadPartition(target, uuid);
    // The TGT copy as read, then as each write left it: the base of the next write (version-checked).
    let tgt = loaded.instance ? { instance: loaded.instance, bdms: loaded.bdms } : undefined;
    for (const b of volumeBdms(s.bdms)) {
      const att = s.op.holds.destAttachments![b.uuid]!;
      if (loaded.bdms.find((t) => t.uuid === b.uuid)?.attachmentId === att) continue;
      // Same id on a re-run: Cinder hands back the attachment it made.
      await attachmentCreate(att, b.volumeId!, uuid);
      tgt = await updateCopy(
        target,
        uuid,
        ({ instance, bdms }) => ({
          instance,
          putBdms: bdms.filter((t) => t.uuid === b.uuid).map((t) => ({ ...t, attachmentId: att, connectionInfo: null, updatedAt: now() })),
        }),
        tgt,
      );
    }
    await faultPoint('compute', dest, 'resize_claim');
    await updateMigration(target, m.uuid, { destCompute: dest, destNode: m.destNode, destHost: m.destHost, crossCellMove: true });
    const oldVm = s.instance.systemMetadata.old_vm_state ?? s.instance.vmState;
    await updateCopy(
      target,
      uuid,
      ({ instance }) => ({
        instance: { ...instance, availabilityZone: s.instance.availabilityZone, systemMetadata: { ...instance.systemMetadata, old_vm_state: oldVm } },
      }),
      tgt,
    );
  });
  return {};
}

/** PrepResizeAtSourceTask: the source guest stopped, snapshotted (image-backed), destroyed with its disks kept. */
async function prepSource(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  if (m.status === 'post-migrating' || s.instance.taskState === 'resize_migrated') return {};
  const source = m.sourceCompute!;
  const dest = m.destCompute!;
  const uuid = s.instance.uuid;
  // The snapshot image's id (image-backed) is recorded in the same write as the task state, before
  // the image is made (the rollback deletes it; a delete of an image never made is a no-op).
  const snapshotId = !isVolumeBacked(s.instance) && !s.op.holds.imageId ? intentId(s.op.requestId, 'xcell-snapshot', uuid) : undefined;
  // The migration moves to `migrating` in the same transaction (one write, not two).
  const migrating: Migration = { ...m, status: 'migrating', updatedAt: stampAfter(m.updatedAt) };
  s = await updateOp(s, ({ instance, op }) => ({
    instance: {
      ...instance,
      taskState: 'resize_migrating',
      systemMetadata: { ...instance.systemMetadata, move_source: source, move_dest: dest },
      ...(snapshotId ? { operation: { ...op, holds: { ...op.holds, imageId: snapshotId } } } : {}),
    },
    extra: [migrationPutItem(s.cell, migrating, { expectedStatus: m.status })],
  }));
  await withEvent(s, 'compute_prep_snapshot_based_resize_at_source', source, async () => {
    const driver = await driverOfHost(source);
    const imageId = s.op.holds.imageId;
    if (imageId) {
      try {
        await createImageRecord({
          id: imageId,
          name: `${s.instance.name}-resize-temp`,
          ownerProjectId: s.instance.projectId,
          visibility: 'private',
          properties: { image_type: 'snapshot', instance_uuid: uuid, ...(s.instance.imageRef ? { base_image_ref: s.instance.imageRef } : {}) },
        });
      } catch (e) {
        if (!(e instanceof Conflict)) throw e; // a re-run: the record is ours already
      }
    }
    // A guest no longer defined was snapshotted and destroyed by an earlier run (destroy is last).
    if ((await driver.getGuest(uuid))?.defined) {
      await driver.powerOff(uuid);
      if (imageId) {
        await snapshotToImage(driver, uuid, imageId);
      }
      await driver.destroy(uuid, { keepDisks: true });
    }
    s = await terminateVolumeConnections(s, 'xcell-prep-source');
    for (const port of await listPortsOf(uuid)) await activatePortBinding(port.id, dest);
    // The migration's post-migrating and the task state in one transaction: a re-run sees both or neither.
    s = await updateOp(s, ({ instance }) => ({
      instance: { ...instance, taskState: 'resize_migrated', powerState: POWER_STATE.SHUTDOWN },
      extra: [migrationPutItem(s.cell, { ...migrating, status: 'post-migrating', updatedAt: stampAfter(migrating.updatedAt) }, { expectedStatus: 'migrating' })],
    }));
  });
  return {};
}

/** FinishResizeAtDestTask: att_D connected, the guest spawned on dest, the mapping flipped to TGT (ends the op). */
async function finishDest(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  const dest = m.destCompute!;
  const target = await cellOfHost(dest);
  const uuid = s.instance.uuid;
  const newFlavor = s.op.params.newFlavor as InstanceFlavor;
  const vm = oldVmState(s.instance);
  await withEventIn([target], uuid, s.op.requestId, 'compute_finish_snapshot_based_resize_at_dest', dest, async () => {
    let tgt = await updateCopy(target, uuid, ({ instance }) => ({ instance: { ...instance, taskState: 'resize_finish', flavor: newFlavor } }));
    const vols = volumeBdms(tgt.bdms).filter((b) => b.attachmentId);
    const destDriver = await driverOfHost(dest);
    // A guest already defined on dest: an earlier run connected and spawned; only the completes may be missing.
    if (!(await destDriver.getGuest(uuid))?.defined) {
      for (const b of vols) await attachmentUpdate(b.attachmentId!, hostConnector(dest, b.deviceName), b.deviceName);
      const info: Record<string, Record<string, unknown> | null> = {};
      for (const b of vols) info[b.uuid] = (await attachmentGet(b.attachmentId!))?.connectionInfo ?? null;
      tgt = await updateCopy(
        target,
        uuid,
        ({ instance, bdms }) => ({
          instance,
          putBdms: bdms.filter((b) => b.uuid in info).map((b) => ({ ...b, connectionInfo: info[b.uuid]!, updatedAt: now() })),
        }),
        tgt,
      );
      if (s.op.holds.destGuest !== dest) s = await recordHolds(s, (h) => ({ ...h, destGuest: dest }));
      const imageId = s.op.holds.imageId;
      await destDriver.spawn({
        uuid,
        flavor: newFlavor,
        ...(imageId ? { image: imageSourceFor(await getImage(imageId)) } : {}),
        ...(s.instance.imageRef ? { imageRef: s.instance.imageRef } : {}),
        blockDevices: blockDeviceSpecs(tgt.bdms),
        powerOn: vm === 'active',
      });
    }
    for (const b of vols) await attachmentComplete(b.attachmentId!);
    for (const port of await listPortsOf(uuid)) await activatePortBinding(port.id, dest);
  });
  if (s.op.holds.imageId) await deleteImage(s.op.holds.imageId);
  await flipInstanceMapping({
    uuid,
    show: {
      cell: target,
      change: (i) => ({ ...i, vmState: 'resized', taskState: null, host: dest, node: m.destNode, powerState: powerFor(vm), flavor: newFlavor, progress: 100 }),
    },
    // The hidden SRC copy ends the operation in the same transaction.
    hide: { cell: s.cell, change: (i) => ({ ...i, operation: null }) },
    // The TGT copy's migration is finished by the flip itself (one write fewer, and never finished
    // without the flip): a re-run after the flip finds it 'already' done.
    extra: [migrationStatusItem(target, m.uuid, 'finished')],
  });
  return {};
}

export const CROSS_CELL_RESIZE_STEPS = {
  'xcell-target-db': targetDb,
  'xcell-prep-dest': prepDest,
  'xcell-prep-source': prepSource,
  'xcell-finish-dest': finishDest,
  'xcell-rollback': crossCellRollback,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;
