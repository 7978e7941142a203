/**
 * The step handler of the snapshot-create machine (statemachines/snapshot-create.asl.json): one
 * Lambda, `snapshot-steps`, `handler({step, snapshotId, error})` dispatching to small steps.
 *
 * POST /snapshots (routes.ts) tries the driver once in the request; a backend still making the
 * snapshot (an EBS snapshot `pending`: minutes) answers BackendNotReady, and the API starts this
 * machine, whose CreateOnBackend Task runs again after its wait (BACKEND_WAIT, infra/asl/policy.ts)
 * with no function running meanwhile.
 *
 * Every step is idempotent: the snapshot's backend name derives from its id, so the driver call
 * finds what an earlier run made, and every write is a conditional transition that accepts its
 * own result. The undo of CreateOnBackend (createFailed) sits right after it.
 */
import { BackendNotReady, BadRequest, InvariantViolation, reasonOf, type CaughtError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { isSnapshotDriver } from '../drivers/volume/registry.js';
import { driverForHost } from '../volumes/backends.js';
import { InvalidSnapshot, type Snapshot } from './model.js';
import { getSnapshot, recordSnapshotCreateFailure, snapshotNotFound, updateSnapshot } from './repo.js';

const now = () => new Date().toISOString();

export interface SnapshotStepInput {
  step: string;
  snapshotId?: string;
  /** create-failed: what the Catch put in `$.error`. */
  error?: CaughtError;
}

async function snapshotDriverOf(s: Snapshot) {
  const driver = await driverForHost(s.backendHost);
  if (!isSnapshotDriver(driver)) throw new InvariantViolation(`backend ${s.backendHost} does not support snapshots, yet holds snapshot ${s.id}`, { context: { snapshotId: s.id } });
  return driver;
}

/**
 * Makes the snapshot on the backend under its stable name (idempotent in the driver: aws-ebs finds
 * its EBS snapshot by tags). BackendNotReady while the backend is still at it: the machine waits
 * and runs this again. Only a `creating` snapshot is made; an `available` one is done already (a
 * re-run, or a console start); any other status is refused (a console start cannot make a snapshot
 * that is being deleted). Undone by createFailed.
 */
export async function createOnBackend(snapshotId: string): Promise<{ status: string }> {
  const s = await getSnapshot(snapshotId);
  if (!s) throw snapshotNotFound(snapshotId);
  if (s.status === 'available') return { status: s.status };
  if (s.status !== 'creating') throw new InvalidSnapshot(`Snapshot ${s.id} status must be creating, but the current status is ${s.status}.`);
  const driver = await snapshotDriverOf(s);
  await driver.createSnapshot(s.volumeBackendName, s.backendName);
  return { status: 'created-on-backend' };
}

/** creating -> available (conditional on the version read; available already is success). */
export async function markAvailable(snapshotId: string): Promise<{ status: string }> {
  const s = await updateSnapshot(snapshotId, { type: 'created', at: now() });
  return { status: s.status };
}

/**
 * The machine's Catch. A snapshot still `creating` is this machine's: whatever the backend made
 * under its name is deleted (compensation), then the snapshot is recorded `error` with the reason,
 * in that order, so a re-run after a lost reply finds it `error` with nothing left to delete. A
 * snapshot in any other status (gone, or refused by createOnBackend, or set error by a failover
 * meanwhile) is not this machine's to undo and is left as it is.
 *
 * A delete the backend refuses does not keep the snapshot `creating`: it is recorded `error` with
 * the reason and what is left named in it, and DELETE /snapshots/{id} removes it later.
 */
export async function createFailed(snapshotId: string, error: CaughtError | undefined): Promise<{ status: string }> {
  const s = await getSnapshot(snapshotId);
  if (!s) return { status: 'gone' };
  if (s.status !== 'creating') return { status: s.status };
  let reason = reasonOf(error);
  try {
    await (await snapshotDriverOf(s)).deleteSnapshot(s.volumeBackendName, s.backendName);
  } catch (e) {
    // The backend is still at it: the machine runs this step again after its wait.
    if (e instanceof BackendNotReady) throw e;
    reason = `${reason} (could not delete ${s.backendName} of ${s.volumeBackendName} on ${s.backendHost}: ${e instanceof Error ? e.message : String(e)}; deleting the snapshot tries again)`;
    logger.error('snapshot-create could not delete what the backend made', { snapshotId, error: e as Error });
  }
  const after = await updateSnapshot(snapshotId, { type: 'create-failed', at: now(), reason });
  await recordSnapshotCreateFailure(after);
  logger.warn('snapshot create failed', { snapshotId, reason });
  return { status: after.status };
}

function need(input: SnapshotStepInput): string {
  if (!input.snapshotId) throw new BadRequest(`step ${input.step} needs snapshotId`);
  return input.snapshotId;
}

export async function handler(input: SnapshotStepInput): Promise<unknown> {
  switch (input.step) {
    case 'create-on-backend':
      return createOnBackend(need(input));
    case 'mark-available':
      return markAvailable(need(input));
    case 'create-failed':
      return createFailed(need(input), input.error);
    default:
      throw new BadRequest(`unknown snapshot step ${JSON.stringify(input.step)}`);
  }
}
