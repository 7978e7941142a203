/**
 * The API half of shelve, shelve-offload and unshelve (reference §2.1 rows Shelve /
 * shelve-offload, Unshelve; §3.2 bodies): the bodies per microversion, the host and zone checks,
 * task_state, the instance action, then server-shelve or server-unshelve (steps.ts).
 */
import { json, type ApiRequest, type ApiResponse } from '../../../core/api.js';
import { BadRequest, Conflict, NotFound } from '../../../core/errors.js';
import { authorize, registerPolicies } from '../../../core/policy.js';
import { invalid, isObject } from '../../../compute/validation.js';
import type { ServerActionSpec } from '../../actions.js';
import { beginOperation, nodeOfHost } from '../../engine.js';
import type { LoadedServer } from '../../repo.js';

export const SHELVE_POLICIES = {
  shelve: 'os_compute_api:os-shelve:shelve',
  shelveOffload: 'os_compute_api:os-shelve:shelve_offload',
  unshelve: 'os_compute_api:os-shelve:unshelve',
  unshelveToHost: 'os_compute_api:os-shelve:unshelve_to_host',
} as const;

registerPolicies({
  [SHELVE_POLICIES.shelve]: 'admin_or_owner',
  [SHELVE_POLICIES.shelveOffload]: 'admin_api',
  [SHELVE_POLICIES.unshelve]: 'admin_or_owner',
  [SHELVE_POLICIES.unshelveToHost]: 'admin_api',
});


// Nova's schema for shelve and shelveOffload is `{}`: any value (`{}` and `null` alike), ignored.
async function shelveAction(req: ApiRequest, server: LoadedServer): Promise<ApiResponse> {
  await beginOperation({
    server,
    auth: req.auth,
    kind: 'shelve',
    action: 'shelve',
    vmStates: ['active', 'stopped', 'paused', 'suspended'],
    taskState: 'shelving',
    machine: 'server-shelve',
    requestId: req.requestId,
    startedAs: req.startedAs,
    params: { oldVmState: server.instance.vmState, oldPowerState: server.instance.powerState },
  });
  return json(202);
}

async function shelveOffloadAction(req: ApiRequest, server: LoadedServer): Promise<ApiResponse> {
  await beginOperation({
    server,
    auth: req.auth,
    kind: 'shelve_offload',
    action: 'shelveOffload',
    vmStates: ['shelved'],
    taskState: 'shelving_offloading',
    machine: 'server-shelve',
    requestId: req.requestId,
    startedAs: req.startedAs,
    params: { oldVmState: server.instance.vmState, oldPowerState: server.instance.powerState },
  });
  return json(202);
}

interface UnshelveBody {
  /** undefined: keep; null: unpin (≥2.91). */
  availabilityZone?: string | null;
  host?: string;
}

/** The unshelve body per microversion (§3.2): <2.77 not validated; 2.77–2.90 az; ≥2.91 az|null and host. */
function parseUnshelve(req: ApiRequest, raw: unknown): UnshelveBody {
  if (!req.version.atLeast('2.77') || raw === null) return {};
  if (!isObject(raw)) throw invalid('unshelve', raw, `${JSON.stringify(raw)} is not valid under any of the given schemas`);
  const modern = req.version.atLeast('2.91');
  const allowedKeys = modern ? ['availability_zone', 'host'] : ['availability_zone'];
  const extra = Object.keys(raw).filter((k) => !allowedKeys.includes(k));
  if (extra.length) throw invalid('unshelve', raw, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} was unexpected)`);
  if (!Object.keys(raw).length) throw invalid('unshelve', raw, modern ? '{} is not valid under any of the given schemas' : "'availability_zone' is a required property");
  const az = raw.availability_zone;
  if (az !== undefined && !(typeof az === 'string' || (modern && az === null))) throw invalid('availability_zone', az, `${JSON.stringify(az)} is not of type 'string'`);
  if (raw.host !== undefined && (typeof raw.host !== 'string' || raw.host.length < 1 || raw.host.length > 255)) throw invalid('host', raw.host, 'not a valid hostname');
  return { ...(az !== undefined ? { availabilityZone: az as string | null } : {}), ...(raw.host !== undefined ? { host: raw.host as string } : {}) };
}

async function unshelveAction(req: ApiRequest, server: LoadedServer, raw: unknown): Promise<ApiResponse> {
  const body = parseUnshelve(req, raw);
  const { instance } = server;
  if (body.host) {
    authorize(req.auth, SHELVE_POLICIES.unshelveToHost, { projectId: instance.projectId });
    try {
      const hn = await nodeOfHost(body.host);
      if (hn.cell.uuid !== server.cell.uuid) throw new BadRequest(`Host ${body.host} is not in the cell of instance ${instance.uuid}.`);
    } catch (e) {
      if (e instanceof NotFound) throw new BadRequest(`Compute host ${body.host} could not be found.`);
      throw e;
    }
  }
  if (typeof body.availabilityZone === 'string' && body.availabilityZone !== 'nova') throw new BadRequest('The requested availability zone is not available');
  if ((body.host || body.availabilityZone !== undefined) && instance.vmState === 'shelved') {
    throw new Conflict(`The unshelve action failed: instance ${instance.uuid} is in vm_state shelved; a host or availability zone needs SHELVED_OFFLOADED.`);
  }
  await beginOperation({
    server,
    auth: req.auth,
    kind: 'unshelve',
    action: 'unshelve',
    vmStates: ['shelved', 'shelved_offloaded'],
    taskState: 'unshelving',
    machine: 'server-unshelve',
    requestId: req.requestId,
    startedAs: req.startedAs,
    params: { ...(body.host ? { host: body.host } : {}) },
    change: (current) => (body.availabilityZone !== undefined ? { instance: { ...current, availabilityZone: body.availabilityZone } } : {}),
  });
  return json(202);
}

export const SHELVE_ACTIONS: Record<string, ServerActionSpec> = {
  shelve: { policy: SHELVE_POLICIES.shelve, handler: shelveAction },
  shelveOffload: { policy: SHELVE_POLICIES.shelveOffload, handler: shelveOffloadAction },
  unshelve: { policy: SHELVE_POLICIES.unshelve, handler: unshelveAction },
};
