/**
 * Nova's scheduler for Ferry's flows: filter the compute nodes, weigh them, and claim the flavor's
 * resources on the best one for a consumer (select_destinations + Placement's claim in one).
 *
 * Filters (nova's defaults that apply here): ComputeFilter (service enabled, not forced down, host
 * up), AvailabilityZoneFilter, the request's ignore_hosts / requested host / cell restriction, and
 * capacity (Placement's allocation candidates), plus Ferry's hardware generation: a flavor with
 * `hw:generation` only fits hosts of that generation when the host says which it is. Weigher:
 * most free RAM first (RAMWeigher), then the host name for a stable order.
 *
 * The claim is the DynamoDB transaction of compute/placement.ts (free capacity guarded by a condition), so
 * two concurrent boots never both get the last room on a host: the loser tries the next host.
 */
import { COMPUTE_BINARY, serviceIsUp } from '../compute/model.js';
import { claim, freeOf, type Amounts } from '../compute/placement.js';
import { listServices } from '../compute/repo.js';
import { BadRequest } from '../core/errors.js';
import { computeDriverFor } from '../drivers/compute/registry.js';
import { computeNodes, type HostNode } from './engine.js';
import type { InstanceFlavor } from './model.js';

/** Nova's NoValidHost (400); its name is what a machine's Catch and the instance fault show. */
export class NoValidHost extends BadRequest {
  constructor(reason = 'There are not enough hosts available.') {
    super(`No valid host was found. ${reason}`);
  }
}

export interface ScheduleRequest {
  flavor: InstanceFlavor;
  /** Who holds the claim (the instance uuid, or a migration uuid for a move's destination). */
  consumer: string;
  /** Volume-backed servers claim no root disk. */
  volumeBacked: boolean;
  ignoreHosts?: string[];
  /** A requested host (migrate --host, live-migration host, evacuate host, unshelve host). */
  host?: string;
  /** Only nodes of this cell (a same-cell move). */
  cellUuid?: string;
  /** CrossCellWeigher (reference §1.13): with cross-cell allowed, hosts of this cell sort first. */
  preferCellUuid?: string;
  availabilityZone?: string | null;
}

export function amountsOf(flavor: InstanceFlavor, volumeBacked: boolean): Amounts {
  return { vcpus: flavor.vcpus, memoryMb: flavor.memoryMb, diskGb: volumeBacked ? 0 : flavor.rootGb + flavor.ephemeralGb };
}

/** Hosts that pass the filters, best first, with their free capacity. */
export async function candidates(req: ScheduleRequest): Promise<(HostNode & { free: Amounts })[]> {
  const want = amountsOf(req.flavor, req.volumeBacked);
  const services = await listServices();
  const out: (HostNode & { free: Amounts })[] = [];
  for (const hn of await computeNodes()) {
    const { node } = hn;
    if (req.host && node.host !== req.host) continue;
    if (req.ignoreHosts?.includes(node.host)) continue;
    if (req.cellUuid && hn.cell.uuid !== req.cellUuid) continue;
    if (req.availabilityZone && req.availabilityZone !== 'nova') continue;
    const svc = services.find((s) => s.value.host === node.host && s.value.binary === COMPUTE_BINARY)?.value;
    if (!svc || svc.disabled) continue;
    const info = await computeDriverFor(node.config).getHostInfo();
    if (!serviceIsUp(svc, info.up)) continue;
    const generation = req.flavor.extraSpecs?.['hw:generation'];
    const hostGeneration = (node.config as { generation?: number }).generation;
    if (generation && hostGeneration !== undefined && String(hostGeneration) !== generation) continue;
    // A node without its usage record (not recorded by the seed) has nothing to claim on.
    const free = await freeOf(node.uuid);
    if (!free || free.vcpus < want.vcpus || free.memoryMb < want.memoryMb || free.diskGb < want.diskGb) continue;
    out.push({ ...hn, free });
  }
  // CrossCellWeigher outweighs the RAM weigher: a move stays in its cell while that cell has room.
  const preferred = (h: HostNode) => (req.preferCellUuid && h.cell.uuid !== req.preferCellUuid ? 1 : 0);
  return out.sort((a, b) => preferred(a) - preferred(b) || b.free.memoryMb - a.free.memoryMb || a.node.host.localeCompare(b.node.host));
}

/** Picks a host and claims the flavor there for the consumer. @throws NoValidHost */
export async function scheduleAndClaim(req: ScheduleRequest): Promise<HostNode> {
  const want = amountsOf(req.flavor, req.volumeBacked);
  for (const c of await candidates(req)) {
    if (await claim({ consumer: req.consumer, nodeUuid: c.node.uuid, ...want })) return c;
  }
  throw new NoValidHost();
}
