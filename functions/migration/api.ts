/**
 * The migration actions of `POST /shares/{id}/action` (M/api/v2/shares.py migration_*,
 * reset_task_state; reference §1.1-§1.5): every validation in the reference's order with its
 * status code, then one conditional write of the share and, where something must run, a state
 * machine execution named from the migration id.
 *
 * All are experimental (`X-OpenStack-Manila-API-Experimental: true`, else a bare 404) and admin
 * only; the policy is checked before the share is looked up, as upstream's controller does.
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type ApiResponse } from '../core/api.js';
import { BadRequest, FerryError, NotFound } from '../core/errors.js';
import { executionName, startExecution } from '../core/executions.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { getCopyOperation, manilaCopyProgress, requestCopyCancel } from '../copy/progress.js';
import { shareBackendOf, TASK_STATES, type Share, type ShareMigration, type TaskState } from '../shares/model.js';
import { getShare, getShareBackend, listShareBackends, updateShareBy } from '../shares/repo.js';
import { registerShareAction } from '../shares/actions.js';
import { DEFAULT_SHARE_AZ } from '../shares/scheduler.js';
import { getShareNetwork } from '../shares/networks.js';
import { getShareTypeById } from '../shares/types.js';
import { InvalidShare } from '../shares/transitions.js';
import { isObject } from '../shares/validation.js';
import { apply, applyWith, migrationIndexOpen, migrationRequest } from './flow.js';
import { migrationStateMessage, migrationTransition, startableError } from './transitions.js';
import { boolFromString } from '../core/strutils.js';

registerPolicies({
  'share:migration_start': 'admin_api',
  'share:migration_complete': 'admin_api',
  'share:migration_cancel': 'admin_api',
  'share:migration_get_progress': 'admin_api',
  'share:reset_task_state': 'admin_api',
});

const now = () => new Date().toISOString();

/** Upstream's InvalidInput: 400 "Invalid input received: <reason>". */
class InvalidInput extends BadRequest {
  constructor(reason: string) {
    super(`Invalid input received: ${reason}`);
  }
}

/** Python's str() of a JSON value, as upstream's messages print it. */
function pyStr(v: unknown): string {
  if (v === null || v === undefined) return 'None';
  if (v === true) return 'True';
  if (v === false) return 'False';
  if (typeof v === 'string') return v;
  return JSON.stringify(v);
}

/** strutils.bool_from_string(strict=True), as get_bool_from_api_params uses it. */
function apiBool(key: string, params: Record<string, unknown>): boolean {
  const v = Object.hasOwn(params, key) ? params[key] : false;
  // Upstream turns a non-string into str() first, so the number 1 is true there too.
  const b = boolFromString(typeof v === 'boolean' ? v : pyStr(v));
  if (b !== undefined) return b;
  throw new BadRequest(`Invalid value ${pyStr(v)} for ${key}. Expecting a boolean.`);
}

const DRIVER_ASSISTED_PARAMS = ['preserve_metadata', 'writable', 'nondisruptive', 'preserve_snapshots'] as const;
const MANDATORY_PARAMS = [...DRIVER_ASSISTED_PARAMS, 'host'];

async function loadShare(req: ApiRequest, id: string, notFound: (id: string) => FerryError): Promise<Share> {
  const s = await getShare(id);
  if (!s || (!req.auth.isAdmin && s.projectId !== req.auth.projectId && !s.isPublic)) throw notFound(id);
  return s;
}
const shareNotFoundShort = (id: string) => new NotFound(`Share ${id} not found.`);

/** For a lookup whose NotFound the caller words as its own 400; any other failure stays what it is. */
function unlessNotFound(e: unknown): undefined {
  if (e instanceof NotFound) return undefined;
  throw e;
}

function optionalId(params: Record<string, unknown>, key: string): string | null {
  const v = params[key];
  if (v === undefined || v === null || v === '') return null;
  if (typeof v !== 'string') throw new BadRequest(`${key} must be a string.`);
  return v;
}

