/**
 * Keystone's /v3/domains: the default domain (no item: it always exists and cannot be changed,
 * see docs/compatibility.md) and the domains an admin creates. A domain owns users and projects
 * (their names are unique per domain); it can be deleted only once disabled (Keystone's 403), and
 * deleting it deletes what it owns, revoking their tokens, as Keystone's cascade does.
 */
import { revokeProjectTokens, revokeUserTokens } from '../auth/tokens.js';
import { badRequest, DEFAULT_DOMAIN, domainView, forbidden, IdentityError, notFound, type Domain } from './model.js';
import { enforce, type Caller } from './policy.js';
import * as store from './store.js';

type Obj = Record<string, unknown>;

export const DEFAULT_DOMAIN_RECORD: Domain = { id: DEFAULT_DOMAIN.id, name: DEFAULT_DOMAIN.name, description: 'The default domain', enabled: true };

export async function findDomain(id: string): Promise<Domain | undefined> {
  return id === DEFAULT_DOMAIN.id ? DEFAULT_DOMAIN_RECORD : store.getDomain(id);
}

export async function mustDomain(id: string): Promise<Domain> {
  const d = await findDomain(id);
  if (!d) throw notFound('domain', id);
  return d;
}

/** The domain id a `{"id"}` or `{"name"}` reference names; undefined when there is none such. */
export async function domainIdOf(ref: { id?: unknown; name?: unknown }): Promise<string | undefined> {
  if (typeof ref.id === 'string') return (await findDomain(ref.id))?.id;
  if (typeof ref.name !== 'string' || !ref.name || ref.name.length > 64) return undefined;
  return ref.name === DEFAULT_DOMAIN.name ? DEFAULT_DOMAIN.id : store.domainIdByName(ref.name);
}

/** True when the domain exists and is enabled (a disabled domain's users and projects cannot get tokens). */
export async function domainEnabled(id: string): Promise<boolean> {
  return (await findDomain(id))?.enabled === true;
}

function domainBody(body: unknown, creating: boolean): { name?: string; description?: string; enabled?: boolean } {
  const e = (body as Obj | undefined)?.domain;
  if (typeof e !== 'object' || e === null || Array.isArray(e)) throw badRequest("Invalid input for field 'domain': an object is required");
  const d = e as Obj;
  const out: { name?: string; description?: string; enabled?: boolean } = {};
  if (d.name !== undefined || creating) {
    // Keystone's resource name: 1 to 64 characters, not only whitespace.
    if (typeof d.name !== 'string' || d.name.length > 64 || !d.name.trim()) throw badRequest("Invalid input for field 'name': a string of 1 to 64 characters is required");
    out.name = d.name;
  }
  if (d.description !== undefined && d.description !== null) {
    if (typeof d.description !== 'string' || d.description.length > 65535) throw badRequest("Invalid input for field 'description': a string is required");
    out.description = d.description;
  }
  if (d.enabled !== undefined) {
    if (typeof d.enabled !== 'boolean') throw badRequest("Invalid input for field 'enabled': a boolean is required");
    out.enabled = d.enabled;
  }
  if (!creating && Object.keys(d).length === 0) throw badRequest("Invalid input for field 'domain': at least one property is required");
  return out;
}

/** Revokes the tokens of the domain's projects and users (Keystone's revocation event for a domain). */
async function revokeDomainTokens(domainId: string): Promise<void> {
  const [projects, users] = await Promise.all([store.listProjects(), store.listUsers()]);
  for (const p of projects.filter((x) => x.domainId === domainId)) await revokeProjectTokens(p.id);
  for (const u of users.filter((x) => x.domainId === domainId)) await revokeUserTokens(u.id);
}

const ok = (status: number, body?: unknown) => ({ status, body });

