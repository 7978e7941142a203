/**
 * Making the deployed stack operable (infra/aws/monitoring.ts, the stage's throttling in
 * http-api.ts, `shareBackends` in ferry-stack.ts and copy-worker.ts): the alarm topic and every
 * alarm, the dashboard, the throttling, each machine's overall timeout, and a stack without share
 * backends that has no VPC, no EFS and no interface endpoint.
 *
 * Two full synths, each once (bundling every function takes seconds): the app as deployed by
 * default, and the app with `shareBackends=false` and both throttling limits overridden.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type App, Stack } from 'aws-cdk-lib';
import { SYNTH_HOOK_TIMEOUT_MS, testApp } from '../support/cdk-app.js';
import { Template } from 'aws-cdk-lib/assertions';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { IConstruct } from 'constructs';
import { beforeAll, describe, expect, test } from 'vitest';
import { TABLES } from '../../functions/core/tables.js';
import { FUNCTIONS, STATE_MACHINES, functionByName, type FunctionWiring } from '../../functions/wiring.js';
import { COPY_ENV } from '../../infra/aws/copy-worker.js';
import { FerryStack, buildFerryApp, type FerryWiring } from '../../infra/aws/ferry-stack.js';
import { API_BURST_LIMIT, API_RATE_LIMIT, HTTP_STAGE_NAME } from '../../infra/aws/http-api.js';
import { ALARMED_FUNCTION_KINDS, ALARM_TOPIC_OUTPUT, dashboardName } from '../../infra/aws/monitoring.js';

type Resource = { Type: string; Properties: Record<string, any> };
type Statement = { Action: string | string[]; Effect: string; Principal?: unknown; Condition?: unknown };

/** Everything a test reads of one synthesized app. */
function view(app: App, stack: FerryStack) {
  const template = Template.fromStack(stack);
  const json = template.toJSON() as { Resources: Record<string, Resource>; Outputs: Record<string, { Value: unknown }> };
  const ofType = (type: string) => Object.entries(json.Resources).filter(([, r]) => r.Type === type);
  const id = (c: IConstruct) => Stack.of(c).resolve(Stack.of(c).getLogicalId((c.node.defaultChild ?? c) as never)) as string;
  /** The statements of every IAM policy attached to a role (by the role's logical id). */
  const statementsOf = (roleId: string): Statement[] =>
    [...ofType('AWS::IAM::Policy'), ...ofType('AWS::IAM::ManagedPolicy')]
      .filter(([, r]) => JSON.stringify(r.Properties.Roles).includes(`"${roleId}"`))
      .flatMap(([, r]) => r.Properties.PolicyDocument.Statement);
  return { app, stack, template, json, ofType, id, statementsOf };
}
type View = ReturnType<typeof view>;

let deployed: View;
let noShares: View;

// One synth per hook, each under the infra tier's synth timeout.
beforeAll(() => {
  const a = buildFerryApp(testApp(), { nag: false });
  deployed = view(a.app, a.stack);
}, SYNTH_HOOK_TIMEOUT_MS);
beforeAll(() => {
  const b = buildFerryApp(testApp({ context: { shareBackends: 'false', apiRateLimit: '25.5', apiBurstLimit: '40' } }), { nag: false, stackName: 'FerryNoShares' });
  noShares = view(b.app, b.stack);
}, SYNTH_HOOK_TIMEOUT_MS);

const ref = (id: string) => JSON.stringify({ Ref: id });
const alarmsOf = (v: View) => v.ofType('AWS::CloudWatch::Alarm');
const metricNames = (alarm: Resource) => ((alarm.Properties.Metrics ?? []) as { MetricStat?: { Metric: { MetricName: string } } }[]).flatMap((m) => (m.MetricStat ? [m.MetricStat.Metric.MetricName] : []));
const topicId = (v: View) => {
  const topics = v.ofType('AWS::SNS::Topic');
  expect(topics).toHaveLength(1);
  return topics[0]![0];
};
const alarmedFunctions = (kinds: readonly FunctionWiring['kind'][]) => FUNCTIONS.filter((f) => kinds.includes(f.kind));

