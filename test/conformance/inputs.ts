/**
 * What Tempest's configuration needs, read from a running stack as a client would: the clouds.yaml
 * that `npm start` writes (users, passwords, projects), a token from /identity, the version
 * documents (microversion ranges), the scheduler's pools (backend names, protocol, vendor), the
 * flavors, images and hypervisors. Nothing is hard-coded that the stack can say.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parse } from 'yaml';
import type { Account, Microversions, TempestInputs } from './config.js';

export class StackNotReady extends Error {
  override name = 'StackNotReady';
}

interface CloudEntry {
  auth: { auth_url: string; username: string; password: string; project_name: string; user_domain_name?: string; project_domain_name?: string };
}

/** The clouds `ferry-admin` and `ferry-demo` of `<data dir>/clouds.yaml` as Tempest accounts. */
export async function cloudsAccounts(dataDir: string): Promise<{ admin: Account; demo: Account; authUrl: string }> {
  const file = join(dataDir, 'clouds.yaml');
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch {
    throw new StackNotReady(`${file} is missing: the stack's identity (functions/identity) writes it at start`);
  }
  const clouds = (parse(text) as { clouds?: Record<string, CloudEntry> }).clouds ?? {};
  const account = (name: string, roles: string[]): Account => {
    const c = clouds[name];
    if (!c) throw new StackNotReady(`${file} names no cloud ${name}`);
    return {
      username: c.auth.username,
      password: c.auth.password,
      projectName: c.auth.project_name,
      userDomainName: c.auth.user_domain_name ?? 'Default',
      projectDomainName: c.auth.project_domain_name ?? 'Default',
      roles,
    };
  };
  return { admin: account('ferry-admin', ['admin']), demo: account('ferry-demo', ['member']), authUrl: clouds['ferry-admin']!.auth.auth_url };
}

/** A project-scoped token (POST /identity/v3/auth/tokens), as any Keystone client gets one. */
export async function issueToken(baseUrl: string, a: Account): Promise<string> {
  const r = await fetch(`${baseUrl}/identity/v3/auth/tokens`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      auth: {
        identity: { methods: ['password'], password: { user: { name: a.username, password: a.password, domain: { name: a.userDomainName } } } },
        scope: { project: { name: a.projectName, domain: { name: a.projectDomainName } } },
      },
    }),
  });
  const token = r.headers.get('x-subject-token');
  if (r.status !== 201 || !token) throw new StackNotReady(`POST /identity/v3/auth/tokens as ${a.username}: ${r.status} ${await r.text()}`);
  return token;
}

export class StackClient {
  constructor(
    readonly baseUrl: string,
    private readonly token: string,
  ) {}

  async call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
    const r = await fetch(this.baseUrl + path, {
      method,
      headers: { 'x-auth-token': this.token, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      /* not JSON: keep the text */
    }
    return { status: r.status, body: parsed };
  }

  async get(path: string, headers: Record<string, string> = {}): Promise<any> {
    const r = await this.call('GET', path, undefined, headers);
    if (r.status >= 400) throw new StackNotReady(`GET ${path}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }
}

/** The range of the entry of `GET <root>/` (300, `versions`) with the given id. */
async function microversions(client: StackClient, root: string, id: string): Promise<Microversions> {
  const r = await client.call('GET', root);
  const v = (r.body?.versions as { id: string; version: string; min_version: string }[] | undefined)?.find((x) => x.id === id);
  if (!v) throw new StackNotReady(`GET ${root}: no version ${id} in ${JSON.stringify(r.body)}`);
  return { min: v.min_version, max: v.version };
}

/**
 * Whether Tempest can make its own credentials (dynamic): Keystone's V3CredsClient looks the
 * domain up by name, then creates a project, a user and a role assignment per test class. A
 * probe project is created and deleted to know the admin may.
 */
export async function canCreateCredentials(admin: StackClient): Promise<boolean> {
  const domains = await admin.call('GET', '/identity/v3/domains?name=Default');
  if (domains.status !== 200 || !domains.body?.domains?.length) return false;
  const created = await admin.call('POST', '/identity/v3/projects', { project: { name: `tempest-probe-${Date.now()}`, domain_id: 'default' } });
  if (created.status !== 201) return false;
  const del = await admin.call('DELETE', `/identity/v3/projects/${created.body.project.id}`);
  return del.status === 204;
}

export async function stackInputs(
  baseUrl: string,
  workspace: string,
  admin: Account,
  adminClient: StackClient,
  credentials: TempestInputs['credentials'],
): Promise<TempestInputs> {
  const volume = await microversions(adminClient, '/volume/', 'v3.0');
  const compute = await microversions(adminClient, '/compute/', 'v2.1');
  const pools = (await adminClient.get('/volume/v3/scheduler-stats/get_pools?detail=true')).pools as { name: string; capabilities: Record<string, any> }[];
  // volume_backend_name is the pool name's part between '@' and '#' (ferry@lvm-a#pool0 → lvm-a).
  const backendNames = [...new Set(pools.map((p) => p.capabilities.volume_backend_name ?? /@([^#]+)/.exec(p.name)?.[1]).filter(Boolean))] as string[];
  const first = pools[0]?.capabilities ?? {};
  // Nova's order (by flavorid): in the sandbox 1 and 2 are the same hardware generation, so a
  // resize between them stays in one cell, as on a cloud with one kind of host.
  const flavors = (await adminClient.get('/compute/v2.1/flavors')).flavors as { id: string }[];
  const images = (await adminClient.get('/compute/v2.1/images')).images as { id: string; name: string }[];
  const hypervisors = (await adminClient.get('/compute/v2.1/os-hypervisors')).hypervisors as unknown[];
  const extensions = await adminClient.call('GET', '/network/v2.0/extensions');
  const networkExtensions = extensions.status === 200 ? ((extensions.body?.extensions ?? []) as { alias: string }[]).map((e) => e.alias) : [];
  const volumeExtensions = ((await adminClient.get('/volume/v3/extensions')).extensions as { alias: string }[]).map((e) => e.alias);
  if (flavors.length < 2 || images.length < 2) throw new StackNotReady(`Tempest needs two flavors and two images; the stack has ${flavors.length} and ${images.length}`);
  return {
    baseUrl,
    workspace,
    admin,
    credentials,
    volume,
    compute,
    backendNames,
    storageProtocol: first.storage_protocol ?? 'local',
    vendorName: first.vendor_name ?? 'Ferry',
    flavorRef: flavors[0]!.id,
    flavorRefAlt: flavors[1]!.id,
    imageRef: images[0]!.id,
    imageRefAlt: images[1]!.id,
    networkName: 'private',
    computeNodes: Math.max(1, hypervisors.length),
    networkExtensions,
    volumeExtensions,
  };
}
