/**
 * The Nova API's bodies of a server's history, as nova 26.2.2 (API 2.1–2.93) shapes them:
 * migrations (compute/migrations.py `_output`, compute/server_migrations.py `output`) and
 * instance actions with their events (compute/instance_actions.py). Pure functions of the records,
 * the microversion, the link context and who is asking, like views.ts.
 */
import type { ApiVersion } from '../core/microversion.js';
import { resourceLinks, type LinkContext } from '../compute/views.js';
import type { InstanceAction, InstanceActionEvent, Migration } from './model.js';
import { generateHostId, subsecondTime } from './views.js';

/** migration_type (and links for in-progress live migrations) in GET /os-migrations. */
export const MIGRATION_TYPE_MIN = '2.23';
export const MIGRATION_UUID_MIN = '2.59';
export const MIGRATION_USER_PROJECT_MIN = '2.80';

/** Non-admins see the events of an action (without traceback). */
export const ACTION_EVENTS_NON_ADMIN_MIN = '2.51';
export const ACTION_UPDATED_AT_MIN = '2.58';
/** Events carry `hostId` (everyone) and `host` (admin). */
export const ACTION_EVENT_HOST_MIN = '2.62';
export const ACTION_EVENT_DETAILS_MIN = '2.84';

// ---------------------------------------------------------------------------------------------
// Migrations (compute/migrations.py, compute/server_migrations.py)

/** `migrations.py`: the live-migration statuses that get links. */
const LIVE_MIGRATION_IN_PROGRESS = new Set(['queued', 'preparing', 'running', 'post-migrating']);

/**
 * `GET /os-migrations` entry (`_output`). The caller drops hidden migrations (Nova filters
 * `hidden` rows out of the list). `cross_cell_move`, `hidden`, `deleted*` and the memory/disk
 * counters are never shown; `migration_type` ≥2.23, plus `links` (to
 * `/servers/{uuid}/migrations/{id}`) for a live migration in progress; `uuid` ≥2.59;
 * `user_id` and `project_id` ≥2.80.
 */
export function migrationView(migration: Migration, version: ApiVersion, ctx: LinkContext): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: migration.id,
    status: migration.status,
    instance_uuid: migration.instanceUuid,
    source_node: migration.sourceNode,
    source_compute: migration.sourceCompute,
    dest_node: migration.destNode,
    dest_compute: migration.destCompute,
    dest_host: migration.destHost,
    old_instance_type_id: migration.oldInstanceTypeId,
    new_instance_type_id: migration.newInstanceTypeId,
    created_at: subsecondTime(migration.createdAt),
    updated_at: subsecondTime(migration.updatedAt),
  };
  if (version.atLeast(MIGRATION_TYPE_MIN)) {
    out.migration_type = migration.migrationType;
    if (migration.migrationType === 'live-migration' && LIVE_MIGRATION_IN_PROGRESS.has(migration.status)) {
      out.links = resourceLinks(ctx.baseUrl, ctx.urlProjectId, `servers/${migration.instanceUuid}/migrations`, String(migration.id));
    }
  }
  if (version.atLeast(MIGRATION_UUID_MIN)) out.uuid = migration.uuid;
  if (version.atLeast(MIGRATION_USER_PROJECT_MIN)) {
    out.user_id = migration.userId;
    out.project_id = migration.projectId;
  }
  return out;
}

/**
 * `GET /servers/{id}/migrations[/{mid}]` entry (≥2.23, server_migrations.py `output`):
 * `uuid` ≥2.59; `user_id` and `project_id` ≥2.80.
 */
export function serverMigrationView(migration: Migration, version: ApiVersion): Record<string, unknown> {
  const out: Record<string, unknown> = {
    created_at: subsecondTime(migration.createdAt),
    dest_compute: migration.destCompute,
    dest_host: migration.destHost,
    dest_node: migration.destNode,
    disk_processed_bytes: migration.diskProcessed,
    disk_remaining_bytes: migration.diskRemaining,
    disk_total_bytes: migration.diskTotal,
    id: migration.id,
    memory_processed_bytes: migration.memoryProcessed,
    memory_remaining_bytes: migration.memoryRemaining,
    memory_total_bytes: migration.memoryTotal,
    server_uuid: migration.instanceUuid,
    source_compute: migration.sourceCompute,
    source_node: migration.sourceNode,
    status: migration.status,
    updated_at: subsecondTime(migration.updatedAt),
  };
  if (version.atLeast(MIGRATION_UUID_MIN)) out.uuid = migration.uuid;
  if (version.atLeast(MIGRATION_USER_PROJECT_MIN)) {
    out.user_id = migration.userId;
    out.project_id = migration.projectId;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Instance actions (compute/instance_actions.py)

export interface ActionViewer {
  /** Admin passes `os-instance-actions:events` and `events:details` (both ADMIN by default). */
  isAdmin: boolean;
  /** The server's project, used for `hostId` when the action has no project (periodic tasks). */
  instanceProjectId?: string;
}

/** `GET /servers/{id}/os-instance-actions` entry: `updated_at` ≥2.58. */
export function instanceActionView(action: InstanceAction, version: ApiVersion, _viewer?: ActionViewer): Record<string, unknown> {
  const out: Record<string, unknown> = {
    action: action.action,
    instance_uuid: action.instanceUuid,
    request_id: action.requestId,
    user_id: action.userId,
    project_id: action.projectId,
    start_time: subsecondTime(action.startTime),
    message: action.message,
  };
  if (version.atLeast(ACTION_UPDATED_AT_MIN)) out.updated_at = subsecondTime(action.updatedAt);
  return out;
}

function eventView(
  e: InstanceActionEvent,
  projectId: string,
  opts: { traceback: boolean; host: boolean; hostId: boolean; details: boolean },
): Record<string, unknown> {
  const out: Record<string, unknown> = {
    event: e.event,
    start_time: subsecondTime(e.startTime),
    finish_time: subsecondTime(e.finishTime),
    result: e.result,
  };
  if (opts.traceback) out.traceback = e.traceback;
  if (opts.host) out.host = e.host;
  if (opts.hostId) out.hostId = generateHostId(e.host, projectId);
  if (opts.details) out.details = e.details;
  return out;
}

/**
 * `GET /servers/{id}/os-instance-actions/{request_id}`: the action plus `events` for admins
 * (with `traceback`; `host` ≥2.62; `details` ≥2.84) and, from 2.51, for non-admins (no
 * traceback, host or details). `hostId` ≥2.62 for everyone who sees events.
 */
export function instanceActionDetailView(action: InstanceAction, version: ApiVersion, viewer: ActionViewer): Record<string, unknown> {
  const out = instanceActionView(action, version, viewer);
  const showEvents = viewer.isAdmin || version.atLeast(ACTION_EVENTS_NON_ADMIN_MIN);
  if (!showEvents) return out;
  const opts = {
    traceback: viewer.isAdmin,
    host: viewer.isAdmin && version.atLeast(ACTION_EVENT_HOST_MIN),
    hostId: version.atLeast(ACTION_EVENT_HOST_MIN),
    details: viewer.isAdmin && version.atLeast(ACTION_EVENT_DETAILS_MIN),
  };
  const projectId = action.projectId || viewer.instanceProjectId || '';
  out.events = action.events.map((e) => eventView(e, projectId, opts));
  return out;
}
