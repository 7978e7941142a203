/**
 * Picks a pool for a volume, after Cinder's FilterScheduler: pools come from the backend records
 * and each driver's capabilities; filters are the type's `volume_backend_name`, the multiattach
 * capability (`multiattach='<is> True'`), the availability zone and capacity; the weigher puts the
 * pool with the most free capacity first.
 *
 * Capacity is tracked by Ferry itself in a pool item (pk `POOL#<host@backend#pool>`, `allocatedGb`,
 * `totalGb`): a reservation is one conditional ADD whose condition is the capacity invariant
 * (`allocatedGb <= totalGb - size`), written in the same transaction as the volume's `capacity`
 * field, so a pool is never over-allocated however many schedulers race, and a volume holds
 * capacity exactly while its `capacity` field says so (release happens once).
 */
import type { BackendConfig, BackendServiceState, PoolCapabilities } from '../drivers/volume/driver.js';
import { replicationCapability, type ReplicationCapability } from './capabilities.js';
import { driverFor } from '../drivers/volume/registry.js';
import { fillsFromImages } from '../drivers/volume/driver.js';
import { FerryError } from '../core/errors.js';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { db, withRetries } from '../core/db.js';
import { tableName } from '../core/tables.js';
import { backendOf, driverForHost, listBackendRecords, poolOf } from './backends.js';
import type { Volume } from './model.js';
import { cancellationCodes, getVolume, getVolumeOrThrow, poolKey, releasePoolItem, writeVolumeWith, claimItem, type TransactItem } from './repo.js';
import { transition } from './transitions.js';
import { getVolumeTypeById, IS_TRUE } from './types.js';

/** The availability zone of a backend with none configured (Cinder's storage_availability_zone default). */
export const DEFAULT_AVAILABILITY_ZONE = 'nova';
/**
 * A volume created without a zone where no backend is in `nova` (an AWS deployment, whose zones
 * are the EBS backends'): the scheduler chooses among every zone, and the volume takes its pool's.
 */
export const ANY_ZONE = '';

/** Cinder's NoValidBackend: no pool passed the filters. The create machine catches it and marks the volume error. */
export class NoValidBackend extends FerryError {
  constructor(reason: string) {
    super(400, 'badRequest', `No valid backend was found. ${reason}`);
  }
}

export interface PoolState {
  /** `host@backend#pool` */
  host: string;
  backend: BackendConfig;
  caps: PoolCapabilities;
  /** What Ferry's volumes hold on this pool (the pool item). */
  allocatedGb: number;
  /** Reported `replication_enabled` / `replication_targets` (absent = not replicated). */
  replication?: ReplicationCapability;
  /** The backend's service state (absent = enabled, not frozen). */
  service?: BackendServiceState;
}

export interface ScheduleRequest {
  sizeGb: number;
  extraSpecs: Record<string, string>;
  availabilityZone: string;
}

export interface Rejection {
  host: string;
  filter: 'service' | 'volume_backend_name' | 'multiattach' | 'replication_enabled' | 'availability_zone' | 'capacity';
  reason: string;
}

export const freeGb = (p: PoolState) => p.caps.totalCapacityGb - p.allocatedGb;

export function availabilityZoneOf(backend: BackendConfig): string {
  return backend.availabilityZone ?? DEFAULT_AVAILABILITY_ZONE;
}

