/**
 * The checks of `POST /servers` that Nova's JSON schema makes before the controller runs
 * (nova/api/openstack/compute/schemas/servers.py `create` and its microversion copies): no
 * property outside the microversion's list (additionalProperties false, at the top and in
 * `server`), the name's format (parameter_types.name: printable, no leading or trailing
 * whitespace), and min_count / max_count / return_reservation_id. What the controller checks
 * after (flavor, image, volumes, networks) stays in api.ts.
 */
import type { ApiVersion } from '../../../core/microversion.js';
import { BadRequest, Forbidden } from '../../../core/errors.js';
import { invalid, isObject, noAdditional, type Json } from '../../../compute/validation.js';

/** The properties of `server` at 2.1 (schema `create`). */
const BASE_PROPERTIES = [
  'name',
  'imageRef',
  'flavorRef',
  'adminPass',
  'metadata',
  'networks',
  'OS-DCF:diskConfig',
  'accessIPv4',
  'accessIPv6',
  'personality',
  'availability_zone',
  'block_device_mapping',
  'block_device_mapping_v2',
  'config_drive',
  'key_name',
  'min_count',
  'max_count',
  'return_reservation_id',
  'security_groups',
  'user_data',
];

/** The properties of `server` the request's microversion allows (create_v219 ... create_v290). */
export function serverProperties(version: Pick<ApiVersion, 'atLeast'>): string[] {
  const props = [...BASE_PROPERTIES];
  if (version.atLeast('2.19')) props.push('description');
  if (version.atLeast('2.52')) props.push('tags');
  if (version.atLeast('2.57')) props.splice(props.indexOf('personality'), 1);
  if (version.atLeast('2.63')) props.push('trusted_image_certificates');
  if (version.atLeast('2.74')) props.push('host', 'hypervisor_hostname');
  if (version.atLeast('2.90')) props.push('hostname');
  return props;
}

const TOP_PROPERTIES = ['server', 'os:scheduler_hints', 'OS-SCH-HNT:scheduler_hints'];

/**
 * parameter_types.valid_name_regex: every character printable (Unicode categories other than C*,
 * Zl and Zp), the first and the last not whitespace (nor Zs); Nova builds its classes from the
 * Basic Multilingual Plane only, so a character past U+FFFF is not printable to it either.
 */
const NAME_RE = /^(?![\p{C}\p{Z}])[^\p{C}\p{Zl}\p{Zp}]*(?<![\p{C}\p{Z}])$/u;

/** Nova's InvalidName message, which its validator returns as is (not the field/attribute form). */
export const INVALID_NAME = "An invalid 'name' value was provided. The name must be: printable characters. Can not start or end with whitespace.";

export function checkServerName(name: unknown): string {
  if (typeof name !== 'string') throw invalid('name', name, `${JSON.stringify(name)} is not of type 'string'`);
  if (name.length < 1) throw invalid('name', name, "'' is too short");
  if (name.length > 255) throw invalid('name', name, `'${name}' is too long`);
  if (!NAME_RE.test(name) || [...name].some((c) => c.codePointAt(0)! > 0xffff)) throw new BadRequest(INVALID_NAME);
  return name;
}

/**
 * How many servers one request may create. Ferry keeps no instance quota; Nova's default
 * (quota instances 10) bounds a multi-create the same way: a min_count above it is 403, a
 * max_count above it creates as many as it allows (docs/compatibility.md).
 */
export const MAX_SERVERS_PER_REQUEST = 10;

