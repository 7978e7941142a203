/**
 * What operators are told and what they look at: one SNS topic every alarm notifies (its ARN is
 * the stack output AlarmTopicArn; subscribe to it), an alarm per state machine on executions that
 * ended badly, alarms on the HTTP API's 5xx and on the errors of the functions no machine retries
 * (authorizer, API, scheduled), and the dashboard `<stack>-operations`.
 *
 * Everything is derived from what FerryStack built from the wiring table: a new machine, function
 * or table gets its alarm and its graphs on the next synth, with nothing to add here.
 */
import { CfnOutput, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import type { HttpApi } from 'aws-cdk-lib/aws-apigatewayv2';
import {
  Alarm,
  AlarmStatusWidget,
  ComparisonOperator,
  Dashboard,
  GraphWidget,
  MathExpression,
  Metric,
  TextWidget,
  TreatMissingData,
  type IMetric,
  type IWidget,
} from 'aws-cdk-lib/aws-cloudwatch';
import { SnsAction } from 'aws-cdk-lib/aws-cloudwatch-actions';
import { Operation, type ITable } from 'aws-cdk-lib/aws-dynamodb';
import { PolicyStatement, ServicePrincipal } from 'aws-cdk-lib/aws-iam';
import { Key } from 'aws-cdk-lib/aws-kms';
import type { IFunction } from 'aws-cdk-lib/aws-lambda';
import { Topic } from 'aws-cdk-lib/aws-sns';
import type { StateMachine } from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { substitutionKey, type FunctionWiring } from '../../functions/wiring.js';
import { HTTP_STAGE_NAME } from './http-api.js';

/** Every alarm looks at one period of this length: one bad event in it is enough. */
export const ALARM_PERIOD = Duration.minutes(5);
/** The stack output operators subscribe to. */
export const ALARM_TOPIC_OUTPUT = 'AlarmTopicArn';
/** Function kinds whose errors alarm: no state machine retries them or turns them into a failed execution. */
export const ALARMED_FUNCTION_KINDS: readonly FunctionWiring['kind'][] = ['authorizer', 'api', 'scheduled'];

export const dashboardName = (stackName: string) => `${stackName}-operations`;

/** What monitoring reads from FerryStack (an interface, so this module does not import the stack). */
export interface MonitoredStack {
  readonly stateMachines: ReadonlyMap<string, StateMachine>;
  readonly functions: ReadonlyMap<string, IFunction>;
  readonly tables: ReadonlyMap<string, ITable>;
  readonly httpApi?: HttpApi;
  readonly wiring: { readonly functions: readonly FunctionWiring[] };
  stateMachineName(name: string): string;
}

export interface Monitoring {
  readonly topic: Topic;
  readonly alarms: readonly Alarm[];
  readonly dashboard: Dashboard;
}

const pascal = (name: string) => substitutionKey(name).slice(2);

/**
 * `FILL(a, 0) + FILL(b, 0) + ...` over the metrics: AWS publishes most of these only when they
 * are non-zero, and a plain sum has no value at all where any one of them is missing.
 */
function sumOf(metrics: Record<string, IMetric>, label: string): MathExpression {
  return new MathExpression({
    expression: Object.keys(metrics).map((id) => `FILL(${id}, 0)`).join(' + '),
    usingMetrics: metrics,
    period: ALARM_PERIOD,
    label,
  });
}

/** A machine's executions that ended badly: the alarm's metric and a line on its graph. */
function failedExecutions(name: string, machine: StateMachine): MathExpression {
  return sumOf({ failed: machine.metricFailed(), timedOut: machine.metricTimedOut(), aborted: machine.metricAborted() }, `${name} failed, timed out or aborted`);
}

export function addMonitoring(stack: Stack & MonitoredStack): Monitoring {
  const scope = new Construct(stack, 'Monitoring');
  const topic = addAlarmTopic(scope, stack.stackName);
  new CfnOutput(stack, ALARM_TOPIC_OUTPUT, { value: topic.topicArn, description: 'SNS topic of every Ferry alarm: subscribe to it (docs/aws.md "Alarms, dashboard and throttling")' });

  const alarms: Alarm[] = [];
  const alarm = (id: string, name: string, description: string, metric: IMetric) => {
    const a = new Alarm(scope, id, {
      alarmName: `${stack.stackName}-${name}`,
      alarmDescription: description,
      metric,
      threshold: 1,
      evaluationPeriods: 1,
      comparisonOperator: ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      // No data is the normal state (nothing failed, nothing ran): it must not page anyone.
      treatMissingData: TreatMissingData.NOT_BREACHING,
    });
    // OK too, so whoever was paged also learns when the period passes clean.
    a.addAlarmAction(new SnsAction(topic));
    a.addOkAction(new SnsAction(topic));
    alarms.push(a);
    return a;
  };

  for (const [name, machine] of stack.stateMachines) {
    // A Failed execution is an operation that ended in error after its compensation (its Error
    // names why); TimedOut and Aborted (an operator's StopExecution) ran no compensation at all,
    // so the reconciler and `ferry audit` may have work to finish.
    alarm(`Alarm${pascal(name)}Failed`, `${name}-failed`, `An execution of ${stack.stateMachineName(name)} failed, timed out or was aborted in the last 5 minutes: see its execution history.`, failedExecutions(name, machine));
  }

  const api = stack.httpApi;
  // The stage's metrics (ApiId and Stage dimensions), as HttpStage.metric*() writes them.
  const stageMetric = (m: Metric) => (api ? m.with({ dimensionsMap: { ApiId: api.apiId, Stage: HTTP_STAGE_NAME } }) : m);
  if (api) {
    alarm('AlarmApi5xx', 'api-5xx', 'The HTTP API answered 5xx in the last 5 minutes: an API function or the authorizer failed or timed out (see their logs).', stageMetric(api.metricServerError({ period: ALARM_PERIOD })));
  }

  const wired = stack.wiring.functions.filter((f) => ALARMED_FUNCTION_KINDS.includes(f.kind) && stack.functions.has(f.name));
  const front = wired.filter((f) => f.kind !== 'scheduled');
  if (front.length) {
    const errors = Object.fromEntries(front.map((f, i) => [`f${i}`, stack.functions.get(f.name)!.metricErrors()]));
    alarm('AlarmApiFunctionErrors', 'api-function-errors', `${front.map((f) => f.name).join(', ')}: an invocation failed (unhandled error or timeout) in the last 5 minutes.`, sumOf(errors, 'authorizer and API function errors'));
  }
  for (const f of wired.filter((w) => w.kind === 'scheduled')) {
    // A reconciler run in which a repair failed ends in an error (docs/aws.md "The reconciler").
    alarm(`Alarm${pascal(f.name)}Errors`, `${f.name}-errors`, `A run of ${f.name} failed in the last 5 minutes: its log says which repair.`, stack.functions.get(f.name)!.metricErrors({ period: ALARM_PERIOD }));
  }

  const dashboard = addDashboard(scope, stack, alarms, stageMetric);
  return { topic, alarms, dashboard };
}

/**
 * The topic, encrypted as cdk-nag's SNS2 asks. With a customer-managed key, not the AWS-managed
 * aws/sns one: CloudWatch has to encrypt what it publishes, and only a key policy we write can let
 * it (AWS's documented statement for alarms on an encrypted topic). Publishing to the topic is
 * still limited to this account by the topic's default policy, so nobody else's alarms use the key.
 */
function addAlarmTopic(scope: Construct, stackName: string): Topic {
  const key = new Key(scope, 'AlarmTopicKey', {
    description: `${stackName} alarm topic: lets CloudWatch publish encrypted notifications`,
    enableKeyRotation: true,
    // Messages only pass through the topic; there is nothing encrypted with it worth keeping.
    removalPolicy: RemovalPolicy.DESTROY,
    pendingWindow: Duration.days(7),
  });
  key.addToResourcePolicy(
    new PolicyStatement({ principals: [new ServicePrincipal('cloudwatch.amazonaws.com')], actions: ['kms:Decrypt', 'kms:GenerateDataKey*'], resources: ['*'] }),
  );
  return new Topic(scope, 'AlarmTopic', { displayName: `${stackName} alarms`, masterKey: key, enforceSSL: true });
}

/** Lays widgets out `perRow` to a row, each 24 / perRow wide. */
function rows(widgets: IWidget[], perRow: number): IWidget[][] {
  const out: IWidget[][] = [];
  for (let i = 0; i < widgets.length; i += perRow) out.push(widgets.slice(i, i + perRow));
  return out;
}

const header = (markdown: string) => new TextWidget({ markdown, width: 24, height: 2 });

/**
 * Operations in flight: Step Functions publishes no per-machine metric of running executions.
 * ExecutionsStarted minus the executions that ended in the same period is not it either (an
 * operation can run for hours, so starts and ends fall in different periods, and a running sum
 * over the dashboard's range drifts with every missed point; metrics are best-effort). So each
 * machine shows what did happen per period (started, succeeded, ended badly) and its p90
 * execution time; the account-wide OpenExecutionCount (every state machine of the account and
 * region, not only Ferry's) is the one real count of open executions, and the Step Functions
 * console's Running filter names them.
 */
function addDashboard(scope: Construct, stack: Stack & MonitoredStack, alarms: readonly Alarm[], stageMetric: (m: Metric) => IMetric): Dashboard {
  const widgets: IWidget[][] = [
    [header(`# ${stack.stackName} operations\nEvery alarm notifies the SNS topic of the stack output \`${ALARM_TOPIC_OUTPUT}\`. Running executions: Step Functions console, filter Running (no per-machine metric exists).`)],
    [new AlarmStatusWidget({ title: 'Alarms', alarms: [...alarms], width: 24, height: 6 })],
    [header('## Operations: executions per state machine (5-minute sums) and p90 execution time')],
  ];
  const machines = [...stack.stateMachines].map(
    ([name, machine]) =>
      new GraphWidget({
        title: name,
        width: 8,
        height: 6,
        left: [machine.metricStarted({ label: 'started' }), machine.metricSucceeded({ label: 'succeeded' }), failedExecutions(name, machine).with({ label: 'failed, timed out, aborted' })],
        right: [machine.metricTime({ statistic: 'p90', label: 'execution time p90 (ms)' })],
      }),
  );
  machines.push(
    new GraphWidget({
      title: 'Open executions (whole account and region)',
      width: 8,
      height: 6,
      left: [new Metric({ namespace: 'AWS/States', metricName: 'OpenExecutionCount', statistic: 'Maximum', label: 'open executions' })],
    }),
  );
  widgets.push(...rows(machines, 3));

  if (stack.httpApi) {
    const api = stack.httpApi;
    widgets.push([header('## HTTP API')]);
    widgets.push([
      new GraphWidget({
        title: 'Requests, 4xx, 5xx',
        width: 12,
        height: 6,
        left: [stageMetric(api.metricCount({ label: 'requests' })), stageMetric(api.metricClientError({ label: '4xx' })), stageMetric(api.metricServerError({ label: '5xx' }))],
      }),
      new GraphWidget({
        title: 'Latency p90 (ms)',
        width: 12,
        height: 6,
        left: [stageMetric(api.metricLatency({ statistic: 'p90', label: 'latency' })), stageMetric(api.metricIntegrationLatency({ statistic: 'p90', label: 'integration latency' }))],
      }),
    ]);
  }

  const fns = [...stack.functions];
  const perFunction = (title: string, metric: (fn: IFunction, name: string) => IMetric) =>
    new GraphWidget({ title, width: 8, height: 6, left: fns.map(([name, fn]) => metric(fn, name)) });
  widgets.push([header('## Lambda functions')]);
  widgets.push([
    perFunction('Errors', (fn, name) => fn.metricErrors({ label: name })),
    perFunction('Throttles', (fn, name) => fn.metricThrottles({ label: name })),
    perFunction('Duration p90 (ms)', (fn, name) => fn.metricDuration({ statistic: 'p90', label: name })),
  ]);

  // ThrottledRequests has an Operation dimension: one table's line sums every operation. The ids
  // are unique across the graph, which a CloudWatch graph requires of every metric in it.
  const operations = Object.values(Operation);
  const tables = [...stack.tables].map(([key, table], t) =>
    sumOf(Object.fromEntries(operations.map((op, o) => [`t${t}o${o}`, table.metric('ThrottledRequests', { statistic: 'Sum', dimensionsMap: { TableName: table.tableName, Operation: op } })])), key),
  );
  widgets.push([header('## DynamoDB')]);
  widgets.push([new GraphWidget({ title: 'Throttled requests per table (every operation)', width: 24, height: 6, left: tables })]);

  return new Dashboard(scope, 'Dashboard', { dashboardName: dashboardName(stack.stackName), widgets });
}
