/**
 * Body checks for the Manila API, with upstream's messages (M/api/v2/shares.py,
 * M/api/common.py, M/share/access.py). Where upstream answers a client mistake with 500 (a body
 * that is not an object, a non-numeric size), Ferry answers 400 (docs/compatibility.md).
 */
import { BadRequest } from '../core/errors.js';
import { isObject } from '../volumes/validation.js';
import type { AccessLevel, AccessType } from './model.js';
import { boolFromString } from '../core/strutils.js';

export { isObject };

/** The body must be `{<key>: {...}}`; returns the inner object. */
export function body(b: unknown, key: string): Record<string, unknown> {
  if (!isObject(b) || !isObject(b[key])) throw new BadRequest(`Malformed request body: '${key}' is missing or not an object.`);
  return b[key] as Record<string, unknown>;
}

export function optionalText(o: Record<string, unknown>, field: string, max = 255): string | null | undefined {
  const v = o[field];
  if (v === undefined) return undefined;
  if (v === null) return null;
  if (typeof v !== 'string') throw new BadRequest(`${field} must be a string.`);
  if (v.length > max) throw new BadRequest(`${field} has more than ${max} characters.`);
  return v;
}

export function sizeOf(v: unknown): number {
  const n = typeof v === 'string' && /^\s*-?\d+\s*$/.test(v) ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n)) throw new BadRequest(`Share size '${String(v)}' must be an integer.`);
  if (n <= 0) throw new BadRequest(`Share size must be greater than 0. Requested size: ${n}`);
  if (n > 100_000) throw new BadRequest(`Share size ${n} exceeds the maximum of 100000 GiB.`);
  return n;
}

export const SHARE_PROTOCOLS = ['NFS', 'CIFS'] as const;

export function protoOf(v: unknown): 'NFS' | 'CIFS' {
  if (typeof v !== 'string' || !v) throw new BadRequest("Invalid share: share_proto must be specified.");
  const p = v.toUpperCase();
  if (!(SHARE_PROTOCOLS as readonly string[]).includes(p)) throw new BadRequest(`Invalid share protocol provided: ${v}. It is either disabled or unsupported. Available protocols: NFS, CIFS.`);
  return p as 'NFS' | 'CIFS';
}

export function metadataOf(v: unknown): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (!isObject(v)) throw new BadRequest('Invalid metadata: metadata must be a dict.');
  const out: Record<string, string> = {};
  for (const [k, x] of Object.entries(v)) {
    if (!k || k.length > 255) throw new BadRequest('Invalid metadata key: keys must be 1 to 255 characters.');
    if (typeof x !== 'string' || x.length > 1023) throw new BadRequest(`Invalid metadata value for ${k}: values must be strings of at most 1023 characters.`);
    out[k] = x;
  }
  return out;
}

/** strutils.bool_from_string(strict=True) */
export function strictBool(field: string, v: unknown): boolean {
  const b = boolFromString(v);
  if (b === undefined) throw new BadRequest(`Invalid boolean value for ${field}: ${JSON.stringify(v)}.`);
  return b;
}

const IPV4_CIDR = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:\/(\d{1,2}))?$/;

function validIpv4(s: string): boolean {
  const m = IPV4_CIDR.exec(s);
  if (!m) return false;
  if (m.slice(1, 5).some((o) => Number(o) > 255)) return false;
  return m[5] === undefined || Number(m[5]) <= 32;
}

function validIpv6(s: string): boolean {
  const [addr, prefix, ...rest] = s.split('/');
  if (rest.length || !addr || !addr.includes(':')) return false;
  if (prefix !== undefined && (!/^\d{1,3}$/.test(prefix) || Number(prefix) > 128)) return false;
  if (!/^[0-9a-fA-F:.]+$/.test(addr) || (addr.match(/::/g) ?? []).length > 1) return false;
  const groups = addr.split(':');
  return groups.length <= 8 && groups.every((g) => g.length <= 4 || g.includes('.'));
}

/** M/api/common.py validate_ip / validate_username (share access). */
export function accessRuleOf(o: Record<string, unknown>, version: { atLeast(v: string): boolean }): { accessType: AccessType; accessTo: string; accessLevel: AccessLevel } {
  const accessType = o.access_type;
  const accessTo = o.access_to;
  const level = o.access_level ?? 'rw';
  if (typeof accessType !== 'string' || typeof accessTo !== 'string') throw new BadRequest('Invalid share access rule: access_type and access_to are required strings.');
  if (level !== 'rw' && level !== 'ro') throw new BadRequest(`Invalid or unsupported share access level: ${String(level)}.`);
  if (accessType === 'ip') {
    const ok = validIpv4(accessTo) || (version.atLeast('2.38') && validIpv6(accessTo));
    if (!ok) throw new BadRequest(`Invalid IP address: ${accessTo}. Provide a valid IPv4${version.atLeast('2.38') ? ' or IPv6' : ''} address or CIDR.`);
  } else if (accessType === 'user') {
    if (!/^[\w.\-`;'{}[\]\\$]{4,255}$/.test(accessTo)) throw new BadRequest(`Invalid user or group name: ${accessTo}. The name must be 4 to 255 characters of letters, digits and .-_\`;'{}[]\\$.`);
  } else if (accessType === 'cert' || accessType === 'cephx') {
    throw new BadRequest(`Invalid share access rule: access type ${accessType} is not supported by Ferry's backends.`);
  } else {
    throw new BadRequest("Only 'ip', 'user', 'cert' or 'cephx' access types are supported.");
  }
  return { accessType, accessTo, accessLevel: level };
}
