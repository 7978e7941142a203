/**
 * Access rules whose synchronous API call died mid-way (a crash inside allow_access or
 * deny_access, functions/shares/access.ts): nothing resumes those calls, so the reconciler finishes
 * them. The rule written queued_to_apply / queued_to_deny before the driver call is the intent; the
 * driver call pushes the share's whole rule set, so making it again is idempotent. A rule still
 * pending and unchanged since `before` (the grace cut-off) is finished: the rule set pushed,
 * then the applied rules recorded active and the denied ones removed — or, when the backend refuses,
 * the applied ones recorded error (a deny stays queued: repeating deny finishes it), as the API
 * call would have. Shares in a migration are left alone: the migration owns their rules.
 */
import { logger } from '../core/logger.js';
import { syncAccess } from './access.js';
import { listShares, updateShare } from './repo.js';

export interface AccessRecovery {
  shareId: string;
  /** applied: the pending rules pushed and recorded; failed: the backend refused, the error state recorded. */
  action: 'applied' | 'failed';
  detail: string;
}

const APPLYING = new Set(['queued_to_apply', 'applying']);
const DENYING = new Set(['queued_to_deny', 'denying']);

export async function recoverPendingAccess(options: { before: Date }): Promise<AccessRecovery[]> {
  const out: AccessRecovery[] = [];
  for (const s of await listShares()) {
    if (s.taskState !== null) continue;
    // A rule's own time: a live call's fresh rule (after `before`) is its caller's to finish.
    const rules = Object.values(s.accessRules).filter((r) => Date.parse(r.updatedAt) < options.before.getTime());
    const applying = rules.filter((r) => APPLYING.has(r.state)).map((r) => r.id);
    const denying = rules.filter((r) => DENYING.has(r.state)).map((r) => r.id);
    if (applying.length === 0 && denying.length === 0) continue;
    const at = new Date().toISOString();
    const saw = `rules left pending: ${[...applying.map((id) => `apply ${id}`), ...denying.map((id) => `deny ${id}`)].join(', ')}`;
    try {
      await syncAccess(s.id);
    } catch (e) {
      logger.error('access rules left by a crash could not be pushed to the backend', { shareId: s.id, error: e as Error });
      if (applying.length) await updateShare(s.id, { type: 'access-applied', at, ids: applying, ok: false });
      out.push({ shareId: s.id, action: 'failed', detail: `${saw}; ${e instanceof Error ? e.message : String(e)}` });
      continue;
    }
    if (applying.length) await updateShare(s.id, { type: 'access-applied', at, ids: applying, ok: true });
    for (const id of denying) await updateShare(s.id, { type: 'access-removed', at, id });
    out.push({ shareId: s.id, action: 'applied', detail: saw });
  }
  return out;
}
