/**
 * A small model of ECS task definitions behind aws-sdk-client-mock, for the copy task definitions
 * a host-assisted migration registers (functions/migration/copy-task-definition.ts). Replies follow
 * the ECS API reference: RegisterTaskDefinition makes revision n+1 of its family, ACTIVE (a family
 * ECS refuses, or a definition without containers, is ClientException); DescribeTaskDefinition of a
 * family answers its latest ACTIVE revision and ClientException "Unable to describe task
 * definition." when it has none (an INACTIVE revision by family:revision is still described);
 * ListTaskDefinitions filters by familyPrefix (a prefix) and status, in revision order, paged;
 * ListTaskDefinitionFamilies filters by familyPrefix and status (ACTIVE: families with an ACTIVE
 * revision; INACTIVE: families with none; neither: all), in order of first registration, paged;
 * DeregisterTaskDefinition needs family:revision (ClientException otherwise), marks it INACTIVE,
 * and answers it again for one already INACTIVE. Any call can fail before its effect or after it
 * (a lost reply), once (`failNext`). The stack's copy worker task definition is there at start.
 */
import { DeregisterTaskDefinitionCommand, DescribeTaskDefinitionCommand, ECSClient, ListTaskDefinitionFamiliesCommand, ListTaskDefinitionsCommand, RegisterTaskDefinitionCommand, type TaskDefinition } from '@aws-sdk/client-ecs';
import { mockClient } from 'aws-sdk-client-mock';
import { awsError } from './fake-ec2.js';

export const FAKE_ECS_REGION = 'eu-west-1';
export const FAKE_ECS_ACCOUNT = '111122223333';
export const COPY_FAMILY = 'ferry-copy-worker';
export const COPY_TASK_ROLE = `arn:aws:iam::${FAKE_ECS_ACCOUNT}:role/ferry-copy-task`;
export const COPY_EXECUTION_ROLE = `arn:aws:iam::${FAKE_ECS_ACCOUNT}:role/ferry-copy-execution`;
const arnOf = (family: string, revision: number) => `arn:aws:ecs:${FAKE_ECS_REGION}:${FAKE_ECS_ACCOUNT}:task-definition/${family}:${revision}`;
const FAMILY_RE = /^[A-Za-z0-9_-]{1,255}$/;
const PAGE = 2;

export interface EcsCall {
  command: string;
  input: Record<string, any>;
}

export class FakeEcs {
  definitions: TaskDefinition[] = [];
  calls: EcsCall[] = [];
  private failures: { command: string; error: Error; after: boolean }[] = [];

  constructor() {
    // The stack's copy worker, as CDK makes it (copy-worker.ts): its volume of the share storage mounted at /mnt/ferry-shares.
    this.register({
      family: COPY_FAMILY,
      taskRoleArn: COPY_TASK_ROLE,
      executionRoleArn: COPY_EXECUTION_ROLE,
      networkMode: 'awsvpc',
      requiresCompatibilities: ['FARGATE'],
      cpu: '2048',
      memory: '4096',
      runtimePlatform: { cpuArchitecture: 'ARM64', operatingSystemFamily: 'LINUX' },
      containerDefinitions: [{ name: 'copy-worker', image: '111122223333.dkr.ecr.eu-west-1.amazonaws.com/cdk-assets:abc', essential: true, readonlyRootFilesystem: true, mountPoints: [{ sourceVolume: 'shares', containerPath: '/mnt/ferry-shares', readOnly: false }] }],
      volumes: [{ name: 'shares', efsVolumeConfiguration: { fileSystemId: 'fs-0stack', transitEncryption: 'ENABLED', authorizationConfig: { accessPointId: 'fsap-0stack', iam: 'ENABLED' } } }],
    });
  }

  get baseArn(): string {
    return arnOf(COPY_FAMILY, 1);
  }

  /** The next `command` fails with `error`: before its effect, or (`after`) with its effect made and the reply lost. */
  failNext(command: string, error: Error, after = false): void {
    this.failures.push({ command, error, after });
  }

  /** Drops the failures failNext queued that no call met. */
  clearFailures(): void {
    this.failures = [];
  }

  active(family: string): TaskDefinition[] {
    return this.definitions.filter((d) => d.family === family && d.status === 'ACTIVE');
  }

  runFamilies(): string[] {
    return [...new Set(this.definitions.filter((d) => d.family !== COPY_FAMILY).map((d) => d.family!))];
  }

