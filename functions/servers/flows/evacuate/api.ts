/**
 * The API half of evacuate (reference §3.2 evacuate, `compute/api.py:evacuate`): the body per
 * microversion, the source compute must be down (forced_down or not reporting), a requested host
 * must exist and differ from the server's; task_state `rebuilding`, a migration (type
 * `evacuation`, status `accepted`), action `evacuate`, then server-evacuate (steps.ts).
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type ApiResponse } from '../../../core/api.js';
import { BadRequest } from '../../../core/errors.js';
import { registerPolicies } from '../../../core/policy.js';
import { COMPUTE_BINARY, serviceIsUp } from '../../../compute/model.js';
import { findServiceByHostBinary } from '../../../compute/repo.js';
import { invalid, isObject } from '../../../compute/validation.js';
import type { ServerActionSpec } from '../../actions.js';
import { beginOperation, driverOfHost, nodeOfHost } from '../../engine.js';
import { migrationPutItem, nextMigrationId } from '../../migrations.js';
import { newMigration, type VmState } from '../../model.js';
import type { LoadedServer } from '../../repo.js';

const now = () => new Date().toISOString();

export const EVACUATE_POLICY = 'os_compute_api:os-evacuate';
registerPolicies({ [EVACUATE_POLICY]: 'admin_api' });

/** check_instance_state of evacuate (the states Ferry's rebuild handles). */
export const EVACUATE_VM_STATES: readonly VmState[] = ['active', 'stopped', 'error'];

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
    startedAs: req.startedAs,
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

// Nova's evacuate has no check_instance_lock.
export const EVACUATE_ACTIONS: Record<string, ServerActionSpec> = { evacuate: { policy: EVACUATE_POLICY, handler: evacuateAction, ignoresLock: true } };
