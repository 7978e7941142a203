/**
 * What every server flow shares: starting an operation from the API (the task_state gate, the
 * instance action, the execution), loading it in a step, recording holds before making them,
 * instance events, and ending it.
 *
 * An operation lives on the instance (`instance.operation`): at most one at a time, because the
 * API sets it together with a task_state only while task_state is None (Nova's
 * `save(expected_task_state=[None])`), conditional on the instance's version. Every step of the
 * operation's machine first checks that the operation on the instance is still its own (by
 * request id); a step of an operation that has ended is a no-op, so a re-delivered or re-run step
 * never acts twice.
 */
import type { CellMapping, ComputeNode } from '../compute/model.js';
import { getCell, listComputeNodes } from '../compute/repo.js';
import type { StartedAs } from '../core/api.js';
import type { AuthContext } from '../core/auth.js';
import { BadRequest, Conflict, NotFound, reasonOf, type CaughtError } from '../core/errors.js';
import { executionName, startExecution } from '../core/executions.js';
import { intentId } from '../core/intents.js';
import { logger } from '../core/logger.js';
import type { ComputeDriver, GuestInfo } from '../drivers/compute/driver.js';
import { computeDriverFor } from '../drivers/compute/registry.js';
import type { StateMachineName } from '../core/machines.js';
import type { BlockDeviceMapping, Instance, InstanceAction, OperationHolds, OperationKind, ServerOperation, TaskState, VmState } from './model.js';
import { abandonOperation } from './abandon.js';
import { actionPutItem, finishEvent, newAction, rememberAction, startEvent } from './instance-actions.js';
import { findServer, loadPartition, updateServer, type InstanceChange, type LoadedServer } from './repo.js';

const now = () => new Date().toISOString();

/** How long compute nodes and cell mappings are cached (they change only with the inventory). */
const NODE_CACHE_MS = 5_000;

/** What a step handler receives from its machine. */
export interface ServerStepInput {
  step: string;
  serverId: string;
  requestId: string;
  /** The cell the instance was in when the operation began (the mapping may flip during a move). */
  cellUuid: string;
  /** What the machine caught, for rollback steps. */
  error?: CaughtError;
}

export { reasonOf };

// ---------------------------------------------------------------------------------------------
// Starting an operation (API side)

export interface BeginOperation {
  server: LoadedServer;
  auth: AuthContext;
  kind: OperationKind;
  /** The instance action name (nova/compute/instance_actions.py). */
  action: string;
  /** Nova's check_instance_state: allowed vm_states (task_state must be None unless `taskStates` says). */
  vmStates: readonly VmState[];
  taskStates?: readonly (TaskState | null)[];
  /** The task_state the API sets (undefined: unchanged). */
  taskState?: TaskState | null;
  machine: StateMachineName;
  requestId: string;
  /**
   * The API request's `startedAs` (required, so no action can forget to pass it): set, the
   * operation is recorded under that execution (a console start of `machine`, already running) and
   * no machine is started; undefined, the API starts `machine` as usual.
   */
  startedAs: StartedAs | undefined;
  params?: Record<string, unknown>;
  migrationUuid?: string;
  /** Further changes the API makes in the same write (flavor, BDM, migration record, ...). */
  change?: (instance: Instance, bdms: BlockDeviceMapping[]) => Omit<InstanceChange, 'instance'> & { instance?: Instance };
  /** Checks against fresh state inside the conditional write (throw a FerryError, e.g. BadRequest or Conflict, to refuse). */
  check?: (instance: Instance, bdms: BlockDeviceMapping[]) => void;
  /**
   * What `prepare` will make, recorded in the first write under deterministic ids (so a crash
   * before the machine starts leaves a record that abandonOperation undoes exactly).
   */
  holds?: OperationHolds;
  /**
   * API work after the write and before the machine starts (Nova's attach: attachment_create),
   * only effects the first write recorded. If it or the start fails, abandon.ts undoes them.
   */
  prepare?: (instance: Instance) => Promise<void>;
  /** No machine: the API did all of it (offloaded attach/detach); the operation is ended after prepare. */
  apiOnly?: boolean;
}

/**
 * A console start records only the operation its own machine runs (BadRequest otherwise): recorded
 * under another machine's execution, its steps would act on an operation that is not theirs, and
 * the reconciler, looking for the execution under the machine the kind names (abandon.ts
 * MACHINE_OF), would find none and abandon it.
 */
export function assertStartedBy(startedAs: StartedAs, machine: StateMachineName): void {
  if (startedAs.machine !== machine) throw new BadRequest(`This request is run by the state machine ${machine}, not ${startedAs.machine}: start ${machine} with it.`);
}

