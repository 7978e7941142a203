/**
 * Picks a pool for a share, after Manila's FilterScheduler: pools come from the share backend
 * records and each driver's capabilities; filters are the share type's `share_backend_name`,
 * `driver_handles_share_servers` (only false is served), the protocol, the availability zone and
 * capacity; the weigher puts the pool with the most free capacity first.
 *
 * The reservation is one transaction: the share's `capacity` (version condition) and an ADD on the
 * pool item conditioned on `allocatedGb <= totalGb - size`, so a pool is never over-allocated.
 */
import { cancellationCodes, withRetries } from '../core/db.js';
import { BadRequest, FerryError } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { ShareBackendConfig, SharePoolCapabilities } from '../drivers/share/driver.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { sharePoolKey, type Share } from './model.js';
import { allocatedOnSharePool, getShare, getShareOrThrow, listShareBackends, releaseSharePoolItem, writeShareWith, type TransactItem } from './repo.js';
import { transition } from './transitions.js';
import { getShareTypeById } from './types.js';

export const DEFAULT_SHARE_AZ = 'nova';

/** Manila's NoValidHost; the create machine catches it and marks the share error. */
export class NoValidHost extends BadRequest {
  constructor(reason: string) {
    super(`No valid host was found. ${reason}`);
  }
}

export interface SharePoolState {
  host: string;
  backend: ShareBackendConfig;
  caps: SharePoolCapabilities;
  allocatedGb: number;
}

export interface ShareScheduleRequest {
  sizeGb: number;
  proto: string;
  extraSpecs: Record<string, string>;
  availabilityZone: string | null;
}

export const freeShareGb = (p: SharePoolState) => p.caps.totalCapacityGb - p.allocatedGb;

/** Pure: the pools passing every filter (most free first) and why the others did not. */
export function filterAndWeighShares(pools: SharePoolState[], req: ShareScheduleRequest): { chosen: SharePoolState[]; rejected: string[] } {
  const rejected: string[] = [];
  const wantsBackend = req.extraSpecs.share_backend_name;
  const dhss = (req.extraSpecs.driver_handles_share_servers ?? 'false').trim().toLowerCase();
  const reject = (why: string) => {
    rejected.push(why);
    return false;
  };
  const chosen = pools.filter((p) => {
    if (wantsBackend && p.backend.shareBackendName !== wantsBackend) return reject(`${p.host} is not share_backend_name ${wantsBackend}`);
    if (['true', '<is> true', '1'].includes(dhss)) return reject(`${p.host} does not handle share servers`);
    if (!p.backend.protocols.includes(req.proto)) return reject(`${p.host} does not export ${req.proto}`);
    if (req.availabilityZone && (p.backend.availabilityZone ?? DEFAULT_SHARE_AZ) !== req.availabilityZone) return reject(`${p.host} is not in ${req.availabilityZone}`);
    if (req.sizeGb > freeShareGb(p)) return reject(`${p.host} has ${freeShareGb(p)} GiB free, ${req.sizeGb} GiB requested`);
    return true;
  });
  chosen.sort((a, b) => freeShareGb(b) - freeShareGb(a) || a.host.localeCompare(b.host));
  return { chosen, rejected };
}

export async function gatherSharePools(): Promise<SharePoolState[]> {
  const pools: SharePoolState[] = [];
  for (const backend of await listShareBackends()) {
    for (const caps of await shareDriverFor(backend).capabilities()) {
      const host = `${backend.host}#${caps.pool}`;
      pools.push({ host, backend, caps, allocatedGb: await allocatedOnSharePool(host) });
    }
  }
  return pools;
}

export function reserveSharePoolItem(poolHost: string, gb: number, totalGb: number): TransactItem {
  return {
    Update: {
      TableName: tableName('share'),
      Key: sharePoolKey(poolHost),
      UpdateExpression: 'SET host = :host, totalGb = :total ADD allocatedGb :gb',
      // A pool whose backend an inventory removed is `retired`: nothing new lands on it.
      ConditionExpression: '(attribute_not_exists(allocatedGb) OR allocatedGb <= :limit) AND attribute_not_exists(retired)',
      ExpressionAttributeValues: { ':host': poolHost, ':total': totalGb, ':gb': gb, ':limit': totalGb - gb },
    },
  };
}


/** Idempotent: a share already holding capacity is returned as it is. */
export async function scheduleShare(shareId: string): Promise<Share> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const s = await getShareOrThrow(shareId);
    if (s.capacity) return s;
    const type = await getShareTypeById(s.shareTypeId);
    const req: ShareScheduleRequest = { sizeGb: s.size, proto: s.shareProto, extraSpecs: type.extraSpecs, availabilityZone: s.availabilityZone };
    const { chosen, rejected } = filterAndWeighShares(await gatherSharePools(), req);
    let changed = false;
    for (const pool of chosen) {
      const after = transition(s, { type: 'scheduled', at: new Date().toISOString(), capacity: { pool: pool.host, gb: s.size }, availabilityZone: pool.backend.availabilityZone ?? DEFAULT_SHARE_AZ });
      if (after instanceof FerryError) throw after;
      try {
        return await writeShareWith(s, after, [reserveSharePoolItem(pool.host, s.size, pool.caps.totalCapacityGb)]);
      } catch (e) {
        const codes = cancellationCodes(e);
        if (codes[1] === 'ConditionalCheckFailed') {
          rejected.push(`${pool.host} was filled by another request`);
          continue;
        }
        if (codes[0] === 'ConditionalCheckFailed' || codes.includes('TransactionConflict')) {
          changed = true;
          break;
        }
        throw e;
      }
    }
    if (!changed) throw new NoValidHost(rejected.length ? `${rejected.join('; ')}.` : 'No share backends are configured.');
  }
  throw new NoValidHost(`Share ${shareId} kept changing while it was being scheduled.`);
}

/** Gives back a share's capacity; idempotent. */
export async function releaseShareCapacity(shareId: string): Promise<Share | undefined> {
  return withRetries(
    async () => {
      const s = await getShare(shareId);
      if (!s?.capacity) return s;
      const after = transition(s, { type: 'capacity-released', at: new Date().toISOString() });
      if (after instanceof FerryError) throw after;
      return writeShareWith(s, after, [releaseSharePoolItem(s.capacity.pool, s.capacity.gb)]);
    },
    { retryable: (e) => cancellationCodes(e).some((c) => c === 'ConditionalCheckFailed' || c === 'TransactionConflict') },
  );
}