/** parameter_types.positive_integer: an integer, or a string of digits, at least 1. */
function positiveInteger(field: string, raw: unknown): number | undefined {
  if (raw === undefined) return undefined;
  let n: number;
  if (typeof raw === 'number' && Number.isInteger(raw)) n = raw;
  else if (typeof raw === 'string') {
    if (raw.length < 1) throw invalid(field, raw, "'' is too short");
    if (!/^[0-9]*$/.test(raw)) throw invalid(field, raw, `'${raw}' does not match '^[0-9]*$'`);
    n = Number(raw);
  } else throw invalid(field, raw, `${JSON.stringify(raw)} is not of type 'integer', 'string'`);
  if (n < 1) throw invalid(field, raw, `${String(raw)} is less than the minimum of 1`);
  // JSON numbers past 2^53 lose their value in JavaScript (9223372036854775808 reads as ...6000):
  // refused, where Nova would go on to its quota check (docs/compatibility.md).
  if (!Number.isSafeInteger(n)) throw invalid(field, raw, `${String(raw)} is greater than the maximum of ${Number.MAX_SAFE_INTEGER}`);
  return n;
}

/** parameter_types.boolean: exactly these spellings (its enum). */
const TRUE_SPELLINGS = ['True', 'TRUE', 'true', '1', 'ON', 'On', 'on', 'YES', 'Yes', 'yes'];
const FALSE_SPELLINGS = ['False', 'FALSE', 'false', '0', 'OFF', 'Off', 'off', 'NO', 'No', 'no'];

function booleanLike(field: string, raw: unknown): boolean {
  if (raw === undefined) return false;
  if (typeof raw === 'boolean') return raw;
  if (typeof raw === 'string' && TRUE_SPELLINGS.includes(raw)) return true;
  if (typeof raw === 'string' && FALSE_SPELLINGS.includes(raw)) return false;
  const spellings = [...TRUE_SPELLINGS, ...FALSE_SPELLINGS].map((x) => `'${x}'`).join(', ');
  throw invalid(field, raw, `${JSON.stringify(raw)} is not one of [True, False, ${spellings}]`);
}

export interface CreateCounts {
  /** How many servers this request creates. */
  count: number;
  returnReservationId: boolean;
}

/** The schema's checks on the body, then the controller's min_count <= max_count; the `server` object. */
export function checkCreateBody(body: unknown, version: Pick<ApiVersion, 'atLeast'>): { server: Json; counts: CreateCounts } {
  // jsonschema reports the first error in the schema's keyword order: each property's own
  // schema, then `required`, then `additionalProperties`; a path-less error has no field prefix.
  if (!isObject(body)) throw new BadRequest(`${JSON.stringify(body ?? null)} is not of type 'object'`);
  if (body.server !== undefined && !isObject(body.server)) throw invalid('server', body.server, `${JSON.stringify(body.server)} is not of type 'object'`);
  if (isObject(body.server)) {
    const s = body.server;
    if (s.name !== undefined) checkServerName(s.name);
    positiveInteger('min_count', s.min_count);
    positiveInteger('max_count', s.max_count);
    booleanLike('return_reservation_id', s.return_reservation_id);
    for (const key of ['name', 'flavorRef']) if (s[key] === undefined) throw invalid('server', s, `'${key}' is a required property`);
    noAdditional('server', s, serverProperties(version));
  }
  if (body.server === undefined) throw new BadRequest("'server' is a required property");
  const extra = Object.keys(body).filter((k) => !TOP_PROPERTIES.includes(k));
  if (extra.length) throw new BadRequest(`Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length === 1 ? 'was' : 'were'} unexpected)`);
  const s = body.server as Json;
  const min = positiveInteger('min_count', s.min_count) ?? 1;
  const max = positiveInteger('max_count', s.max_count) ?? min;
  const returnReservationId = booleanLike('return_reservation_id', s.return_reservation_id);
  if (min > max) throw new BadRequest('min_count must be <= max_count');
  if (min > MAX_SERVERS_PER_REQUEST) throw new Forbidden(`Quota exceeded for instances: Requested ${min}, but Ferry creates at most ${MAX_SERVERS_PER_REQUEST} instances per request`);
  return { server: s, counts: { count: Math.min(max, MAX_SERVERS_PER_REQUEST), returnReservationId } };
}

/** Nova's display name for the index-th (0-based) of `count` servers of one request. */
export function nameOf(name: string, index: number, count: number): string {
  return count > 1 ? `${name}-${index + 1}` : name;
}
