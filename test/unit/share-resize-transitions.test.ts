/**
 * Share extend and shrink as pure transitions (functions/shares/resize-transitions.ts): upstream's
 * refusals and their messages (M/share/api.py), what each begin holds (quota and pool for an
 * extend), each outcome's status (M/share/manager.py) and what it gives back, and idempotence.
 */
import { describe, expect, test } from 'vitest';
import { FerryError } from '../../functions/core/errors.js';
import type { Share } from '../../functions/shares/model.js';
import { beginExtend, beginShrink, endResize, freedBy, type ResizeOutcome } from '../../functions/shares/resize-transitions.js';

const at = '2026-01-01T00:00:00.000Z';
const POOL = 'ferry@nfs-a#pool0';

function share(overrides: Partial<Share> = {}): Share {
  return {
    id: 's1', projectId: 'demo', userId: 'demo', name: 'x', description: null, size: 2, shareProto: 'NFS', status: 'available', taskState: null,
    shareTypeId: 't1', shareTypeName: 'default', shareNetworkId: null, availabilityZone: 'nova', metadata: {}, isPublic: false,
    instanceId: '11111111-1111-4111-a111-111111111111', host: POOL, exportLocations: ['/x'], capacity: { pool: POOL, gb: 2 }, ownsBackendShare: true,
    accessRules: {}, errorReason: null, migration: null, quota: { shares: 1, gigabytes: 2 }, createdAt: at, updatedAt: at, version: 3, ...overrides,
  };
}

function ok(r: Share | FerryError): Share {
  if (r instanceof FerryError) throw r;
  return r;
}

function refusal(r: Share | FerryError): { status: number; message: string } {
  if (!(r instanceof FerryError)) throw new Error(`expected a refusal, got status ${r.status}`);
  return { status: r.status, message: r.message };
}

describe('extend', () => {
  test('begin: extending, the resize recorded, the extra gigabytes on the quota record and the pool capacity', () => {
    // Prepare
    const s = share();
    // Act
    const after = ok(beginExtend(s, { at, newSize: 5, resizeId: 'r1' }));
    // Assess
    expect(after).toMatchObject({ status: 'extending', size: 2, quota: { shares: 1, gigabytes: 5 }, capacity: { pool: POOL, gb: 5 } });
    expect(after.resize).toEqual({ id: 'r1', kind: 'extend', fromGb: 2, toGb: 5, chargedGb: 3, startedAt: at });
  });

  test("refusals carry upstream's messages", () => {
    expect(refusal(beginExtend(share({ status: 'error' }), { at, newSize: 5, resizeId: 'r' }))).toEqual({
      status: 400,
      message: "Invalid share: Share s1 status must be 'available' to extend, but current status is: error.",
    });
    expect(refusal(beginExtend(share({ taskState: 'migration_in_progress' }), { at, newSize: 5, resizeId: 'r' }))).toEqual({
      status: 400,
      message: 'Share is busy with an active task: Share s1 is busy as part of an active task: migration_in_progress.',
    });
    for (const newSize of [2, 1]) {
      expect(refusal(beginExtend(share(), { at, newSize, resizeId: 'r' }))).toEqual({
        status: 400,
        message: `Invalid input received: New size for extend must be greater than current size. (current: 2, extended: ${newSize}).`,
      });
    }
  });

  test('done: available at the new size, nothing more given back; failed: extending_error at the old size, the charge given back', () => {
    const begun = ok(beginExtend(share(), { at, newSize: 5, resizeId: 'r1' }));
    const done = ok(endResize(begun, { at, resizeId: 'r1', outcome: 'done' }));
    expect(done).toMatchObject({ status: 'available', size: 5, resize: null, quota: { gigabytes: 5 }, capacity: { gb: 5 } });
    expect(freedBy(begun, done)).toEqual({ quotaGb: 0, poolGb: 0 });
    const failed = ok(endResize(begun, { at, resizeId: 'r1', outcome: 'failed', reason: 'disk on fire' }));
    expect(failed).toMatchObject({ status: 'extending_error', size: 2, resize: null, quota: { gigabytes: 2 }, capacity: { gb: 2 }, errorReason: 'disk on fire' });
    expect(freedBy(begun, failed)).toEqual({ quotaGb: 3, poolGb: 3 });
    expect(ok(endResize(begun, { at, resizeId: 'r1', outcome: 'unsupported' })).status).toBe('extending_error');
  });

  test('ending is idempotent: another resize id, or one already settled, changes nothing', () => {
    const begun = ok(beginExtend(share(), { at, newSize: 5, resizeId: 'r1' }));
    expect(endResize(begun, { at, resizeId: 'other', outcome: 'done' })).toBe(begun);
    const done = ok(endResize(begun, { at, resizeId: 'r1', outcome: 'done' }));
    expect(endResize(done, { at, resizeId: 'r1', outcome: 'failed' })).toBe(done);
  });

  test('a second extend while one runs is refused by the status; after an admin reset, by the unsettled resize', () => {
    const begun = ok(beginExtend(share(), { at, newSize: 5, resizeId: 'r1' }));
    expect(refusal(beginExtend(begun, { at, newSize: 6, resizeId: 'r2' })).message).toContain('current status is: extending.');
    const reset = { ...begun, status: 'available' as const };
    for (const r of [beginExtend(reset, { at, newSize: 6, resizeId: 'r2' }), beginShrink(reset, { at, newSize: 1, resizeId: 'r2' })]) {
      expect(refusal(r)).toEqual({ status: 400, message: 'Invalid share: Share s1 has an extend to 5 GiB that is not settled yet; the reconciler finishes it.' });
    }
  });

  test('a share holding what a failed migration left is refused, as delete refuses it', () => {
    const leftover = share({ taskState: 'migration_error', migration: { error: 'copy failed' } as Share['migration'] });
    for (const r of [beginExtend(leftover, { at, newSize: 6, resizeId: 'r' }), beginShrink(leftover, { at, newSize: 1, resizeId: 'r' })]) {
      expect(refusal(r).message).toBe('Invalid share: Share s1 still holds what a migration left (copy failed); run migration_cancel first.');
    }
  });
});