describe('alarms', () => {
  test('one per state machine, one on the API 5xx, one on the front functions, one per scheduled function, and no other', () => {
    const expected = STATE_MACHINES.length + 1 + 1 + alarmedFunctions(['scheduled']).length;
    expect(alarmsOf(deployed)).toHaveLength(expected);
    expect(alarmedFunctions(['api']).length).toBeGreaterThan(0);
  });

  test.each(STATE_MACHINES.map((m) => [m.name] as const))('%s: ≥1 failed, timed-out or aborted execution in 5 minutes, missing data not breaching', (name) => {
    const machineRef = ref(deployed.id(deployed.stack.stateMachines.get(name)!));
    const mine = alarmsOf(deployed).filter(([, a]) => JSON.stringify(a.Properties).includes(machineRef));
    expect(mine).toHaveLength(1);
    const [, alarm] = mine[0]!;
    expect(alarm.Properties).toMatchObject({
      AlarmName: `Ferry-${name}-failed`,
      Threshold: 1,
      EvaluationPeriods: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      TreatMissingData: 'notBreaching',
    });
    expect(metricNames(alarm).sort()).toEqual(['ExecutionsAborted', 'ExecutionsFailed', 'ExecutionsTimedOut']);
    const stats = (alarm.Properties.Metrics as { MetricStat?: { Period: number; Stat: string; Metric: { Namespace: string } } }[]).flatMap((m) => (m.MetricStat ? [m.MetricStat] : []));
    expect(stats.map((s) => [s.Metric.Namespace, s.Period, s.Stat])).toEqual(stats.map(() => ['AWS/States', 300, 'Sum']));
    // Only the sum is the alarm's value, and a missing metric counts as 0 in it.
    const returned = (alarm.Properties.Metrics as { Expression?: string; ReturnData: boolean }[]).filter((m) => m.ReturnData);
    expect(returned).toHaveLength(1);
    expect(returned[0]!.Expression).toBe('FILL(failed, 0) + FILL(timedOut, 0) + FILL(aborted, 0)');
  });

  test('every alarm notifies the topic when it fires and when it clears', () => {
    const topic = topicId(deployed);
    for (const [id, alarm] of alarmsOf(deployed)) {
      expect(alarm.Properties.AlarmActions, id).toEqual([{ Ref: topic }]);
      expect(alarm.Properties.OKActions, id).toEqual([{ Ref: topic }]);
    }
  });

  test('the API alarm is the stage 5xx of the HTTP API (ApiId and Stage dimensions, summed)', () => {
    const [[, alarm]] = alarmsOf(deployed).filter(([, a]) => a.Properties.AlarmName === 'Ferry-api-5xx') as [string, Resource][];
    expect(alarm!.Properties).toMatchObject({
      Namespace: 'AWS/ApiGateway',
      MetricName: '5xx',
      Statistic: 'Sum',
      Period: 300,
      Threshold: 1,
      Dimensions: [
        { Name: 'ApiId', Value: { Ref: deployed.id(deployed.stack.httpApi!) } },
        { Name: 'Stage', Value: HTTP_STAGE_NAME },
      ],
    });
  });

  test('the front-function alarm sums the Errors of the authorizer and every API function, and of no step function', () => {
    const [[, alarm]] = alarmsOf(deployed).filter(([, a]) => a.Properties.AlarmName === 'Ferry-api-function-errors') as [string, Resource][];
    const text = JSON.stringify(alarm!.Properties.Metrics);
    expect(metricNames(alarm!).every((n) => n === 'Errors')).toBe(true);
    for (const f of FUNCTIONS) {
      const fnRef = ref(deployed.id(deployed.stack.functions.get(f.name)!));
      if (f.kind === 'api' || f.kind === 'authorizer') expect(text, f.name).toContain(fnRef);
      else expect(text, f.name).not.toContain(fnRef);
    }
  });

  test('each scheduled function (the reconciler) has its own Errors alarm', () => {
    for (const f of alarmedFunctions(['scheduled'])) {
      const [[, alarm]] = alarmsOf(deployed).filter(([, a]) => a.Properties.AlarmName === `Ferry-${f.name}-errors`) as [string, Resource][];
      expect(alarm!.Properties).toMatchObject({ MetricName: 'Errors', Namespace: 'AWS/Lambda', Statistic: 'Sum', Dimensions: [{ Name: 'FunctionName', Value: { Ref: deployed.id(deployed.stack.functions.get(f.name)!) } }] });
    }
    expect(ALARMED_FUNCTION_KINDS).not.toContain('step');
  });
});

