/**
 * Evacuate (reference §2.1 row Evacuate, §3.2 evacuate; trace vol_test_08): rebuild a server whose
 * host is down on another host of its cell, and the source's clean-up once it comes back.
 *
 * API (`compute/api.py:evacuate`): the source compute must be down (forced_down or not reporting),
 * a requested host must exist and differ from the server's; task_state `rebuilding`, a migration
 * (type `evacuation`, status `accepted`), action `evacuate`.
 *
 * Machine server-evacuate (conductor rebuild_instance + dest compute rebuild_instance(recreate)):
 *   schedule (claim for the instance on another host of the cell; migration `pre-migrating`) ->
 *   network (dest port binding, activated) -> block-devices (`detach_block_devices`: per volume BDM
 *   attachment_create empty, BDM = new, attachment_delete(old) with no driver detach since the source
 *   is down; then `_prep_block_device`: attachment_update(dest connector) + attachment_complete) ->
 *   spawn (driver.spawnEvacuated, task `rebuild_spawning`) -> finish (host = dest, source binding and
 *   source allocation dropped, migration `done` in the same write as the instance).
 * Failures: before a destination was claimed, vm_state kept and migration `failed`; after, the dest
 *   guest, binding and allocation are removed, every switched volume is left with one empty
 *   (reserved, no connector) attachment recorded on its BDM, the instance ERROR, migration `failed`.
 *
 * `cleanupEvacuatedGuests(host)` is Nova's `_destroy_evacuated_instances` on compute restart.
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type ApiResponse } from '../../core/api.js';
import { BadRequest } from '../../core/errors.js';
import { logger } from '../../core/logger.js';
import { registerPolicies } from '../../core/policy.js';
import { COMPUTE_BINARY, serviceIsUp } from '../../compute/model.js';
import { findServiceByHostBinary } from '../../compute/repo.js';
import { POWER_STATE } from '../../drivers/compute/driver.js';
import { registerServerActions } from '../actions.js';
import { attachmentCreate, attachmentDelete, attachmentGet } from '../cinder.js';
import { beginOperation, driverOfHost, endOperation, faultOf, hostRef, loadStep, nodeOfHost, reasonOf, updateOp, type ServerStepInput, type StepState } from '../engine.js';
import { getImage, imageSourceFor } from '../images.js';
import { newMigration, type BlockDeviceMapping, type VmState } from '../model.js';
import { activatePortBinding, bindPortToHost, deletePortBinding, listPortsOf } from '../network.js';
import { findServer, finishEvent, getMigration, listMigrations, migrationPutItem, nextMigrationId, releaseOn, startEvent, updateMigration, type LoadedServer } from '../repo.js';
import { scheduleAndClaim } from '../scheduler.js';
import { blockDeviceSpecs, connectVolumes, isVolumeBacked } from './lifecycle.js';
import { invalid, isObject } from '../../compute/validation.js';

const now = () => new Date().toISOString();

export const EVACUATE_POLICY = 'os_compute_api:os-evacuate';
registerPolicies({ [EVACUATE_POLICY]: 'admin_api' });

/** check_instance_state of evacuate (the states Ferry's rebuild handles). */
export const EVACUATE_VM_STATES: readonly VmState[] = ['active', 'stopped', 'error'];

const REBUILD_EVENT = 'compute_rebuild_instance';


interface EvacuateBody {
  host?: string;
  adminPass?: string;
}

