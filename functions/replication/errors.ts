/**
 * The refusals of a failover or drill: the backend's driver cannot replicate, or the target it was
 * asked for is not one (upstream's InvalidReplicationTarget, an Invalid, so 400).
 */
import { BadRequest, FerryError } from '../core/errors.js';

/** The driver cannot replicate: failover (and drills) of its backend are refused before anything is written. */
export class ReplicationNotSupported extends BadRequest {
  constructor(host: string, driver: string) {
    super(`Invalid input received: Backend ${host} (driver ${driver}) does not support replication; it cannot fail over.`);
  }
}

/** Whether a driver error is upstream's InvalidReplicationTarget (the driver throws it as a 400). */
export function isInvalidReplicationTarget(e: unknown): boolean {
  if (!e || typeof e !== 'object') return false;
  const name = (e as { name?: string }).name ?? '';
  if (name === 'InvalidReplicationTarget') return true;
  return e instanceof FerryError && e.status === 400;
}

/** The failover step's InvalidReplicationTarget, carrying the full message it was given (the driver's or its own). */
export class InvalidReplicationTarget extends BadRequest {
  constructor(message: string, cause?: unknown) {
    super(message, { cause });
  }
}
