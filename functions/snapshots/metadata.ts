/**
 * `PUT /snapshots/{id}` (C/api/v3/snapshots.py update) and the snapshot metadata routes
 * (C/api/v3/snapshot_metadata.py), the latter built by functions/volumes/metadata.ts as the
 * volume's are: each change is a snapshot transition (model.ts) written under the version read
 * (repo.ts updateSnapshot), so two merges never lose each other's keys and a refusal writes nothing.
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { metadataRoutesFor } from '../volumes/metadata.js';
import { invalidField, optionalString, pyRepr, wrapped } from '../volumes/validation.js';
import type { Snapshot } from './model.js';
import { getSnapshotScoped, updateSnapshot } from './repo.js';
import { snapshotView } from './routes.js';

const P = {
  get: 'volume:get_snapshot_metadata',
  update: 'volume:update_snapshot_metadata',
  delete: 'volume:delete_snapshot_metadata',
  updateSnapshot: 'volume:update_snapshot',
};
registerPolicies({ [P.updateSnapshot]: 'admin_or_owner' });

const now = () => new Date().toISOString();

async function scoped(req: ApiRequest, policy: string): Promise<Snapshot> {
  const s = await getSnapshotScoped(req.auth, req.params.snapshot_id!);
  authorize(req.auth, policy, { projectId: s.projectId });
  return s;
}

const UPDATE_KEYS = ['name', 'description', 'display_name', 'display_description'];

/** PUT /snapshots/{id}: schemas/snapshots.py `update` (one of the four required), any status; answers the detail view. */
async function updateRoute(req: ApiRequest) {
  const body = wrapped(req.body, 'snapshot');
  const extra = Object.keys(body).find((k) => !UPDATE_KEYS.includes(k));
  if (extra !== undefined) throw invalidField('snapshot', body, `Additional properties are not allowed (${pyRepr(extra)} was unexpected)`);
  if (Object.keys(body).length === 0) throw invalidField('snapshot', body, `${pyRepr(body)} is not valid under any of the given schemas`);
  const name = 'name' in body ? optionalString(body, 'name') : optionalString(body, 'display_name');
  const description = 'description' in body ? optionalString(body, 'description') : optionalString(body, 'display_description');
  const s = await scoped(req, P.updateSnapshot);
  // clean_name_and_description: names and descriptions are stored stripped.
  const after = await updateSnapshot(s.id, {
    type: 'update',
    at: now(),
    ...(name !== undefined ? { name: name === null ? null : name.trim() } : {}),
    ...(description !== undefined ? { description: description === null ? null : description.trim() } : {}),
  });
  return json(200, { snapshot: snapshotView(req, after, true, false) });
}

export const snapshotMetadataRoutes: RouteSpec[] = [
  { method: 'PUT', path: '/snapshots/{snapshot_id}', action: P.updateSnapshot, authorizeBy: 'resource', handler: updateRoute },
  // Cinder's snapshot metadata has no create policy of its own: POST is update_snapshot_metadata too.
  ...metadataRoutesFor({
    collection: 'snapshots',
    idParam: 'snapshot_id',
    noun: 'Snapshot',
    policies: { get: P.get, create: P.update, update: P.update, delete: P.delete },
    load: getSnapshotScoped,
    change: (id, change) => updateSnapshot(id, change),
    uriCheckFirst: true,
  }),
];
