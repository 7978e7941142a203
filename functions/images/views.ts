/**
 * Glance v2's documents: an image as `GET /v2/images/{id}` shows it (extra properties flattened
 * beside the core attributes), the version list, and the image schema glanceclient builds its
 * models from (it validates every image it reads against it, so the schema admits what the view
 * shows).
 */
import type { Image } from '../servers/model.js';

/** Glance's versions, newest first; Ferry implements what 2.x clients use of them. */
const VERSIONS = ['2.16', '2.15', '2.9', '2.7', '2.6', '2.5', '2.4', '2.3', '2.2', '2.1', '2.0'];

export function versionsDocument(rootUrl: string): unknown {
  return {
    versions: VERSIONS.map((v, i) => ({ id: `v${v}`, status: i === 0 ? 'CURRENT' : 'SUPPORTED', links: [{ rel: 'self', href: `${rootUrl}/v2/` }] })),
  };
}

/** Glance's timestamps: seconds, `Z`. */
const at = (iso: string) => iso.replace(/\.\d+Z$/, 'Z');

/** The attributes an image document holds beside its extra properties; none of them can be an extra property. */
export const CORE_ATTRIBUTES = new Set([
  'id', 'name', 'status', 'visibility', 'protected', 'os_hidden', 'checksum', 'os_hash_algo', 'os_hash_value', 'owner', 'size', 'virtual_size',
  'min_ram', 'min_disk', 'disk_format', 'container_format', 'created_at', 'updated_at', 'tags', 'self', 'file', 'schema', 'direct_url', 'locations',
]);

/** Attributes Glance computes: a create or PATCH that names one is refused (403, "is read-only"). */
export const READ_ONLY_ATTRIBUTES = new Set(['status', 'checksum', 'os_hash_algo', 'os_hash_value', 'size', 'virtual_size', 'created_at', 'updated_at', 'self', 'file', 'schema', 'direct_url', 'owner']);

export const DISK_FORMATS = ['ami', 'ari', 'aki', 'vhd', 'vhdx', 'vmdk', 'raw', 'qcow2', 'vdi', 'iso', 'ploop'];
export const CONTAINER_FORMATS = ['ami', 'ari', 'aki', 'bare', 'ovf', 'ova', 'docker', 'compressed'];
export const VISIBILITIES = ['public', 'private', 'shared', 'community'];

/**
 * The properties Glance's import sets on an image (glance/async_/flows/api_image_import.py): its
 * lock `os_glance_import_task` while the task runs, and the store lists, which name no store on a
 * Glance with one store (no enabled_backends), as Ferry is: both empty strings from the first import on.
 */
function importProperties(image: Image): Record<string, string> {
  const task = image.importTask;
  if (!task) return {};
  return { os_glance_importing_to_stores: '', os_glance_failed_import: '', ...(task.status === 'processing' ? { os_glance_import_task: task.id } : {}) };
}

/** Glance's task timestamps (oslo's isoformat: microseconds, no zone). */
const taskAt = (iso: string) => iso.replace(/\.(\d+)Z$/, (_, ms: string) => `.${ms.padEnd(6, '0')}`);

/** `GET /v2/images/{id}/tasks` (Glance 2.12): the image's import task as Glance's task record shows it; where a failure's reason is. */
export function imageTasksView(image: Image): { tasks: Record<string, unknown>[] } {
  const task = image.importTask;
  if (!task) return { tasks: [] };
  return {
    tasks: [
      {
        id: task.id,
        type: 'api_image_import',
        status: task.status,
        owner: task.ownerProjectId,
        image_id: image.id,
        user_id: task.userId,
        request_id: null,
        input: { image_id: image.id, import_req: { method: { name: task.method, uri: task.uri } }, backend: [null] },
        result: task.status === 'success' ? { image_id: image.id } : null,
        message: task.message,
        expires_at: null,
        created_at: taskAt(task.createdAt),
        updated_at: taskAt(task.updatedAt),
        deleted_at: null,
        deleted: false,
      },
    ],
  };
}

export function imageView(image: Image): Record<string, unknown> {
  const hasData = image.status === 'active';
  return {
    ...image.properties,
    ...importProperties(image),
    id: image.id,
    name: image.name,
    status: image.status,
    visibility: image.visibility,
    protected: image.protected ?? false,
    os_hidden: false,
    checksum: hasData ? (image.md5 ?? null) : null,
    os_hash_algo: hasData && image.sha512 ? 'sha512' : null,
    os_hash_value: hasData ? (image.sha512 ?? null) : null,
    owner: image.ownerProjectId,
    size: hasData ? image.sizeBytes : null,
    virtual_size: null,
    min_ram: image.minRam,
    min_disk: image.minDisk,
    disk_format: image.diskFormat,
    container_format: image.containerFormat,
    created_at: at(image.createdAt),
    updated_at: at(image.updatedAt),
    tags: image.tags ?? [],
    self: `/v2/images/${image.id}`,
    file: `/v2/images/${image.id}/file`,
    schema: '/v2/schemas/image',
  };
}

const nullable = (type: string, extra: Record<string, unknown> = {}) => ({ type: [type, 'null'], ...extra });

/** `GET /v2/schemas/image`, as Glance describes the attributes above. */
export function imageSchema(): Record<string, unknown> {
  return {
    name: 'image',
    additionalProperties: { type: 'string' },
    links: [
      { rel: 'self', href: '{self}' },
      { rel: 'enclosure', href: '{file}' },
      { rel: 'describedby', href: '{schema}' },
    ],
    properties: {
      id: { type: 'string', pattern: '^([0-9a-fA-F]){8}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){12}$', description: 'An identifier for the image' },
      name: nullable('string', { maxLength: 255, description: 'Descriptive name for the image' }),
      status: { type: 'string', readOnly: true, enum: ['queued', 'saving', 'active', 'killed', 'deleted', 'uploading', 'importing', 'pending_delete', 'deactivated'] },
      visibility: { type: 'string', enum: VISIBILITIES },
      protected: { type: 'boolean' },
      os_hidden: { type: 'boolean' },
      checksum: nullable('string', { readOnly: true, maxLength: 32 }),
      os_hash_algo: nullable('string', { readOnly: true, maxLength: 64 }),
      os_hash_value: nullable('string', { readOnly: true, maxLength: 128 }),
      owner: nullable('string', { maxLength: 255 }),
      size: nullable('integer', { readOnly: true }),
      virtual_size: nullable('integer', { readOnly: true }),
      container_format: nullable('string', { enum: [null, ...CONTAINER_FORMATS] }),
      disk_format: nullable('string', { enum: [null, ...DISK_FORMATS] }),
      created_at: { type: 'string', readOnly: true },
      updated_at: { type: 'string', readOnly: true },
      tags: { type: 'array', items: { type: 'string', maxLength: 255 } },
      direct_url: { type: 'string', readOnly: true },
      min_ram: { type: 'integer' },
      min_disk: { type: 'integer' },
      self: { type: 'string', readOnly: true },
      file: { type: 'string', readOnly: true },
      schema: { type: 'string', readOnly: true },
      locations: { type: 'array', items: { type: 'object' } },
    },
  };
}

export function imagesSchema(): Record<string, unknown> {
  return {
    name: 'images',
    properties: {
      images: { type: 'array', items: imageSchema() },
      schema: { type: 'string' },
      first: { type: 'string' },
      next: { type: 'string' },
    },
    links: [
      { rel: 'first', href: '{first}' },
      { rel: 'next', href: '{next}' },
      { rel: 'describedby', href: '{schema}' },
    ],
  };
}