/** Validates a migration_start (reference §1.3 rows 2-22, in order); returns what to do. */
async function validateStart(req: ApiRequest, shareId: string, value: unknown): Promise<{ share: Share; noop: boolean; migration: ShareMigration }> {
  const share = await loadShare(req, shareId, shareNotFoundShort); // row 2
  // row 3 (soft delete): Ferry has no soft-deleted shares.
  if (!isObject(value) || Object.keys(value).length === 0) throw new BadRequest('Request is missing body.'); // row 4
  const params = value;
  if (!MANDATORY_PARAMS.every((k) => Object.hasOwn(params, k))) {
    throw new BadRequest(`Must specify all mandatory parameters: [${MANDATORY_PARAMS.map((k) => `'${k}'`).join(', ')}]`); // row 5
  }
  const [preserveMetadata, writable, nondisruptive, preserveSnapshots, forceHostAssisted] = [...DRIVER_ASSISTED_PARAMS, 'force_host_assisted_migration'].map((k) => apiBool(k, params)); // row 6
  const host = params.host;
  if (typeof host !== 'string' || !host.trim()) throw new BadRequest(`Invalid value ${pyStr(host)} for host.`);
  const newShareNetworkId = optionalId(params, 'new_share_network_id');
  if (newShareNetworkId) {
    // The caller is an admin (policy above), who sees every project's networks.
    const found = await getShareNetwork(req.auth, newShareNetworkId).catch(unlessNotFound);
    if (!found) throw new BadRequest(`Share network ${newShareNetworkId} not found.`); // row 7
    // row 7b: share networks are records in Ferry, always active.
  }
  const newShareTypeId = optionalId(params, 'new_share_type_id');
  let newType;
  if (newShareTypeId) {
    newType = await getShareTypeById(newShareTypeId).catch(unlessNotFound);
    if (!newType) throw new BadRequest(`Share type ${newShareTypeId} not found.`); // row 8
  }
  if (forceHostAssisted && (preserveMetadata || writable || nondisruptive || preserveSnapshots)) {
    throw new InvalidInput(
      'Invalid parameter combination. Cannot set parameters "nondisruptive", "writable", "preserve_snapshots" or "preserve_metadata" to True when enabling the "force_host_assisted_migration" option.',
    ); // row 9
  }
  // rows 10 (replicas) and 11 (share groups): Ferry has neither.
  const notStartable = startableError(share); // rows 12-14
  if (notStartable) throw notStartable;
  // row 15 (host-assisted with snapshots): Ferry's shares have no snapshots.
  const backendHost = shareBackendOf(host.trim());
  const backend = (await listShareBackends()).find((b) => b.host === backendHost);
  if (!backend) throw new NotFound(`ServiceNotFound: Service ${backendHost} could not be found.`); // row 16
  // row 16b: a local backend's service is always up.
  const type = newType ?? (await getShareTypeById(share.shareTypeId));
  const dhss = ['true', '<is> true', '1'].includes((type.extraSpecs.driver_handles_share_servers ?? 'false').trim().toLowerCase());
  if (newType) {
    // provision_filter_on_size and the DHSS check apply to a new share type only (M/share/api.py migration_start).
    const minSpec = newType.extraSpecs['provisioning:min_share_size'];
    const maxSpec = newType.extraSpecs['provisioning:max_share_size'];
    const min = Number(minSpec);
    const max = Number(maxSpec);
    if (minSpec && Number.isFinite(min) && share.size < min) {
      throw new InvalidInput(`Specified share size of '${share.size}' is less than the minimum required size of '${minSpec}' for share type '${newType.name}'.`); // row 17
    }
    if (maxSpec && Number.isFinite(max) && share.size > max) {
      throw new InvalidInput(`Specified share size of '${share.size}' is greater than the maximum allowable size of '${maxSpec}' for share type '${newType.name}'.`);
    }
    if (dhss && !newShareNetworkId && !share.shareNetworkId) {
      throw new InvalidInput(`New share network must be provided when share type of given share ${share.id} has extra_spec 'driver_handles_share_servers' as True.`); // row 18
    }
  }
  if (!dhss && newShareNetworkId) {
    throw new InvalidInput(`New share network must not be provided when share type of given share ${share.id} has extra_spec 'driver_handles_share_servers' as False.`); // row 19
  }
  const noop = host.trim() === share.host && (newShareNetworkId ?? share.shareNetworkId) === share.shareNetworkId && (newShareTypeId ?? share.shareTypeId) === share.shareTypeId; // row 20
  const zones = type.extraSpecs.availability_zones;
  if (!noop && zones) {
    const zone = backend.availabilityZone ?? DEFAULT_SHARE_AZ;
    if (!zones.split(',').map((z) => z.trim()).includes(zone)) {
      throw new InvalidShare(
        `Share ${share.id} cannot be migrated to host ${host} because share type ${type.name ?? ''}(ID: ${type.id}) is not supported within the availability zone (${zone}) that the host is in.`,
      ); // row 22
    }
  }
  const migration: ShareMigration = {
    id: randomUUID(),
    destinationHost: host.trim(),
    newShareTypeId,
    newShareNetworkId,
    writable,
    preserveMetadata,
    nondisruptive,
    preserveSnapshots,
    forceHostAssisted,
    approach: null,
    destination: null,
    retired: null,
    readOnlyCast: false,
    dataNodeAccess: false,
    copyOperationId: null,
    copyAttempts: 0,
    driverPolls: 0,
    cancelRequested: false,
    startedAt: now(),
    error: null,
  };
  return { share, noop, migration };
}

