/**
 * The metadata routes of a volume (C/api/v3/volume_metadata.py, C/api/schemas/volume_metadata.py)
 * and, through metadataRoutesFor, of a snapshot (C/api/v3/snapshot_metadata.py): list, merge
 * (POST), replace (PUT), one key's show, set (PUT) and delete. Each change is the resource's
 * `metadata` transition written under the version read, so two merges never lose each other's keys
 * and a refusal writes nothing.
 */
import type { AuthContext } from '../core/auth.js';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { getVolumeScoped, updateVolume } from './repo.js';
import { invalidField, isObject, metadataField, pyRepr } from './validation.js';

/** The one change every metadata route makes: the `metadata` transition of volumes and snapshots alike. */
export type MetadataChange = { type: 'metadata'; at: string; set?: Record<string, string>; replace?: boolean; remove?: string };

interface WithMetadata {
  id: string;
  projectId: string;
  metadata?: Record<string, string>;
}

/** What differs between the volume's metadata API and the snapshot's. */
export interface MetadataResource<T extends WithMetadata> {
  /** The collection path ('volumes') and its id parameter ('volume_id'). */
  collection: string;
  idParam: string;
  /** The word in a 404's message: 'Volume', 'Snapshot'. */
  noun: string;
  policies: { get: string; create: string; update: string; delete: string };
  load(auth: AuthContext, id: string): Promise<T>;
  change(id: string, change: MetadataChange): Promise<T>;
  /**
   * PUT .../metadata/{key} with more than one key: volume_metadata.py's schema refuses it before
   * the URI check ('has too many properties'); snapshot_metadata.py checks the URI first and then
   * answers 'Request body contains too many items'.
   */
  uriCheckFirst: boolean;
}

const now = () => new Date().toISOString();

/** `{"<key>": {...}}` and nothing else, as the schemas' additionalProperties: false. */
function onlyKey(body: unknown, key: string): Record<string, unknown> {
  if (!isObject(body)) throw new BadRequest(body === undefined ? `'${key}' is a required property` : `${pyRepr(body)} is not of type 'object'`);
  const extra = Object.keys(body).find((k) => k !== key);
  if (extra !== undefined) throw new BadRequest(`Additional properties are not allowed (${pyRepr(extra)} was unexpected)`);
  if (!(key in body)) throw new BadRequest(`'${key}' is a required property`);
  return body;
}

export function metadataRoutesFor<T extends WithMetadata>(r: MetadataResource<T>): RouteSpec[] {
  const P = r.policies;
  registerPolicies({ [P.get]: 'admin_or_owner', [P.create]: 'admin_or_owner', [P.update]: 'admin_or_owner', [P.delete]: 'admin_or_owner' });

  async function scoped(req: ApiRequest, policy: string): Promise<T> {
    const item = await r.load(req.auth, req.params[r.idParam]!);
    authorize(req.auth, policy, { projectId: item.projectId });
    return item;
  }

  async function index(req: ApiRequest) {
    const item = await scoped(req, P.get);
    return json(200, { metadata: { ...(item.metadata ?? {}) } });
  }

  /** POST merges, PUT replaces; both answer the whole metadata after the change. */
  async function write(req: ApiRequest, replace: boolean) {
    const set = metadataField(onlyKey(req.body, 'metadata'), 'metadata')!;
    const item = await scoped(req, replace ? P.update : P.create);
    const after = await r.change(item.id, { type: 'metadata', at: now(), set, replace });
    return json(200, { metadata: { ...(after.metadata ?? {}) } });
  }

  async function showKey(req: ApiRequest) {
    const item = await scoped(req, P.get);
    const key = req.params.key!;
    const metadata = item.metadata ?? {};
    if (!(key in metadata)) throw new NotFound(`${r.noun} ${item.id} has no metadata with key ${key}.`);
    return json(200, { meta: { [key]: metadata[key] } });
  }

  async function updateKey(req: ApiRequest) {
    const body = onlyKey(req.body, 'meta');
    const meta = body.meta;
    if (!isObject(meta)) throw invalidField('meta', meta, `${pyRepr(meta)} is not of type 'object'`);
    if (Object.keys(meta).length < 1) throw invalidField('meta', meta, `${pyRepr(meta)} does not have enough properties`);
    if (!r.uriCheckFirst && Object.keys(meta).length > 1) throw invalidField('meta', meta, `${pyRepr(meta)} has too many properties`);
    const checked = metadataField(body, 'meta')!;
    const key = req.params.key!;
    if (!(key in checked)) throw new BadRequest('Request body and URI mismatch');
    if (Object.keys(checked).length > 1) throw new BadRequest('Request body contains too many items');
    const item = await scoped(req, P.update);
    await r.change(item.id, { type: 'metadata', at: now(), set: checked });
    return json(200, { meta: checked });
  }

  async function deleteKey(req: ApiRequest) {
    const item = await scoped(req, P.delete);
    await r.change(item.id, { type: 'metadata', at: now(), remove: req.params.key! });
    return json(200);
  }

  const base = `/${r.collection}/{${r.idParam}}/metadata`;
  return [
    { method: 'GET', path: base, action: P.get, authorizeBy: 'resource', handler: index },
    { method: 'POST', path: base, action: P.create, authorizeBy: 'resource', handler: (req) => write(req, false) },
    { method: 'PUT', path: base, action: P.update, authorizeBy: 'resource', handler: (req) => write(req, true) },
    { method: 'GET', path: `${base}/{key}`, action: P.get, authorizeBy: 'resource', handler: showKey },
    { method: 'PUT', path: `${base}/{key}`, action: P.update, authorizeBy: 'resource', handler: updateKey },
    { method: 'DELETE', path: `${base}/{key}`, action: P.delete, authorizeBy: 'resource', handler: deleteKey },
  ];
}

export const metadataRoutes: RouteSpec[] = metadataRoutesFor({
  collection: 'volumes',
  idParam: 'volume_id',
  noun: 'Volume',
  policies: {
    get: 'volume:get_volume_metadata',
    create: 'volume:create_volume_metadata',
    update: 'volume:update_volume_metadata',
    delete: 'volume:delete_volume_metadata',
  },
  load: getVolumeScoped,
  change: updateVolume,
  uriCheckFirst: false,
});
