/**
 * `ferry audit`: compares what DynamoDB says with what the drivers really hold and lists every
 * orphan or mismatch. TODO(lead): volumes, attachments, host connections.
 */
export interface AuditFinding {
  kind: string;
  resource: string;
  detail: string;
}

export interface AuditReport {
  checked: Record<string, number>;
  findings: AuditFinding[];
}

export async function runAudit(): Promise<AuditReport> {
  return { checked: {}, findings: [] };
}

export function formatAuditReport(report: AuditReport): string {
  const lines = Object.entries(report.checked).map(([k, n]) => `checked ${n} ${k}`);
  if (report.findings.length === 0) lines.push('audit clean');
  for (const f of report.findings) lines.push(`${f.kind}\t${f.resource}\t${f.detail}`);
  return lines.join('\n');
}
