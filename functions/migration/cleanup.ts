/**
 * The rollback of phase 1 (cancel, and every failure of phase 1 or of host-assisted phase 2): each
 * step's own undo (phase1.ts, host-copy.ts), in the reverse order of making.
 */
import { reasonOf } from '../core/errors.js';
import { getShare, getShareOrThrow } from '../shares/repo.js';
import { syncDestinationRules, syncSourceRules } from './access.js';
import { apply, now, type MigrationStepInput } from './flow.js';
import { deleteCopyRecord, deregisterCopyTaskDefinition } from './host-copy.js';
import { releaseDestinationCapacity, undoDriverDestination } from './phase1.js';
import { deleteRetired, finishSuccess } from './phase2.js';
import type { MigrationOutcome } from './transitions.js';

/**
 * Undoes whatever the migration record says is held, in the reverse order of making it, then
 * ends the migration: data node access, the copy task definition, driver's destination (migration_cancel), destination
 * share and capacity, read-only cast; a retired source (phase 2 got past the flip) is deleted
 * and the migration ends in success instead. Idempotent at every point.
 */
export async function cleanup(input: MigrationStepInput): Promise<{ taskState: string | null }> {
  let s = await getShare(input.shareId);
  if (!s?.migration || s.migration.id !== input.migrationId) return { taskState: s?.taskState ?? null };
  if (s.migration.retired) {
    // Phase 2 got past the flip and the retired source could not be deleted then: delete it now.
    await deleteRetired(input);
    return finishSuccess(input);
  }
  // A cancel that raced a failure still ends as the operator asked: cancelled, source intact.
  const outcome: MigrationOutcome = s.migration.cancelRequested ? 'migration_cancelled' : (input.outcome ?? 'migration_error');
  const reason = outcome === 'migration_error' ? reasonOf(input.error) : undefined;
  if (s.migration.dataNodeAccess) {
    s = await apply(input, { type: 'data-node-access', at: now(), migrationId: input.migrationId, present: false });
    // Both backends: the source holds the data node's rule too, and a cleanup that fails later
    // must not leave it there unrecorded.
    await syncSourceRules(s);
    await syncDestinationRules(s);
  }
  // The copy task definition goes before the shares it mounts (a task started from it could still mount them).
  await deregisterCopyTaskDefinition(s);
  s = await getShareOrThrow(input.shareId);
  await undoDriverDestination(s);
  s = await getShareOrThrow(input.shareId);
  await releaseDestinationCapacity(s);
  s = await getShareOrThrow(input.shareId);
  if (s.migration!.readOnlyCast) s = await apply(input, { type: 'read-only', at: now(), migrationId: input.migrationId, cast: false });
  await syncSourceRules(s);
  await deleteCopyRecord(s.migration!);
  s = await apply(input, { type: 'finish', at: now(), migrationId: input.migrationId, outcome, ...(reason ? { reason } : {}) });
  return { taskState: s.taskState };
}

/** The cleanup itself failed after its retries: record migration_error, keeping what is still held on the record. */
export async function cleanupFailed(input: MigrationStepInput): Promise<{ taskState: string | null }> {
  const s = await getShare(input.shareId);
  if (!s?.migration || s.migration.id !== input.migrationId) return { taskState: s?.taskState ?? null };
  // Past the flip the share has moved (migration_error would be refused): it stays migration_success
  // with the retired source on the record, and cancelRequested cleared so migration_cancel can retry.
  if (s.migration.retired) return finishSuccess(input);
  const after = await apply(input, { type: 'finish', at: now(), migrationId: input.migrationId, outcome: 'migration_error', reason: `cleanup failed: ${reasonOf(input.error)}` });
  return { taskState: after.taskState };
}
