/**
 * Nova's request-validation wording (jsonschema through nova/api/validation), shared by the
 * compute foundation routes and the server routes and actions.
 */
import { BadRequest } from '../core/errors.js';

export type Json = Record<string, unknown>;

export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** `Invalid input for field/attribute <field>. Value: <value>. <reason>` (400). */
export function invalid(field: string, value: unknown, reason: string): BadRequest {
  return new BadRequest(`Invalid input for field/attribute ${field}. Value: ${JSON.stringify(value ?? null)}. ${reason}`);
}
