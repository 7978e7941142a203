/**
 * The compute side of an inventory apply: projects, cells (their mapping and control services),
 * compute hosts (host mapping, nova-compute service, compute node, Placement's free-capacity
 * counters, the driver's host tree), flavors, networks and images; what is there now and the
 * writes that add and remove them. Ids are derived from names (compute/seed.ts's, so a data
 * directory seeded before inventories existed is unchanged by the sandbox inventory); the integer
 * ids Nova also shows come from one counter, so a host added later never reuses one.
 *
 * Removing a host is one transaction conditional on its free-capacity counters being whole (no
 * allocation on it: no instance, no migration holds it), which also deletes them, so no claim can
 * land on the host while it goes.
 */
import { DeleteCommand, GetCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure } from '../core/db.js';
import { Conflict } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { computeDriverFor } from '../drivers/compute/registry.js';
import { COMPUTE_BINARY, GSI, cellMappingKey, computeNodeKey, flavorKey, hostMappingKey, networkKey, nodeUsageKey, serviceKey, type CellMapping, type ComputeService } from '../compute/model.js';
import { ensureNodeUsage, freeOf } from '../compute/placement.js';
import { listCells, listComputeNodes, listFlavors, listNetworks, listServices, putIfAbsent, putService, transact } from '../compute/repo.js';
import { cellUuid, computeNodeFor, serviceUuid } from '../compute/seed.js';
import { createImageRecord, deleteImage, deterministicBytes, findImage, uploadImage } from '../servers/images.js';
import { canonical, flavorFields, flavorIntId, hostConfig, imageUuid, networkUuid } from './records.js';
import type { LiveView } from './plan.js';
import type { CellEntry, FlavorEntry, HostEntry, ImageEntry, NetworkEntry } from './schema.js';

const api = () => tableName('compute-api');

// ---- what is there ---------------------------------------------------------------------------

export async function liveCells(): Promise<LiveView> {
  return new Map((await listCells()).map((c) => [c.name, { fields: canonical({ table: c.table }) }]));
}

/** `inUseOf`: the hosts whose use is asked (an apply: those it could remove); default all. */
export async function liveHosts(inUseOf?: ReadonlySet<string>): Promise<LiveView> {
  const hosts = await Promise.all(
    (await listComputeNodes()).map(async ({ value: node }) => {
      if (inUseOf && !inUseOf.has(node.host)) return [node.host, { fields: canonical(node.config) }] as const;
      const free = await freeOf(node.uuid);
      const whole = free && free.vcpus === node.vcpus && free.memoryMb === node.memoryMb && free.diskGb === node.localGb;
      return [node.host, { fields: canonical(node.config), inUse: whole ? undefined : 'capacity is allocated on it (instances or migrations)' }] as const;
    }),
  );
  return new Map(hosts);
}

export async function liveFlavors(): Promise<LiveView> {
  return new Map((await listFlavors()).map((f) => [f.flavorid, { fields: canonical({ name: f.name, vcpus: f.vcpus, memoryMb: f.memoryMb, rootGb: f.rootGb, ephemeralGb: f.ephemeralGb, swap: f.swap, isPublic: f.isPublic, description: f.description, extraSpecs: f.extraSpecs }) }]));
}

export async function liveNetworks(): Promise<LiveView> {
  return new Map((await listNetworks()).map((n) => [n.name, { fields: canonical({ cidr: n.cidr }) }]));
}

/** The images among `names` that exist (by their derived id), with their size. */
export async function liveImages(names: Iterable<string>): Promise<LiveView> {
  const out: LiveView = new Map();
  const images = await Promise.all([...new Set(names)].map(async (name) => [name, await findImage(imageUuid(name))] as const));
  for (const [name, image] of images) {
    // One not yet active (a crash between record and upload) counts as absent: adding it finishes it.
    if (image?.status === 'active') out.set(name, { fields: canonical({ sizeBytes: image.sizeBytes }) });
  }
  return out;
}

