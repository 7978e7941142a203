/**
 * The synthesized template, checked against the wiring table and the table list: whatever those
 * declare must exist, wired as declared, with no more permission than declared. The app is built
 * once (bundling every function takes seconds) and shared by the tests in this file.
 */
import { resolve } from 'node:path';
import { Stack } from 'aws-cdk-lib';
import { SYNTH_HOOK_TIMEOUT_MS, testApp } from '../support/cdk-app.js';
import { build } from 'esbuild';
import { Match, Template } from 'aws-cdk-lib/assertions';
import type { IConstruct } from 'constructs';
import { beforeAll, describe, expect, test } from 'vitest';
import { GSI1, TABLES, TTL_ATTRIBUTE, tableEnvName } from '../../functions/core/tables.js';
import { FUNCTIONS, STATE_MACHINES, functionByName, stateMachineEnvName, substitutionKey, type FunctionWiring } from '../../functions/wiring.js';
import { AUTH_HEADER, BUCKET_ENV, FerryStack, REPO_ROOT, TMP_PREFIX, buildFerryApp } from '../../infra/aws/ferry-stack.js';
import { COPY_ENV, COPY_REGISTRAR_ENV } from '../../infra/aws/copy-worker.js';
import { DEFAULT_SPOOL_MAX_BYTES } from '../../functions/images/import-spool.js';

let stack: FerryStack;
let template: Template;

beforeAll(() => {
  ({ stack } = buildFerryApp(testApp(), { nag: false }));
  template = Template.fromStack(stack);
}, SYNTH_HOOK_TIMEOUT_MS);

type Resource = { Type: string; Properties: Record<string, any>; DeletionPolicy?: string };
const resources = () => template.toJSON().Resources as Record<string, Resource>;
const logicalId = (c: IConstruct) => Stack.of(c).resolve(Stack.of(c).getLogicalId((c.node.defaultChild ?? c) as never)) as string;
const fnId = (name: string) => logicalId(stack.functions.get(name)!);
const tableId = (key: string) => logicalId(stack.tables.get(key as never)!);

/** Every policy statement attached to a function's execution role (CDK moves what overflows the inline policy into a managed one). */
function roleStatements(name: string): { Action: string | string[]; Resource: unknown; Effect: string }[] {
  const roleId = logicalId(stack.functions.get(name)!.role!);
  return Object.values(resources())
    .filter((r) => (r.Type === 'AWS::IAM::Policy' || r.Type === 'AWS::IAM::ManagedPolicy') && JSON.stringify(r.Properties.Roles).includes(`"${roleId}"`))
    .flatMap((r) => r.Properties.PolicyDocument.Statement);
}
const actionsOf = (statements: { Action: string | string[] }[]) => statements.flatMap((s) => (Array.isArray(s.Action) ? s.Action : [s.Action]));
/** The table logical ids a function's role policies mention. */
const tablesInPolicies = (name: string) =>
  TABLES.map((t) => t.key).filter((key) => JSON.stringify(roleStatements(name)).includes(`"${tableId(key)}"`));

describe('DynamoDB tables', () => {
  test('one table per TABLES entry, and no other', () => {
    template.resourceCountIs('AWS::DynamoDB::Table', TABLES.length);
    expect(stack.tables.size).toBe(TABLES.length);
  });

  test.each(TABLES.map((t) => t.key))('table %s has pk/sk, gsi1 projecting ALL, TTL, on-demand, PITR and AWS-managed encryption', (key) => {
    const table = resources()[tableId(key)]!;
    expect(table.Type).toBe('AWS::DynamoDB::Table');
    expect(table.Properties).toMatchObject({
      KeySchema: [
        { AttributeName: 'pk', KeyType: 'HASH' },
        { AttributeName: 'sk', KeyType: 'RANGE' },
      ],
      BillingMode: 'PAY_PER_REQUEST',
      TimeToLiveSpecification: { AttributeName: TTL_ATTRIBUTE, Enabled: true },
      PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
      SSESpecification: { SSEEnabled: true },
      GlobalSecondaryIndexes: [
        {
          IndexName: GSI1,
          KeySchema: [
            { AttributeName: 'gsi1pk', KeyType: 'HASH' },
            { AttributeName: 'gsi1sk', KeyType: 'RANGE' },
          ],
          Projection: { ProjectionType: 'ALL' },
        },
      ],
    });
    expect(table.Properties.SSESpecification.KMSMasterKeyId).toBeUndefined();
    expect(new Set(table.Properties.AttributeDefinitions)).toEqual(new Set(['pk', 'sk', 'gsi1pk', 'gsi1sk'].map((AttributeName) => ({ AttributeName, AttributeType: 'S' }))));
  });

  test('tables and buckets are retained by default', () => {
    const retained = Object.values(resources()).filter((r) => ['AWS::DynamoDB::Table', 'AWS::S3::Bucket'].includes(r.Type));
    expect(retained.map((r) => r.DeletionPolicy)).toEqual(retained.map(() => 'Retain'));
  });
});

