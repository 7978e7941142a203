/**
 * The manila-share services and scheduler pools (M/api/v2/services.py, scheduler_stats.py), as
 * the share backend records and their drivers' capabilities give them.
 */
import { json, type ApiRequest } from '../core/api.js';
import { BadRequest } from '../core/errors.js';
import { registerPolicies } from '../core/policy.js';
import { listShareBackends } from './repo.js';
import { DEFAULT_SHARE_AZ, freeShareGb, gatherSharePools } from './scheduler.js';

registerPolicies({
  'service:index': 'admin_api',
  'scheduler_stats:pools:index': 'admin_api',
  'scheduler_stats:pools:detail': 'admin_api',
});


/** A stable small id per service, as upstream's integer ids. */
export async function services(req: ApiRequest) {
  const at = new Date().toISOString().replace('Z', '').replace(/\.(\d{3})$/, '.$1000');
  const backends = await listShareBackends();
  const rows = [
    { id: 1, binary: 'manila-scheduler', host: 'ferry', zone: DEFAULT_SHARE_AZ, status: 'enabled', state: 'up', updated_at: at },
    ...backends.map((b, i) => ({ id: i + 2, binary: 'manila-share', host: b.host, zone: b.availabilityZone ?? DEFAULT_SHARE_AZ, status: 'enabled', state: 'up', updated_at: at })),
  ];
  const q = req.query;
  const filtered = rows.filter((r) => ['binary', 'host', 'zone', 'status', 'state'].every((k) => q.get(k) === null || String((r as Record<string, unknown>)[k]) === q.get(k)));
  return json(200, { services: filtered });
}

export async function pools(req: ApiRequest, detail: boolean) {
  // Upstream matches host/backend/pool as regular expressions from the start (re.match); the CLI sends `.*`.
  const matcher = (name: string) => {
    const pattern = req.query.get(name);
    if (pattern === null) return () => true;
    let re: RegExp;
    try {
      re = new RegExp(`^(?:${pattern})`);
    } catch {
      throw new BadRequest(`Invalid ${name} filter: ${pattern}.`);
    }
    return (v: string) => re.test(v);
  };
  const [hostOk, backendOk, poolOk] = [matcher('host'), matcher('backend'), matcher('pool')];
  const list = (await gatherSharePools()).filter((p) => {
    const [hostPart, backendPart] = p.backend.host.split('@');
    return hostOk(hostPart!) && backendOk(backendPart!) && poolOk(p.caps.pool);
  });
  return json(200, {
    pools: list.map((p) => {
      const [host, backend] = p.backend.host.split('@');
      const base: Record<string, unknown> = { name: p.host, host, backend, pool: p.caps.pool };
      if (detail) {
        base.capabilities = {
          pool_name: p.caps.pool,
          total_capacity_gb: p.caps.totalCapacityGb,
          free_capacity_gb: freeShareGb(p),
          allocated_capacity_gb: p.allocatedGb,
          reserved_percentage: 0,
          reserved_snapshot_percentage: 0,
          reserved_share_extend_percentage: 0,
          driver_handles_share_servers: false,
          share_backend_name: p.backend.shareBackendName,
          storage_protocol: p.caps.storageProtocol,
          vendor_name: p.caps.vendorName,
          driver_version: p.caps.driverVersion,
          snapshot_support: p.caps.snapshotSupport,
          create_share_from_snapshot_support: false,
          revert_to_snapshot_support: false,
          mount_snapshot_support: false,
          replication_type: null,
          dedupe: false,
          compression: false,
          thin_provisioning: false,
          qos: false,
          ipv4_support: true,
          ipv6_support: true,
          timestamp: new Date().toISOString().replace('Z', ''),
        };
      }
      return base;
    }),
  });
}