describe('the alarm topic', () => {
  test('is encrypted with a rotated key CloudWatch may use, refuses plain HTTP, and is a stack output', () => {
    const topic = topicId(deployed);
    const [[keyId, key]] = deployed.ofType('AWS::KMS::Key') as [string, Resource][];
    expect(deployed.json.Resources[topic]!.Properties.KmsMasterKeyId).toEqual({ 'Fn::GetAtt': [keyId, 'Arn'] });
    expect(key!.Properties.EnableKeyRotation).toBe(true);
    const cloudwatch = (key!.Properties.KeyPolicy.Statement as Statement[]).filter((s) => JSON.stringify(s.Principal) === '{"Service":"cloudwatch.amazonaws.com"}');
    expect(cloudwatch.flatMap((s) => s.Action).sort()).toEqual(['kms:Decrypt', 'kms:GenerateDataKey*']);
    const [[, policy]] = deployed.ofType('AWS::SNS::TopicPolicy') as [string, Resource][];
    expect(policy!.Properties.PolicyDocument.Statement).toContainEqual(expect.objectContaining({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }));
    expect(deployed.json.Outputs[ALARM_TOPIC_OUTPUT]!.Value).toEqual({ Ref: topic });
  });
});

describe('the dashboard', () => {
  const body = () => {
    const dashboards = deployed.ofType('AWS::CloudWatch::Dashboard');
    expect(dashboards).toHaveLength(1);
    expect(dashboards[0]![1].Properties.DashboardName).toBe(dashboardName('Ferry'));
    return JSON.stringify(dashboards[0]![1].Properties.DashboardBody);
  };

  test('is named <stack>-operations and graphs every state machine (started, succeeded, failed, p90 time)', () => {
    const text = body();
    for (const m of STATE_MACHINES) expect(text, m.name).toContain(ref(deployed.id(deployed.stack.stateMachines.get(m.name)!)));
    for (const metric of ['ExecutionsStarted', 'ExecutionsSucceeded', 'ExecutionsFailed', 'ExecutionTime', 'OpenExecutionCount']) expect(text).toContain(metric);
  });

  test('graphs the API, every function and every table', () => {
    const text = body();
    expect(text).toContain(ref(deployed.id(deployed.stack.httpApi!)));
    for (const metric of ['\\"5xx\\"', '\\"4xx\\"', 'Latency', 'Errors', 'Throttles', 'Duration', 'ThrottledRequests']) expect(text).toContain(metric);
    for (const f of FUNCTIONS) expect(text, f.name).toContain(ref(deployed.id(deployed.stack.functions.get(f.name)!)));
    for (const t of TABLES) expect(text, t.key).toContain(ref(deployed.id(deployed.stack.tables.get(t.key)!)));
  });
});

describe('throttling and timeouts', () => {
  test('the stage throttles every route by default, and the context overrides both limits', () => {
    deployed.template.hasResourceProperties('AWS::ApiGatewayV2::Stage', { DefaultRouteSettings: { ThrottlingRateLimit: API_RATE_LIMIT, ThrottlingBurstLimit: API_BURST_LIMIT } });
    noShares.template.hasResourceProperties('AWS::ApiGatewayV2::Stage', { DefaultRouteSettings: { ThrottlingRateLimit: 25.5, ThrottlingBurstLimit: 40 } });
  });

  test('a limit that is not a positive number fails synth with a message', () => {
    const small: FerryWiring = { functions: [functionByName('authorizer'), functionByName('volume-api')], stateMachines: [] };
    expect(() => buildFerryApp(testApp({ context: { apiBurstLimit: '2.5' } }), { nag: false, stackName: 'FerryBadBurst', wiring: small })).toThrow(/apiBurstLimit must be a positive whole number, not 2.5/);
  });

  test('every deployed state machine definition has an overall TimeoutSeconds', () => {
    // The definitions are S3 assets (DefinitionBody.fromFile): read each from the cloud assembly.
    const assembly = deployed.app.synth();
    const manifest = JSON.parse(readFileSync(join(assembly.directory, `${deployed.stack.artifactId}.assets.json`), 'utf8')) as { files: Record<string, { source: { path: string } }> };
    const machines = deployed.ofType('AWS::StepFunctions::StateMachine');
    expect(machines).toHaveLength(STATE_MACHINES.length);
    for (const [id, m] of machines) {
      const hash = String(m.Properties.DefinitionS3Location.Key).replace(/\.json$/, '');
      const definition = JSON.parse(readFileSync(join(assembly.directory, manifest.files[hash]!.source.path), 'utf8')) as { TimeoutSeconds?: unknown };
      expect(Number.isInteger(definition.TimeoutSeconds) && (definition.TimeoutSeconds as number) > 0, id).toBe(true);
    }
  });
});

