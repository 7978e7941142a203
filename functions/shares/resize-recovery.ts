/**
 * Extends and shrinks whose synchronous API call died mid-way (a crash inside the extend or
 * shrink action, resize.ts): nothing resumes that call, so the reconciler finishes it. The share's
 * `resize` record, written with `extending`/`shrinking` (and the quota and pool charge of an
 * extend) before the driver call, is the intent; the driver's extend and shrink are idempotent at
 * the size asked, so the call is made again under the same resize and settled as the API call
 * would have: available at the new size, or the error state with its user message. Only shares
 * unchanged since `before` (the grace cut-off) are touched: a live call's resize is its own.
 */
import { logger } from '../core/logger.js';
import { listShares } from './repo.js';
import { runResize } from './resize.js';

export interface ResizeRecovery {
  shareId: string;
  /** finished: the driver call made and the share settled (its status says how); failed: it could not be settled, the next run tries again. */
  action: 'finished' | 'failed';
  detail: string;
}

export async function recoverPendingResizes(options: { before: Date }): Promise<ResizeRecovery[]> {
  const out: ResizeRecovery[] = [];
  const pending = (await listShares()).filter((s) => s.resize && Date.parse(s.updatedAt) < options.before.getTime());
  for (const s of pending) {
    const r = s.resize!;
    const saw = `an ${r.kind} from ${r.fromGb} to ${r.toGb} GiB left ${s.status} since ${s.updatedAt}`;
    try {
      const { share, reason } = await runResize(s.id, r.id);
      out.push({ shareId: s.id, action: 'finished', detail: `${saw}: finished, ${share.status} at ${share.size} GiB${reason ? ` (${reason})` : ''}` });
    } catch (e) {
      logger.error('a share resize left by a crash could not be finished; the next run tries again', { shareId: s.id, resizeId: r.id, error: e as Error });
      out.push({ shareId: s.id, action: 'failed', detail: `${saw}: ${e instanceof Error ? e.message : String(e)}` });
    }
  }
  return out;
}