export async function liveProjects(names: Iterable<string>): Promise<LiveView> {
  const found = await Promise.all(
    [...new Set(names)].map(async (name) => [name, (await db().send(new GetCommand({ TableName: tableName('volume'), Key: { pk: `PROJECT#${name}`, sk: 'PROJECT' } }))).Item] as const),
  );
  return new Map(found.filter(([, item]) => item).map(([name]) => [name, { fields: canonical({}) }]));
}

// ---- writes ----------------------------------------------------------------------------------

export async function addProject(name: string): Promise<void> {
  await putIfAbsent(tableName('volume'), { pk: `PROJECT#${name}`, sk: 'PROJECT', gsi1pk: 'PROJECTS', gsi1sk: name, id: name, name, createdAt: new Date().toISOString() });
}

/** The next of Nova's integer ids of a kind; the counter starts past every id already used (a data dir seeded before it existed). */
async function nextId(kind: 'service' | 'node', used: () => Promise<number[]>): Promise<number> {
  const key = { pk: `COUNTER#${kind}-id`, sk: 'COUNTER' };
  const present = (await db().send(new GetCommand({ TableName: api(), Key: key, ConsistentRead: true }))).Item;
  if (!present) {
    const start = Math.max(0, ...(await used()));
    await db().send(new PutCommand({ TableName: api(), Item: { ...key, value: start }, ConditionExpression: 'attribute_not_exists(pk)' })).catch((e) => {
      if (!isConditionFailure(e)) throw e;
    });
  }
  const out = await db().send(new UpdateCommand({ TableName: api(), Key: key, UpdateExpression: 'ADD #v :one', ExpressionAttributeNames: { '#v': 'value' }, ExpressionAttributeValues: { ':one': 1 }, ReturnValues: 'UPDATED_NEW' }));
  return Number(out.Attributes!.value);
}

const nextServiceId = () => nextId('service', async () => (await listServices()).map((s) => s.value.id));
const nextNodeId = () => nextId('node', async () => (await listComputeNodes()).map((n) => n.value.id));

function newService(host: string, binary: string, id: number, at: string): ComputeService {
  return { uuid: serviceUuid(host, binary), id, host, binary, topic: binary.replace(/^nova-/, ''), disabled: false, disabledReason: null, forcedDown: false, createdAt: at, updatedAt: at, version: 1 };
}

function cellOf(entry: CellEntry): CellMapping {
  return { uuid: cellUuid(entry.name), name: entry.name, table: entry.table, createdAt: new Date().toISOString() };
}

/** The cell mapping and its control services (each only when absent), side by side. */
export async function addCell(entry: CellEntry): Promise<void> {
  const cell = cellOf(entry);
  await Promise.all([putIfAbsent(api(), { ...cellMappingKey(cell.uuid), gsi1pk: GSI.cells, gsi1sk: cell.name, ...cell }), ensureControlServices(entry)]);
}

/**
 * The cell's control services that are missing, made: read side by side, their Nova integer ids
 * taken one after another in the inventory's order (as before), written side by side (issue 16:
 * a first start waited for each service's three round trips in turn).
 */
export async function ensureControlServices(entry: CellEntry): Promise<void> {
  const cell = cellOf(entry);
  const present = await Promise.all(entry.control.map(async (c) => (await db().send(new GetCommand({ TableName: tableName(cell.table), Key: serviceKey(serviceUuid(c.host, c.binary)) }))).Item !== undefined));
  const missing = entry.control.filter((_, i) => !present[i]);
  const ids: number[] = [];
  while (ids.length < missing.length) ids.push(await nextServiceId());
  await Promise.all(missing.map((c, i) => putService(cell, newService(c.host, c.binary, ids[i]!, cell.createdAt), undefined)));
}

/**
 * A compute host: its service's and node's integer ids (side by side: two counters), then its host
 * mapping, service, free-capacity counters and host tree side by side, and its compute node last:
 * the node is what says the host exists (liveHosts), so a crash before it leaves a host that the
 * next apply adds again, finding the others made (each write is conditional on absence).
 */
