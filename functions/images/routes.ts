/**
 * Glance v2's routes over Ferry's image store: version discovery, images (list with Glance's
 * filters and pagination, show, create, JSON-patch update, delete), the image data (upload,
 * download) and the schemas glanceclient reads. Who sees what: functions/images/repo.ts.
 */
import { FerryError, BadRequest, Forbidden } from '../core/errors.js';
import { jsonBody, type PlainRequest, type PlainResponse, type PlainRoute } from '../core/plain-api.js';
import { allowed, registerPolicies } from '../core/policy.js';
import { createImageRecord, listImages, uploadImage } from '../servers/images.js';
import type { Image } from '../servers/model.js';
import { downloadResponse } from './download.js';
import { importImage, importInfo } from './import.js';
import { applyPatch, parseCreate } from './validation.js';
import { changeImage, deleteGlanceImage, listedFor, ownImage, visibleImage } from './repo.js';
import { imageSchema, imagesSchema, imageTasksView, imageView, versionsDocument } from './views.js';

export const IMAGE_POLICIES = {
  list: 'get_images',
  show: 'get_image',
  create: 'add_image',
  modify: 'modify_image',
  delete: 'delete_image',
  upload: 'upload_image',
  download: 'download_image',
  publicize: 'publicize_image',
  communitize: 'communitize_image',
} as const;

registerPolicies({
  [IMAGE_POLICIES.list]: '@',
  [IMAGE_POLICIES.show]: '@',
  [IMAGE_POLICIES.create]: '@',
  [IMAGE_POLICIES.modify]: '@',
  [IMAGE_POLICIES.delete]: '@',
  [IMAGE_POLICIES.upload]: '@',
  [IMAGE_POLICIES.download]: '@',
  // Glance's defaults: only an admin makes an image public; any owner may make it community.
  [IMAGE_POLICIES.publicize]: 'admin_api',
  [IMAGE_POLICIES.communitize]: '@',
});

const ok = (body: unknown, status = 200): PlainResponse => ({ status, body });

/** A visibility the caller may not set: 403 with Glance's message. */
function checkVisibility(req: PlainRequest, visibility: Image['visibility']): void {
  const action = visibility === 'public' ? IMAGE_POLICIES.publicize : visibility === 'community' ? IMAGE_POLICIES.communitize : undefined;
  if (action && !allowed(req.auth, action)) throw new Forbidden(`You are not authorized to complete ${action} action.`);
}

function sortKeyValue(image: Image, key: string): string | number {
  const view = imageView(image);
  const v = view[key];
  return typeof v === 'number' ? v : String(v ?? '');
}

async function list(req: PlainRequest): Promise<PlainResponse> {
  const q = req.query;
  const visibility = q.get('visibility');
  if (visibility && ![...['public', 'private', 'shared', 'community'], 'all'].includes(visibility)) throw new BadRequest(`Invalid visibility value: ${visibility}`);
  const limitRaw = q.get('limit');
  const limit = limitRaw === null ? 25 : Number(limitRaw);
  if (!Number.isInteger(limit) || limit < 0) throw new BadRequest('limit param must be an integer');
  const sortKey = q.get('sort_key') ?? 'created_at';
  const sortDir = q.get('sort_dir') ?? 'desc';
  if (!['asc', 'desc'].includes(sortDir)) throw new BadRequest(`Invalid sort direction: ${sortDir}`);
  const eq = (name: string, value: unknown) => q.get(name) === null || q.get(name) === String(value);
  let images = (await listImages(req.auth.projectId, true))
    .filter((i) => listedFor(i, req.auth, visibility))
    .filter((i) => eq('name', i.name) && eq('status', i.status) && eq('owner', i.ownerProjectId) && eq('disk_format', i.diskFormat) && eq('container_format', i.containerFormat))
    .filter((i) => q.get('protected') === null || String(i.protected ?? false) === q.get('protected'))
    .filter((i) => q.getAll('tag').every((t) => (i.tags ?? []).includes(t)))
    .sort((a, b) => {
      const x = sortKeyValue(a, sortKey);
      const y = sortKeyValue(b, sortKey);
      const c = x < y ? -1 : x > y ? 1 : a.id.localeCompare(b.id);
      return sortDir === 'asc' ? c : -c;
    });
  const marker = q.get('marker');
  if (marker) {
    const at = images.findIndex((i) => i.id === marker);
    if (at < 0) throw new BadRequest(`Invalid marker. Image ${marker} could not be found.`);
    images = images.slice(at + 1);
  }
  const page = images.slice(0, limit);
  const body: Record<string, unknown> = { images: page.map(imageView), first: '/v2/images', schema: '/v2/schemas/images' };
  if (images.length > limit && page.length > 0) {
    const next = new URLSearchParams(q);
    next.set('marker', page[page.length - 1]!.id);
    body.next = `/v2/images?${next.toString()}`;
  }
  return ok(body);
}