async function migrationStart(req: ApiRequest, shareId: string, value: unknown): Promise<ApiResponse> {
  const { noop, migration } = await validateStart(req, shareId, value);
  if (noop) {
    await updateShareBy(shareId, (s) => migrationTransition(s, { type: 'no-op-success', at: now() }));
    return json(200);
  }
  // Row 23: one conditional write (with the migration's operations-index entry); of concurrent
  // starts exactly one finds the share startable.
  await applyWith(shareId, () => ({ event: { type: 'accept', at: now(), migration }, items: [migrationIndexOpen(shareId, migration)] }));
  try {
    await startExecution('share-migration-start', executionName('migrate', migration.id), { shareId, migrationId: migration.id });
  } catch (e) {
    // Nothing was made yet: end the migration at once rather than leave the share migrating with no machine.
    const reason = `the migration could not be started: ${(e as Error).message}`;
    await apply({ shareId }, { type: 'finish', at: now(), migrationId: migration.id, outcome: 'migration_error', reason });
    throw e;
  }
  return json(202);
}

async function migrationComplete(req: ApiRequest, shareId: string): Promise<ApiResponse> {
  await loadShare(req, shareId, shareNotFoundShort);
  const after = await updateShareBy(shareId, (s) => migrationTransition(s, { type: 'complete-requested', at: now() }));
  const m = after.migration!;
  await startExecution('share-migration-complete', executionName('complete', m.id), { shareId, migrationId: m.id, approach: m.approach });
  return json(202);
}

async function migrationCancel(req: ApiRequest, shareId: string): Promise<ApiResponse> {
  await loadShare(req, shareId, shareNotFoundShort);
  let requestedNow = false;
  const after = await updateShareBy(shareId, (s) => {
    const r = migrationTransition(s, { type: 'cancel-requested', at: now() });
    requestedNow = !(r instanceof FerryError) && r !== s;
    return r;
  });
  const m = after.migration!;
  if (!requestedNow) return json(202); // a cancel is already under way
  // While phase 1 runs, its machine sees the request (the copy worker within the file it copies);
  // otherwise the cancel machine undoes what phase 1 made.
  if (after.taskState === 'data_copying_in_progress' || after.taskState === 'migration_driver_in_progress') {
    if (m.copyOperationId) await requestCopyCancel(m.copyOperationId);
  } else {
    // Named per request (the version of the write that asked), so a cancel after a failed cleanup runs again.
    await startExecution('share-migration-cancel', executionName('cancel', `${m.id}-${after.version}`), { shareId, migrationId: m.id });
  }
  return json(202);
}

