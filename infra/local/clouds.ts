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
import { createHash, randomBytes } from 'node:crypto';
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

/** The seeded users with their passwords (from clouds.yaml when it has them): what writeCloudsYaml names. */
export type SeededUsers = readonly (SeedUser & { cloud: string })[];

/**
 * `<data dir>/identity-hashes.json`: per cloud, the stored hash last seen for its password, with a
 * digest binding the two. A restart whose password (clouds.yaml) and stored hash (the table) are
 * both unchanged skips the slow scrypt check (issue 16); a changed clouds.yaml or table is
 * checked as always.
 */
const KNOWN_HASHES_FILE = 'identity-hashes.json';
type KnownHashes = Record<string, { hash: string; digest: string }>;
const bind = (password: string, hash: string) => createHash('sha256').update(`${password}\n${hash}`).digest('hex');

function knownHashes(file: string): KnownHashes {
  if (!existsSync(file)) return {};
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as KnownHashes;
  } catch {
    // Unreadable: every password is checked the slow way, and the file written anew.
    return {};
  }
}

/** The admin and demo users exist with clouds.yaml's passwords (new ones when it has none). */
export async function seedUsers(dataDir: string): Promise<SeededUsers> {
  const passwords = previousPasswords(join(dataDir, CLOUDS_FILE));
  const hashesFile = join(dataDir, KNOWN_HASHES_FILE);
  const known = knownHashes(hashesFile);
  const seeded = SEEDED.map((s) => ({ ...s, password: passwords.get(s.cloud) ?? randomBytes(18).toString('base64url') }));
  // Side by side: each is a few reads (and a slow hash to check the password); two starts of one role meet in a conditional write.
  const hashes = await Promise.all(
    seeded.map(async (s) => {
      const was = known[s.cloud];
      const knownHash = was && was.digest === bind(s.password, was.hash) ? was.hash : undefined;
      return (await ensureUser(s, { knownHash })).passwordHash;
    }),
  );
  const next: KnownHashes = {};
  seeded.forEach((s, i) => {
    const hash = hashes[i];
    if (hash) next[s.cloud] = { hash, digest: bind(s.password, hash) };
  });
  writeFileSync(`${hashesFile}.tmp`, JSON.stringify(next), { mode: 0o600 });
  renameSync(`${hashesFile}.tmp`, hashesFile);
  return seeded;
}

/** Writes clouds.yaml naming `users` for a stack answering on `url`; returns the file's path. */
export function writeCloudsYaml(dataDir: string, url: string, users: SeededUsers): string {
  const file = join(dataDir, CLOUDS_FILE);
  const clouds: Record<string, unknown> = {};
  for (const { password, ...s } of users) {
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

/** Seeds the users and writes clouds.yaml for a stack answering on `url`; returns the file's path. */
export async function seedIdentity(dataDir: string, url: string): Promise<string> {
  return writeCloudsYaml(dataDir, url, await seedUsers(dataDir));
}
