/**
 * `cdk deploy -c inventory=FILE`: the example AWS inventory synthesizes into one custom resource
 * run by the wiring's deploy function, carrying the validated document; cdk-nag has nothing to say
 * about it; an inventory with a local driver fails synth with the reason. Its share backends are
 * aws-efs ones, which need no share storage of the stack's own, but the copy worker all the same
 * (a forced host-assisted migration between them): the cluster and the task definition, no VPC.
 */
import { resolve } from 'node:path';
import type { App } from 'aws-cdk-lib';
import { SYNTH_HOOK_TIMEOUT_MS, testApp } from '../support/cdk-app.js';
import { Template } from 'aws-cdk-lib/assertions';
import { AwsSolutionsChecks } from 'cdk-nag';
import { beforeAll, expect, test } from 'vitest';
import { INVENTORY_PROPERTY } from '../../functions/inventory/deploy.js';
import type { Inventory } from '../../functions/inventory/schema.js';
import { REPO_ROOT, buildFerryApp, type FerryStack } from '../../infra/aws/ferry-stack.js';
import { shareBackendsFor } from '../../infra/aws/inventory-resource.js';

const AWS_EXAMPLE = resolve(REPO_ROOT, 'inventories/aws-sandbox.yaml');
let app: App;
let stack: FerryStack;
let resources: Record<string, { Type: string; Properties: Record<string, any> }>;

beforeAll(() => {
  app = testApp({ context: { inventory: AWS_EXAMPLE } });
  ({ stack } = buildFerryApp(app, { nag: false }));
  resources = Template.fromStack(stack).toJSON().Resources;
}, SYNTH_HOOK_TIMEOUT_MS);

test('one inventory resource, applied by the deploy function through the provider, with the document as validated', () => {
  const custom = Object.values(resources).filter((r) => r.Type === 'Custom::FerryInventory');
  expect(custom).toHaveLength(1);
  const doc = JSON.parse(custom[0]!.Properties[INVENTORY_PROPERTY]) as Inventory;
  expect(doc.volumeBackends.map((b) => b.host)).toEqual(['ferry@ebs-a', 'ferry@ebs-b', 'ferry@ebs-multi', 'ferry@ebs-rep']);
  // A replicated backend with a target in another region, and a type that lands on it: what the smoke's replication check needs.
  const replicated = doc.volumeBackends.find((b) => b.host === 'ferry@ebs-rep')!;
  expect(replicated).toMatchObject({ driver: 'aws-ebs', availabilityZone: 'eu-west-1a', replicationDevices: [{ backend_id: 'frankfurt', availability_zone: 'eu-central-1a' }] });
  expect(doc.volumeTypes.find((t) => t.name === 'replicated')?.extraSpecs).toEqual({ replication_enabled: '<is> True', volume_backend_name: 'ebs-rep' });
  // Validated with the AWS rules: defaults filled in, no local volume or compute driver.
  expect(doc.cells).toEqual([]);
  expect(doc.volumeBackends.every((b) => b.driver === 'aws-ebs')).toBe(true);
  expect(doc.shareBackends.map((b) => [b.host, b.driver])).toEqual([['ferry@efs-a', 'aws-efs'], ['ferry@efs-b', 'aws-efs']]);
  const token = JSON.stringify(custom[0]!.Properties.ServiceToken);
  const provider = Object.entries(resources).find(([id, r]) => r.Type === 'AWS::Lambda::Function' && id.startsWith('InventoryProviderframeworkonEvent'));
  expect(provider).toBeDefined();
  expect(token).toContain(provider![0]);
  expect(JSON.stringify(provider![1].Properties.Environment)).toContain(stack.resolve(stack.getLogicalId(stack.functions.get('inventory-apply')!.node.defaultChild as never)));
});

const idOf = (c: { node: { defaultChild?: unknown } }) => stack.resolve(stack.getLogicalId(c.node.defaultChild as never)) as string;
const types = () => Object.values(resources).map((r) => r.Type);

test('with only aws-efs share backends the stack has no share storage: no VPC, no endpoints, no EFS; every function outside any VPC, nothing mounted', () => {
  // An aws-efs backend has no root to make (a file system per share, made by the driver through the EFS API).
  for (const name of ['inventory-apply', 'migration-steps', 'share-api', 'reconciler']) {
    const fn = resources[idOf(stack.functions.get(name)!)]!.Properties;
    expect(fn.VpcConfig, name).toBeUndefined();
    expect(fn.FileSystemConfigs, name).toBeUndefined();
  }
  expect(stack.copyWorker?.storage).toBeUndefined();
  for (const t of ['AWS::EFS::FileSystem', 'AWS::EFS::AccessPoint', 'AWS::EC2::VPC', 'AWS::EC2::VPCEndpoint', 'AWS::EC2::NatGateway']) expect(types(), t).not.toContain(t);
});