/**
 * The request id of a console start, derived from its machine and execution name (unique per
 * machine): a re-run of its Record step (a retry, a resumed execution) finds what the first
 * recorded under it instead of recording the request again.
 */
export function consoleRequestId(startedAs: StartedAs): string {
  return `req-${intentId('console-start', startedAs.machine, startedAs.executionName)}`;
}

/** The uuid of the server a console start of server-create boots (derived likewise). */
export function consoleServerId(startedAs: StartedAs): string {
  return intentId('console-start', startedAs.machine, startedAs.executionName, 'server');
}

/** Nova's InstanceInvalidState (409). */
export function invalidState(action: string, uuid: string, attr: 'vm_state' | 'task_state', state: string | null): Conflict {
  return new Conflict(`Cannot '${action}' instance ${uuid} while it is in ${attr} ${state ?? 'None'}`);
}

/** Nova's check_instance_lock: a locked instance refuses a non-admin caller (InstanceIsLocked, 409). */
export function assertNotLocked(instance: Pick<Instance, 'uuid' | 'locked'>, isAdmin: boolean): void {
  if (instance.locked && !isAdmin) throw new Conflict(`Instance ${instance.uuid} is locked`);
}

export function assertState(instance: Instance, action: string, vmStates: readonly VmState[], taskStates: readonly (TaskState | null)[] = [null]): void {
  if (!vmStates.includes(instance.vmState)) throw invalidState(action, instance.uuid, 'vm_state', instance.vmState);
  if (!taskStates.includes(instance.taskState)) throw invalidState(action, instance.uuid, 'task_state', instance.taskState);
}

/**
 * The API half of an operation: one conditional write sets task_state, the operation record and
 * the instance action (and whatever `change` adds), then `prepare`, then the machine starts (or,
 * for a console start, `startedAs`, the machine already runs: its Record step called this). If
 * prepare or the start fails, abandonOperation undoes what the record says the API made and ends
 * the operation, so the server is not left in a task_state no machine will clear; a crash there
 * leaves the same record for the reconciler, which calls the same function (for a console start,
 * the machine's RecordFailed step does: its execution exists, so the reconciler leaves it alone).
 */
export async function beginOperation(b: BeginOperation): Promise<Instance> {
  const { cell } = b.server;
  if (b.startedAs) assertStartedBy(b.startedAs, b.machine);
  const execution = b.startedAs?.executionName ?? executionName(`${b.kind}`, b.requestId.replace(/^req-/, ''));
  const operation: ServerOperation = {
    kind: b.kind,
    requestId: b.requestId,
    executionName: execution,
    ...(b.migrationUuid ? { migrationUuid: b.migrationUuid } : {}),
    params: b.params ?? {},
    holds: b.holds ?? {},
    startedAt: now(),
  };
  let action: InstanceAction | undefined;
  const written = await updateServer(cell, b.server.instance.uuid, ({ instance, bdms }) => {
    // Every operation but evacuate (which Nova does not lock-check) is refused on a locked
    // instance, here on the fresh record so a lock that landed after the dispatcher's check counts.
    if (b.kind !== 'evacuate') assertNotLocked(instance, b.auth.isAdmin);
    if (instance.operation) throw invalidState(b.action, instance.uuid, 'task_state', instance.taskState ?? instance.operation.kind);
    assertState(instance, b.action, b.vmStates, b.taskStates);
    b.check?.(instance, bdms);
    const extra = b.change?.(instance, bdms) ?? {};
    const base = extra.instance ?? instance;
    action = newAction({ ...instance, userId: b.auth.userId, projectId: instance.projectId }, b.action, b.requestId);
    return {
      ...extra,
      instance: { ...base, ...(b.taskState !== undefined ? { taskState: b.taskState } : {}), operation },
      extra: [...(extra.extra ?? []), actionPutItem(cell, action)],
    };
  });
  if (action) rememberAction(cell, action);
  const endIt = () =>
    updateServer(cell, b.server.instance.uuid, ({ instance }) => ({
      instance: instance.operation?.requestId === b.requestId ? { ...instance, operation: null, taskState: null } : instance,
    }));
  try {
    await b.prepare?.(written.instance);
    if (b.apiOnly) return (await endIt()).instance;
    // A console start is the execution: its next states run the operation.
    if (!b.startedAs) await startExecution(b.machine, execution, { serverId: b.server.instance.uuid, requestId: b.requestId, cellUuid: cell.uuid });
  } catch (e) {
    logger.error('the operation could not start; abandoning it', { serverId: b.server.instance.uuid, machine: b.machine, error: e as Error });
    // The caller gets the start's error. If the abandon fails too, the record stays as it is: the
    // reconciler finds the operation without an execution and abandons it again (the audit lists
    // it as stuck-server-operation meanwhile). A console start's execution exists but is this
    // failing step's, so it abandons its own operation (byExecution), and RecordFailed tries again.
    await abandonOperation(cell.uuid, b.server.instance.uuid, b.requestId, { byExecution: b.startedAs?.executionName }).catch((abandonError: unknown) =>
      logger.error('could not abandon an operation that never started; the reconciler retries it', {
        serverId: b.server.instance.uuid,
        requestId: b.requestId,
        kind: b.kind,
        taskState: b.taskState ?? null,
        error: abandonError as Error,
      }),
    );
    throw e;
  }
  return written.instance;
}

