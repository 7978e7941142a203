/**
 * Cinder's os-hosts (C/api/contrib/hosts.py), read-only: the list of hosts (the scheduler and each
 * volume backend, as os-services lists them) and one volume host's usage, in total and per
 * project. Admin only (`volume_extension:hosts`). Upstream's `PUT /os-hosts/{host}` (enable or
 * disable a host) is deprecated in favour of os-services and not served here.
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { NotFound } from '../core/errors.js';
import { registerPolicies } from '../core/policy.js';
import { listSnapshots } from '../snapshots/repo.js';
import { backendOf, listBackendRecords } from '../volumes/backends.js';
import { upstreamTime } from '../volumes/model.js';
import { listVolumes } from '../volumes/repo.js';
import { availabilityZoneOf } from '../volumes/scheduler.js';
import { SCHEDULER_HOST } from './routes.js';

const POLICY = 'volume_extension:hosts';
registerPolicies({ [POLICY]: 'admin_api' });

async function listHosts(req: ApiRequest) {
  // hosts.py _list_hosts: `zone` and `service` narrow the list.
  const zone = req.query.get('zone');
  const serviceName = req.query.get('service');
  const at = upstreamTime(new Date().toISOString());
  const records = (await listBackendRecords()).sort((a, b) => a.config.host.localeCompare(b.config.host));
  const hosts = [
    { host_name: SCHEDULER_HOST, service: 'cinder-scheduler', zone: records[0] ? availabilityZoneOf(records[0].config) : 'nova', 'service-status': 'available', 'service-state': 'enabled', 'last-update': at },
    ...records.map(({ config, service }) => ({
      host_name: config.host,
      service: 'cinder-volume',
      zone: availabilityZoneOf(config),
      'service-status': 'available',
      'service-state': service.disabled ? 'disabled' : 'enabled',
      'last-update': at,
    })),
  ];
  return json(200, { hosts: hosts.filter((h) => (!zone || h.zone === zone) && (!serviceName || h.service === serviceName)) });
}

interface Usage {
  volumes: number;
  volumeGb: number;
  snapshots: number;
  snapshotGb: number;
}

const resource = (host: string, project: string, u: Usage) => ({
  resource: { host, project, volume_count: String(u.volumes), total_volume_gb: String(u.volumeGb), snapshot_count: String(u.snapshots), total_snapshot_gb: String(u.snapshotGb) },
});

/** hosts.py show: a volume host's volumes and snapshots, `(total)` first, then one row per project. */
async function showHost(req: ApiRequest) {
  const host = req.params.host_name!;
  const record = (await listBackendRecords()).find((r) => r.config.host === host);
  // hosts.py: a host with no enabled cinder-volume service is not found.
  if (!record || record.service.disabled) throw new NotFound(`Host ${host} could not be found.`);
  const [volumes, snapshots] = await Promise.all([listVolumes(), listSnapshots()]);
  const total: Usage = { volumes: 0, volumeGb: 0, snapshots: 0, snapshotGb: 0 };
  const byProject = new Map<string, Usage>();
  const usageOf = (project: string) => byProject.get(project) ?? byProject.set(project, { volumes: 0, volumeGb: 0, snapshots: 0, snapshotGb: 0 }).get(project)!;
  for (const v of volumes.filter((x) => x.host !== null && backendOf(x.host) === host)) {
    for (const u of [total, usageOf(v.projectId)]) {
      u.volumes += 1;
      u.volumeGb += v.size;
    }
  }
  for (const s of snapshots.filter((x) => x.backendHost === host)) {
    for (const u of [total, usageOf(s.projectId)]) {
      u.snapshots += 1;
      u.snapshotGb += s.size;
    }
  }
  return json(200, { host: [resource(host, '(total)', total), ...[...byProject].sort(([a], [b]) => a.localeCompare(b)).map(([p, u]) => resource(host, p, u))] });
}

export const hostRoutes: RouteSpec[] = [
  { method: 'GET', path: '/os-hosts', action: POLICY, handler: listHosts },
  { method: 'GET', path: '/os-hosts/{host_name}', action: POLICY, handler: showHost },
];
