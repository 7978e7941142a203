/**
 * The ECS rights of the functions that manage a migration's own copy task definitions (family
 * `<copy family>-m-<migration id>`, functions/migration/copy-task-definition.ts and copy-task-ecs.ts),
 * from the wiring: `registersCopyTasks` (migration-steps: registers, looks up, lists, deregisters)
 * and `auditsCopyTasks` (the reconciler: lists the families, looks up, lists, deregisters; never
 * registers, never passes a role). Per the service authorization reference, RegisterTaskDefinition
 * is authorized on the task definition; DescribeTaskDefinition, ListTaskDefinitions,
 * ListTaskDefinitionFamilies and DeregisterTaskDefinition take no resource (`*`).
 */
import { ArnFormat, Stack, Validations } from 'aws-cdk-lib';
import { PolicyStatement, type IGrantable } from 'aws-cdk-lib/aws-iam';
import type { Construct } from 'constructs';
import { MIGRATION_FAMILY_SUFFIX, type CopyWorker } from './copy-worker.js';

/** What a migration's own copy task definitions need of ECS beyond their registration (no resource: `*`). */
const LOOK_UP_AND_DEREGISTER = ['ecs:DescribeTaskDefinition', 'ecs:ListTaskDefinitions', 'ecs:DeregisterTaskDefinition'];

/**
 * A migration's own copy task definition: registered from the stack's, in the migrations' families
 * only; looked up, listed and deregistered; registering a definition that names the task's two roles
 * passes them, to ECS tasks only.
 */
export function grantRegisterCopyTasks(worker: CopyWorker, grantee: IGrantable & Construct): void {
  const family = worker.taskDefinition.family;
  const migrations = Stack.of(worker).formatArn({ service: 'ecs', resource: 'task-definition', resourceName: `${family}${MIGRATION_FAMILY_SUFFIX}*`, arnFormat: ArnFormat.SLASH_RESOURCE_NAME });
  grantee.grantPrincipal.addToPrincipalPolicy(new PolicyStatement({ actions: ['ecs:RegisterTaskDefinition'], resources: [migrations] }));
  grantee.grantPrincipal.addToPrincipalPolicy(new PolicyStatement({ actions: LOOK_UP_AND_DEREGISTER, resources: ['*'] }));
  Validations.of(grantee).acknowledge({
    id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task-definition/${family}${MIGRATION_FAMILY_SUFFIX}*]`,
    reason: 'ecs:RegisterTaskDefinition in the copy task families made per migration (<copy family>-m-<migration id>, named at run time), each with the mounts of that migration\'s EFS shares.',
  });
  grantee.grantPrincipal.addToPrincipalPolicy(
    new PolicyStatement({
      actions: ['iam:PassRole'],
      resources: [worker.taskDefinition.taskRole.roleArn, worker.taskDefinition.obtainExecutionRole().roleArn],
      conditions: { StringEquals: { 'iam:PassedToService': 'ecs-tasks.amazonaws.com' } },
    }),
  );
}

/** The reconciler's repair of families no migration holds (functions/audit/copy-task-repairs.ts): list the families, look up, list and deregister revisions. */
export function grantAuditCopyTasks(grantee: IGrantable): void {
  grantee.grantPrincipal.addToPrincipalPolicy(new PolicyStatement({ actions: ['ecs:ListTaskDefinitionFamilies', ...LOOK_UP_AND_DEREGISTER], resources: ['*'] }));
}

/** The reason of a function's `Resource::*` finding for these grants (acknowledgements.ts adds it to the function's others). */
export const COPY_TASK_WILDCARD_REASON =
  "ecs:DescribeTaskDefinition, ListTaskDefinitions, ListTaskDefinitionFamilies and DeregisterTaskDefinition take no resource (the service authorization reference lists none): a migration's own copy task definition, looked up, listed and deregistered when the migration ends or by the reconciler once it has.";
