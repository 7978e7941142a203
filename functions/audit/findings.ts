/** One broken invariant: which kind, which resource, and what was seen. */
export interface AuditFinding {
  kind: string;
  resource: string;
  detail: string;
}

/** Records a finding; each part of the audit gets one. */
export type Find = (kind: string, resource: string, detail: string) => void;
