/**
 * Cold migration and same-cell resize with confirm and revert (reference §1.0 API checks, §2.1
 * rows "Cold migrate / same-cell resize", "Confirm (same cell)", "Revert (same cell)"; traces
 * vol_test_06, 07, 14): the API actions `resize`, `migrate`, `confirmResize`, `revertResize` and
 * the steps of server-resize, server-confirm-resize and server-revert-resize.
 *
 * Resize (one migration record, type 'resize' when the flavor changes else 'migration'):
 *   prep (conductor + prep_resize): the source allocation moves instance -> migration, the
 *     destination is scheduled in the same cell (the source ignored) and claimed for the instance
 *     with the new flavor; migration dest recorded.
 *   resize_instance (source): migrate_disk_and_power_off, `_terminate_volume_connections`
 *     (attachment_create empty, attachment_delete old, BDM = new), dest port binding made and
 *     activated, migration post-migrating, instance.host = dest.
 *   finish_resize (dest): attachment_update(new, dest connector) per BDM, attachment_get per BDM
 *     (connection_info saved), finish_migration, attachment_complete per BDM; migration finished;
 *     vm resized (VERIFY_RESIZE).
 * Confirm (source): source port binding deleted, confirm_migration (kept disks removed), the
 *   migration's allocation released; no Cinder calls.
 * Revert: dest destroy, `_terminate_volume_connections` on dest, dest claim dropped, migration
 *   reverted; then source: host and flavor back, allocations migration -> instance, source binding
 *   activated and dest binding deleted, attachment_update(placeholder, source connector),
 *   attachment_get, finish_revert_migration, attachment_complete.
 *
 * Failures roll back to something usable instead of upstream's ERROR (docs/compat-resize.md).
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type ApiResponse } from '../../core/api.js';
import { BadRequest } from '../../core/errors.js';
import { logger } from '../../core/logger.js';
import { registerPolicies } from '../../core/policy.js';
import { getFlavor } from '../../compute/repo.js';
import { POWER_STATE } from '../../drivers/compute/driver.js';
import { registerServerActions } from '../actions.js';
import { attachmentComplete, attachmentCreate, attachmentDelete, attachmentGet, attachmentUpdate } from '../cinder.js';
import {
  assertState,
  beginOperation,
  computeNodes,
  driverOfHost,
  endOperation,
  faultOf,
  hostRef,
  loadStep,
  nodeOfHost,
  reasonOf,
  updateOp,
  withEvent,
  type ServerStepInput,
  type StepState,
} from '../engine.js';
import { hostConnector, instanceFlavorOf, newMigration, type BlockDeviceMapping, type Instance, type InstanceFlavor, type Migration, type VmState } from '../model.js';
import { activatePortBinding, bindPortToHost, deletePortBinding, listPortsOf } from '../network.js';
import {
  allocationsOf,
  getMigration,
  listMigrations,
  migrationPutItem,
  moveAllocations,
  nextMigrationId,
  releaseAll,
  releaseOn,
  setRequestSpecFlavor,
  updateMigration,
  type LoadedServer,
} from '../repo.js';
import { scheduleAndClaim } from '../scheduler.js';
import { blockDeviceSpecs, isVolumeBacked } from './lifecycle.js';
import { invalid, isObject, type Json } from '../../compute/validation.js';

const now = () => new Date().toISOString();

export const RESIZE_POLICIES = {
  resize: 'os_compute_api:servers:resize',
  confirmResize: 'os_compute_api:servers:confirm_resize',
  revertResize: 'os_compute_api:servers:revert_resize',
  migrate: 'os_compute_api:os-migrate-server:migrate',
} as const;

registerPolicies({
  [RESIZE_POLICIES.resize]: 'admin_or_owner',
  [RESIZE_POLICIES.confirmResize]: 'admin_or_owner',
  [RESIZE_POLICIES.revertResize]: 'admin_or_owner',
  [RESIZE_POLICIES.migrate]: 'admin_api',
});



function onlyKeys(field: string, value: Json, allowed: string[]): void {
  const extra = Object.keys(value).filter((k) => !allowed.includes(k));
  if (extra.length) throw invalid(field, value, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length === 1 ? 'was' : 'were'} unexpected)`);
}

/** Nova's system_metadata keys a move sets while it lasts (delete reads move_source/move_dest). */
const MOVE_KEYS = ['old_vm_state', 'move_source', 'move_dest'] as const;
function withoutKeys(meta: Record<string, string>, keys: readonly string[]): Record<string, string> {
  return Object.fromEntries(Object.entries(meta).filter(([k]) => !keys.includes(k)));
}