describe('S3 bucket', () => {
  test('the bucket blocks public access, is encrypted and versioned, logs access, and expires tmp/', () => {
    template.hasResourceProperties('AWS::S3::Bucket', {
      PublicAccessBlockConfiguration: { BlockPublicAcls: true, BlockPublicPolicy: true, IgnorePublicAcls: true, RestrictPublicBuckets: true },
      BucketEncryption: { ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }] },
      VersioningConfiguration: { Status: 'Enabled' },
      LoggingConfiguration: { DestinationBucketName: Match.anyValue() },
      LifecycleConfiguration: { Rules: Match.arrayWith([Match.objectLike({ Prefix: TMP_PREFIX, Status: 'Enabled', ExpirationInDays: Match.anyValue() })]) },
    });
  });

  test('every bucket policy denies requests without TLS', () => {
    const policies = Object.values(resources()).filter((r) => r.Type === 'AWS::S3::BucketPolicy');
    expect(policies).toHaveLength(2);
    for (const p of policies) {
      expect(p.Properties.PolicyDocument.Statement).toContainEqual(
        expect.objectContaining({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
      );
    }
  });
});

describe('Lambda functions', () => {
  test('one function per FUNCTIONS entry, and no other', () => {
    template.resourceCountIs('AWS::Lambda::Function', FUNCTIONS.length);
  });

  test.each(FUNCTIONS.map((f) => [f.name, f] as const))('%s runs nodejs22.x on arm64 with the handler from the wiring table', (name, f) => {
    expect(resources()[fnId(name)]!.Properties).toMatchObject({
      Runtime: 'nodejs22.x',
      Architectures: ['arm64'],
      Handler: `index.${f.export}`,
      TracingConfig: { Mode: 'Active' },
    });
  });

  test.each(FUNCTIONS.map((f) => [f.name, f] as const))('%s has the /tmp its wiring entry asks for (Lambda\'s 512 MB otherwise)', (name, f) => {
    const storage = resources()[fnId(name)]!.Properties.EphemeralStorage;
    expect(storage).toEqual(f.ephemeralStorageMb ? { Size: f.ephemeralStorageMb } : undefined);
  });

  test('image-import-steps can spool a body of unknown length of up to 10 GiB less the runtime\'s room (import-spool.ts)', () => {
    expect(resources()[fnId('image-import-steps')]!.Properties.EphemeralStorage).toEqual({ Size: 10_240 });
    expect(DEFAULT_SPOOL_MAX_BYTES).toBeLessThan(10_240 * 1024 * 1024);
  });

  /** The FERRY_* variables a function must get, and only those. */
  function expectedFerryEnv(f: FunctionWiring): string[] {
    return [
      ...f.tables.map(tableEnvName),
      ...[...new Set([...(f.starts ?? []), ...(f.describes ?? [])])].map(stateMachineEnvName),
      ...(f.usesBucket ? [BUCKET_ENV] : []),
      ...(f.kind === 'authorizer' ? ['FERRY_AUTH_MODE'] : []),
      // The copy worker's RunTask parameters (test/infra/copy-worker-app.test.ts checks their values).
      ...(f.mountsShareStorage ? Object.values(COPY_ENV) : []),
      ...(f.mountsShareStorage && f.registersCopyTasks ? Object.values(COPY_REGISTRAR_ENV) : []),
    ].sort();
  }

  test.each(FUNCTIONS.map((f) => [f.name, f] as const))('%s gets exactly the environment its wiring entry asks for', (name, f) => {
    const vars = resources()[fnId(name)]!.Properties.Environment.Variables as Record<string, unknown>;
    expect(Object.keys(vars).filter((k) => k.startsWith('FERRY_')).sort()).toEqual(expectedFerryEnv(f));
    for (const key of f.tables) expect(vars[tableEnvName(key)]).toEqual({ Ref: tableId(key) });
    for (const machine of f.starts ?? []) expect(JSON.stringify(vars[stateMachineEnvName(machine)])).toContain(`:stateMachine:${stack.stateMachineName(machine)}`);
    if (f.kind === 'authorizer') expect(vars.FERRY_AUTH_MODE).toBe('token');
    expect(vars.NODE_OPTIONS).toBe('--enable-source-maps');
  });

  test('each machine ARN a function gets is the ARN of a machine in the template', () => {
    const names = Object.values(resources()).filter((r) => r.Type === 'AWS::StepFunctions::StateMachine').map((r) => r.Properties.StateMachineName);
    for (const f of FUNCTIONS) for (const m of f.starts ?? []) expect(names).toContain(stack.stateMachineName(m));
  });
});

