/**
 * The compute sandbox the local stack seeds on every start (infra/local/sandbox.ts):
 *
 * - two cells: `cell1` (table cell1) with hosts `cmp1`, `cmp2`, and `cell2` (table cell2) with
 *   `cmp3`, `cmp4`; a host mapping for each host in the API table;
 * - each host a local compute driver host under `<dataDir>/compute/<host>` (8 vcpus, 16384 MB,
 *   200 GB), with its compute node and one nova-compute service in its cell's table;
 * - the control services: nova-scheduler and the (super) nova-conductor on `controller` in cell1,
 *   and cell2's own conductor on `cell2-conductor`;
 * - flavors of two hardware generations: `m1.small`/`m1.large` (`hw:generation=1`) and
 *   `m2.small`/`m2.large` (`hw:generation=2`);
 * - one network (`private`, 10.0.0.0/24) for the ports that come with servers.
 *
 * Idempotent: uuids are derived from names and every write is conditional on absence, so a
 * restart changes nothing and an operator's later change (a service forced down) survives it.
 * Integer ids are unique across cells, although Nova's need not be.
 */
import { join } from 'node:path';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure } from '../core/db.js';
import { tableName } from '../core/tables.js';
import type { ComputeHostConfig } from '../drivers/compute/driver.js';
import { HYPERVISOR_TYPE, LOCAL_COMPUTE_DRIVER_VERSION } from '../drivers/compute/local.js';
import { computeDriverFor } from '../drivers/compute/registry.js';
import {
  cellMappingKey,
  COMPUTE_BINARY,
  computeNodeKey,
  flavorKey,
  GSI,
  hostMappingKey,
  networkKey,
  stableUuid,
  type CellMapping,
  type CellTable,
  type ComputeNode,
  type ComputeService,
  type Flavor,
  type HostMapping,
  type Network,
} from './model.js';
import { ensureNodeUsage } from './placement.js';
import { putIfAbsent, putService } from './repo.js';
import { ConcurrentModification } from '../core/errors.js';

/** Capacity of every sandbox host. */
export const SANDBOX_HOST_CAPACITY = { vcpus: 8, memoryMb: 16384, diskGb: 200 } as const;

export const SANDBOX_CELLS: readonly { name: string; table: CellTable; generation: number; hosts: readonly string[]; control: readonly { host: string; binary: string }[] }[] = [
  {
    name: 'cell1',
    table: 'cell1',
    generation: 1,
    hosts: ['cmp1', 'cmp2'],
    control: [
      { host: 'controller', binary: 'nova-scheduler' },
      { host: 'controller', binary: 'nova-conductor' },
    ],
  },
  { name: 'cell2', table: 'cell2', generation: 2, hosts: ['cmp3', 'cmp4'], control: [{ host: 'cell2-conductor', binary: 'nova-conductor' }] },
];

export const SANDBOX_NETWORK = { id: stableUuid('network:private'), name: 'private', cidr: '10.0.0.0/24' } as const;

interface FlavorSeed {
  flavorid: string;
  name: string;
  vcpus: number;
  memoryMb: number;
  rootGb: number;
  generation: 1 | 2;
}

/**
 * Root disks are small (1 and 2 GB, not OpenStack's 20 and 80) so a move on a laptop copies in a
 * second: the local driver's disks are sparse files, but a copy still reads every byte.
 */
export const SANDBOX_FLAVORS: readonly FlavorSeed[] = [
  { flavorid: '1', name: 'm1.small', vcpus: 1, memoryMb: 2048, rootGb: 1, generation: 1 },
  { flavorid: '2', name: 'm1.large', vcpus: 4, memoryMb: 8192, rootGb: 2, generation: 1 },
  { flavorid: '3', name: 'm2.small', vcpus: 1, memoryMb: 2048, rootGb: 1, generation: 2 },
  { flavorid: '4', name: 'm2.large', vcpus: 4, memoryMb: 8192, rootGb: 2, generation: 2 },
];

export const cellUuid = (name: string) => stableUuid(`cell:${name}`);
export const serviceUuid = (host: string, binary: string) => stableUuid(`service:${host}:${binary}`);
export const nodeUuid = (host: string) => stableUuid(`compute-node:${host}`);

/** A sandbox host's config; its hardware generation is its cell's (cell1: 1, cell2: 2). */
export function sandboxHostConfig(dataDir: string, host: string): ComputeHostConfig {
  const cell = SANDBOX_CELLS.find((c) => c.hosts.includes(host));
  return { host, driver: 'local', root: join(dataDir, 'compute'), ...SANDBOX_HOST_CAPACITY, ...(cell ? { generation: cell.generation } : {}) };
}

/**
 * A data dir seeded before hosts had generations: its node's config gains the generation, only
 * when absent (an operator's own value stays; a re-run writes nothing).
 */
