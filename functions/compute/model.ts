/**
 * The Nova foundation model: cells, host mappings, compute services, compute nodes (hosts),
 * flavors, networks and allocations, with their DynamoDB keys and the pure transitions of a
 * compute service (enable/disable, forced_down).
 *
 * Where each lives (DESIGN: one table per database of the reference, a cell its own failure domain):
 *
 * | item | table | pk | sk | gsi1pk / gsi1sk |
 * |---|---|---|---|---|
 * | cell mapping | compute-api | `CELLMAPPING#<uuid>` | `CELLMAPPING` | `CELLMAPPINGS` / name |
 * | host mapping (host -> cell) | compute-api | `HOSTMAPPING#<host>` | `HOSTMAPPING` | `HOSTMAPPINGS` / host |
 * | flavor | compute-api | `FLAVOR#<flavorid>` | `FLAVOR` | `FLAVORS` / flavorid |
 * | network | compute-api | `NETWORK#<uuid>` | `NETWORK` | `NETWORKS` / name |
 * | node usage (Placement's free capacity, guarded) | compute-api | `RP#<compute node uuid>` | `USAGE` | - |
 * | allocation (Placement's role) | compute-api | `RP#<compute node uuid>` | `ALLOC#<consumer uuid>` | `CONSUMER#<consumer uuid>` / node uuid |
 * | service (nova-compute, nova-conductor, nova-scheduler) | cell<N> | `SERVICE#<uuid>` | `SERVICE` | `SERVICES` / `<host>#<binary>` |
 * | compute node (a hypervisor, one per compute host) | cell<N> | `COMPUTENODE#<uuid>` | `COMPUTENODE` | `COMPUTENODES` / host |
 *
 * Allocations are global, like Placement's database, because a cross-cell move holds them on a
 * source host of one cell and a destination host of another at the same time.
 */
import { createHash } from 'node:crypto';
import type { ComputeHostConfig } from '../drivers/compute/driver.js';
import { BadRequest } from '../core/errors.js';
import type { TableKey } from '../core/tables.js';
import { boolFromString } from '../core/strutils.js';

/** The cell tables Ferry has (functions/core/tables.ts); a cell mapping names one of them. */
export const CELL_TABLES = ['cell1', 'cell2'] as const satisfies readonly TableKey[];
export type CellTable = (typeof CELL_TABLES)[number];

export function isCellTable(key: string): key is CellTable {
  return (CELL_TABLES as readonly string[]).includes(key);
}

/** Nova's default availability zone for compute hosts (`[DEFAULT]default_availability_zone`). */
export const DEFAULT_AVAILABILITY_ZONE = 'nova';
/** Nova's zone for every service but nova-compute (`[DEFAULT]internal_service_availability_zone`). */
export const INTERNAL_AVAILABILITY_ZONE = 'internal';

export const COMPUTE_BINARY = 'nova-compute';

export interface CellMapping {
  uuid: string;
  name: string;
  /** The table holding this cell's database. */
  table: CellTable;
  createdAt: string;
}

export interface HostMapping {
  host: string;
  cellUuid: string;
  cellName: string;
  createdAt: string;
}

export interface ComputeService {
  uuid: string;
  /** The integer id in its cell's database (ids of different cells may repeat, hence 2.53's uuids). */
  id: number;
  host: string;
  binary: string;
  topic: string;
  disabled: boolean;
  disabledReason: string | null;
  forcedDown: boolean;
  createdAt: string;
  updatedAt: string;
  /** Optimistic-concurrency version: every write is conditional on it and bumps it. */
  version: number;
}

export interface ComputeNode {
  uuid: string;
  id: number;
  /** The service host; also the hypervisor hostname. */
  host: string;
  hypervisorHostname: string;
  hypervisorType: string;
  hypervisorVersion: number;
  hostIp: string;
  /** Capacity as the driver host is configured (the resource provider's inventory). */
  vcpus: number;
  memoryMb: number;
  localGb: number;
  cpuInfo: Record<string, unknown>;
  /** The compute driver host: `computeDriverFor(config)` reaches it. */
  config: ComputeHostConfig;
  serviceUuid: string;
  createdAt: string;
}

export interface Flavor {
  /** Nova's `flavorid`: the string id of the API. */
  flavorid: string;
  /** The integer primary key. */
  id: number;
  name: string;
  memoryMb: number;
  vcpus: number;
  rootGb: number;
  ephemeralGb: number;
  /** MiB, 0 = none. */
  swap: number;
  rxtxFactor: number;
  isPublic: boolean;
  disabled: boolean;
  description: string | null;
  extraSpecs: Record<string, string>;
  createdAt: string;
}

export interface Network {
  id: string;
  name: string;
  cidr: string;
  createdAt: string;
}

/** What one consumer (an instance or a migration) holds on one compute node. */
export interface Allocation {
  consumer: string;
  nodeUuid: string;
  vcpus: number;
  memoryMb: number;
  diskGb: number;
}

export interface NodeUsage {
  vcpusUsed: number;
  memoryMbUsed: number;
  localGbUsed: number;
  /** Consumers with an allocation on the node (Nova's running_vms counts instances; allocations stand in). */
  consumers: number;
}

