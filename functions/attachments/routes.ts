/**
 * Cinder v3 attachments API routes (reference §3.1, §3.2): request validation in upstream's
 * order and wording (C/api/schemas/attachments.py), then the operations of service.ts.
 */
import { assertStorable } from '../core/storable.js';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest } from '../core/errors.js';
import type { Connector } from '../drivers/volume/driver.js';
import {
  ATTACHMENT_POLICIES,
  assertConnectorHost,
  completeAttachment,
  createAttachment,
  deleteAttachment,
  getAttachment,
  updateAttachment,
} from './service.js';
import { listAttachments, MAX_LIMIT, type SortDir } from './queries.js';
import { detailView, summaryView, summaryViewFromVolume } from './views.js';

export const ATTACHMENTS_MIN_VERSION = '3.27';
export const ATTACHMENT_COMPLETE_MIN_VERSION = '3.44';
export const ATTACHMENT_CREATE_MODE_VERSION = '3.54';

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** jsonschema's wording, as upstream's validation errors show it. */
function invalid(field: string, value: unknown, reason: string): BadRequest {
  return new BadRequest(`Invalid input for field/attribute ${field}. Value: ${JSON.stringify(value)}. ${reason}`);
}

function requireObject(field: string, value: unknown): Json {
  if (!isObject(value)) throw invalid(field, value, `${JSON.stringify(value ?? null)} is not of type 'object'`);
  return value;
}

