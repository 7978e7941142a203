/**
 * The copy worker on AWS (infra/aws/copy-worker.ts) in the app as the wiring table declares it:
 * the VPC, the share file system, the Fargate task, what the mounting functions get, and the IAM of
 * every machine that runs the task with `ecs:runTask.sync`. A fixture wiring that does not depend
 * on statemachines/, and a wiring with no share storage: copy-worker-fixture.test.ts.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { SYNTH_HOOK_TIMEOUT_MS, testApp } from '../support/cdk-app.js';
import type { IConstruct } from 'constructs';
import { beforeAll, describe, expect, test } from 'vitest';
import { TABLES, tableEnvName } from '../../functions/core/tables.js';
import { FUNCTIONS, STATE_MACHINES } from '../../functions/wiring.js';
import {
  COPY_CONTAINER_NAME,
  COPY_DOCKERFILE,
  COPY_ENV,
  COPY_REGISTRAR_ENV,
  COPY_TASK_CPU,
  COPY_TASK_MEMORY_MIB,
  RUN_TASK_SYNC,
  SHARE_ACCESS_POINT_PATH,
  SHARE_MOUNT_PATH,
} from '../../infra/aws/copy-worker.js';
import { buildFerryApp } from '../../infra/aws/ferry-stack.js';
import { COPY_TASK_TIMEOUT_SECONDS, MACHINE_POLICIES, RETRIERS } from '../../infra/asl/policy.js';
import { ROOT, type Resource, view, type View, actionsOf, withAction, usesRunTaskSync, expectRunTaskSyncIam, expectNoEcsIam, tasks } from '../support/copy-worker-template.js';

// --- the app as the wiring table declares it ----------------------------------------------------

let real: View;

beforeAll(() => {
  const { app, stack } = buildFerryApp(testApp(), { nag: false });
  real = view(app, stack);
}, SYNTH_HOOK_TIMEOUT_MS);

const mounting = FUNCTIONS.filter((f) => f.mountsShareStorage);

describe('the wiring table asks for the share storage', () => {
  test('share-api and share-steps (at least) mount the share storage', () => {
    expect(mounting.map((f) => f.name)).toEqual(expect.arrayContaining(['share-api', 'share-steps']));
  });
});

describe('VPC', () => {
  test('one VPC, two isolated subnets in two AZs: no internet gateway, no NAT', () => {
    real.template.resourceCountIs('AWS::EC2::VPC', 1);
    real.template.resourceCountIs('AWS::EC2::Subnet', 2);
    real.template.resourceCountIs('AWS::EC2::InternetGateway', 0);
    real.template.resourceCountIs('AWS::EC2::NatGateway', 0);
    const azs = real.ofType('AWS::EC2::Subnet').map(([, r]) => JSON.stringify(r.Properties.AvailabilityZone));
    expect(new Set(azs).size).toBe(2);
    for (const [, r] of real.ofType('AWS::EC2::Subnet')) expect(r.Properties.MapPublicIpOnLaunch).toBe(false);
    // No route anywhere but the local VPC and the gateway endpoints.
    real.template.resourceCountIs('AWS::EC2::Route', 0);
  });

  test('gateway endpoints for DynamoDB and S3, interface endpoints with private DNS for states, logs, ecr.api and ecr.dkr', () => {
    const endpoints = real.ofType('AWS::EC2::VPCEndpoint').map(([, r]) => r.Properties);
    // ServiceName is com.amazonaws.<region>.<service>, the region a reference.
    const service = (p: Record<string, any>) => JSON.stringify(p.ServiceName).match(/\.([a-z0-9.]+)"\]\]\}$/)?.[1];
    const iface = endpoints.filter((p) => p.VpcEndpointType === 'Interface');
    expect(endpoints.filter((p) => (p.VpcEndpointType ?? 'Gateway') === 'Gateway').map(service).sort()).toEqual(['dynamodb', 's3']);
    expect(iface.map(service).sort()).toEqual(['ecr.api', 'ecr.dkr', 'logs', 'states']);
    for (const p of iface) expect(p.PrivateDnsEnabled).toBe(true);
  });

  test('the VPC has flow logs', () => {
    real.template.resourceCountIs('AWS::EC2::FlowLog', 1);
  });
});

describe('share file system', () => {
  const fsEntry = () => real.ofType('AWS::EFS::FileSystem');

  test('one EFS file system, encrypted, retained by default like the tables', () => {
    expect(fsEntry()).toHaveLength(1);
    const [, fs] = fsEntry()[0]!;
    expect(fs.Properties.Encrypted).toBe(true);
    expect(fs.DeletionPolicy).toBe('Retain');
  });

  test(`one access point at ${SHARE_ACCESS_POINT_PATH} acting as uid/gid 0`, () => {
    real.template.resourceCountIs('AWS::EFS::AccessPoint', 1);
    real.template.hasResourceProperties('AWS::EFS::AccessPoint', {
      PosixUser: { Uid: '0', Gid: '0' },
      RootDirectory: { Path: SHARE_ACCESS_POINT_PATH },
    });
  });

  test('NFS (2049) reaches the file system from the functions and the task only', () => {
    const copy = real.stack.copyWorker!;
    const fsSg = real.id(copy.storage!.fileSystem.connections.securityGroups[0]!);
    const ingress = real
      .ofType('AWS::EC2::SecurityGroupIngress')
      .map(([, r]) => r.Properties)
      .filter((p) => JSON.stringify(p.GroupId).includes(`"${fsSg}"`));
    expect(ingress.map((p) => [p.FromPort, p.ToPort, p.IpProtocol])).toEqual([
      [2049, 2049, 'tcp'],
      [2049, 2049, 'tcp'],
    ]);
    expect(ingress.map((p) => p.SourceSecurityGroupId['Fn::GetAtt'][0]).sort()).toEqual(
      [real.id(copy.storage!.functionSecurityGroup), real.id(copy.storage!.taskSecurityGroup)].sort(),
    );
    // And no inline ingress on the group itself.
    expect(real.resources[fsSg]!.Properties.SecurityGroupIngress).toBeUndefined();
  });

  test('one mount target per isolated subnet, in the file system group', () => {
    real.template.resourceCountIs('AWS::EFS::MountTarget', 2);
  });
});

describe('functions that mount the share storage', () => {
  const fn = (name: string) => real.resources[real.id(real.stack.functions.get(name)!)]!.Properties;

  test.each(mounting.map((f) => [f.name] as const))('%s runs in the isolated subnets with the access point at /mnt/ferry-shares', (name) => {
    const copy = real.stack.copyWorker!;
    const props = fn(name);
    expect(props.VpcConfig.SecurityGroupIds).toEqual([{ 'Fn::GetAtt': [real.id(copy.storage!.functionSecurityGroup), 'GroupId'] }]);
    expect(props.VpcConfig.SubnetIds).toEqual(copy.storage!.vpc.isolatedSubnets.map((s) => ({ Ref: real.id(s.node.defaultChild as IConstruct) })));
    expect(props.FileSystemConfigs).toHaveLength(1);
    expect(props.FileSystemConfigs[0].LocalMountPath).toBe(SHARE_MOUNT_PATH);
    expect(JSON.stringify(props.FileSystemConfigs[0].Arn)).toContain(`"${real.id(copy.storage!.accessPoint)}"`);
  });

  test.each(mounting.map((f) => [f.name] as const))('%s gets the RunTask parameters in FERRY_COPY_*', (name) => {
    const copy = real.stack.copyWorker!;
    const vars = fn(name).Environment.Variables as Record<string, unknown>;
    expect(vars[COPY_ENV.cluster]).toEqual({ 'Fn::GetAtt': [real.id(copy.cluster), 'Arn'] });
    expect(vars[COPY_ENV.taskDefinition]).toEqual({ Ref: real.id(copy.taskDefinition) });
    expect(vars[COPY_ENV.subnets]).toEqual({ 'Fn::Join': [',', copy.storage!.vpc.isolatedSubnets.map((s) => ({ Ref: real.id(s.node.defaultChild as IConstruct) }))] });
    // One group: CDK folds the join of one element into the element itself.
    expect(vars[COPY_ENV.securityGroups]).toEqual({ 'Fn::GetAtt': [real.id(copy.storage!.taskSecurityGroup), 'GroupId'] });
    expect(vars[COPY_ENV.container]).toBe(COPY_CONTAINER_NAME);
    // The one that registers a migration's own copy task definition: who the task is to an EFS share's policy, and the stack's VPC.
    const registers = FUNCTIONS.find((f) => f.name === name)!.registersCopyTasks;
    expect(vars[COPY_REGISTRAR_ENV.taskRole]).toEqual(registers ? { 'Fn::GetAtt': [real.id(copy.taskDefinition.taskRole), 'Arn'] } : undefined);
    expect(vars[COPY_REGISTRAR_ENV.vpcId]).toEqual(registers ? { Ref: real.id(copy.storage!.vpc) } : undefined);
  });

  test.each(mounting.map((f) => [f.name] as const))('%s may mount, write and act as root through the access point only', (name) => {
    const copy = real.stack.copyWorker!;
    const statements = real.statementsOf(real.id(real.stack.functions.get(name)!.role!));
    const root = withAction(statements, 'elasticfilesystem:ClientRootAccess');
    expect(root).toHaveLength(1);
    expect(root[0]!.Resource).toEqual({ 'Fn::GetAtt': [real.id(copy.storage!.fileSystem), 'Arn'] });
    expect(JSON.stringify(root[0]!.Condition)).toContain(`"${real.id(copy.storage!.accessPoint)}"`);
    for (const s of withAction(statements, 'elasticfilesystem:ClientMount')) expect(s.Condition ?? root[0]!.Condition).toBeDefined();
  });

  test.each(FUNCTIONS.filter((f) => !f.mountsShareStorage).map((f) => [f.name] as const))('%s stays out of the VPC and gets no FERRY_COPY_*', (name) => {
    const props = fn(name);
    expect(props.VpcConfig).toBeUndefined();
    expect(props.FileSystemConfigs).toBeUndefined();
    expect(Object.keys(props.Environment.Variables).filter((k) => k.startsWith('FERRY_COPY_'))).toEqual([]);
  });
});

describe('the copy task', () => {
  const taskDef = () => real.resources[real.id(real.stack.copyWorker!.taskDefinition)]!.Properties;
  const container = () => taskDef().ContainerDefinitions[0];

  test(`a Fargate task definition, ${COPY_TASK_CPU / 1024} vCPU / ${COPY_TASK_MEMORY_MIB / 1024} GiB on arm64, in an ECS cluster`, () => {
    real.template.resourceCountIs('AWS::ECS::Cluster', 1);
    real.template.resourceCountIs('AWS::ECS::TaskDefinition', 1);
    expect(taskDef()).toMatchObject({
      RequiresCompatibilities: ['FARGATE'],
      NetworkMode: 'awsvpc',
      Cpu: String(COPY_TASK_CPU),
      Memory: String(COPY_TASK_MEMORY_MIB),
      RuntimePlatform: { CpuArchitecture: 'ARM64', OperatingSystemFamily: 'LINUX' },
      Family: `${real.stack.stackName}-copy-worker`,
    });
  });

  test(`one container named ${COPY_CONTAINER_NAME}, its image an asset, logging to CloudWatch`, () => {
    expect(taskDef().ContainerDefinitions).toHaveLength(1);
    expect(container()).toMatchObject({ Name: COPY_CONTAINER_NAME, Essential: true, ReadonlyRootFilesystem: true, LogConfiguration: { LogDriver: 'awslogs' } });
    expect(JSON.stringify(container().Image)).toContain('container-assets');
  });

  test(`the access point is mounted at ${SHARE_MOUNT_PATH} with TLS and IAM authorization`, () => {
    const copy = real.stack.copyWorker!;
    expect(taskDef().Volumes).toEqual([
      {
        Name: 'shares',
        EFSVolumeConfiguration: {
          FilesystemId: { Ref: real.id(copy.storage!.fileSystem) },
          TransitEncryption: 'ENABLED',
          AuthorizationConfig: { AccessPointId: { Ref: real.id(copy.storage!.accessPoint) }, IAM: 'ENABLED' },
        },
      },
    ]);
    expect(container().MountPoints).toEqual([{ SourceVolume: 'shares', ContainerPath: SHARE_MOUNT_PATH, ReadOnly: false }]);
  });

  test('the container gets the share table and the region as the functions do', () => {
    const env = Object.fromEntries((container().Environment as { Name: string; Value: unknown }[]).map((e) => [e.Name, e.Value]));
    expect(env[tableEnvName('share')]).toEqual({ Ref: real.id(real.stack.tables.get('share')!) });
    expect(env.AWS_REGION).toEqual({ Ref: 'AWS::Region' });
    expect(Object.keys(env).filter((k) => k.startsWith('FERRY_TABLE_'))).toEqual([tableEnvName('share')]);
  });

  test('the task role reaches the share table only (get and update its record) and the file system through the access point', () => {
    const copy = real.stack.copyWorker!;
    const statements = real.statementsOf(real.id(copy.taskDefinition.taskRole));
    const text = JSON.stringify(statements);
    for (const t of TABLES) {
      if (t.key === 'share') expect(text).toContain(`"${real.id(real.stack.tables.get(t.key)!)}"`);
      else expect(text).not.toContain(`"${real.id(real.stack.tables.get(t.key)!)}"`);
    }
    expect(statements.flatMap(actionsOf).filter((a) => a.startsWith('dynamodb:')).sort()).toEqual(['dynamodb:GetItem', 'dynamodb:UpdateItem']);
    expect(text).not.toContain('/index/');
    const efs = withAction(statements, 'elasticfilesystem:ClientWrite');
    expect(efs).toHaveLength(1);
    expect(actionsOf(efs[0]!).sort()).toEqual(['elasticfilesystem:ClientMount', 'elasticfilesystem:ClientRootAccess', 'elasticfilesystem:ClientWrite']);
    expect(JSON.stringify(efs[0]!.Condition)).toContain(`"${real.id(copy.storage!.accessPoint)}"`);
  });

  test('the image is built at deploy from Dockerfile.copy-worker for linux/arm64; synth only stages a small context', () => {
    const assembly = real.app.synth();
    const manifest = JSON.parse(readFileSync(join(assembly.directory, `${real.stack.artifactId}.assets.json`), 'utf8'));
    const images = Object.values(manifest.dockerImages ?? {}) as { source: { directory: string; dockerFile: string; platform?: string } }[];
    expect(images).toHaveLength(1);
    expect(images[0]!.source).toMatchObject({ dockerFile: COPY_DOCKERFILE, platform: 'linux/arm64' });
    const context = join(assembly.directory, images[0]!.source.directory);
    const files = (readdirSync(context, { recursive: true, withFileTypes: true }) as import('node:fs').Dirent[])
      .filter((d) => d.isFile())
      .map((d) => relative(context, join(d.parentPath, d.name)));
    expect(files).toEqual(expect.arrayContaining([COPY_DOCKERFILE, 'package.json', 'package-lock.json', 'functions/copy/main.ts', 'functions/copy/thread.ts']));
    expect(files.filter((f) => !f.startsWith('functions/') && !['package.json', 'package-lock.json', 'tsconfig.json', COPY_DOCKERFILE, '.dockerignore'].includes(f))).toEqual([]);
  });

  test('Dockerfile.copy-worker builds functions/copy/main.ts and thread.ts and runs the bundle on node 22', () => {
    const dockerfile = readFileSync(join(ROOT, COPY_DOCKERFILE), 'utf8');
    expect(dockerfile).toMatch(/^FROM node:22-slim$/m);
    expect(dockerfile).toContain('functions/copy/main.ts functions/copy/thread.ts');
    expect(dockerfile).toMatch(/^ENTRYPOINT \["node", "\/app\/main\.js"\]$/m);
  });

  test('the file system, the cluster and the task definition are stack outputs', () => {
    const outputs = real.template.toJSON().Outputs as Record<string, unknown>;
    expect(Object.keys(outputs)).toEqual(expect.arrayContaining(['ShareFileSystemId', 'CopyClusterArn', 'CopyTaskDefinitionArn']));
  });
});

describe('state machines in the wiring table', () => {
  // Whatever machine files exist when this runs: each one that runs the task has the IAM for it.
  test.each(STATE_MACHINES.map((m) => [m.name, m] as const))('%s has the ecs:runTask.sync IAM exactly when its ASL uses it', (name, m) => {
    if (usesRunTaskSync(m)) expectRunTaskSyncIam(real, name);
    else expectNoEcsIam(real, name);
  });

  test.each(STATE_MACHINES.filter(usesRunTaskSync).map((m) => [m.name, m] as const))('%s runs the copy task on Fargate, overriding the copy-worker container', (_name, m) => {
    const definition = JSON.parse(readFileSync(resolve(ROOT, m.file), 'utf8'));
    const runs = tasks(definition).filter((t) => t.state.Resource === RUN_TASK_SYNC);
    expect(runs.length).toBeGreaterThan(0);
    for (const { name, state } of runs) {
      expect(state.Parameters?.LaunchType, name).toBe('FARGATE');
      expect((state.Parameters?.Overrides?.ContainerOverrides ?? []).map((o: { Name?: string }) => o.Name), name).toEqual([COPY_CONTAINER_NAME]);
    }
  });

  test.each(STATE_MACHINES.filter(usesRunTaskSync).map((m) => [m.name] as const))(
    '%s as deployed (the definition asset of the synthesized machine) bounds the copy task and retries a refused launch',
    (name) => {
      // The template only points at the definition (an S3 asset); read the staged file it deploys.
      const assembly = real.app.synth();
      const key: string = real.resources[real.id(real.stack.stateMachines.get(name)!)]!.Properties.DefinitionS3Location.Key;
      const manifest = JSON.parse(readFileSync(join(assembly.directory, `${real.stack.artifactId}.assets.json`), 'utf8'));
      const asset = manifest.files[key.replace(/\.json$/, '')] as { source: { path: string } };
      const definition = JSON.parse(readFileSync(join(assembly.directory, asset.source.path), 'utf8'));
      const runs = tasks(definition).filter((t) => t.state.Resource === RUN_TASK_SYNC);
      expect(runs.length).toBeGreaterThan(0);
      for (const { name: state, state: task } of runs) {
        expect(task.TimeoutSeconds, state).toBe(COPY_TASK_TIMEOUT_SECONDS);
        expect(task.Retry, state).toEqual([RETRIERS.copyTaskLaunch]);
      }
      expect(definition.TimeoutSeconds).toBe(MACHINE_POLICIES[name].timeoutSeconds);
    },
  );
});