async function generationIfAbsent(table: string, nodeUuidValue: string, generation: number): Promise<void> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: table,
        Key: computeNodeKey(nodeUuidValue),
        UpdateExpression: 'SET #config.#generation = :generation',
        ConditionExpression: 'attribute_exists(#config) AND attribute_not_exists(#config.#generation)',
        ExpressionAttributeNames: { '#config': 'config', '#generation': 'generation' },
        ExpressionAttributeValues: { ':generation': generation },
      }),
    );
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
  }
}

/** Nova's `convert_version_to_int`: `1.0` -> 1000. */
function versionToInt(v: string): number {
  return v.split('.').reduce((n, part) => n * 1000 + Number(part), 0);
}

async function serviceIfAbsent(cell: CellMapping, svc: ComputeService): Promise<void> {
  try {
    await putService(cell, svc, undefined);
  } catch (e) {
    if (!(e instanceof ConcurrentModification)) throw e;
  }
}

/** A local-driver host's compute node record (Nova's compute_nodes row). */
export function computeNodeFor(config: ComputeHostConfig, id: number, serviceUuidValue: string, at: string): ComputeNode {
  return {
    uuid: nodeUuid(config.host),
    id,
    host: config.host,
    hypervisorHostname: config.host,
    hypervisorType: HYPERVISOR_TYPE,
    hypervisorVersion: versionToInt(LOCAL_COMPUTE_DRIVER_VERSION),
    hostIp: '127.0.0.1',
    vcpus: config.vcpus,
    memoryMb: config.memoryMb,
    localGb: config.diskGb,
    cpuInfo: { arch: 'x86_64', model: HYPERVISOR_TYPE, vendor: 'ferry', topology: { cells: 1, sockets: 1, cores: config.vcpus, threads: 1 }, features: [] },
    config,
    serviceUuid: serviceUuidValue,
    createdAt: at,
  };
}

export async function seedComputeSandbox(options: { dataDir: string }): Promise<void> {
  const at = new Date().toISOString();
  const api = tableName('compute-api');
  let nextServiceId = 1;
  let nextNodeId = 1;
  for (const c of SANDBOX_CELLS) {
    const cell: CellMapping = { uuid: cellUuid(c.name), name: c.name, table: c.table, createdAt: at };
    await putIfAbsent(api, { ...cellMappingKey(cell.uuid), gsi1pk: GSI.cells, gsi1sk: cell.name, ...cell });
    const cellTable = tableName(c.table);

    const service = (host: string, binary: string): ComputeService => ({
      uuid: serviceUuid(host, binary),
      id: nextServiceId++,
      host,
      binary,
      topic: binary.replace(/^nova-/, ''),
      disabled: false,
      disabledReason: null,
      forcedDown: false,
      createdAt: at,
      updatedAt: at,
      version: 1,
    });
    for (const ctl of c.control) await serviceIfAbsent(cell, service(ctl.host, ctl.binary));

    for (const host of c.hosts) {
      const mapping: HostMapping = { host, cellUuid: cell.uuid, cellName: cell.name, createdAt: at };
      await putIfAbsent(api, { ...hostMappingKey(host), gsi1pk: GSI.hosts, gsi1sk: host, ...mapping });
      const config = sandboxHostConfig(options.dataDir, host);
      const svc = service(host, COMPUTE_BINARY);
      await serviceIfAbsent(cell, svc);
      const node = computeNodeFor(config, nextNodeId++, svc.uuid, at);
      const created = await putIfAbsent(cellTable, { ...computeNodeKey(node.uuid), gsi1pk: GSI.nodes, gsi1sk: host, ...node });
      if (!created) await generationIfAbsent(cellTable, node.uuid, c.generation);
      // Placement's inventory: the free-capacity counters every claim on this node is guarded by.
      await ensureNodeUsage(node.uuid, { vcpus: node.vcpus, memoryMb: node.memoryMb, diskGb: node.localGb });
      // A new host's tree exists from the start (host.json, guests/, incoming/, connections/).
      // Only when new: a host an operator (or a test) took down stays as it was across restarts.
      if (created) await computeDriverFor(config).getHostInfo();
    }
  }

  for (const f of SANDBOX_FLAVORS) {
    const flavor: Flavor = {
      flavorid: f.flavorid,
      id: Number(f.flavorid),
      name: f.name,
      memoryMb: f.memoryMb,
      vcpus: f.vcpus,
      rootGb: f.rootGb,
      ephemeralGb: 0,
      swap: 0,
      rxtxFactor: 1.0,
      isPublic: true,
      disabled: false,
      description: `generation ${f.generation} hardware`,
      extraSpecs: { 'hw:generation': String(f.generation) },
      createdAt: at,
    };
    await putIfAbsent(api, { ...flavorKey(f.flavorid), gsi1pk: GSI.flavors, gsi1sk: f.flavorid, ...flavor });
  }

  const network: Network = { ...SANDBOX_NETWORK, createdAt: at };
  await putIfAbsent(api, { ...networkKey(network.id), gsi1pk: GSI.networks, gsi1sk: network.name, ...network });
}
