/**
 * Operations whose machine never started. The API writes the operation (with the ids of what it
 * will make), runs its own part (`prepare`: attach's attachment_create, swap's begin_detaching and
 * attachment_create, detach's begin_detaching or offloaded clean-up) and only then starts the
 * machine. A failure there is undone by beginOperation through abandonOperation; a crash there
 * leaves an operation no machine will end, which the reconciler finds with
 * findOperationsWithoutExecution and abandons with the same function.
 *
 * Abandoning undoes exactly what the operation's record says the API part made (attachments by
 * their recorded ids, 404 being done; a volume left detaching rolled back; the BDM an attach
 * created deleted; the migration record the API wrote closed), then ends the operation in one
 * write conditional on the instance's version and on the operation still being that request: it
 * never ends another request's operation. An offloaded detach, which has no undo (its attachment
 * may be deleted already), is finished forward instead.
 */
import { getCell } from '../compute/repo.js';
import { executionStatus } from '../core/executions.js';
import { logger } from '../core/logger.js';
import type { StateMachineName } from '../core/machines.js';
import { getVolume } from '../volumes/repo.js';
import { attachmentDelete, rollDetaching } from './cinder.js';
import { getMigration, migrationPutItem } from './migrations.js';
import type { Instance, MigrationStatus, OperationKind, ServerOperation } from './model.js';
import { listInstances, loadPartition, updateServer } from './repo.js';
import { deleteVolumeQuietly } from './volume-cleanup.js';

/** The machine each kind of operation runs (beginOperation's `machine` for that kind). */
export const MACHINE_OF: Record<OperationKind, StateMachineName> = {
  create: 'server-create',
  delete: 'server-delete',
  stop: 'server-power',
  start: 'server-power',
  reboot: 'server-power',
  pause: 'server-power',
  unpause: 'server-power',
  suspend: 'server-power',
  resume: 'server-power',
  rebuild: 'server-power',
  attach_volume: 'server-attach-volume',
  detach_volume: 'server-detach-volume',
  swap_volume: 'server-swap-volume',
  live_migration: 'server-live-migrate',
  resize: 'server-resize',
  confirm_resize: 'server-confirm-resize',
  revert_resize: 'server-revert-resize',
  cross_cell_confirm: 'server-cross-cell-confirm',
  cross_cell_revert: 'server-cross-cell-revert',
  evacuate: 'server-evacuate',
  shelve: 'server-shelve',
  shelve_offload: 'server-shelve',
  unshelve: 'server-unshelve',
};

/** Attach and detach of a shelved-offloaded server are the API's alone: no machine by design. */
function isApiOnly(instance: Instance, op: ServerOperation): boolean {
  return (op.kind === 'attach_volume' || op.kind === 'detach_volume') && instance.vmState === 'shelved_offloaded';
}

/** The migration record the API wrote with the operation, and the status it closes with when abandoned. */
const CLOSED_MIGRATION: Partial<Record<OperationKind, { from: MigrationStatus; to: MigrationStatus }>> = {
  resize: { from: 'pre-migrating', to: 'error' },
  live_migration: { from: 'accepted', to: 'error' },
  evacuate: { from: 'accepted', to: 'failed' },
  confirm_resize: { from: 'confirming', to: 'finished' },
  revert_resize: { from: 'reverting', to: 'finished' },
  cross_cell_confirm: { from: 'confirming', to: 'finished' },
  cross_cell_revert: { from: 'reverting', to: 'finished' },
};

export type AbandonOutcome = 'abandoned' | 'not-found' | 'other-operation';

/**
 * Undoes the API part of the server's operation `requestId` and ends it. 'not-found': no such
 * server or cell, or the server has no operation (ended already); 'other-operation': the server is
 * in another request's operation, or this one has an execution (its machine ends it). Call it only
 * for an operation whose machine never started: beginOperation after a failed start, the
 * reconciler for what findOperationsWithoutExecution lists; and, with `byExecution`, the Record
 * step of a console start (functions/servers/console-start.ts) whose recording failed part-way:
 * that execution exists, but it is the caller, which never goes on to the operation's steps.
 */
