/**
 * Client JSON that Ferry stores as it is (a connector, say) must be something DynamoDB can hold,
 * or the write fails with a 500 after the request has already done work. Checked up front, so a
 * client mistake is a 400 that changes nothing.
 *
 * DynamoDB refuses: empty map keys, numbers outside 1e-130..9.99e125 in magnitude, nesting deeper
 * than 32 levels; and the SDK refuses integers beyond 2^53, which it cannot convert exactly.
 */
import { BadRequest } from './errors.js';

const MAX_DEPTH = 32;
const MIN_MAGNITUDE = 1e-130;
const MAX_MAGNITUDE = 9.99e125;

/** The first reason `value` cannot be stored, with its path, or undefined when it can. */
export function unstorableReason(value: unknown, path = '', depth = 0): string | undefined {
  if (depth > MAX_DEPTH) return `${path || 'value'} is nested more than ${MAX_DEPTH} levels deep`;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) return `${path} is not a finite number`;
    const m = Math.abs(value);
    if (m !== 0 && (m < MIN_MAGNITUDE || m > MAX_MAGNITUDE)) return `${path} is a number outside the storable range`;
    if (Number.isInteger(value) && !Number.isSafeInteger(value)) return `${path} is an integer too large to keep exactly`;
    return undefined;
  }
  if (Array.isArray(value)) {
    for (const [i, x] of value.entries()) {
      const r = unstorableReason(x, `${path}[${i}]`, depth + 1);
      if (r) return r;
    }
    return undefined;
  }
  if (value !== null && typeof value === 'object') {
    for (const [k, x] of Object.entries(value)) {
      if (k === '') return `${path || 'value'} has an empty property name`;
      const r = unstorableReason(x, path ? `${path}.${k}` : k, depth + 1);
      if (r) return r;
    }
  }
  return undefined;
}

/** @throws BadRequest naming the field when `value` cannot be stored. */
export function assertStorable(field: string, value: unknown): void {
  const reason = unstorableReason(value, field);
  if (reason) throw new BadRequest(`Invalid input received: ${reason}.`);
}