  call(command: string, input: Record<string, any>, effect: () => unknown): unknown {
    this.calls.push({ command, input: structuredClone(input) });
    const i = this.failures.findIndex((f) => f.command === command);
    const failure = i >= 0 ? this.failures.splice(i, 1)[0] : undefined;
    if (failure && !failure.after) throw failure.error;
    const out = effect();
    if (failure) throw failure.error;
    return structuredClone(out);
  }

  private find(ref: string): TaskDefinition | undefined {
    const name = ref.replace(/^arn:aws:ecs:[^:]+:\d+:task-definition\//, '');
    const [family, revision] = name.split(':');
    if (revision !== undefined) return this.definitions.find((d) => d.family === family && d.revision === Number(revision));
    return this.active(family!).at(-1);
  }

  register(i: Record<string, any>) {
    if (typeof i.family !== 'string' || !FAMILY_RE.test(i.family)) throw awsError('ClientException', 'Family contains invalid characters or is too long.');
    if (!Array.isArray(i.containerDefinitions) || i.containerDefinitions.length === 0) throw awsError('ClientException', 'Container list cannot be empty.');
    const revision = this.definitions.filter((d) => d.family === i.family).length + 1;
    const made: TaskDefinition = { ...structuredClone(i), taskDefinitionArn: arnOf(i.family, revision), revision, status: 'ACTIVE', registeredAt: new Date() };
    this.definitions.push(made);
    return { taskDefinition: made };
  }

  describe(i: { taskDefinition: string }) {
    const found = this.find(i.taskDefinition);
    if (!found) throw awsError('ClientException', 'Unable to describe task definition.');
    return { taskDefinition: found };
  }

  list(i: { familyPrefix?: string; status?: string; nextToken?: string }) {
    const arns = this.definitions.filter((d) => (!i.familyPrefix || d.family!.startsWith(i.familyPrefix)) && (!i.status || d.status === i.status)).map((d) => d.taskDefinitionArn!);
    const from = i.nextToken ? Number(i.nextToken) : 0;
    const next = from + PAGE < arns.length ? String(from + PAGE) : undefined;
    return { taskDefinitionArns: arns.slice(from, from + PAGE), ...(next ? { nextToken: next } : {}) };
  }

  families(i: { familyPrefix?: string; status?: string; nextToken?: string }) {
    const all = [...new Set(this.definitions.map((d) => d.family!))].filter((f) => !i.familyPrefix || f.startsWith(i.familyPrefix));
    const families = all.filter((f) => (i.status === 'ACTIVE' ? this.active(f).length > 0 : i.status === 'INACTIVE' ? this.active(f).length === 0 : true));
    const from = i.nextToken ? Number(i.nextToken) : 0;
    const next = from + PAGE < families.length ? String(from + PAGE) : undefined;
    return { families: families.slice(from, from + PAGE), ...(next ? { nextToken: next } : {}) };
  }

  deregister(i: { taskDefinition: string }) {
    if (!/:\d+$/.test(i.taskDefinition)) throw awsError('ClientException', 'Revision must be specified to deregister a task definition.');
    const found = this.find(i.taskDefinition);
    if (!found) throw awsError('ClientException', 'The specified task definition does not exist.');
    found.status = 'INACTIVE';
    found.deregisteredAt = new Date();
    return { taskDefinition: found };
  }
}

/** Every ECSClient in the process answered by a fresh FakeEcs (the steps make their own client); `restore` undoes the mock. */
export function mockedEcs(): { fake: FakeEcs; restore: () => void } {
  const fake = new FakeEcs();
  const mock = mockClient(ECSClient);
  mock.on(RegisterTaskDefinitionCommand).callsFake((i) => fake.call('RegisterTaskDefinition', i, () => fake.register(i)));
  mock.on(DescribeTaskDefinitionCommand).callsFake((i) => fake.call('DescribeTaskDefinition', i, () => fake.describe(i)));
  mock.on(ListTaskDefinitionsCommand).callsFake((i) => fake.call('ListTaskDefinitions', i, () => fake.list(i)));
  mock.on(ListTaskDefinitionFamiliesCommand).callsFake((i) => fake.call('ListTaskDefinitionFamilies', i, () => fake.families(i)));
  mock.on(DeregisterTaskDefinitionCommand).callsFake((i) => fake.call('DeregisterTaskDefinition', i, () => fake.deregister(i)));
  return { fake, restore: () => mock.restore() };
}