export async function abandonOperation(cellUuid: string, instanceUuid: string, requestId: string, options: { byExecution?: string } = {}): Promise<AbandonOutcome> {
  const cell = await getCell(cellUuid);
  if (!cell) return 'not-found';
  const { instance, bdms } = await loadPartition(cell, instanceUuid);
  if (!instance?.operation) return 'not-found';
  const op = instance.operation;
  if (op.requestId !== requestId) return 'other-operation';
  const byItsOwnExecution = options.byExecution !== undefined && op.executionName === options.byExecution;
  if (!isApiOnly(instance, op) && !byItsOwnExecution && (await executionStatus(MACHINE_OF[op.kind], op.executionName)) !== undefined) return 'other-operation';

  const bdmUuid = op.params.bdmUuid as string | undefined;
  const bdm = bdmUuid ? bdms.find((b) => b.uuid === bdmUuid) : undefined;
  const deleteBdms: string[] = [];
  if (op.kind === 'attach_volume') {
    // The BDM carries the attachment's id from the first write; made or not, it goes (404 is done).
    if (bdm?.attachmentId) await attachmentDelete(bdm.attachmentId);
    if (bdm) deleteBdms.push(bdm.uuid);
  } else if (op.kind === 'swap_volume') {
    for (const id of Object.values(op.holds.newAttachments ?? {})) await attachmentDelete(id);
    await rollIfDetaching(op.params.oldVolumeId as string);
  } else if (op.kind === 'detach_volume' && isApiOnly(instance, op)) {
    // Offloaded detach: its attachment may be gone already, so it is finished rather than undone.
    if (bdm?.attachmentId) await attachmentDelete(bdm.attachmentId);
    if (bdm?.deleteOnTermination && bdm.volumeId) await deleteVolumeQuietly(bdm.volumeId);
    if (bdm) deleteBdms.push(bdm.uuid);
  } else if (op.kind === 'detach_volume') {
    await rollIfDetaching(op.params.volumeId as string);
  }

  const closing = CLOSED_MIGRATION[op.kind];
  const migration = closing && op.migrationUuid ? await getMigration(cell, op.migrationUuid) : undefined;
  const at = new Date().toISOString();
  const closeMigration = migration && closing && migration.status === closing.from ? [migrationPutItem(cell, { ...migration, status: closing.to, updatedAt: at }, { expectedStatus: closing.from })] : [];

  let ended = false;
  await updateServer(cell, instanceUuid, ({ instance: current }) => {
    ended = current.operation?.requestId === requestId;
    if (!ended) return { instance: current };
    return { instance: { ...undoneInstance(current, current.operation!, at), operation: null, taskState: null }, deleteBdms, extra: closeMigration };
  });
  if (!ended) return 'other-operation';
  logger.warn('abandoned a server operation whose machine never started', { serverId: instanceUuid, requestId, kind: op.kind, startedAt: op.startedAt, deletedBdms: deleteBdms });
  return 'abandoned';
}

/** The instance fields the API's first write changed, put back (a build that never started is ERROR, as a failed build). */
function undoneInstance(instance: Instance, op: ServerOperation, at: string): Instance {
  if (op.kind === 'create') {
    const message = 'Build of instance aborted: its build never started';
    return { ...instance, vmState: 'error', fault: { code: 500, message, details: message, created: at } };
  }
  if (op.kind === 'resize') {
    const { old_vm_state: _old, ...systemMetadata } = instance.systemMetadata;
    return { ...instance, oldFlavor: null, newFlavor: null, systemMetadata };
  }
  return instance;
}

/** os-roll_detaching when the volume is still detaching (the API's begin_detaching ran). */
async function rollIfDetaching(volumeId: string | undefined): Promise<void> {
  if (volumeId && (await getVolume(volumeId))?.status === 'detaching') await rollDetaching(volumeId);
}

export interface OperationWithoutExecution {
  cellUuid: string;
  instanceUuid: string;
  requestId: string;
  kind: string;
  startedAt: string;
}

/**
 * Server operations started before `before` whose machine's execution does not exist (the API
 * crashed or failed between its write and the start), and API-only operations (offloaded attach
 * and detach) older than `before`, which never have one and should have ended within their request.
 * A Step Functions that cannot answer throws DependencyError: it is never taken for "no execution".
 */
export async function findOperationsWithoutExecution(options: { before: Date }): Promise<OperationWithoutExecution[]> {
  const cutoff = options.before.getTime();
  const found: OperationWithoutExecution[] = [];
  for (const { cell, instance } of await listInstances()) {
    const op = instance.operation;
    if (!op || Date.parse(op.startedAt) >= cutoff) continue;
    if (!isApiOnly(instance, op) && (await executionStatus(MACHINE_OF[op.kind], op.executionName)) !== undefined) continue;
    found.push({ cellUuid: cell.uuid, instanceUuid: instance.uuid, requestId: op.requestId, kind: op.kind, startedAt: op.startedAt });
  }
  return found;
}
