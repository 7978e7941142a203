/**
 * The `lock` and `unlock` actions (nova/api/openstack/compute/lock_server.py, compute/api.py
 * lock/unlock). No machine: one conditional write on the instance (its version, as every
 * updateServer) sets locked, locked_by and system_metadata.locked_reason together with the
 * instance action. What a lock refuses (Nova's check_instance_lock: every state-changing
 * operation but evacuate, to non-admins, 409 "Instance X is locked") is checked by the action
 * dispatcher (routes.ts) and again inside beginOperation's write (engine.ts), so a lock that
 * lands between the two still refuses.
 */
import { json, type ApiRequest, type ApiResponse } from '../../../core/api.js';
import { authorize, registerPolicies } from '../../../core/policy.js';
import { invalid, isObject, noAdditional } from '../../../compute/validation.js';
import type { ServerActionSpec } from '../../actions.js';
import { actionPutItem, newAction } from '../../instance-actions.js';
import type { Instance } from '../../model.js';
import { updateServer, type LoadedServer } from '../../repo.js';

export const LOCK_POLICIES = {
  lock: 'os_compute_api:os-lock-server:lock',
  unlock: 'os_compute_api:os-lock-server:unlock',
  unlockOverride: 'os_compute_api:os-lock-server:unlock:unlock_override',
} as const;

registerPolicies({
  [LOCK_POLICIES.lock]: 'admin_or_owner',
  [LOCK_POLICIES.unlock]: 'admin_or_owner',
  // Only an admin may lift a lock another kind of caller set (an owner's lock by an admin is fine).
  [LOCK_POLICIES.unlockOverride]: 'admin_api',
});

/** From 2.73 the microversion that shows it. */
export const LOCKED_REASON_MIN = '2.73';

/** Who Nova records as the locker: the owner (caller of the instance's project) or an admin. */
const lockerOf = (req: ApiRequest, instance: Pick<Instance, 'projectId'>): 'owner' | 'admin' => (instance.projectId === req.auth.projectId ? 'owner' : 'admin');

/** The 2.73 body: null, or an object with only a locked_reason of 1–255 characters (before 2.73 any value, ignored). */
function lockReason(req: ApiRequest, raw: unknown): string | undefined {
  if (!req.version.atLeast(LOCKED_REASON_MIN) || raw === null) return undefined;
  if (!isObject(raw)) throw invalid('lock', raw, `${JSON.stringify(raw)} is not of type 'object', 'null'`);
  noAdditional('lock', raw, ['locked_reason']);
  const reason = raw.locked_reason;
  if (reason === undefined) return undefined;
  if (typeof reason !== 'string') throw invalid('locked_reason', reason, `${JSON.stringify(reason)} is not of type 'string'`);
  if (reason.length < 1) throw invalid('locked_reason', reason, "'' is too short");
  if (reason.length > 255) throw invalid('locked_reason', reason, `'${reason}' is too long`);
  return reason;
}

async function lockAction(req: ApiRequest, server: LoadedServer, raw: unknown): Promise<ApiResponse> {
  const reason = lockReason(req, raw);
  // API.lock: an owner locking an instance already locked changes nothing (no action either).
  if (server.instance.locked && lockerOf(req, server.instance) === 'owner') return json(202);
  await updateServer(server.cell, server.instance.uuid, ({ instance }) => {
    const by = lockerOf(req, instance);
    const systemMetadata = { ...instance.systemMetadata, ...(reason ? { locked_reason: reason } : {}) };
    return {
      instance: { ...instance, locked: true, lockedBy: by, systemMetadata },
      extra: [actionPutItem(server.cell, newAction({ ...instance, userId: req.auth.userId }, 'lock', req.requestId))],
    };
  });
  return json(202);
}

async function unlockAction(req: ApiRequest, server: LoadedServer): Promise<ApiResponse> {
  // is_expected_locked_by: lifting a lock the other kind of caller set needs unlock_override.
  const expected = lockerOf(req, server.instance);
  if (server.instance.lockedBy && server.instance.lockedBy !== expected) authorize(req.auth, LOCK_POLICIES.unlockOverride, { projectId: server.instance.projectId });
  await updateServer(server.cell, server.instance.uuid, ({ instance }) => {
    // The locker read above is re-checked on the fresh record: a lock taken over in between by
    // the other kind of caller is not lifted without the override.
    if (instance.lockedBy && instance.lockedBy !== expected) authorize(req.auth, LOCK_POLICIES.unlockOverride, { projectId: instance.projectId });
    const { locked_reason: _reason, ...systemMetadata } = instance.systemMetadata;
    return {
      instance: { ...instance, locked: false, lockedBy: null, systemMetadata },
      extra: [actionPutItem(server.cell, newAction({ ...instance, userId: req.auth.userId }, 'unlock', req.requestId))],
    };
  });
  return json(202);
}

export const LOCK_ACTIONS: Record<string, ServerActionSpec> = {
  lock: { policy: LOCK_POLICIES.lock, handler: lockAction, ignoresLock: true },
  unlock: { policy: LOCK_POLICIES.unlock, handler: unlockAction, ignoresLock: true },
};
