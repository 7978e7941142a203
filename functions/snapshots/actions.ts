/**
 * The snapshot actions beyond admin_actions.py's (routes.ts): os-update_snapshot_status
 * (C/api/contrib/snapshot_actions.py, a backend's progress report, only along its status_map) and
 * os-unmanage (C/api/contrib/snapshot_unmanage.py: a delete that leaves the backend object alone).
 * Each is a snapshot transition written under the version read (repo.ts), so a refusal writes nothing.
 */
import { json, type ApiRequest, type ApiResponse } from '../core/api.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { assertNotFrozen } from '../volumes/frozen.js';
import { invalidField, isObject, pyRepr } from '../volumes/validation.js';
import type { SnapshotStatus } from './model.js';
import { getSnapshot, getSnapshotScoped, removeSnapshotRecord, snapshotNotFound, updateSnapshot } from './repo.js';

const UPDATE_STATUS = 'snapshot_extension:snapshot_actions:update_snapshot_status';
const UNMANAGE = 'snapshot_extension:snapshot_unmanage';
registerPolicies({ [UPDATE_STATUS]: 'admin_or_owner', [UNMANAGE]: 'admin_api' });

const now = () => new Date().toISOString();
/** Cinder's 'progress' format: an integer percentage 0-100 followed by '%'. */
const PROGRESS = /^(100|[1-9]?[0-9])%$/;

async function updateStatus(req: ApiRequest, args: unknown): Promise<ApiResponse> {
  if (!isObject(args)) throw invalidField('os-update_snapshot_status', args, `${pyRepr(args)} is not of type 'object'`);
  const extra = Object.keys(args).find((k) => k !== 'status' && k !== 'progress');
  if (extra !== undefined) throw invalidField('os-update_snapshot_status', args, `Additional properties are not allowed (${pyRepr(extra)} was unexpected)`);
  if (!('status' in args)) throw invalidField('os-update_snapshot_status', args, "'status' is a required property");
  const { status, progress } = args;
  if (typeof status !== 'string') throw invalidField('status', status, `${pyRepr(status)} is not of type 'string'`);
  if (progress !== undefined && (typeof progress !== 'string' || !PROGRESS.test(progress))) throw invalidField('progress', progress, `${pyRepr(progress)} is not a 'progress'`);
  // objects.Snapshot.get_by_id: not scoped to the project (the policy decides).
  const s = await getSnapshot(req.params.snapshot_id!);
  if (!s) throw snapshotNotFound(req.params.snapshot_id!);
  authorize(req.auth, UPDATE_STATUS, { projectId: s.projectId });
  // A status outside Ferry's is outside every status_map list too: the transition refuses it, with upstream's words.
  await updateSnapshot(s.id, { type: 'update-status', at: now(), status: status as SnapshotStatus, ...(progress ? { progress: progress as string } : {}) });
  return json(202);
}

/** delete_snapshot(unmanage_only=True): the delete's status guard, then the record goes and the backend object stays. */
async function unmanage(req: ApiRequest, args: unknown): Promise<ApiResponse> {
  if (args !== null && !isObject(args)) throw invalidField('os-unmanage', args, `${pyRepr(args)} is not of type 'object', 'null'`);
  const s = await getSnapshotScoped(req.auth, req.params.snapshot_id!);
  authorize(req.auth, UNMANAGE, { projectId: s.projectId });
  await assertNotFrozen(s.backendHost);
  await updateSnapshot(s.id, { type: 'begin-delete', at: now() }, { notFrozen: true });
  await removeSnapshotRecord(s.id, { unmanaged: true });
  return json(202);
}

/** The actions this file answers, by body key (routes.ts actionRoute dispatches to them). */
export const SNAPSHOT_ACTIONS: Record<string, (req: ApiRequest, args: unknown) => Promise<ApiResponse>> = {
  'os-update_snapshot_status': updateStatus,
  'os-unmanage': unmanage,
};
