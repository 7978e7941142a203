/**
 * How `ferry ops` and `ferry watch` print an operation: a progress bar, how much of how much, the
 * rate, the ETA, the step; plain ASCII, so a log or a captured terminal reads the same.
 */
import type { OperationProgress, OperationView } from '../functions/ops/model.js';

export const BAR_WIDTH = 24;

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function formatBytes(n: number): string {
  let v = n;
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(1)} ${UNITS[u]}`;
}

/** 75 -> "1:15", 3725 -> "1:02:05". */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = String(s % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${sec}` : `${m}:${sec}`;
}

/** `[##########..............]` for a fraction; a moving marker while nothing measures the work. */
export function formatBar(fraction: number | null, tick = 0, width = BAR_WIDTH): string {
  if (fraction === null) {
    const at = tick % (2 * (width - 3) || 1);
    const pos = at < width - 3 ? at : 2 * (width - 3) - at;
    return `[${' '.repeat(pos)}<=>${' '.repeat(width - 3 - pos)}]`;
  }
  const filled = Math.round(Math.max(0, Math.min(1, fraction)) * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}

export function formatPercent(fraction: number | null): string {
  return fraction === null ? '   ?%' : `${String(Math.floor(fraction * 100)).padStart(3)} %`;
}

/** "512.0 MiB of 1.0 GiB, 12 of 80 files" | "600 of 1000 volumes" | "" */
export function formatAmount(p: OperationProgress | null): string {
  if (!p) return '';
  if (p.unit === 'percent') return '';
  const amount = p.unit === 'bytes' ? `${formatBytes(p.done)} of ${formatBytes(p.total)}` : `${p.done} of ${p.total} ${p.unit}`;
  return p.filesTotal ? `${amount}, ${p.filesDone ?? 0} of ${p.filesTotal} files` : amount;
}

export function formatRate(rate: number | null, unit: OperationProgress['unit'] | undefined): string {
  if (rate === null || unit === undefined) return '';
  if (unit === 'bytes') return `${formatBytes(rate)}/s`;
  if (unit === 'percent') return `${rate.toFixed(1)} %/s`;
  return `${rate >= 10 ? Math.round(rate) : rate.toFixed(1)} ${unit}/s`;
}

/** The one line `ferry watch` redraws: bar, percent, amount, rate, ETA, step. */
export function progressLine(v: OperationView, live: { rate: number | null; etaSeconds: number | null; tick?: number }): string {
  const parts = [formatBar(v.fraction, live.tick), formatPercent(v.fraction)];
  const amount = formatAmount(v.progress);
  if (amount) parts.push(amount);
  if (v.status === 'running') {
    const rate = formatRate(live.rate, v.progress?.unit);
    if (rate) parts.push(rate);
    if (live.etaSeconds !== null) parts.push(`ETA ${formatDuration(live.etaSeconds)}`);
  }
  parts.push(v.step);
  return parts.join('  ');
}

/** How long ago an ISO time was, in words ("3 min ago"). */
export function ago(iso: string, now = Date.now()): string {
  const s = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 172_800) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86_400)} days ago`;
}
