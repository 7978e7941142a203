/**
 * The deploy-time identity bootstrap (functions/identity/bootstrap.ts) against DynamoDB Local, run
 * as CloudFormation runs it: a custom resource event, the answer PUT to its ResponseURL (recorded
 * here), the admin password read from a mocked Secrets Manager whose replies follow GetSecretValue's
 * reference. What it makes is checked through the identity API itself (a password token for admin
 * on project admin); a second run changes no item; a password changed since is kept; a secret it
 * cannot read fails the deploy with the reason and writes nothing; a lost answer is answered again
 * by Lambda's retry, with nothing made twice.
 */
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { handler as identityApi } from '../../functions/api/identity.js';
import { scanAll } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { BOOTSTRAP_IDENTITY, BOOTSTRAP_PHYSICAL_ID, IDENTITY_PROPERTY, SECRET_ARN_PROPERTY, bootstrapHandler } from '../../functions/identity/bootstrap.js';
import type { CustomResourceResponse, PutResponse } from '../../functions/identity/deploy-response.js';
import { DEFAULT_DOMAIN } from '../../functions/identity/model.js';
import { hashSecret } from '../../functions/identity/passwords.js';
import * as store from '../../functions/identity/store.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { stableJson } from '../support/api-state.js';
import { useLocalDynamo } from '../support/dynamo.js';
import { call } from '../support/events.js';

