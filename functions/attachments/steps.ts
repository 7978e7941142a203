/**
 * The attachments' step handler (Lambda `attachment-steps`), run by the volume-create machine's
 * create-and-attach states (seed 003): `Attach` reserves an attachment for the instance given at
 * create, `AttachFailed` records why it could not; and by volume-attach-wait (attach-wait-steps.ts). They live here, not among the volume steps,
 * because reserving an attachment is the attachments capability's work, which sits above volumes.
 *
 * Idempotent like every step: an instance that already holds an attachment is not reserved twice.
 */
import type { AuthContext } from '../core/auth.js';
import { BadRequest, reasonOf, type CaughtError } from '../core/errors.js';
import type { Volume } from '../volumes/model.js';
import { getVolumeOrThrow, updateVolume } from '../volumes/repo.js';
import { createAttachment } from './service.js';
import { recordMessage } from '../messages/store.js';
import { attachWaitStep, type AttachWaitStepInput } from './attach-wait-steps.js';

export interface AttachmentStepInput {
  step: string;
  volumeId?: string;
  error?: CaughtError;
}

const now = () => new Date().toISOString();

/** The owner's context, for work done on the owner's behalf (the pending attach). */
function ownerAuth(v: Volume): AuthContext {
  return { userId: v.userId, projectId: v.projectId, isAdmin: false, roles: ['member', 'reader'] };
}

/**
 * Create-and-attach: reserve an attachment for the instance given at create. Skipped when the
 * instance already has one (an earlier run got that far). Its failure does not undo the create:
 * the volume stays available and the reason is recorded (attachFailed).
 */
export async function attachPending(volumeId: string): Promise<{ attached: boolean }> {
  const v = await getVolumeOrThrow(volumeId);
  const instance = v.pendingServerId;
  if (!instance) return { attached: false };
  if (!v.instances?.[instance]) {
    await createAttachment({ auth: ownerAuth(v), volumeId, instanceUuid: instance, connector: null });
  }
  await updateVolume(volumeId, { type: 'pending-attach-done', at: now() });
  return { attached: true };
}

/** Rollback of attachPending: the volume stays available; the pending instance is dropped with the reason. */
export async function attachFailed(volumeId: string, error: CaughtError | undefined): Promise<void> {
  const v = await updateVolume(volumeId, { type: 'pending-attach-done', at: now(), reason: `Attach to instance failed: ${reasonOf(error)}` });
  // C/volume/manager.py: ATTACH_VOLUME / ATTACH_ERROR, for the volume's owner to read (one per volume).
  await recordMessage('volume', { key: [volumeId, 'attach-pending-failed'], projectId: v.projectId, resourceType: 'VOLUME', resourceId: volumeId, actionId: '002', detailId: '021' });
}

function need(input: AttachmentStepInput): string {
  if (!input.volumeId) throw new BadRequest(`step ${input.step} needs volumeId`);
  return input.volumeId;
}

function needAttachment(input: AttachWaitStepInput): string {
  if (!input.attachmentId) throw new BadRequest(`step ${input.step} needs attachmentId`);
  return input.attachmentId;
}

export async function handler(input: AttachmentStepInput & AttachWaitStepInput): Promise<unknown> {
  // volume-attach-wait's steps (attach-wait-steps.ts).
  const waitStep = attachWaitStep(input, () => needAttachment(input));
  if (waitStep) return waitStep;
  switch (input.step) {
    case 'attach':
      return attachPending(need(input));
    case 'attach-failed':
      await attachFailed(need(input), input.error);
      return {};
    default:
      throw new BadRequest(`unknown attachment step ${JSON.stringify(input.step)}`);
  }
}
