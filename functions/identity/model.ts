/**
 * Keystone v3 as data: the records the identity API keeps, its error bodies, the token body and
 * the service catalog. Pure: no I/O, so the shapes the OpenStack clients parse are unit-tested.
 */
import { createHash } from 'node:crypto';
import type { TokenSubject } from '../auth/tokens.js';

export type { TokenSubject };

/** Keystone's one domain here; its id and name are upstream's defaults (`default` / `Default`). */
export const DEFAULT_DOMAIN = { id: 'default', name: 'Default' } as const;
export const REGION = 'RegionOne';
/** Keystone's default token lifetime ([token] expiration = 3600). */
export const TOKEN_TTL_SECONDS = 3600;

export interface Domain {
  id: string;
  name: string;
  description: string;
  enabled: boolean;
}

export interface Project {
  id: string;
  name: string;
  domainId: string;
  description: string;
  enabled: boolean;
  /** Absent: the domain is the parent (Keystone's top-level project). */
  parentId?: string;
  tags?: string[];
}

export interface User {
  id: string;
  name: string;
  domainId: string;
  enabled: boolean;
  defaultProjectId?: string;
  email?: string;
  description?: string;
  /** `scrypt$<salt>$<hash>` (functions/identity/passwords.ts); never answered. */
  passwordHash?: string;
  /** Attributes Keystone does not know, kept and answered as given (its `extra` column). */
  extra?: Record<string, unknown>;
}

export interface Role {
  id: string;
  name: string;
  domainId: null;
  description: string;
}

export interface Assignment {
  projectId: string;
  userId: string;
  roleId: string;
}

export interface AppCredential {
  id: string;
  name: string;
  userId: string;
  projectId: string;
  description: string;
  roles: { id: string; name: string }[];
  /** ISO time or null (never). A string, so the table's TTL (which reads numbers only) never deletes the record. */
  expiresAt: string | null;
  unrestricted: boolean;
  secretHash: string;
}

/** Keystone's error body: `{"error": {"code", "message", "title"}}`. */
export class IdentityError extends Error {
  constructor(
    readonly status: number,
    readonly title: string,
    message: string,
  ) {
    super(message);
  }
  body() {
    return { error: { code: this.status, message: this.message, title: this.title } };
  }
}

export const unauthorized = (message = 'The request you have made requires authentication.') => new IdentityError(401, 'Unauthorized', message);
export const forbidden = (action: string) => new IdentityError(403, 'Forbidden', `You are not authorized to perform the requested action: ${action}.`);
export const notFound = (kind: string, id: string) => new IdentityError(404, 'Not Found', `Could not find ${kind}: ${id}.`);
export const badRequest = (message: string) => new IdentityError(400, 'Bad Request', message);
export const conflict = (kind: string, field: string, value: string) =>
  new IdentityError(409, 'Conflict', `Conflict occurred attempting to store ${kind} - Duplicate entry found with ${field} ${value}.`);

/** Keystone's time format: microseconds, `Z` (`2015-11-05T22:00:11.000000Z`). */
export function keystoneTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

/** The services Ferry answers, by catalog type, and the path of each under the base URL. */
export const SERVICES: readonly { type: string; name: string; path: string }[] = [
  { type: 'identity', name: 'keystone', path: '/identity' },
  { type: 'volumev3', name: 'cinderv3', path: '/volume/v3' },
  { type: 'block-storage', name: 'cinder', path: '/volume/v3' },
  { type: 'sharev2', name: 'manilav2', path: '/share/v2' },
  { type: 'shared-file-system', name: 'manila', path: '/share/v2' },
  { type: 'compute', name: 'nova', path: '/compute/v2.1' },
  { type: 'image', name: 'glance', path: '/image' },
  { type: 'network', name: 'neutron', path: '/network' },
];

/** Stable ids from the type (Keystone's are random; nothing refers to them but the catalog). */
const stableId = (s: string) => createHash('sha256').update(s).digest('hex').slice(0, 32);

/** The catalog for a caller who came in on `baseUrl` (no trailing slash): every service, three interfaces, one URL. */
export function catalog(baseUrl: string) {
  return SERVICES.map((s) => ({
    id: stableId(s.type),
    type: s.type,
    name: s.name,
    endpoints: (['public', 'internal', 'admin'] as const).map((iface) => ({
      id: stableId(`${s.type}-${iface}`),
      interface: iface,
      region: REGION,
      region_id: REGION,
      url: baseUrl + s.path,
    })),
  }));
}

