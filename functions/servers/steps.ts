/**
 * The steps of every server machine (statemachines/server-*.asl.json): one Lambda,
 * `handler({step, serverId, requestId, cellUuid, error?})`. Each flow's steps.ts exports its steps; a
 * step whose operation has ended (another request's, or none) does nothing and says so. A console
 * start's first steps, `record` and `record-failed`, take the execution's input instead (console-start.ts).
 *
 * As an entry point it fills the attachments' AttachmentUsers port (functions/attachments/ports.ts)
 * like the API handlers do, so any attachment call a step makes answers the same way.
 */
import { registerAttachmentUsers } from '../attachments/ports.js';
import { ConfigurationError } from '../core/errors.js';
import type { ConsoleStepInput } from './console-start.js';
import { OperationOver, type ServerStepInput } from './engine.js';
import { CROSS_CELL_CONFIRM_STEPS } from './flows/cross-cell/confirm-steps.js';
import { CROSS_CELL_RESIZE_STEPS } from './flows/cross-cell/resize-steps.js';
import { CROSS_CELL_REVERT_STEPS } from './flows/cross-cell/revert-steps.js';
import { EVACUATE_STEPS } from './flows/evacuate/steps.js';
import { LIFECYCLE_STEPS } from './flows/lifecycle/steps.js';
import { LIVE_MIGRATION_STEPS } from './flows/live-migration/steps.js';
import { RESOLVE_RESIZE_STEPS } from './flows/resize/resolve-steps.js';
import { RESIZE_STEPS } from './flows/resize/steps.js';
import { SHELVE_STEPS } from './flows/shelve/steps.js';
import { VOLUME_STEPS } from './flows/volumes/steps.js';
import { SERVER_ATTACHMENT_USERS } from './attachment-users.js';

registerAttachmentUsers(SERVER_ATTACHMENT_USERS);

const STEPS: Record<string, (input: ServerStepInput) => Promise<unknown>> = {
  ...LIFECYCLE_STEPS,
  ...VOLUME_STEPS,
  ...EVACUATE_STEPS,
  ...SHELVE_STEPS,
  ...RESIZE_STEPS,
  ...RESOLVE_RESIZE_STEPS,
  ...LIVE_MIGRATION_STEPS,
  ...CROSS_CELL_RESIZE_STEPS,
  ...CROSS_CELL_CONFIRM_STEPS,
  ...CROSS_CELL_REVERT_STEPS,
};

/**
 * The console start's Record and RecordFailed (console-start.ts), loaded when one runs: they bring
 * the whole compute API, which no other step needs, so every other step's cold start stays as it was.
 */
const isConsoleStep = (input: ServerStepInput | ConsoleStepInput): input is ConsoleStepInput => input.step === 'record' || input.step === 'record-failed';

export async function handler(input: ServerStepInput | ConsoleStepInput): Promise<unknown> {
  if (isConsoleStep(input)) return (await import('./console-start.js')).consoleStep(input);
  const step = STEPS[input.step];
  // A step no flow has is a state machine out of step with this code: Ferry's wiring, not a request.
  if (!step) throw new ConfigurationError(`unknown server step ${JSON.stringify(input.step)}`);
  try {
    return await step(input);
  } catch (e) {
    if (e instanceof OperationOver) return { over: true, reason: e.message };
    throw e;
  }
}
