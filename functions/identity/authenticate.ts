/**
 * POST /v3/auth/tokens: who the request proves to be (methods password, token,
 * application_credential) and what it asks to be scoped to, as Keystone answers it. Any failure to
 * prove who one is is the same 401 ("requires authentication"), as upstream, so a caller cannot
 * tell an unknown user from a wrong password.
 */
import { randomBytes } from 'node:crypto';
import { isExpired, readToken } from '../auth/tokens.js';
import { badRequest, keystoneTime, TOKEN_TTL_SECONDS, unauthorized, withImplied, type Project, type TokenSubject, type User } from './model.js';
import { domainEnabled, domainIdOf, findDomain } from './domains.js';
import { verifySecret } from './passwords.js';
import * as store from './store.js';

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown) => (typeof v === 'string' && v.length > 0 && v.length <= 255 ? v : undefined);

function obj(v: unknown, field: string): Obj {
  if (!isObj(v)) throw badRequest(`Invalid input for field '${field}': ${JSON.stringify(v) ?? 'None'} is not of type 'object'`);
  return v;
}

/** The enabled domain a `{"id"}` or `{"name"}` names; '' when none (nothing is found in it: 401 on auth). */
async function domainId(v: unknown, field: string): Promise<string> {
  const d = obj(v, field);
  if (d.id === undefined && d.name === undefined) throw badRequest(`Invalid input for field '${field}': id or name required`);
  const id = await domainIdOf(d);
  return id !== undefined && (await domainEnabled(id)) ? id : '';
}

async function userFrom(v: unknown, field: string): Promise<User> {
  const u = obj(v, field);
  let user: User | undefined;
  if (u.id !== undefined) user = str(u.id) ? await store.getUser(u.id as string) : undefined;
  else if (u.name !== undefined) {
    if (u.domain === undefined) throw badRequest(`Invalid input for field '${field}': domain is required with a user name`);
    const id = str(u.name) ? await store.userIdByName(await domainId(u.domain, `${field}/domain`), u.name as string) : undefined;
    user = id ? await store.getUser(id) : undefined;
  } else throw badRequest(`Invalid input for field '${field}': id or name required`);
  if (!user) throw unauthorized();
  if (!user.enabled) throw unauthorized(`The account is disabled for user: ${user.id}.`);
  if (!(await domainEnabled(user.domainId))) throw unauthorized(`Domain ${user.domainId} is disabled.`);
  return user;
}

interface Proven {
  user: User;
  methods: string[];
  /** From a token method: the original token's audit id and expiry, kept by the new token. */
  parent?: { auditId: string; expiresAt: string; project?: TokenSubject['project'] };
  /** From an application credential: its fixed project and roles. */
  appCredential?: { id: string; projectId: string; roles: { id: string; name: string }[] };
}

async function prove(identity: Obj): Promise<Proven> {
  const methods = identity.methods;
  if (!Array.isArray(methods) || methods.length === 0 || !methods.every((m) => typeof m === 'string')) {
    throw badRequest("Invalid input for field 'identity/methods': a non-empty list of strings is required");
  }
  const method = methods[0] as string;
  if (methods.length > 1 || !['password', 'token', 'application_credential'].includes(method)) throw unauthorized('Attempted to authenticate with an unsupported method.');
  const body = obj(identity[method], `identity/${method}`);
  if (method === 'password') {
    const user = await userFrom(body.user, 'identity/password/user');
    const password = (obj(body.user, 'identity/password/user') as Obj).password;
    if (typeof password !== 'string' || !(await verifySecret(password, user.passwordHash))) throw unauthorized();
    return { user, methods: ['password'] };
  }
  if (method === 'token') {
    const id = str(body.id);
    if (!id) throw badRequest("Invalid input for field 'identity/token/id': a string is required");
    const record = await readToken(id);
    if (!record?.identity || isExpired(record)) throw unauthorized();
    const user = await store.getUser(record.userId);
    if (!user?.enabled) throw unauthorized();
    const parent = record.identity;
    return { user, methods: parent.methods.includes('token') ? parent.methods : ['token', ...parent.methods], parent: { auditId: parent.auditIds[0]!, expiresAt: parent.expiresAt, project: parent.project } };
  }
  const secret = body.secret;
  let credId: string | undefined;
  if (body.id !== undefined) credId = str(body.id);
  else if (str(body.name)) {
    const owner = await userFrom(body.user, 'identity/application_credential/user');
    credId = await store.appCredentialIdByName(owner.id, body.name as string);
  } else throw badRequest("Invalid input for field 'identity/application_credential': id or name required");
  const cred = credId ? await store.getAppCredential(credId) : undefined;
  if (!cred || typeof secret !== 'string' || !(await verifySecret(secret, cred.secretHash))) throw unauthorized();
  if (cred.expiresAt && Date.parse(cred.expiresAt) <= Date.now()) throw unauthorized();
  const user = await store.getUser(cred.userId);
  if (!user?.enabled) throw unauthorized();
  return { user, methods: ['application_credential'], appCredential: { id: cred.id, projectId: cred.projectId, roles: cred.roles } };
}

