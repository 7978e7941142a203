/**
 * `POST /shares/{id}/action` (M/api/v2/shares.py, the action handlers of the share controller):
 * dispatches through SHARE_ACTIONS by the body's one key and the request's version. The access
 * actions, extend and shrink (resize.ts) and reset_status are registered here; the migration work adds its actions with
 * `registerShareAction` (experimental ones need `X-OpenStack-Manila-API-Experimental`).
 */
import { json, type ApiRequest, type ApiResponse } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { own } from '../core/lookup.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { boolFromString } from '../core/strutils.js';
import { accessList, allowAccess, denyAccess } from './access.js';
import { type Share } from './model.js';
import { getShareScoped, updateShare } from './repo.js';
import { extend, shrink } from './resize.js';
import { isObject } from './validation.js';

registerPolicies({
  'share:action': 'admin_or_owner',
  'share:reset_status': 'admin_api',
});

const now = () => new Date().toISOString();

export interface ShareActionSpec {
  minVersion?: string;
  maxVersion?: string;
  /** Needs `X-OpenStack-Manila-API-Experimental: true`; without it the action is a bare 404 (reference §1.1). */
  experimental?: boolean;
  /** The handler authorizes itself (against the share). */
  handler?: (req: ApiRequest, share: Share, value: unknown) => Promise<ApiResponse>;
  /**
   * Checked before the share is looked up (upstream's controller-level authorize, so a denied
   * caller gets 403 even for a share that does not exist); such actions use `byId`.
   */
  policy?: string;
  /** A handler that looks the share up itself (its not-found message differs per action). */
  byId?: (req: ApiRequest, shareId: string, value: unknown) => Promise<ApiResponse>;
}

/** Action key -> spec (several specs per key for several version ranges). */
export const SHARE_ACTIONS: Record<string, ShareActionSpec[]> = {};

export function registerShareAction(name: string, spec: ShareActionSpec): void {
  (SHARE_ACTIONS[name] ??= []).push(spec);
}

registerShareAction('os-allow_access', { maxVersion: '2.6', handler: allowAccess });
registerShareAction('allow_access', { minVersion: '2.7', handler: allowAccess });
registerShareAction('os-deny_access', { maxVersion: '2.6', handler: denyAccess });
registerShareAction('deny_access', { minVersion: '2.7', handler: denyAccess });
registerShareAction('os-access_list', { maxVersion: '2.6', handler: (req, s) => accessList(req, s) });
registerShareAction('access_list', { minVersion: '2.7', maxVersion: '2.44', handler: (req, s) => accessList(req, s) });
// M/api/v2/shares.py: extend's `force` from 2.64 (resize.ts drops it before).
registerShareAction('os-extend', { maxVersion: '2.6', handler: extend });
registerShareAction('extend', { minVersion: '2.7', handler: extend });
registerShareAction('os-shrink', { maxVersion: '2.6', handler: shrink });
registerShareAction('shrink', { minVersion: '2.7', handler: shrink });
registerShareAction('os-reset_status', { maxVersion: '2.6', policy: 'share:reset_status', byId: resetStatus });
registerShareAction('reset_status', { minVersion: '2.7', policy: 'share:reset_status', byId: resetStatus });

/** Manila's share statuses an admin may set (M/api/openstack/wsgi.py AdminActionsMixin valid_status). */
const RESETTABLE_STATUSES = ['available', 'error', 'creating', 'deleting', 'error_deleting', 'migrating', 'migrating_to', 'inactive'] as const;

/**
 * `reset_status` (`manila reset-state`): an admin's override of a share's status after checking
 * the backend by hand, e.g. after a failed phase 2 of a driver-assisted migration. Only the
 * status changes; what the share holds stays recorded, so the audit still sees it.
 */
async function resetStatus(req: ApiRequest, shareId: string, value: unknown): Promise<ApiResponse> {
  const share = await getShareScoped(req.auth, shareId);
  const status = isObject(value) ? value.status : undefined;
  if (typeof status !== 'string') throw new BadRequest("Must specify 'status'");
  if (!(RESETTABLE_STATUSES as readonly string[]).includes(status)) throw new BadRequest(`Invalid state. Valid states: ${RESETTABLE_STATUSES.join(', ')}.`);
  await updateShare(share.id, { type: 'reset-status', at: now(), status: status as Share['status'] });
  return json(202);
}

/** strutils.bool_from_string, lenient: what the experimental header accepts. */
export function isExperimental(headers: Record<string, string | undefined>): boolean {
  return boolFromString(headers['x-openstack-manila-api-experimental'] ?? '') === true;
}

function inRange(req: ApiRequest, spec: ShareActionSpec): boolean {
  if (spec.minVersion && !req.version.atLeast(spec.minVersion)) return false;
  if (spec.maxVersion) {
    const [maj, min] = spec.maxVersion.split('.').map(Number);
    if (req.version.major > maj! || (req.version.major === maj && req.version.minor > min!)) return false;
  }
  return true;
}

export async function action(req: ApiRequest) {
  const b = req.body;
  if (!isObject(b) || Object.keys(b).length !== 1) throw new BadRequest('Malformed request body');
  const key = Object.keys(b)[0]!;
  const specs = own(SHARE_ACTIONS, key);
  if (!specs) throw new BadRequest(`There is no such action: ${key}`);
  const spec = specs.find((s) => inRange(req, s) && (!s.experimental || isExperimental(req.event.headers)));
  if (!spec) throw new NotFound();
  if (spec.policy) authorize(req.auth, spec.policy);
  if (spec.byId) return spec.byId(req, req.params.id!, b[key]);
  const share = await getShareScoped(req.auth, req.params.id!);
  return spec.handler!(req, share, b[key]);
}