export async function domains(req: { method: string; parts: string[]; query: URLSearchParams; body: unknown; baseUrl: string }, caller: Caller) {
  const [, id] = req.parts;
  const { method, baseUrl } = req;
  if (req.parts.length > 2) throw notFound('resource', 'the requested path');
  if (id === undefined && method === 'GET') {
    enforce(caller, 'identity:list_domains');
    const enabled = req.query.get('enabled');
    const all = [DEFAULT_DOMAIN_RECORD, ...(await store.listDomains())]
      .filter((d) => !req.query.get('name') || d.name === req.query.get('name'))
      .filter((d) => enabled === null || d.enabled === !['0', 'false', 'f', 'no', 'n', 'off'].includes(enabled.toLowerCase()));
    return ok(200, { domains: all.map((d) => domainView(d, baseUrl)), links: { self: `${baseUrl}/identity/v3/domains`, previous: null, next: null } });
  }
  if (id === undefined && method === 'POST') {
    enforce(caller, 'identity:create_domain');
    const b = domainBody(req.body, true);
    if (b.name === DEFAULT_DOMAIN.name) throw new IdentityError(409, 'Conflict', `Conflict occurred attempting to store domain - Duplicate entry found with name ${b.name}.`);
    const d: Domain = { id: store.newId(), name: b.name!, description: b.description ?? '', enabled: b.enabled ?? true };
    await store.createDomain(d);
    return ok(201, { domain: domainView(d, baseUrl) });
  }
  if (id === undefined) throw notFound('resource', 'the requested path');
  if (method === 'GET') {
    // Keystone's default: a reader of the system, or any token scoped to a project of this domain.
    const own = caller.projectId !== undefined && (await store.getProject(caller.projectId))?.domainId === id;
    if (!own) enforce(caller, 'identity:get_domain');
    return ok(200, { domain: domainView(await mustDomain(id), baseUrl) });
  }
  if (method === 'PATCH') {
    enforce(caller, 'identity:update_domain');
    const b = domainBody(req.body, false);
    if (id === DEFAULT_DOMAIN.id) throw forbidden('identity:update_domain');
    if (b.name === DEFAULT_DOMAIN.name) throw new IdentityError(409, 'Conflict', `Conflict occurred attempting to store domain - Duplicate entry found with name ${b.name}.`);
    const d = await store.updateDomain(id, b);
    if (b.enabled === false) await revokeDomainTokens(id);
    return ok(200, { domain: domainView(d, baseUrl) });
  }
  if (method === 'DELETE') {
    enforce(caller, 'identity:delete_domain');
    if (id === DEFAULT_DOMAIN.id) throw forbidden('identity:delete_domain');
    const d = await mustDomain(id);
    if (!(await store.deleteDomainRecord(d))) throw new IdentityError(403, 'Forbidden', 'Cannot delete a domain that is enabled, please disable it first.');
    // The record is gone first: no project or user can be created in it any more (their creation
    // checks the domain in its transaction), so the cascade below misses none.
    const [projects, users] = await Promise.all([store.listProjects(), store.listUsers()]);
    // Leaves first: a project is deleted only once no child counts on it (store.deleteProject).
    for (const p of leavesFirst(projects.filter((x) => x.domainId === id))) await store.deleteProject(p).catch(ignoreGone);
    for (const u of users.filter((x) => x.domainId === id)) await store.deleteUser(u).catch(ignoreGone);
    return ok(204);
  }
  throw notFound('resource', 'the requested path');
}

/** The projects ordered deepest first, so that each comes before its parent. */
function leavesFirst<P extends { id: string; parentId?: string }>(projects: P[]): P[] {
  const byId = new Map(projects.map((p) => [p.id, p]));
  const depth = (p: P): number => {
    let d = 0;
    for (let at = p.parentId ? byId.get(p.parentId) : undefined; at && d < projects.length; at = at.parentId ? byId.get(at.parentId) : undefined) d++;
    return d;
  };
  return [...projects].sort((a, b) => depth(b) - depth(a));
}

const ignoreGone = (e: unknown) => {
  if (!(e instanceof IdentityError && e.status === 404)) throw e;
};