export async function addHost(cellEntry: CellEntry, h: HostEntry): Promise<void> {
  const cell = cellOf(cellEntry);
  const at = cell.createdAt;
  const config = hostConfig(cellEntry, h);
  const [serviceId, nodeId] = await Promise.all([nextServiceId(), nextNodeId()]);
  const svc = newService(h.host, COMPUTE_BINARY, serviceId, at);
  const node = computeNodeFor(config, nodeId, svc.uuid, at);
  await Promise.all([
    putIfAbsent(api(), { ...hostMappingKey(h.host), gsi1pk: GSI.hosts, gsi1sk: h.host, host: h.host, cellUuid: cell.uuid, cellName: cell.name, createdAt: at }),
    putService(cell, svc, undefined).catch((e) => {
      if (!(e instanceof Error && e.name === 'ConcurrentModification')) throw e;
    }),
    ensureNodeUsage(node.uuid, { vcpus: node.vcpus, memoryMb: node.memoryMb, diskGb: node.localGb }),
    // The driver's host tree (host.json, guests/, incoming/, connections/).
    computeDriverFor(config).getHostInfo(),
  ]);
  await putIfAbsent(tableName(cell.table), { ...computeNodeKey(node.uuid), gsi1pk: GSI.nodes, gsi1sk: h.host, ...node });
}

/** Removes a host with nothing allocated on it: counters, node, service and mapping in one transaction. */
export async function removeHost(host: string): Promise<void> {
  const found = (await listComputeNodes()).find((n) => n.value.host === host);
  if (!found) return;
  const { cell, value: node } = found;
  try {
    await transact([
      {
        Delete: {
          TableName: api(),
          Key: nodeUsageKey(node.uuid),
          ConditionExpression: 'vcpusFree = :v AND memoryMbFree = :m AND diskGbFree = :d',
          ExpressionAttributeValues: { ':v': node.vcpus, ':m': node.memoryMb, ':d': node.localGb },
        },
      },
      { Delete: { TableName: tableName(cell.table), Key: computeNodeKey(node.uuid) } },
      { Delete: { TableName: tableName(cell.table), Key: serviceKey(node.serviceUuid) } },
      { Delete: { TableName: api(), Key: hostMappingKey(host) } },
    ]);
  } catch (e) {
    if (isConditionFailure(e)) throw new Conflict(`compute host ${host} has capacity allocated (instances or migrations): nothing removed`);
    throw e;
  }
}

export async function addFlavor(f: FlavorEntry): Promise<void> {
  const flavor = { flavorid: f.id, id: flavorIntId(f.id), ...flavorFields(f), rxtxFactor: 1.0, disabled: false, createdAt: new Date().toISOString() };
  await putIfAbsent(api(), { ...flavorKey(f.id), gsi1pk: GSI.flavors, gsi1sk: f.id, ...flavor });
}

/** Nova deletes a flavor in use too: instances keep their embedded copy. */
export async function removeFlavor(flavorid: string): Promise<void> {
  await db().send(new DeleteCommand({ TableName: api(), Key: flavorKey(flavorid) }));
}

export async function addNetwork(n: NetworkEntry): Promise<void> {
  const id = networkUuid(n.name);
  await putIfAbsent(api(), { ...networkKey(id), gsi1pk: GSI.networks, gsi1sk: n.name, id, name: n.name, cidr: n.cidr, createdAt: new Date().toISOString() });
}

/** A public image of generated bytes; a crash between record and upload is finished by the next apply. */
export async function addImage(i: ImageEntry): Promise<void> {
  const id = imageUuid(i.name);
  // A record made just now is the one createImageRecord returns (queued): not read back (issue 16:
  // the images end the first wave of a first start's apply).
  const image = (await findImage(id)) ?? (await createImageRecord({ id, name: i.name, ownerProjectId: null, visibility: 'public', properties: {} }));
  if (image.status !== 'active') await uploadImage(id, deterministicBytes(i.name, i.sizeBytes));
}

export async function removeImage(name: string): Promise<void> {
  await deleteImage(imageUuid(name));
}