export const cellMappingKey = (uuid: string) => ({ pk: `CELLMAPPING#${uuid}`, sk: 'CELLMAPPING' });
export const hostMappingKey = (host: string) => ({ pk: `HOSTMAPPING#${host}`, sk: 'HOSTMAPPING' });
export const flavorKey = (flavorid: string) => ({ pk: `FLAVOR#${flavorid}`, sk: 'FLAVOR' });
export const networkKey = (id: string) => ({ pk: `NETWORK#${id}`, sk: 'NETWORK' });
export const serviceKey = (uuid: string) => ({ pk: `SERVICE#${uuid}`, sk: 'SERVICE' });
export const computeNodeKey = (uuid: string) => ({ pk: `COMPUTENODE#${uuid}`, sk: 'COMPUTENODE' });
/** A resource provider's items (its usage and its allocations) share the partition `RP#<node uuid>`. */
export const resourceProviderPk = (nodeUuid: string) => `RP#${nodeUuid}`;
export const ALLOCATION_SK_PREFIX = 'ALLOC#';
export const allocationKey = (nodeUuid: string, consumer: string) => ({ pk: resourceProviderPk(nodeUuid), sk: `${ALLOCATION_SK_PREFIX}${consumer}` });
export const nodeUsageKey = (nodeUuid: string) => ({ pk: resourceProviderPk(nodeUuid), sk: 'USAGE' });
/** The gsi1 partition of a consumer's allocations (every node it holds on). */
export const consumerGsi = (consumer: string) => `CONSUMER#${consumer}`;

export const GSI = {
  cells: 'CELLMAPPINGS',
  hosts: 'HOSTMAPPINGS',
  flavors: 'FLAVORS',
  networks: 'NETWORKS',
  services: 'SERVICES',
  nodes: 'COMPUTENODES',
} as const;

export const serviceSortKey = (host: string, binary: string) => `${host}#${binary}`;

const UUID_RE = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;

/** oslo's `uuidutils.is_uuid_like`: 32 hex digits, dashes optional, any case. */
export function isUuidLike(value: string): boolean {
  return UUID_RE.test(value);
}

/**
 * A uuid derived from a name (sha-256, shaped as a version-5-like uuid), so a seed that runs on
 * every start gives the same service and node the same uuid, and its conditional writes are no-ops.
 */
export function stableUuid(name: string): string {
  const h = createHash('sha256').update(`ferry:${name}`).digest('hex');
  const variant = ((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

// ---------------------------------------------------------------------------------------------
// Service transitions

/** A change an admin asks for (os-services PUT, either form). */
export interface ServiceUpdate {
  /** 'enabled' or 'disabled' */
  status?: 'enabled' | 'disabled';
  disabledReason?: string | null;
  forcedDown?: boolean;
}

/**
 * Applies an update to a service (nova/api/openstack/compute/services.py `_update_v253` rules):
 * enabling clears the reason, disabling records the given one (or none), forced_down is set as
 * given. Pure: returns the new service with `updatedAt`; the repo bumps the version.
 * @throws BadRequest when a reason comes with status enabled.
 */
export function applyServiceUpdate(svc: ComputeService, update: ServiceUpdate, at: string): ComputeService {
  if (update.status === 'enabled' && update.disabledReason) {
    throw new BadRequest("Specifying 'disabled_reason' with status 'enabled' is invalid.");
  }
  const next: ComputeService = { ...svc, updatedAt: at };
  if (update.status !== undefined) {
    next.disabled = update.status === 'disabled';
    next.disabledReason = next.disabled ? (update.disabledReason ?? null) : null;
  }
  if (update.forcedDown !== undefined) next.forcedDown = update.forcedDown;
  return next;
}

/**
 * The servicegroup's verdict (`servicegroup/drivers/db.py:is_up`): a forced-down service is down
 * whatever its heartbeat says; otherwise it is up while it reports. For a nova-compute service the
 * report is its driver host being up (the local driver's down flag plays a dead compute process).
 */
export function serviceIsUp(svc: Pick<ComputeService, 'forcedDown'>, reporting: boolean): boolean {
  return !svc.forcedDown && reporting;
}

/** oslo's `strutils.bool_from_string(strict=True)` for API booleans: true/false and their spellings. */
export function parseStrictBool(value: unknown, name: string): boolean {
  const b = boolFromString(value);
  if (b !== undefined) return b;
  if (value === 0 || value === 1) return value === 1;
  throw new BadRequest(`Invalid input for field/attribute ${name}. Value: ${JSON.stringify(value)}. ${JSON.stringify(value)} is not of type 'boolean'`);
}

/** Sums a node's allocations into the hypervisor usage fields. */
export function usageOf(allocations: readonly Allocation[]): NodeUsage {
  return allocations.reduce<NodeUsage>(
    (u, a) => ({ vcpusUsed: u.vcpusUsed + a.vcpus, memoryMbUsed: u.memoryMbUsed + a.memoryMb, localGbUsed: u.localGbUsed + a.diskGb, consumers: u.consumers + 1 }),
    { vcpusUsed: 0, memoryMbUsed: 0, localGbUsed: 0, consumers: 0 },
  );
}
