/**
 * Cinder v3 volumes routes (C/api/v3/volumes.py, C/api/contrib/volume_actions.py,
 * C/api/contrib/admin_actions.py, C/api/contrib/volume_unmanage.py): validation in upstream's
 * order and wording, then a pure transition (transitions.ts) persisted conditionally (repo.ts),
 * and for create/delete an execution of the volume machine named from the volume id. Create is
 * create.ts, list and show queries.ts, the actions actions.ts, delete delete.ts, the metadata API
 * metadata.ts; update is here.
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { authorize } from '../core/policy.js';
import { getVolumeScoped, updateVolume } from './repo.js';
import { invalidField, metadataField, optionalString, pyRepr, wrapped } from './validation.js';
import { viewContext, volumeDetail } from './views.js';
import { VOLUME_POLICIES } from './policies.js';
import { createVolumeRoute } from './create.js';
import { deleteVolume } from './delete.js';
import { listRoute, showVolume, summaryRoute } from './queries.js';
import { volumeAction } from './actions.js';
import { metadataRoutes } from './metadata.js';

const now = () => new Date().toISOString();

async function updateVolumeRoute(req: ApiRequest) {
  const body = wrapped(req.body, 'volume');
  for (const k of Object.keys(body)) {
    if (!['name', 'description', 'display_name', 'display_description', 'metadata'].includes(k)) {
      throw invalidField('volume', body, `Additional properties are not allowed (${pyRepr(k)} was unexpected)`);
    }
  }
  const name = 'name' in body ? optionalString(body, 'name') : optionalString(body, 'display_name');
  const description = 'description' in body ? optionalString(body, 'description') : optionalString(body, 'display_description');
  const metadata = metadataField(body, 'metadata');
  const id = req.params.volume_id!;
  const found = await getVolumeScoped(req.auth, id);
  authorize(req.auth, VOLUME_POLICIES.update, { projectId: found.projectId });
  const v = await updateVolume(id, { type: 'update', at: now(), name, description, metadata });
  return json(200, { volume: volumeDetail(viewContext(req), v) });
}

async function deleteVolumeRoute(req: ApiRequest) {
  // `cascade` is accepted and ignored: a volume with snapshots is refused (delete its snapshots first).
  const id = req.params.volume_id!;
  const found = await getVolumeScoped(req.auth, id);
  authorize(req.auth, VOLUME_POLICIES.delete, { projectId: found.projectId });
  await deleteVolume(found, false);
  return json(202);
}

export const volumeRoutes: RouteSpec[] = [
  { method: 'POST', path: '/volumes', action: VOLUME_POLICIES.create, handler: createVolumeRoute },
  { method: 'GET', path: '/volumes', action: VOLUME_POLICIES.getAll, handler: (req) => listRoute(req, false) },
  { method: 'GET', path: '/volumes/detail', action: VOLUME_POLICIES.getAll, handler: (req) => listRoute(req, true) },
  { method: 'GET', path: '/volumes/summary', action: VOLUME_POLICIES.getAll, minVersion: '3.12', handler: summaryRoute },
  { method: 'GET', path: '/volumes/{volume_id}', action: VOLUME_POLICIES.get, authorizeBy: 'resource', handler: showVolume },
  { method: 'PUT', path: '/volumes/{volume_id}', action: VOLUME_POLICIES.update, authorizeBy: 'resource', handler: updateVolumeRoute },
  { method: 'DELETE', path: '/volumes/{volume_id}', action: VOLUME_POLICIES.delete, authorizeBy: 'resource', handler: deleteVolumeRoute },
  { method: 'POST', path: '/volumes/{volume_id}/action', action: VOLUME_POLICIES.action, authorizeBy: 'resource', handler: volumeAction },
  ...metadataRoutes,
];
