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
