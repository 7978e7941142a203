/**
 * The requests of the authorization matrix (test/integration/authz-matrix.test.ts): for one cell
 * (a route, or one action key of POST /volumes/{volume_id}/action), fresh fixtures owned by demo
 * and, where this module knows one, a valid request for the route, with the ids and names of
 * demo's that another project's answer must not contain. Fresh fixtures per cell, so destructive
 * routes (DELETE, unmanage, extend) never take another cell's resource away.
 */
import { randomUUID } from 'node:crypto';
import type { RouteSpec } from '../../functions/core/api.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { updateVolume } from '../../functions/volumes/repo.js';
import { createVolumeType } from '../../functions/volumes/types.js';
import { attachedVolume, availableVolume } from './api-state.js';

/** The microversion the matrix speaks. */
export const VERSION = '3.70';

export interface Cell {
  /** Row label. */
  label: string;
  route: RouteSpec;
  /** The policy whose rule decides (the action key's for volume actions). */
  policy: string;
  actionKey?: string;
}

// ---------------------------------------------------------------------------------------------
// Requests: fixtures of demo's made for each cell, and a valid request where this module knows one

export interface Request {
  path: string;
  query?: string;
  body?: unknown;
  /** Demo's ids and names this cell made; the other project's answers must not contain those not in its own request. */
  secrets: string[];
  /** false when this file has no valid request for the route (a new route): only the rule-derived bounds are asserted. */
  known: boolean;
}

let secretCount = 0;
const secretName = () => `authz-secret-${++secretCount}`;
let legacyCount = 0;

const connector = (host: string) => ({ initiator: `iqn.2004-10.org:${host}`, ip: '10.0.0.5', platform: 'x86_64', host, os_type: 'linux2', multipath: false, mountpoint: null });

