/**
 * Extend and shrink of a share as pure transitions (M/share/api.py extend/shrink for the checks
 * and their messages, M/share/manager.py extend_share/shrink_share and
 * M/scheduler/manager.py extend_share for the outcomes). resize.ts persists each with a condition
 * on the share's version, with the quota and pool items its changes call for.
 *
 * What a resize holds, and when: an extend takes the extra gigabytes (quota and pool) at begin,
 * with `extending`, and gives them back if the driver fails; a shrink holds the old size until the
 * driver has shrunk the share, and gives back the difference with `available`.
 */
import { BadRequest, FerryError } from '../core/errors.js';
import { type Share, type ShareResize } from './model.js';
import { InvalidShare, isBusy } from './transitions.js';

/** Manila's InvalidInput: 400 "Invalid input received: <reason>". */
export class InvalidInput extends BadRequest {
  constructor(reason: string) {
    super(`Invalid input received: ${reason}`);
  }
}

/** Manila's ShareBusyException (400). */
export class ShareBusy extends BadRequest {
  constructor(s: Share) {
    super(`Share is busy with an active task: Share ${s.id} is busy as part of an active task: ${s.taskState}.`);
  }
}

/** M/share/api.py shrink: the statuses a shrink may start from (a refused shrink may be tried again). */
export const SHRINKABLE_STATUSES = ['available', 'shrinking_possible_data_loss_error'] as const;

/** How a resize's driver call ended (M/share/manager.py). */
export type ResizeOutcome =
  /** The driver did it. */
  | 'done'
  /** The driver failed: extending_error / shrinking_error. */
  | 'failed'
  /** Shrink only: ShareShrinkingPossibleDataLoss, the share back to available. */
  | 'refused-data-loss'
  /** The driver has no such method (upstream's NotImplementedError): shrink back to available, extend extending_error. */
  | 'unsupported';

const gbOf = (quota: Share['quota']) => quota?.gigabytes ?? 0;

/** The share's quota record with `gb` more gigabytes (a share not yet counted stays uncounted: its count will read its size). */
const quotaPlus = (s: Share, gb: number): Share['quota'] => (s.quota ? { ...s.quota, gigabytes: gbOf(s.quota) + gb } : s.quota);
const capacityPlus = (s: Share, gb: number): Share['capacity'] => (s.capacity ? { ...s.capacity, gb: s.capacity.gb + gb } : s.capacity);

/**
 * A resize not settled yet (its call died, and an admin reset the status meanwhile) still holds
 * what it took: a second one would count it twice. The reconciler settles it (resize-recovery.ts).
 */
function unsettled(s: Share): FerryError | undefined {
  const r = s.resize;
  if (r) return new InvalidShare(`Share ${s.id} has an ${r.kind} to ${r.toGb} GiB that is not settled yet; the reconciler finishes it.`);
  // What a failed migration left (a destination, held capacity) was sized for the old size, as delete refuses it too.
  if (s.migration) return new InvalidShare(`Share ${s.id} still holds what a migration left (${s.migration.error ?? 'its record'}); run migration_cancel first.`);
  return undefined;
}

export function beginExtend(s: Share, e: { at: string; newSize: number; resizeId: string }): Share | FerryError {
  if (s.status !== 'available') return new InvalidShare(`Share ${s.id} status must be 'available' to extend, but current status is: ${s.status}.`);
  if (isBusy(s)) return new ShareBusy(s);
  const pending = unsettled(s);
  if (pending) return pending;
  const increase = e.newSize - s.size;
  if (increase <= 0) return new InvalidInput(`New size for extend must be greater than current size. (current: ${s.size}, extended: ${e.newSize}).`);
  const resize: ShareResize = { id: e.resizeId, kind: 'extend', fromGb: s.size, toGb: e.newSize, chargedGb: increase, startedAt: e.at };
  return { ...s, status: 'extending', resize, quota: quotaPlus(s, increase), capacity: capacityPlus(s, increase), updatedAt: e.at };
}

export function beginShrink(s: Share, e: { at: string; newSize: number; resizeId: string }): Share | FerryError {
  if (!(SHRINKABLE_STATUSES as readonly string[]).includes(s.status)) {
    return new InvalidShare(`Share ${s.id} status must in (${SHRINKABLE_STATUSES.join(', ')}) to shrink, but current status is: ${s.status}.`);
  }
  if (isBusy(s)) return new ShareBusy(s);
  const pending = unsettled(s);
  if (pending) return pending;
  if (s.size - e.newSize <= 0 || e.newSize <= 0) {
    return new InvalidInput(`New size for shrink must be less than current size and greater than 0 (current: ${s.size}, new: ${e.newSize})`);
  }
  const resize: ShareResize = { id: e.resizeId, kind: 'shrink', fromGb: s.size, toGb: e.newSize, chargedGb: 0, startedAt: e.at };
  return { ...s, status: 'shrinking', resize, updatedAt: e.at };
}

/**
 * The end of the resize `resizeId`. Idempotent: a share no longer in that resize is returned as it
 * is (a retried or recovered call finds it settled).
 */
export function endResize(s: Share, e: { at: string; resizeId: string; outcome: ResizeOutcome; reason?: string }): Share | FerryError {
  const r = s.resize;
  if (!r || r.id !== e.resizeId) return s;
  const base = { ...s, resize: null, updatedAt: e.at };
  if (r.kind === 'extend') {
    if (e.outcome === 'done') return { ...base, status: 'available', size: r.toGb, errorReason: null };
    if (e.outcome === 'refused-data-loss') return new InvalidShare(`an extend of share ${s.id} cannot end in a refused shrink.`);
    // The extra gigabytes go back: the share keeps its old size (M/share/manager.py rolls the reservation back).
    return { ...base, status: 'extending_error', quota: quotaPlus(s, -r.chargedGb), capacity: capacityPlus(s, -r.chargedGb), errorReason: e.reason ?? null };
  }
  if (e.outcome === 'done') {
    const freed = r.fromGb - r.toGb;
    return { ...base, status: 'available', size: r.toGb, quota: quotaPlus(s, -freed), capacity: capacityPlus(s, -freed), errorReason: null };
  }
  if (e.outcome === 'failed') return { ...base, status: 'shrinking_error', errorReason: e.reason ?? null };
  return { ...base, status: 'available', errorReason: null };
}

/** What a settled resize gives back, read from the transition's own output: quota gigabytes and pool GiB. */
export function freedBy(before: Share, after: Share): { quotaGb: number; poolGb: number } {
  return {
    quotaGb: Math.max(0, gbOf(before.quota) - gbOf(after.quota)),
    poolGb: before.capacity && after.capacity ? Math.max(0, before.capacity.gb - after.capacity.gb) : 0,
  };
}