// ---------------------------------------------------------------------------------------------
// Steps (machine side)

export interface StepState {
  cell: CellMapping;
  instance: Instance;
  bdms: BlockDeviceMapping[];
  op: ServerOperation;
}

const cellCache = new Map<string, { at: number; cell: CellMapping }>();

/**
 * A cell mapping, cached as briefly as the compute nodes (computeNodes): every step of every flow
 * starts with its cell, which changes only when an operator's inventory does.
 */
async function cellOf(uuid: string): Promise<CellMapping | undefined> {
  const hit = cellCache.get(uuid);
  if (hit && Date.now() - hit.at < NODE_CACHE_MS) return hit.cell;
  const cell = await getCell(uuid);
  if (cell) cellCache.set(uuid, { at: Date.now(), cell });
  return cell;
}

/** Thrown (and caught by the step dispatcher) when the operation this step belongs to is over. */
export class OperationOver extends Error {}

/**
 * Loads the instance of a step; OperationOver when the operation on it is no longer this one.
 * The operation is looked for in the cell the machine started in, then in the cell the instance
 * mapping points at: a cross-cell revert moves its operation to the source copy together with the
 * mapping (one transaction), and the copy it started on may be gone by a later step.
 */
export async function loadStep(input: ServerStepInput): Promise<StepState> {
  const started = await cellOf(input.cellUuid);
  if (started) {
    const { instance, bdms } = await loadPartition(started, input.serverId);
    if (instance?.operation?.requestId === input.requestId) return asStored({ cell: started, instance, bdms, op: instance.operation });
  }
  const mapped = await findServer(input.serverId);
  if (mapped && mapped.cell.uuid !== input.cellUuid && mapped.instance.operation?.requestId === input.requestId) {
    const { instance, bdms } = await loadPartition(mapped.cell, input.serverId);
    if (instance?.operation?.requestId === input.requestId) return asStored({ cell: mapped.cell, instance, bdms, op: instance.operation });
  }
  throw new OperationOver(`operation ${input.requestId} of ${input.serverId} is over`);
}

/**
 * The instances loadStep and updateOp returned, each with the BDM list stored with it: a state
 * whose instance and BDMs are still such a pair, untouched, is what the table held at that
 * version. A state a step made up (some BDMs filtered out, an instance changed in memory) is not,
 * and its next write reads the partition as before.
 */
const stored = new WeakMap<Instance, BlockDeviceMapping[]>();
const asStored = (s: StepState): StepState => {
  stored.set(s.instance, s.bdms);
  return s;
};

/**
 * Applies a change to the instance only while this operation is still on it. A state as loadStep or
 * updateOp returned it is the write's base, so the step does not read the partition again
 * (repo.ts updateServer `known`: the version condition refuses it when another write came between).
 */
export async function updateOp(s: Pick<StepState, 'cell' | 'instance' | 'op'> & { bdms?: BlockDeviceMapping[] }, change: (current: { instance: Instance; bdms: BlockDeviceMapping[]; op: ServerOperation }) => Omit<InstanceChange, 'instance'> & { instance?: Instance }): Promise<StepState> {
  const known = s.bdms && stored.get(s.instance) === s.bdms ? { instance: s.instance, bdms: s.bdms } : undefined;
  const out = await updateServer(
    s.cell,
    s.instance.uuid,
    ({ instance, bdms }) => {
      if (instance.operation?.requestId !== s.op.requestId) throw new OperationOver(`operation ${s.op.requestId} of ${instance.uuid} is over`);
      const c = change({ instance, bdms, op: instance.operation });
      return { ...c, instance: c.instance ?? instance };
    },
    known,
  );
  return asStored({ cell: s.cell, instance: out.instance, bdms: out.bdms, op: out.instance.operation! });
}

/** Records holds on the operation BEFORE the thing they name is made (so a rollback knows of it). */
export async function recordHolds(s: StepState, holds: (current: OperationHolds) => OperationHolds): Promise<StepState> {
  return updateOp(s, ({ instance, op }) => ({ instance: { ...instance, operation: { ...op, holds: holds(op.holds) } } }));
}

