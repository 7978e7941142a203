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

export function requireBodyObject(body: unknown): Json {
  if (!isObject(body)) throw new BadRequest('The request body is invalid: it must be a JSON object.');
  return body;
}

export function noAdditional(field: string, obj: Json, allowedKeys: readonly string[]): void {
  const extra = Object.keys(obj).filter((k) => !allowedKeys.includes(k));
  if (extra.length) throw invalid(field, obj, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length === 1 ? 'was' : 'were'} unexpected)`);
}

export function requireString(field: string, obj: Json, key: string, max = 255): string {
  const v = obj[key];
  if (v === undefined) throw invalid(field, obj, `'${key}' is a required property`);
  if (typeof v !== 'string') throw invalid(key, v, `${JSON.stringify(v)} is not of type 'string'`);
  if (v.length > max) throw invalid(key, v, `'${v}' is too long`);
  return v;
}

export function positiveInt(name: string, raw: string | null): number | undefined {
  if (raw === null) return undefined;
  if (!/^\d+$/.test(raw)) throw new BadRequest(`${name} param must be an integer`);
  return Number(raw);
}
