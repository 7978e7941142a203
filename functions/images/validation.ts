/**
 * Glance's checks of a create body and of a JSON patch (RFC 6902 as Glance takes it:
 * `add`, `replace`, `remove` on `/<attribute>`), pure: a refusal throws before anything is written.
 */
import { BadRequest, Forbidden, FerryError } from '../core/errors.js';
import type { NewImage } from '../servers/images.js';
import type { Image } from '../servers/model.js';
import { CONTAINER_FORMATS, CORE_ATTRIBUTES, DISK_FORMATS, READ_ONLY_ATTRIBUTES, VISIBILITIES } from './views.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const readOnly = (name: string) => new Forbidden(`Attribute '${name}' is read-only.`);

function nonNegativeInt(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 2 ** 31 - 1) throw new BadRequest(`Invalid value for ${name}: ${JSON.stringify(v)}`);
  return v;
}

function oneOf(name: string, v: unknown, allowedValues: string[]): string {
  if (typeof v !== 'string' || !allowedValues.includes(v)) throw new BadRequest(`Invalid value '${String(v)}' for ${name}: must be one of ${allowedValues.join(', ')}`);
  return v;
}

function tags(v: unknown): string[] {
  if (!Array.isArray(v) || v.some((t) => typeof t !== 'string' || t.length > 255)) throw new BadRequest('Invalid value for tags: a list of strings of at most 255 characters');
  return [...new Set(v as string[])];
}

function extraProperty(name: string, v: unknown): string {
  if (name.length > 255) throw new BadRequest(`Property name too long: ${name.slice(0, 32)}...`);
  if (typeof v !== 'string' || v.length > 65535) throw new BadRequest(`Invalid value for property ${name}: a string is expected`);
  return v;
}

/** The image a `POST /v2/images` body describes. @throws BadRequest, Forbidden (a read-only attribute) */
export function parseCreate(body: unknown): Omit<NewImage, 'ownerProjectId'> & { visibility: Image['visibility'] } {
  if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) throw new BadRequest('Body expected in request.');
  const b = body as Record<string, unknown>;
  const properties: Record<string, string> = {};
  for (const [k, v] of Object.entries(b)) {
    if (READ_ONLY_ATTRIBUTES.has(k) || k === 'locations') throw readOnly(k);
    if (!CORE_ATTRIBUTES.has(k)) properties[k] = extraProperty(k, v);
  }
  if (b.id !== undefined && (typeof b.id !== 'string' || !UUID.test(b.id))) throw new BadRequest(`Invalid value for id: ${JSON.stringify(b.id)} is not a UUID`);
  if (b.name !== undefined && b.name !== null && (typeof b.name !== 'string' || b.name.length > 255)) throw new BadRequest('Invalid value for name: a string of at most 255 characters');
  if (b.protected !== undefined && typeof b.protected !== 'boolean') throw new BadRequest('Invalid value for protected: a boolean is expected');
  if (b.os_hidden !== undefined && typeof b.os_hidden !== 'boolean') throw new BadRequest('Invalid value for os_hidden: a boolean is expected');
  return {
    ...(b.id ? { id: (b.id as string).toLowerCase() } : {}),
    name: (b.name as string | null | undefined) ?? '',
    // Glance's default since Ocata.
    visibility: b.visibility === undefined ? 'shared' : (oneOf('visibility', b.visibility, VISIBILITIES) as Image['visibility']),
    ...(b.disk_format !== undefined && b.disk_format !== null ? { diskFormat: oneOf('disk_format', b.disk_format, DISK_FORMATS) } : {}),
    ...(b.container_format !== undefined && b.container_format !== null ? { containerFormat: oneOf('container_format', b.container_format, CONTAINER_FORMATS) } : {}),
    ...(b.min_disk !== undefined ? { minDisk: nonNegativeInt('min_disk', b.min_disk) } : {}),
    ...(b.min_ram !== undefined ? { minRam: nonNegativeInt('min_ram', b.min_ram) } : {}),
    ...(b.tags !== undefined ? { tags: tags(b.tags) } : {}),
    ...(b.protected === true ? { protected: true } : {}),
    properties,
  };
}

/** `image` with the JSON patch applied. @throws BadRequest (malformed, bad value), Forbidden (read-only), Conflict (format of an image with data) */
export function applyPatch(image: Image, ops: unknown): Image {
  if (!Array.isArray(ops)) throw new BadRequest('Request body must be a JSON array of operation objects.');
  let next: Image = { ...image, properties: { ...image.properties }, tags: [...(image.tags ?? [])] };
  for (const raw of ops) {
    if (!raw || typeof raw !== 'object') throw new BadRequest('Operations must be JSON objects.');
    const op = raw as { op?: unknown; path?: unknown; value?: unknown };
    if (op.op !== 'add' && op.op !== 'replace' && op.op !== 'remove') throw new BadRequest(`Operation objects must contain exactly one of "add", "remove", "replace"; got ${JSON.stringify(op.op)}.`);
    if (typeof op.path !== 'string' || !/^\/[^/]+$/.test(op.path)) throw new BadRequest(`Unable to find '${String(op.path)}' in JSON Schema change`);
    const name = op.path.slice(1).replace(/~1/g, '/').replace(/~0/g, '~');
    if (op.op !== 'remove' && !('value' in op)) throw new BadRequest(`Operation "${op.op}" requires a member named "value".`);
    next = applyOne(next, op.op, name, op.value);
  }
  return next;
}

function applyOne(image: Image, op: 'add' | 'replace' | 'remove', name: string, value: unknown): Image {
  if (READ_ONLY_ATTRIBUTES.has(name) || name === 'id' || name === 'locations') throw readOnly(name);
  if (!CORE_ATTRIBUTES.has(name)) {
    const properties = { ...image.properties };
    if (op === 'remove') {
      if (!(name in properties)) throw new FerryError(409, 'conflictingRequest', `Property ${name} does not exist.`);
      delete properties[name];
    } else {
      if (op === 'replace' && !(name in properties)) throw new FerryError(409, 'conflictingRequest', `Property ${name} does not exist.`);
      properties[name] = extraProperty(name, value);
    }
    return { ...image, properties };
  }
  if (op === 'remove') throw new Forbidden(`Attribute '${name}' cannot be removed.`);
  const withData = image.status !== 'queued';
  switch (name) {
    case 'name':
      if (value !== null && (typeof value !== 'string' || value.length > 255)) throw new BadRequest('Invalid value for name: a string of at most 255 characters');
      return { ...image, name: (value as string | null) ?? '' };
    case 'visibility':
      return { ...image, visibility: oneOf('visibility', value, VISIBILITIES) as Image['visibility'] };
    case 'protected':
      if (typeof value !== 'boolean') throw new BadRequest('Invalid value for protected: a boolean is expected');
      return { ...image, protected: value };
    case 'min_disk':
      return { ...image, minDisk: nonNegativeInt('min_disk', value) };
    case 'min_ram':
      return { ...image, minRam: nonNegativeInt('min_ram', value) };
    case 'tags':
      return { ...image, tags: tags(value) };
    case 'disk_format':
    case 'container_format': {
      // Glance: the formats describe the data, so they are fixed once there is data.
      if (withData) throw new Forbidden(`Attribute ${name} can be only replaced for a queued image.`);
      const v = oneOf(name, value, name === 'disk_format' ? DISK_FORMATS : CONTAINER_FORMATS);
      return name === 'disk_format' ? { ...image, diskFormat: v } : { ...image, containerFormat: v };
    }
    default:
      throw new Forbidden(`Attribute '${name}' is read-only.`);
  }
}
