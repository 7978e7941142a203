/**
 * Cinder volume transfers (C/api/contrib/volume_transfer.py at `/os-volume-transfer`, and
 * C/api/v3/volume_transfer.py at `/volume-transfers`, which adds `no_snapshots` at 3.55):
 * create, list, list detail, show, accept and delete, with the views of C/api/views/transfers.py
 * (3.55 `no_snapshots`, 3.57 the history fields). The writes are repo.ts's transactions.
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { upstreamTime } from '../volumes/model.js';
import { parseLimit, parseOffset } from '../volumes/queries.js';
import { getVolume, getVolumeScoped } from '../volumes/repo.js';
import { boolParam, invalidField, isObject, isUuidLike, pyRepr, wrapped } from '../volumes/validation.js';
import { authKeyMatches, cryptHash, randomHex, type Transfer } from './model.js';
import { acceptTransfer, deleteTransfer, getTransfer, getTransferScoped, insertTransfer, listTransfers } from './repo.js';

const P = {
  create: 'volume:create_transfer',
  accept: 'volume:accept_transfer',
  delete: 'volume:delete_transfer',
  get: 'volume:get_transfer',
  getAll: 'volume:get_all_transfers',
};
// accept_transfer is "" upstream: anyone holding the key.
registerPolicies({ [P.create]: 'admin_or_owner', [P.accept]: '@', [P.delete]: 'admin_or_owner', [P.get]: 'admin_or_owner', [P.getAll]: 'admin_or_owner' });

const now = () => new Date().toISOString();

type Collection = 'os-volume-transfer' | 'volume-transfers';

function links(req: ApiRequest, collection: Collection, t: Transfer) {
  const root = req.baseUrl.replace(/\/v3$/, '');
  return [
    { href: `${req.baseUrl}/${t.sourceProjectId}/${collection}/${t.id}`, rel: 'self' },
    { href: `${root}/${t.sourceProjectId}/${collection}/${t.id}`, rel: 'bookmark' },
  ];
}

function summary(req: ApiRequest, c: Collection, t: Transfer) {
  return { id: t.id, volume_id: t.volumeId, name: t.name, links: links(req, c, t) };
}

function detail(req: ApiRequest, c: Collection, t: Transfer, extra: Record<string, unknown> = {}) {
  const out: Record<string, unknown> = { id: t.id, created_at: upstreamTime(t.createdAt), name: t.name, volume_id: t.volumeId, ...extra, links: links(req, c, t) };
  if (req.version.atLeast('3.55')) out.no_snapshots = t.noSnapshots;
  if (req.version.atLeast('3.57')) Object.assign(out, { destination_project_id: null, source_project_id: t.sourceProjectId, accepted: false });
  return out;
}

const CREATE_KEYS = (req: ApiRequest, c: Collection) => (c === 'volume-transfers' && req.version.atLeast('3.55') ? ['volume_id', 'name', 'no_snapshots'] : ['volume_id', 'name']);

async function createRoute(req: ApiRequest, c: Collection) {
  const body = wrapped(req.body, 'transfer');
  const allowed = CREATE_KEYS(req, c);
  const extra = Object.keys(body).find((k) => !allowed.includes(k));
  if (extra !== undefined) throw invalidField('transfer', body, `Additional properties are not allowed (${pyRepr(extra)} was unexpected)`);
  if (!('volume_id' in body)) throw invalidField('transfer', body, "'volume_id' is a required property");
  if (!isUuidLike(body.volume_id)) throw invalidField('volume_id', body.volume_id, `${pyRepr(body.volume_id)} is not a 'uuid'`);
  const name = body.name;
  if (name !== undefined && name !== null && typeof name !== 'string') throw invalidField('name', name, `${pyRepr(name)} is not valid under any of the given schemas`);
  if (typeof name === 'string' && name.length > 255) throw invalidField('name', name, `${pyRepr(name)} is not valid under any of the given schemas`);
  const noSnapshots = body.no_snapshots === undefined ? false : boolParam('no_snapshots', body.no_snapshots);
  const v = await getVolumeScoped(req.auth, body.volume_id);
  authorize(req.auth, P.create, { projectId: v.projectId });
  const salt = randomHex(8);
  const authKey = randomHex(16);
  const t: Transfer = {
    id: randomUUID(),
    volumeId: v.id,
    sourceProjectId: v.projectId,
    name: typeof name === 'string' ? name.trim() : null,
    salt,
    cryptHash: cryptHash(salt, authKey),
    noSnapshots,
    createdAt: now(),
    version: 1,
  };
  await insertTransfer(t);
  // The key is answered here only; the record keeps its HMAC.
  return json(202, { transfer: detail(req, c, t, { auth_key: authKey }) });
}

async function listRoute(req: ApiRequest, c: Collection, withDetail: boolean) {
  const q = req.query;
  const allTenants = req.auth.isAdmin && ['1', 'true', 'yes', 't', 'on', 'y'].includes((q.get('all_tenants') ?? '').toLowerCase());
  let transfers = await listTransfers(allTenants ? undefined : req.auth.projectId);
  const name = q.get('name') ?? q.get('display_name');
  if (name !== null) transfers = transfers.filter((t) => t.name === name);
  const volumeId = q.get('volume_id');
  if (volumeId !== null) transfers = transfers.filter((t) => t.volumeId === volumeId);
  // sort_keys ['created_at', 'id'], asc.
  transfers.sort((a, b) => (a.createdAt === b.createdAt ? a.id.localeCompare(b.id) : a.createdAt < b.createdAt ? -1 : 1));
  const marker = q.get('marker');
  if (marker) {
    const i = transfers.findIndex((t) => t.id === marker);
    if (i < 0) throw new NotFound(`Marker ${marker} could not be found.`);
    transfers = transfers.slice(i + 1);
  }
  const offset = parseOffset(q);
  transfers = transfers.slice(offset, offset + parseLimit(q));
  return json(200, { transfers: transfers.map((t) => (withDetail ? detail(req, c, t) : summary(req, c, t))) });
}

async function showRoute(req: ApiRequest, c: Collection) {
  const t = await getTransferScoped(req.auth, req.params.transfer_id!);
  authorize(req.auth, P.get, { projectId: t.sourceProjectId });
  return json(200, { transfer: detail(req, c, t) });
}

async function acceptRoute(req: ApiRequest, c: Collection) {
  const body = req.body;
  if (!isObject(body)) throw new BadRequest(`${pyRepr(body)} is not of type 'object'`);
  const args = wrapped(body, 'accept');
  const extra = Object.keys(args).find((k) => k !== 'auth_key');
  if (extra !== undefined) throw invalidField('accept', args, `Additional properties are not allowed (${pyRepr(extra)} was unexpected)`);
  if (!('auth_key' in args)) throw invalidField('accept', args, "'auth_key' is a required property");
  const key = args.auth_key;
  if (typeof key !== 'string' && !Number.isInteger(key)) throw invalidField('auth_key', key, `${pyRepr(key)} is not of type 'string', 'integer'`);
  authorize(req.auth, P.accept, {});
  // transfer_get(context.elevated()): any project may accept, holding the key.
  const t = await getTransfer(req.params.transfer_id!);
  if (!t) throw new NotFound(`Transfer ${req.params.transfer_id} could not be found.`);
  if (!authKeyMatches(t, String(key))) throw new BadRequest(`Invalid auth key: Attempt to transfer ${t.id} with invalid auth key.`);
  await acceptTransfer(t, { projectId: req.auth.projectId, userId: req.auth.userId }, now());
  return json(202, { transfer: summary(req, c, t) });
}

async function deleteRoute(req: ApiRequest) {
  const t = await getTransferScoped(req.auth, req.params.transfer_id!);
  const v = await getVolume(t.volumeId);
  authorize(req.auth, P.delete, { projectId: v?.projectId ?? t.sourceProjectId });
  await deleteTransfer(t, now());
  return json(202);
}

function routesAt(c: Collection): RouteSpec[] {
  const base = `/${c}`;
  return [
    { method: 'POST', path: base, action: P.create, authorizeBy: 'resource', handler: (req) => createRoute(req, c) },
    { method: 'GET', path: base, action: P.getAll, handler: (req) => listRoute(req, c, false) },
    { method: 'GET', path: `${base}/detail`, action: P.getAll, handler: (req) => listRoute(req, c, true) },
    { method: 'GET', path: `${base}/{transfer_id}`, action: P.get, authorizeBy: 'resource', handler: (req) => showRoute(req, c) },
    { method: 'POST', path: `${base}/{transfer_id}/accept`, action: P.accept, authorizeBy: 'resource', handler: (req) => acceptRoute(req, c) },
    { method: 'DELETE', path: `${base}/{transfer_id}`, action: P.delete, authorizeBy: 'resource', handler: deleteRoute },
  ];
}

export const transferRoutes: RouteSpec[] = [...routesAt('os-volume-transfer'), ...routesAt('volume-transfers')];
