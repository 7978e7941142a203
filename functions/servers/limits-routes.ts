/**
 * Nova's limits (nova/api/openstack/compute/limits.py, views/limits.py) and os-quota-sets
 * (quota_sets.py), read-only. Ferry enforces no Nova quota (the only cap, at most 10 servers per
 * multi-create request, is a per-request bound, not a project total), so every limit is -1
 * (unlimited, as Nova shows it) and the usage is counted from the project's instance records.
 * Changing a quota is refused (docs/compatibility.md): there is nothing to enforce it with.
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest } from '../core/errors.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { listInstances } from './repo.js';

export const LIMITS_POLICIES = {
  limits: 'os_compute_api:limits',
  limitsOtherProject: 'os_compute_api:limits:other_project',
  quotaShow: 'os_compute_api:os-quota-sets:show',
  quotaDetail: 'os_compute_api:os-quota-sets:detail',
  quotaDefaults: 'os_compute_api:os-quota-sets:defaults',
  quotaUpdate: 'os_compute_api:os-quota-sets:update',
  quotaDelete: 'os_compute_api:os-quota-sets:delete',
} as const;

registerPolicies({
  [LIMITS_POLICIES.limits]: '@',
  [LIMITS_POLICIES.limitsOtherProject]: 'admin_api',
  [LIMITS_POLICIES.quotaShow]: 'admin_or_owner',
  [LIMITS_POLICIES.quotaDetail]: 'admin_or_owner',
  [LIMITS_POLICIES.quotaDefaults]: '@',
  [LIMITS_POLICIES.quotaUpdate]: 'admin_api',
  [LIMITS_POLICIES.quotaDelete]: 'admin_api',
});

/** nova.quota.QUOTAS' resources. */
const RESOURCES = [
  'cores',
  'injected_files',
  'injected_file_content_bytes',
  'injected_file_path_bytes',
  'instances',
  'key_pairs',
  'metadata_items',
  'ram',
  'server_groups',
  'server_group_members',
  'fixed_ips',
  'floating_ips',
  'security_groups',
  'security_group_rules',
] as const;

/** What 2.36 (nova-network proxies gone) and 2.57 (personality gone) drop from quota sets. */
const FILTERED_QUOTAS_V236 = ['fixed_ips', 'floating_ips', 'security_group_rules', 'security_groups'];
const FILTERED_QUOTAS_V257 = [...FILTERED_QUOTAS_V236, 'injected_files', 'injected_file_content_bytes', 'injected_file_path_bytes'];
/** The limits API filters a slightly different list (fixed_ips and path bytes have no limit name). */
const FILTERED_LIMITS_V236 = ['floating_ips', 'security_groups', 'security_group_rules'];
const FILTERED_LIMITS_V257 = [...FILTERED_LIMITS_V236, 'injected_files', 'injected_file_content_bytes'];

/** views/limits.py limit_names. */
const LIMIT_NAMES: Record<string, string[]> = {
  ram: ['maxTotalRAMSize'],
  instances: ['maxTotalInstances'],
  cores: ['maxTotalCores'],
  key_pairs: ['maxTotalKeypairs'],
  floating_ips: ['maxTotalFloatingIps'],
  metadata_items: ['maxServerMeta', 'maxImageMeta'],
  injected_files: ['maxPersonality'],
  injected_file_content_bytes: ['maxPersonalitySize'],
  security_groups: ['maxSecurityGroups'],
  security_group_rules: ['maxSecurityGroupRules'],
  server_groups: ['maxServerGroups'],
  server_group_members: ['maxServerGroupMembers'],
};

const USED_NAMES: Record<string, string> = {
  totalRAMUsed: 'ram',
  totalCoresUsed: 'cores',
  totalInstancesUsed: 'instances',
  totalFloatingIpsUsed: 'floating_ips',
  totalSecurityGroupsUsed: 'security_groups',
  totalServerGroupsUsed: 'server_groups',
};

interface QuotaValue {
  limit: number;
  in_use: number;
}

/**
 * The project's quotas with usage. Nova counts every instance row not deleted (soft-deleted and
 * shelved-offloaded ones included), their cores and RAM from the instance's flavor.
 */
export async function projectQuotas(projectId: string): Promise<Record<string, QuotaValue>> {
  const mine = (await listInstances()).map((s) => s.instance).filter((i) => i.projectId === projectId && !i.hidden && i.vmState !== 'deleted');
  const used: Record<string, number> = {
    instances: mine.length,
    cores: mine.reduce((n, i) => n + i.flavor.vcpus, 0),
    ram: mine.reduce((n, i) => n + i.flavor.memoryMb, 0),
  };
  return Object.fromEntries(RESOURCES.map((r) => [r, { limit: -1, in_use: used[r] ?? 0 }]));
}

