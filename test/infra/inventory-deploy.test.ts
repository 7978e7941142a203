/**
 * `cdk deploy -c inventory=FILE`: the example AWS inventory synthesizes into one custom resource
 * run by the wiring's deploy function, carrying the validated document; cdk-nag has nothing to say
 * about it; an inventory with a local driver fails synth with the reason.
 */
import { resolve } from 'node:path';
import { App } from 'aws-cdk-lib';
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
  app = new App({ context: { inventory: AWS_EXAMPLE } });
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
  expect(doc.shareBackends.every((b) => b.root.startsWith('/mnt/ferry-shares/'))).toBe(true);
  const token = JSON.stringify(custom[0]!.Properties.ServiceToken);
  const provider = Object.entries(resources).find(([id, r]) => r.Type === 'AWS::Lambda::Function' && id.startsWith('InventoryProviderframeworkonEvent'));
  expect(provider).toBeDefined();
  expect(token).toContain(provider![0]);
  expect(JSON.stringify(provider![1].Properties.Environment)).toContain(stack.resolve(stack.getLogicalId(stack.functions.get('inventory-apply')!.node.defaultChild as never)));
});

test('the deploy function mounts the share storage, where it makes the share backends\' roots', () => {
  const id = stack.resolve(stack.getLogicalId(stack.functions.get('inventory-apply')!.node.defaultChild as never)) as string;
  const fn = resources[id]!.Properties;
  expect(fn.VpcConfig?.SubnetIds).toBeDefined();
  expect(fn.FileSystemConfigs).toEqual([expect.objectContaining({ LocalMountPath: '/mnt/ferry-shares' })]);
});

test('cdk-nag reports nothing unacknowledged on the inventory resource', () => {
  const report = new AwsSolutionsChecks().validateScope(app);
  const findings = report.violations.flatMap((v) => v.violatingResources.map((r) => `${v.severity} ${v.ruleName} at ${r.constructPath}`));
  expect(findings).toEqual([]);
});

test('an inventory with a local driver fails synth with the reason', () => {
  const sandbox = new App({ context: { inventory: resolve(REPO_ROOT, 'inventories/sandbox.yaml') } });
  expect(() => buildFerryApp(sandbox, { nag: false })).toThrow(/volume backend ferry@lvm-a: driver local keeps volumes in one Lambda's \/tmp; on AWS use aws-ebs/);
});

test('the share storage exists only when the inventory names share backends; a contradicting context is refused', () => {
  // The template without share storage is monitoring.test.ts's (shareBackends=false); here what decides it.
  const ebsOnly = { ...(structuredClone(stack.inventory) as Inventory), shareBackends: [] };
  expect(shareBackendsFor(new App(), ebsOnly)).toBe(false);
  expect(shareBackendsFor(new App(), stack.inventory!)).toBe(true);
  expect(Object.values(resources).map((r) => r.Type)).toEqual(expect.arrayContaining(['AWS::EC2::VPCEndpoint', 'AWS::EFS::FileSystem']));
  expect(() => shareBackendsFor(new App({ context: { shareBackends: 'false' } }), stack.inventory!)).toThrow(/contradicts the inventory, which names 2 share backend/);
  expect(() => buildFerryApp(new App({ context: { inventory: AWS_EXAMPLE, shareBackends: 'false' } }), { nag: false })).toThrow(/contradicts the inventory/);
});