async function show(req: PlainRequest): Promise<PlainResponse> {
  return ok(imageView(await visibleImage(req.params.image_id!, req.auth)));
}

async function create(req: PlainRequest): Promise<PlainResponse> {
  const input = parseCreate(jsonBody(req));
  checkVisibility(req, input.visibility);
  const image = await createImageRecord({ ...input, ownerProjectId: req.auth.projectId });
  return { status: 201, body: imageView(image), headers: { Location: `${req.rootUrl}/v2/images/${image.id}` } };
}

const PATCH_TYPE = 'application/openstack-images-v2.1-json-patch';

async function update(req: PlainRequest): Promise<PlainResponse> {
  if (req.contentType !== PATCH_TYPE) {
    throw new FerryError(415, 'badRequest', `Unsupported Content-Type; use ${PATCH_TYPE}`);
  }
  const ops = jsonBody(req);
  const image = await changeImage(req.params.image_id!, req.auth, (current) => {
    const next = applyPatch(current, ops);
    if (next.visibility !== current.visibility) checkVisibility(req, next.visibility);
    return next;
  });
  return ok(imageView(image));
}

async function remove(req: PlainRequest): Promise<PlainResponse> {
  await deleteGlanceImage(req.params.image_id!, req.auth);
  return { status: 204 };
}

async function upload(req: PlainRequest): Promise<PlainResponse> {
  if (req.contentType !== 'application/octet-stream') throw new FerryError(415, 'badRequest', 'Unsupported Content-Type; use application/octet-stream');
  const image = await ownImage(req.params.image_id!, req.auth);
  if (image.status !== 'queued' && image.status !== 'saving') throw new FerryError(409, 'conflictingRequest', `Image status transition from ${image.status} to saving is not allowed`);
  await uploadImage(image.id, req.raw);
  return { status: 204 };
}

async function download(req: PlainRequest): Promise<PlainResponse> {
  return downloadResponse(await visibleImage(req.params.image_id!, req.auth));
}

export const IMAGE_ROUTES: PlainRoute[] = [
  { method: 'GET', path: '/', handler: async (req) => ok(versionsDocument(req.rootUrl), 300) },
  { method: 'GET', path: '/versions', handler: async (req) => ok(versionsDocument(req.rootUrl)) },
  // keystoneauth's discovery of an endpoint given as `<root>/v2` (a clouds.yaml override) asks it first.
  { method: 'GET', path: '/v2', handler: async (req) => ok(versionsDocument(req.rootUrl), 300) },
  { method: 'GET', path: '/v2/images', action: IMAGE_POLICIES.list, handler: list },
  { method: 'POST', path: '/v2/images', action: IMAGE_POLICIES.create, handler: create },
  { method: 'GET', path: '/v2/images/{image_id}', action: IMAGE_POLICIES.show, handler: show },
  { method: 'PATCH', path: '/v2/images/{image_id}', action: IMAGE_POLICIES.modify, handler: update },
  { method: 'DELETE', path: '/v2/images/{image_id}', action: IMAGE_POLICIES.delete, handler: remove },
  { method: 'PUT', path: '/v2/images/{image_id}/file', action: IMAGE_POLICIES.upload, handler: upload },
  { method: 'GET', path: '/v2/images/{image_id}/file', action: IMAGE_POLICIES.download, handler: download },
  { method: 'POST', path: '/v2/images/{image_id}/import', action: IMAGE_POLICIES.upload, handler: importImage },
  // Glance 2.12: the image's import tasks, where a failed import's reason is (its `message`).
  { method: 'GET', path: '/v2/images/{image_id}/tasks', action: IMAGE_POLICIES.show, handler: async (req) => ok(imageTasksView(await visibleImage(req.params.image_id!, req.auth))) },
  { method: 'GET', path: '/v2/info/import', action: IMAGE_POLICIES.list, handler: async () => ok(importInfo()) },
  { method: 'GET', path: '/v2/schemas/image', action: IMAGE_POLICIES.show, handler: async () => ok(imageSchema()) },
  { method: 'GET', path: '/v2/schemas/images', action: IMAGE_POLICIES.list, handler: async () => ok(imagesSchema()) },
];