/** A request for the cell, made against the local stack at stackUrl (a snapshot for a snapshot route is made through its API). */
export async function requestFor(cell: Cell, stackUrl: string): Promise<Request> {
  const r = cell.route;
  const secrets: string[] = [];
  const params: Record<string, string> = {};
  let body: unknown;
  let query: string | undefined;
  let known = true;

  const volume = async (state: 'available' | 'in-use' | 'detaching' = 'available') => {
    const name = secretName();
    secrets.push(name);
    if (state === 'available') {
      const v = await availableVolume({ name });
      secrets.push(v.id);
      return v.id;
    }
    const { volume: v, attachmentId } = await attachedVolume('attached', { name });
    secrets.push(v.id, attachmentId);
    if (state === 'detaching') await updateVolume(v.id, { type: 'begin-detaching', at: new Date().toISOString() });
    return v.id;
  };
  const attachment = async (state: 'reserved' | 'attaching' | 'attached') => {
    const name = secretName();
    const { volume: v, attachmentId } = await attachedVolume(state, { name });
    secrets.push(name, v.id, attachmentId);
    return attachmentId;
  };

  const key = `${r.method} ${r.path}${cell.actionKey ? ' ' + cell.actionKey : ''}`;
  // Path parameters first (a fresh resource of demo's per cell).
  for (const [, p] of r.path.matchAll(/\{(\w+)\}/g)) {
    if (p === 'volume_id') {
      params[p] = await volume(cell.actionKey === 'os-begin_detaching' ? 'in-use' : cell.actionKey === 'os-roll_detaching' ? 'detaching' : 'available');
    } else if (p === 'id' && r.path.startsWith('/attachments/')) {
      params[p] = await attachment(r.method === 'PUT' ? 'reserved' : r.method === 'POST' ? 'attaching' : 'attached');
    } else if (p === 'type_id') {
      // Private for the access action (access lists apply to private types only).
      const isPublic = r.path !== '/types/{type_id}/action';
      params[p] = (await createVolumeType({ name: `authz-type-${randomUUID().slice(0, 8)}`, isPublic, extraSpecs: { multiattach: '<is> False', k1: 'v1' } })).id;
    } else if (p === 'key') {
      params[p] = 'multiattach';
    } else if (p === 'host' || p === 'host_name') {
      params[p] = 'ferry@lvm-a';
    } else if (p === 'project_id') {
      // os-quota-sets: demo's own quota set.
      params[p] = 'demo';
    } else if (p === 'snapshot_id') {
      // A snapshot of a fresh volume of demo's, made as demo through the API.
      const res = await fetch(`${stackUrl}/volume/v3/snapshots`, {
        method: 'POST',
        headers: { 'X-Auth-Token': 'demo:demo', 'OpenStack-API-Version': `volume ${VERSION}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ snapshot: { volume_id: await volume(), name: secretName() } }),
      });
      params[p] = ((await res.json()) as { snapshot: { id: string } }).snapshot.id;
      secrets.push(params[p]!);
    } else if (p === 'class_name') {
      params[p] = 'default';
    } else if (p === 'action') {
      // os-services: freeze the replicated backend, which no fixture volume lives on. Upstream
      // validates the body before the policy (reference §2.2), so only a well-formed body tests the rule.
      params[p] = 'freeze';
    } else {
      params[p] = randomUUID();
      known = false;
    }
  }
  // Then the body or query of a valid request.
  switch (key) {
    case 'PUT /os-services/{action}':
      body = { host: 'ferry@lvm-r' };
      break;
    case 'POST /volumes':
      body = { volume: { size: 1, name: 'authz-new' } };
      break;
    case 'GET /volumes':
    case 'GET /volumes/detail':
    case 'GET /attachments':
    case 'GET /attachments/detail':
      await volume();
      await attachment('attached');
      query = 'all_tenants=1';
      break;
    case 'PUT /volumes/{volume_id}':
      body = { volume: { name: 'authz-renamed' } };
      break;
    case 'POST /volumes/{volume_id}/action os-reset_status':
      body = { 'os-reset_status': { status: 'error' } };
      break;
    case 'POST /volumes/{volume_id}/action os-extend':
      body = { 'os-extend': { new_size: 2 } };
      break;
    case 'POST /volumes/{volume_id}/action os-retype':
      body = { 'os-retype': { new_type: 'multiattach', migration_policy: 'never' } };
      break;
    case 'POST /volumes/{volume_id}/action os-begin_detaching':
    case 'POST /volumes/{volume_id}/action os-roll_detaching':
    case 'POST /volumes/{volume_id}/action os-unmanage':
      body = { [cell.actionKey!]: {} };
      break;
    case 'POST /types':
      body = { volume_type: { name: `authz-new-${randomUUID().slice(0, 8)}` } };
      break;
    case 'PUT /types/{type_id}':
      body = { volume_type: { description: 'changed' } };
      break;
    case 'POST /types/{type_id}/extra_specs':
      body = { extra_specs: { k2: 'v2' } };
      break;
    case 'PUT /types/{type_id}/extra_specs/{key}':
      body = { multiattach: '<is> False' };
      break;
    case 'GET /manageable_volumes':
    case 'GET /manageable_volumes/detail':
      query = 'host=ferry@lvm-b';
      break;
    case 'POST /manageable_volumes': {
      const name = `authz-legacy-${++legacyCount}`;
      await (await driverForHost('ferry@lvm-b')).createVolume({ backendName: name, sizeGb: 1, pool: 'pool0' });
      body = { volume: { host: 'ferry@lvm-b#pool0', ref: { 'source-name': name } } };
      break;
    }
    case 'POST /attachments':
      body = { attachment: { volume_uuid: await volume(), instance_uuid: randomUUID() } };
      break;
    case 'PUT /attachments/{id}':
      body = { attachment: { connector: connector('authz-host') } };
      break;
    case 'POST /attachments/{id}/action':
      body = { 'os-complete': null };
      break;
    case 'POST /volumes/{volume_id}/metadata':
    case 'PUT /volumes/{volume_id}/metadata':
      body = { metadata: { k: 'v' } };
      break;
    case 'PUT /volumes/{volume_id}/metadata/{key}':
      body = { meta: { multiattach: 'v' } };
      break;
    case 'POST /snapshots/{snapshot_id}/action':
      body = { 'os-reset_status': { status: 'error' } };
      break;
    case 'PUT /snapshots/{snapshot_id}':
      body = { snapshot: { name: 'authz-renamed' } };
      break;
    case 'POST /snapshots/{snapshot_id}/metadata':
    case 'PUT /snapshots/{snapshot_id}/metadata':
      body = { metadata: { k: 'v' } };
      break;
    case 'PUT /snapshots/{snapshot_id}/metadata/{key}':
      body = { meta: { multiattach: 'v' } };
      break;
    case 'POST /types/{type_id}/action':
      body = { addProjectAccess: { project: 'other' } };
      break;
    case 'POST /os-volume-transfer/{transfer_id}/accept':
    case 'POST /volume-transfers/{transfer_id}/accept':
      // No transfer of that id (the path's id is random): a well-formed body, so the answer is the lookup's.
      body = { accept: { auth_key: 'authz-key' } };
      known = false;
      break;
    case 'PUT /os-quota-sets/{project_id}':
      body = { quota_set: { backups: 10 } };
      break;
    case 'PUT /os-quota-class-sets/{class_name}':
      body = { quota_class_set: { backups: 10 } };
      break;
    case 'GET /os-quota-sets/{project_id}':
    case 'GET /os-quota-sets/{project_id}/defaults':
    case 'DELETE /os-quota-sets/{project_id}':
    case 'GET /os-quota-class-sets/{class_name}':
    case 'GET /messages':
    case 'GET /limits':
    case 'GET /extensions':
    case 'GET /os-hosts':
    case 'GET /os-hosts/{host_name}':
    case 'GET /os-availability-zone':
    case 'GET /volumes/{volume_id}':
    case 'DELETE /volumes/{volume_id}':
    case 'GET /types':
    case 'GET /types/{type_id}':
    case 'DELETE /types/{type_id}':
    case 'GET /types/{type_id}/extra_specs':
    case 'GET /types/{type_id}/extra_specs/{key}':
    case 'DELETE /types/{type_id}/extra_specs/{key}':
    case 'GET /attachments/{id}':
    case 'DELETE /attachments/{id}':
      break;
    default:
      known = false;
      if (r.method === 'POST' || r.method === 'PUT') body = cell.actionKey ? { [cell.actionKey]: {} } : {};
  }
  let path = r.path;
  for (const [p, v] of Object.entries(params)) path = path.replace(`{${p}}`, encodeURIComponent(v));
  return { path, query, body, secrets, known };
}
