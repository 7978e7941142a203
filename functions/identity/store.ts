/**
 * Keystone's database in the token table: projects, users, roles, role assignments and application
 * credentials. A name is unique per domain (per user for application credentials) through a name
 * item written in the same transaction as its record, so two creates of one name cannot both win.
 */
import { DeleteCommand, GetCommand, QueryCommand, ScanCommand, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { randomBytes } from 'node:crypto';
import { revokeProjectTokens, revokeUserTokens } from '../auth/tokens.js';
import { db } from '../core/db.js';
import { GSI1, tableName } from '../core/tables.js';
import { conflict, DEFAULT_DOMAIN, IdentityError, notFound, type AppCredential, type Assignment, type Domain, type Project, type Role, type User } from './model.js';

const T = () => tableName('tokens');
export const newId = () => randomBytes(16).toString('hex');

type Kind = 'domain' | 'project' | 'user' | 'role' | 'application_credential';
const PK: Record<Kind, string> = { domain: 'DOMAIN', project: 'PROJECT', user: 'USER', role: 'ROLE', application_credential: 'APPCRED' };
const key = (kind: Kind, id: string) => ({ pk: `${PK[kind]}#${id}`, sk: PK[kind] });
const nameKey = (kind: Kind, scope: string, name: string) => ({ pk: `NAME#${kind}#${scope}#${name}`, sk: 'NAME' });

const cancelled = (e: unknown) => (e as Error).name === 'TransactionCanceledException' || (e as Error).name === 'ConditionalCheckFailedException';
const strip = <R>(item: Record<string, unknown> | undefined): R | undefined => {
  if (!item) return undefined;
  const { pk: _pk, sk: _sk, gsi1pk: _g, gsi1sk: _s, ...rest } = item;
  return rest as R;
};

async function get<R>(kind: Kind, id: string): Promise<R | undefined> {
  if (!id) return undefined;
  const out = await db().send(new GetCommand({ TableName: T(), Key: key(kind, id), ConsistentRead: true }));
  return strip<R>(out.Item);
}

async function must<R>(kind: Kind, id: string): Promise<R> {
  const r = await get<R>(kind, id);
  if (!r) throw notFound(kind, id);
  return r;
}

async function idByName(kind: Kind, scope: string, name: string): Promise<string | undefined> {
  const out = await db().send(new GetCommand({ TableName: T(), Key: nameKey(kind, scope, name), ConsistentRead: true }));
  return out.Item?.id as string | undefined;
}

async function listKind<R>(gsi1pk: string): Promise<R[]> {
  const items: R[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const out = await db().send(
      new QueryCommand({ TableName: T(), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': gsi1pk }, ExclusiveStartKey: start }),
    );
    items.push(...(out.Items ?? []).map((i) => strip<R>(i)!));
    start = out.LastEvaluatedKey;
  } while (start);
  return items;
}

/** The condition that the domain exists (the default one always does: it is no item). */
const domainExists = (domainId: string) =>
  domainId === DEFAULT_DOMAIN.id ? [] : [{ ConditionCheck: { TableName: T(), Key: key('domain', domainId), ConditionExpression: 'attribute_exists(pk)' } }];

/** Creates a record and its name item together; 409 when the name is taken, 404 when its domain is gone. */
async function createNamed(kind: Kind, scope: string, record: { id: string; name: string }, gsi1pk: string, domainId?: string, parentId?: string): Promise<void> {
  const checks = domainId === undefined ? [] : domainExists(domainId);
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Put: { TableName: T(), Item: { ...nameKey(kind, scope, record.name), id: record.id }, ConditionExpression: 'attribute_not_exists(pk)' } },
          { Put: { TableName: T(), Item: { ...key(kind, record.id), gsi1pk, gsi1sk: record.name, ...record }, ConditionExpression: 'attribute_not_exists(pk)' } },
          ...checks,
          // A child project counts on its parent, which must still be there: deleteProject's condition reads the count.
          ...(parentId === undefined ? [] : [childCountChange(parentId, 1)]),
        ],
      }),
    );
  } catch (e) {
    if (cancelled(e)) {
      const reasons = (e as { CancellationReasons?: { Code?: string }[] }).CancellationReasons ?? [];
      if (checks.length > 0 && reasons[2]?.Code === 'ConditionalCheckFailed') throw notFound('domain', domainId!);
      if (parentId !== undefined && reasons.at(-1)?.Code === 'ConditionalCheckFailed') throw notFound('project', parentId);
      throw conflict(kind, 'name', record.name);
    }
    throw e;
  }
}

