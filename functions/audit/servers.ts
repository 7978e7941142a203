/**
 * The audit of servers (issue 5): what the cell tables and the API table say against what the
 * attachments API and the compute hosts hold.
 *
 * Invariants (each finding names the one it breaks):
 * - every BDM's attachment is a live attachment of that volume and that instance
 *   (`bdm-attachment-missing`, `bdm-attachment-mismatch`); a BDM with connection_info is connected
 *   on the instance's host (`bdm-host-mismatch`);
 * - every live attachment of a Nova instance is some BDM's (`attachment-without-bdm`), and an
 *   attachment with a connector matches a connection on that compute host
 *   (`attachment-without-host-connection`);
 * - no host connection without an attachment connected there (`host-connection-without-attachment`);
 * - every guest on a host is an instance placed there, or a move's other end
 *   (`orphan-guest`, `orphan-kept-disks`); every settled instance with a host has its guest there
 *   (`missing-guest`);
 * - every allocation's consumer is an instance or an unfinished migration (`allocation-without-consumer`),
 *   a node's free counters equal its inventory less its allocations (`node-usage-mismatch`, `node-overcommitted`);
 * - every port's device is an instance (`orphan-port`); every instance mapping (and request spec)
 *   has its instance and the reverse (`mapping-mismatch`); an instance is in its host's cell
 *   (`instance-cell-mismatch`); no operation runs past the threshold (`stuck-server-operation`).
 *
 * Instances with an operation in flight are only checked for being stuck: a move holds both ends.
 * Only the shown copy of an instance is checked here (its own cell's BDMs); the hidden copy of a
 * cross-cell move keeps its BDMs' attachments (att_S2 placeholders) in use, and the copies
 * themselves are checked by functions/audit/cross-cell.ts (`hidden-copy-without-move`,
 * `mapping-cell-without-instance`, `two-visible-copies`, `bdms-of-deleted-copy`).
 */
import type { Attachment } from '../attachments/model.js';
import { scanAll } from '../core/db.js';
import { tableName } from '../core/tables.js';
import { listCells, listComputeNodes } from '../compute/repo.js';
import { computeDriverFor } from '../drivers/compute/registry.js';
import { normalizeConnectionInfo } from '../drivers/compute/local.js';
import { auditCrossCell, type CellPartitions, type InstanceCopy } from './cross-cell.js';
import type { Find } from './findings.js';
import { attachmentsNamedBy, type BlockDeviceMapping, type Instance, type InstanceMapping, type Migration, type Port } from '../servers/model.js';


const strip = <T>(item: Record<string, unknown>): T => {
  const { pk: _pk, sk: _sk, gsi1pk: _g1, gsi1sk: _g2, ...rest } = item;
  return rest as T;
};

/** Migration statuses after which a migration holds nothing. */
const FINAL_MIGRATION = new Set(['confirmed', 'reverted', 'error', 'failed', 'completed', 'done', 'cancelled']);

