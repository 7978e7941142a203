/**
 * A local stack whose inventory adds two aws-efs share backends (efs-a: two zones, elastic
 * throughput; efs-b: one zone, bursting), with every EFSClient and EC2Client in the process answered
 * by one FakeEfs (test/support/fake-efs.ts, with replication: fake-efs-replication.ts), and a
 * Manila client for it: the EFS share flows through the API (test/integration/shares-efs*.test.ts).
 */
import { EC2Client } from '@aws-sdk/client-ec2';
import { EFSClient } from '@aws-sdk/client-efs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll } from 'vitest';
import type { Inventory } from '../../functions/inventory/schema.js';
import { FAKE_EFS_REGION, FAKE_EFS_VPC, FakeEfs, wireFakeEfs } from './fake-efs.js';
import { manilaClient } from './manila.js';
import { useSandboxStackWith } from './sandbox-stack.js';
import type { TestLocalStack } from './stack.js';
import type { TaskIntegration } from '../../infra/local/stepfunctions.js';
import { ECS_RUN_TASK_SYNC } from '../../infra/local/stepfunctions-runner.js';
import { mockedEcs, type FakeEcs } from './fake-ecs.js';

export const EFS_BACKENDS: Inventory['shareBackends'] = [
  { host: 'ferry@efs-a', driver: 'aws-efs', region: FAKE_EFS_REGION, vpcId: FAKE_EFS_VPC, subnetIds: ['subnet-0a1', 'subnet-0b2'], shareBackendName: 'efs-a', protocols: ['NFS'], pools: [{ name: 'pool0', totalCapacityGb: 100 }] },
  { host: 'ferry@efs-b', driver: 'aws-efs', region: FAKE_EFS_REGION, vpcId: FAKE_EFS_VPC, subnetIds: ['subnet-0a1'], throughputMode: 'bursting', shareBackendName: 'efs-b', protocols: ['NFS'], pools: [{ name: 'pool0', totalCapacityGb: 100 }] },
];

export interface EfsStack {
  stack: TestLocalStack;
  fake: FakeEfs;
  manila: ReturnType<typeof manilaClient>;
  stop(): Promise<void>;
}

/** `integrations`: the stack's Task integrations other than Lambda (a test's stand-in for the copy task on Fargate). */
export async function startEfsStack(integrations?: Record<string, TaskIntegration>): Promise<EfsStack> {
  const efs = mockClient(EFSClient);
  const ec2 = mockClient(EC2Client);
  const fake = new FakeEfs();
  wireFakeEfs(efs, ec2, fake);
  const stack = await useSandboxStackWith((inventory) => inventory.shareBackends.push(...EFS_BACKENDS), integrations ? { integrations } : {});
  return {
    stack,
    fake,
    manila: manilaClient(() => stack.url),
    async stop() {
      await stack.stop();
      efs.restore();
      ec2.restore();
    },
  };
}

/** The EFS stack of a test file: started before its tests, stopped after them; the getter answers it. */
export function useEfsStack(): () => EfsStack {
  let started: EfsStack | undefined;
  beforeAll(async () => void (started = await startEfsStack()), 180_000);
  afterAll(async () => started?.stop());
  return () => started!;
}

/**
 * The EFS stack with ECS mocked too (test/support/fake-ecs.ts) and the copy worker's FERRY_COPY_*
 * set (`env`, and the task definition the fake starts with): host-assisted migrations of aws-efs
 * shares run their copy task through `fargate`, a test's stand-in for `ecs:runTask.sync`. `stop`
 * stops the stack, restores ECS and the environment.
 */
export async function startEfsStackWithEcs(env: Record<string, string>, fargate: TaskIntegration): Promise<EfsStack & { ecs: FakeEcs }> {
  const ecs = mockedEcs();
  const saved: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries({ ...env, FERRY_COPY_TASK_DEFINITION: ecs.fake.baseArn })) {
    saved[k] = process.env[k];
    process.env[k] = v;
  }
  const efs = await startEfsStack({ [ECS_RUN_TASK_SYNC]: fargate });
  return {
    ...efs,
    ecs: ecs.fake,
    async stop() {
      await efs.stop();
      ecs.restore();
      for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    },
  };
}
