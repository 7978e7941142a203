/**
 * The authorization matrix of the whole Cinder API: every route of the composed handler
 * (functions/api/volume.ts, enumerated from its route arrays, so a new route is in the matrix
 * without editing this file) × {no token, admin, owner (demo), member of another project}, over
 * real HTTP through the local stack's authorizer, with the handler alone answering the no-token
 * case too.
 *
 * Expectations come from each route's policy rule (ruleFor(action) of functions/core/policy.ts;
 * for POST /volumes/{id}/action, the rule of each action key), not from a table of outcomes:
 * - no token: 401;
 * - admin: never 401/403 (and 2xx for a route this file knows a valid request for);
 * - owner: 403 for `admin_api` and `!`; otherwise never 401/403 (and 2xx with a known request);
 * - other project: never a 2xx on demo's resources (404 for project-scoped resources: no leak of
 *   their existence; 403 for `admin_api` routes with no project resource); on routes it may use
 *   (lists, create), its answer never contains demo's ids or names;
 * - nobody ever gets a 5xx.
 * Every cell gets fresh fixtures owned by demo, so destructive routes (DELETE, unmanage, extend)
 * never take another cell's resource away. The matrix is printed for a person to read.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve as resolvePath } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import * as volumeApi from '../../functions/api/volume.js';
import type { RouteSpec } from '../../functions/core/api.js';
import { ruleFor, type Rule } from '../../functions/core/policy.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { updateVolume } from '../../functions/volumes/repo.js';
import { VOLUME_POLICIES } from '../../functions/volumes/policies.js';
import { createVolumeType } from '../../functions/volumes/types.js';
import { attachedVolume, availableVolume, settleExecutions } from '../support/api-state.js';
import { call } from '../support/events.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const ROOT = resolvePath(dirname(fileURLToPath(import.meta.url)), '../..');
const VERSION = '3.70';

// ---------------------------------------------------------------------------------------------
// The routes, from the composed handler's own route arrays

/**
 * The route list of functions/api/volume.ts: its exported list when it has one (VOLUME_API_ROUTES
 * or routes), else the arrays its `routes: [...a, ...b]` spreads, each imported from the module
 * volume.ts imports it from. Either way a route added to the API is in this matrix.
 */
async function volumeApiRoutes(): Promise<RouteSpec[]> {
  const exported = (volumeApi as Record<string, unknown>).VOLUME_API_ROUTES ?? (volumeApi as Record<string, unknown>).routes;
  if (Array.isArray(exported)) return exported as RouteSpec[];
  const file = join(ROOT, 'functions/api/volume.ts');
  const src = readFileSync(file, 'utf8');
  const list = /\broutes:\s*\[([^\]]*)\]/.exec(src);
  if (!list) throw new Error('functions/api/volume.ts: no `routes: [...]` to enumerate; export VOLUME_API_ROUTES');
  const routes: RouteSpec[] = [];
  for (const part of list[1]!.split(',').map((p) => p.trim()).filter(Boolean)) {
    const name = part.replace(/^\.\.\./, '');
    const from = new RegExp(`import\\s*\\{[^}]*\\b${name}\\b[^}]*\\}\\s*from\\s*'([^']+)'`).exec(src);
    if (!from) throw new Error(`functions/api/volume.ts: cannot find where ${name} is imported from`);
    const mod = (await import(pathToFileURL(resolvePath(dirname(file), from[1]!.replace(/\.js$/, '.ts'))).href)) as Record<string, unknown>;
    if (!Array.isArray(mod[name])) throw new Error(`${from[1]}: ${name} is not a route array`);
    routes.push(...(mod[name] as RouteSpec[]));
  }
  return routes;
}

const ROUTES = await volumeApiRoutes();

/** The volume action keys and their policies: `os-<snake_case of the VOLUME_POLICIES key>` for every per-action policy. */
const NOT_ACTIONS = new Set(['create', 'get', 'getAll', 'update', 'delete', 'action']);
const VOLUME_ACTIONS: Record<string, string> = Object.fromEntries(
  Object.entries(VOLUME_POLICIES)
    .filter(([k]) => !NOT_ACTIONS.has(k))
    .map(([k, policy]) => [`os-${k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}`, policy]),
);

