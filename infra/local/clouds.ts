/**
 * The local stack's identity: at every start the `admin` user (role admin on project `admin`) and
 * the `demo` user (member and reader on project `demo`) exist, and `<data dir>/clouds.yaml`
 * names them as the clouds `ferry-admin` and `ferry-demo`, so that
 * `OS_CLIENT_CONFIG_FILE=.ferry/clouds.yaml openstack --os-cloud ferry-demo volume list` works.
 *
 * The passwords are random on the first start and kept in clouds.yaml (only their hashes are in
 * the table); a later start reads them back, so they stay. A clouds.yaml lost or edited gets new
 * passwords written to both.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { parse, stringify } from 'yaml';
import { ensureUser, type SeedUser } from '../../functions/identity/seed.js';

export const CLOUDS_FILE = 'clouds.yaml';

const SEEDED: readonly (Omit<SeedUser, 'password'> & { cloud: string })[] = [
  { cloud: 'ferry-admin', name: 'admin', project: 'admin', roles: ['admin'] },
  { cloud: 'ferry-demo', name: 'demo', project: 'demo', roles: ['member', 'reader'] },
];

type Clouds = { clouds?: Record<string, { auth?: { password?: unknown } }> };

function previousPasswords(file: string): Map<string, string> {
  const out = new Map<string, string>();
  if (!existsSync(file)) return out;
  try {
    const doc = parse(readFileSync(file, 'utf8')) as Clouds | null;
    for (const [cloud, c] of Object.entries(doc?.clouds ?? {})) {
      if (typeof c?.auth?.password === 'string' && c.auth.password) out.set(cloud, c.auth.password);
    }
  } catch {
    // Not YAML any more: written anew below.
  }
  return out;
}

/** Seeds the users and writes clouds.yaml for a stack answering on `url`; returns the file's path. */
export async function seedIdentity(dataDir: string, url: string): Promise<string> {
  const file = join(dataDir, CLOUDS_FILE);
  const passwords = previousPasswords(file);
  const clouds: Record<string, unknown> = {};
  const seeded = SEEDED.map((s) => ({ ...s, password: passwords.get(s.cloud) ?? randomBytes(18).toString('base64url') }));
  // Side by side: each is a few reads (and a slow hash to check the password); two starts of one role meet in a conditional write.
  await Promise.all(seeded.map((s) => ensureUser(s)));
  for (const { password, ...s } of seeded) {
    clouds[s.cloud] = {
      auth: {
        auth_url: `${url}/identity/v3`,
        username: s.name,
        password,
        project_name: s.project,
        user_domain_name: 'Default',
        project_domain_name: 'Default',
      },
      region_name: 'RegionOne',
      interface: 'public',
      identity_api_version: 3,
    };
  }
  // Written whole and renamed, so a reader never sees half a file; readable by its owner only (passwords).
  writeFileSync(`${file}.tmp`, stringify({ clouds }), { mode: 0o600 });
  renameSync(`${file}.tmp`, file);
  return file;
}
