/**
 * A local stack whose inventory adds aws-ebs backends, with every EC2Client in the process answered
 * by one FakeEc2 (test/support/fake-ec2.ts), and a Cinder v3 client for it: the EBS flows through
 * the API (test/integration/volumes-ebs*.test.ts).
 */
import { EC2Client } from '@aws-sdk/client-ec2';
import { mockClient, type AwsClientStub } from 'aws-sdk-client-mock';
import { afterAll, beforeAll } from 'vitest';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import type { Inventory } from '../../functions/inventory/schema.js';
import { FakeEc2, fakeRegions, wireFakeEc2 } from './fake-ec2.js';
import { useSandboxStackWith } from './sandbox-stack.js';
import type { TestLocalStack } from './stack.js';

export interface EbsStack {
  stack: TestLocalStack;
  /** The fake of the first backend's zone's region. */
  fake: FakeEc2;
  /** With `zones`: one fake per region, each client answered by its region's. */
  fakes: Map<string, FakeEc2>;
  ec2: AwsClientStub<EC2Client>;
  /** A Cinder v3 call as admin at microversion 3.44; the body parsed. */
  api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  stop(): Promise<void>;
}

/** The sandbox inventory plus these EBS backends and volume types, on a fresh local stack (with `zones`, one fake EC2 per zone's region). */
export async function startEbsStack(options: {
  backends: Inventory['volumeBackends'];
  types: Inventory['volumeTypes'];
  instances?: string[];
  zones?: string[];
  /** Only these volume backends (the sandbox's local ones dropped), as on AWS. */
  onlyThese?: boolean;
}): Promise<EbsStack> {
  const ec2 = mockClient(EC2Client);
  const fakes = options.zones ? fakeRegions(options.backends[0]!.host, options.zones) : new Map<string, FakeEc2>();
  const fake = fakes.values().next().value ?? new FakeEc2(options.backends[0]?.host);
  wireFakeEc2(ec2, options.zones ? fakes : fake);
  for (const instance of options.instances ?? []) fake.devices.set(instance, ['/dev/sda1']);
  const stack = await useSandboxStackWith((inventory) => {
    if (options.onlyThese) inventory.volumeBackends = [];
    inventory.volumeBackends.push(...options.backends);
    inventory.volumeTypes.push(...options.types);
  });
  return {
    stack,
    fake,
    fakes,
    ec2,
    async api(method, path, body) {
      const res = await fetch(`${stack.url}/volume/v3/admin${path}`, {
        method,
        headers: { 'X-Auth-Token': 'admin:admin', 'Content-Type': 'application/json', 'OpenStack-API-Version': 'volume 3.44' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : undefined };
    },
    async stop() {
      await stack.stop();
      ec2.restore();
      clearDriverCache();
    },
  };
}

/**
 * For a test file: startEbsStack before its tests with one aws-ebs backend, `ferry@ebs-a` in
 * eu-west-1a (pool `gp`, gp3), its volume type `ebs`, and these EC2 instances; stopped after them.
 * The stack, once started.
 */
export function useOneEbsBackend(instances: string[]): () => EbsStack {
  let ebs: EbsStack | undefined;
  beforeAll(async () => {
    ebs = await startEbsStack({
      backends: [{ host: 'ferry@ebs-a', driver: 'aws-ebs', availabilityZone: 'eu-west-1a', ebsVolumeType: 'gp3', volumeBackendName: 'ebs-a', pools: [{ name: 'gp', totalCapacityGb: 100 }] }],
      types: [{ name: 'ebs', extraSpecs: { volume_backend_name: 'ebs-a' } }],
      instances,
    });
  }, 120_000);
  afterAll(async () => ebs?.stop());
  return () => ebs!;
}

/**
 * An EBS stack with one aws-ebs backend in eu-west-1a replicating to `frankfurt` (eu-central-1a),
 * pool `gp`, and a replicated volume type for it: the replication tests' stack.
 */
export function startReplicatedEbsStack(options: { host: string; volumeBackendName: string; typeName: string; ebsVolumeType?: 'gp3'; poolCapacityGb?: number }): Promise<EbsStack> {
  return startEbsStack({
    zones: ['eu-west-1a', 'eu-central-1a'],
    backends: [
      {
        host: options.host,
        driver: 'aws-ebs',
        availabilityZone: 'eu-west-1a',
        ...(options.ebsVolumeType ? { ebsVolumeType: options.ebsVolumeType } : {}),
        volumeBackendName: options.volumeBackendName,
        pools: [{ name: 'gp', totalCapacityGb: options.poolCapacityGb ?? 100 }],
        replicationDevices: [{ backend_id: 'frankfurt', availability_zone: 'eu-central-1a' }],
      },
    ],
    types: [{ name: options.typeName, extraSpecs: { volume_backend_name: options.volumeBackendName, replication_enabled: '<is> True' } }],
  });
}
