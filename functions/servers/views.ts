/**
 * The Nova API's server-side response bodies, as nova 26.2.2 (API 2.1–2.93) shapes them:
 * servers (views/servers.py `basic` / `show`), volume attachments (compute/volumes.py
 * `_translate_attachment_detail_view`), migrations (compute/migrations.py `_output`,
 * compute/server_migrations.py `output`) and instance actions (compute/instance_actions.py).
 *
 * Pure functions of the records, the request's microversion, the link context and who is asking
 * (no I/O), so each microversion rule is unit tested.
 *
 * Times, as Nova serializes them:
 * - `utils.isotime` (server `created`/`updated`, fault `created`): `2019-04-23T15:19:09Z`;
 * - a datetime through `jsonutils.dumps` (launched_at/terminated_at, migrations, instance
 *   actions and events): `2019-04-23T15:19:10.855016` (microseconds, no zone).
 */
import { createHash } from 'node:crypto';
import type { ApiVersion } from '../core/microversion.js';
import { resourceLinks, type LinkContext } from '../compute/views.js';
import { DEFAULT_AVAILABILITY_ZONE } from '../compute/model.js';
import type { BlockDeviceMapping, Instance, InstanceAction, InstanceActionEvent, Migration, Port } from './model.js';
import { statusFromState } from './model.js';

// ---------------------------------------------------------------------------------------------
// Microversion thresholds

/** Extended server attributes beyond host/instance_name/hypervisor_hostname; delete_on_termination in volumes_attached. */
export const SERVER_EXTENDED_ATTRS_MIN = '2.3';
export const SERVER_LOCKED_MIN = '2.9';
export const SERVER_HOST_STATUS_MIN = '2.16';
export const SERVER_DESCRIPTION_MIN = '2.19';
export const SERVER_TAGS_MIN = '2.26';
/** The flavor is embedded (vcpus, ram, ...) instead of `{id, links}`. */
export const SERVER_EMBEDDED_FLAVOR_MIN = '2.47';
export const SERVER_TRUSTED_CERTS_MIN = '2.63';
export const SERVER_LOCKED_REASON_MIN = '2.73';
/** `OS-EXT-SRV-ATTR:hostname` is shown to non-admins too. */
export const SERVER_HOSTNAME_ALL_MIN = '2.90';

export const VOLUME_ATTACHMENT_TAG_MIN = '2.70';
export const VOLUME_ATTACHMENT_DOT_MIN = '2.79';
export const VOLUME_ATTACHMENT_IDS_MIN = '2.89';

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
// Times

const ISO_RE = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]00:?00)?$/;

/** `utils.isotime`: `2019-04-23T15:19:09Z` (seconds, UTC `Z`). */
export function isoTime(iso: string | null | undefined): string | null {
  if (!iso) return null;
  const m = ISO_RE.exec(iso);
  if (m) return `${m[1]}Z`;
  return `${new Date(iso).toISOString().slice(0, 19)}Z`;
}

/** A datetime serialized by `jsonutils`: `2019-04-23T15:19:10.855016` (microseconds, no zone). */
export function subsecondTime(iso: string | null | undefined): string | null {
  if (!iso) return null;
  const m = ISO_RE.exec(iso);
  if (m) return `${m[1]}.${(m[2] ?? '').padEnd(6, '0').slice(0, 6)}`;
  const d = new Date(iso).toISOString();
  return `${d.slice(0, 19)}.${d.slice(20, 23)}000`;
}

// ---------------------------------------------------------------------------------------------
// Helpers

/** `utils.generate_hostid`: sha224 of project id + host, '' without a host. */
export function generateHostId(host: string | null | undefined, projectId: string): string {
  if (!host) return '';
  return createHash('sha224').update(`${projectId}${host}`, 'utf8').digest('hex');
}