const oldVmState = (i: Instance): VmState => (i.systemMetadata.old_vm_state === 'stopped' ? 'stopped' : 'active');
const powerFor = (vm: VmState) => (vm === 'stopped' ? POWER_STATE.SHUTDOWN : POWER_STATE.RUNNING);
const volumeBdms = (bdms: readonly BlockDeviceMapping[]) => bdms.filter((b) => b.destinationType === 'volume' && b.volumeId);

// ---------------------------------------------------------------------------------------------
// API

const RESIZE_VM_STATES: readonly VmState[] = ['active', 'stopped'];

/** API.resize for both actions: the migration record, task resize_prep, the action, the machine. */
async function startMove(req: ApiRequest, server: LoadedServer, action: 'resize' | 'migrate', newFlavor: InstanceFlavor, host?: string): Promise<void> {
  const { cell, instance: seen } = server;
  const id = await nextMigrationId(cell);
  const at = now();
  const migration = newMigration({
    id,
    uuid: randomUUID(),
    instance: seen,
    migrationType: newFlavor.flavorid === seen.flavor.flavorid ? 'migration' : 'resize',
    status: 'pre-migrating',
    newInstanceTypeId: newFlavor.id,
    at,
  });
  await beginOperation({
    server,
    auth: req.auth,
    kind: 'resize',
    action,
    vmStates: RESIZE_VM_STATES,
    taskState: 'resize_prep',
    machine: 'server-resize',
    requestId: req.requestId,
    migrationUuid: migration.uuid,
    params: { newFlavor, ...(host ? { host } : {}) },
    change: (instance) => ({
      instance: {
        ...instance,
        progress: 0,
        oldFlavor: instance.flavor,
        newFlavor,
        systemMetadata: { ...instance.systemMetadata, old_vm_state: instance.vmState, image_base_image_ref: instance.imageRef },
      },
      extra: [migrationPutItem(cell, { ...migration, sourceCompute: instance.host, sourceNode: instance.node }, { create: true })],
    }),
    abort: async () => {
      await updateMigration(cell, migration.uuid, { status: 'error' });
    },
  });
}

async function resizeAction(req: ApiRequest, server: LoadedServer, args: unknown): Promise<ApiResponse> {
  if (!isObject(args)) throw invalid('resize', args, `${JSON.stringify(args)} is not of type 'object'`);
  onlyKeys('resize', args, ['flavorRef', 'OS-DCF:diskConfig']);
  const ref = args.flavorRef;
  if (ref === undefined) throw invalid('resize', args, "'flavorRef' is a required property");
  if ((typeof ref !== 'string' && typeof ref !== 'number') || String(ref).length < 1) throw invalid('flavorRef', ref, `${JSON.stringify(ref)} is not valid under any of the given schemas`);
  const diskConfig = args['OS-DCF:diskConfig'];
  if (diskConfig !== undefined && diskConfig !== 'AUTO' && diskConfig !== 'MANUAL') throw invalid('OS-DCF:diskConfig', diskConfig, "is not one of ['AUTO', 'MANUAL']");
  const { instance } = server;
  // check_instance_state runs before the flavor checks (decorator order of API.resize).
  assertState(instance, 'resize', RESIZE_VM_STATES);
  // A flavor id is at most 255 characters (Nova's column); a longer one names no flavor (and is no valid DynamoDB key).
  const flavor = String(ref).length > 255 ? undefined : await getFlavor(String(ref));
  if (!flavor || flavor.disabled) throw new BadRequest('Unable to locate requested flavor.');
  if (flavor.flavorid === instance.flavor.flavorid) throw new BadRequest('Resize requires a flavor change.');
  if (!isVolumeBacked(instance) && flavor.rootGb < instance.flavor.rootGb) throw new BadRequest('Unable to resize disk down.');
  await startMove(req, server, 'resize', instanceFlavorOf(flavor));
  return json(202);
}

