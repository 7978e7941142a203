/**
 * The reconciler's share-backend repair record as a pure transition (functions/audit/share-repair-record.ts):
 * intent, then done; a repeated intent or done changes nothing; a new intent replaces a done one;
 * a pending intent of another target is a Conflict; done without an intent is NotFound.
 */
import { describe, expect, test } from 'vitest';
import { shareRepairTransition, type ShareRepairRecord } from '../../functions/audit/share-repair-record.js';
import { Conflict, NotFound } from '../../functions/core/errors.js';

const ID = 'quota-share-1';
const target = { shareId: 's1', host: 'ferry@efs-a', name: 'share-1' };
const intend = (at: string, t = target) => ({ type: 'intend' as const, at, kind: 'quota' as const, target: t, saw: `seen at ${at}` });

describe('share repair record', () => {
  test('intent, then done; each repeated is the same record (nothing to write)', () => {
    const intent = shareRepairTransition(undefined, ID, intend('t1')) as ShareRepairRecord;
    expect(intent).toEqual({ id: ID, kind: 'quota', target, state: 'intent', saw: 'seen at t1', did: null, intendedAt: 't1', doneAt: null, version: 0 });
    expect(shareRepairTransition(intent, ID, intend('t2', { host: 'ferry@efs-a', name: 'share-1', shareId: 's1' }))).toBe(intent);
    const done = shareRepairTransition({ ...intent, version: 1 }, ID, { type: 'done', at: 't3', did: 'withheld writes' }) as ShareRepairRecord;
    expect(done).toMatchObject({ state: 'done', did: 'withheld writes', doneAt: 't3', intendedAt: 't1', version: 1 });
    expect(shareRepairTransition(done, ID, { type: 'done', at: 't4', did: 'again' })).toBe(done);
  });

  test('a new intent replaces a done one, keeping its version to write on; another target while one is pending is a Conflict', () => {
    const done: ShareRepairRecord = { id: ID, kind: 'quota', target, state: 'done', saw: 'x', did: 'y', intendedAt: 't1', doneAt: 't2', version: 4 };
    expect(shareRepairTransition(done, ID, intend('t5'))).toMatchObject({ state: 'intent', intendedAt: 't5', did: null, doneAt: null, version: 4 });
    const pending = { ...done, state: 'intent' as const, did: null, doneAt: null };
    expect(shareRepairTransition(pending, ID, intend('t6', { ...target, name: 'share-2' }))).toBeInstanceOf(Conflict);
    expect(shareRepairTransition(pending, ID, { ...intend('t6'), kind: 'stray-replication' })).toBeInstanceOf(Conflict);
  });

  test('done with no intent recorded is NotFound', () => {
    expect(shareRepairTransition(undefined, ID, { type: 'done', at: 't1', did: 'x' })).toBeInstanceOf(NotFound);
  });
});
