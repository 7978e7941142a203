/** One broken invariant: which kind, which resource, and what was seen. */
export interface AuditFinding {
  kind: string;
  resource: string;
  detail: string;
  /**
   * The ids a repair needs (functions/audit/repair.ts), for the kinds it may repair: read from the
   * records the audit saw, so a repair never parses the words of `resource`.
   */
  ref?: Record<string, string>;
}

/** Records a finding; each part of the audit gets one. */
export type Find = (kind: string, resource: string, detail: string, ref?: Record<string, string>) => void;

/** What one repair saw and did (repair.ts RepairRecord without its kind and resource). */
export interface RepairOutcome {
  saw: string;
  did: string;
  outcome: 'repaired' | 'left' | 'failed';
}

/** A repair whose re-check found the resource in use or changed: what it saw, and why it did nothing. */
export const leftAlone = (saw: string, did = 'left it'): RepairOutcome => ({ saw, did, outcome: 'left' });