const SECRET_ARN = 'arn:aws:secretsmanager:eu-west-1:111122223333:secret:AdminPassword3F1A2B-AbCdEf';
const PASSWORD = 'k3Jx9QmTz7Lw2RbV8nYc4HdF6sGpA1Ue';
const secrets = new SecretsManagerClient({ region: 'eu-west-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
const secretsMock = mockClient(secrets);

/** GetSecretValue's reply for the secret CloudFormation generated. */
const secretValue = (secretString: string) => ({
  ARN: SECRET_ARN,
  Name: 'AdminPassword3F1A2B-AbCdEf',
  VersionId: 'a1b2c3d4-5678-90ab-cdef-EXAMPLE11111',
  SecretString: secretString,
  VersionStages: ['AWSCURRENT'],
  CreatedDate: new Date('2026-11-27T10:00:00Z'),
});

let ddb: LocalDynamo;
beforeAll(async () => {
  ddb = await useLocalDynamo();
});
afterAll(async () => ddb?.stop());
beforeEach(() => {
  secretsMock.reset();
  secretsMock.on(GetSecretValueCommand, { SecretId: SECRET_ARN }).resolves(secretValue(JSON.stringify({ username: 'admin', password: PASSWORD })));
});

/** A PUT to the response URL that records what CloudFormation would receive. */
function responses(fail?: () => Error): { put: PutResponse; sent: CustomResourceResponse[] } {
  const sent: CustomResourceResponse[] = [];
  return {
    sent,
    put: async (url, body) => {
      expect(url).toBe('https://cloudformation-custom-resource-response-euwest1.s3.amazonaws.com/response');
      const error = fail?.();
      if (error) throw error;
      sent.push(JSON.parse(body) as CustomResourceResponse);
      return { status: 200 };
    },
  };
}

function event(requestType: 'Create' | 'Update' | 'Delete', properties: Record<string, unknown> = {}): CloudFormationCustomResourceEvent {
  const common = {
    ServiceToken: 'arn:aws:lambda:eu-west-1:111122223333:function:Ferry-FnIdentityBootstrap',
    ResponseURL: 'https://cloudformation-custom-resource-response-euwest1.s3.amazonaws.com/response',
    StackId: 'arn:aws:cloudformation:eu-west-1:111122223333:stack/Ferry/1e2f3a4b',
    RequestId: `request-${Math.random().toString(36).slice(2)}`,
    LogicalResourceId: 'IdentityBootstrap',
    ResourceType: 'Custom::FerryIdentity',
    ResourceProperties: { ServiceToken: 'x', [SECRET_ARN_PROPERTY]: SECRET_ARN, [IDENTITY_PROPERTY]: JSON.stringify(BOOTSTRAP_IDENTITY), ...properties },
  };
  if (requestType === 'Create') return { ...common, RequestType: 'Create' } as CloudFormationCustomResourceEvent;
  return { ...common, RequestType: requestType, PhysicalResourceId: BOOTSTRAP_PHYSICAL_ID, OldResourceProperties: common.ResourceProperties } as CloudFormationCustomResourceEvent;
}

/** Every item of the token table (where the identity lives), for before/after comparisons. */
async function identityItems(): Promise<string[]> {
  return (await scanAll({ TableName: tableName('tokens'), ConsistentRead: true })).map(stableJson).sort();
}

/** A project-scoped password token from the identity API: its status and roles. */
async function login(password: string): Promise<{ status: number; roles: string[] }> {
  const res = await call(identityApi as never, {
    method: 'POST',
    path: '/identity/v3/auth/tokens',
    caller: null,
    body: { auth: { identity: { methods: ['password'], password: { user: { name: 'admin', domain: { name: DEFAULT_DOMAIN.name }, password } } }, scope: { project: { name: 'admin', domain: { id: DEFAULT_DOMAIN.id } } } } },
  });
  return { status: res.status, roles: ((res.body?.token?.roles ?? []) as { name: string }[]).map((r) => r.name).sort() };
}

// In order: the first tests see an empty table.
describe('the identity bootstrap', () => {
  test('a secret it cannot read (throttled, then malformed) fails the deploy with the reason, and nothing is written', async () => {
    secretsMock.on(GetSecretValueCommand).rejects(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException', $metadata: { httpStatusCode: 400 } }));
    const { put, sent } = responses();
    await bootstrapHandler({ secrets, put })(event('Create'));
    expect(sent).toEqual([expect.objectContaining({ Status: 'FAILED', PhysicalResourceId: BOOTSTRAP_PHYSICAL_ID, LogicalResourceId: 'IdentityBootstrap', Reason: expect.stringMatching(/^BootstrapError: .*ThrottlingException: Rate exceeded/) })]);

    secretsMock.on(GetSecretValueCommand).resolves(secretValue(JSON.stringify({ username: 'admin' })));
    await bootstrapHandler({ secrets, put })(event('Create'));
    expect(sent[1]).toMatchObject({ Status: 'FAILED', Reason: 'BootstrapError: the admin password secret has no "password"' });
    expect(await identityItems()).toEqual([]);
  });

  test('create: the roles, the project and the user admin with role admin on it, whose password is the secret\'s', async () => {
    const { put, sent } = responses();
    await bootstrapHandler({ secrets, put })(event('Create'));
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({ Status: 'SUCCESS', PhysicalResourceId: BOOTSTRAP_PHYSICAL_ID, Data: { UserCreated: 'true' } });
    for (const role of ['admin', 'member', 'reader']) expect(await store.roleIdByName(role), role).toBeDefined();
    expect(sent[0]!.Data!.ProjectId).toBe(await store.projectIdByName(DEFAULT_DOMAIN.id, 'admin'));
    expect(sent[0]!.Data!.UserId).toBe(await store.userIdByName(DEFAULT_DOMAIN.id, 'admin'));
    const token = await login(PASSWORD);
    expect(token.status).toBe(201);
    expect(token.roles).toContain('admin');
    expect((await login('not-the-password')).status).toBe(401);
  });

  test('run twice (an update, Lambda\'s retry): no item changes', async () => {
    const before = await identityItems();
    const { put, sent } = responses();
    await bootstrapHandler({ secrets, put })(event('Update'));
    await bootstrapHandler({ secrets, put })(event('Update'));
    expect(sent.map((r) => [r.Status, r.PhysicalResourceId, r.Data?.UserCreated])).toEqual([
      ['SUCCESS', BOOTSTRAP_PHYSICAL_ID, 'false'],
      ['SUCCESS', BOOTSTRAP_PHYSICAL_ID, 'false'],
    ]);
    expect(await identityItems()).toEqual(before);
  });

  test('a password changed since is kept; a role removed since comes back', async () => {
    const userId = (await store.userIdByName(DEFAULT_DOMAIN.id, 'admin'))!;
    await store.updateUser(userId, { passwordHash: await hashSecret('changed-by-the-operator') });
    const projectId = (await store.projectIdByName(DEFAULT_DOMAIN.id, 'admin'))!;
    const roleId = (await store.roleIdByName('admin'))!;
    expect(await store.deleteAssignment({ projectId, userId, roleId })).toBe(true);
    const { put, sent } = responses();
    await bootstrapHandler({ secrets, put })(event('Update'));
    expect(sent[0]).toMatchObject({ Status: 'SUCCESS', Data: { UserCreated: 'false' } });
    expect((await login(PASSWORD)).status).toBe(401);
    const token = await login('changed-by-the-operator');
    expect(token.status).toBe(201);
    expect(token.roles).toContain('admin');
  });

  test('a lost answer to CloudFormation is an error (Lambda runs it again), and the rerun makes nothing twice', async () => {
    const before = await identityItems();
    const lost = responses(() => new TypeError('fetch failed'));
    await expect(bootstrapHandler({ secrets, put: lost.put })(event('Update'))).rejects.toMatchObject({ name: 'CustomResourceResponseError' });
    const refused = async () => ({ status: 403 });
    await expect(bootstrapHandler({ secrets, put: refused })(event('Update'))).rejects.toThrow(/answered HTTP 403/);
    const { put, sent } = responses();
    await bootstrapHandler({ secrets, put })(event('Update'));
    expect(sent).toEqual([expect.objectContaining({ Status: 'SUCCESS' })]);
    expect(await identityItems()).toEqual(before);
  });

  test('delete keeps the identity and answers success without reading the secret', async () => {
    const before = await identityItems();
    secretsMock.on(GetSecretValueCommand).rejects(Object.assign(new Error('Secrets Manager can\'t find the specified secret.'), { name: 'ResourceNotFoundException' }));
    const { put, sent } = responses();
    await bootstrapHandler({ secrets, put })(event('Delete'));
    expect(sent).toEqual([expect.objectContaining({ Status: 'SUCCESS', PhysicalResourceId: BOOTSTRAP_PHYSICAL_ID })]);
    expect(secretsMock.commandCalls(GetSecretValueCommand)).toHaveLength(0);
    expect(await identityItems()).toEqual(before);
  });
});
