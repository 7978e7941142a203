/**
 * The Nova API's server-side response bodies, as nova 26.2.2 (API 2.1–2.93) shapes them:
 * servers (views/servers.py `basic` / `show`, the status of common.py `_STATE_MAP`) and volume
 * attachments (compute/volumes.py `_translate_attachment_detail_view`); migrations and instance
 * actions are in history-views.ts.
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
import type { BlockDeviceMapping, Instance, Port, TaskState, VmState } from './model.js';

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
// Status mapping

/**
 * nova/api/openstack/common.py `_STATE_MAP`: (vm_state, task_state) -> API status. A task_state not
 * listed for the vm_state falls back to the vm_state's `default`.
 */
const STATE_MAP: Record<string, Record<string, string>> = {
  active: {
    default: 'ACTIVE',
    rebooting: 'REBOOT',
    reboot_pending: 'REBOOT',
    reboot_started: 'REBOOT',
    rebooting_hard: 'HARD_REBOOT',
    reboot_pending_hard: 'HARD_REBOOT',
    reboot_started_hard: 'HARD_REBOOT',
    updating_password: 'PASSWORD',
    rebuilding: 'REBUILD',
    rebuild_block_device_mapping: 'REBUILD',
    rebuild_spawning: 'REBUILD',
    migrating: 'MIGRATING',
    resize_prep: 'RESIZE',
    resize_migrating: 'RESIZE',
    resize_migrated: 'RESIZE',
    resize_finish: 'RESIZE',
  },
  building: { default: 'BUILD' },
  stopped: {
    default: 'SHUTOFF',
    resize_prep: 'RESIZE',
    resize_migrating: 'RESIZE',
    resize_migrated: 'RESIZE',
    resize_finish: 'RESIZE',
    rebuilding: 'REBUILD',
    rebuild_block_device_mapping: 'REBUILD',
    rebuild_spawning: 'REBUILD',
  },
  resized: { default: 'VERIFY_RESIZE', resize_reverting: 'REVERT_RESIZE' },
  paused: { default: 'PAUSED', migrating: 'MIGRATING' },
  suspended: { default: 'SUSPENDED' },
  rescued: { default: 'RESCUE' },
  error: { default: 'ERROR', rebuilding: 'REBUILD', rebuild_block_device_mapping: 'REBUILD', rebuild_spawning: 'REBUILD' },
  deleted: { default: 'DELETED' },
  'soft-delete': { default: 'SOFT_DELETED' },
  shelved: { default: 'SHELVED' },
  shelved_offloaded: { default: 'SHELVED_OFFLOADED' },
};

/** The API status of a server (`common.status_from_state`). */
export function statusFromState(vmState: VmState, taskState: TaskState | null): string {
  const byTask = STATE_MAP[vmState] ?? { default: 'UNKNOWN' };
  return (taskState && byTask[taskState]) || byTask.default || 'UNKNOWN';
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
