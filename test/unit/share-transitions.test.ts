/**
 * The share lifecycle as pure transitions: create (scheduled -> created on backend -> available,
 * or failed), delete (refused while busy with a migration task or in a non-deletable status),
 * access rules (no duplicates, only on available shares), and task_state.
 */
import { describe, expect, test } from 'vitest';
import { FerryError } from '../../functions/core/errors.js';
import type { Share } from '../../functions/shares/model.js';
import { BUSY_TASK_STATES, TASK_STATES } from '../../functions/shares/model.js';
import { isBusy, transition, type ShareEvent } from '../../functions/shares/transitions.js';

const at = '2026-01-01T00:00:00.000Z';

function share(overrides: Partial<Share> = {}): Share {
  return {
    id: 's1', projectId: 'demo', userId: 'demo', name: 'x', description: null, size: 1, shareProto: 'NFS', status: 'creating', taskState: null,
    shareTypeId: 't1', shareTypeName: 'default', shareNetworkId: null, availabilityZone: null, metadata: {}, isPublic: false,
    instanceId: '11111111-1111-4111-a111-111111111111', host: null, exportLocations: [], capacity: null, ownsBackendShare: false,
    accessRules: {}, errorReason: null, migration: null, createdAt: at, updatedAt: at, version: 1, ...overrides,
  };
}

const apply = (s: Share, e: ShareEvent) => {
  const r = transition(s, e);
  if (r instanceof FerryError) throw r;
  return r;
};

describe('create', () => {
  test('scheduled -> created-on-backend -> available', () => {
    let s = apply(share(), { type: 'scheduled', at, capacity: { pool: 'ferry@nfs-a#pool0', gb: 1 }, availabilityZone: 'nova' });
    expect(s).toMatchObject({ host: 'ferry@nfs-a#pool0', capacity: { pool: 'ferry@nfs-a#pool0', gb: 1 }, availabilityZone: 'nova' });
    s = apply(s, { type: 'created-on-backend', at, exportLocations: ['/x/share-1'] });
    expect(s).toMatchObject({ exportLocations: ['/x/share-1'], ownsBackendShare: true });
    s = apply(s, { type: 'mark-available', at });
    expect(s.status).toBe('available');
    expect(transition(s, { type: 'mark-available', at })).toBe(s);
  });

  test('a second schedule to the same pool changes nothing; to another pool is refused', () => {
    const s = apply(share(), { type: 'scheduled', at, capacity: { pool: 'p#a', gb: 1 }, availabilityZone: 'nova' });
    expect(transition(s, { type: 'scheduled', at, capacity: { pool: 'p#a', gb: 1 }, availabilityZone: 'nova' })).toBe(s);
    expect(transition(s, { type: 'scheduled', at, capacity: { pool: 'p#b', gb: 1 }, availabilityZone: 'nova' })).toBeInstanceOf(FerryError);
  });

  test('available needs a backend share', () => {
    expect(transition(share({ host: 'h#p' }), { type: 'mark-available', at })).toBeInstanceOf(FerryError);
  });

  test('create-failed marks error with the reason; capacity and backend share are released once', () => {
    let s = apply(share({ host: 'h#p', capacity: { pool: 'h#p', gb: 1 }, ownsBackendShare: true, exportLocations: ['/x'] }), { type: 'create-failed', at, reason: 'boom' });
    expect(s).toMatchObject({ status: 'error', errorReason: 'boom' });
    s = apply(s, { type: 'capacity-released', at });
    expect(s.capacity).toBeNull();
    expect(transition(s, { type: 'capacity-released', at })).toBe(s);
    s = apply(s, { type: 'backend-share-released', at });
    expect(s).toMatchObject({ ownsBackendShare: false, exportLocations: [] });
    expect(transition(share({ status: 'available' }), { type: 'create-failed', at, reason: 'x' })).toBeInstanceOf(FerryError);
  });
});