/** Pure: the pools that pass every filter, most free capacity first, and why each other pool failed. */
export function filterAndWeigh(pools: PoolState[], req: ScheduleRequest): { chosen: PoolState[]; rejected: Rejection[] } {
  const rejected: Rejection[] = [];
  const wantsBackend = req.extraSpecs.volume_backend_name;
  const wantsMultiattach = (req.extraSpecs.multiattach ?? '').trim().toLowerCase() === IS_TRUE.toLowerCase();
  const wantsReplication = (req.extraSpecs.replication_enabled ?? '').trim().toLowerCase() === IS_TRUE.toLowerCase();
  const chosen = pools.filter((p) => {
    // Upstream's host manager only considers services with disabled=False and frozen=False (reference §2.5).
    if (p.service?.frozen) {
      rejected.push({ host: p.host, filter: 'service', reason: 'is frozen' });
      return false;
    }
    if (p.service?.disabled) {
      rejected.push({ host: p.host, filter: 'service', reason: `is disabled (${p.service.disabledReason || 'no reason given'})` });
      return false;
    }
    if (wantsBackend !== undefined && p.caps.volumeBackendName !== wantsBackend) {
      rejected.push({ host: p.host, filter: 'volume_backend_name', reason: `volume_backend_name is ${p.caps.volumeBackendName}, not ${wantsBackend}` });
      return false;
    }
    if (wantsMultiattach && !p.caps.multiattach) {
      rejected.push({ host: p.host, filter: 'multiattach', reason: 'does not support multiattach' });
      return false;
    }
    if (wantsReplication && !p.replication?.enabled) {
      rejected.push({ host: p.host, filter: 'replication_enabled', reason: 'does not report replication_enabled' });
      return false;
    }
    if (req.availabilityZone !== ANY_ZONE && availabilityZoneOf(p.backend) !== req.availabilityZone) {
      rejected.push({ host: p.host, filter: 'availability_zone', reason: `is in availability zone ${availabilityZoneOf(p.backend)}` });
      return false;
    }
    if (req.sizeGb > freeGb(p)) {
      rejected.push({ host: p.host, filter: 'capacity', reason: `has ${freeGb(p)} GiB free, ${req.sizeGb} GiB requested` });
      return false;
    }
    return true;
  });
  chosen.sort((a, b) => freeGb(b) - freeGb(a) || a.host.localeCompare(b.host));
  return { chosen, rejected };
}

/** A readable reason for the volume's errorReason when nothing passed. */
export function noPoolReason(req: ScheduleRequest, rejected: Rejection[]): string {
  if (rejected.length === 0) return 'No pools are configured.';
  return `No pool can take a ${req.sizeGb} GiB volume: ${rejected.map((r) => `${r.host} ${r.reason}`).join('; ')}.`;
}

export async function allocatedOn(poolHost: string): Promise<number> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: poolKey(poolHost), ConsistentRead: true }));
  return (out.Item?.allocatedGb as number | undefined) ?? 0;
}

/** Every pool of every backend (or of one backend), with capabilities and Ferry's allocation. */
export async function gatherPools(onlyBackend?: string): Promise<PoolState[]> {
  const records = (await listBackendRecords()).filter((r) => !onlyBackend || r.config.host === backendOf(onlyBackend));
  const pools: PoolState[] = [];
  for (const { config: backend, service, replicationLag } of records) {
    // The driver of the site the backend runs on (after a failover: the target).
    const driver = driverFor(backend, service.activeBackendId);
    const caps = await driver.capabilities();
    const replication = replicationCapability(backend, driver, replicationLag);
    for (const c of caps) {
      const host = `${backend.host}#${c.pool}`;
      pools.push({ host, backend, caps: c, allocatedGb: await allocatedOn(host), replication, service });
    }
  }
  return pools;
}

/**
 * The pool item update that reserves `gb` more on a pool of `totalGb`; the condition is the
 * capacity invariant, so DynamoDB refuses a reservation that would over-allocate.
 */
export function reservePoolItem(poolHost: string, gb: number, totalGb: number): TransactItem {
  return {
    Update: {
      TableName: tableName('volume'),
      Key: poolKey(poolHost),
      UpdateExpression: 'SET host = :host, totalGb = :total, gsi1pk = :g, gsi1sk = :host ADD allocatedGb :gb',
      // A pool whose backend an inventory removed is `retired`: nothing new lands on it.
      ConditionExpression: '(attribute_not_exists(allocatedGb) OR allocatedGb <= :limit) AND attribute_not_exists(retired)',
      ExpressionAttributeValues: { ':host': poolHost, ':total': totalGb, ':g': 'POOLS', ':gb': gb, ':limit': totalGb - gb },
    },
  };
}

/** Cinder's _driver_shares_targets: false when the backend says so, null for NVMe-oF, else iSCSI-ness. */
export function sharedTargetsOf(caps: PoolCapabilities): boolean | null {
  if (!caps.sharedTargets) return false;
  const protocol = caps.storageProtocol.toLowerCase();
  if (protocol.includes('nvme')) return null;
  return ['iscsi', 'iser'].includes(protocol);
}

export type ReserveOutcome = { kind: 'reserved'; volume: Volume } | { kind: 'pool-full' } | { kind: 'volume-changed' };