describe('Step Functions state machines', () => {
  test('one state machine per STATE_MACHINES entry, and no other', () => {
    template.resourceCountIs('AWS::StepFunctions::StateMachine', STATE_MACHINES.length);
  });

  test.each(STATE_MACHINES.map((m) => [m.name, m] as const))('%s substitutes the ARN of every function it lists, logs and traces', (name, m) => {
    const props = resources()[logicalId(stack.stateMachines.get(name)!)]!.Properties;
    expect(props.DefinitionSubstitutions).toEqual(Object.fromEntries(m.functions.map((f) => [substitutionKey(f), { 'Fn::GetAtt': [fnId(f), 'Arn'] }])));
    expect(['ALL', 'ERROR']).toContain(props.LoggingConfiguration.Level);
    expect(props.LoggingConfiguration.Destinations).toHaveLength(1);
    expect(props.TracingConfiguration).toEqual({ Enabled: true });
  });

  test.each(STATE_MACHINES.map((m) => [m.name, m] as const))('%s may invoke exactly the functions it lists', (name, m) => {
    const roleId = logicalId(stack.stateMachines.get(name)!.role);
    const statements = Object.values(resources())
      .filter((r) => (r.Type === 'AWS::IAM::Policy' || r.Type === 'AWS::IAM::ManagedPolicy') && JSON.stringify(r.Properties.Roles).includes(`"${roleId}"`))
      .flatMap((r) => r.Properties.PolicyDocument.Statement as { Action: string | string[]; Resource: unknown }[]);
    const invoke = JSON.stringify(statements.filter((s) => actionsOf([s]).includes('lambda:InvokeFunction')));
    for (const f of FUNCTIONS) {
      if ((m.functions as readonly string[]).includes(f.name)) expect(invoke).toContain(`"${fnId(f.name)}"`);
      else expect(invoke).not.toContain(`"${fnId(f.name)}"`);
    }
  });
});