/** The parent project's `childCount` by `by`, on condition that the parent exists. */
const childCountChange = (parentId: string, by: 1 | -1) => ({
  Update: {
    TableName: T(),
    Key: key('project', parentId),
    ConditionExpression: 'attribute_exists(pk)',
    UpdateExpression: 'ADD childCount :by',
    ExpressionAttributeValues: { ':by': by },
  },
});

/**
 * Sets the fields given; a new name moves the record's name item in the same transaction (the old
 * one deleted only if it is still this record's, the new one put only if free): 409 when taken.
 */
async function updateNamed<R extends { id: string; name: string }>(kind: Kind, scope: string, id: string, changes: Record<string, unknown>): Promise<R> {
  const entries = Object.entries(changes).filter(([, v]) => v !== undefined);
  const current = await must<R>(kind, id);
  if (entries.length === 0) return current;
  const rename = typeof changes.name === 'string' && changes.name !== current.name ? (changes.name as string) : undefined;
  if (rename) entries.push(['gsi1sk', rename]);
  const update = {
    TableName: T(),
    Key: key(kind, id),
    // The name read above is the one whose item moves: a rename meanwhile makes this one fail.
    ConditionExpression: 'attribute_exists(pk) AND #n = :old',
    UpdateExpression: 'SET ' + entries.map((_, i) => `#f${i} = :v${i}`).join(', '),
    ExpressionAttributeNames: { '#n': 'name', ...Object.fromEntries(entries.map(([k], i) => [`#f${i}`, k])) },
    ExpressionAttributeValues: { ':old': current.name, ...Object.fromEntries(entries.map(([, v], i) => [`:v${i}`, v])) },
  };
  try {
    if (!rename) {
      const out = await db().send(new UpdateCommand({ ...update, ReturnValues: 'ALL_NEW' }));
      return strip<R>(out.Attributes)!;
    }
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Update: update },
          { Delete: { TableName: T(), Key: nameKey(kind, scope, current.name), ConditionExpression: 'id = :id', ExpressionAttributeValues: { ':id': id } } },
          { Put: { TableName: T(), Item: { ...nameKey(kind, scope, rename), id }, ConditionExpression: 'attribute_not_exists(pk)' } },
        ],
      }),
    );
    return must<R>(kind, id);
  } catch (e) {
    if (!cancelled(e)) throw e;
    if (!(await get(kind, id))) throw notFound(kind, id);
    if (rename) throw conflict(kind, 'name', rename);
    throw e;
  }
}

/**
 * Deletes a record and its name item together; 404 when it is gone. A project is deleted only
 * while no child project counts on it (Keystone's 403 for a project that is not a leaf), and a
 * child's delete takes its count off its parent in the same transaction.
 */
async function deleteNamed(kind: Kind, scope: string, record: { id: string; name: string; parentId?: string }): Promise<void> {
  const leafOnly = kind === 'project';
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          {
            Delete: {
              TableName: T(),
              Key: key(kind, record.id),
              ConditionExpression: leafOnly ? 'attribute_exists(pk) AND (attribute_not_exists(childCount) OR childCount <= :zero)' : 'attribute_exists(pk)',
              ...(leafOnly ? { ExpressionAttributeValues: { ':zero': 0 } } : {}),
              ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
            },
          },
          { Delete: { TableName: T(), Key: nameKey(kind, scope, record.name), ConditionExpression: 'id = :id', ExpressionAttributeValues: { ':id': record.id } } },
          ...(leafOnly && record.parentId !== undefined ? [childCountChange(record.parentId, -1)] : []),
        ],
      }),
    );
  } catch (e) {
    if (cancelled(e)) {
      const first = (e as { CancellationReasons?: { Code?: string; Item?: Record<string, unknown> }[] }).CancellationReasons?.[0];
      // The item comes back as DynamoDB wrote it ({"N": "1"}): the document client does not unmarshal errors.
      const children = first?.Item?.childCount as { N?: string } | undefined;
      if (leafOnly && first?.Code === 'ConditionalCheckFailed' && Number(children?.N ?? 0) > 0) {
        throw new IdentityError(403, 'Forbidden', `Cannot delete the project ${record.id} since it is not a leaf in the hierarchy. Use the cascade option if you want to delete a whole subtree.`);
      }
      throw notFound(kind, record.id);
    }
    throw e;
  }
}