describe('shareBackends', () => {
  const interfaceEndpoints = (v: View) => v.ofType('AWS::EC2::VPCEndpoint').filter(([, r]) => r.Properties.VpcEndpointType === 'Interface');
  const mounting = FUNCTIONS.filter((f) => f.mountsShareStorage);

  test('by default the share storage and its four interface endpoints exist', () => {
    expect(interfaceEndpoints(deployed)).toHaveLength(4);
    deployed.template.resourceCountIs('AWS::EFS::FileSystem', 1);
    expect(deployed.stack.shareBackends).toBe(true);
  });

  test('false: no VPC, no interface endpoint, no EFS, no ECS, no copy worker outputs', () => {
    expect(noShares.stack.shareBackends).toBe(false);
    expect(noShares.stack.copyWorker).toBeUndefined();
    expect(interfaceEndpoints(noShares)).toEqual([]);
    for (const type of ['AWS::EC2::VPC', 'AWS::EC2::VPCEndpoint', 'AWS::EFS::FileSystem', 'AWS::EFS::AccessPoint', 'AWS::ECS::Cluster', 'AWS::ECS::TaskDefinition']) {
      expect(noShares.ofType(type), type).toEqual([]);
    }
    expect(Object.keys(noShares.json.Outputs)).not.toEqual(expect.arrayContaining(['ShareFileSystemId']));
    expect(Object.keys(noShares.json.Outputs)).toContain(ALARM_TOPIC_OUTPUT);
  });

  test.each(mounting.map((f) => [f.name] as const))('false: %s still deploys, outside any VPC and without a mount or FERRY_COPY_*', (name) => {
    const fn = noShares.json.Resources[noShares.id(noShares.stack.functions.get(name)!)]!;
    expect(fn.Type).toBe('AWS::Lambda::Function');
    expect(fn.Properties.VpcConfig).toBeUndefined();
    expect(fn.Properties.FileSystemConfigs).toBeUndefined();
    expect(Object.keys(fn.Properties.Environment.Variables)).not.toEqual(expect.arrayContaining([COPY_ENV.cluster]));
    const actions = noShares.statementsOf(noShares.id(noShares.stack.functions.get(name)!.role!)).flatMap((s) => s.Action);
    // No mount of the share storage (the aws-efs driver's API calls are permissions.test.ts's).
    expect(actions.filter((a) => a.startsWith('elasticfilesystem:Client'))).toEqual([]);
  });

  test('false: every machine still deploys; none may run the copy task', () => {
    expect(noShares.ofType('AWS::StepFunctions::StateMachine')).toHaveLength(STATE_MACHINES.length);
    for (const [name, machine] of noShares.stack.stateMachines) {
      const actions = noShares.statementsOf(noShares.id(machine.role)).flatMap((s) => s.Action);
      expect(actions.filter((a) => a.startsWith('ecs:') || a === 'iam:PassRole'), name).toEqual([]);
    }
  });

  test('false: cdk-nag finds nothing unacknowledged either', () => {
    const report = new AwsSolutionsChecks().validateScope(noShares.app);
    expect(report.violations.flatMap((v) => v.violatingResources.map((r) => `${v.ruleName} at ${r.constructPath}`))).toEqual([]);
  });

  test('the prop wins over the context, and a context that is not a boolean fails synth', () => {
    const wiring: FerryWiring = { functions: [functionByName('share-steps')], stateMachines: [] };
    // The S3 flag buildFerryApp sets (access logs by bucket policy); without it the bucket is refused.
    const app = testApp({ context: { shareBackends: true, '@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy': true } });
    const stack = new FerryStack(app, 'FerryPropWins', { shareBackends: false, wiring });
    expect(Template.fromStack(stack).findResources('AWS::EC2::VPC')).toEqual({});
    expect(() => buildFerryApp(testApp({ context: { shareBackends: 'maybe' } }), { nag: false, stackName: 'FerryMaybe', wiring })).toThrow(/shareBackends must be true or false, not maybe/);
  });
});
