/**
 * The API half of pause, unpause, suspend, resume (pause_server.py, suspend_server.py) and
 * rebuild (servers.py `_rebuild`): body, state and image checks in Nova's order, then one
 * beginOperation write (task_state from None, Nova's `expected_task_state=[None]`, conditional on
 * the instance's version) and server-power, whose step makes the driver call (steps.ts).
 */
import { json, type ApiRequest, type ApiResponse } from '../../../core/api.js';
import { BadRequest } from '../../../core/errors.js';
import { registerPolicies } from '../../../core/policy.js';
import { invalid, isObject, noAdditional, type Json } from '../../../compute/validation.js';
import type { ServerActionSpec } from '../../actions.js';
import { detailOf } from '../../detail.js';
import { assertState, beginOperation } from '../../engine.js';
import { findImage } from '../../images.js';
import type { Instance, OperationKind, TaskState, VmState } from '../../model.js';
import { findServer, type LoadedServer } from '../../repo.js';
import { isVolumeBacked } from '../block-devices.js';
import { checkServerName } from './create-body.js';

export const GUEST_POLICIES = {
  pause: 'os_compute_api:os-pause-server:pause',
  unpause: 'os_compute_api:os-pause-server:unpause',
  suspend: 'os_compute_api:os-suspend-server:suspend',
  resume: 'os_compute_api:os-suspend-server:resume',
  rebuild: 'os_compute_api:servers:rebuild',
} as const;

registerPolicies({
  [GUEST_POLICIES.pause]: 'admin_or_owner',
  [GUEST_POLICIES.unpause]: 'admin_or_owner',
  [GUEST_POLICIES.suspend]: 'admin_or_owner',
  [GUEST_POLICIES.resume]: 'admin_or_owner',
  [GUEST_POLICIES.rebuild]: 'admin_or_owner',
});

/** One of the four: the value of the action is not looked at (Nova's schemas are `{}`). */
function guestAction(kind: OperationKind, vmStates: readonly VmState[], taskState: TaskState) {
  return async (req: ApiRequest, server: LoadedServer): Promise<ApiResponse> => {
    await beginOperation({ server, auth: req.auth, kind, action: kind, vmStates, taskState, machine: 'server-power', requestId: req.requestId, startedAs: req.startedAs });
    return json(202);
  };
}

// ---------------------------------------------------------------------------------------------
// Rebuild

/** The properties of `rebuild` per microversion (schemas rebuild ... rebuild_v290). */
function rebuildProperties(req: ApiRequest): string[] {
  const props = ['name', 'imageRef', 'adminPass', 'metadata', 'preserve_ephemeral', 'OS-DCF:diskConfig', 'accessIPv4', 'accessIPv6', 'personality'];
  if (req.version.atLeast('2.19')) props.push('description');
  if (req.version.atLeast('2.54')) props.push('key_name');
  if (req.version.atLeast('2.57')) props.splice(props.indexOf('personality'), 1, 'user_data');
  if (req.version.atLeast('2.63')) props.push('trusted_image_certificates');
  if (req.version.atLeast('2.90')) props.push('hostname');
  return props;
}

interface RebuildBody {
  imageRef: string;
  name?: string;
  metadata?: Record<string, string>;
  adminPass?: string;
}

function parseRebuild(req: ApiRequest, raw: unknown): RebuildBody {
  if (!isObject(raw)) throw invalid('rebuild', raw, `${JSON.stringify(raw)} is not of type 'object'`);
  if (raw.name !== undefined) checkServerName(raw.name);
  if (typeof raw.imageRef !== 'string' && raw.imageRef !== undefined) throw invalid('imageRef', raw.imageRef, `${JSON.stringify(raw.imageRef)} is not of type 'string'`);
  if (raw.metadata !== undefined) {
    if (!isObject(raw.metadata)) throw invalid('metadata', raw.metadata, `${JSON.stringify(raw.metadata)} is not of type 'object'`);
    for (const [k, v] of Object.entries(raw.metadata)) {
      if (k.length < 1 || k.length > 255) throw invalid('metadata', raw.metadata, `'${k}' does not match any of the regexes: '^[a-zA-Z0-9-_:. ]{1,255}$'`);
      if (typeof v !== 'string') throw invalid(k, v, `${JSON.stringify(v)} is not of type 'string'`);
      if (v.length > 255) throw invalid(k, v, `'${v}' is too long`);
    }
  }
  if (raw.adminPass !== undefined && typeof raw.adminPass !== 'string') throw invalid('adminPass', raw.adminPass, `${JSON.stringify(raw.adminPass)} is not of type 'string'`);
  if (raw.imageRef === undefined) throw invalid('rebuild', raw, "'imageRef' is a required property");
  noAdditional('rebuild', raw, rebuildProperties(req));
  return {
    imageRef: raw.imageRef as string,
    ...(raw.name !== undefined ? { name: raw.name as string } : {}),
    ...(raw.metadata !== undefined ? { metadata: raw.metadata as Record<string, string> } : {}),
    ...(raw.adminPass !== undefined ? { adminPass: raw.adminPass as string } : {}),
  };
}