interface Cell {
  /** Row label. */
  label: string;
  route: RouteSpec;
  /** The policy whose rule decides (the action key's for volume actions). */
  policy: string;
  actionKey?: string;
}

const CELLS: Cell[] = ROUTES.flatMap((route): Cell[] => {
  const label = `${route.method} ${route.path}`;
  if (route.method === 'POST' && route.path === '/volumes/{volume_id}/action') {
    return Object.entries(VOLUME_ACTIONS).map(([key, policy]) => ({ label: `${label} ${key}`, route, policy, actionKey: key }));
  }
  return [{ label, route, policy: route.action }];
});
// Destructive routes last, so a failure elsewhere is seen before anything is deleted (each cell has its own fixtures anyway).
CELLS.sort((a, b) => Number(a.route.method === 'DELETE') - Number(b.route.method === 'DELETE'));

// ---------------------------------------------------------------------------------------------
// Callers

type Column = 'none' | 'admin' | 'owner' | 'other';
const COLUMNS: Column[] = ['none', 'admin', 'owner', 'other'];
const TOKENS: Record<Column, string | undefined> = { none: undefined, admin: 'admin:admin', owner: 'demo:demo', other: 'other:other' };

/** Path parameters that name something global (a type, a spec key, a service action, a host) rather than a project's resource. */
const GLOBAL_PARAMS = new Set(['type_id', 'key', 'action', 'host', 'host_name', 'class_name']);
/** Whether the route touches a resource of a project: a project-owned id in the path, or a body naming demo's volume. */
const projectScoped = (r: RouteSpec): boolean =>
  [...r.path.matchAll(/\{(\w+)\}/g)].some((m) => !GLOBAL_PARAMS.has(m[1]!)) || (r.method === 'POST' && r.path === '/attachments');

// ---------------------------------------------------------------------------------------------
// Requests: fixtures of demo's made for each cell, and a valid request where this file knows one