// Projects
export const getProject = (id: string) => get<Project>('project', id);
export const mustProject = (id: string) => must<Project>('project', id);
export const projectIdByName = (domainId: string, name: string) => idByName('project', domainId, name);
export const listProjects = () => listKind<Project>('PROJECTS');
export const createProject = (p: Project) => createNamed('project', p.domainId, p, 'PROJECTS', p.domainId, p.parentId);
/** Deletes the project, its grants, and the tokens scoped to it (Keystone revokes them). */
export async function deleteProject(p: Project): Promise<void> {
  await deleteNamed('project', p.domainId, p);
  await revokeProjectTokens(p.id);
  for (const a of await listAssignments({ projectId: p.id })) await deleteAssignment(a);
}

// Users
export const getUser = (id: string) => get<User>('user', id);
export const mustUser = (id: string) => must<User>('user', id);
export const userIdByName = (domainId: string, name: string) => idByName('user', domainId, name);
export const listUsers = () => listKind<User>('USERS');
export const createUser = (u: User) => createNamed('user', u.domainId, u, 'USERS', u.domainId);
export async function deleteUser(u: User): Promise<void> {
  await deleteNamed('user', u.domainId, u);
  await revokeUserTokens(u.id);
  for (const a of await listAssignments({ userId: u.id })) await deleteAssignment(a);
  for (const c of await listAppCredentials(u.id)) await deleteAppCredential(c);
}

/** Updates the fields given (a new name moves its uniqueness item in the same transaction). */
export async function updateUser(
  id: string,
  changes: Partial<Pick<User, 'name' | 'enabled' | 'email' | 'description' | 'defaultProjectId' | 'passwordHash' | 'extra'>>,
): Promise<User> {
  const current = await mustUser(id);
  const user = await updateNamed<User>('user', current.domainId, id, changes);
  // A disabled user or a new password ends the user's tokens, as Keystone's revocation events do.
  if (changes.enabled === false || changes.passwordHash !== undefined) await revokeUserTokens(id);
  return user;
}

export async function updateProject(id: string, changes: Partial<Pick<Project, 'name' | 'enabled' | 'description' | 'tags'>>): Promise<Project> {
  const current = await mustProject(id);
  const project = await updateNamed<Project>('project', current.domainId, id, changes);
  // Keystone revokes the tokens of a project it disables.
  if (changes.enabled === false) await revokeProjectTokens(id);
  return project;
}

// Domains (the default one is no item: it always exists, as upstream's is created at bootstrap)
export const getDomain = (id: string) => get<Domain>('domain', id);
export const domainIdByName = (name: string) => idByName('domain', 'global', name);
export const listDomains = () => listKind<Domain>('DOMAINS');
export const createDomain = (d: Domain) => createNamed('domain', 'global', d, 'DOMAINS');
export const updateDomain = (id: string, changes: Partial<Pick<Domain, 'name' | 'enabled' | 'description'>>) => updateNamed<Domain>('domain', 'global', id, changes);
/** Deletes the record only while it is disabled (Keystone's 403 otherwise); false when it was enabled. */
export async function deleteDomainRecord(d: Domain): Promise<boolean> {
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Delete: { TableName: T(), Key: key('domain', d.id), ConditionExpression: 'attribute_exists(pk) AND enabled = :f', ExpressionAttributeValues: { ':f': false } } },
          { Delete: { TableName: T(), Key: nameKey('domain', 'global', d.name), ConditionExpression: 'id = :id', ExpressionAttributeValues: { ':id': d.id } } },
        ],
      }),
    );
    return true;
  } catch (e) {
    if (!cancelled(e)) throw e;
    if (!(await getDomain(d.id))) throw notFound('domain', d.id);
    return false;
  }
}

