/**
 * What every migration step shares: the step input, the failure a machine fails with, and the
 * conditional writes of the share through the migration's pure transition (apply, applyWith,
 * task), the load that checks a step runs for the share's current migration, and the request the
 * source's driver gets.
 */
import { cancellationCodes, withRetries } from '../core/db.js';
import { endIndexUpdate, openIndexPut } from '../core/ops-index.js';
import { tableName } from '../core/tables.js';
import { Conflict, FerryError, type CaughtError } from '../core/errors.js';
import type { MigrationRequest, ShareBackendConfig } from '../drivers/share/driver.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { backendShareName, type MigrationInstance, type Share, type ShareMigration, type TaskState } from '../shares/model.js';
import { getShareBackend, getShareOrThrow, updateShareBy, writeShareWith, type TransactItem } from '../shares/repo.js';
import { DEFAULT_SHARE_AZ } from '../shares/scheduler.js';
import { migrationTransition, type MigrationEvent } from './transitions.js';
import { recordMessage } from '../messages/store.js';
import { MIGRATE_ACTION, MIGRATION_FAILED_DETAIL } from '../messages/routes.js';

export const now = () => new Date().toISOString();

/** Upstream's ShareMigrationFailed (a 500 in the API; here the reason a machine fails with). */
export class ShareMigrationFailed extends FerryError {
  constructor(reason: string) {
    super(500, 'computeFault', `Share migration failed: ${reason}`);
    this.name = 'ShareMigrationFailed';
  }
}

/** The copy task is started again after a crash or a failed run this many times in all. */
export const MAX_COPY_ATTEMPTS = 3;

/** migration_continue polls before phase 1 gives up (keeps an execution's history under 25,000 events). */
export function maxDriverPolls(): number {
  const v = Number(process.env.FERRY_MIGRATION_MAX_DRIVER_POLLS);
  return Number.isInteger(v) && v > 0 ? v : 2000;
}

export interface MigrationStepInput {
  step: string;
  shareId: string;
  migrationId: string;
  error?: CaughtError;
  outcome?: 'migration_error' | 'migration_cancelled';
}

export async function apply(input: { shareId: string }, event: MigrationEvent | ((s: Share) => MigrationEvent)): Promise<Share> {
  // The end of a migration also moves its operations-index entry, in the same transaction.
  if (typeof event !== 'function' && event.type === 'finish') {
    const s = await applyWith(input.shareId, () => ({ event, items: [] }));
    if (event.outcome === 'migration_error') await recordMigrationFailure(s, event.migrationId, event.reason);
    return s;
  }
  return updateShareBy(input.shareId, (s) => migrationTransition(s, typeof event === 'function' ? event(s) : event));
}

/**
 * A migration that ended in migration_error tells its user why, in a user message (`manila
 * message-list`): upstream records none and shows the reason nowhere. One per migration (its id
 * makes the message's), however often the finish is applied.
 */
async function recordMigrationFailure(s: Share, migrationId: string, reason: string | undefined): Promise<void> {
  await recordMessage('share', {
    key: [s.id, 'migration', migrationId],
    projectId: s.projectId,
    resourceType: 'SHARE',
    resourceId: s.id,
    actionId: MIGRATE_ACTION,
    detailId: MIGRATION_FAILED_DETAIL,
    text: reason ? `${reason.replace(/\s+$/, '')}` : null,
  });
}

/** The operations-index entry of a new migration (core/ops-index.ts), put with its accept. */
export function migrationIndexOpen(shareId: string, m: ShareMigration): TransactItem {
  return openIndexPut(tableName('share'), { kind: 'share-migration', id: m.id, resourceId: shareId, startedAt: m.startedAt });
}

/**
 * apply() for events that move something else in the same transaction (a pool's allocation, a
 * type's share count): `build` looks at the current share and returns the event and the other
 * items, or undefined when there is nothing (left) to do. A lost race re-reads and builds again.
 */
export async function applyWith(shareId: string, build: (s: Share) => { event: MigrationEvent; items: TransactItem[] } | undefined): Promise<Share> {
  return withRetries(
    async () => {
      const cur = await getShareOrThrow(shareId);
      const plan = build(cur);
      if (!plan) return cur;
      const after = migrationTransition(cur, plan.event);
      if (after instanceof FerryError) throw after;
      const e = plan.event;
      // A finish ends the migration: its index entry moves to the ended list with it.
      const index = e.type === 'finish' ? [endIndexUpdate(tableName('share'), { kind: 'share-migration', id: e.migrationId, resourceId: shareId, endedAt: e.at, outcome: e.outcome })] : [];
      return writeShareWith(cur, after, [...plan.items, ...index]);
    },
    { retryable: (e) => cancellationCodes(e).some((c) => c === 'ConditionalCheckFailed' || c === 'TransactionConflict') },
  );
}

/** The share and its migration, which must be the one this execution runs. */
export async function load(input: MigrationStepInput): Promise<{ s: Share; m: ShareMigration }> {
  const s = await getShareOrThrow(input.shareId);
  if (!s.migration || s.migration.id !== input.migrationId) {
    throw new Conflict(`Share ${input.shareId} is not in migration ${input.migrationId}; this execution has nothing left to do.`);
  }
  return { s, m: s.migration };
}

export const task = (input: MigrationStepInput, from: readonly (TaskState | null)[], to: TaskState) =>
  apply(input, { type: 'task', at: now(), migrationId: input.migrationId, from, to });

export function migrationRequest(s: Share, destination: MigrationInstance, destBackend: ShareBackendConfig): MigrationRequest {
  return {
    source: { name: backendShareName(s.instanceId), sizeGb: s.size, proto: s.shareProto },
    destination: { name: backendShareName(destination.id), host: destination.host, backend: destBackend },
  };
}

export async function sourceDriver(s: Share) {
  return shareDriverFor(await getShareBackend(s.host!));
}

/** The availability zone of a backend, as the share view shows it after the move. */
export function zoneOf(backend: ShareBackendConfig): string {
  return backend.availabilityZone ?? DEFAULT_SHARE_AZ;
}