const REBUILD_VM_STATES: readonly VmState[] = ['active', 'stopped', 'error'];

/**
 * The rebuild response (servers.py `_rebuild` view flags): the server's detail, before 2.75 without
 * the extended attributes (nor the addresses' OS-EXT-IPS type and MAC), before 2.54 without key_name (Tempest's 2.1 schema forbids it);
 * `OS-EXT-SRV-ATTR:user_data` never (show_user_data=False) but `user_data` from 2.57,
 * `server_groups` from 2.71 (Ferry has no server groups: always empty), then adminPass.
 */
export function rebuildView(req: Pick<ApiRequest, 'version'>, detail: Json, adminPass: string): Json {
  const all = req.version.atLeast('2.75');
  const dropped = (k: string) =>
    k === 'OS-EXT-SRV-ATTR:user_data' ||
    (k === 'key_name' && !req.version.atLeast('2.54')) ||
    (!all && (k.startsWith('OS-EXT-') || k.startsWith('OS-SRV-USG:') || k.startsWith('os-extended-volumes:') || k === 'security_groups' || k === 'config_drive' || k === 'host_status'));
  const view: Json = Object.fromEntries(Object.entries(detail).filter(([k]) => !dropped(k)));
  // extend_address = show_all_attributes: before 2.75 each address is only version and addr.
  if (!all && isObject(detail.addresses)) {
    view.addresses = Object.fromEntries(
      Object.entries(detail.addresses).map(([net, ips]) => [net, (ips as Json[]).map((ip) => ({ version: ip.version, addr: ip.addr }))]),
    );
  }
  if (req.version.atLeast('2.57')) view.user_data = null;
  if (req.version.atLeast('2.71')) view.server_groups = [];
  return { ...view, adminPass };
}

async function rebuildAction(req: ApiRequest, server: LoadedServer, raw: unknown): Promise<ApiResponse> {
  const body = parseRebuild(req, raw);
  // API.rebuild: check_instance_state before the image is looked at.
  assertState(server.instance, 'rebuild', REBUILD_VM_STATES);
  const image = await findImage(body.imageRef);
  if (!image || (image.visibility !== 'public' && image.ownerProjectId !== req.auth.projectId && !req.auth.isAdmin)) throw new BadRequest('Cannot find image for rebuild');
  if (image.status !== 'active') throw new BadRequest(`Image ${image.id} is not active.`);
  // A volume-backed server's root is its volume: Ferry does not reimage volumes (Nova refuses a
  // different image so before 2.93; docs/compatibility.md).
  if (isVolumeBacked(server.instance)) throw new BadRequest(`Image ${image.id} is unacceptable: Unable to rebuild with a different image for a volume-backed server.`);
  await beginOperation({
    server,
    auth: req.auth,
    kind: 'rebuild',
    action: 'rebuild',
    vmStates: REBUILD_VM_STATES,
    taskState: 'rebuilding',
    machine: 'server-power',
    requestId: req.requestId,
    startedAs: req.startedAs,
    params: { oldVmState: server.instance.vmState },
    change: (instance): { instance: Instance } => ({
      instance: {
        ...instance,
        imageRef: image.id,
        ...(body.name !== undefined ? { name: body.name } : {}),
        ...(body.metadata !== undefined ? { metadata: body.metadata } : {}),
        systemMetadata: { ...instance.systemMetadata, image_base_image_ref: image.id },
        fault: null,
      },
    }),
  });
  const fresh = await findServer(server.instance.uuid);
  const detail = await detailOf(req, fresh ?? server);
  return json(202, { server: rebuildView(req, detail, body.adminPass ?? randomPassword()) });
}

function randomPassword(): string {
  return Array.from(crypto.getRandomValues(new Uint8Array(12)), (b) => 'abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789'[b % 56]).join('');
}

export const GUEST_ACTIONS: Record<string, ServerActionSpec> = {
  pause: { policy: GUEST_POLICIES.pause, handler: guestAction('pause', ['active'], 'pausing') },
  unpause: { policy: GUEST_POLICIES.unpause, handler: guestAction('unpause', ['paused'], 'unpausing') },
  suspend: { policy: GUEST_POLICIES.suspend, handler: guestAction('suspend', ['active'], 'suspending') },
  resume: { policy: GUEST_POLICIES.resume, handler: guestAction('resume', ['suspended'], 'resuming') },
  rebuild: { policy: GUEST_POLICIES.rebuild, handler: rebuildAction },
};
