/**
 * `cdk deploy -c inventory=FILE`: the example AWS inventory synthesizes into one custom resource
 * run by the wiring's deploy function, carrying the validated document; cdk-nag has nothing to say
 * about it; an inventory with a local driver fails synth with the reason. Its share backends are
 * aws-efs ones, which need no share storage of the stack's own.
 */
import { resolve } from 'node:path';
import type { App } from 'aws-cdk-lib';
import { testApp } from '../support/cdk-app.js';
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
}, 240_000);

test('one inventory resource, applied by the deploy function through the provider, with the document as validated', () => {
  const custom = Object.values(resources).filter((r) => r.Type === 'Custom::FerryInventory');
  expect(custom).toHaveLength(1);
  const doc = JSON.parse(custom[0]!.Properties[INVENTORY_PROPERTY]) as Inventory;
  expect(doc.volumeBackends.map((b) => b.host)).toEqual(['ferry@ebs-a', 'ferry@ebs-b', 'ferry@ebs-multi']);
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

test('with only aws-efs share backends the stack has no share storage: the deploy function runs outside any VPC, nothing mounted', () => {
  // An aws-efs backend has no root to make (a file system per share, made by the driver through the EFS API).
  const id = stack.resolve(stack.getLogicalId(stack.functions.get('inventory-apply')!.node.defaultChild as never)) as string;
  const fn = resources[id]!.Properties;
  expect(fn.VpcConfig).toBeUndefined();
  expect(fn.FileSystemConfigs).toBeUndefined();
  expect(stack.copyWorker).toBeUndefined();
  expect(Object.values(resources).map((r) => r.Type)).not.toEqual(expect.arrayContaining(['AWS::EFS::FileSystem']));
  expect(Object.values(resources).map((r) => r.Type)).not.toEqual(expect.arrayContaining(['AWS::EC2::VPC']));
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
