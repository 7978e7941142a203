/**
 * Extends whose synchronous API call died mid-way (a crash inside os-extend,
 * functions/volumes/actions.ts): nothing resumes that call, so the reconciler finishes it. The
 * volume written `extending` with its capacity held at the new size before the driver call is the
 * intent; extending a backend volume to a size it already has is a no-op, so the call is made again
 * and the volume recorded available at that size — or error_extending when the backend refuses, as
 * the API call would have. Only volumes unchanged since `before` (the grace cut-off) are touched.
 */
import { logger } from '../core/logger.js';
import { driverForHost } from './backends.js';
import { listVolumes, updateVolume } from './repo.js';

export interface ExtendRecovery {
  volumeId: string;
  /** extended: finished; extend-failed: the backend refused, error_extending recorded. */
  action: 'extended' | 'extend-failed';
  detail: string;
}

export async function recoverPendingExtends(options: { before: Date }): Promise<ExtendRecovery[]> {
  const out: ExtendRecovery[] = [];
  const pending = (await listVolumes()).filter((v) => v.status === 'extending' && v.host && v.capacity && Date.parse(v.updatedAt) < options.before.getTime());
  for (const v of pending) {
    const at = new Date().toISOString();
    try {
      await (await driverForHost(v.host!)).extendVolume(v.backendName, v.capacity!.gb);
      await updateVolume(v.id, { type: 'extend-done', at });
      out.push({ volumeId: v.id, action: 'extended', detail: `an extend to ${v.capacity!.gb} GiB left extending since ${v.updatedAt}, finished` });
    } catch (e) {
      const reason = e instanceof Error ? e.message : String(e);
      logger.error('an extend left by a crash could not be finished', { volumeId: v.id, error: e as Error });
      await updateVolume(v.id, { type: 'extend-failed', at, reason });
      out.push({ volumeId: v.id, action: 'extend-failed', detail: reason });
    }
  }
  return out;
}