/** The evacuate body per microversion (§3.2): onSharedStorage <2.14, force 2.29–2.67. */
function parseEvacuate(req: ApiRequest, raw: unknown): EvacuateBody {
  if (!isObject(raw)) throw invalid('evacuate', raw, `${JSON.stringify(raw ?? null)} is not of type 'object'`);
  const allowedKeys = ['host', 'adminPass'];
  if (!req.version.atLeast('2.14')) allowedKeys.push('onSharedStorage');
  if (req.version.atLeast('2.29') && !req.version.atLeast('2.68')) allowedKeys.push('force');
  const extra = Object.keys(raw).filter((k) => !allowedKeys.includes(k));
  if (extra.length) throw invalid('evacuate', raw, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length > 1 ? 'were' : 'was'} unexpected)`);
  if (!req.version.atLeast('2.14')) {
    if (raw.onSharedStorage === undefined) throw invalid('evacuate', raw, "'onSharedStorage' is a required property");
    if (typeof raw.onSharedStorage !== 'boolean' && !['true', 'false', 'True', 'False'].includes(String(raw.onSharedStorage))) throw invalid('onSharedStorage', raw.onSharedStorage, 'not a boolean');
  }
  if (raw.force !== undefined && typeof raw.force !== 'boolean') throw invalid('force', raw.force, `${JSON.stringify(raw.force)} is not of type 'boolean'`);
  if (raw.host !== undefined && (typeof raw.host !== 'string' || raw.host.length < 1 || raw.host.length > 255)) throw invalid('host', raw.host, 'not a valid hostname');
  if (raw.adminPass !== undefined && typeof raw.adminPass !== 'string') throw invalid('adminPass', raw.adminPass, `${JSON.stringify(raw.adminPass)} is not of type 'string'`);
  return { ...(raw.host !== undefined ? { host: raw.host as string } : {}), ...(raw.adminPass !== undefined ? { adminPass: raw.adminPass as string } : {}) };
}

/** The source compute is down when forced down or when its host does not report (servicegroup is_up). */
async function sourceIsDown(host: string): Promise<boolean> {
  const svc = (await findServiceByHostBinary(host, COMPUTE_BINARY))?.value;
  const info = await (await driverOfHost(host)).getHostInfo();
  return !svc || !serviceIsUp(svc, info.up);
}

async function evacuateAction(req: ApiRequest, server: LoadedServer, raw: unknown): Promise<ApiResponse> {
  const body = parseEvacuate(req, raw);
  const { instance } = server;
  if (body.host) {
    await nodeOfHost(body.host); // 404 Compute host <h> could not be found.
    if (body.host === instance.host) throw new BadRequest("The target host can't be the same one.");
  }
  if (!instance.host) throw new BadRequest(`Instance ${instance.uuid} has no host to evacuate from.`);
  if (!(await sourceIsDown(instance.host))) throw new BadRequest(`Compute service of ${instance.host} is still in use.`);
  const cell = server.cell;
  const migrationUuid = randomUUID();
  const id = await nextMigrationId(cell);
  await beginOperation({
    server,
    auth: req.auth,
    kind: 'evacuate',
    action: 'evacuate',
    vmStates: EVACUATE_VM_STATES,
    taskState: 'rebuilding',
    machine: 'server-evacuate',
    requestId: req.requestId,
    migrationUuid,
    params: { ...(body.host ? { host: body.host } : {}), oldVmState: instance.vmState, source: instance.host },
    change: (current) => {
      const at = now();
      const migration = newMigration({ id, uuid: migrationUuid, instance: current, migrationType: 'evacuation', status: 'accepted', destCompute: body.host ?? null, at });
      return { extra: [migrationPutItem(cell, migration, { create: true })] };
    },
  });
  // <2.14 answers the admin password ([api]enable_instance_password defaults to True); later, no body.
  if (!req.version.atLeast('2.14')) return json(200, { adminPass: body.adminPass ?? randomUUID().replace(/-/g, '').slice(0, 12) });
  return json(200);
}

registerServerActions({ evacuate: { policy: EVACUATE_POLICY, handler: evacuateAction } });

// ---------------------------------------------------------------------------------------------
// server-evacuate

const destOf = (s: StepState) => s.op.params.dest as string | undefined;
const sourceOf = (s: StepState) => s.op.params.source as string;

/** Conductor: schedule on another host of the cell (or the requested one) and claim there for the instance. */
async function evacuateSchedule(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  if (destOf(s)) return { host: destOf(s) };
  await startEvent(s.cell, s.instance.uuid, s.op.requestId, 'rebuild_server', null);
  const chosen = await scheduleAndClaim({
    flavor: s.instance.flavor,
    consumer: s.instance.uuid,
    volumeBacked: isVolumeBacked(s.instance),
    host: s.op.params.host as string | undefined,
    ignoreHosts: [sourceOf(s)],
    cellUuid: s.cell.uuid,
  });
  // The claim is found again by node (allocationsOf the instance on a node other than the source's).
  await updateOp(s, ({ instance, op }) => ({ instance: { ...instance, operation: { ...op, params: { ...op.params, dest: chosen.node.host, destNode: chosen.node.hypervisorHostname } } } }));
  await updateMigration(s.cell, s.op.migrationUuid!, { status: 'pre-migrating', destCompute: chosen.node.host, destNode: chosen.node.hypervisorHostname, destHost: chosen.node.host });
  await finishEvent(s.cell, s.instance.uuid, s.op.requestId, 'rebuild_server');
  return { host: chosen.node.host };
}

/** Dest compute: the ports get (and activate) a binding on the destination; the source's stays until finish. */
async function evacuateNetwork(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const dest = destOf(s)!;
  await startEvent(s.cell, s.instance.uuid, s.op.requestId, REBUILD_EVENT, dest);
  if (s.op.holds.boundHost !== dest) s = await updateOp(s, ({ instance, op }) => ({ instance: { ...instance, operation: { ...op, holds: { ...op.holds, boundHost: dest } } } }));
  for (const port of await listPortsOf(s.instance.uuid)) {
    await bindPortToHost(port.id, dest, { active: true });
    await activatePortBinding(port.id, dest);
  }
  return {};
}

/**
 * `detach_block_devices` then `_prep_block_device` on the destination. Each BDM's switch is
 * recorded (old attachment in holds, BDM = new empty attachment) before the old one is deleted,
 * so a re-run skips BDMs already switched and only repeats the (404-tolerant) delete.
 */
async function evacuateBlockDevices(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const dest = destOf(s)!;
  for (const bdm of s.bdms.filter((b) => b.destinationType === 'volume' && b.volumeId)) {
    const old = s.op.holds.oldAttachments?.[bdm.uuid];
    if (old !== undefined) {
      if (old) await attachmentDelete(old);
      continue;
    }
    const created = await attachmentCreate(bdm.volumeId!, s.instance.uuid);
    s = await updateOp(s, ({ instance, op, bdms }) => ({
      instance: { ...instance, operation: { ...op, holds: { ...op.holds, oldAttachments: { ...op.holds.oldAttachments, [bdm.uuid]: bdm.attachmentId ?? '' } } } },
      putBdms: bdms.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, attachmentId: created.id, connectionInfo: null, updatedAt: now() })),
    }));
    // _detach_volume(destroy_bdm=False): the driver detach is skipped (the source host is down).
    if (bdm.attachmentId) await attachmentDelete(bdm.attachmentId);
  }
  s = await connectVolumes(s, dest);
  await updateOp(s, ({ instance }) => ({ instance: { ...instance, taskState: 'rebuild_spawning' } }));
  return {};
}

/** driver.spawnEvacuated on the destination: the image from S3 (image-backed) or the boot volume. */
async function evacuateSpawn(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const dest = destOf(s)!;
  if (s.op.holds.destGuest !== dest) s = await updateOp(s, ({ instance, op }) => ({ instance: { ...instance, operation: { ...op, holds: { ...op.holds, destGuest: dest } } } }));
  const image = isVolumeBacked(s.instance) ? undefined : await getImage(s.instance.imageRef);
  const stopped = s.op.params.oldVmState === 'stopped';
  await (await driverOfHost(dest)).spawnEvacuated(
    {
      uuid: s.instance.uuid,
      flavor: s.instance.flavor,
      ...(image ? { image: imageSourceFor(image), imageRef: image.id } : {}),
      blockDevices: blockDeviceSpecs(s.bdms),
      powerOn: !stopped,
    },
    // The API accepted the evacuation because the source's service is down: forced down is the
    // operator fencing the host, so the driver treats it as down even if its directory answers.
    { ...(await hostRef(sourceOf(s))), down: true },
  );
  return {};
}

/** rt.finish_evacuation: host = dest; the source's binding and allocation dropped; migration `done` with the instance. */
async function evacuateFinish(input: ServerStepInput): Promise<unknown> {
  const s = await loadStep(input);
  const dest = destOf(s)!;
  const source = sourceOf(s);
  for (const port of await listPortsOf(s.instance.uuid)) await deletePortBinding(port.id, source);
  // Nova keeps the source allocation until the source compute restarts; a dead host's claim only
  // blocks capacity nobody can use, so Ferry drops it now (docs/compat-evacuate-shelve.md).
  await releaseOn((await nodeOfHost(source)).node.uuid, s.instance.uuid);
  const migration = (await getMigration(s.cell, s.op.migrationUuid!))!;
  const stopped = s.op.params.oldVmState === 'stopped';
  await endOperation(s, ({ instance }) => ({
    instance: {
      ...instance,
      host: dest,
      node: (s.op.params.destNode as string | undefined) ?? dest,
      vmState: stopped ? 'stopped' : 'active',
      taskState: null,
      powerState: stopped ? POWER_STATE.SHUTDOWN : POWER_STATE.RUNNING,
      launchedAt: now(),
    },
    extra: [migrationPutItem(s.cell, { ...migration, status: 'done', updatedAt: now() })],
  }));
  await finishEvent(s.cell, s.instance.uuid, s.op.requestId, REBUILD_EVENT);
  return { host: dest };
}

/**
 * The BDMs this evacuation switched get one empty attachment each (create empty, then delete the
 * one connected to the destination), so Cinder shows exactly the attachment the BDM records, with
 * no connector: the server can be evacuated again. BDMs not reached yet keep their attachment.
 */
async function resetSwitchedVolumes(s: StepState): Promise<StepState> {
  let state = s;
  for (const bdm of state.bdms.filter((b) => b.destinationType === 'volume' && b.volumeId && state.op.holds.oldAttachments?.[b.uuid] !== undefined)) {
    const old = state.op.holds.oldAttachments![bdm.uuid];
    // The old attachment is deleted right after the switch is recorded; a crash in between leaves it.
    if (old && (await attachmentGet(old))) await attachmentDelete(old);
    if (!bdm.attachmentId) continue;
    const current = await attachmentGet(bdm.attachmentId);
    if (current && current.status === 'reserved' && !bdm.connectionInfo) continue;
    state = await terminateConnection(state, bdm);
  }
  return state;
}

/** `_terminate_volume_connections` for one BDM: attachment_create (empty), BDM = new, attachment_delete(old). */
export async function terminateConnection(s: StepState, bdm: BlockDeviceMapping): Promise<StepState> {
  const created = await attachmentCreate(bdm.volumeId!, s.instance.uuid);
  const state = await updateOp(s, ({ bdms }) => ({ putBdms: bdms.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, attachmentId: created.id, connectionInfo: null, updatedAt: now() })) }));
  if (bdm.attachmentId) await attachmentDelete(bdm.attachmentId);
  return state;
}

async function evacuateRollback(input: ServerStepInput): Promise<unknown> {
  let s = await loadStep(input);
  const reason = reasonOf(input.error);
  const dest = destOf(s);
  if (!dest) {
    // No destination (NoValidHost, claim failure): InstanceFaultRollback keeps the vm_state.
    await updateMigration(s.cell, s.op.migrationUuid!, { status: 'failed' });
    await finishEvent(s.cell, s.instance.uuid, s.op.requestId, 'rebuild_server', { message: reason });
    await endOperation(s, ({ instance }) => ({ instance: { ...instance, taskState: null, fault: faultOf(reason, 400) } }));
    return { vmState: s.instance.vmState };
  }
  if (s.op.holds.destGuest) await (await driverOfHost(dest)).destroy(s.instance.uuid);
  s = await resetSwitchedVolumes(s);
  if (s.op.holds.boundHost) {
    for (const port of await listPortsOf(s.instance.uuid)) {
      if (port.bindings[sourceOf(s)]) await activatePortBinding(port.id, sourceOf(s));
      await deletePortBinding(port.id, dest);
    }
  }
  await releaseOn((await nodeOfHost(dest)).node.uuid, s.instance.uuid);
  await updateMigration(s.cell, s.op.migrationUuid!, { status: 'failed' });
  await finishEvent(s.cell, s.instance.uuid, s.op.requestId, REBUILD_EVENT, { message: reason });
  await endOperation(s, ({ instance }) => ({ instance: { ...instance, vmState: 'error', taskState: null, fault: faultOf(reason) } }));
  return { vmState: 'error' };
}

export const EVACUATE_STEPS = {
  'evacuate-schedule': evacuateSchedule,
  'evacuate-network': evacuateNetwork,
  'evacuate-block-devices': evacuateBlockDevices,
  'evacuate-spawn': evacuateSpawn,
  'evacuate-finish': evacuateFinish,
  'evacuate-rollback': evacuateRollback,
} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;

// ---------------------------------------------------------------------------------------------
// Source host back up

/**
 * Nova's `_destroy_evacuated_instances` when the compute service on `host` starts again: every
 * guest still defined (or kept) there whose instance now lives elsewhere after a `done` evacuation
 * from this host is destroyed, and that migration becomes `completed`. No Cinder calls: the
 * attachments were switched during the evacuation. Returns the uuids destroyed.
 */
export async function cleanupEvacuatedGuests(host: string): Promise<string[]> {
  const driver = await driverOfHost(host);
  const guests = [...(await driver.listGuests()), ...(await driver.listKeptDisks())];
  if (!guests.length) return [];
  const evacuations = (await listMigrations()).filter(({ migration: m }) => m.migrationType === 'evacuation' && m.status === 'done' && m.sourceCompute === host);
  const destroyed: string[] = [];
  for (const uuid of new Set(guests.map((g) => g.uuid))) {
    const mine = evacuations.filter(({ migration }) => migration.instanceUuid === uuid);
    if (!mine.length) continue;
    const server = await findServer(uuid);
    if (server && server.instance.host === host) continue; // evacuated back here since: the guest is the live one
    await driver.destroy(uuid);
    destroyed.push(uuid);
    for (const { cell, migration } of mine) await updateMigration(cell, migration.uuid, { status: 'completed' });
    logger.info('destroyed an evacuated guest on its old host', { host, serverId: uuid });
  }
  return destroyed;
}