describe('delete', () => {
  test.each(['available', 'error', 'inactive', 'error_deleting'] as const)('allowed from %s', (status) => {
    expect(apply(share({ status }), { type: 'begin-delete', at }).status).toBe('deleting');
  });
  test.each(['creating', 'deleting', 'migrating'] as const)('refused from %s', (status) => {
    expect(transition(share({ status }), { type: 'begin-delete', at })).toBeInstanceOf(FerryError);
  });
  test('the machine resumes a share the API set deleting', () => {
    const s = share({ status: 'deleting' });
    expect(transition(s, { type: 'begin-delete', at, resume: true })).toBe(s);
  });
  test.each(BUSY_TASK_STATES)('refused while task_state is %s', (taskState) => {
    const r = transition(share({ status: 'available', taskState }), { type: 'begin-delete', at });
    expect(r).toBeInstanceOf(FerryError);
    expect((r as FerryError).message).toContain('busy');
  });
  test('allowed after a finished migration (task_state migration_success / error / cancelled)', () => {
    for (const taskState of ['migration_success', 'migration_error', 'migration_cancelled'] as const) {
      expect(apply(share({ status: 'available', taskState }), { type: 'begin-delete', at }).status).toBe('deleting');
    }
  });
  test('delete-failed only from deleting', () => {
    expect(apply(share({ status: 'deleting' }), { type: 'delete-failed', at, reason: 'r' }).status).toBe('error_deleting');
    expect(transition(share({ status: 'available' }), { type: 'delete-failed', at, reason: 'r' })).toBeInstanceOf(FerryError);
  });
});

describe('access rules', () => {
  const available = share({ status: 'available', host: 'h#p', ownsBackendShare: true });
  const add = (s: Share, id: string, accessTo = '10.0.0.0/24') => transition(s, { type: 'access-add', at, id, accessType: 'ip', accessTo, accessLevel: 'rw' });

  test('add queues the rule; applied makes it active (or error)', () => {
    const s = add(available, 'r1') as Share;
    expect(s.accessRules.r1!.state).toBe('queued_to_apply');
    expect(apply(s, { type: 'access-applied', at, ids: ['r1'], ok: true }).accessRules.r1!.state).toBe('active');
    expect(apply(s, { type: 'access-applied', at, ids: ['r1'], ok: false }).accessRules.r1!.state).toBe('error');
  });
  test('a duplicate type:to is refused', () => {
    const s = add(available, 'r1') as Share;
    const r = add(s, 'r2');
    expect(r).toBeInstanceOf(FerryError);
    expect((r as FerryError).message).toBe('Share access ip:10.0.0.0/24 exists.');
  });
  test('only an available share, not busy', () => {
    expect(add(share({ status: 'creating' }), 'r1')).toBeInstanceOf(FerryError);
    expect(add({ ...available, taskState: 'migration_in_progress' }, 'r1')).toBeInstanceOf(FerryError);
  });
  test('deny queues, removal drops; an unknown rule is 404', () => {
    const s = apply(add(available, 'r1') as Share, { type: 'access-applied', at, ids: ['r1'], ok: true });
    const denying = apply(s, { type: 'access-deny', at, id: 'r1' });
    expect(denying.accessRules.r1!.state).toBe('queued_to_deny');
    expect(apply(denying, { type: 'access-removed', at, id: 'r1' }).accessRules).toEqual({});
    expect((transition(s, { type: 'access-deny', at, id: 'nope' }) as FerryError).status).toBe(404);
  });
});

describe('task_state', () => {
  test('null until set; every §1.6 value settable; busy ones are busy', () => {
    expect(share().taskState).toBeNull();
    for (const t of TASK_STATES) {
      const s = apply(share({ status: 'available' }), { type: 'set-task-state', at, taskState: t });
      expect(s.taskState).toBe(t);
      expect(isBusy(s)).toBe(BUSY_TASK_STATES.includes(t));
    }
  });
  test('update changes name and description only', () => {
    const s = apply(share({ status: 'available' }), { type: 'update', at, name: 'n', description: 'd' });
    expect(s).toMatchObject({ name: 'n', description: 'd', status: 'available' });
  });
});
