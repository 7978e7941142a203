/**
 * A volume's delete, as DELETE /volumes/{id} and os-force_delete both start it (C/volume/api.py
 * delete): frozen check, the begin-delete transition written conditionally, then the volume-delete
 * machine; a start that fails puts the status back so the request changes nothing.
 */
import { isConditionFailure, withRetries } from '../core/db.js';
import { ConcurrentModification, FerryError, InvalidVolume } from '../core/errors.js';
import { executionName, executionStatus } from '../core/executions.js';
import { startVolumeExecution } from './create.js';
import { assertNotFrozen, BackendFrozen, notFrozenCheck } from './frozen.js';
import type { Volume, VolumeStatus } from './model.js';
import { cancellationCodes, getVolumeOrThrow, updateVolume, writeVolumeWith } from './repo.js';
import { apply } from './transitions.js';

const now = () => new Date().toISOString();

/**
 * begin-delete written with a ConditionCheck that the volume's backend is not frozen, so a freeze
 * that lands after the read still refuses the delete (reference §2.5).
 */
async function beginDeleteNotFrozen(id: string, force: boolean): Promise<Volume> {
  return withRetries(
    async () => {
      const before = await getVolumeOrThrow(id);
      const after = apply(before, { type: 'begin-delete', at: now(), force });
      try {
        return await writeVolumeWith(before, after, before.host ? [notFrozenCheck(before.host)] : []);
      } catch (e) {
        if (before.host && cancellationCodes(e)[1] === 'ConditionalCheckFailed') throw new BackendFrozen(before.host);
        throw e;
      }
    },
    { retryable: (e) => cancellationCodes(e)[0] === 'ConditionalCheckFailed' || cancellationCodes(e).includes('TransactionConflict'), attempts: 20 },
  ).catch((e) => {
    if (isConditionFailure(e) && !(e instanceof FerryError)) throw new ConcurrentModification(`Volume ${id}`, e);
    throw e;
  });
}

/** Deletes `found` (already authorized). `force`: os-force_delete, any status. */
export async function deleteVolume(found: Volume, force: boolean): Promise<void> {
  // Upstream's order: frozen (assert_not_frozen) before the status guard.
  if (found.host) await assertNotFrozen(found.host);
  // The delete machine's execution is named after the volume, so a volume whose delete already ran
  // (and failed: error_deleting) cannot get a second one; refused rather than left deleting.
  if (force && (await executionStatus('volume-delete', executionName('volume-delete', found.id))) !== undefined) {
    throw new InvalidVolume(`Volume ${found.id} has already been through a delete; Ferry cannot run another (docs/compatibility.md).`);
  }
  const before = await beginDeleteNotFrozen(found.id, force);
  await startVolumeExecution('volume-delete', found.id, async () => {
    await updateVolume(found.id, { type: 'reset-status', at: now(), status: (before.previousStatus ?? 'available') as VolumeStatus });
  });
}