async function migrateAction(req: ApiRequest, server: LoadedServer, args: unknown): Promise<ApiResponse> {
  let host: string | undefined;
  // Before 2.56 the body is not validated and a host is ignored.
  if (req.version.atLeast('2.56') && args !== null) {
    if (!isObject(args)) throw invalid('migrate', args, `${JSON.stringify(args)} is not of type 'object', 'null'`);
    onlyKeys('migrate', args, ['host']);
    if (args.host !== undefined && args.host !== null && typeof args.host !== 'string') throw invalid('host', args.host, `${JSON.stringify(args.host)} is not of type 'string', 'null'`);
    host = typeof args.host === 'string' ? args.host : undefined;
  }
  const { instance } = server;
  assertState(instance, 'migrate', RESIZE_VM_STATES);
  if (host !== undefined) {
    if (host === instance.host) throw new BadRequest('Cannot migrate to the host where the server exists.');
    const node = (await computeNodes()).find((n) => n.node.host === host && n.cell.uuid === server.cell.uuid);
    if (!node) throw new BadRequest(`Compute host ${host} could not be found.`);
  }
  await startMove(req, server, 'migrate', instance.flavor, host);
  return json(202);
}

/** The instance's migration in status 'finished' (Migration.get_by_instance_and_status). */
async function finishedMigration(server: LoadedServer): Promise<Migration> {
  const found = (await listMigrations()).find((m) => m.cell.uuid === server.cell.uuid && m.migration.instanceUuid === server.instance.uuid && m.migration.status === 'finished');
  if (!found) throw new BadRequest('Instance has not been resized.');
  return found.migration;
}

function resolveAction(kind: 'confirm_resize' | 'revert_resize') {
  const confirm = kind === 'confirm_resize';
  const action = confirm ? 'confirmResize' : 'revertResize';
  return async (req: ApiRequest, server: LoadedServer, args: unknown): Promise<ApiResponse> => {
    if (args !== null) throw invalid(action, args, `${JSON.stringify(args)} is not of type 'null'`);
    assertState(server.instance, action, ['resized']);
    const m = await finishedMigration(server);
    await beginOperation({
      server,
      auth: req.auth,
      kind,
      action,
      vmStates: ['resized'],
      // The API leaves confirm's task_state alone (status stays VERIFY_RESIZE); revert shows REVERT_RESIZE.
      ...(confirm ? {} : { taskState: 'resize_reverting' as const }),
      machine: confirm ? 'server-confirm-resize' : 'server-revert-resize',
      requestId: req.requestId,
      migrationUuid: m.uuid,
      change: (instance) => ({
        instance,
        extra: [migrationPutItem(server.cell, { ...m, status: confirm ? 'confirming' : 'reverting', updatedAt: now() }, { expectedStatus: 'finished' })],
      }),
      abort: async () => {
        await updateMigration(server.cell, m.uuid, { status: 'finished' });
      },
    });
    return json(confirm ? 204 : 202);
  };
}

registerServerActions({
  resize: { policy: RESIZE_POLICIES.resize, handler: resizeAction },
  migrate: { policy: RESIZE_POLICIES.migrate, handler: migrateAction },
  confirmResize: { policy: RESIZE_POLICIES.confirmResize, handler: resolveAction('confirm_resize') },
  revertResize: { policy: RESIZE_POLICIES.revertResize, handler: resolveAction('revert_resize') },
});

// ---------------------------------------------------------------------------------------------
// Shared compute parts

async function migrationOf(s: StepState): Promise<Migration> {
  const m = s.op.migrationUuid ? await getMigration(s.cell, s.op.migrationUuid) : undefined;
  if (!m) throw new Error(`operation ${s.op.requestId} of ${s.instance.uuid} has no migration`);
  return m;
}

/**
 * `_terminate_volume_connections`: per volume BDM an empty attachment is created (recorded with
 * the BDM's old attachment in the holds and on the BDM in one write), then the old one deleted.
 * A BDM already on its recorded placeholder is done (only the old delete is repeated, 404 ignored).
 */
