/**
 * The steps of the migration machines (statemachines/share-migration-*.asl.json): one Lambda,
 * `handler({step, shareId, migrationId, error?})`. Each step reads the share, acts on what its
 * migration record says, and records every backend change BEFORE making it (ownsBackendShare,
 * readOnlyCast, dataNodeAccess), so a retried step repeats nothing and `cleanup` knows exactly
 * what to undo at any failure point (reference §1.9).
 *
 * Phase 1 (share-migration-start): begin -> reserve-destination -> driver-start ->
 * (wait, driver-continue)* | host-prepare -> copy task -> copy-ended -> host-finish.
 * Phase 2 (share-migration-complete): complete-begin -> driver-complete | (host) -> apply-rules ->
 * flip -> delete-retired -> finish-success. Cancel and every failure: cleanup.
 *
 * The steps live by phase, each beside its undo: phase1.ts, host-copy.ts, phase2.ts, cleanup.ts
 * (flow.ts holds what they share). This module is only the Lambda's dispatch.
 */
import { BadRequest, DriverError } from '../core/errors.js';
import { cleanup, cleanupFailed } from './cleanup.js';
import type { MigrationStepInput } from './flow.js';
import { copyEnded, hostFinish, hostPrepare } from './host-copy.js';
import { begin, driverContinue, driverStart, driverStartFailed, reserveDestination } from './phase1.js';
import { applyRules, deleteRetired, driverComplete, finishSuccess, flip, phase2DriverFailed } from './phase2.js';

const STEPS: Record<string, (input: MigrationStepInput) => Promise<unknown>> = {
  begin,
  'reserve-destination': reserveDestination,
  'driver-start': driverStart,
  'driver-start-failed': driverStartFailed,
  'driver-continue': driverContinue,
  'host-prepare': hostPrepare,
  'copy-ended': copyEnded,
  'host-finish': hostFinish,
  cleanup,
  'cleanup-failed': cleanupFailed,
  'driver-complete': driverComplete,
  'phase2-driver-failed': phase2DriverFailed,
  'apply-rules': applyRules,
  flip,
  'delete-retired': deleteRetired,
  'finish-success': finishSuccess,
};

export async function handler(input: MigrationStepInput): Promise<unknown> {
  if (!input || typeof input.shareId !== 'string' || typeof input.migrationId !== 'string') {
    throw new BadRequest('a migration step needs shareId and migrationId');
  }
  const step = Object.hasOwn(STEPS, input.step) ? STEPS[input.step] : undefined;
  if (!step) throw new DriverError(`unknown migration step ${JSON.stringify(input.step)}`);
  return step(input);
}