async function scopeProject(scope: unknown): Promise<Project | undefined> {
  if (scope === undefined || scope === 'unscoped') return undefined;
  const s = obj(scope, 'scope');
  if (s.system !== undefined || s.domain !== undefined || s['OS-TRUST:trust'] !== undefined) throw unauthorized('Ferry scopes tokens to projects only.');
  const p = obj(s.project, 'scope/project');
  let id: string | undefined;
  if (p.id !== undefined) id = str(p.id);
  else if (p.name !== undefined) {
    if (p.domain === undefined) throw badRequest("Invalid input for field 'scope/project': domain is required with a project name");
    id = str(p.name) ? await store.projectIdByName(await domainId(p.domain, 'scope/project/domain'), p.name as string) : undefined;
  } else throw badRequest("Invalid input for field 'scope/project': id or name required");
  const project = id ? await store.getProject(id) : undefined;
  if (!project) throw unauthorized(`Could not find project: ${id ?? String(p.name)}.`);
  if (!project.enabled) throw unauthorized(`Project ${project.id} is disabled.`);
  if (!(await domainEnabled(project.domainId))) throw unauthorized(`Domain ${project.domainId} is disabled.`);
  return project;
}

/** The user's roles on the project, with the implied ones; 401 when there are none (Keystone's "no access"). */
export async function effectiveRoles(userId: string, projectId: string): Promise<{ id: string; name: string }[]> {
  const [grants, all] = await Promise.all([store.listAssignments({ projectId }), store.listRoles()]);
  const granted = all.filter((r) => grants.some((g) => g.userId === userId && g.roleId === r.id));
  return withImplied(granted, all);
}

/** Issues the subject of a new token for an /auth/tokens request body (the caller stores it). */
export async function authenticate(body: unknown, now = Date.now()): Promise<TokenSubject> {
  const auth = obj(obj(body, 'body').auth, 'auth');
  const proven = await prove(obj(auth.identity, 'identity'));
  const { user } = proven;
  let project: Project | undefined;
  let roles: { id: string; name: string }[] = [];
  if (proven.appCredential) {
    if (auth.scope !== undefined) throw unauthorized('Application credentials cannot request a scope.');
    project = await store.getProject(proven.appCredential.projectId);
    if (!project?.enabled) throw unauthorized();
    const current = await effectiveRoles(user.id, project.id);
    // The credential's roles, as far as the user still holds them.
    roles = proven.appCredential.roles.filter((r) => current.some((c) => c.id === r.id));
    if (roles.length === 0) throw unauthorized();
  } else {
    project = await scopeProject(auth.scope);
    if (!project && auth.scope === undefined && proven.parent?.project) project = await store.getProject(proven.parent.project.id);
    if (!project && auth.scope === undefined && user.defaultProjectId) {
      const p = await store.getProject(user.defaultProjectId);
      // Keystone falls back to unscoped when the default project is unusable.
      if (p?.enabled && (await effectiveRoles(user.id, p.id)).length > 0) project = p;
    }
    if (project) {
      roles = await effectiveRoles(user.id, project.id);
      if (roles.length === 0) throw unauthorized(`User ${user.id} has no access to project ${project.id}`);
    }
  }
  const auditId = randomBytes(16).toString('base64url').slice(0, 22);
  const expiresAt = proven.parent ? proven.parent.expiresAt : keystoneTime(now + TOKEN_TTL_SECONDS * 1000);
  const domainName = async (id: string) => (await findDomain(id))?.name;
  return {
    userId: user.id,
    userName: user.name,
    userDomainId: user.domainId,
    userDomainName: await domainName(user.domainId),
    ...(project ? { project: { id: project.id, name: project.name, domainId: project.domainId, domainName: await domainName(project.domainId) } } : {}),
    roles,
    methods: proven.methods,
    auditIds: proven.parent ? [auditId, proven.parent.auditId] : [auditId],
    issuedAt: keystoneTime(now),
    expiresAt,
    ...(proven.appCredential ? { applicationCredentialId: proven.appCredential.id } : {}),
  };
}
