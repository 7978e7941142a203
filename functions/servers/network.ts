/**
 * Ports (Neutron's role for Ferry): a port per server NIC with one fixed IP, and per-host port
 * bindings (Neutron's binding-extended, which live migration and cross-cell moves use to prepare
 * the destination while the source keeps the ACTIVE binding).
 *
 * Invariants kept by DynamoDB, not by reading first:
 * - an IP is held by one port: its claim item `IP#<network>#<ip>` is put with attribute_not_exists
 *   in the same transaction as the port;
 * - a port changes only by a write conditional on the `version` read (and bumping it), so two
 *   binding changes computed from the same state cannot both land.
 */
import { createHash, randomUUID } from 'node:crypto';
import { BatchGetCommand, GetCommand, PutCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { cancellationCodes, db, isConditionFailure, isTransactionConflict, listKind, queryAll, withRetries } from '../core/db.js';
import { ConcurrentModification, Conflict, NotFound, OverLimit } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { networkKey, stableUuid, type Network } from '../compute/model.js';
import { listNetworks } from '../compute/repo.js';
import { fixedIpKey, portKey, SERVER_GSI, type Port, type PortBinding } from './model.js';

const KEY_ATTRIBUTES = new Set(['pk', 'sk', 'gsi1pk', 'gsi1sk', 'version']);
const apiTable = () => tableName('compute-api');

/** Nova's device_owner for an instance's port. */
export const COMPUTE_DEVICE_OWNER = 'compute:nova';
/** How many candidate IPs one consistent BatchGet reads (DynamoDB's limit per request). */
const CANDIDATE_PAGE = 100;

interface Versioned {
  port: Port;
  version: number;
}

function toPort(item: Record<string, unknown>): Port {
  return Object.fromEntries(Object.entries(item).filter(([k]) => !KEY_ATTRIBUTES.has(k))) as unknown as Port;
}

const portNotFound = (id: string) => new NotFound(`Port ${id} could not be found.`);

/** Ports as this process last read or wrote them (a move binds, then activates, the same port), by id; a few hundred at most. */
const lastWrittenPorts = new Map<string, Versioned>();
function rememberPort(id: string, value: Versioned): void {
  lastWrittenPorts.delete(id);
  lastWrittenPorts.set(id, value);
  if (lastWrittenPorts.size > 256) lastWrittenPorts.delete(lastWrittenPorts.keys().next().value!);
}

async function readPort(id: string): Promise<Versioned | undefined> {
  const out = await db().send(new GetCommand({ TableName: apiTable(), Key: portKey(id), ConsistentRead: true }));
  return out.Item ? { port: toPort(out.Item), version: out.Item.version as number } : undefined;
}

function portItem(port: Port, version: number): Record<string, unknown> {
  return { ...portKey(port.id), gsi1pk: SERVER_GSI.portsOf(port.deviceId), gsi1sk: port.id, ...port, version };
}

/** @throws NotFound */
export async function getPort(id: string): Promise<Port> {
  const found = await readPort(id);
  if (!found) throw portNotFound(id);
  return found.port;
}

/** A MAC in Neutron's default base (fa:16:3e), derived from the port id so a retry gets the same one. */
export function macFor(portId: string): string {
  const h = createHash('sha256').update(portId).digest('hex');
  return `fa:16:3e:${h.slice(0, 2)}:${h.slice(2, 4)}:${h.slice(4, 6)}`;
}

/** Ferry's networks have one subnet each; its id is derived from the network's. */
export const subnetIdOf = (networkId: string) => stableUuid(`subnet:${networkId}`);

function ipToInt(ip: string): number {
  return ip.split('.').reduce((n, octet) => n * 256 + Number(octet), 0);
}

function intToIp(n: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(n / 2 ** shift) % 256).join('.');
}

/** The addresses a port may get, lowest first: the cidr without its network address, the .1 gateway and broadcast. */
export function* assignableAddresses(cidr: string): Generator<string> {
  const [base, bits] = cidr.split('/');
  const size = 2 ** (32 - Number(bits));
  const network = ipToInt(base!) - (ipToInt(base!) % size);
  for (let n = network + 2; n < network + size - 1; n++) yield intToIp(n);
}

