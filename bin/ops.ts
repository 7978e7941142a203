/**
 * `ferry ops [--since DURATION] [--all] [--json]`: every operation in flight (share migrations and
 * their copies, failovers, failbacks and drills, server operations), each with its progress bar,
 * rate, ETA and step, then what failed (or was cancelled) since the cut-off, with the reason.
 * Exit 0 when nothing failed since the cut-off, 1 when something did, 2 when it could not run.
 */
import { parseArgs } from 'node:util';
import type { OperationView, OpsSnapshot } from '../functions/ops/model.js';
import { cannotRead, requireStack, UsageError, type Io } from './cli.js';
import { ago, progressLine } from './ops-format.js';

const UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };

/** "90s" / "30m" / "24h" / "7d" -> seconds. */
export function parseDuration(text: string, option: string): number {
  const m = /^(\d+(?:\.\d+)?)([smhd])$/.exec(text.trim());
  if (!m) throw new UsageError(`${option} must be a duration like 30m, 24h or 7d, not "${text}"`);
  return Number(m[1]) * UNIT_SECONDS[m[2]!]!;
}

function viewLines(v: OperationView, now: number): string[] {
  const head = `${v.kind.padEnd(16)} ${v.ref}`;
  if (v.status === 'running' || v.status === 'waiting') {
    return [head, `    ${progressLine(v, { rate: v.rate, etaSeconds: v.etaSeconds })}`, `    ${v.resource}, started ${ago(v.startedAt, now)}${v.status === 'waiting' ? ' (waiting for the operator)' : ''}`];
  }
  return [head, `    ${v.status} ${ago(v.endedAt ?? v.updatedAt, now)}: ${v.reason ?? v.step}`, `    ${v.resource}`];
}

export function formatSnapshot(snap: OpsSnapshot, now = Date.now()): string[] {
  const lines = [`in flight: ${snap.inFlight.length}`];
  for (const v of snap.inFlight) lines.push(...viewLines(v, now));
  lines.push('', `failed or cancelled since ${snap.since}: ${snap.recentFailures.length}`);
  for (const v of snap.recentFailures) lines.push(...viewLines(v, now));
  if (snap.recentSuccesses) {
    lines.push('', `succeeded since ${snap.since}: ${snap.recentSuccesses.length}`);
    for (const v of snap.recentSuccesses) lines.push(...viewLines(v, now));
  }
  return lines;
}

export async function ops(args: string[], io: Io): Promise<number> {
  const { values } = parseArgs({
    args,
    strict: true,
    allowPositionals: false,
    options: { since: { type: 'string', default: '24h' }, all: { type: 'boolean', default: false }, json: { type: 'boolean', default: false } },
  });
  const since = new Date(Date.now() - parseDuration(values.since!, '--since') * 1000);
  requireStack();
  // Loaded here so that help and usage errors do not load the AWS SDK.
  const { listOperations } = await import('../functions/ops/read.js');
  let snap: OpsSnapshot;
  try {
    snap = await listOperations({ since, includeSuccesses: values.all ?? false });
  } catch (e) {
    throw cannotRead(e, 'ferry ops');
  }
  if (values.json) io.out(JSON.stringify(snap, null, 2));
  else for (const line of formatSnapshot(snap)) io.out(line);
  return snap.recentFailures.length > 0 ? 1 : 0;
}