function onlyProperties(field: string, value: Json, allowed: readonly string[], required: readonly string[]): void {
  for (const r of required) {
    if (!(r in value)) throw invalid(field, value, `'${r}' is a required property`);
  }
  const extra = Object.keys(value).filter((k) => !allowed.includes(k));
  if (extra.length) throw invalid(field, value, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length > 1 ? 'were' : 'was'} unexpected)`);
}

/** oslo uuidutils.is_uuid_like: hex with or without dashes, braces or a urn:uuid: prefix. */
const UUID_LIKE = /^(urn:uuid:)?\{?[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\}?$/i;

function uuidProperty(field: string, value: unknown): string {
  if (typeof value !== 'string') throw invalid(field, value, `${JSON.stringify(value)} is not of type 'string'`);
  if (!UUID_LIKE.test(value)) throw invalid(field, value, `'${value}' is not a 'uuid'`);
  return value;
}

/** `{}` and null both mean "no connector" (cinderclient sends `{}`, Nova's library null). */
function connectorProperty(value: unknown): Connector | null {
  if (value === undefined || value === null) return null;
  const connector = requireObject('connector', value);
  if (Object.keys(connector).length === 0) return null;
  assertConnectorHost(connector as Connector);
  assertStorable('connector', connector);
  return connector as Connector;
}

export function parseCreateBody(body: unknown, modeAllowed: boolean): { volumeId: string; instanceUuid: string | null; connector: Connector | null; mode?: 'rw' | 'ro' } {
  const top = requireObject('body', body);
  onlyProperties('body', top, ['attachment'], ['attachment']);
  const att = requireObject('attachment', top.attachment);
  onlyProperties('attachment', att, ['volume_uuid', 'instance_uuid', 'connector', ...(modeAllowed ? ['mode'] : [])], ['volume_uuid']);
  const volumeId = uuidProperty('volume_uuid', att.volume_uuid);
  const instanceUuid = 'instance_uuid' in att ? uuidProperty('instance_uuid', att.instance_uuid) : null;
  if ('connector' in att && att.connector !== null && !isObject(att.connector)) {
    throw invalid('connector', att.connector, `${JSON.stringify(att.connector)} is not of type 'object', 'null'`);
  }
  let mode: 'rw' | 'ro' | undefined;
  if ('mode' in att) {
    if (att.mode !== 'rw' && att.mode !== 'ro') throw invalid('mode', att.mode, `${JSON.stringify(att.mode)} is not one of ['rw', 'ro']`);
    mode = att.mode;
  }
  return { volumeId, instanceUuid, connector: connectorProperty(att.connector), mode };
}

export function parseUpdateBody(body: unknown): Connector {
  const top = requireObject('body', body);
  onlyProperties('body', top, ['attachment'], ['attachment']);
  const att = requireObject('attachment', top.attachment);
  onlyProperties('attachment', att, ['connector'], ['connector']);
  const connector = requireObject('connector', att.connector);
  if (Object.keys(connector).length < 1) throw invalid('connector', connector, '{} does not have enough properties');
  assertConnectorHost(connector as Connector);
  assertStorable('connector', connector);
  return connector as Connector;
}

function parseActionBody(body: unknown): void {
  const top = requireObject('body', body);
  const action = Object.keys(top)[0];
  if (action !== 'os-complete') throw new BadRequest(`There is no such action: ${action ?? 'None'}`);
  onlyProperties('body', top, ['os-complete'], ['os-complete']);
}

function nonNegativeInt(name: string, raw: string | null): number | undefined {
  if (raw === null) return undefined;
  if (!/^-?\d+$/.test(raw.trim())) throw new BadRequest(`${name} param must be an integer`);
  const n = Number(raw);
  if (n < 0) throw new BadRequest(`${name} param must be positive`);
  return n;
}

const TRUE_STRINGS = ['1', 't', 'true', 'on', 'y', 'yes'];
/** Pagination, sorting and flags; every other parameter is a column filter. */
const RESERVED_PARAMS = ['marker', 'limit', 'offset', 'sort', 'sort_key', 'sort_dir', 'all_tenants'];

function parseSort(query: URLSearchParams): { key: string; dir: SortDir }[] | undefined {
  const direction = (d: string | undefined): SortDir => {
    const dir = (d ?? 'desc').trim().toLowerCase();
    if (dir !== 'asc' && dir !== 'desc') throw new BadRequest(`Invalid input received: Unknown sort direction, must be 'desc' or 'asc'`);
    return dir;
  };
  const sort = query.get('sort');
  if (sort !== null) {
    if (query.get('sort_key') !== null || query.get('sort_dir') !== null) {
      throw new BadRequest("Invalid input received: The 'sort_key' and 'sort_dir' parameters are deprecated and cannot be used with the 'sort' parameter.");
    }
    return sort.split(',').filter(Boolean).map((part) => {
      const [key, dir] = part.split(':');
      return { key: key!.trim(), dir: direction(dir) };
    });
  }
  const key = query.get('sort_key');
  return key === null ? undefined : [{ key, dir: direction(query.get('sort_dir') ?? undefined) }];
}

async function list(req: ApiRequest, detail: boolean) {
  const q = req.query;
  const filters: Record<string, string> = {};
  for (const [k, v] of q) {
    if (RESERVED_PARAMS.includes(k)) continue;
    filters[k === 'instance_id' ? 'instance_uuid' : k] = v;
  }
  const limit = nonNegativeInt('limit', q.get('limit'));
  const { attachments, more } = await listAttachments({
    auth: req.auth,
    allTenants: TRUE_STRINGS.includes((q.get('all_tenants') ?? '').toLowerCase()),
    filters,
    sort: parseSort(q),
    marker: q.get('marker') ?? undefined,
    limit,
    offset: nonNegativeInt('offset', q.get('offset')),
  });
  const body: Json = { attachments: attachments.map((a) => (detail ? detailView(a) : summaryView(a))) };
  const last = attachments[attachments.length - 1];
  if (more && last && (limit !== undefined || attachments.length >= MAX_LIMIT)) {
    const next = new URLSearchParams([...q].filter(([k]) => k !== 'marker'));
    next.set('marker', last.id);
    const project = req.urlProjectId ? `/${req.urlProjectId}` : '';
    body.attachments_links = [{ rel: 'next', href: `${req.baseUrl}${project}/attachments${detail ? '/detail' : ''}?${next.toString()}` }];
  }
  return json(200, body);
}

export const attachmentRoutes: RouteSpec[] = [
  {
    method: 'POST',
    path: '/attachments',
    action: ATTACHMENT_POLICIES.create,
    authorizeBy: 'resource',
    minVersion: ATTACHMENTS_MIN_VERSION,
    handler: async (req) => {
      const input = parseCreateBody(req.body, req.version.atLeast(ATTACHMENT_CREATE_MODE_VERSION));
      const attachment = await createAttachment({ auth: req.auth, ...input, callId: req.requestId });
      return json(200, { attachment: detailView(attachment) });
    },
  },
  {
    method: 'PUT',
    path: '/attachments/{id}',
    action: ATTACHMENT_POLICIES.update,
    authorizeBy: 'resource',
    minVersion: ATTACHMENTS_MIN_VERSION,
    handler: async (req) => {
      const connector = parseUpdateBody(req.body);
      const attachment = await updateAttachment({ auth: req.auth, attachmentId: req.params.id!, connector, callId: req.requestId });
      return json(200, { attachment: detailView(attachment) });
    },
  },
  {
    method: 'DELETE',
    path: '/attachments/{id}',
    action: ATTACHMENT_POLICIES.delete,
    authorizeBy: 'resource',
    minVersion: ATTACHMENTS_MIN_VERSION,
    handler: async (req) => {
      const remaining = await deleteAttachment({ auth: req.auth, attachmentId: req.params.id!, callId: req.requestId });
      return json(200, { attachments: remaining.map((r) => summaryViewFromVolume(r.volumeId, r.id, r.summary)) });
    },
  },
  {
    method: 'GET',
    path: '/attachments',
    action: ATTACHMENT_POLICIES.index,
    minVersion: ATTACHMENTS_MIN_VERSION,
    handler: (req) => list(req, false),
  },
  {
    method: 'GET',
    path: '/attachments/detail',
    action: ATTACHMENT_POLICIES.index,
    minVersion: ATTACHMENTS_MIN_VERSION,
    handler: (req) => list(req, true),
  },
  {
    method: 'GET',
    path: '/attachments/{id}',
    action: ATTACHMENT_POLICIES.show,
    authorizeBy: 'resource',
    minVersion: ATTACHMENTS_MIN_VERSION,
    handler: async (req) => {
      const attachment = await getAttachment({ auth: req.auth, attachmentId: req.params.id! });
      return json(200, { attachment: detailView(attachment) });
    },
  },
  {
    method: 'POST',
    path: '/attachments/{id}/action',
    action: ATTACHMENT_POLICIES.complete,
    authorizeBy: 'resource',
    minVersion: ATTACHMENT_COMPLETE_MIN_VERSION,
    handler: async (req) => {
      parseActionBody(req.body);
      await completeAttachment({ auth: req.auth, attachmentId: req.params.id! });
      return json(204);
    },
  },
];
