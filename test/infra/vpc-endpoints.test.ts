/**
 * The interface endpoints of the share storage's VPC (infra/aws/share-network.ts) are exactly what
 * the inventory's backends make the functions in it call: with local share backends beside aws-efs
 * ones (and aws-ebs volume backends), EFS, EC2 and ECS besides the share storage's own (states,
 * logs, ecr.api, ecr.dkr), each private-DNS, its group admitting HTTPS from the functions' group
 * only; with local share backends alone, the share storage's own and no more, and the reconciler
 * told not to ask ECS for copy task families no migration can register. With aws-efs backends only
 * there is no VPC at all: test/infra/inventory-deploy.test.ts.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { AwsSolutionsChecks } from 'cdk-nag';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { migrationFamilyPrefix } from '../../functions/audit/copy-task-repairs.js';
import type { Inventory } from '../../functions/inventory/schema.js';
import { COPY_ENV } from '../../infra/aws/copy-worker.js';
import { REPO_ROOT, buildFerryApp } from '../../infra/aws/ferry-stack.js';
import { inventoryForDeploy } from '../../infra/aws/inventory-resource.js';
import { vpcApisFor } from '../../infra/aws/share-network.js';
import { SYNTH_HOOK_TIMEOUT_MS, testApp } from '../support/cdk-app.js';
import { view, type View } from '../support/copy-worker-template.js';

const SHARE_STORAGE_OWN = ['ecr.api', 'ecr.dkr', 'logs', 'states'];
const LOCAL_BACKEND = { host: 'ferry@nfs-a', driver: 'local-a', root: '/mnt/ferry-shares/nfs-a', shareBackendName: 'nfs-a', protocols: ['NFS'], pools: [{ name: 'pool0', totalCapacityGb: 10 }] };

const aws = inventoryForDeploy(resolve(REPO_ROOT, 'inventories/aws-sandbox.yaml'));
/** aws-sandbox.yaml (aws-ebs volumes, aws-efs shares) with a local share backend beside them. */
const localAndEfs = { ...structuredClone(aws), shareBackends: [...structuredClone(aws.shareBackends), LOCAL_BACKEND] } as Inventory;
/** A local share backend and nothing of AWS's. */
const localOnly = { ...structuredClone(aws), volumeBackends: [], volumeTypes: [], shareBackends: [LOCAL_BACKEND] } as Inventory;

let dir: string;
let mixed: View;
let local: View;

