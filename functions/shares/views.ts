/**
 * Shares, export locations, access rules and share instances as the Manila API shows them, per
 * microversion (M/api/views/shares.py, export_locations.py, share_accesses.py,
 * share_instance.py).
 */
import { createHash } from 'node:crypto';
import type { ApiRequest } from '../core/api.js';
import type { AuthContext } from '../core/auth.js';
import type { ApiVersion } from '../core/microversion.js';
import { upstreamTime, type AccessRule, type Share } from './model.js';

export interface ShareViewContext {
  auth: AuthContext;
  version: ApiVersion;
  baseUrl: string;
}

export const shareViewContext = (req: ApiRequest): ShareViewContext => ({ auth: req.auth, version: req.version, baseUrl: req.baseUrl });

/** A stable UUID for a share's n-th export location (Ferry keeps paths, not location rows). */
export function exportLocationId(share: Pick<Share, 'instanceId'>, path: string): string {
  const h = createHash('sha256').update(`ferry-export:${share.instanceId}:${path}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

function links(ctx: ShareViewContext, s: Share) {
  const bookmark = ctx.baseUrl.replace(/\/v2$/, '');
  return [
    { href: `${ctx.baseUrl}/${s.projectId}/shares/${s.id}`, rel: 'self' },
    { href: `${bookmark}/${s.projectId}/shares/${s.id}`, rel: 'bookmark' },
  ];
}

/** The `access_rules_status` a share shows (2.10+): the worst of its rules' states. */
export function accessRulesStatus(s: Share): string {
  const states = Object.values(s.accessRules).map((r) => r.state);
  if (states.includes('error')) return 'error';
  if (states.some((x) => x !== 'active')) return 'syncing';
  return 'active';
}

export function shareSummary(ctx: ShareViewContext, s: Share): Record<string, unknown> {
  return { id: s.id, name: s.name, links: links(ctx, s) };
}

export function shareDetail(ctx: ShareViewContext, s: Share): Record<string, unknown> {
  const v = ctx.version;
  const view: Record<string, unknown> = {
    id: s.id,
    size: s.size,
    availability_zone: s.availabilityZone,
    created_at: upstreamTime(s.createdAt),
    status: s.status,
    name: s.name,
    description: s.description,
    project_id: s.projectId,
    snapshot_id: null,
    share_network_id: s.shareNetworkId,
    share_proto: s.shareProto,
    metadata: s.metadata,
    share_type: s.shareTypeId,
    volume_type: s.shareTypeName,
    is_public: s.isPublic,
    links: links(ctx, s),
  };
  // Export locations moved to their own API at 2.9.
  if (!v.atLeast('2.9')) {
    view.export_location = s.exportLocations[0] ?? null;
    view.export_locations = s.exportLocations;
  }
  if (ctx.auth.isAdmin) view.host = s.host;
  if (v.atLeast('2.2')) view.snapshot_support = false;
  if (v.atLeast('2.4')) {
    view.consistency_group_id = null;
    view.source_cgsnapshot_member_id = null;
  }
  if (v.atLeast('2.5')) view.task_state = s.taskState;
  if (v.atLeast('2.6')) view.share_type_name = s.shareTypeName;
  if (v.atLeast('2.10')) view.access_rules_status = accessRulesStatus(s);
  if (v.atLeast('2.11')) {
    view.replication_type = null;
    view.has_replicas = false;
  }
  if (v.atLeast('2.16')) view.user_id = s.userId;
  if (v.atLeast('2.24')) view.create_share_from_snapshot_support = false;
  if (v.atLeast('2.27')) view.revert_to_snapshot_support = false;
  if (v.atLeast('2.31')) {
    view.share_group_id = null;
    view.source_share_group_snapshot_member_id = null;
    delete view.consistency_group_id;
    delete view.source_cgsnapshot_member_id;
  }
  if (v.atLeast('2.32')) view.mount_snapshot_support = false;
  if (v.atLeast('2.54')) view.progress = s.status === 'available' ? '100%' : s.status === 'creating' ? '0%' : null;
  if (v.atLeast('2.69')) {
    view.is_soft_deleted = false;
    view.scheduled_to_be_deleted_at = null;
  }
  if (v.atLeast('2.71')) view.updated_at = upstreamTime(s.updatedAt);
  return view;
}

export function exportLocationView(ctx: ShareViewContext, s: Share, path: string, index: number): Record<string, unknown> {
  const view: Record<string, unknown> = { id: exportLocationId(s, path), path };
  if (ctx.version.atLeast('2.14')) view.preferred = index === 0;
  if (ctx.auth.isAdmin) {
    view.share_instance_id = s.instanceId;
    view.is_admin_only = false;
  }
  if (ctx.version.atLeast('2.87')) view.metadata = {};
  return view;
}

export function accessRuleView(ctx: ShareViewContext, s: Share, r: AccessRule): Record<string, unknown> {
  const view: Record<string, unknown> = {
    id: r.id,
    share_id: s.id,
    access_type: r.accessType,
    access_to: r.accessTo,
    access_level: r.accessLevel,
    state: ctx.version.atLeast('2.28') ? r.state : r.state === 'active' ? 'active' : r.state === 'error' ? 'error' : 'new',
    created_at: upstreamTime(r.createdAt),
    updated_at: upstreamTime(r.updatedAt),
  };
  if (ctx.version.atLeast('2.21')) view.access_key = null;
  if (ctx.version.atLeast('2.45')) view.metadata = {};
  return view;
}

/** The legacy `access_list` action's entries (M/api/views/share_accesses.py summary_view). */
export function accessListEntry(ctx: ShareViewContext, s: Share, r: AccessRule): Record<string, unknown> {
  const view = accessRuleView(ctx, s, r);
  delete view.share_id;
  return view;
}

/** Every instance of a share: its own, plus a migration's destination (`migrating_to`) or retired source (`inactive`). */
export function shareInstanceViews(ctx: ShareViewContext, s: Share): Record<string, unknown>[] {
  const views = [shareInstanceView(ctx, s)];
  for (const other of [s.migration?.destination, s.migration?.retired]) {
    if (!other) continue;
    const view = shareInstanceView(ctx, { ...s, instanceId: other.id, host: other.host, status: other.status, exportLocations: other.exportLocations, migration: null });
    if (ctx.version.atLeast('2.54')) view.progress = other.status === 'available' ? '100%' : other.status === 'migrating_to' ? '0%' : null;
    views.push(view);
  }
  return views;
}

export function shareInstanceView(ctx: ShareViewContext, s: Share): Record<string, unknown> {
  const view: Record<string, unknown> = {
    id: s.instanceId,
    share_id: s.id,
    availability_zone: s.availabilityZone,
    created_at: upstreamTime(s.createdAt),
    host: s.host,
    status: s.status,
    share_network_id: s.shareNetworkId,
    share_server_id: null,
  };
  if (!ctx.version.atLeast('2.9')) {
    view.export_location = s.exportLocations[0] ?? null;
    view.export_locations = s.exportLocations;
  }
  if (ctx.version.atLeast('2.10')) view.access_rules_status = accessRulesStatus(s);
  if (ctx.version.atLeast('2.11')) {
    view.replica_state = null;
  }
  if (ctx.version.atLeast('2.22')) view.share_type_id = s.shareTypeId;
  if (ctx.version.atLeast('2.30')) view.cast_rules_to_readonly = s.migration?.readOnlyCast ?? false;
  if (ctx.version.atLeast('2.54')) view.progress = s.status === 'available' ? '100%' : null;
  if (ctx.version.atLeast('2.71')) view.updated_at = upstreamTime(s.updatedAt);
  return view;
}
