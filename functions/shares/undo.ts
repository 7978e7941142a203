/**
 * The undo of an API action whose machine could not be started: tried a few times (a transaction
 * conflict or a throttle passes), and when it still fails, logged with what it left, so an
 * operator (and `ferry audit`, which reports a share stuck in creating or deleting) can find it.
 * The caller then reports the original failure, never the undo's.
 */
import { withRetries } from '../core/db.js';
import { logger } from '../core/logger.js';

export const UNDO_ATTEMPTS = 5;

export async function undoOrRecord(undo: () => Promise<unknown>, left: { what: string; shareId: string }): Promise<void> {
  try {
    await withRetries(undo, { attempts: UNDO_ATTEMPTS, retryable: () => true });
  } catch (e) {
    logger.error(`undo failed; left behind: ${left.what}`, { shareId: left.shareId, left: left.what, error: e as Error });
  }
}