/** §1.5: progress from the driver, from the copy operation record, or from the task_state table. */
async function migrationGetProgress(req: ApiRequest, shareId: string): Promise<ApiResponse> {
  let s = await loadShare(req, shareId, shareNotFoundShort);
  let progress: Record<string, unknown> | undefined;
  const t = s.taskState;
  if (t === 'migration_driver_in_progress' && s.migration?.destination) {
    const m = s.migration;
    const source = shareDriverFor(await getShareBackend(s.host!));
    progress = { ...(await source.migrationGetProgress(migrationRequest(s, m.destination!, await getShareBackend(m.destination!.host)))) };
  } else if (t === 'data_copying_in_progress') {
    const record = s.migration?.copyOperationId ? await getCopyOperation(s.migration.copyOperationId) : undefined;
    if (!record) progress = { total_progress: 0 };
    else {
      progress = { ...manilaCopyProgress(record) };
      progress.bytes_copied = record.bytesDone ?? 0;
      progress.bytes_total = record.bytesTotal ?? 0;
      progress.files_copied = record.filesDone ?? 0;
      progress.files_total = record.filesTotal ?? 0;
    }
  } else if (
    t &&
    (['migration_success', 'data_copying_error', 'migration_cancelled', 'migration_completing', 'migration_driver_phase1_done', 'data_copying_completed', 'data_copying_completing', 'data_copying_cancelled', 'migration_error'] as TaskState[]).includes(t)
  ) {
    progress = { total_progress: 100 };
  } else if (t && (['migration_starting', 'migration_driver_starting', 'data_copying_starting', 'migration_in_progress'] as TaskState[]).includes(t)) {
    progress = { total_progress: 0 };
  }
  if (!progress || progress.total_progress === undefined || progress.total_progress === null) {
    throw new BadRequest(`Invalid share: ${migrationStateMessage(s) ?? `Migration progress of share ${s.id} cannot be obtained at this moment.`}`);
  }
  s = (await getShare(shareId)) ?? s; // upstream re-reads the share for task_state
  const { total_progress, ...details } = progress;
  // A failed migration says why (a Ferry addition to the driver's free-form details): the reason
  // recorded where it failed, on the share's record of how its last migration ended.
  const failed = s.taskState === 'migration_error' ? (s.migration?.error ?? (s.lastMigration?.outcome === 'migration_error' ? s.lastMigration.reason : null)) : null;
  if (failed) details.error = failed;
  const out: Record<string, unknown> = { total_progress, task_state: s.taskState };
  if (req.version.atLeast('2.59')) out.details = details;
  return json(200, out);
}

/** TASK_STATE_STATUSES: every task state but migration_driver_starting and migration_cancel_in_progress (the latter Ferry has none of). */
const RESETTABLE: readonly string[] = TASK_STATES.filter((t) => t !== 'migration_driver_starting');

async function resetTaskState(req: ApiRequest, shareId: string, value: unknown): Promise<ApiResponse> {
  authorize(req.auth, 'share:reset_status');
  await loadShare(req, shareId, (id) => new NotFound(`ShareNotFound: Share ${id} could not be found.`));
  if (!isObject(value) || !Object.hasOwn(value, 'task_state')) throw new BadRequest("Must specify 'task_state'");
  const state = value.task_state;
  if (state !== null && (typeof state !== 'string' || !RESETTABLE.includes(state))) {
    throw new BadRequest(`Invalid state. Valid states: ${[...RESETTABLE, 'None'].join(', ')}.`);
  }
  await updateShareBy(shareId, (s) => (s.taskState === state ? s : { ...s, taskState: state as TaskState | null, updatedAt: now() }));
  return json(202);
}

type Handler = (req: ApiRequest, shareId: string, value: unknown) => Promise<ApiResponse>;
const actions: [string, string, string, Handler][] = [
  ['migration_start', '2.29', 'share:migration_start', migrationStart],
  ['migration_complete', '2.22', 'share:migration_complete', (r, id) => migrationComplete(r, id)],
  ['migration_cancel', '2.22', 'share:migration_cancel', (r, id) => migrationCancel(r, id)],
  ['migration_get_progress', '2.22', 'share:migration_get_progress', (r, id) => migrationGetProgress(r, id)],
  ['reset_task_state', '2.22', 'share:reset_task_state', resetTaskState],
];
for (const [name, minVersion, policy, handler] of actions) {
  registerShareAction(name, { minVersion, experimental: true, policy, byId: handler });
}