/** Which of `ips` are claimed in the network (one consistent BatchGet; unprocessed keys asked again). */
async function claimedAmong(networkId: string, ips: string[]): Promise<Set<string>> {
  const claimed = new Set<string>();
  let keys: Record<string, unknown>[] = ips.map((ip) => fixedIpKey(networkId, ip));
  while (keys.length > 0) {
    const out = await db().send(new BatchGetCommand({ RequestItems: { [apiTable()]: { Keys: keys, ConsistentRead: true, ProjectionExpression: 'ipAddress' } } }));
    for (const item of out.Responses?.[apiTable()] ?? []) claimed.add(item.ipAddress as string);
    keys = (out.UnprocessedKeys?.[apiTable()]?.Keys ?? []) as Record<string, unknown>[];
  }
  return claimed;
}

/** The free addresses of a network, lowest first, read a page at a time as they are consumed. */
async function* freeAddresses(network: Network): AsyncGenerator<string> {
  let page: string[] = [];
  const flush = async function* () {
    const claimed = await claimedAmong(network.id, page);
    for (const ip of page) if (!claimed.has(ip)) yield ip;
    page = [];
  };
  for (const ip of assignableAddresses(network.cidr)) {
    page.push(ip);
    if (page.length === CANDIDATE_PAGE) yield* flush();
  }
  if (page.length > 0) yield* flush();
}

async function getNetwork(id: string): Promise<Network> {
  const out = await db().send(new GetCommand({ TableName: apiTable(), Key: networkKey(id), ConsistentRead: true }));
  if (!out.Item) throw new NotFound(`Network ${id} could not be found.`);
  return out.Item as unknown as Network;
}

/** The port `portId` if it is this instance's; a port of another device with that id is a Conflict. */
function sameInstancePort(found: Versioned, instanceUuid: string): Port {
  if (found.port.deviceId !== instanceUuid) throw new Conflict(`Port ${found.port.id} is still in use.`);
  return found.port;
}

/**
 * Creates a port on the network for the instance, DOWN and unbound, with the lowest free fixed IP.
 * The IP claim and the port are one transaction; a claim lost to another port moves on to the
 * next free address. Idempotent by `portId`: the instance's existing port is returned.
 * @throws NotFound (network), Conflict (portId taken by another device), OverLimit (no free IP)
 */
export async function createPort(input: { networkId: string; instanceUuid: string; projectId: string; portId?: string }): Promise<Port> {
  const id = input.portId ?? randomUUID();
  const existing = await readPort(id);
  if (existing) return sameInstancePort(existing, input.instanceUuid);
  const network = await getNetwork(input.networkId);
  const subnetId = subnetIdOf(network.id);

  for await (const ip of freeAddresses(network)) {
    const at = new Date().toISOString();
    const port: Port = {
      id,
      networkId: network.id,
      macAddress: macFor(id),
      fixedIps: [{ ipAddress: ip, subnetId }],
      deviceId: input.instanceUuid,
      deviceOwner: COMPUTE_DEVICE_OWNER,
      projectId: input.projectId,
      bindingHostId: null,
      bindings: {},
      status: 'DOWN',
      createdAt: at,
      updatedAt: at,
    };
    const claim = { ...fixedIpKey(network.id, ip), networkId: network.id, ipAddress: ip, portId: id, createdAt: at };
    // A transaction cancelled only by a conflicting one in flight may find the address still free.
    const outcome = await withRetries(() => claimWithPort(claim, port), { attempts: 5, retryable: (e) => isTransactionConflict(e) && !isConditionFailure(e) }).catch(
      (e: unknown) => {
        if (isConditionFailure(e) || isTransactionConflict(e)) return cancellationCodes(e)[1] === 'ConditionalCheckFailed' ? 'port exists' : 'address taken';
        throw e;
      },
    );
    if (outcome === 'created') return port;
    if (outcome === 'port exists') {
      // A concurrent create with the same port id won.
      const winner = await readPort(id);
      if (winner) return sameInstancePort(winner, input.instanceUuid);
    }
    // The address went to another port: the next free one.
  }
  throw new OverLimit(`No more IP addresses available on network ${network.id}.`);
}