type AttachmentIntents = 'newAttachments' | 'rollbackAttachments';

/**
 * The intent of each attachment a step will make, one per BDM: the id `intentId(request, step,
 * bdm)`, recorded in `holds[field]` (with the attachment each BDM has now, which it replaces) in
 * ONE write before any is made. BDMs with an id recorded already keep it (a re-run), and when all
 * have one nothing is written. Returns the state and the ids by BDM uuid.
 */
export async function recordAttachmentIntents(s: StepState, field: AttachmentIntents, step: string, bdmUuids: readonly string[]): Promise<{ s: StepState; ids: Record<string, string> }> {
  const missing = bdmUuids.filter((u) => !s.op.holds[field]?.[u]);
  let state = s;
  if (missing.length) {
    const made = Object.fromEntries(missing.map((u) => [u, intentId(s.op.requestId, step, u)]));
    const replaced = Object.fromEntries(missing.flatMap((u) => {
      const current = s.bdms.find((b) => b.uuid === u)?.attachmentId;
      return current ? [[made[u]!, current]] : [];
    }));
    state = await recordHolds(s, (h) => ({ ...h, [field]: { ...h[field], ...made }, replacedAttachments: { ...h.replacedAttachments, ...replaced } }));
  }
  return { s: state, ids: Object.fromEntries(bdmUuids.map((u) => [u, state.op.holds[field]![u]!])) };
}

/** Ends the operation: the final instance fields, operation cleared. */
export async function endOperation(s: Pick<StepState, 'cell' | 'instance' | 'op'>, change: (current: { instance: Instance; bdms: BlockDeviceMapping[] }) => Omit<InstanceChange, 'instance'> & { instance: Instance }): Promise<StepState> {
  return updateOp(s, ({ instance, bdms }) => {
    const c = change({ instance, bdms });
    return { ...c, instance: { ...c.instance, operation: null } };
  });
}

/** Nova's wrap_instance_event: the event is started, the body runs, the event ends Success or Error. */
export async function withEvent<T>(s: Pick<StepState, 'cell' | 'instance' | 'op'>, event: string, host: string | null, body: () => Promise<T>): Promise<T> {
  await startEvent(s.cell, s.instance.uuid, s.op.requestId, event, host);
  try {
    const result = await body();
    await finishEvent(s.cell, s.instance.uuid, s.op.requestId, event);
    return result;
  } catch (e) {
    await finishEvent(s.cell, s.instance.uuid, s.op.requestId, event, { message: (e as Error).message, traceback: (e as Error).stack });
    throw e;
  }
}

/** Marks an event as failed from a rollback step (the failing step's wrap already did, unless it crashed). */
export async function failEvent(s: Pick<StepState, 'cell' | 'instance' | 'op'>, event: string, reason: string): Promise<void> {
  await finishEvent(s.cell, s.instance.uuid, s.op.requestId, event, { message: reason });
}

/** Nova's instance fault, recorded with an error. */
export function faultOf(message: string, code = 500): Instance['fault'] {
  return { code, message, details: message, created: now() };
}

// ---------------------------------------------------------------------------------------------
// Hosts

export interface HostNode {
  cell: CellMapping;
  node: ComputeNode;
}

let nodeCache: { at: number; nodes: HostNode[] } | undefined;

/** Every compute node with its cell (cached briefly: nodes change only when an operator adds one). */
export async function computeNodes(): Promise<HostNode[]> {
  if (nodeCache && Date.now() - nodeCache.at < NODE_CACHE_MS) return nodeCache.nodes;
  const nodes = (await listComputeNodes()).map((n) => ({ cell: n.cell, node: n.value }));
  nodeCache = { at: Date.now(), nodes };
  return nodes;
}

export async function nodeOfHost(host: string): Promise<HostNode> {
  const found = (await computeNodes()).find((n) => n.node.host === host);
  if (!found) throw new NotFound(`Compute host ${host} could not be found.`);
  return found;
}

export async function driverOfHost(host: string): Promise<ComputeDriver> {
  return computeDriverFor((await nodeOfHost(host)).node.config);
}

/**
 * The guest as the host's driver knows it; undefined when it has none (its NotFound counts as none).
 * Any other failure is thrown: a host that cannot answer is no proof the guest is absent.
 */
export async function guestOn(host: string, uuid: string): Promise<GuestInfo | undefined> {
  try {
    return await (await driverOfHost(host)).getGuest(uuid);
  } catch (e) {
    if (e instanceof NotFound) return undefined;
    throw e;
  }
}

