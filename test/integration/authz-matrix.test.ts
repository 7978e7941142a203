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
 * never take another cell's resource away (the requests and their fixtures: test/support/authz-matrix-requests.ts).
 * The matrix is printed for a person to read.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve as resolvePath } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import * as volumeApi from '../../functions/api/volume.js';
import type { RouteSpec } from '../../functions/core/api.js';
import { ruleFor, type Rule } from '../../functions/core/policy.js';
import { VOLUME_POLICIES } from '../../functions/volumes/policies.js';
import { settleExecutions } from '../support/api-state.js';
import { requestFor, VERSION, type Cell, type Request } from '../support/authz-matrix-requests.js';
import { call } from '../support/events.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const ROOT = resolvePath(dirname(fileURLToPath(import.meta.url)), '../..');

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
      const req = await requestFor(cell, stack.url);
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
