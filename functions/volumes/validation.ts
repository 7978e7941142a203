/**
 * Body checks that answer with the messages upstream's JSON-schema validator gives
 * (C/api/validation/validators.py: "Invalid input for field/attribute <f>. Value: <v>. <why>"),
 * so a client sees the same 400 text from Ferry as from Cinder.
 */
import { BadRequest } from '../core/errors.js';
import { boolFromString } from '../core/strutils.js';

/** Python's str() of a JSON value, as the upstream message shows `Value: ...`. */
export function pyStr(v: unknown): string {
  if (typeof v === 'string') return v;
  return pyRepr(v);
}

/** Python's repr() of a JSON value, as jsonschema quotes instances in its messages. */
export function pyRepr(v: unknown): string {
  if (v === null || v === undefined) return 'None';
  if (v === true) return 'True';
  if (v === false) return 'False';
  if (typeof v === 'string') return `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  if (typeof v === 'number') return String(v);
  if (Array.isArray(v)) return `[${v.map(pyRepr).join(', ')}]`;
  return `{${Object.entries(v as Record<string, unknown>).map(([k, x]) => `${pyRepr(k)}: ${pyRepr(x)}`).join(', ')}}`;
}

export function invalidField(field: string, value: unknown, why: string): BadRequest {
  return new BadRequest(`Invalid input for field/attribute ${field}. Value: ${pyStr(value)}. ${why}`);
}

export function requiredProperty(name: string): BadRequest {
  return new BadRequest(`'${name}' is a required property`);
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The request body must be an object holding `key` as an object; returns that inner object. */
export function wrapped(body: unknown, key: string): Record<string, unknown> {
  if (!isObject(body)) throw new BadRequest(body === undefined ? `'${key}' is a required property` : `${pyRepr(body)} is not of type 'object'`);
  if (!(key in body)) throw requiredProperty(key);
  const inner = body[key];
  if (!isObject(inner)) throw invalidField(key, inner, `${pyRepr(inner)} is not of type 'object'`);
  return inner;
}

/** A string (or null when allowed) of at most `max` characters. */
export function optionalString(obj: Record<string, unknown>, field: string, opts: { max?: number; nullable?: boolean; min?: number } = {}): string | null | undefined {
  if (!(field in obj)) return undefined;
  const v = obj[field];
  if (v === null && opts.nullable !== false) return null;
  if (typeof v !== 'string') throw invalidField(field, v, `${pyRepr(v)} is not of type 'string'${opts.nullable !== false ? ", 'null'" : ''}`);
  const max = opts.max ?? 255;
  if (v.length > max) throw invalidField(field, v, `${pyRepr(v)} is too long`);
  if (opts.min !== undefined && v.length < opts.min) throw invalidField(field, v, `${pyRepr(v)} is too short`);
  return v;
}

/**
 * Items a volume's metadata, or a type's extra specs, may hold. Upstream has no limit short of its
 * database; here they live in one DynamoDB item (400 KB), so an unbounded map would end in a 500.
 * 128 entries of 255-character keys and values stay far below it.
 */
export const MAX_MAP_ITEMS = 128;

/** parameter_types.metadata: keys 1-255 characters, values strings of at most 255. */
export function metadataField(obj: Record<string, unknown>, field = 'metadata', opts: { nullable?: boolean } = {}): Record<string, string> | undefined {
  if (!(field in obj)) return undefined;
  const v = obj[field];
  if (v === null && opts.nullable) return {};
  if (!isObject(v)) throw invalidField(field, v, `${pyRepr(v)} is not of type 'object'`);
  if (Object.keys(v).length > MAX_MAP_ITEMS) throw new BadRequest(`Invalid input received: Maximum number of metadata items exceeds ${MAX_MAP_ITEMS}.`);
  for (const [k, x] of Object.entries(v)) {
    if (k.length < 1 || k.length > 255) throw invalidField(field, v, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
    if (typeof x !== 'string') throw invalidField(k, x, `${pyRepr(x)} is not of type 'string'`);
    if (x.length > 255) throw invalidField(k, x, `${pyRepr(x)} is too long`);
  }
  return v as Record<string, string>;
}

export const tooManyExtraSpecs = () => new BadRequest(`Invalid input received: A volume type can have at most ${MAX_MAP_ITEMS} extra specs.`);

const EXTRA_SPEC_KEY = /^[a-zA-Z0-9-_:. /]{1,255}$/;

/** parameter_types.extra_specs_with_no_spaces_key as upstream's types_extra_specs use it. */
export function extraSpecsField(v: unknown, field = 'extra_specs'): Record<string, string> {
  if (!isObject(v)) throw invalidField(field, v, `${pyRepr(v)} is not of type 'object'`);
  if (Object.keys(v).length > MAX_MAP_ITEMS) throw tooManyExtraSpecs();
  for (const [k, x] of Object.entries(v)) {
    if (!EXTRA_SPEC_KEY.test(k)) throw invalidField(field, v, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
    if (typeof x !== 'string') throw invalidField(k, x, `${pyRepr(x)} is not of type 'string'`);
    if (x.length > 255) throw invalidField(k, x, `${pyRepr(x)} is too long`);
  }
  return v as Record<string, string>;
}

/** oslo strutils.bool_from_string(strict=True) as upstream applies it to boolean parameters. */
export function boolParam(field: string, v: unknown): boolean {
  const b = boolFromString(v);
  if (b !== undefined) return b;
  throw invalidField(field, v, `${pyRepr(v)} is not one of ['True', 'true', 'False', 'false', True, False, 'On', 'on', 'Off', 'off', 'Yes', 'yes', 'No', 'no', 'y', 'n', '1', '0', 't', 'f']`);
}

const UUID_RE = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;

/** oslo uuidutils.is_uuid_like. */
export function isUuidLike(v: unknown): v is string {
  return typeof v === 'string' && UUID_RE.test(v);
}

/**
 * parameter_types.volume_size: an integer or a string of digits, at least 1 (upstream accepts
 * "10" as well as 10). Returns the integer.
 */
export function sizeField(field: string, v: unknown): number {
  if (typeof v === 'string') {
    if (!/^[0-9]+$/.test(v)) throw invalidField(field, v, `${pyRepr(v)} does not match '^[0-9]+$'`);
    v = Number(v);
  }
  if (typeof v !== 'number' || !Number.isInteger(v)) throw invalidField(field, v, `${pyRepr(v)} is not of type 'integer', 'string'`);
  if (v < 1) throw invalidField(field, v, `${v} is less than the minimum of 1`);
  if (v > 2147483647) throw invalidField(field, v, `${v} is greater than the maximum of 2147483647`);
  return v;
}