interface Request {
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

async function requestFor(cell: Cell): Promise<Request> {
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
      const res = await fetch(`${stack.url}/volume/v3/snapshots`, {
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

// ---------------------------------------------------------------------------------------------

let stack: TestLocalStack;
beforeAll(async () => {
  stack = await useLocalStack();
});
afterAll(async () => {
  await settleExecutions().catch(() => undefined);
  await stack?.stop();
});

async function http(column: Column, req: Request, method: string): Promise<{ status: number; text: string }> {
  const token = TOKENS[column];
  const res = await fetch(`${stack.url}/volume/v3${req.path}${req.query ? '?' + req.query : ''}`, {
    method,
    headers: {
      'OpenStack-API-Version': `volume ${VERSION}`,
      Accept: 'application/json',
      ...(token ? { 'X-Auth-Token': token } : {}),
      ...(req.body === undefined ? {} : { 'Content-Type': 'application/json' }),
    },
    body: req.body === undefined ? undefined : JSON.stringify(req.body),
  });
  return { status: res.status, text: await res.text() };
}

/** What the rule allows each column, as assertions on one answer; returns a violation or undefined. */
function violation(cell: Cell, rule: Rule, column: Column, status: number, known: boolean): string | undefined {
  const scoped = projectScoped(cell.route);
  if (status >= 500) return 'a 5xx';
  switch (column) {
    case 'none':
      return status === 401 ? undefined : 'expected 401 without a token';
    case 'admin':
      if (status === 401 || status === 403) return 'admin refused';
      if (known && rule !== '!' && (status < 200 || status >= 300)) return 'admin: a valid request was not 2xx';
      if (rule === '!' && status !== 403) return "rule '!' but not 403";
      return undefined;
    case 'owner':
      if (rule === 'admin_api' || rule === '!') return status === 403 ? undefined : `rule ${rule}: the owner must get 403`;
      if (status === 401 || status === 403) return `rule ${rule}: the owner was refused`;
      if (known && (status < 200 || status >= 300)) return 'owner: a valid request was not 2xx';
      return undefined;
    case 'other':
      // A quota set is no secret resource: upstream answers another project's member 403 for it, not 404.
      if (cell.route.path.startsWith('/os-quota-sets/')) return status === 403 ? undefined : "expected 403 for another project's quota set";
      if (scoped) {
        if (status >= 200 && status < 300) return "another project got a 2xx on demo's resource";
        if (rule === 'admin_api' || rule === '!') return status === 403 || status === 404 ? undefined : 'expected 403 or 404';
        return status === 404 ? undefined : "expected 404 (demo's resource must look absent)";
      }
      if (rule === 'admin_api' || rule === '!') return status === 403 ? undefined : `rule ${rule}: expected 403`;
      return status === 401 || status === 403 ? `rule ${rule}: another project's member was refused` : undefined;
  }
}

const matrix = new Map<string, Record<Column, string> & { rule: string }>();

describe('authorization matrix of the volume API', () => {
  test('the matrix covers every route of the composed handler, and every volume action key', () => {
    expect(CELLS.length).toBeGreaterThanOrEqual(ROUTES.length);
    for (const key of ['os-reset_status', 'os-extend', 'os-begin_detaching', 'os-roll_detaching', 'os-unmanage']) expect(Object.keys(VOLUME_ACTIONS)).toContain(key);
    for (const r of ['POST /volumes', 'GET /types/{type_id}/extra_specs/{key}', 'POST /manageable_volumes', 'POST /attachments/{id}/action']) expect(CELLS.map((c) => c.label)).toContain(r);
  });

  test.each(CELLS.map((c) => [c.label, c] as const))('%s', async (_label, cell) => {
    const rule = ruleFor(cell.policy);
    const row = { rule, none: '', admin: '', owner: '', other: '' };
    matrix.set(cell.label, row);
    const problems: string[] = [];
    for (const column of COLUMNS) {
      const req = await requestFor(cell);
      const res = await http(column, req, cell.route.method);
      let problem = violation(cell, rule, column, res.status, req.known);
      if (!problem && column === 'other') {
        const leaked = req.secrets.filter((s) => res.text.includes(s) && !req.path.includes(s) && !JSON.stringify(req.body ?? '').includes(s));
        if (leaked.length) problem = `answer leaks demo's ${leaked.join(', ')}`;
      }
      if (column === 'none') {
        // The handler alone, without the authorizer's context, refuses too.
        const direct = await call(volumeApi.handler, { method: cell.route.method, path: `/volume/v3${req.path}`, query: req.query, headers: { 'OpenStack-API-Version': `volume ${VERSION}` }, body: req.body, caller: null });
        if (direct.status !== 401) problem = `${problem ? problem + '; ' : ''}the handler without an authorizer context answered ${direct.status}`;
      }
      row[column] = `${res.status}${req.known ? '' : '?'}${problem ? ' !!' : ''}`;
      if (problem) problems.push(`${column}: ${res.status} ${problem} — ${cell.route.method} ${req.path}${req.query ? '?' + req.query : ''} body=${JSON.stringify(req.body)} -> ${res.text.slice(0, 300)}`);
      await settleExecutions();
    }
    expect(problems, `${cell.label} (rule ${rule} of ${cell.policy})`).toEqual([]);
  });

  afterAll(() => {
    const w = Math.max(...[...matrix.keys()].map((k) => k.length));
    const lines = [
      `${'route'.padEnd(w)}  ${'rule'.padEnd(14)} ${COLUMNS.map((c) => c.padEnd(8)).join(' ')}`,
      ...[...matrix].map(([label, row]) => `${label.padEnd(w)}  ${row.rule.padEnd(14)} ${COLUMNS.map((c) => row[c].padEnd(8)).join(' ')}`),
      '(? = no known valid request for this route: only the rule-derived bounds are checked; !! = violates the rule)',
    ];
    console.log(`authorization matrix (status per caller):\n${lines.join('\n')}`);
  });
});
