/**
 * Cinder v3 volumes routes (C/api/v3/volumes.py, C/api/contrib/volume_actions.py,
 * C/api/contrib/admin_actions.py, C/api/contrib/volume_unmanage.py): validation in upstream's
 * order and wording, then a pure transition (transitions.ts) persisted conditionally (repo.ts),
 * and for create/delete an execution of the volume machine named from the volume id. Create is
 * create.ts, list and show queries.ts, the actions actions.ts; update and delete are here.
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { isConditionFailure, withRetries } from '../core/db.js';
import { ConcurrentModification, FerryError } from '../core/errors.js';
import { assertNotFrozen, BackendFrozen, notFrozenCheck } from './frozen.js';
import { authorize } from '../core/policy.js';
import { type Volume, type VolumeStatus } from './model.js';
import { cancellationCodes, getVolumeOrThrow, getVolumeScoped, updateVolume, writeVolumeWith } from './repo.js';
import { apply } from './transitions.js';
import { invalidField, metadataField, optionalString, pyRepr, wrapped } from './validation.js';
import { viewContext, volumeDetail } from './views.js';
import { VOLUME_POLICIES } from './policies.js';
import { createVolumeRoute, startVolumeExecution } from './create.js';
import { listRoute, showVolume } from './queries.js';
import { volumeAction } from './actions.js';

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

/**
 * begin-delete written with a ConditionCheck that the volume's backend is not frozen, so a freeze
 * that lands after the read still refuses the delete (reference §2.5).
 */
async function beginDeleteNotFrozen(id: string): Promise<Volume> {
  return withRetries(
    async () => {
      const before = await getVolumeOrThrow(id);
      const after = apply(before, { type: 'begin-delete', at: now() });
      try {
        return await writeVolumeWith(before, after, before.host ? [notFrozenCheck(before.host)] : []);
      } catch (e) {
        if (before.host && cancellationCodes(e)[1] === 'ConditionalCheckFailed') throw new BackendFrozen(before.host);
        throw e;
      }
    },
    { retryable: (e) => cancellationCodes(e)[0] === 'ConditionalCheckFailed' || cancellationCodes(e).includes('TransactionConflict'), attempts: 20 },
  ).catch((e) => {
    if (isConditionFailure(e) && !(e instanceof FerryError)) throw new ConcurrentModification(`Volume ${id}`, e);
    throw e;
  });
}

async function deleteVolumeRoute(req: ApiRequest) {
  // `cascade` is accepted and ignored: a volume with snapshots is refused (delete its snapshots first).
  const id = req.params.volume_id!;
  const found = await getVolumeScoped(req.auth, id);
  authorize(req.auth, VOLUME_POLICIES.delete, { projectId: found.projectId });
  // Upstream's order: frozen (assert_not_frozen) before the status guard.
  if (found.host) await assertNotFrozen(found.host);
  const before = await beginDeleteNotFrozen(id);
  await startVolumeExecution('volume-delete', id, async () => {
    await updateVolume(id, { type: 'reset-status', at: now(), status: (before.previousStatus ?? 'available') as VolumeStatus });
  });
  return json(202);
}

export const volumeRoutes: RouteSpec[] = [
  { method: 'POST', path: '/volumes', action: VOLUME_POLICIES.create, handler: createVolumeRoute },
  { method: 'GET', path: '/volumes', action: VOLUME_POLICIES.getAll, handler: (req) => listRoute(req, false) },
  { method: 'GET', path: '/volumes/detail', action: VOLUME_POLICIES.getAll, handler: (req) => listRoute(req, true) },
  { method: 'GET', path: '/volumes/{volume_id}', action: VOLUME_POLICIES.get, authorizeBy: 'resource', handler: showVolume },
  { method: 'PUT', path: '/volumes/{volume_id}', action: VOLUME_POLICIES.update, authorizeBy: 'resource', handler: updateVolumeRoute },
  { method: 'DELETE', path: '/volumes/{volume_id}', action: VOLUME_POLICIES.delete, authorizeBy: 'resource', handler: deleteVolumeRoute },
  { method: 'POST', path: '/volumes/{volume_id}/action', action: VOLUME_POLICIES.action, authorizeBy: 'resource', handler: volumeAction },
];
