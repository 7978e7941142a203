/**
 * Keystone's resource routes under /identity/v3: projects, users, roles, role assignments,
 * application credentials and the one domain. Each route enforces functions/identity/policy.ts
 * against the caller its token stands for.
 */
import { randomBytes } from 'node:crypto';
import {
  appCredentialView,
  assignmentView,
  badRequest,
  DEFAULT_DOMAIN,
  notFound,
  projectView,
  roleView,
  unauthorized,
  userView,
  type Project,
  type Role,
  type User,
} from './model.js';
import { hashSecret, verifySecret } from './passwords.js';
import { domains, findDomain } from './domains.js';
import { revokeUserTokens } from '../auth/tokens.js';
import { enforce, type Caller } from './policy.js';
import { effectiveRoles } from './authenticate.js';
import * as store from './store.js';

export interface IdentityRequest {
  method: string;
  /** Path segments after `/identity/v3`. */
  parts: string[];
  query: URLSearchParams;
  body: unknown;
  baseUrl: string;
  caller: () => Promise<Caller>;
}

export interface IdentityResponse {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

type Obj = Record<string, unknown>;
const ok = (status: number, body?: unknown): IdentityResponse => ({ status, body });

function entity(body: unknown, name: string): Obj {
  const e = (body as Obj | undefined)?.[name];
  if (typeof e !== 'object' || e === null || Array.isArray(e)) throw badRequest(`Invalid input for field '${name}': an object is required`);
  return e as Obj;
}
function optString(o: Obj, field: string, max = 255): string | undefined {
  const v = o[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string' || v.length > max) throw badRequest(`Invalid input for field '${field}': a string of at most ${max} characters is required`);
  return v;
}
/** Keystone's name limits: 64 for projects and domains (resource/schema.py), 255 for users, roles, credentials. */
function reqName(o: Obj, max = 255): string {
  const name = optString(o, 'name', max);
  if (!name || !name.trim()) throw badRequest("Invalid input for field 'name': a non-empty string is required");
  return name;
}
function optName(o: Obj, max = 255): string | undefined {
  return o.name === undefined ? undefined : reqName(o, max);
}
/** Project tags: unique strings of 1 to 255 characters without `/` or `,` (Keystone's tag pattern), at most 80. */
function optTags(o: Obj): string[] | undefined {
  const t = o.tags;
  if (t === undefined) return undefined;
  const valid = Array.isArray(t) && t.length <= 80 && new Set(t).size === t.length && t.every((x) => typeof x === 'string' && x.length > 0 && x.length <= 255 && !/[,/]/.test(x));
  if (!valid) throw badRequest("Invalid input for field 'tags': a list of unique tags is required");
  return t as string[];
}
/** oslo's bool_from_string for a query filter (`enabled=False`); null when absent. */
function queryBool(q: URLSearchParams, name: string): boolean | null {
  const v = q.get(name);
  if (v === null) return null;
  return ['', 'true', '1', 'yes', 'on', 't', 'y'].includes(v.toLowerCase());
}
const enabledFilter = <T extends { enabled: boolean }>(items: T[], q: URLSearchParams) => {
  const want = queryBool(q, 'enabled');
  return want === null ? items : items.filter((i) => i.enabled === want);
};
const domainFilter = <T extends { domainId: string }>(items: T[], q: URLSearchParams) => items.filter((i) => !q.get('domain_id') || i.domainId === q.get('domain_id'));
/** A user's attributes Keystone has no column for: kept as given (its `extra`), e.g. tempest's `project_id`. */
const USER_FIELDS = new Set(['id', 'name', 'domain_id', 'enabled', 'password', 'default_project_id', 'email', 'description', 'options', 'federated', 'links', 'password_expires_at']);
function extraOf(o: Obj): Record<string, unknown> | undefined {
  const extra = Object.fromEntries(Object.entries(o).filter(([k]) => !USER_FIELDS.has(k)));
  return Object.keys(extra).length ? extra : undefined;
}
function optBool(o: Obj, field: string): boolean | undefined {
  const v = o[field];
  if (v === undefined) return undefined;
  if (typeof v !== 'boolean') throw badRequest(`Invalid input for field '${field}': a boolean is required`);
  return v;
}
async function domainOf(o: Obj): Promise<string> {
  const d = optString(o, 'domain_id', 64) ?? DEFAULT_DOMAIN.id;
  if (!(await findDomain(d))) throw notFound('domain', d);
  return d;
}
const list = (name: string, items: unknown[], baseUrl: string, path: string) => ok(200, { [name]: items, links: { self: `${baseUrl}/identity/v3/${path}`, previous: null, next: null } });
const byName = <T extends { name: string }>(items: T[], q: URLSearchParams) => items.filter((i) => !q.get('name') || i.name === q.get('name')).sort((a, b) => a.name.localeCompare(b.name));

async function projects(req: IdentityRequest, caller: Caller): Promise<IdentityResponse> {
  const [, id, sub, userId, , roleId] = req.parts;
  const { baseUrl, method } = req;
  if (id === undefined) {
    if (method === 'GET') {
      enforce(caller, 'identity:list_projects');
      const found = domainFilter(enabledFilter(byName(await store.listProjects(), req.query), req.query), req.query).filter((p) => !req.query.get('parent_id') || (p.parentId ?? p.domainId) === req.query.get('parent_id'));
      return list('projects', found.map((p) => projectView(p, baseUrl)), baseUrl, 'projects');
    }
    if (method === 'POST') {
      enforce(caller, 'identity:create_project');
      const e = entity(req.body, 'project');
      const name = reqName(e, 64);
      const parentId = optString(e, 'parent_id', 64);
      const parent = parentId === undefined ? undefined : await store.getProject(parentId);
      if (parentId !== undefined && !parent) throw notFound('project', parentId);
      // Under a parent the project is in the parent's domain (Keystone refuses another one).
      const domainId = parent && e.domain_id === undefined ? parent.domainId : await domainOf(e);
      if (parent && parent.domainId !== domainId) throw badRequest('Cannot create project, since it specifies its domain_id, but specifies a parent in a different domain.');
      const tags = optTags(e);
      const p: Project = { id: store.newId(), name, domainId, description: optString(e, 'description', 65535) ?? '', enabled: optBool(e, 'enabled') ?? true, ...(parent ? { parentId: parent.id } : {}), ...(tags ? { tags } : {}) };
      await store.createProject(p);
      return ok(201, { project: projectView(p, baseUrl) });
    }
  } else if (sub === undefined) {
    if (method === 'GET') {
      enforce(caller, 'identity:get_project', { projectId: id });
      return ok(200, { project: projectView(await store.mustProject(id), baseUrl) });
    }
    if (method === 'PATCH') {
      enforce(caller, 'identity:update_project');
      const e = entity(req.body, 'project');
      const changes = { name: optName(e, 64), description: optString(e, 'description', 65535), enabled: optBool(e, 'enabled'), tags: optTags(e) };
      return ok(200, { project: projectView(await store.updateProject(id, changes), baseUrl) });
    }
    if (method === 'DELETE') {
      enforce(caller, 'identity:delete_project');
      await store.deleteProject(await store.mustProject(id));
      return ok(204);
    }
  } else if (sub === 'users' && userId !== undefined && req.parts[4] === 'roles') {
    if (roleId === undefined && method === 'GET') {
      enforce(caller, 'identity:list_grants');
      const grants = await store.listAssignments({ projectId: id, userId });
      const roles = (await store.listRoles()).filter((r) => grants.some((g) => g.roleId === r.id));
      return list('roles', roles.map((r) => roleView(r, baseUrl)), baseUrl, req.parts.join('/'));
    }
    if (roleId !== undefined && req.parts.length === 6) {
      const grant = { projectId: id, userId, roleId };
      if (method === 'PUT') {
        enforce(caller, 'identity:create_grant');
        await store.createAssignment(grant);
        return ok(204);
      }
      if (method === 'GET' || method === 'HEAD') {
        enforce(caller, 'identity:check_grant');
        const found = (await store.listAssignments(grant)).some((g) => g.roleId === roleId);
        if (!found) throw notFound('role assignment', `${roleId}`);
        return ok(204);
      }
      if (method === 'DELETE') {
        enforce(caller, 'identity:revoke_grant');
        if (!(await store.deleteAssignment(grant))) throw notFound('role assignment', roleId);
        return ok(204);
      }
    }
  }
  return methodNotFound();
}

async function users(req: IdentityRequest, caller: Caller): Promise<IdentityResponse> {
  const [, id, sub, credId] = req.parts;
  const { baseUrl, method } = req;
  if (id === undefined) {
    if (method === 'GET') {
      enforce(caller, 'identity:list_users');
      const found = domainFilter(enabledFilter(byName(await store.listUsers(), req.query), req.query), req.query);
      return list('users', found.map((u) => userView(u, baseUrl)), baseUrl, 'users');
    }
    if (method === 'POST') {
      enforce(caller, 'identity:create_user');
      const e = entity(req.body, 'user');
      const password = optString(e, 'password', 4096);
      const defaultProjectId = optString(e, 'default_project_id');
      if (defaultProjectId) await store.mustProject(defaultProjectId);
      const u: User = {
        id: store.newId(),
        name: reqName(e),
        domainId: await domainOf(e),
        enabled: optBool(e, 'enabled') ?? true,
        extra: extraOf(e),
        defaultProjectId,
        email: optString(e, 'email'),
        description: optString(e, 'description', 65535),
        passwordHash: password === undefined ? undefined : await hashSecret(password),
      };
      await store.createUser(u);
      return ok(201, { user: userView(u, baseUrl) });
    }
  } else if (sub === undefined) {
    if (method === 'GET') {
      enforce(caller, 'identity:get_user', { userId: id });
      return ok(200, { user: userView(await store.mustUser(id), baseUrl) });
    }
    if (method === 'PATCH') {
      enforce(caller, 'identity:update_user');
      const e = entity(req.body, 'user');
      const password = optString(e, 'password', 4096);
      const extra = extraOf(e);
      const u = await store.updateUser(id, {
        name: optName(e),
        extra: extra && { ...(await store.mustUser(id)).extra, ...extra },
        enabled: optBool(e, 'enabled'),
        email: optString(e, 'email'),
        description: optString(e, 'description', 65535),
        defaultProjectId: optString(e, 'default_project_id'),
        passwordHash: password === undefined ? undefined : await hashSecret(password),
      });
      return ok(200, { user: userView(u, baseUrl) });
    }
    if (method === 'DELETE') {
      enforce(caller, 'identity:delete_user');
      await store.deleteUser(await store.mustUser(id));
      return ok(204);
    }
  } else if (sub === 'projects' && credId === undefined && method === 'GET') {
    enforce(caller, 'identity:list_user_projects', { userId: id });
    return list('projects', (await projectsOf(id)).map((p) => projectView(p, baseUrl)), baseUrl, `users/${id}/projects`);
  } else if (sub === 'application_credentials') {
    return appCredentials(req, caller, id, credId);
  }
  return methodNotFound();
}

/**
 * POST /v3/users/{id}/password: the user changes its own password, proving the original one (no
 * policy, as Keystone: the original password is the proof). 401 when it is wrong; the user's
 * tokens are revoked.
 */
async function changePassword(req: IdentityRequest, id: string): Promise<IdentityResponse> {
  const e = entity(req.body, 'user');
  const original = e.original_password;
  const password = e.password;
  if (typeof original !== 'string') throw badRequest("Invalid input for field 'original_password': a string is required");
  if (typeof password !== 'string' || password.length > 4096) throw badRequest("Invalid input for field 'password': a string is required");
  const user = await store.getUser(id);
  if (!user || !user.enabled || !(await verifySecret(original, user.passwordHash))) throw unauthorized('Error when changing user password: Invalid user / password');
  await store.updateUser(id, { passwordHash: await hashSecret(password) });
  await revokeUserTokens(id);
  return ok(204);
}

async function appCredentials(req: IdentityRequest, caller: Caller, userId: string, credId: string | undefined): Promise<IdentityResponse> {
  const { baseUrl, method } = req;
  if (credId === undefined && method === 'GET') {
    enforce(caller, 'identity:list_application_credentials', { userId });
    return list('application_credentials', byName(await store.listAppCredentials(userId), req.query).map((c) => appCredentialView(c, baseUrl)), baseUrl, req.parts.join('/'));
  }
  if (credId === undefined && method === 'POST') {
    enforce(caller, 'identity:create_application_credential', { userId });
    if (!caller.projectId) throw badRequest('An application credential needs a project-scoped token.');
    const e = entity(req.body, 'application_credential');
    const held = await effectiveRoles(userId, caller.projectId);
    const asked = e.roles === undefined ? held : Array.isArray(e.roles) ? e.roles : undefined;
    if (!asked) throw badRequest("Invalid input for field 'roles': a list is required");
    const roles = asked.map((r) => held.find((h) => h.id === (r as Obj)?.id || h.name === (r as Obj)?.name));
    if (roles.some((r) => !r)) throw badRequest('The application credential may only hold roles the user has on the project.');
    const expiresAt = optString(e, 'expires_at') ?? null;
    if (expiresAt !== null && Number.isNaN(Date.parse(expiresAt))) throw badRequest("Invalid input for field 'expires_at'");
    const secret = optString(e, 'secret', 4096) ?? randomBytes(48).toString('base64url');
    const cred = {
      id: store.newId(),
      name: reqName(e),
      userId,
      projectId: caller.projectId,
      description: optString(e, 'description', 65535) ?? '',
      roles: roles as { id: string; name: string }[],
      expiresAt,
      unrestricted: optBool(e, 'unrestricted') ?? false,
      secretHash: await hashSecret(secret),
    };
    await store.createAppCredential(cred);
    return ok(201, { application_credential: { ...appCredentialView(cred, baseUrl), secret } });
  }
  if (credId !== undefined && req.parts.length === 4) {
    const action = method === 'DELETE' ? 'identity:delete_application_credential' : 'identity:get_application_credential';
    enforce(caller, action, { userId });
    const cred = await store.getAppCredential(credId);
    if (!cred || cred.userId !== userId) throw notFound('application credential', credId);
    if (method === 'GET') return ok(200, { application_credential: appCredentialView(cred, baseUrl) });
    if (method === 'DELETE') {
      await store.deleteAppCredential(cred);
      return ok(204);
    }
  }
  return methodNotFound();
}

async function roles(req: IdentityRequest, caller: Caller): Promise<IdentityResponse> {
  const [, id] = req.parts;
  const { baseUrl, method } = req;
  if (id === undefined && method === 'GET') {
    enforce(caller, 'identity:list_roles');
    return list('roles', byName(await store.listRoles(), req.query).map((r) => roleView(r, baseUrl)), baseUrl, 'roles');
  }
  if (id === undefined && method === 'POST') {
    enforce(caller, 'identity:create_role');
    const e = entity(req.body, 'role');
    const r: Role = { id: store.newId(), name: reqName(e), domainId: null, description: optString(e, 'description', 65535) ?? '' };
    await store.createRole(r);
    return ok(201, { role: roleView(r, baseUrl) });
  }
  if (id !== undefined && req.parts.length === 2 && method === 'GET') {
    enforce(caller, 'identity:get_role');
    return ok(200, { role: roleView(await store.mustRole(id), baseUrl) });
  }
  if (id !== undefined && req.parts.length === 2 && method === 'DELETE') {
    enforce(caller, 'identity:delete_role');
    await store.deleteRole(await store.mustRole(id));
    return ok(204);
  }
  return methodNotFound();
}

async function roleAssignments(req: IdentityRequest, caller: Caller): Promise<IdentityResponse> {
  if (req.method !== 'GET' || req.parts.length !== 1) return methodNotFound();
  const userId = req.query.get('user.id') ?? undefined;
  const projectId = req.query.get('scope.project.id') ?? undefined;
  enforce(caller, 'identity:list_role_assignments');
  const found = await store.listAssignments({ userId, projectId });
  const roleId = req.query.get('role.id');
  const views = found.filter((a) => !roleId || a.roleId === roleId).map((a) => assignmentView(a, req.baseUrl));
  // oslo's bool_from_string, as Keystone reads the flag (the CLI sends `True`).
  if (!['', 'true', '1', 'yes', 'on', 't', 'y'].includes((req.query.get('include_names') ?? 'no').toLowerCase())) return list('role_assignments', views, req.baseUrl, 'role_assignments');
  // include_names: each reference gets its name (and its domain), as Keystone's does.
  const [roles, users, projects] = await Promise.all([store.listRoles(), store.listUsers(), store.listProjects()]);
  const domainNames = new Map([[DEFAULT_DOMAIN.id, DEFAULT_DOMAIN.name], ...(await store.listDomains()).map((d) => [d.id, d.name] as [string, string])]);
  const domain = (id: string | undefined) => ({ id, name: id === undefined ? undefined : domainNames.get(id) });
  const named = views.map((v) => {
    const user = users.find((u) => u.id === v.user.id);
    const project = projects.find((p) => p.id === v.scope.project.id);
    return {
      ...v,
      role: { ...v.role, name: roles.find((r) => r.id === v.role.id)?.name },
      user: { ...v.user, name: user?.name, domain: domain(user?.domainId) },
      scope: { project: { ...v.scope.project, name: project?.name, domain: domain(project?.domainId) } },
    };
  });
  return list('role_assignments', named, req.baseUrl, 'role_assignments');
}

/** The enabled projects the user holds a role on. */
export async function projectsOf(userId: string): Promise<Project[]> {
  const ids = [...new Set((await store.listAssignments({ userId })).map((a) => a.projectId))];
  const found = await Promise.all(ids.map((id) => store.getProject(id)));
  return found.filter((p): p is Project => !!p?.enabled).sort((a, b) => a.name.localeCompare(b.name));
}

function methodNotFound(): never {
  throw notFound('resource', 'the requested path');
}

/** The resource routes; undefined when the path is none of them. */
export async function resourceRoute(req: IdentityRequest): Promise<IdentityResponse | undefined> {
  const collection = req.parts[0];
  const handlers: Record<string, (r: IdentityRequest, c: Caller) => Promise<IdentityResponse>> = {
    projects,
    users,
    roles,
    role_assignments: roleAssignments,
    domains,
  };
  const h = collection === undefined ? undefined : handlers[collection];
  if (!h) return undefined;
  // Changing one's password needs no token: the original password is the proof (Keystone's too).
  if (collection === 'users' && req.parts[2] === 'password' && req.parts.length === 3 && req.method === 'POST') return changePassword(req, req.parts[1]!);
  return h(req, await req.caller());
}