describe('HTTP API', () => {
  const routes = () => Object.values(resources()).filter((r) => r.Type === 'AWS::ApiGatewayV2::Route').map((r) => r.Properties);
  const route = (key: string) => routes().find((r) => r.RouteKey === key);
  const authorizerId = () => Object.entries(resources()).find(([, r]) => r.Type === 'AWS::ApiGatewayV2::Authorizer')![0];
  const apiFunctions = FUNCTIONS.filter((f) => f.kind === 'api');
  // The identity API checks tokens itself (functions/api/identity.ts): its two routes have no authorizer.
  const guarded = apiFunctions.filter((f) => !f.authenticatesItself);
  const selfAuthenticated = apiFunctions.filter((f) => f.authenticatesItself);

  test('the authorizer reads X-Auth-Token, answers simple responses and caches nothing', () => {
    template.resourceCountIs('AWS::ApiGatewayV2::Authorizer', 1);
    template.hasResourceProperties('AWS::ApiGatewayV2::Authorizer', {
      AuthorizerType: 'REQUEST',
      EnableSimpleResponses: true,
      AuthorizerPayloadFormatVersion: '2.0',
      IdentitySource: [`$request.header.${AUTH_HEADER}`],
      AuthorizerResultTtlInSeconds: 0,
      AuthorizerUri: Match.objectLike({ 'Fn::Join': ['', Match.arrayWith([{ 'Fn::GetAtt': [fnId(FUNCTIONS.find((f) => f.kind === 'authorizer')!.name), 'Arn'] }])] }),
    });
  });

  test.each(guarded.map((f) => [f.httpPrefix!, f] as const))('%s and %s/{proxy+} go to their function behind the authorizer', (prefix) => {
    for (const key of [`ANY ${prefix}`, `ANY ${prefix}/{proxy+}`]) {
      expect(route(key), key).toMatchObject({ AuthorizationType: 'CUSTOM', AuthorizerId: { Ref: authorizerId() } });
    }
  });

  test.each(selfAuthenticated.map((f) => [f.httpPrefix!, f] as const))('%s and %s/{proxy+} go to their function, which checks tokens itself', (prefix) => {
    expect(prefix).toBe('/identity');
    for (const key of [`ANY ${prefix}`, `ANY ${prefix}/{proxy+}`]) {
      expect(route(key), key).toBeDefined();
      expect(route(key)!.AuthorizerId, key).toBeUndefined();
    }
  });

  test.each(guarded.flatMap((f) => (f.publicPaths ?? []).map((p) => [p] as const)))('GET %s answers without the authorizer', (path) => {
    const r = route(`GET ${path}`);
    expect(r).toBeDefined();
    expect(r!.AuthorizerId).toBeUndefined();
    expect(r!.AuthorizationType ?? 'NONE').toBe('NONE');
  });

  test('only the public GET paths and the identity API are open: every other route has the authorizer', () => {
    const publicKeys = new Set([
      ...guarded.flatMap((f) => (f.publicPaths ?? []).map((p) => `GET ${p}`)),
      ...selfAuthenticated.flatMap((f) => [`ANY ${f.httpPrefix}`, `ANY ${f.httpPrefix}/{proxy+}`]),
    ]);
    const open = routes().filter((r) => r.AuthorizationType !== 'CUSTOM').map((r) => r.RouteKey);
    expect(open.sort()).toEqual([...publicKeys].sort());
    expect(routes()).toHaveLength(guarded.length * 2 + publicKeys.size);
  });

  test('the deployed API serves the operator console: GET /ferry/console open, /ferry/ops (its data) behind the authorizer', () => {
    const byKey = new Map(routes().map((r) => [r.RouteKey, r]));
    expect(byKey.get('GET /ferry/console')).toMatchObject({ AuthorizationType: 'NONE' });
    expect(byKey.get('ANY /ferry/{proxy+}')?.AuthorizationType).toBe('CUSTOM');
  });

  test('each route integrates the Lambda of its own function', () => {
    const integrations = Object.entries(resources()).filter(([, r]) => r.Type === 'AWS::ApiGatewayV2::Integration');
    for (const f of apiFunctions) {
      const [integrationId] = integrations.find(([, r]) => JSON.stringify(r.Properties.IntegrationUri).includes(`"${fnId(f.name)}"`))!;
      for (const r of routes().filter((x) => x.RouteKey.split(' ')[1].startsWith(f.httpPrefix!))) {
        expect(JSON.stringify(r.Target)).toContain(integrationId);
      }
    }
  });

  test('the stage writes access logs', () => {
    template.hasResourceProperties('AWS::ApiGatewayV2::Stage', { StageName: '$default', AutoDeploy: true, AccessLogSettings: { DestinationArn: Match.anyValue(), Format: Match.anyValue() } });
  });

  test('the API URL, the bucket and every table name are stack outputs', () => {
    const outputs = template.toJSON().Outputs as Record<string, { Value: unknown }>;
    expect(Object.keys(outputs)).toEqual(expect.arrayContaining(['ApiUrl', 'BucketName']));
    for (const t of TABLES) expect(Object.values(outputs).map((o) => o.Value)).toContainEqual({ Ref: tableId(t.key) });
  });
});