async function terminateVolumeConnections(s: StepState): Promise<StepState> {
  let state = s;
  for (const { uuid: bdmUuid } of volumeBdms(state.bdms)) {
    const current = state.bdms.find((b) => b.uuid === bdmUuid)!;
    const placeholder = state.op.holds.newAttachments?.[bdmUuid];
    if (placeholder && current.attachmentId === placeholder) {
      const old = state.op.holds.oldAttachments?.[bdmUuid];
      if (old) await attachmentDelete(old);
      continue;
    }
    const created = await attachmentCreate(current.volumeId!, state.instance.uuid);
    state = await updateOp(state, ({ instance, op, bdms }) => ({
      instance: {
        ...instance,
        operation: {
          ...op,
          holds: {
            ...op.holds,
            newAttachments: { ...op.holds.newAttachments, [bdmUuid]: created.id },
            ...(current.attachmentId ? { oldAttachments: { ...op.holds.oldAttachments, [bdmUuid]: current.attachmentId } } : {}),
            oldConnectionInfo: { ...op.holds.oldConnectionInfo, [bdmUuid]: current.connectionInfo },
          },
        },
      },
      putBdms: bdms.filter((b) => b.uuid === bdmUuid).map((b) => ({ ...b, attachmentId: created.id, connectionInfo: null, updatedAt: now() })),
    }));
    if (current.attachmentId) await attachmentDelete(current.attachmentId);
  }
  return state;
}

/**
 * `_update_volume_attachments` + the refresh of `_get_instance_block_device_info`: every volume
 * BDM's attachment updated with the host's connector, then read back and its connection_info saved.
 */
async function connectAttachments(s: StepState, host: string): Promise<StepState> {
  const bdms = volumeBdms(s.bdms).filter((b) => b.attachmentId);
  for (const b of bdms) await attachmentUpdate(b.attachmentId!, hostConnector(host, b.deviceName), b.deviceName);
  const info: Record<string, Record<string, unknown> | null> = {};
  for (const b of bdms) info[b.uuid] = (await attachmentGet(b.attachmentId!))?.connectionInfo ?? null;
  return updateOp(s, ({ bdms: current }) => ({
    putBdms: current.filter((b) => b.uuid in info).map((b) => ({ ...b, connectionInfo: info[b.uuid]!, updatedAt: now() })),
  }));
}

async function completeAttachments(s: StepState): Promise<void> {
  for (const b of volumeBdms(s.bdms)) if (b.attachmentId) await attachmentComplete(b.attachmentId);
}

/** The port bindings back on the source: its binding active, the destination's removed. */
async function bindingsBackTo(instanceUuid: string, source: string, dest: string | null): Promise<void> {
  for (const port of await listPortsOf(instanceUuid)) {
    await bindPortToHost(port.id, source, { active: true });
    await activatePortBinding(port.id, source);
    if (dest && dest !== source) await deletePortBinding(port.id, dest);
  }
}

/** Allocations back as before the move: the instance holds on the source only. */
async function allocationsBackTo(instanceUuid: string, migrationUuid: string, sourceNodeUuid: string): Promise<void> {
  for (const a of await allocationsOf(instanceUuid)) if (a.nodeUuid !== sourceNodeUuid) await releaseOn(a.nodeUuid, instanceUuid);
  await moveAllocations(migrationUuid, instanceUuid);
}

// ---------------------------------------------------------------------------------------------
// server-resize