function synth(inventory: Inventory): View {
  const file = join(dir, `${inventory.shareBackends.length}-${inventory.volumeBackends.length}.json`);
  writeFileSync(file, JSON.stringify(inventory));
  const { app, stack } = buildFerryApp(testApp({ context: { inventory: file } }), { nag: false });
  return view(app, stack);
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'ferry-vpc-endpoints-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The interface endpoints by service (`com.amazonaws.<region>.<service>`, the region a reference), with their properties. */
const interfaceEndpoints = (v: View) =>
  v
    .ofType('AWS::EC2::VPCEndpoint')
    .filter(([, r]) => r.Properties.VpcEndpointType === 'Interface')
    .map(([id, r]) => ({ id, service: JSON.stringify(r.Properties.ServiceName).match(/\.([a-z0-9.]+)"\]\]\}$/)?.[1], props: r.Properties }));

/** The ingress rules into an endpoint's group(s): [from port, to port, protocol, source group's logical id]. */
function ingressOf(v: View, endpoint: { props: Record<string, any> }): unknown[][] {
  const groups = (endpoint.props.SecurityGroupIds as { 'Fn::GetAtt': [string, string] }[]).map((g) => g['Fn::GetAtt'][0]);
  const inline = groups.flatMap((g) => (v.resources[g]!.Properties.SecurityGroupIngress ?? []) as Record<string, any>[]);
  const separate = v
    .ofType('AWS::EC2::SecurityGroupIngress')
    .map(([, r]) => r.Properties)
    .filter((p) => groups.includes(p.GroupId['Fn::GetAtt']?.[0]));
  return [...inline, ...separate].map((p) => [p.FromPort, p.ToPort, p.IpProtocol, p.SourceSecurityGroupId?.['Fn::GetAtt']?.[0] ?? p.CidrIp]);
}

describe('which APIs an inventory makes the functions in the VPC call', () => {
  test('aws-efs shares: EFS, EC2, ECS; aws-ebs volumes alone: EC2; local shares alone, or no inventory: none', () => {
    expect(vpcApisFor(localAndEfs)).toEqual(['efs', 'ec2', 'ecs']);
    expect(vpcApisFor({ ...localOnly, volumeBackends: aws.volumeBackends })).toEqual(['ec2']);
    expect(vpcApisFor(localOnly)).toEqual([]);
    expect(vpcApisFor(undefined)).toEqual([]);
  });
});

describe('local share backends beside aws-efs ones and aws-ebs volumes', () => {
  // One synth per hook: each is timed against SYNTH_HOOK_TIMEOUT_MS alone.
  beforeAll(() => {
    mixed = synth(localAndEfs);
  }, SYNTH_HOOK_TIMEOUT_MS);

  test('interface endpoints for EFS, EC2 and ECS besides states, logs, ecr.api and ecr.dkr, each with private DNS', () => {
    const endpoints = interfaceEndpoints(mixed);
    expect(endpoints.map((e) => e.service).sort()).toEqual([...SHARE_STORAGE_OWN, 'ec2', 'ecs', 'elasticfilesystem'].sort());
    for (const e of endpoints) expect(e.props.PrivateDnsEnabled, e.service).toBe(true);
  });

  test('each of them in its own group, which admits HTTPS (443) from the functions\' group only', () => {
    const functions = mixed.id(mixed.stack.copyWorker!.storage!.functionSecurityGroup);
    const called = interfaceEndpoints(mixed).filter((x) => ['ec2', 'ecs', 'elasticfilesystem', 'states'].includes(x.service!));
    expect(called).toHaveLength(4);
    for (const e of called) {
      expect(e.props.SecurityGroupIds, e.service).toHaveLength(1);
      expect(ingressOf(mixed, e), e.service).toEqual([[443, 443, 'tcp', functions]]);
    }
  });

  test('cdk-nag reports nothing unacknowledged (cdk synth runs it as a plugin)', () => {
    const report = new AwsSolutionsChecks().validateScope(mixed.app);
    expect(report.violations.flatMap((v) => v.violatingResources.map((r) => `${v.severity} ${v.ruleName} at ${r.constructPath}`))).toEqual([]);
  });

  test('the reconciler lists the migrations\' copy task families (no FERRY_COPY_MIGRATION_FAMILIES); every function that calls the drivers runs in the VPC', () => {
    for (const name of ['reconciler', 'migration-steps', 'share-api', 'share-steps', 'inventory-apply']) {
      const props = mixed.resources[mixed.id(mixed.stack.functions.get(name)!)]!.Properties;
      expect(props.VpcConfig, name).toBeDefined();
      expect(props.Environment.Variables[COPY_ENV.migrationFamilies], name).toBeUndefined();
    }
  });
});

describe('local share backends alone', () => {
  beforeAll(() => {
    local = synth(localOnly);
  }, SYNTH_HOOK_TIMEOUT_MS);

  test('the share storage\'s own interface endpoints and no more', () => {
    expect(interfaceEndpoints(local).map((e) => e.service).sort()).toEqual(SHARE_STORAGE_OWN);
  });

  test('the functions in the VPC are told no migration registers a copy task family, so the reconciler never asks ECS (which it could not reach)', () => {
    const vars = local.resources[local.id(local.stack.functions.get('reconciler')!)]!.Properties.Environment.Variables as Record<string, string>;
    expect(vars[COPY_ENV.migrationFamilies]).toBe('false');
    const arn = 'arn:aws:ecs:eu-west-1:123456789012:task-definition/Ferry-copy-worker:3';
    expect(migrationFamilyPrefix({ FERRY_COPY_TASK_DEFINITION: arn, [COPY_ENV.migrationFamilies]: 'false' })).toBeUndefined();
    expect(migrationFamilyPrefix({ FERRY_COPY_TASK_DEFINITION: arn })).toBe('Ferry-copy-worker-m-');
  });
});