/** `utils.sanitize_hostname` (as `_populate_instance_names` applies it to the display name). */
export function sanitizeHostname(name: string): string {
  // Keep U+0000–U+00FF only, truncate to 63, then the RFC-952 clean-up.
  let h = Array.from(name)
    .filter((c) => c.codePointAt(0)! <= 0xff)
    .join('')
    .slice(0, 63);
  h = h.replace(/[ _.]/g, '-');
  h = h.replace(/[^\p{L}\p{N}_.-]+/gu, '');
  h = h.toLowerCase();
  h = h.replace(/^[.-]+|[.-]+$/g, '');
  return h;
}

/** The hostname Nova gives an instance: the sanitized name, or `Server-<uuid>` when that is empty. */
export function instanceHostname(instance: Pick<Instance, 'name' | 'uuid' | 'systemMetadata'>): string {
  return instance.systemMetadata.hostname || sanitizeHostname(instance.name) || `Server-${instance.uuid}`;
}

/**
 * `OS-EXT-SRV-ATTR:instance_name`. Nova uses `instance-%08x` of the integer primary key; Ferry's
 * instances have no integer id, so it uses the first 8 hex digits of the uuid (same shape,
 * `instance-1a2b3c4d`), unless system_metadata carries an `instance_name`.
 */
export function instanceName(instance: Pick<Instance, 'uuid' | 'systemMetadata'>): string {
  return instance.systemMetadata.instance_name || `instance-${instance.uuid.replace(/-/g, '').slice(0, 8)}`;
}

/**
 * `OS-EXT-SRV-ATTR:reservation_id`. Nova draws `r-` plus 8 random base-36 characters at create;
 * Ferry takes system_metadata `reservation_id` if recorded, else `r-` plus the uuid's first 8 hex digits.
 */
export function reservationId(instance: Pick<Instance, 'uuid' | 'systemMetadata'>): string {
  return instance.systemMetadata.reservation_id || `r-${instance.uuid.replace(/-/g, '').slice(0, 8)}`;
}

// ---------------------------------------------------------------------------------------------
// Servers (views/servers.py)

/** Statuses for which `progress` is shown (`_progress_statuses`). */
const PROGRESS_STATUSES = new Set(['ACTIVE', 'BUILD', 'REBUILD', 'RESIZE', 'VERIFY_RESIZE', 'MIGRATING']);
/** Statuses for which a `fault` is shown (`_fault_statuses`). */
const FAULT_STATUSES = new Set(['ERROR', 'DELETED']);

export interface ServerViewer {
  isAdmin: boolean;
  /**
   * `os_compute_api:servers:show:flavor-extra-specs` (≥2.47). Its 26.2.2 default is
   * PROJECT_READER_OR_ADMIN, i.e. anyone allowed to see the server, so it defaults to true.
   */
  flavorExtraSpecs?: boolean;
}

export interface ServerDetailExtra {
  /** The instance's BDMs (those with a volume id become `volumes_attached`). */
  bdms: BlockDeviceMapping[];
  /** The instance's ports (a server with ports is in the `default` security group). */
  ports: Port[];
  /** The `addresses` body, already built from the ports (hidden while building). */
  addresses: Record<string, unknown[]>;
  /** Overrides `instance.imageRef` when given; null or '' means volume-backed. */
  image?: { id: string } | null;
  /** Overrides the computed obfuscated host id. */
  hostId?: string;
  /** `host_status` (≥2.16, admin): UP, DOWN, MAINTENANCE, UNKNOWN, or '' without a host. */
  hostStatus?: string;
  /** `description` (≥2.19); null when none was given. */
  description?: string | null;
  /** `tags` (≥2.26). */
  tags?: string[];
}

/** `GET /servers` entry (`basic`): id, name, links. */
export function serverSummary(instance: Pick<Instance, 'uuid' | 'name'>, ctx: LinkContext): Record<string, unknown> {
  return { id: instance.uuid, name: instance.name, links: resourceLinks(ctx.baseUrl, ctx.urlProjectId, 'servers', instance.uuid) };
}

