/**
 * One typed error hierarchy for everything Ferry refuses or fails at.
 *
 * Each error carries the HTTP status the reference API answers with, and the fault name the
 * upstream services put around the message (`{"badRequest": {"code": 400, "message": "..."}}`),
 * so the API layer turns any FerryError into the exact body the OpenStack CLIs parse.
 */
export type FaultName =
  | 'badRequest'
  | 'unauthorized'
  | 'forbidden'
  | 'itemNotFound'
  | 'notAcceptable'
  | 'conflictingRequest'
  | 'overLimit'
  | 'computeFault'
  | 'serviceUnavailable';

export class FerryError extends Error {
  readonly status: number;
  readonly fault: FaultName;
  readonly context: Record<string, unknown>;
  constructor(status: number, fault: FaultName, message: string, options?: { cause?: unknown; context?: Record<string, unknown> }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.status = status;
    this.fault = fault;
    this.context = options?.context ?? {};
  }
}

export class BadRequest extends FerryError {
  constructor(message: string, options?: { cause?: unknown; context?: Record<string, unknown> }) {
    super(400, 'badRequest', message, options);
  }
}

/** Cinder's InvalidVolume: a 400 whose message starts with "Invalid volume: ". */
export class InvalidVolume extends BadRequest {
  constructor(reason: string, context?: Record<string, unknown>) {
    super(`Invalid volume: ${reason}`, { context });
  }
}

export class Unauthorized extends FerryError {
  constructor(message = 'Authentication required') {
    super(401, 'unauthorized', message);
  }
}

export class Forbidden extends FerryError {
  constructor(message: string, context?: Record<string, unknown>) {
    super(403, 'forbidden', message, { context });
  }
}

export class NotFound extends FerryError {
  constructor(message = 'The resource could not be found.', context?: Record<string, unknown>) {
    super(404, 'itemNotFound', message, { context });
  }
}

export class NotAcceptable extends FerryError {
  constructor(message: string) {
    super(406, 'notAcceptable', message);
  }
}

export class Conflict extends FerryError {
  constructor(message: string, context?: Record<string, unknown>) {
    super(409, 'conflictingRequest', message, { context });
  }
}

/** Over quota or capacity: the scheduler found no pool. Upstream answers these with 413 or sets error. */
export class OverLimit extends FerryError {
  constructor(message: string) {
    super(413, 'overLimit', message);
  }
}

/**
 * A write lost a race: the conditional write found the item changed since it was read.
 * Callers retry by re-reading and re-applying the pure transition; never surfaced to a client
 * unless retries are exhausted (then 409).
 */
export class ConcurrentModification extends FerryError {
  constructor(what: string, cause?: unknown) {
    super(409, 'conflictingRequest', `${what} was changed by another request at the same time; try again.`, { cause });
  }
}

/** A backend (driver) call failed. Carries the driver's message for operators. */
export class DriverError extends FerryError {
  constructor(message: string, options?: { cause?: unknown; context?: Record<string, unknown> }) {
    super(500, 'computeFault', message, options);
  }
}

/**
 * A backend accepted the work but has not finished it (an EBS volume still `creating`, a detach
 * still `detaching`, a snapshot still `pending`): nothing failed. A state machine Task runs the
 * step again after a wait (its BackendNotReady retrier, infra/asl/policy.ts), so no function waits
 * on the backend; the driver call is idempotent, so the next run carries on from where it is.
 */
export class BackendNotReady extends FerryError {
  constructor(message: string, options?: { cause?: unknown; context?: Record<string, unknown> }) {
    super(503, 'computeFault', message, options);
  }
}

/**
 * Ferry's own configuration or wiring is wrong (an unknown driver kind, a function missing from the
 * wiring table, a malformed FERRY_* variable): an operator fixes it; no request of a client caused it.
 */
export class ConfigurationError extends FerryError {
  constructor(message: string, options?: { cause?: unknown; context?: Record<string, unknown> }) {
    super(500, 'computeFault', message, options);
  }
}

/**
 * Ferry's own state broke a rule it keeps (a step found a record its previous step should have
 * written, a transition table without a row): a bug or a hand-edited table, never a client's fault.
 */
export class InvariantViolation extends FerryError {
  constructor(message: string, options?: { cause?: unknown; context?: Record<string, unknown> }) {
    super(500, 'computeFault', message, options);
  }
}

/** A read of a dependency failed (throttled, unreachable): not "not found"; the caller retries or fails. */
export class DependencyError extends FerryError {
  constructor(message: string, options?: { cause?: unknown; context?: Record<string, unknown> }) {
    super(503, 'serviceUnavailable', message, options);
  }
}

export function isFerryError(e: unknown): e is FerryError {
  return e instanceof FerryError;
}

/** What a state machine's Catch puts in the state (`ResultPath: $.error`). */
export interface CaughtError {
  Error?: string;
  Cause?: string;
}

/** The readable message of a caught error: a Lambda error's Cause is JSON with `errorMessage`. */
export function reasonOf(error: CaughtError | undefined): string {
  if (!error) return 'unknown error';
  const cause = error.Cause ?? '';
  try {
    const parsed = JSON.parse(cause) as { errorMessage?: string };
    if (parsed && typeof parsed.errorMessage === 'string') return parsed.errorMessage;
  } catch {
    /* a plain message */
  }
  return cause || error.Error || 'unknown error';
}