/** The IP claim and the port, both only if absent, in one transaction. */
async function claimWithPort(claim: Record<string, unknown>, port: Port): Promise<'created'> {
  await db().send(
    new TransactWriteCommand({
      TransactItems: [
        { Put: { TableName: apiTable(), Item: claim, ConditionExpression: 'attribute_not_exists(pk)' } },
        { Put: { TableName: apiTable(), Item: portItem(port, 1), ConditionExpression: 'attribute_not_exists(pk)' } },
      ],
    }),
  );
  return 'created';
}

/** The ports of an instance, by port id. */
export async function listPortsOf(instanceUuid: string): Promise<Port[]> {
  const items = await queryAll({
    TableName: apiTable(),
    IndexName: 'gsi1',
    KeyConditionExpression: 'gsi1pk = :p',
    ExpressionAttributeValues: { ':p': SERVER_GSI.portsOf(instanceUuid) },
  });
  return items.map(toPort);
}

/** Every port (the audit's view). */
export async function scanAllPorts(): Promise<Port[]> {
  return (await listKind(apiTable(), { sk: 'PORT', pkPrefix: 'PORT#' })).map(toPort);
}

/**
 * Re-reads the port and applies `change` (pure: the next port, or undefined for no write), writing
 * it conditional on the version read; a lost race re-reads and re-applies.
 */
async function changePort<T>(portId: string, change: (port: Port) => { next?: Port; result: T }): Promise<T> {
  return withRetries(
    async (attempt) => {
      // The port as this process last wrote it may be the base of a write (its version condition
      // refuses a stale one); a change that writes nothing, or refuses, is decided on a fresh read.
      const base = attempt === 0 ? lastWrittenPorts.get(portId) : undefined;
      const tried = base ? tryChange(change, base.port) : undefined;
      const found = tried?.next ? base! : await readPort(portId);
      if (!found) throw portNotFound(portId);
      if (found !== base) rememberPort(portId, found);
      const { next, result } = tried?.next ? tried : change(found.port);
      if (!next) return result;
      const version = found.version + 1;
      const stored = { ...next, updatedAt: new Date().toISOString() };
      try {
        await db().send(
          new PutCommand({
            TableName: apiTable(),
            Item: portItem(stored, version),
            ConditionExpression: 'version = :v',
            ExpressionAttributeValues: { ':v': found.version },
          }),
        );
      } catch (e) {
        lastWrittenPorts.delete(portId);
        if (isConditionFailure(e)) throw new ConcurrentModification(`Port ${portId}`, e);
        throw e;
      }
      rememberPort(portId, { port: stored, version });
      return result;
    },
    { attempts: 20, retryable: (e) => e instanceof ConcurrentModification },
  );
}

/** A change applied to a remembered port; one that refuses there is left to a fresh read to decide. */
function tryChange<T>(change: (port: Port) => { next?: Port; result: T }, port: Port): { next?: Port; result: T } | undefined {
  try {
    return change(port);
  } catch {
    return undefined;
  }
}

/** The port with `host`'s binding ACTIVE, every other binding INACTIVE, bound to `host`. */
function withActiveBinding(port: Port, host: string): Port {
  const bindings = Object.fromEntries(Object.entries(port.bindings).map(([h, b]) => [h, { ...b, status: h === host ? 'ACTIVE' : 'INACTIVE' } as PortBinding]));
  return { ...port, bindings, bindingHostId: host, status: 'ACTIVE' };
}

/**
 * Neutron's `POST /ports/{id}/bindings`: a binding of the port for `host`. It is ACTIVE when the
 * port has no ACTIVE binding (its first binding) or when `active` asks for it (the previous one
 * becomes INACTIVE); otherwise INACTIVE. A host already bound gets its existing binding back.
 * @throws NotFound (port)
 */
export async function bindPortToHost(portId: string, host: string, options: { active?: boolean; profile?: Record<string, unknown> } = {}): Promise<PortBinding> {
  return changePort(portId, (port) => {
    const existing = port.bindings[host];
    if (existing) return { result: existing };
    const binding: PortBinding = { host, status: 'INACTIVE', vifType: 'ovs', vnicType: 'normal', profile: options.profile ?? {} };
    const withBinding: Port = { ...port, bindings: { ...port.bindings, [host]: binding } };
    const hasActive = Object.values(port.bindings).some((b) => b.status === 'ACTIVE');
    if (hasActive && !options.active) return { next: withBinding, result: binding };
    const next = withActiveBinding(withBinding, host);
    return { next, result: next.bindings[host]! };
  });
}

