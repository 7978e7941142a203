/**
 * The volume as the API shows it, per microversion and caller, after C/api/v2/views/volumes.py,
 * C/api/v3/views/volumes.py and the contrib attribute extensions (tenant, host, migration status),
 * which upstream's v3 API always loads.
 */
import type { ApiRequest } from '../core/api.js';
import type { AuthContext } from '../core/auth.js';
import type { ApiVersion } from '../core/microversion.js';
import { allowed, registerPolicies } from '../core/policy.js';
import { upstreamTime, type Volume } from './model.js';

registerPolicies({
  'volume_extension:volume_tenant_attribute': 'admin_or_owner',
  'volume_extension:volume_host_attribute': 'admin_api',
  'volume_extension:volume_mig_status_attribute': 'admin_api',
});

export interface ViewContext {
  auth: AuthContext;
  version: ApiVersion;
  /** `http://host/volume/v3` */
  baseUrl: string;
}

export function viewContext(req: ApiRequest): ViewContext {
  return { auth: req.auth, version: req.version, baseUrl: req.baseUrl };
}

/** self (versioned) and bookmark (unversioned) links, as upstream's ViewBuilder._get_links. */
export function volumeLinks(ctx: ViewContext, v: Pick<Volume, 'id' | 'projectId'>): { href: string; rel: string }[] {
  const root = ctx.baseUrl.replace(/\/v3$/, '');
  return [
    { href: `${ctx.baseUrl}/${v.projectId}/volumes/${v.id}`, rel: 'self' },
    { href: `${root}/${v.projectId}/volumes/${v.id}`, rel: 'bookmark' },
  ];
}

/** Only attachments whose status is `attached` are listed (upstream _get_attachments). */
export function attachmentsView(v: Volume, isAdmin: boolean): Record<string, unknown>[] {
  return Object.entries(v.attachments ?? {})
    .filter(([, a]) => a.status === 'attached')
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([attachmentId, a]) => ({
      id: v.id,
      attachment_id: attachmentId,
      volume_id: v.id,
      server_id: a.instanceUuid,
      host_name: isAdmin ? a.host : null,
      device: a.mountpoint ?? null,
      attached_at: upstreamTime(a.attachedAt),
    }));
}

/** The admin metadata every user sees, over the volume's own (C/api/api_utils.py add_visible_admin_metadata). */
const VISIBLE_ADMIN_METADATA = ['readonly', 'attached_mode'];

export function visibleMetadata(v: Pick<Volume, 'metadata' | 'adminMetadata'>): Record<string, string> {
  const out = { ...(v.metadata ?? {}) };
  for (const k of VISIBLE_ADMIN_METADATA) if (v.adminMetadata?.[k] !== undefined) out[k] = v.adminMetadata[k]!;
  return out;
}

export function volumeSummary(ctx: ViewContext, v: Volume): Record<string, unknown> {
  return { id: v.id, name: v.name, links: volumeLinks(ctx, v) };
}

/**
 * The v3 detail view. `extended`: the contrib attribute extensions (tenant, host, migration
 * status) too, which upstream adds to show and the detail list only (their `@wsgi.extends` hooks
 * are `show` and `detail`): create, update and manage answer without them.
 */
export function volumeDetail(ctx: ViewContext, v: Volume, extended = false): Record<string, unknown> {
  const { auth, version } = ctx;
  const out: Record<string, unknown> = {
    id: v.id,
    status: v.status,
    size: v.size,
    availability_zone: v.availabilityZone,
    created_at: upstreamTime(v.createdAt),
    updated_at: upstreamTime(v.updatedAt),
    attachments: attachmentsView(v, auth.isAdmin),
    name: v.name,
    description: v.description,
    volume_type: v.volumeTypeName,
    snapshot_id: v.snapshotId ?? null,
    source_volid: v.sourceVolid ?? null,
    metadata: visibleMetadata(v),
    links: volumeLinks(ctx, v),
    user_id: v.userId,
    bootable: String(v.bootable).toLowerCase(),
    encrypted: false,
    replication_status: v.replicationStatus,
    consistencygroup_id: null,
    multiattach: v.multiattach,
  };
  if (auth.isAdmin) out.migration_status = v.migrationStatus;
  if (extended && allowed(auth, 'volume_extension:volume_tenant_attribute', { projectId: v.projectId })) out['os-vol-tenant-attr:tenant_id'] = v.projectId;
  if (extended && allowed(auth, 'volume_extension:volume_host_attribute')) out['os-vol-host-attr:host'] = v.host;
  if (extended && allowed(auth, 'volume_extension:volume_mig_status_attribute')) {
    out['os-vol-mig-status-attr:migstat'] = v.migrationStatus;
    out['os-vol-mig-status-attr:name_id'] = null;
  }
  if (version.atLeast('3.13')) out.group_id = null;
  if (auth.isAdmin && version.atLeast('3.21')) out.provider_id = null;
  if (version.atLeast('3.48')) {
    // Before 3.69 a NULL shared_targets is shown as true (clients then take the safe, locking path).
    out.shared_targets = v.sharedTargets === null && !version.atLeast('3.69') ? true : v.sharedTargets;
    out.service_uuid = v.serviceUuid;
  }
  if (auth.isAdmin && version.atLeast('3.61')) out.cluster_name = null;
  if (version.atLeast('3.63')) out.volume_type_id = v.volumeTypeId;
  if (version.atLeast('3.65')) out.consumes_quota = true;
  // C/api/contrib/volume_image_metadata.py: shown for a volume made from an image, on show and the
  // detail list only (its `@wsgi.extends` hooks, as the attributes above): not in a create's answer.
  if (extended && v.imageMetadata) out.volume_image_metadata = v.imageMetadata;
  return out;
}