function bookmarkOnly(ctx: LinkContext, collection: string, id: string): { rel: string; href: string }[] {
  return [resourceLinks(ctx.baseUrl, ctx.urlProjectId, collection, id)[1]!];
}

/** `GET /servers/detail` entry and `GET /servers/{id}` (`show`). */
export function serverDetail(instance: Instance, extra: ServerDetailExtra, version: ApiVersion, ctx: LinkContext, viewer: ServerViewer): Record<string, unknown> {
  const status = statusFromState(instance.vmState, instance.taskState);
  const imageId = extra.image !== undefined ? (extra.image?.id ?? '') : instance.imageRef;
  const f = instance.flavor;
  let flavor: Record<string, unknown>;
  if (version.atLeast(SERVER_EMBEDDED_FLAVOR_MIN)) {
    flavor = { vcpus: f.vcpus, ram: f.memoryMb, disk: f.rootGb, ephemeral: f.ephemeralGb, swap: f.swap, original_name: f.name };
    if (viewer.flavorExtraSpecs ?? true) flavor.extra_specs = { ...f.extraSpecs };
  } else {
    flavor = { id: String(f.flavorid), links: bookmarkOnly(ctx, 'flavors', String(f.flavorid)) };
  }

  const s: Record<string, unknown> = {
    id: instance.uuid,
    name: instance.name,
    status,
    tenant_id: instance.projectId || '',
    user_id: instance.userId || '',
    metadata: { ...instance.metadata },
    hostId: extra.hostId ?? generateHostId(instance.host, instance.projectId),
    image: imageId ? { id: imageId, links: bookmarkOnly(ctx, 'images', imageId) } : '',
    flavor,
    created: isoTime(instance.createdAt),
    updated: isoTime(instance.updatedAt),
    // Addresses are hidden while the server is building.
    addresses: instance.vmState === 'building' ? {} : extra.addresses,
    accessIPv4: '',
    accessIPv6: '',
    links: resourceLinks(ctx.baseUrl, ctx.urlProjectId, 'servers', instance.uuid),
    'OS-DCF:diskConfig': 'MANUAL',
  };

  if (FAULT_STATUSES.has(status) && instance.fault) {
    const fault = instance.fault;
    const fd: Record<string, unknown> = { code: fault.code, created: isoTime(fault.created), message: fault.message };
    if (fault.details && (viewer.isAdmin || fault.code !== 500)) fd.details = fault.details;
    s.fault = fd;
  }
  if (PROGRESS_STATUSES.has(status)) s.progress = instance.progress ?? 0;

  // get_instance_availability_zone: the host's zone once on a host (the default zone unless an
  // aggregate says otherwise), else the zone asked for at boot.
  s['OS-EXT-AZ:availability_zone'] = (instance.host ? instance.availabilityZone || DEFAULT_AVAILABILITY_ZONE : instance.availabilityZone) || '';
  s.config_drive = '';
  s.key_name = instance.keyName;
  s['OS-SRV-USG:launched_at'] = subsecondTime(instance.launchedAt);
  s['OS-SRV-USG:terminated_at'] = subsecondTime(instance.terminatedAt);
  // Neutron's security-group bindings of the server's ports; none without ports.
  if (extra.ports.length > 0) s.security_groups = [{ name: 'default' }];

  if (viewer.isAdmin) {
    s['OS-EXT-SRV-ATTR:host'] = instance.host;
    s['OS-EXT-SRV-ATTR:instance_name'] = instanceName(instance);
    s['OS-EXT-SRV-ATTR:hypervisor_hostname'] = instance.node;
    if (version.atLeast(SERVER_EXTENDED_ATTRS_MIN)) {
      const root = extra.bdms.find((b) => b.bootIndex === 0);
      s['OS-EXT-SRV-ATTR:reservation_id'] = reservationId(instance);
      s['OS-EXT-SRV-ATTR:launch_index'] = 0;
      s['OS-EXT-SRV-ATTR:hostname'] = instanceHostname(instance);
      s['OS-EXT-SRV-ATTR:kernel_id'] = '';
      s['OS-EXT-SRV-ATTR:ramdisk_id'] = '';
      s['OS-EXT-SRV-ATTR:root_device_name'] = root?.deviceName ?? null;
      s['OS-EXT-SRV-ATTR:user_data'] = null;
    }
  }

  s['OS-EXT-STS:task_state'] = instance.taskState;
  s['OS-EXT-STS:vm_state'] = instance.vmState;
  s['OS-EXT-STS:power_state'] = instance.powerState;

  const withDot = version.atLeast(SERVER_EXTENDED_ATTRS_MIN);
  s['os-extended-volumes:volumes_attached'] = extra.bdms
    .filter((b) => b.volumeId)
    .map((b) => (withDot ? { id: b.volumeId, delete_on_termination: b.deleteOnTermination } : { id: b.volumeId }));

  if (version.atLeast(SERVER_HOST_STATUS_MIN) && viewer.isAdmin && extra.hostStatus !== undefined) s.host_status = extra.hostStatus;
  if (version.atLeast(SERVER_LOCKED_MIN)) s.locked = !!instance.locked;
  if (version.atLeast(SERVER_LOCKED_REASON_MIN)) s.locked_reason = instance.systemMetadata.locked_reason ?? null;
  if (version.atLeast(SERVER_DESCRIPTION_MIN)) s.description = extra.description ?? null;
  if (version.atLeast(SERVER_TAGS_MIN)) s.tags = [...(extra.tags ?? [])];
  if (version.atLeast(SERVER_TRUSTED_CERTS_MIN)) s.trusted_image_certificates = null;
  if (version.atLeast(SERVER_HOSTNAME_ALL_MIN) && !viewer.isAdmin) s['OS-EXT-SRV-ATTR:hostname'] = instanceHostname(instance);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Volume attachments (compute/volumes.py)

/**
 * `GET /servers/{id}/os-volume_attachments[/{volId}]` entry (`_translate_attachment_detail_view`):
 * `device` only when the BDM has one; `tag` ≥2.70; `delete_on_termination` ≥2.79; ≥2.89
 * `attachment_id` and `bdm_uuid` and no `id`.
 */
export function volumeAttachmentView(bdm: BlockDeviceMapping, serverId: string, version: ApiVersion): Record<string, unknown> {
  const ids = version.atLeast(VOLUME_ATTACHMENT_IDS_MIN);
  const d: Record<string, unknown> = {};
  if (!ids) d.id = bdm.volumeId;
  d.volumeId = bdm.volumeId;
  d.serverId = serverId;
  if (bdm.deviceName) d.device = bdm.deviceName;
  if (version.atLeast(VOLUME_ATTACHMENT_TAG_MIN)) d.tag = bdm.tag;
  if (version.atLeast(VOLUME_ATTACHMENT_DOT_MIN)) d.delete_on_termination = bdm.deleteOnTermination;
  if (ids) {
    d.attachment_id = bdm.attachmentId;
    d.bdm_uuid = bdm.uuid;
  }
  return d;
}

/**
 * The 200 body of `POST /servers/{id}/os-volume_attachments` (built inline in `create`):
 * always `id` and `device` (even null); `tag` ≥2.70; `delete_on_termination` ≥2.79; no 2.89 ids.
 */
export function volumeAttachmentCreateView(
  att: { volumeId: string; device: string | null; tag: string | null; deleteOnTermination: boolean },
  serverId: string,
  version: ApiVersion,
): Record<string, unknown> {
  const d: Record<string, unknown> = { id: att.volumeId, serverId, volumeId: att.volumeId, device: att.device };
  if (version.atLeast(VOLUME_ATTACHMENT_TAG_MIN)) d.tag = att.tag;
  if (version.atLeast(VOLUME_ATTACHMENT_DOT_MIN)) d.delete_on_termination = att.deleteOnTermination;
  return d;
}

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
