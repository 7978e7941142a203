/**
 * A server's detail view as show, list detail and the rebuild response build it: its BDMs, ports
 * and addresses, and for admins from 2.16 the host status of its compute service.
 */
import type { ApiRequest } from '../core/api.js';
import { COMPUTE_BINARY, serviceIsUp } from '../compute/model.js';
import { findServiceByHostBinary } from '../compute/repo.js';
import type { LinkContext } from '../compute/views.js';
import type { Json } from '../compute/validation.js';
import { computeDriverFor } from '../drivers/compute/registry.js';
import { computeNodes } from './engine.js';
import { addressesOf, listPortsOf } from './network.js';
import { loadPartition, type LoadedServer } from './repo.js';
import { SERVER_HOST_STATUS_MIN, serverDetail } from './views.js';

const linkContext = (req: ApiRequest): LinkContext => ({ baseUrl: req.baseUrl, urlProjectId: req.urlProjectId });

export async function detailOf(req: ApiRequest, server: LoadedServer): Promise<Json> {
  const { bdms } = await loadPartition(server.cell, server.instance.uuid);
  const ports = await listPortsOf(server.instance.uuid);
  const addresses = await addressesOf(ports);
  // Only admins see host_status (2.16+): the service lookup is skipped for everyone else.
  const hostStatus = req.auth.isAdmin && req.version.atLeast(SERVER_HOST_STATUS_MIN) ? await hostStatusOf(server.instance.host) : undefined;
  return serverDetail(server.instance, { bdms, ports, addresses, hostStatus }, req.version, linkContext(req), { isAdmin: req.auth.isAdmin });
}

/** compute/api.py `get_instance_host_status`: '' without a host; DOWN, MAINTENANCE (disabled) or UP from its nova-compute service. */
async function hostStatusOf(host: string | null): Promise<string> {
  if (!host) return '';
  const svc = await findServiceByHostBinary(host, COMPUTE_BINARY);
  const node = (await computeNodes()).find((n) => n.node.host === host);
  if (!svc || !node) return 'UNKNOWN';
  const reporting = (await computeDriverFor(node.node.config).getHostInfo()).up;
  if (!serviceIsUp(svc.value, reporting)) return 'DOWN';
  return svc.value.disabled ? 'MAINTENANCE' : 'UP';
}