// Roles
export const getRole = (id: string) => get<Role>('role', id);
export const mustRole = (id: string) => must<Role>('role', id);
export const roleIdByName = (name: string) => idByName('role', 'global', name);
export const listRoles = () => listKind<Role>('ROLES');
export const createRole = (r: Role) => createNamed('role', 'global', r, 'ROLES');
export const deleteRole = (r: Role) => deleteNamed('role', 'global', r);

// Role assignments (project scope only)
const grantKey = (a: Assignment) => ({ pk: `GRANT#${a.projectId}`, sk: `${a.userId}#${a.roleId}` });

/** Grants the role; the project, user and role must exist at that moment (checked in the same transaction). */
export async function createAssignment(a: Assignment): Promise<void> {
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Put: { TableName: T(), Item: { ...grantKey(a), gsi1pk: `GRANTS#${a.userId}`, gsi1sk: `${a.projectId}#${a.roleId}`, ...a } } },
          { ConditionCheck: { TableName: T(), Key: key('project', a.projectId), ConditionExpression: 'attribute_exists(pk)' } },
          { ConditionCheck: { TableName: T(), Key: key('user', a.userId), ConditionExpression: 'attribute_exists(pk)' } },
          { ConditionCheck: { TableName: T(), Key: key('role', a.roleId), ConditionExpression: 'attribute_exists(pk)' } },
        ],
      }),
    );
  } catch (e) {
    if (cancelled(e)) {
      const [p, u] = await Promise.all([getProject(a.projectId), getUser(a.userId)]);
      throw !p ? notFound('project', a.projectId) : !u ? notFound('user', a.userId) : notFound('role', a.roleId);
    }
    throw e;
  }
}

export async function deleteAssignment(a: Assignment): Promise<boolean> {
  try {
    await db().send(new DeleteCommand({ TableName: T(), Key: grantKey(a), ConditionExpression: 'attribute_exists(pk)' }));
    return true;
  } catch (e) {
    if (cancelled(e)) return false;
    throw e;
  }
}

export async function listAssignments(filter: { userId?: string; projectId?: string }): Promise<Assignment[]> {
  const pick = (items: Record<string, unknown>[] | undefined) =>
    (items ?? []).map((i) => ({ projectId: i.projectId as string, userId: i.userId as string, roleId: i.roleId as string }));
  let found: Assignment[];
  if (filter.projectId) {
    const out = await db().send(new QueryCommand({ TableName: T(), KeyConditionExpression: 'pk = :p', ExpressionAttributeValues: { ':p': `GRANT#${filter.projectId}` }, ConsistentRead: true }));
    found = pick(out.Items);
  } else if (filter.userId) {
    const out = await db().send(new QueryCommand({ TableName: T(), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': `GRANTS#${filter.userId}` } }));
    found = pick(out.Items);
  } else {
    found = [];
    let start: Record<string, unknown> | undefined;
    do {
      const out = await db().send(
        new ScanCommand({ TableName: T(), FilterExpression: 'begins_with(pk, :g)', ExpressionAttributeValues: { ':g': 'GRANT#' }, ExclusiveStartKey: start }),
      );
      found.push(...pick(out.Items));
      start = out.LastEvaluatedKey;
    } while (start);
  }
  return found.filter((a) => (!filter.userId || a.userId === filter.userId) && (!filter.projectId || a.projectId === filter.projectId));
}

// Application credentials
export const getAppCredential = (id: string) => get<AppCredential>('application_credential', id);
export const appCredentialIdByName = (userId: string, name: string) => idByName('application_credential', userId, name);
export const listAppCredentials = (userId: string) => listKind<AppCredential>(`APPCREDS#${userId}`);
export const createAppCredential = (c: AppCredential) => createNamed('application_credential', c.userId, c, `APPCREDS#${c.userId}`);
export const deleteAppCredential = (c: AppCredential) => deleteNamed('application_credential', c.userId, c);