/** One reservation attempt: pool item + volume `capacity` (+ backend-object claim for a new volume) in one transaction. */
export async function reserveOnPool(v: Volume, pool: PoolState): Promise<ReserveOutcome> {
  if (v.size > pool.caps.totalCapacityGb) return { kind: 'pool-full' };
  const after = transition(v, {
    type: 'scheduled',
    at: new Date().toISOString(),
    capacity: { pool: pool.host, gb: v.size },
    serviceUuid: pool.backend.serviceUuid,
    sharedTargets: sharedTargetsOf(pool.caps),
    availabilityZone: availabilityZoneOf(pool.backend),
  });
  if (after instanceof FerryError) throw after;
  if (after === v) return { kind: 'reserved', volume: v };
  const others = [reservePoolItem(pool.host, v.size, pool.caps.totalCapacityGb), ...(v.managed ? [] : [claimItem(v, pool.host)])];
  try {
    return { kind: 'reserved', volume: await writeVolumeWith(v, after, others) };
  } catch (e) {
    const codes = cancellationCodes(e);
    if (codes[1] === 'ConditionalCheckFailed') return { kind: 'pool-full' };
    if (codes[0] === 'ConditionalCheckFailed' || codes.includes('TransactionConflict')) return { kind: 'volume-changed' };
    throw e;
  }
}

/**
 * Schedules a volume: idempotent (a volume already holding capacity is returned as it is). A lost
 * race for a pool tries the next pool; a changed volume is re-read; no pool left -> NoValidBackend.
 */
export async function scheduleVolume(volumeId: string): Promise<Volume> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const v = await getVolumeOrThrow(volumeId);
    if (v.capacity) return v;
    const type = await getVolumeTypeById(v.volumeTypeId);
    const req: ScheduleRequest = { sizeGb: v.size, extraSpecs: type.extraSpecs, availabilityZone: v.availabilityZone };
    // A volume from a snapshot or a volume is made by its source's backend (Cinder's resource_backend), never migrated.
    let pools = await gatherPools(v.managed && v.host ? v.host : v.source?.backendHost || undefined);
    // Only a backend that can write the image's bytes takes a volume from an image (create.ts refuses when none can).
    if (v.source?.kind === 'image') pools = pools.filter((p) => fillsFromImages(p.backend));
    if (v.managed && v.host && poolOf(v.host)) pools = pools.filter((p) => p.host === v.host);
    // A managed object is already on its pool: only capacity counts, not the type's placement filters.
    const { chosen, rejected } = v.managed ? filterAndWeigh(pools, { ...req, extraSpecs: {}, availabilityZone: v.availabilityZone }) : filterAndWeigh(pools, req);
    let volumeChanged = false;
    for (const pool of chosen) {
      const out = await reserveOnPool(v, pool);
      if (out.kind === 'reserved') return out.volume;
      if (out.kind === 'volume-changed') {
        volumeChanged = true;
        break;
      }
      rejected.push({ host: pool.host, filter: 'capacity', reason: `was filled by another request (${v.size} GiB requested)` });
    }
    if (!volumeChanged) throw new NoValidBackend(noPoolReason(req, rejected));
  }
  throw new NoValidBackend(`Volume ${volumeId} kept changing while it was being scheduled.`);
}

/** Gives back a volume's capacity; idempotent (a volume holding none, or gone, is left as it is). */
export async function releaseCapacity(volumeId: string): Promise<Volume | undefined> {
  return withRetries(
    async () => {
      const v = await getVolume(volumeId);
      if (!v?.capacity) return v;
      const after = transition(v, { type: 'capacity-released', at: new Date().toISOString() });
      if (after instanceof FerryError) throw after;
      return writeVolumeWith(v, after, [releasePoolItem(v)!]);
    },
    { retryable: (e) => cancellationCodes(e).some((c) => c === 'ConditionalCheckFailed' || c === 'TransactionConflict') },
  );
}

/** The total of a volume's pool, from its driver (extend needs it for the capacity condition). */
export async function poolTotalGb(backend: BackendConfig, poolHost: string): Promise<number> {
  const caps = await (await driverForHost(backend.host)).capabilities();
  const c = caps.find((x) => `${backend.host}#${x.pool}` === poolHost);
  if (!c) throw new NoValidBackend(`Pool ${poolHost} is not reported by its backend.`);
  return c.totalCapacityGb;
}
