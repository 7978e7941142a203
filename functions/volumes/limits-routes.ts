/**
 * Cinder's limits (C/api/v3/limits.py, C/api/views/limits.py) and os-availability-zone
 * (C/api/contrib/availability_zones.py). Neither has a policy check upstream: any authenticated
 * caller may read them ('@' here). Limits are the quotas in force (quota-routes.ts' view), with
 * the project's usage as the used_limits extension adds it (C/api/contrib/used_limits.py, always
 * loaded upstream); Ferry has no rate limits (`rate: []`, as Cinder without its rate middleware).
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { registerPolicies } from '../core/policy.js';
import { effectiveLimit, readLimits, readUsage } from '../quotas/engine.js';
import { listBackendRecords } from './backends.js';
import { cinderBuiltin, countLegacyVolumes } from './quotas.js';
import { availabilityZoneOf } from './scheduler.js';

const POLICIES = { limits: 'volume:limits', zones: 'volume:availability_zones' } as const;
registerPolicies({ [POLICIES.limits]: '@', [POLICIES.zones]: '@' });

/** views/limits.py limit_names: the only resources the absolute limits show. */
const LIMIT_NAMES: Record<string, string> = {
  gigabytes: 'maxTotalVolumeGigabytes',
  backup_gigabytes: 'maxTotalBackupGigabytes',
  volumes: 'maxTotalVolumes',
  snapshots: 'maxTotalSnapshots',
  backups: 'maxTotalBackups',
};

/** used_limits.py quota_map: the usage the extension adds, by resource. */
const USED_NAMES: Record<string, string> = {
  totalVolumesUsed: 'volumes',
  totalGigabytesUsed: 'gigabytes',
  totalSnapshotsUsed: 'snapshots',
  totalBackupsUsed: 'backups',
  totalBackupGigabytesUsed: 'backup_gigabytes',
};

async function limits(req: ApiRequest) {
  // Before 3.39 (LIMITS_ADMIN_FILTER), or for a non-admin, project_id / tenant_id are ignored.
  let project = req.auth.projectId;
  if (req.auth.isAdmin && req.version.atLeast('3.39')) project = req.query.get('project_id') ?? req.query.get('tenant_id') ?? project;
  const stored = await readLimits('volume', project);
  const absolute = Object.fromEntries(Object.entries(LIMIT_NAMES).map(([r, name]) => [name, effectiveLimit(stored, r, cinderBuiltin(r)).limit]));
  // Usage counts the project's records from before quotas first, as the quota-set view does.
  let u = await readUsage('volume', project);
  if (!u.counted) {
    await countLegacyVolumes(project);
    u = await readUsage('volume', project);
  }
  const used = Object.fromEntries(Object.entries(USED_NAMES).map(([name, r]) => [name, u.usage[r] ?? 0]));
  return json(200, { limits: { rate: [], absolute: { ...absolute, ...used } } });
}

/**
 * volume.API.list_availability_zones: the zones of the volume services (one per backend here), a
 * zone available while any of its services is enabled.
 */
async function zones() {
  const disabled = new Map<string, boolean>();
  for (const { config, service } of await listBackendRecords()) {
    const zone = availabilityZoneOf(config);
    disabled.set(zone, (disabled.get(zone) ?? true) && service.disabled);
  }
  return json(200, { availabilityZoneInfo: [...disabled].map(([zoneName, off]) => ({ zoneName, zoneState: { available: !off } })) });
}

export const limitsRoutes: RouteSpec[] = [
  { method: 'GET', path: '/limits', action: POLICIES.limits, handler: limits },
  { method: 'GET', path: '/os-availability-zone', action: POLICIES.zones, handler: zones },
];