const domainRef = (id: string, name?: string) => ({ id, name: name ?? (id === DEFAULT_DOMAIN.id ? DEFAULT_DOMAIN.name : id) });

/** The body of a token answer (POST and GET /v3/auth/tokens). */
export function tokenBody(t: TokenSubject, options: { baseUrl?: string } = {}) {
  return {
    token: {
      methods: t.methods,
      user: { id: t.userId, name: t.userName, domain: domainRef(t.userDomainId, t.userDomainName), password_expires_at: null },
      audit_ids: t.auditIds,
      expires_at: t.expiresAt,
      issued_at: t.issuedAt,
      ...(t.project
        ? {
            project: { id: t.project.id, name: t.project.name, domain: domainRef(t.project.domainId, t.project.domainName) },
            is_domain: false,
            roles: t.roles.map((r) => ({ id: r.id, name: r.name })),
          }
        : {}),
      ...(t.applicationCredentialId ? { application_credential: { id: t.applicationCredentialId, restricted: true } } : {}),
      ...(options.baseUrl !== undefined && t.project ? { catalog: catalog(options.baseUrl) } : {}),
    },
  };
}

/**
 * Keystone's default roles imply each other (admin -> member -> reader); a token lists the implied
 * roles too, as upstream's does.
 */
export const IMPLIED: Record<string, string[]> = { admin: ['member', 'reader'], member: ['reader'] };

export function withImplied(roles: readonly Role[], all: readonly Role[]): { id: string; name: string }[] {
  const byName = new Map(all.map((r) => [r.name, r]));
  const out = new Map<string, { id: string; name: string }>();
  const add = (r: Role) => {
    if (out.has(r.id)) return;
    out.set(r.id, { id: r.id, name: r.name });
    for (const n of IMPLIED[r.name] ?? []) {
      const implied = byName.get(n);
      if (implied) add(implied);
    }
  };
  roles.forEach(add);
  return [...out.values()];
}

const link = (baseUrl: string, path: string) => ({ self: `${baseUrl}/identity/v3${path}` });

export const projectView = (p: Project, baseUrl: string) => ({
  id: p.id,
  name: p.name,
  domain_id: p.domainId,
  description: p.description,
  enabled: p.enabled,
  parent_id: p.parentId ?? p.domainId,
  is_domain: false,
  tags: p.tags ?? [],
  options: {},
  links: link(baseUrl, `/projects/${p.id}`),
});

export const userView = (u: User, baseUrl: string) => ({
  ...(u.extra ?? {}),
  id: u.id,
  name: u.name,
  domain_id: u.domainId,
  enabled: u.enabled,
  password_expires_at: null,
  options: {},
  ...(u.defaultProjectId ? { default_project_id: u.defaultProjectId } : {}),
  ...(u.email ? { email: u.email } : {}),
  ...(u.description ? { description: u.description } : {}),
  links: link(baseUrl, `/users/${u.id}`),
});

export const domainView = (d: Domain, baseUrl: string) => ({
  id: d.id,
  name: d.name,
  description: d.description,
  enabled: d.enabled,
  tags: [],
  options: {},
  links: link(baseUrl, `/domains/${d.id}`),
});

export const roleView = (r: Role, baseUrl: string) => ({
  id: r.id,
  name: r.name,
  domain_id: null,
  description: r.description,
  options: {},
  links: link(baseUrl, `/roles/${r.id}`),
});

export const appCredentialView = (c: AppCredential, baseUrl: string) => ({
  id: c.id,
  name: c.name,
  description: c.description,
  user_id: c.userId,
  project_id: c.projectId,
  roles: c.roles,
  expires_at: c.expiresAt,
  unrestricted: c.unrestricted,
  access_rules: [],
  links: link(baseUrl, `/users/${c.userId}/application_credentials/${c.id}`),
});

export const assignmentView = (a: Assignment, baseUrl: string) => ({
  role: { id: a.roleId },
  user: { id: a.userId },
  scope: { project: { id: a.projectId } },
  links: { assignment: `${baseUrl}/identity/v3/projects/${a.projectId}/users/${a.userId}/roles/${a.roleId}` },
});

/** Keystone's version document (its latest v3 minor); the same under `/identity` and `/identity/v3`. */
export function versionDoc(baseUrl: string) {
  return {
    id: 'v3.14',
    status: 'stable',
    updated: '2020-04-07T00:00:00Z',
    links: [{ rel: 'self', href: `${baseUrl}/identity/v3/` }],
    'media-types': [{ base: 'application/json', type: 'application/vnd.openstack.identity-v3+json' }],
  };
}
