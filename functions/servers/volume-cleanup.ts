/**
 * A delete_on_termination volume's delete, as `cinder delete` would do it: used by a server's
 * delete, an offloaded detach and the abandon of one (kept apart from the flows' engine so that
 * abandon.ts, which the engine calls, can use it without a cycle).
 */
import { logger } from '../core/logger.js';
import { startVolumeExecution } from '../volumes/create.js';
import { getVolume, updateVolume } from '../volumes/repo.js';

const now = () => new Date().toISOString();

/**
 * delete_on_termination: the volume is deleted like `cinder delete` would. Upstream logs and
 * ignores a failure here (the server's delete goes on); so does Ferry, naming the volume left.
 */
export async function deleteVolumeQuietly(volumeId: string): Promise<void> {
  try {
    const v = await getVolume(volumeId);
    if (!v || v.status === 'deleting') return;
    await updateVolume(volumeId, { type: 'begin-delete', at: now() });
    await startVolumeExecution('volume-delete', volumeId, async () => {
      await updateVolume(volumeId, { type: 'reset-status', at: now(), status: 'available' });
    });
  } catch (e) {
    logger.error('could not delete a delete_on_termination volume; it is left as it is', { volumeId, error: e as Error });
  }
}