/** Conductor's MigrationTask + prep_resize on the destination. */
async function resizePrep(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const m = await migrationOf(s);
  if (m.destCompute) return { dest: m.destCompute };
  const source = m.sourceCompute!;
  const sourceNode = (await nodeOfHost(source)).node;
  const newFlavor = s.op.params.newFlavor as InstanceFlavor;
  const dest = await withEvent(s, 'conductor_migrate_server', null, async () => {
    // replace_allocation_with_migration: from here the source is held by the migration.
    if ((await allocationsOf(m.uuid)).length === 0) await moveAllocations(s.instance.uuid, m.uuid);
    // A claim made by an earlier attempt of this step is the destination (never claim twice).
    const held = (await allocationsOf(s.instance.uuid)).find((a) => a.nodeUuid !== sourceNode.uuid);
    if (held) return (await computeNodes()).find((n) => n.node.uuid === held.nodeUuid)!;
    return scheduleAndClaim({
      flavor: newFlavor,
      consumer: s.instance.uuid,
      volumeBacked: isVolumeBacked(s.instance),
      ignoreHosts: [source],
      ...(s.op.params.host ? { host: s.op.params.host as string } : {}),
      cellUuid: s.cell.uuid,
      availabilityZone: s.instance.availabilityZone,
    });
  });
  await withEvent(s, 'compute_prep_resize', dest.node.host, async () => {
    await updateMigration(s.cell, m.uuid, { destCompute: dest.node.host, destNode: dest.node.hypervisorHostname, destHost: dest.node.host });
  });
  return { dest: dest.node.host };
}

/** resize_instance on the source. */
async function resizeInstance(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  const dest = m.destCompute!;
  if (s.instance.host === dest) return {};
  const newFlavor = s.op.params.newFlavor as InstanceFlavor;
  await updateMigration(s.cell, m.uuid, { status: 'migrating' });
  s = await updateOp(s, ({ instance, op }) => ({
    instance: {
      ...instance,
      taskState: 'resize_migrating',
      systemMetadata: { ...instance.systemMetadata, move_source: source, move_dest: dest },
      // The disk copy lands on the destination: recorded before it is made.
      operation: { ...op, holds: { ...op.holds, destGuest: dest } },
    },
  }));
  await withEvent(s, 'compute_resize_instance', source, async () => {
    await (await driverOfHost(source)).migrateDiskAndPowerOff(s.instance.uuid, await hostRef(dest), newFlavor);
    s = await terminateVolumeConnections(s);
    s = await updateOp(s, ({ instance, op }) => ({ instance: { ...instance, operation: { ...op, holds: { ...op.holds, boundHost: dest } } } }));
    // migrate_instance_start: the destination binding is made (inactive) and activated.
    for (const port of await listPortsOf(s.instance.uuid)) {
      await bindPortToHost(port.id, dest);
      await activatePortBinding(port.id, dest);
    }
    await updateMigration(s.cell, m.uuid, { status: 'post-migrating' });
    s = await updateOp(s, ({ instance }) => ({ instance: { ...instance, host: dest, node: m.destNode, taskState: 'resize_migrated', powerState: POWER_STATE.SHUTDOWN } }));
  });
  return {};
}

/** finish_resize on the destination. */
async function resizeFinish(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  const dest = m.destCompute!;
  const newFlavor = s.op.params.newFlavor as InstanceFlavor;
  const vm = oldVmState(s.instance);
  s = await updateOp(s, ({ instance }) => ({ instance: { ...instance, taskState: 'resize_finish' } }));
  await withEvent(s, 'compute_finish_resize', dest, async () => {
    s = await connectAttachments(s, dest);
    await (await driverOfHost(dest)).finishMigration(
      { uuid: s.instance.uuid, flavor: newFlavor, blockDevices: blockDeviceSpecs(s.bdms), powerOn: vm === 'active' },
      await hostRef(source),
    );
    await completeAttachments(s);
  });
  await updateMigration(s.cell, m.uuid, { status: 'finished' });
  await endOperation(s, ({ instance }) => ({
    instance: { ...instance, vmState: 'resized', taskState: null, flavor: newFlavor, powerState: powerFor(vm), progress: 100 },
  }));
  return {};
}

/**
 * Any failure of the move: back to the source as it was. What the failing step got to decides
 * what is undone: a destination copy or guest is destroyed; if the disks already left the guest
 * (kept disks on the source), each moved volume gets a placeholder attachment connected to the
 * source and completed and the guest is defined again on its kept disks (finish_revert_migration);
 * bindings and allocations go back; migration 'error', the old vm_state, a fault.
 */