export async function auditServers(now: number, stuckMs: number, find: Find, liveAttachments: Map<string, Attachment>): Promise<Record<string, number>> {
  const cells = await listCells();
  const instances = new Map<string, Instance>();
  /** The cell whose table holds each instance. */
  const cellOf = new Map<string, string>();
  /** BDMs by cell and instance: two copies of a uuid have BDMs of their own (att_S2 vs att_D). */
  const bdmsIn = new Map<string, BlockDeviceMapping[]>();
  const bdmKeyOf = (cellUuid: string, uuid: string) => `${cellUuid}/${uuid}`;
  const migrations: Migration[] = [];
  const copies: InstanceCopy[] = [];
  const partitions: CellPartitions[] = [];
  const cellMigrations: { cellUuid: string; migration: Migration }[] = [];
  for (const cell of cells) {
    const items = await scanAll({ TableName: tableName(cell.table), ConsistentRead: true });
    const partition: CellPartitions = { cellUuid: cell.uuid, instances: new Set(), children: new Map() };
    partitions.push(partition);
    for (const i of items) {
      const sk = String(i.sk);
      if (sk === 'INSTANCE') {
        const inst = strip<Instance>(i);
        copies.push({ cellUuid: cell.uuid, instance: inst });
        partition.instances.add(inst.uuid);
        if (!inst.hidden) {
          instances.set(inst.uuid, inst);
          cellOf.set(inst.uuid, cell.uuid);
        }
      } else if (sk.startsWith('BDM#') || sk.startsWith('ACTION#')) {
        const uuid = String(i.pk).replace(/^INSTANCE#/, '');
        partition.children.set(uuid, [...(partition.children.get(uuid) ?? []), sk]);
        if (sk.startsWith('BDM#')) {
          const b = strip<BlockDeviceMapping>(i);
          const key = bdmKeyOf(cell.uuid, b.instanceUuid);
          bdmsIn.set(key, [...(bdmsIn.get(key) ?? []), b]);
        }
      } else if (sk === 'MIGRATION') {
        const m = strip<Migration>(i);
        migrations.push(m);
        cellMigrations.push({ cellUuid: cell.uuid, migration: m });
      }
    }
  }
  const api = await scanAll({ TableName: tableName('compute-api'), ConsistentRead: true });
  const mappings = api.filter((i) => i.sk === 'INSTMAP').map((i) => strip<InstanceMapping>(i));
  const ports = api.filter((i) => i.sk === 'PORT').map((i) => strip<Port>(i));
  const allocations = api.filter((i) => String(i.sk).startsWith('ALLOC#'));
  const usages = new Map(api.filter((i) => i.sk === 'USAGE').map((i) => [String(i.nodeUuid), i]));
  const busy = (i: Instance) => i.operation !== null;
  auditCrossCell({ copies, partitions, mappings, migrations: cellMigrations, finalMigration: FINAL_MIGRATION, find });

  // Stuck operations and mappings.
  for (const inst of instances.values()) {
    if (inst.operation && now - Date.parse(inst.operation.startedAt) > stuckMs) {
      find('stuck-server-operation', `server ${inst.uuid}`, `${inst.operation.kind} (task_state ${inst.taskState ?? 'None'}) running since ${inst.operation.startedAt}`);
    }
  }
  const specs = new Set(api.filter((i) => i.sk === 'REQSPEC').map((i) => String(i.instanceUuid)));
  for (const uuid of specs) if (!instances.has(uuid)) find('mapping-mismatch', `request spec ${uuid}`, 'its instance does not exist in any cell');
  const mapped = new Set(mappings.map((m) => m.instanceUuid));
  for (const m of mappings) if (!instances.has(m.instanceUuid)) find('mapping-mismatch', `instance mapping ${m.instanceUuid}`, 'its instance does not exist in any cell');
  for (const inst of instances.values()) if (!mapped.has(inst.uuid)) find('mapping-mismatch', `server ${inst.uuid}`, 'has no instance mapping');

  // BDMs against attachments.
  const attachmentsUsed = new Set<string>();
  // A hidden copy's BDMs (the source's att_S2 placeholders in VERIFY_RESIZE) and its operation's
  // holds keep their attachments in use; whether the copy should exist is cross-cell.ts's check.
  for (const { cellUuid, instance } of copies) {
    if (!instance.hidden) continue;
    if (instance.operation) for (const id of attachmentsNamedBy(instance.operation)) attachmentsUsed.add(id);
    for (const b of bdmsIn.get(bdmKeyOf(cellUuid, instance.uuid)) ?? []) if (b.attachmentId) attachmentsUsed.add(b.attachmentId);
  }
  for (const inst of instances.values()) {
    // Every attachment the operation's record names (intents included) is in use by that operation.
    if (inst.operation) for (const id of attachmentsNamedBy(inst.operation)) attachmentsUsed.add(id);
    for (const b of bdmsIn.get(bdmKeyOf(cellOf.get(inst.uuid)!, inst.uuid)) ?? []) {
      if (b.attachmentId) attachmentsUsed.add(b.attachmentId);
      if (busy(inst) || b.destinationType !== 'volume') continue;
      const resource = `bdm ${b.uuid} of server ${inst.uuid}`;
      if (!b.attachmentId) {
        find('bdm-attachment-missing', resource, `volume ${b.volumeId} has no attachment`);
        continue;
      }
      const a = liveAttachments.get(b.attachmentId);
      if (!a) find('bdm-attachment-missing', resource, `attachment ${b.attachmentId} is not a live attachment`);
      else if (a.volumeId !== b.volumeId || a.instanceUuid !== inst.uuid) find('bdm-attachment-mismatch', resource, `attachment ${a.id} is of volume ${a.volumeId} / instance ${a.instanceUuid}`);
      else if (b.connectionInfo && inst.host && a.attachedHost !== inst.host) find('bdm-host-mismatch', resource, `connected for ${inst.host}, but attachment ${a.id} is connected on ${a.attachedHost ?? 'no host'}`);
    }
  }
  for (const a of liveAttachments.values()) {
    if (!a.instanceUuid || !instances.has(a.instanceUuid)) continue; // not a Nova server's (cinder attach by hand)
    if (busy(instances.get(a.instanceUuid)!)) continue;
    if (!attachmentsUsed.has(a.id)) {
      find('attachment-without-bdm', `attachment ${a.id}`, `of volume ${a.volumeId} for server ${a.instanceUuid}, which has no BDM using it`, { attachmentId: a.id, volumeId: a.volumeId, instanceUuid: a.instanceUuid, cellUuid: cellOf.get(a.instanceUuid)! });
    }
  }

  // Compute hosts: guests, kept disks, connections.
  const nodes = await listComputeNodes();
  let guests = 0;
  let connections = 0;
  const migratingHosts = new Map<string, Set<string>>();
  for (const m of migrations) {
    if (FINAL_MIGRATION.has(m.status)) continue;
    for (const h of [m.sourceCompute, m.destCompute]) if (h) migratingHosts.set(m.instanceUuid, new Set([...(migratingHosts.get(m.instanceUuid) ?? []), h]));
  }
  for (const { value: node } of nodes) {
    const driver = computeDriverFor(node.config);
    const info = await driver.getHostInfo();
    if (!info.up) continue; // a down host cannot be read; an evacuated guest on it is cleaned when it comes back
    const host = node.host;
    const [onHost, kept, conns] = await Promise.all([driver.listGuests(), driver.listKeptDisks(), driver.listConnections()]);
    guests += onHost.length;
    connections += conns.length;
    for (const g of onHost) {
      const inst = instances.get(g.uuid);
      if (!inst) find('orphan-guest', `guest ${g.uuid} on ${host}`, 'no server has this uuid');
      else if (!busy(inst) && inst.host !== host && !migratingHosts.get(inst.uuid)?.has(host)) find('orphan-guest', `guest ${g.uuid} on ${host}`, `server ${inst.uuid} is on ${inst.host ?? 'no host'}`);
    }
    for (const k of kept) {
      const inst = instances.get(k.uuid);
      const moving = inst && (busy(inst) || inst.vmState === 'resized' || migratingHosts.get(inst.uuid)?.has(host));
      if (!moving) find('orphan-kept-disks', `kept disks ${k.uuid} on ${host}`, inst ? `server ${inst.uuid} is ${inst.vmState} on ${inst.host ?? 'no host'} with no move holding them` : 'no server has this uuid');
    }
    for (const inst of instances.values()) {
      if (busy(inst) || inst.host !== host || ['error', 'shelved_offloaded', 'building'].includes(inst.vmState)) continue;
      if (!onHost.some((g) => g.uuid === inst.uuid)) find('missing-guest', `server ${inst.uuid}`, `${inst.vmState} on ${host}, which has no guest of it`);
    }
    for (const c of conns) {
      const volumeId = c.volumeId;
      const attached = [...liveAttachments.values()].some((a) => a.attachedHost === host && (!volumeId || a.volumeId === volumeId) && a.connectionInfo && pathOf(a.connectionInfo) === c.devicePath);
      if (!attached) find('host-connection-without-attachment', `connection ${c.key} on ${host}`, `volume ${volumeId ?? '?'} has no attachment connected on ${host}`);
    }
    for (const a of liveAttachments.values()) {
      if (a.attachedHost !== host || !a.instanceUuid || !instances.has(a.instanceUuid) || busy(instances.get(a.instanceUuid)!) || !a.connectionInfo) continue;
      const path = pathOf(a.connectionInfo);
      if (!conns.some((c) => c.devicePath === path)) find('attachment-without-host-connection', `attachment ${a.id}`, `connected on ${host} for volume ${a.volumeId}, but ${host} has no connection to it`);
    }
  }

  // Allocations and node usage.
  const migrationByUuid = new Map(migrations.map((m) => [m.uuid, m]));
  const heldOn = new Map<string, { vcpus: number; memoryMb: number; diskGb: number }>();
  for (const a of allocations) {
    const consumer = String(a.consumer);
    const nodeUuid = String(a.nodeUuid);
    const m = migrationByUuid.get(consumer);
    if (!instances.has(consumer) && !(m && !FINAL_MIGRATION.has(m.status) && instances.has(m.instanceUuid))) {
      find('allocation-without-consumer', `allocation of ${consumer} on node ${nodeUuid}`, m ? `migration ${consumer} is ${m.status}` : 'no server or migration in progress has this uuid');
    }
    const h = heldOn.get(nodeUuid) ?? { vcpus: 0, memoryMb: 0, diskGb: 0 };
    heldOn.set(nodeUuid, { vcpus: h.vcpus + Number(a.vcpus), memoryMb: h.memoryMb + Number(a.memoryMb), diskGb: h.diskGb + Number(a.diskGb) });
  }
  for (const { value: node } of nodes) {
    const usage = usages.get(node.uuid);
    const h = heldOn.get(node.uuid) ?? { vcpus: 0, memoryMb: 0, diskGb: 0 };
    if (!usage) {
      if (h.vcpus || h.memoryMb || h.diskGb) find('node-usage-mismatch', `node ${node.host}`, 'allocations exist but the node has no usage record');
      continue;
    }
    const free = { vcpus: Number(usage.vcpusFree), memoryMb: Number(usage.memoryMbFree), diskGb: Number(usage.diskGbFree) };
    if (free.vcpus !== node.vcpus - h.vcpus || free.memoryMb !== node.memoryMb - h.memoryMb || free.diskGb !== node.localGb - h.diskGb) {
      find('node-usage-mismatch', `node ${node.host}`, `free ${JSON.stringify(free)}, inventory less allocations ${JSON.stringify({ vcpus: node.vcpus - h.vcpus, memoryMb: node.memoryMb - h.memoryMb, diskGb: node.localGb - h.diskGb })}`);
    }
    if (free.vcpus < 0 || free.memoryMb < 0 || free.diskGb < 0) find('node-overcommitted', `node ${node.host}`, `free ${JSON.stringify(free)}`);
  }
  // An instance lives in the cell of its host (a cell is a failure domain: its host's services
  // read the instance from that cell's table).
  const cellOfHost = new Map(nodes.map((n) => [n.value.host, n.cell.uuid]));
  for (const inst of instances.values()) {
    if (!inst.host || !cellOfHost.has(inst.host)) continue;
    if (cellOfHost.get(inst.host) !== cellOf.get(inst.uuid)) find('instance-cell-mismatch', `server ${inst.uuid}`, `on host ${inst.host}, whose cell is not the cell holding the instance`);
  }
  // Instances placed on a host hold an allocation there unless offloaded or failed.
  const nodeByHost = new Map(nodes.map((n) => [n.value.host, n.value.uuid]));
  for (const inst of instances.values()) {
    if (busy(inst) || !inst.host || inst.vmState === 'error' || inst.vmState === 'shelved_offloaded') continue;
    const nodeUuid = nodeByHost.get(inst.host);
    if (nodeUuid && !allocations.some((a) => a.consumer === inst.uuid && a.nodeUuid === nodeUuid)) find('missing-allocation', `server ${inst.uuid}`, `${inst.vmState} on ${inst.host} without an allocation there`);
  }

  for (const p of ports) if (!instances.has(p.deviceId)) find('orphan-port', `port ${p.id}`, `its device ${p.deviceId} is not a server`);

  return { servers: instances.size, 'block device mappings': [...bdmsIn.values()].reduce((n, b) => n + b.length, 0), guests, 'compute host connections': connections, allocations: allocations.length, ports: ports.length };
}

function pathOf(info: Record<string, unknown>): string | undefined {
  try {
    return normalizeConnectionInfo(info).devicePath;
  } catch {
    return undefined;
  }
}
