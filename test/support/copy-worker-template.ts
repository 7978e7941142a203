/**
 * Reading the synthesized Ferry stack for the copy worker's tests (test/infra/copy-worker-*.test.ts):
 * a view of one stack (its template, resources by type, a construct's logical id, the statements
 * attached to a role), which machines' ASL uses `ecs:runTask.sync`, the IAM such a machine must get
 * and must not get otherwise, and the Task states of an ASL definition.
 */
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { type App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import type { IConstruct } from 'constructs';
import { expect, test } from 'vitest';
import { ECS_TASK_EVENTS_RULE, RUN_TASK_SYNC } from '../../infra/aws/copy-worker.js';
import { type FerryStack } from '../../infra/aws/ferry-stack.js';

export const ROOT = resolve(import.meta.dirname, '../..');

export type Resource = { Type: string; Properties: Record<string, any>; DeletionPolicy?: string };
export type Statement = { Action: string | string[]; Resource: unknown; Effect: string; Condition?: unknown };

/** Everything a test needs to read one synthesized stack. */
export function view(app: App, stack: FerryStack) {
  const template = Template.fromStack(stack);
  const resources = template.toJSON().Resources as Record<string, Resource>;
  const id = (c: IConstruct) => Stack.of(c).resolve(Stack.of(c).getLogicalId((c.node.defaultChild ?? c) as never)) as string;
  const ofType = (type: string) => Object.entries(resources).filter(([, r]) => r.Type === type);
  /** Every policy statement attached to a role (by the role's logical id). */
  const statementsOf = (roleId: string): Statement[] =>
    ofType('AWS::IAM::Policy')
      .filter(([, r]) => JSON.stringify(r.Properties.Roles).includes(`"${roleId}"`))
      .flatMap(([, r]) => r.Properties.PolicyDocument.Statement);
  return { app, stack, template, resources, id, ofType, statementsOf };
}
export type View = ReturnType<typeof view>;

export const actionsOf = (s: Statement) => (Array.isArray(s.Action) ? s.Action : [s.Action]);
export const withAction = (statements: Statement[], action: string) => statements.filter((s) => actionsOf(s).includes(action));
export const usesRunTaskSync = (m: { file: string }) => {
  const file = resolve(ROOT, m.file);
  return existsSync(file) && readFileSync(file, 'utf8').includes(RUN_TASK_SYNC);
};

/**
 * The IAM a machine needs to run the copy task with `.sync`, as the Step Functions guide's
 * "Run a Job (.sync)" policy for ECS/Fargate gives it, plus iam:PassRole on the task's roles.
 */
export function expectRunTaskSyncIam(v: View, machineName: string): void {
  const copy = v.stack.copyWorker!;
  const statements = v.statementsOf(v.id(v.stack.stateMachines.get(machineName)!.role));
  const text = (s: Statement[]) => JSON.stringify(s);

  const run = withAction(statements, 'ecs:RunTask');
  expect(run, 'ecs:RunTask').toHaveLength(1);
  expect(text(run)).toContain(`:task-definition/${copy.taskDefinition.family}:*"`);
  // And the revisions registered per migration (functions/migration/copy-task-definition.ts).
  expect(text(run)).toContain(`:task-definition/${copy.taskDefinition.family}-m-*:*"`);

  const [stopDescribe] = withAction(statements, 'ecs:StopTask');
  expect(actionsOf(stopDescribe!).sort()).toEqual(['ecs:DescribeTasks', 'ecs:StopTask']);
  expect(stopDescribe!.Resource).toBe('*');

  const pass = withAction(statements, 'iam:PassRole');
  expect(pass).toHaveLength(1);
  expect(pass[0]!.Resource).toEqual([
    { 'Fn::GetAtt': [v.id(copy.taskDefinition.taskRole), 'Arn'] },
    { 'Fn::GetAtt': [v.id(copy.taskDefinition.executionRole!), 'Arn'] },
  ]);

  const events = withAction(statements, 'events:PutRule');
  expect(events).toHaveLength(1);
  expect(actionsOf(events[0]!).sort()).toEqual(['events:DescribeRule', 'events:PutRule', 'events:PutTargets']);
  expect(text(events)).toContain(`:rule/${ECS_TASK_EVENTS_RULE}"`);
  expect(text(events)).toContain(':events:');
}

export function expectNoEcsIam(v: View, machineName: string): void {
  const statements = v.statementsOf(v.id(v.stack.stateMachines.get(machineName)!.role));
  expect(statements.flatMap(actionsOf).filter((a) => a.startsWith('ecs:') || a === 'iam:PassRole' || a.startsWith('events:'))).toEqual([]);
}

/** Each Task state in an ASL definition (nested in Parallel branches and Map processors too). */
export function tasks(definition: any): { name: string; state: any }[] {
  const out: { name: string; state: any }[] = [];
  const walk = (states: Record<string, any>) => {
    for (const [name, state] of Object.entries(states ?? {})) {
      if (state.Type === 'Task') out.push({ name, state });
      for (const b of state.Branches ?? []) walk(b.States);
      if (state.ItemProcessor) walk(state.ItemProcessor.States);
      if (state.Iterator) walk(state.Iterator.States);
    }
  };
  walk(definition.States);
  return out;
}
