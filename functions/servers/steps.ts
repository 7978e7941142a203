/**
 * The steps of every server machine (statemachines/server-*.asl.json): one Lambda,
 * `handler({step, serverId, requestId, cellUuid, error?})`. Each flow file exports its steps; a
 * step whose operation has ended (another request's, or none) does nothing and says so.
 */
import { FerryError } from '../core/errors.js';
import { OperationOver, type ServerStepInput } from './engine.js';
import { LIFECYCLE_STEPS } from './flows/lifecycle.js';
import { VOLUME_STEPS } from './flows/volumes.js';
import { EVACUATE_STEPS } from './flows/evacuate.js';
import { SHELVE_STEPS } from './flows/shelve.js';
import { RESIZE_STEPS } from './flows/resize.js';
import { LIVE_MIGRATION_STEPS } from './flows/live-migration.js';

const STEPS: Record<string, (input: ServerStepInput) => Promise<unknown>> = {
  ...LIFECYCLE_STEPS,
  ...VOLUME_STEPS,
  ...EVACUATE_STEPS,
  ...SHELVE_STEPS,
  ...RESIZE_STEPS,
  ...LIVE_MIGRATION_STEPS,
};

export async function handler(input: ServerStepInput): Promise<unknown> {
  const step = STEPS[input.step];
  if (!step) throw new FerryError(400, 'badRequest', `unknown server step ${JSON.stringify(input.step)}`);
  try {
    return await step(input);
  } catch (e) {
    if (e instanceof OperationOver) return { over: true, reason: e.message };
    throw e;
  }
}
