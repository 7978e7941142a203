/**
 * The copy worker on AWS (infra/aws/copy-worker.ts) in fixture wirings: one step function, a
 * machine with the copy Task and a machine without, that does not depend on any ASL file in
 * statemachines/ using the task, synthesized with no `docker` on the PATH; and wirings that need no
 * share storage (none made) or only a machine that runs the task (made for it). The app as the
 * wiring table declares it: copy-worker-app.test.ts.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { type App } from 'aws-cdk-lib';
import { testApp } from '../support/cdk-app.js';
import { Template } from 'aws-cdk-lib/assertions';
import { AwsSolutionsChecks } from 'cdk-nag';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { functionByName, type StateMachineWiring } from '../../functions/wiring.js';
import { COPY_CONTAINER_NAME, RUN_TASK_SYNC } from '../../infra/aws/copy-worker.js';
import { buildFerryApp, type FerryWiring } from '../../infra/aws/ferry-stack.js';
import { type Resource, view, type View, expectRunTaskSyncIam, expectNoEcsIam } from '../support/copy-worker-template.js';

// --- a fixture wiring: a machine with the copy Task, independent of statemachines/ ---------------

const COPY_TASK_STATE = {
  Type: 'Task',
  Resource: RUN_TASK_SYNC,
  Parameters: {
    'Cluster.$': '$.copyTask.cluster',
    'TaskDefinition.$': '$.copyTask.taskDefinition',
    LaunchType: 'FARGATE',
    NetworkConfiguration: {
      AwsvpcConfiguration: { 'Subnets.$': '$.copyTask.subnets', 'SecurityGroups.$': '$.copyTask.securityGroups', AssignPublicIp: 'DISABLED' },
    },
    Overrides: { ContainerOverrides: [{ Name: COPY_CONTAINER_NAME, 'Environment.$': '$.copyTask.environment' }] },
  },
  ResultPath: '$.copy',
  End: true,
};

describe('a fixture machine that runs the copy task (no docker on the PATH)', () => {
  let dir: string;
  let fixture: View;
  const savedPath = process.env.PATH;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'ferry-copy-fixture-'));
    const file = join(dir, 'copy-fixture.asl.json');
    writeFileSync(
      file,
      JSON.stringify({
        Comment: 'fixture: prepare the copy with share-steps, then run the copy task and wait',
        StartAt: 'Prepare',
        States: { Prepare: { Type: 'Task', Resource: '${FnShareSteps}', ResultPath: '$.copyTask', Next: 'Copy' }, Copy: COPY_TASK_STATE },
      }),
    );
    const machines: StateMachineWiring[] = [
      { name: 'copy-fixture', file, description: 'fixture with the copy Task', functions: ['share-steps'] },
      { name: 'no-copy-fixture', file: 'statemachines/share-delete.asl.json', description: 'fixture without it', functions: ['share-steps'] },
    ];
    const wiring: FerryWiring = { functions: [functionByName('share-steps')], stateMachines: machines };
    // Synth must not need Docker: take every directory with a `docker` in it off the PATH.
    process.env.PATH = (savedPath ?? '').split(delimiter).filter((d) => d && !existsSync(join(d, 'docker'))).join(delimiter);
    try {
      const { app, stack } = buildFerryApp(testApp({ context: { removalPolicy: 'destroy' } }), { nag: false, stackName: 'FerryCopyFixture', wiring });
      fixture = view(app, stack);
      fixture.app.synth();
    } finally {
      process.env.PATH = savedPath;
    }
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('the machine with the Task gets RunTask on the family, Stop/Describe, PassRole on both roles and the ECS events rule', () => {
    expectRunTaskSyncIam(fixture, 'copy-fixture');
  });

  test('the machine without it gets none of that', () => {
    expectNoEcsIam(fixture, 'no-copy-fixture');
  });

  test('the Task overrides the container the task definition really has', () => {
    const td = fixture.resources[fixture.id(fixture.stack.copyWorker!.taskDefinition)]!.Properties;
    expect(td.ContainerDefinitions.map((c: { Name: string }) => c.Name)).toEqual(COPY_TASK_STATE.Parameters.Overrides.ContainerOverrides.map((o) => o.Name));
  });

  test('removalPolicy=destroy makes the share file system deletable', () => {
    expect(fixture.ofType('AWS::EFS::FileSystem').map(([, r]) => r.DeletionPolicy)).toEqual(['Delete']);
  });

  test('cdk-nag finds nothing unacknowledged, the run-task grants included', () => {
    const report = new AwsSolutionsChecks().validateScope(fixture.app);
    expect(report.violations.flatMap((v) => v.violatingResources.map((r) => `${v.severity} ${v.ruleName} at ${r.constructPath}`))).toEqual([]);
  });
});

describe('a wiring that needs no share storage', () => {
  test('gets no VPC, no file system and no cluster', () => {
    const { stack } = buildFerryApp(testApp(), { nag: false, stackName: 'FerryNoShares', wiring: { functions: [functionByName('authorizer')], stateMachines: [] } });
    expect(stack.copyWorker).toBeUndefined();
    const types = Object.values(Template.fromStack(stack).toJSON().Resources as Record<string, Resource>).map((r) => r.Type);
    for (const type of ['AWS::EC2::VPC', 'AWS::EFS::FileSystem', 'AWS::ECS::Cluster', 'AWS::ECS::TaskDefinition']) expect(types).not.toContain(type);
  });

  test('a machine that runs the task makes the stack create it, even when no function mounts the storage', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-copy-only-'));
    try {
      const file = join(dir, 'copy-only.asl.json');
      writeFileSync(file, JSON.stringify({ StartAt: 'Copy', States: { Copy: COPY_TASK_STATE } }));
      const { stack } = buildFerryApp(testApp(), { nag: false, stackName: 'FerryCopyOnly', wiring: { functions: [], stateMachines: [{ name: 'copy-only', file, description: 'copy only', functions: [] }] } });
      expect(stack.copyWorker).toBeDefined();
      expectRunTaskSyncIam(view(stack.node.root as App, stack), 'copy-only');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