test('with only aws-efs share backends the copy worker still deploys (host-assisted migration of an aws-efs share): the cluster, a task definition with no volume, the step function\'s FERRY_COPY_*, RunTask for the phase 1 machine', () => {
  const worker = stack.copyWorker!;
  expect(types().filter((t) => t === 'AWS::ECS::Cluster')).toHaveLength(1);
  const task = resources[idOf(worker.taskDefinition)]!.Properties;
  expect(task).toMatchObject({ Family: worker.taskDefinition.family, Cpu: '2048', Memory: '4096', RequiresCompatibilities: ['FARGATE'], NetworkMode: 'awsvpc' });
  expect(task.Volumes ?? []).toEqual([]);
  expect(task.ContainerDefinitions[0].MountPoints ?? []).toEqual([]);
  // The step function gets the cluster, the task definition and the task role; no subnets, groups or VPC (a migration's own revision runs in its backends' subnets).
  const vars = resources[idOf(stack.functions.get('migration-steps')!)]!.Properties.Environment.Variables as Record<string, unknown>;
  expect(Object.keys(vars).filter((k) => k.startsWith('FERRY_COPY_')).sort()).toEqual(['FERRY_COPY_CLUSTER', 'FERRY_COPY_CONTAINER', 'FERRY_COPY_TASK_DEFINITION', 'FERRY_COPY_TASK_ROLE']);
  expect(vars.FERRY_COPY_TASK_DEFINITION).toEqual({ Ref: idOf(worker.taskDefinition) });
  // The phase 1 machine may run the task (and the migrations' own revisions).
  const machineRole = idOf(stack.stateMachines.get('share-migration-start')!.role);
  const policies = Object.values(resources).filter((r) => r.Type === 'AWS::IAM::Policy' && JSON.stringify(r.Properties.Roles).includes(`"${machineRole}"`));
  expect(JSON.stringify(policies)).toContain('"ecs:RunTask"');
  // The task role: the copy record only, no mount of a share storage.
  const taskPolicies = Object.values(resources).filter((r) => r.Type === 'AWS::IAM::Policy' && JSON.stringify(r.Properties.Roles).includes(`"${idOf(worker.taskDefinition.taskRole)}"`));
  expect(JSON.stringify(taskPolicies)).not.toContain('elasticfilesystem:');
});

test('cdk-nag reports nothing unacknowledged on the inventory resource', () => {
  const report = new AwsSolutionsChecks().validateScope(app);
  const findings = report.violations.flatMap((v) => v.violatingResources.map((r) => `${v.severity} ${v.ruleName} at ${r.constructPath}`));
  expect(findings).toEqual([]);
});

test('an inventory with a local driver fails synth with the reason', () => {
  const sandbox = testApp({ context: { inventory: resolve(REPO_ROOT, 'inventories/sandbox.yaml') } });
  expect(() => buildFerryApp(sandbox, { nag: false })).toThrow(/volume backend ferry@lvm-a: driver local keeps volumes in one Lambda's \/tmp; on AWS use aws-ebs/);
});

test('the share storage exists only when the inventory names share backends of a local kind; a contradicting context is refused', () => {
  // The template with share storage is copy-worker-app.test.ts's (the default synth); here what decides it.
  const ebsOnly = { ...(structuredClone(stack.inventory) as Inventory), shareBackends: [] };
  const withLocal = structuredClone(stack.inventory) as Inventory;
  withLocal.shareBackends.push({ host: 'ferry@nfs-a', driver: 'local-a', root: '/mnt/ferry-shares/nfs-a', shareBackendName: 'nfs-a', protocols: ['NFS'], pools: [{ name: 'pool0', totalCapacityGb: 10 }] });
  expect(shareBackendsFor(testApp(), ebsOnly)).toBe(false);
  expect(shareBackendsFor(testApp(), stack.inventory!)).toBe(false);
  expect(shareBackendsFor(testApp(), withLocal)).toBe(true);
  expect(() => shareBackendsFor(testApp({ context: { shareBackends: 'false' } }), withLocal)).toThrow(/contradicts the inventory, which names 1 share backend\(s\) on the share storage/);
  expect(() => buildFerryApp(testApp({ context: { inventory: AWS_EXAMPLE, shareBackends: 'true' } }), { nag: false })).toThrow(/shareBackends=true contradicts the inventory, which names 0 share backend/);
});
