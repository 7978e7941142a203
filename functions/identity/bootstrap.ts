/**
 * The identity a deployed stack starts with, made at deploy time (the `identity-bootstrap` function
 * of the wiring table, run by CloudFormation through a custom resource: infra/aws/identity-bootstrap.ts):
 * Keystone's default roles (admin, member, reader), the project `admin` in the default domain (which
 * is no item: functions/identity/model.ts), and the user `admin` with role admin on it. The user's
 * first password is the one CloudFormation generated into a Secrets Manager secret; the function
 * reads it there (its role may read that secret and no other).
 *
 * It runs on the resource's create and on every update (a deploy that changes what it is given) and
 * is idempotent: what exists is kept, each create is a write conditional on the name being free
 * (functions/identity/store.ts), so a rerun or a lost reply changes nothing. A password changed since
 * (Keystone's PATCH /v3/users/{id}, or `openstack user set --password`) is never reset: the secret
 * holds the first password only. The local stack seeds its own identity at start (infra/local/clouds.ts).
 */
import type { GetSecretValueCommandOutput, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import { logger } from '../core/logger.js';
import { responseTo, sendResponse, type PutResponse } from './deploy-response.js';
import { DEFAULT_ROLES, ensureRole, ensureUser } from './seed.js';
import { DEFAULT_DOMAIN } from './model.js';
import * as store from './store.js';

/** The custom resource's properties: the secret's ARN, and what is made (a change to either runs the bootstrap again). */
export const SECRET_ARN_PROPERTY = 'AdminPasswordSecretArn';
export const IDENTITY_PROPERTY = 'Identity';
/** The custom resource's physical id: one bootstrap per stack. */
export const BOOTSTRAP_PHYSICAL_ID = 'ferry-identity-bootstrap';

/** What a deployed stack starts with. */
export const BOOTSTRAP_IDENTITY = { domain: DEFAULT_DOMAIN.name, roles: [...DEFAULT_ROLES], project: 'admin', user: 'admin', userRoles: ['admin'] } as const;
/** The key of the password in the secret's JSON (CloudFormation's generateStringKey). */
export const SECRET_PASSWORD_KEY = 'password';

/** The bootstrap could not run: the secret unreadable or malformed, a property missing. */
export class BootstrapError extends Error {
  override readonly name = 'BootstrapError';
  constructor(
    message: string,
    readonly context: Record<string, unknown> = {},
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export type SecretsClient = Pick<SecretsManagerClient, 'send'>;

/** The admin's first password from the secret (`{"username": "admin", "password": "…"}`). @throws BootstrapError */
export async function readAdminPassword(secretArn: string, client: SecretsClient): Promise<string> {
  const { GetSecretValueCommand } = await import('@aws-sdk/client-secrets-manager');
  let out: GetSecretValueCommandOutput;
  try {
    out = await client.send(new GetSecretValueCommand({ SecretId: secretArn }));
  } catch (e) {
    throw new BootstrapError(`the admin password secret could not be read: ${(e as Error).name}: ${(e as Error).message}`, { secretArn }, { cause: e });
  }
  let password: unknown;
  try {
    password = (JSON.parse(out.SecretString ?? '') as Record<string, unknown>)[SECRET_PASSWORD_KEY];
  } catch (e) {
    throw new BootstrapError('the admin password secret is not JSON', { secretArn }, { cause: e });
  }
  if (typeof password !== 'string' || password.length === 0) throw new BootstrapError(`the admin password secret has no "${SECRET_PASSWORD_KEY}"`, { secretArn });
  return password;
}

export interface BootstrapResult {
  userId: string;
  projectId: string;
  /** Whether this run made the admin user (and so gave it the secret's password). */
  userCreated: boolean;
}

/** Makes what is missing of BOOTSTRAP_IDENTITY; never touches an existing user's password. */
export async function bootstrapIdentity(password: string): Promise<BootstrapResult> {
  for (const role of BOOTSTRAP_IDENTITY.roles) await ensureRole(role);
  const existed = (await store.userIdByName(DEFAULT_DOMAIN.id, BOOTSTRAP_IDENTITY.user)) !== undefined;
  const ids = await ensureUser(
    { name: BOOTSTRAP_IDENTITY.user, password, project: BOOTSTRAP_IDENTITY.project, roles: [...BOOTSTRAP_IDENTITY.userRoles] },
    { resetPassword: false },
  );
  return { ...ids, userCreated: !existed };
}

export interface BootstrapDeps {
  secrets?: SecretsClient;
  put?: PutResponse;
}

let defaultSecrets: SecretsClient | undefined;
async function secretsClient(): Promise<SecretsClient> {
  if (!defaultSecrets) {
    const { SecretsManagerClient: Client } = await import('@aws-sdk/client-secrets-manager');
    defaultSecrets = new Client({ region: process.env.AWS_REGION ?? 'us-east-1' });
  }
  return defaultSecrets;
}

/**
 * The custom resource's handler. Delete keeps the identity (the token table goes or stays by its own
 * removal policy). A failure is answered FAILED with its reason, which fails the deploy and shows
 * in the stack's events; it is logged here too.
 */
export function bootstrapHandler(deps: BootstrapDeps = {}): (event: CloudFormationCustomResourceEvent) => Promise<void> {
  return async (event) => {
    let outcome: { data?: Record<string, string> } | { error: Error };
    if (event.RequestType === 'Delete') {
      outcome = {};
    } else {
      try {
        const secretArn = event.ResourceProperties[SECRET_ARN_PROPERTY];
        if (typeof secretArn !== 'string' || !secretArn) throw new BootstrapError(`the custom resource has no ${SECRET_ARN_PROPERTY}`);
        const result = await bootstrapIdentity(await readAdminPassword(secretArn, deps.secrets ?? (await secretsClient())));
        logger.info('identity bootstrap', { requestType: event.RequestType, ...result });
        outcome = { data: { UserId: result.userId, ProjectId: result.projectId, UserCreated: String(result.userCreated) } };
      } catch (e) {
        logger.error('identity bootstrap failed', { error: e as Error });
        outcome = { error: e as Error };
      }
    }
    const physicalId = event.RequestType === 'Create' ? BOOTSTRAP_PHYSICAL_ID : event.PhysicalResourceId;
    await sendResponse(event.ResponseURL, responseTo(event, physicalId, outcome), deps.put);
  };
}

export const handler = bootstrapHandler();