function filteredQuotas(req: ApiRequest): string[] {
  if (req.version.atLeast('2.57')) return FILTERED_QUOTAS_V257;
  if (req.version.atLeast('2.36')) return FILTERED_QUOTAS_V236;
  return [];
}

/** _format_quota_set: the id (when given), then each resource not filtered out. */
function quotaSet(id: string | null, values: Record<string, unknown>, filtered: string[]) {
  const set: Record<string, unknown> = id ? { id } : {};
  for (const r of RESOURCES) if (!filtered.includes(r) && r in values) set[r] = values[r];
  return { quota_set: set };
}

async function limits(req: ApiRequest) {
  let project = req.auth.projectId;
  const other = req.query.get('tenant_id');
  if (req.query.has('tenant_id') && other !== null) {
    authorize(req.auth, LIMITS_POLICIES.limitsOtherProject);
    project = other;
  }
  const filtered = req.version.atLeast('2.57') ? FILTERED_LIMITS_V257 : req.version.atLeast('2.36') ? FILTERED_LIMITS_V236 : [];
  // 2.39 removed the image proxy, and maxImageMeta with it.
  const maxImageMeta = !req.version.atLeast('2.39');
  const quotas = await projectQuotas(project);
  const absolute: Record<string, number> = {};
  for (const [name, q] of Object.entries(quotas)) {
    if (!(name in LIMIT_NAMES) || filtered.includes(name)) continue;
    for (const limitName of LIMIT_NAMES[name]!) if (maxImageMeta || limitName !== 'maxImageMeta') absolute[limitName] = q.limit;
  }
  for (const [display, key] of Object.entries(USED_NAMES)) if (!filtered.includes(key)) absolute[display] = quotas[key]!.in_use;
  return json(200, { limits: { rate: [], absolute } });
}

async function showQuotas(req: ApiRequest) {
  const id = req.params.project_id!;
  authorize(req.auth, LIMITS_POLICIES.quotaShow, { projectId: id });
  const q = await projectQuotas(id);
  return json(200, quotaSet(id, Object.fromEntries(Object.entries(q).map(([k, v]) => [k, v.limit])), filteredQuotas(req)));
}

async function showDetail(req: ApiRequest) {
  const id = req.params.project_id!;
  authorize(req.auth, LIMITS_POLICIES.quotaDetail, { projectId: id });
  const q = await projectQuotas(id);
  // Nova's get_reserved() is 0 since quotas are counted, not reserved.
  return json(200, quotaSet(id, Object.fromEntries(Object.entries(q).map(([k, v]) => [k, { ...v, reserved: 0 }])), filteredQuotas(req)));
}

async function showDefaults(req: ApiRequest) {
  const id = req.params.project_id!;
  authorize(req.auth, LIMITS_POLICIES.quotaDefaults, { projectId: id });
  return json(200, quotaSet(id, Object.fromEntries(RESOURCES.map((r) => [r, -1])), filteredQuotas(req)));
}

/** Nova's update answers its errors with 400 (its only expected error); delete is refused alike. */
const refuse = (action: string) => async (req: ApiRequest) => {
  authorize(req.auth, action, { projectId: req.params.project_id! });
  throw new BadRequest('Ferry enforces no compute quotas, so they cannot be changed (docs/compatibility.md).');
};

export const LIMITS_ROUTES: RouteSpec[] = [
  { method: 'GET', path: '/limits', action: LIMITS_POLICIES.limits, handler: limits },
  { method: 'GET', path: '/os-quota-sets/{project_id}', action: LIMITS_POLICIES.quotaShow, authorizeBy: 'resource', handler: showQuotas },
  { method: 'GET', path: '/os-quota-sets/{project_id}/detail', action: LIMITS_POLICIES.quotaDetail, authorizeBy: 'resource', handler: showDetail },
  { method: 'GET', path: '/os-quota-sets/{project_id}/defaults', action: LIMITS_POLICIES.quotaDefaults, authorizeBy: 'resource', handler: showDefaults },
  { method: 'PUT', path: '/os-quota-sets/{project_id}', action: LIMITS_POLICIES.quotaUpdate, authorizeBy: 'resource', handler: refuse(LIMITS_POLICIES.quotaUpdate) },
  { method: 'DELETE', path: '/os-quota-sets/{project_id}', action: LIMITS_POLICIES.quotaDelete, authorizeBy: 'resource', handler: refuse(LIMITS_POLICIES.quotaDelete) },
];