describe('shrink', () => {
  test('begin: shrinking, nothing given back yet; from shrinking_possible_data_loss_error too', () => {
    const after = ok(beginShrink(share({ size: 4, capacity: { pool: POOL, gb: 4 }, quota: { shares: 1, gigabytes: 4 } }), { at, newSize: 1, resizeId: 'r1' }));
    expect(after).toMatchObject({ status: 'shrinking', size: 4, quota: { gigabytes: 4 }, capacity: { gb: 4 }, resize: { kind: 'shrink', fromGb: 4, toGb: 1, chargedGb: 0 } });
    expect(ok(beginShrink(share({ status: 'shrinking_possible_data_loss_error' }), { at, newSize: 1, resizeId: 'r' })).status).toBe('shrinking');
  });

  test("refusals carry upstream's messages", () => {
    expect(refusal(beginShrink(share({ status: 'extending_error' }), { at, newSize: 1, resizeId: 'r' }))).toEqual({
      status: 400,
      message: 'Invalid share: Share s1 status must in (available, shrinking_possible_data_loss_error) to shrink, but current status is: extending_error.',
    });
    expect(refusal(beginShrink(share({ taskState: 'data_copying_in_progress' }), { at, newSize: 1, resizeId: 'r' })).message).toMatch(/^Share is busy with an active task/);
    for (const newSize of [2, 3, 0, -1]) {
      expect(refusal(beginShrink(share(), { at, newSize, resizeId: 'r' }))).toEqual({
        status: 400,
        message: `Invalid input received: New size for shrink must be less than current size and greater than 0 (current: 2, new: ${newSize})`,
      });
    }
  });

  test.each<[ResizeOutcome, Share['status'], number]>([
    ['done', 'available', 1],
    ['refused-data-loss', 'available', 4],
    ['unsupported', 'available', 4],
    ['failed', 'shrinking_error', 4],
  ])('%s: %s at %i GiB', (outcome, status, size) => {
    const begun = ok(beginShrink(share({ size: 4, capacity: { pool: POOL, gb: 4 }, quota: { shares: 1, gigabytes: 4 } }), { at, newSize: 1, resizeId: 'r1' }));
    const after = ok(endResize(begun, { at, resizeId: 'r1', outcome, reason: 'why' }));
    expect(after).toMatchObject({ status, size, resize: null });
    // Only a done shrink gives back the difference, quota and pool alike.
    expect(freedBy(begun, after)).toEqual(outcome === 'done' ? { quotaGb: 3, poolGb: 3 } : { quotaGb: 0, poolGb: 0 });
  });
});
