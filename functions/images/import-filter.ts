/**
 * Glance's web-download URI filter ([import_filtering_opts] of glance-api.conf, checked by
 * glance/common/utils.py validate_import_uri): the image API fetches a URI a tenant names, so
 * what it may reach is the operator's to say. As Glance: only http and https, and only ports 80
 * and 443 unless the operator lists others (FERRY_IMAGE_IMPORT_ALLOWED_PORTS, comma-separated, or
 * `any`). Beyond Glance: link-local hosts (169.254.0.0/16, fe80::/10, where cloud metadata
 * services answer) are always refused, and every redirect hop is checked again (Glance checks only
 * the first URI), since a redirect is the usual way around a filter.
 */
import { isIP } from 'node:net';

export const DEFAULT_ALLOWED_PORTS = [80, 443];

export type ImportFilterVerdict = { ok: true } | { ok: false; reason: string };

export function allowedPorts(env: NodeJS.ProcessEnv = process.env): number[] | 'any' {
  const given = env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS?.trim();
  if (!given) return DEFAULT_ALLOWED_PORTS;
  if (given === 'any') return 'any';
  return given
    .split(',')
    .map((p) => Number(p.trim()))
    .filter((p) => Number.isInteger(p) && p > 0 && p < 65536);
}

function linkLocal(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (isIP(host) === 4) return host.startsWith('169.254.');
  // IPv6 link-local, an IPv4-mapped 169.254.x.y (URL writes it ::ffff:a9fe:xxxx), EC2's IPv6 metadata address.
  if (isIP(host) === 6) return /^fe[89ab][0-9a-f]:/.test(host) || /^::ffff:(169\.254\.|a9fe:)/.test(host) || host === 'fd00:ec2::254';
  return false;
}

/** Whether the image API may fetch `url` (the first URI or a redirect's target). */
export function checkImportUri(url: URL, ports: number[] | 'any' = allowedPorts()): ImportFilterVerdict {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return { ok: false, reason: 'only http and https are allowed' };
  const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
  if (ports !== 'any' && !ports.includes(port)) return { ok: false, reason: `port ${port} is not allowed (allowed: ${ports.join(', ')})` };
  if (linkLocal(url.hostname)) return { ok: false, reason: `host ${url.hostname} is link-local` };
  return { ok: true };
}