/**
 * Neutron's `PUT /ports/{id}/bindings/{host}/activate`: `host`'s binding becomes ACTIVE, the one
 * that was ACTIVE becomes INACTIVE, and the port is bound to `host`. Already active: no change.
 * @throws NotFound (port, or no binding for host)
 */
export async function activatePortBinding(portId: string, host: string): Promise<PortBinding> {
  return changePort(portId, (port) => {
    const binding = port.bindings[host];
    if (!binding) throw new NotFound(`Binding for port ${portId} for host ${host} could not be found.`);
    if (binding.status === 'ACTIVE' && port.bindingHostId === host) return { result: binding };
    const next = withActiveBinding(port, host);
    return { next, result: next.bindings[host]! };
  });
}

/**
 * Neutron's `DELETE /ports/{id}/bindings/{host}`: removes `host`'s binding (none, or no port: no-op).
 * Removing the ACTIVE binding leaves the port unbound (no host, DOWN).
 */
export async function deletePortBinding(portId: string, host: string): Promise<void> {
  try {
    await changePort(portId, (port) => {
      const binding = port.bindings[host];
      if (!binding) return { result: undefined };
      const { [host]: _removed, ...bindings } = port.bindings;
      const next: Port = binding.status === 'ACTIVE' ? { ...port, bindings, bindingHostId: null, status: 'DOWN' } : { ...port, bindings };
      return { next, result: undefined };
    });
  } catch (e) {
    if (!(e instanceof NotFound)) throw e;
  }
}

/**
 * Deletes the instance's ports, each with its IP claim in one transaction conditional on the
 * port's version (a concurrent change re-reads) and on the claim being the port's. Ports already
 * gone are skipped, so a retry completes what a crash left.
 */
export async function deletePortsOf(instanceUuid: string): Promise<void> {
  for (const listed of await listPortsOf(instanceUuid)) {
    await withRetries(
      async () => {
        lastWrittenPorts.delete(listed.id);
        const found = await readPort(listed.id);
        if (!found) return;
        const { port, version } = found;
        try {
          await db().send(
            new TransactWriteCommand({
              TransactItems: [
                { Delete: { TableName: apiTable(), Key: portKey(port.id), ConditionExpression: 'version = :v', ExpressionAttributeValues: { ':v': version } } },
                ...port.fixedIps.map((f) => ({
                  Delete: {
                    TableName: apiTable(),
                    Key: fixedIpKey(port.networkId, f.ipAddress),
                    ConditionExpression: 'attribute_not_exists(pk) OR portId = :p',
                    ExpressionAttributeValues: { ':p': port.id },
                  },
                })),
              ],
            }),
          );
        } catch (e) {
          if (isConditionFailure(e)) throw new ConcurrentModification(`Port ${port.id}`, e);
          throw e;
        }
      },
      { attempts: 20, retryable: (e) => e instanceof ConcurrentModification || isTransactionConflict(e) },
    );
  }
}

export interface NovaAddress {
  version: 4;
  addr: string;
  'OS-EXT-IPS:type': 'fixed';
  'OS-EXT-IPS-MAC:mac_addr': string;
}

/** Nova's server `addresses`: fixed IPs by network name (the id when the network is gone). */
export async function addressesOf(ports: readonly Port[]): Promise<Record<string, NovaAddress[]>> {
  if (ports.length === 0) return {};
  const names = new Map((await listNetworks()).map((n) => [n.id, n.name]));
  const addresses: Record<string, NovaAddress[]> = {};
  for (const port of ports) {
    const name = names.get(port.networkId) ?? port.networkId;
    for (const f of port.fixedIps) {
      (addresses[name] ??= []).push({ version: 4, addr: f.ipAddress, 'OS-EXT-IPS:type': 'fixed', 'OS-EXT-IPS-MAC:mac_addr': port.macAddress });
    }
  }
  return addresses;
}
