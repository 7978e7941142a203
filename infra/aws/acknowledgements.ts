/**
 * The cdk-nag findings the stack accepts, each with its reason: the wildcards that least-privilege
 * grants still contain (GSI queries, execution names, bucket objects, X-Ray), on the functions and
 * on the state machines. A finding not acknowledged here fails synth (test/infra/nag.test.ts).
 */
import { Stack, Validations } from 'aws-cdk-lib';
import type { IFunction } from 'aws-cdk-lib/aws-lambda';
import type { StateMachine } from 'aws-cdk-lib/aws-stepfunctions';
import type { Construct } from 'constructs';
import { GSI1, type TableKey } from '../../functions/core/tables.js';
import type { FunctionWiring } from '../../functions/wiring.js';
import { COPY_TASK_WILDCARD_REASON } from './copy-task-grants.js';
import { CopyWorker } from './copy-worker.js';

/** What the acknowledgements name: resources by logical id, machines by deployed name. */
export interface AcknowledgementScope {
  table(key: TableKey, user: string): Construct;
  readonly bucket: Construct;
  stateMachineName(name: string): string;
}

/** The logical id of a construct (its default child's), as cdk-nag writes it in a finding. */
export function logicalIdOf(c: Construct): string {
  const stack = Stack.of(c);
  const child = (c.node.defaultChild ?? c) as Parameters<Stack['getLogicalId']>[0];
  return stack.resolve(stack.getLogicalId(child)) as string;
}

const XRAY_WILDCARD_REASON = 'X-Ray tracing (xray:PutTraceSegments, xray:PutTelemetryRecords) has no resource-level permissions.';

/** Wildcards the least-privilege grants of one function still contain, each with its reason. */
export function acknowledgeFunction(scope: AcknowledgementScope, fn: IFunction, f: FunctionWiring): void {
  const v = Validations.of(fn);
  v.acknowledge({
    id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
    reason: 'AWSLambdaBasicExecutionRole only allows writing the function\'s own CloudWatch logs; it is the AWS-maintained minimum for any Lambda.',
  });
  v.acknowledge({
    id: 'AwsSolutions-IAM5[Resource::*]',
    reason: XRAY_WILDCARD_REASON,
  });
  v.acknowledge({
    id: 'AwsSolutions-L1',
    reason: 'nodejs22.x is a supported Lambda runtime chosen on purpose: the same code runs unchanged on the local stack (Node 20/22); move to the newest runtime deliberately, not by lint.',
  });
  // Only a function that really mounts (in the VPC): without share backends (FerryStack
  // shareBackends false) it has neither the VPC role nor the EFS grant these reasons speak of.
  if (f.mountsShareStorage && fn.isBoundToVpc) {
    // Replaces the Resource::* reason above: a mounting function also has the EFS ClientMount grant.
    for (const [id, reason] of Object.entries(CopyWorker.FUNCTION_ACKNOWLEDGEMENTS)) v.acknowledge({ id, reason });
  }
  // In or out of the VPC (aws-efs backends only: a copy worker without share storage).
  if (f.registersCopyTasks || f.auditsCopyTasks) {
    const base = f.mountsShareStorage && fn.isBoundToVpc ? CopyWorker.FUNCTION_ACKNOWLEDGEMENTS['AwsSolutions-IAM5[Resource::*]'] : XRAY_WILDCARD_REASON;
    v.acknowledge({ id: 'AwsSolutions-IAM5[Resource::*]', reason: `${base} ${COPY_TASK_WILDCARD_REASON}` });
  }
  for (const key of f.tables) {
    v.acknowledge({
      id: `AwsSolutions-IAM5[Resource::<${logicalIdOf(scope.table(key, f.name))}.Arn>/index/*]`,
      reason: `Queries on the ${key} table's GSI (${GSI1}); grantReadWriteData scopes it to this table's indexes only.`,
    });
  }
  for (const machine of new Set([...(f.starts ?? []), ...(f.describes ?? [])])) {
    v.acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:${scope.stateMachineName(machine)}:*]`,
      reason: `DescribeExecution on executions of ${machine} only; execution names are per operation and not known at deploy time.`,
    });
  }
  if (f.usesBucket) {
    const bucket = logicalIdOf(scope.bucket);
    for (const finding of ['Action::s3:GetObject*', 'Action::s3:GetBucket*', 'Action::s3:List*', 'Action::s3:DeleteObject*', 'Action::s3:Abort*', `Resource::<${bucket}.Arn>/${f.bucketPrefix ?? ''}*`]) {
      v.acknowledge({ id: `AwsSolutions-IAM5[${finding}]`, reason: 'grantReadWrite on the one Ferry bucket (temporary snapshots, images): object-level wildcards within that bucket only.' });
    }
  }
}

/** The wildcards of a state machine's role: invoking its functions' versions, X-Ray and log delivery. */
export function acknowledgeStateMachine(machine: StateMachine, invoked: readonly IFunction[]): void {
  for (const fn of invoked) {
    // grantInvoke also covers the function's versions and aliases (`<arn>:*`).
    Validations.of(machine).acknowledge({
      id: `AwsSolutions-IAM5[Resource::<${logicalIdOf(fn)}.Arn>:*]`,
      reason: 'lambda:InvokeFunction on the function and its versions/aliases (`:*`), as grantInvoke writes it; scoped to the functions this machine lists in the wiring table.',
    });
  }
  // The X-Ray and CloudWatch Logs delivery actions have no resource-level permissions.
  Validations.of(machine).acknowledge({
    id: 'AwsSolutions-IAM5[Resource::*]',
    reason: 'X-Ray tracing and CloudWatch Logs delivery actions (xray:Put*, logs:CreateLogDelivery...) do not support resource-level permissions; CDK writes them with `*`.',
  });
}