async function resizeRollback(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const reason = reasonOf(input.error);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  const dest = m.destCompute;
  const sourceNode = (await nodeOfHost(source)).node;
  const vm = oldVmState(s.instance);
  const sourceDriver = await driverOfHost(source);

  if (dest && (s.op.holds.destGuest || s.instance.host === dest)) await (await driverOfHost(dest)).destroy(s.instance.uuid);

  const onSource = await sourceDriver.getGuest(s.instance.uuid);
  if (onSource && !onSource.defined) {
    // The disks left the guest: volumes that moved get a fresh placeholder for the source.
    const rollbackAttachments = { ...((s.op.params.rollbackAttachments as Record<string, string> | undefined) ?? {}) };
    for (const { uuid: bdmUuid } of volumeBdms(s.bdms)) {
      const current = s.bdms.find((b) => b.uuid === bdmUuid)!;
      if (!s.op.holds.oldAttachments?.[bdmUuid] || rollbackAttachments[bdmUuid] === current.attachmentId) continue;
      // The destination's attachment goes first: Cinder refuses a second attachment of a volume still attaching.
      if (current.attachmentId) await attachmentDelete(current.attachmentId);
      const created = await attachmentCreate(current.volumeId!, s.instance.uuid);
      rollbackAttachments[bdmUuid] = created.id;
      s = await updateOp(s, ({ instance, op, bdms }) => ({
        instance: { ...instance, operation: { ...op, params: { ...op.params, rollbackAttachments } } },
        putBdms: bdms.filter((b) => b.uuid === bdmUuid).map((b) => ({ ...b, attachmentId: created.id, connectionInfo: null, updatedAt: now() })),
      }));
    }
    const moved = new Set(Object.keys(rollbackAttachments));
    const toConnect = { ...s, bdms: s.bdms.filter((b) => moved.has(b.uuid)) };
    s = { ...(await connectAttachments(toConnect, source)) };
    await sourceDriver.finishRevertMigration(s.instance.uuid, { blockDevices: blockDeviceSpecs(s.bdms), powerOn: vm === 'active' });
    await completeAttachments({ ...s, bdms: s.bdms.filter((b) => moved.has(b.uuid)) });
  } else if (onSource?.defined && vm === 'active') {
    // The failure came before the disks moved; the guest may have been powered off already.
    await sourceDriver.powerOn(s.instance.uuid);
  }

  if (s.op.holds.boundHost) await bindingsBackTo(s.instance.uuid, source, s.op.holds.boundHost);
  await allocationsBackTo(s.instance.uuid, m.uuid, sourceNode.uuid);
  await updateMigration(s.cell, m.uuid, { status: 'error' });
  await endOperation(s, ({ instance }) => ({
    instance: {
      ...instance,
      host: source,
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
  return { vmState: vm };
}

// ---------------------------------------------------------------------------------------------
// server-confirm-resize

/** confirm_resize on the source: network teardown, confirm_migration, drop_move_claim_at_source. */
async function resizeConfirm(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  await withEvent(s, 'compute_confirm_resize', source, async () => {
    for (const port of await listPortsOf(s.instance.uuid)) if (source !== s.instance.host) await deletePortBinding(port.id, source);
    await (await driverOfHost(source)).confirmMigration(s.instance.uuid);
  });
  await releaseAll(m.uuid);
  await updateMigration(s.cell, m.uuid, { status: 'confirmed' });
  await setRequestSpecFlavor(s.instance.uuid, s.instance.flavor);
  const vm = oldVmState(s.instance);
  await endOperation(s, ({ instance }) => ({
    instance: { ...instance, vmState: vm, taskState: null, oldFlavor: null, newFlavor: null, systemMetadata: withoutKeys(instance.systemMetadata, MOVE_KEYS) },
  }));
  return {};
}

/**
 * Confirm failed on the source (upstream: instance ERROR). The guest runs on the destination, so it
 * stays usable there: the migration's allocation is released anyway (upstream's finally), migration
 * 'error', a fault; `move_source` stays in system_metadata so the kept disks the source may still
 * have are visible to the audit and removed by a later delete.
 */
async function resizeConfirmRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const reason = reasonOf(input.error);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  await releaseAll(m.uuid);
  for (const port of await listPortsOf(s.instance.uuid)) if (source !== s.instance.host) await deletePortBinding(port.id, source);
  await updateMigration(s.cell, m.uuid, { status: 'error' });
  const onDest = s.instance.host ? await (await driverOfHost(s.instance.host)).getGuest(s.instance.uuid) : undefined;
  const vm: VmState = onDest?.defined ? oldVmState(s.instance) : 'error';
  if (vm === 'error') logger.error('confirm failed and the guest is not on its host', { serverId: s.instance.uuid });
  await endOperation(s, ({ instance }) => ({
    instance: {
      ...instance,
      vmState: vm,
      taskState: null,
      oldFlavor: null,
      newFlavor: null,
      systemMetadata: withoutKeys(instance.systemMetadata, ['old_vm_state', 'move_dest']),
      fault: faultOf(reason),
    },
  }));
  return { vmState: vm };
}

// ---------------------------------------------------------------------------------------------
// server-revert-resize

/** revert_resize on the destination. */
async function revertAtDest(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  if (m.status === 'reverted') return {};
  const dest = m.destCompute!;
  await withEvent(s, 'compute_revert_resize', dest, async () => {
    await (await driverOfHost(dest)).destroy(s.instance.uuid);
    s = await terminateVolumeConnections(s);
    // drop_move_claim_at_dest
    await releaseOn((await nodeOfHost(dest)).node.uuid, s.instance.uuid);
    await updateMigration(s.cell, m.uuid, { status: 'reverted' });
  });
  return {};
}

/** finish_revert_resize on the source. */
async function finishRevert(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const m = await migrationOf(s);
  const source = m.sourceCompute!;
  const dest = m.destCompute!;
  const sourceNode = (await nodeOfHost(source)).node;
  const vm = oldVmState(s.instance);
  await withEvent(s, 'compute_finish_revert_resize', source, async () => {
    s = await updateOp(s, ({ instance }) => ({
      instance: { ...instance, host: source, node: sourceNode.hypervisorHostname, flavor: instance.oldFlavor ?? instance.flavor },
    }));
    await allocationsBackTo(s.instance.uuid, m.uuid, sourceNode.uuid);
    await bindingsBackTo(s.instance.uuid, source, dest);
    s = await connectAttachments(s, source);
    await (await driverOfHost(source)).finishRevertMigration(s.instance.uuid, { blockDevices: blockDeviceSpecs(s.bdms), powerOn: vm === 'active' });
    await completeAttachments(s);
  });
  await endOperation(s, ({ instance }) => ({
    instance: {
      ...instance,
      vmState: vm,
      taskState: null,
      powerState: powerFor(vm),
      oldFlavor: null,
      newFlavor: null,
      systemMetadata: withoutKeys(instance.systemMetadata, MOVE_KEYS),
    },
  }));
  return {};
}

/**
 * Revert failed (upstream: ERROR). Before the destination was torn down (its guest still defined,
 * the migration not reverted) nothing changed: back to VERIFY_RESIZE with migration 'finished',
 * so revert or confirm can be asked again. Past that point the guest exists only as kept disks on
 * the source: ERROR with a fault (upstream), migration 'error'.
 */
async function revertRollback(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const reason = reasonOf(input.error);
  const m = await migrationOf(s);
  const dest = m.destCompute!;
  const onDest = await (await driverOfHost(dest)).getGuest(s.instance.uuid).catch(() => undefined);
  const untouched = m.status !== 'reverted' && s.instance.host === dest && onDest?.defined === true && !s.op.holds.newAttachments;
  if (untouched) {
    await updateMigration(s.cell, m.uuid, { status: 'finished' });
    await endOperation(s, ({ instance }) => ({ instance: { ...instance, taskState: null, fault: faultOf(reason) } }));
    return { vmState: 'resized' };
  }
  await updateMigration(s.cell, m.uuid, { status: 'error' });
  await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'error', taskState: null, fault: faultOf(reason) } }));
  return { vmState: 'error' };
}

export const RESIZE_STEPS = {
  'resize-prep': resizePrep,
  'resize-instance': resizeInstance,
  'resize-finish': resizeFinish,
  'resize-rollback': resizeRollback,
  'resize-confirm': resizeConfirm,
  'resize-confirm-rollback': resizeConfirmRollback,
  'resize-revert-dest': revertAtDest,
  'resize-finish-revert': finishRevert,
  'resize-revert-rollback': revertRollback,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;