describe('IAM least privilege', () => {
  test.each(FUNCTIONS.map((f) => [f.name, f] as const))('%s can reach exactly the tables its wiring entry lists', (name, f) => {
    expect(tablesInPolicies(name).sort()).toEqual([...f.tables].sort());
  });

  test('volume-steps cannot touch the tokens table', () => {
    expect(JSON.stringify(roleStatements('volume-steps'))).not.toContain(tableId('tokens'));
  });

  test.each(FUNCTIONS.map((f) => [f.name, f] as const))('%s may start only the machines it starts', (name, f) => {
    const start = roleStatements(name).filter((s) => actionsOf([s]).includes('states:StartExecution'));
    const text = JSON.stringify(start);
    for (const m of STATE_MACHINES) {
      const arn = `:stateMachine:${stack.stateMachineName(m.name)}"`;
      if ((f.starts ?? []).includes(m.name as never)) expect(text).toContain(arn);
      else expect(text).not.toContain(arn);
    }
  });

  test.each(FUNCTIONS.map((f) => [f.name, f] as const))('%s has S3 access only if it uses the bucket', (name, f) => {
    const s3 = actionsOf(roleStatements(name)).filter((a) => a.startsWith('s3:'));
    if (f.usesBucket) expect(s3).not.toEqual([]);
    else expect(s3).toEqual([]);
  });

  test.each(FUNCTIONS.filter((f) => f.bucketPrefix).map((f) => [f.name, f] as const))('%s reaches only the objects under its bucketPrefix', (name, f) => {
    const objectResources = roleStatements(name)
      .filter((s) => actionsOf([s]).some((a) => a.startsWith('s3:') && /Object/.test(a)))
      .flatMap((s) => (Array.isArray(s.Resource) ? s.Resource : [s.Resource]))
      .map((r) => JSON.stringify(r));
    expect(objectResources.length).toBeGreaterThan(0);
    // Every object ARN ends in `/<prefix>*`: no statement grants the whole bucket's objects.
    for (const r of objectResources) if (r.includes('/')) expect(r).toContain(`/${f.bucketPrefix}*`);
  });

  // ConditionCheckItem is not among them: CDK's grantReadData gives it, and a condition check writes nothing.
  const DYNAMO_WRITES = /^dynamodb:(PutItem|UpdateItem|DeleteItem|BatchWriteItem|PartiQL(Insert|Update|Delete))$/;
  test.each(FUNCTIONS.filter((f) => f.readsTablesOnly).map((f) => [f.name, f] as const))('%s (readsTablesOnly) may read its tables, write none, and its bundle sends only reads', async (name, f) => {
    const dynamo = actionsOf(roleStatements(name)).filter((a) => a.startsWith('dynamodb:'));
    expect(dynamo).toContain('dynamodb:Query');
    expect(dynamo.filter((a) => DYNAMO_WRITES.test(a))).toEqual([]);
    // The code side: every DynamoDB command the bundle can construct (tree-shaken as CDK bundles it) is a read.
    const out = await build({ entryPoints: [resolve(REPO_ROOT, f.entry)], bundle: true, write: false, platform: 'node', format: 'esm', target: 'node22', mainFields: ['module', 'main'], external: ['@aws-sdk/*'], outdir: '/tmp/ferry-read-only-bundle', logLevel: 'silent' });
    const commands = new Set([...out.outputFiles.map((o) => o.text).join('\n').matchAll(/new (\w+)Command\(/g)].map((m) => m[1]!));
    expect([...commands].filter((c) => !['Get', 'BatchGet', 'Query', 'Scan', 'DescribeExecution', 'DescribeTable'].includes(c))).toEqual([]);
  });

  test('no function is granted a service-wide wildcard action', () => {
    for (const f of FUNCTIONS) {
      expect(actionsOf(roleStatements(f.name)).filter((a) => a === '*' || a.endsWith(':*'))).toEqual([]);
    }
  });
});

describe('the reconciler', () => {
  const reconciler = functionByName('reconciler');

  test('an EventBridge rule runs it every 5 minutes, and nothing else is scheduled', () => {
    const rules = Object.values(resources()).filter((r) => r.Type === 'AWS::Events::Rule');
    expect(rules).toHaveLength(FUNCTIONS.filter((f) => f.kind === 'scheduled').length);
    template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(5 minutes)',
      State: 'ENABLED',
      Targets: [Match.objectLike({ Arn: { 'Fn::GetAtt': [fnId('reconciler'), 'Arn'] }, RetryPolicy: { MaximumRetryAttempts: 0 } })],
    });
    template.hasResourceProperties('AWS::Lambda::Permission', { Action: 'lambda:InvokeFunction', FunctionName: { 'Fn::GetAtt': [fnId('reconciler'), 'Arn'] }, Principal: 'events.amazonaws.com' });
  });

  test('its timeout is under its rate, so two passes never overlap', () => {
    expect(resources()[fnId('reconciler')]!.Properties.Timeout).toBeLessThan(reconciler.scheduleRateMinutes! * 60);
  });

  test('it may describe executions of the server machines, snapshot-create, image-import (and volume-delete and volume-attach-wait, which it starts) only', () => {
    const describe = roleStatements('reconciler').filter((s) => actionsOf([s]).includes('states:DescribeExecution'));
    const text = JSON.stringify(describe);
    for (const m of STATE_MACHINES) {
      if (m.name.startsWith('server-') || m.name === 'snapshot-create' || m.name === 'image-import' || m.name === 'volume-delete' || m.name === 'volume-attach-wait') expect(text).toContain(`:execution:${stack.stateMachineName(m.name)}:*`);
      else expect(text).not.toContain(`:execution:${stack.stateMachineName(m.name)}:`);
    }
    expect(actionsOf(describe)).toEqual(describe.map(() => 'states:DescribeExecution'));
    expect(new Set(actionsOf(roleStatements('reconciler')).filter((a) => a.startsWith('states:')))).toEqual(new Set(['states:DescribeExecution', 'states:StartExecution']));
    expect(reconciler.starts).toEqual(['volume-delete', 'volume-attach-wait']);
  });

  test('it reads and writes the tables the audit and the repairs touch, never the tokens', () => {
    expect(tablesInPolicies('reconciler').sort()).toEqual(['cell1', 'cell2', 'compute-api', 'share', 'volume']);
  });
});

