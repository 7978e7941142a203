/**
 * The service-level replication state of a backend (reference §2.3) as pure transitions:
 * (state, event) -> state | FerryError. Nothing here touches DynamoDB; repo.ts persists each result
 * with a condition that is the transition's guard, so two requests racing for one backend cannot
 * both pass it.
 *
 * The refusal messages are upstream's `_replication_db_change` ones, word for word, because the
 * cinder CLI shows them to the operator as they are.
 */
import { BadRequest, type FerryError } from '../core/errors.js';
import type { BackendServiceState } from '../drivers/volume/driver.js';
import { REPLICATION } from '../volumes/model.js';

/** The replication statuses from which failover may start (API `failover`'s expected values). */
export const FAILOVER_FROM: readonly string[] = [REPLICATION.enabled, REPLICATION.failedOver];

export type ServiceEvent =
  /** API failover/failover_host accepted. */
  | { type: 'failover-requested' }
  /** The failover finished; `activeBackendId` is what the driver returned ('' after failback). */
  | { type: 'failover-succeeded'; failback: boolean; activeBackendId: string }
  /** The driver refused the target (InvalidReplicationTarget). */
  | { type: 'failover-invalid-target' }
  /** Any other driver failure. */
  | { type: 'failover-failed' }
  | { type: 'freeze' }
  /** The DB half of thaw: `frozen` goes false; `driverThawed` says whether the backend agreed. */
  | { type: 'thaw' }
  | { type: 'thaw-driver-done' };

/** `No service could be changed: <field> in ['<host>'] must be <expected> [and must be up ]to failover.` */
export function noServiceChanged(host: string, field: 'replication_status' | 'frozen', expected: string, checkUp: boolean): BadRequest {
  const up = checkUp ? 'and must be up ' : '';
  return new BadRequest(`Invalid input received: No service could be changed: ${field} in ['${host}'] must be ${expected} ${up}to failover.`);
}

/** The expected-values text of failover, as Python prints the list. */
export const FAILOVER_EXPECTED_TEXT = `[${FAILOVER_FROM.map((s) => `'${s}'`).join(', ')}]`;

export function serviceTransition(host: string, s: BackendServiceState, e: ServiceEvent): BackendServiceState | FerryError {
  switch (e.type) {
    case 'failover-requested':
      if (!FAILOVER_FROM.includes(s.replicationStatus)) return noServiceChanged(host, 'replication_status', FAILOVER_EXPECTED_TEXT, true);
      return { ...s, replicationStatus: REPLICATION.failingOver };
    case 'failover-succeeded':
      if (s.replicationStatus !== REPLICATION.failingOver) return new BadRequest(`Invalid input received: Service ${host} is not failing over (replication_status ${s.replicationStatus}).`);
      if (e.failback) {
        // Upstream: a frozen service stays disabled (for the freeze) after failing back.
        return { ...s, replicationStatus: REPLICATION.enabled, activeBackendId: '', disabled: s.frozen, disabledReason: s.frozen ? 'frozen' : '' };
      }
      return { ...s, replicationStatus: REPLICATION.failedOver, activeBackendId: e.activeBackendId, disabled: true, disabledReason: 'failed-over' };
    case 'failover-invalid-target':
      if (s.replicationStatus !== REPLICATION.failingOver) return new BadRequest(`Invalid input received: Service ${host} is not failing over (replication_status ${s.replicationStatus}).`);
      // Nothing moved: back to where it was, judged by whether it already ran on a target.
      return { ...s, replicationStatus: s.activeBackendId ? REPLICATION.failedOver : REPLICATION.enabled };
    case 'failover-failed':
      if (s.replicationStatus !== REPLICATION.failingOver) return new BadRequest(`Invalid input received: Service ${host} is not failing over (replication_status ${s.replicationStatus}).`);
      return { ...s, replicationStatus: REPLICATION.failoverError, disabled: true };
    case 'freeze':
      if (s.frozen) return noServiceChanged(host, 'frozen', 'False', false);
      return { ...s, frozen: true, disabled: true, disabledReason: 'frozen' };
    case 'thaw':
      if (!s.frozen) return noServiceChanged(host, 'frozen', 'True', false);
      return { ...s, frozen: false };
    case 'thaw-driver-done':
      // Only a thawed service is enabled again (a freeze that came in between wins).
      if (s.frozen) return s;
      return { ...s, disabled: false, disabledReason: '' };
  }
}
