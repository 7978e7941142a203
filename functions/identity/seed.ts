/**
 * The identity a fresh deployment starts with: Keystone's default roles (admin, member, reader),
 * and users each with roles on a project of their own name. Idempotent: whatever exists is kept
 * (its id above all, so project ids stay stable per data directory); a user whose password is not
 * the one given gets it (the caller keeps the passwords, e.g. in clouds.yaml), unless the caller
 * says otherwise (a deployed stack's bootstrap, bootstrap.ts).
 */
import { DEFAULT_DOMAIN, IdentityError, type Role } from './model.js';
import { hashSecret, verifySecret } from './passwords.js';
import * as store from './store.js';

export const DEFAULT_ROLES = ['admin', 'member', 'reader'] as const;

export interface SeedUser {
  name: string;
  password: string;
  project: string;
  roles: string[];
}

const isConflict = (e: unknown) => e instanceof IdentityError && e.status === 409;

async function ensure<T>(find: () => Promise<T | undefined>, create: () => Promise<T>): Promise<T> {
  const found = await find();
  if (found !== undefined) return found;
  try {
    return await create();
  } catch (e) {
    // Another start made it between the read and the write (the write is conditional): theirs stands.
    if (!isConflict(e)) throw e;
    const now = await find();
    if (now === undefined) throw e;
    return now;
  }
}

export async function ensureRole(name: string): Promise<string> {
  return ensure(
    () => store.roleIdByName(name),
    async () => {
      const r: Role = { id: store.newId(), name, domainId: null, description: '' };
      await store.createRole(r);
      return r.id;
    },
  );
}

export async function ensureProject(name: string, description = ''): Promise<string> {
  return ensure(
    () => store.projectIdByName(DEFAULT_DOMAIN.id, name),
    async () => {
      const id = store.newId();
      await store.createProject({ id, name, domainId: DEFAULT_DOMAIN.id, description, enabled: true });
      return id;
    },
  );
}

export interface EnsureUserOptions {
  /**
   * Whether an existing user whose password differs gets `password` again. The local stack keeps
   * its passwords in clouds.yaml and makes the table agree; a deployed stack's bootstrap
   * (bootstrap.ts) gives the password only to a user it creates, so one changed since stands.
   * @default true
   */
  resetPassword?: boolean;
  /**
   * A stored hash the caller knows to be of `password` (it made or checked it before): while the
   * user's hash is still this one, the slow check (scrypt, a few hundred ms) is skipped. Any other
   * hash is checked as always.
   */
  knownHash?: string;
}

/** The user, with this password, its default project and these roles on it. Returns the ids and the stored hash. */
export async function ensureUser(u: SeedUser, options: EnsureUserOptions = {}): Promise<{ userId: string; projectId: string; passwordHash: string | undefined }> {
  // The user is looked up beside the roles and the project, and when it is not there its password's
  // hash (scrypt, on libuv's threads) is made meanwhile: a first start waited for the three in turn
  // (issue 16). A failed lookup is thrown where it is awaited below, not here.
  let userLookup: Promise<string | undefined> | undefined = store.userIdByName(DEFAULT_DOMAIN.id, u.name);
  // Settled as a value, thrown where the create below uses it: a failure is never an unhandled
  // rejection, and never lost when the create runs (when it does not, another error is being thrown).
  const hashForNewUser = userLookup.then((id) => (id === undefined ? hashSecret(u.password) : undefined)).then(
    (hash) => ({ hash }),
    (error: unknown) => ({ error }),
  );
  // Reads, and conditional writes where missing: independent of each other, so side by side.
  const [defaultRoleIds, projectId] = await Promise.all([Promise.all(DEFAULT_ROLES.map((r) => ensureRole(r))), ensureProject(u.project)]);
  // The user's roles are mostly default ones, ensured just now: their ids are not read again
  // (one DynamoDB round trip less on the local stack's start, issue 16).
  const ensuredRoleIds = new Map<string, string>(DEFAULT_ROLES.map((r, i) => [r, defaultRoleIds[i]!]));
  // The hash this call made for a user it created: of `password` by construction, so not checked again.
  let createdHash: string | undefined;
  const userId = await ensure(
    // The lookup made above first; a second look (after a conflict) reads again.
    () => {
      const lookup = userLookup ?? store.userIdByName(DEFAULT_DOMAIN.id, u.name);
      userLookup = undefined;
      return lookup;
    },
    async () => {
      const id = store.newId();
      const early = await hashForNewUser;
      if ('error' in early) throw early.error;
      const hash = early.hash ?? (await hashSecret(u.password));
      await store.createUser({ id, name: u.name, domainId: DEFAULT_DOMAIN.id, enabled: true, defaultProjectId: projectId, passwordHash: hash });
      createdHash = hash;
      return id;
    },
  );
  // The grants need only the ids: made beside the password's read and check (a restart waited for
  // the one, then the other: a DynamoDB round trip less, issue 16). Settled as a value, thrown
  // below, as the hash above. A new password is written only after them: a grant's transaction
  // checks the user item, which an update meanwhile could make it cancel.
  const granting = Promise.all(
    u.roles.map(async (roleName) => {
      const roleId = ensuredRoleIds.get(roleName) ?? (await ensureRole(roleName));
      // A grant is one item put under a condition that all three exist: putting it again changes nothing.
      await store.createAssignment({ projectId, userId, roleId });
    }),
  ).then(
    () => ({}),
    (error: unknown) => ({ error }),
  );
  // A user created just now has the hash it was created with: not read back.
  let passwordHash = createdHash ?? (await store.mustUser(userId)).passwordHash;
  const known = passwordHash !== undefined && (passwordHash === options.knownHash || passwordHash === createdHash);
  const stale = (options.resetPassword ?? true) && !known && !(await verifySecret(u.password, passwordHash));
  const granted = await granting;
  if ('error' in granted) throw granted.error;
  if (stale) {
    passwordHash = await hashSecret(u.password);
    await store.updateUser(userId, { passwordHash });
  }
  return { userId, projectId, passwordHash };
}
