/**
 * `ferry audit`: compares what DynamoDB says with what the drivers really hold, and lists every
 * orphan or mismatch. Upstream has nothing like it; operators ask for it (volumes stuck in
 * `reserved` or `attaching`, dangling attachments, exports nobody uses).
 *
 * It only reads. Each check names the invariant it verifies; a finding says which resource breaks
 * it and how, so an operator can act on it. Every integration scenario ends by asserting a clean
 * audit.
 */
import { auditServers } from './servers.js';
import { auditShares } from './shares.js';
import { auditVolumes } from './volumes.js';
import type { AuditFinding, Find } from './findings.js';

export type { AuditFinding } from './findings.js';

export interface AuditReport {
  checked: Record<string, number>;
  findings: AuditFinding[];
}

export interface AuditOptions {
  /** A volume or attachment in a transitional status for longer than this is reported as stuck. Default 1 hour. */
  stuckAfterSeconds?: number;
  now?: Date;
}

export async function runAudit(options: AuditOptions = {}): Promise<AuditReport> {
  const now = (options.now ?? new Date()).getTime();
  const stuckMs = (options.stuckAfterSeconds ?? 3600) * 1000;
  const findings: AuditFinding[] = [];
  const find: Find = (kind, resource, detail, ref) => findings.push({ kind, resource, detail, ...(ref ? { ref } : {}) });

  const volumes = await auditVolumes(now, stuckMs, find);
  const shareChecks = await auditShares(now, stuckMs, find);
  const serverChecks = await auditServers(now, stuckMs, find, volumes.liveAttachments);
  return { checked: { ...shareChecks, ...serverChecks, ...volumes.checked }, findings };
}

export function formatAuditReport(report: AuditReport): string {
  const lines = Object.entries(report.checked).map(([k, n]) => `checked ${n} ${k}`);
  if (report.findings.length === 0) lines.push('audit clean');
  else lines.push(`${report.findings.length} finding(s):`);
  for (const f of report.findings) lines.push(`${f.kind}\t${f.resource}\t${f.detail}`);
  return lines.join('\n');
}