describe('context', () => {
  test('removalPolicy=destroy makes tables deletable', () => {
    const { stack: sandbox } = buildFerryApp(testApp({ context: { removalPolicy: 'destroy' } }), { nag: false, stackName: 'FerrySandbox' });
    const tables = Object.values(Template.fromStack(sandbox).toJSON().Resources as Record<string, Resource>).filter((r) => r.Type === 'AWS::DynamoDB::Table');
    expect(tables.map((t) => t.DeletionPolicy)).toEqual(tables.map(() => 'Delete'));
  });

  test('an unknown removalPolicy fails synth with a message', () => {
    expect(() => buildFerryApp(testApp({ context: { removalPolicy: 'maybe' } }), { nag: false })).toThrow(/removalPolicy must be retain or destroy/);
  });
});

describe('the replication schedule (EventBridge Scheduler)', () => {
  test('one schedule per scheduled machine: replication-schedule every 5 minutes, no flexible window, the scheduled time as input', () => {
    const schedules = Object.values(resources()).filter((r) => r.Type === 'AWS::Scheduler::Schedule');
    expect(schedules).toHaveLength(STATE_MACHINES.filter((m) => 'scheduleRateMinutes' in m).length);
    expect(schedules[0]!.Properties).toMatchObject({
      ScheduleExpression: 'rate(5 minutes)',
      FlexibleTimeWindow: { Mode: 'OFF' },
      State: 'ENABLED',
      Target: { Arn: { Ref: logicalId(stack.stateMachines.get('replication-schedule')!) }, RetryPolicy: { MaximumRetryAttempts: 2, MaximumEventAgeInSeconds: 300 } },
    });
    expect(JSON.parse(schedules[0]!.Properties.Target.Input as string)).toEqual({ scheduledTime: '<aws.scheduler.scheduled-time>' });
  });

  test("the schedule's role may start that machine only; replication-pass-steps may start replication-pass only", () => {
    const schedule = Object.values(resources()).find((r) => r.Type === 'AWS::Scheduler::Schedule')!;
    const roleId = (schedule.Properties.Target.RoleArn as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
    const statements = Object.values(resources())
      .filter((r) => r.Type === 'AWS::IAM::Policy' && JSON.stringify(r.Properties.Roles).includes(`"${roleId}"`))
      .flatMap((r) => r.Properties.PolicyDocument.Statement as { Action: string | string[]; Resource: unknown }[]);
    expect(statements.map((s) => [s.Action, s.Resource])).toEqual([['states:StartExecution', { Ref: logicalId(stack.stateMachines.get('replication-schedule')!) }]]);
    const starts = roleStatements('replication-pass-steps').filter((s) => actionsOf([s]).includes('states:StartExecution'));
    expect(JSON.stringify(starts.map((s) => s.Resource))).toContain(':stateMachine:');
    expect(starts.flatMap((s) => (Array.isArray(s.Resource) ? s.Resource : [s.Resource])).map((r) => JSON.stringify(r))).toEqual([expect.stringMatching(/replication-pass"/)]);
  });

  test('no EventBridge rule runs a replication function any more', () => {
    expect(FUNCTIONS.some((f) => f.kind === 'scheduled' && f.name.startsWith('replication'))).toBe(false);
  });
});
