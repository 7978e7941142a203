/**
 * The service-level replication transitions (reference §2.3) and upstream's refusal messages.
 */
import { describe, expect, test } from 'vitest';
import { FerryError } from '../../functions/core/errors.js';
import type { BackendServiceState } from '../../functions/drivers/volume/driver.js';
import { serviceTransition } from '../../functions/replication/service-state.js';

const H = 'ferry@lvm-r';
const base: BackendServiceState = { replicationStatus: 'enabled', activeBackendId: '', frozen: false, disabled: false, disabledReason: '' };
const state = (over: Partial<BackendServiceState> = {}): BackendServiceState => ({ ...base, ...over });

function refused(out: BackendServiceState | FerryError): FerryError {
  expect(out).toBeInstanceOf(FerryError);
  return out as FerryError;
}

describe('failover requested', () => {
  test.each(['enabled', 'failed-over'])('from %s -> failing-over', (from) => {
    expect(serviceTransition(H, state({ replicationStatus: from }), { type: 'failover-requested' })).toEqual(state({ replicationStatus: 'failing-over' }));
  });
  test.each(['disabled', 'not-capable', 'failing-over', 'failover-error', 'error'])('from %s -> upstream 400', (from) => {
    const e = refused(serviceTransition(H, state({ replicationStatus: from }), { type: 'failover-requested' }));
    expect(e.status).toBe(400);
    expect(e.message).toBe("Invalid input received: No service could be changed: replication_status in ['ferry@lvm-r'] must be ['enabled', 'failed-over'] and must be up to failover.");
  });
});

describe('failover outcome', () => {
  test('success to a target: failed-over, the driver-returned id, disabled with reason failed-over', () => {
    expect(serviceTransition(H, state({ replicationStatus: 'failing-over' }), { type: 'failover-succeeded', failback: false, activeBackendId: 'site-b' })).toEqual(
      state({ replicationStatus: 'failed-over', activeBackendId: 'site-b', disabled: true, disabledReason: 'failed-over' }),
    );
  });
  test('failback: enabled, active id empty, enabled again unless frozen', () => {
    const from = state({ replicationStatus: 'failing-over', activeBackendId: 'site-b', disabled: true, disabledReason: 'failed-over' });
    expect(serviceTransition(H, from, { type: 'failover-succeeded', failback: true, activeBackendId: '' })).toEqual(state());
    expect(serviceTransition(H, { ...from, frozen: true }, { type: 'failover-succeeded', failback: true, activeBackendId: '' })).toEqual(
      state({ frozen: true, disabled: true, disabledReason: 'frozen' }),
    );
  });
  test('invalid target: back to failed-over when running on a target, else enabled; never disabled by it', () => {
    expect(serviceTransition(H, state({ replicationStatus: 'failing-over' }), { type: 'failover-invalid-target' })).toEqual(state());
    const onTarget = state({ replicationStatus: 'failing-over', activeBackendId: 'site-b', disabled: true, disabledReason: 'failed-over' });
    expect(serviceTransition(H, onTarget, { type: 'failover-invalid-target' })).toEqual({ ...onTarget, replicationStatus: 'failed-over' });
  });
  test('any other failure: failover-error and disabled', () => {
    expect(serviceTransition(H, state({ replicationStatus: 'failing-over' }), { type: 'failover-failed' })).toEqual(state({ replicationStatus: 'failover-error', disabled: true }));
  });
  test.each(['failover-succeeded', 'failover-invalid-target', 'failover-failed'] as const)('%s needs failing-over', (type) => {
    const e = refused(serviceTransition(H, state(), type === 'failover-succeeded' ? { type, failback: false, activeBackendId: 'x' } : { type }));
    expect(e.message).toMatch(/is not failing over/);
  });
});

describe('freeze / thaw', () => {
  test('freeze: frozen, disabled, reason frozen; twice -> upstream 400', () => {
    const frozen = serviceTransition(H, state(), { type: 'freeze' });
    expect(frozen).toEqual(state({ frozen: true, disabled: true, disabledReason: 'frozen' }));
    expect(refused(serviceTransition(H, frozen as BackendServiceState, { type: 'freeze' })).message).toBe(
      "Invalid input received: No service could be changed: frozen in ['ferry@lvm-r'] must be False to failover.",
    );
  });
  test('thaw: frozen false first, enabled once the driver thawed; thaw of a thawed service -> upstream 400', () => {
    const frozen = state({ frozen: true, disabled: true, disabledReason: 'frozen' });
    const thawed = serviceTransition(H, frozen, { type: 'thaw' }) as BackendServiceState;
    expect(thawed).toEqual({ ...frozen, frozen: false });
    expect(serviceTransition(H, thawed, { type: 'thaw-driver-done' })).toEqual(state());
    expect(refused(serviceTransition(H, state(), { type: 'thaw' })).message).toBe(
      "Invalid input received: No service could be changed: frozen in ['ferry@lvm-r'] must be True to failover.",
    );
  });
  test('a freeze that lands before the driver thawed wins', () => {
    const frozen = state({ frozen: true, disabled: true, disabledReason: 'frozen' });
    expect(serviceTransition(H, frozen, { type: 'thaw-driver-done' })).toBe(frozen);
  });
  test('freeze does not touch replication status or the active backend', () => {
    const failedOver = state({ replicationStatus: 'failed-over', activeBackendId: 'site-c', disabled: true, disabledReason: 'failed-over' });
    expect(serviceTransition(H, failedOver, { type: 'freeze' })).toMatchObject({ replicationStatus: 'failed-over', activeBackendId: 'site-c', frozen: true });
  });
});
