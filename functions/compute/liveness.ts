/**
 * Liveness: Nova's servicegroup says a service is up while it heartbeats and it is not forced
 * down. Ferry's nova-compute "heartbeat" is its compute driver host answering `getHostInfo` with
 * `up` (the local driver's `down` flag file plays a dead compute process); other services are up
 * unless forced down.
 */
import { logger } from '../core/logger.js';
import { computeDriverFor } from '../drivers/compute/registry.js';
import { COMPUTE_BINARY, serviceIsUp, type ComputeNode, type ComputeService } from './model.js';
import { listComputeNodes, listServices, type InCell } from './repo.js';

/** Whether each compute host's driver reports up (a failing driver call counts as not reporting). */
export async function reportingHosts(nodes: readonly ComputeNode[]): Promise<Map<string, boolean>> {
  const entries = await Promise.all(
    nodes.map(async (n): Promise<[string, boolean]> => {
      try {
        return [n.host, (await computeDriverFor(n.config).getHostInfo()).up];
      } catch (e) {
        logger.warn('compute host does not report', { host: n.host, error: e as Error });
        return [n.host, false];
      }
    }),
  );
  return new Map(entries);
}

export function isUp(svc: ComputeService, reporting: Map<string, boolean>): boolean {
  return serviceIsUp(svc, svc.binary === COMPUTE_BINARY ? (reporting.get(svc.host) ?? false) : true);
}

export async function servicesWithLiveness(): Promise<{ services: InCell<ComputeService>[]; reporting: Map<string, boolean> }> {
  const [services, nodes] = await Promise.all([listServices(), listComputeNodes()]);
  return { services, reporting: await reportingHosts(nodes.map((n) => n.value)) };
}

export async function upOf(svc: InCell<ComputeService>): Promise<boolean> {
  if (svc.value.binary !== COMPUTE_BINARY) return serviceIsUp(svc.value, true);
  const nodes = (await listComputeNodes()).filter((n) => n.value.host === svc.value.host).map((n) => n.value);
  return isUp(svc.value, await reportingHosts(nodes));
}
