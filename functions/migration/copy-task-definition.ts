/**
 * The ECS side of a host-assisted copy that reaches a share which is a file system of its own
 * (aws-efs). RunTask has no volume override (its overrides are per container: environment,
 * command, resources; never volumes or mount points), so the file systems a copy task mounts are
 * fixed by its task definition: per migration, a revision of a family named by the migration
 * (copyTaskFamily) is registered from the stack's copy worker task definition (same image, roles,
 * size, logs), its volumes replaced by the migration's file systems, and deregistered when the
 * migration ends (deregisterCopyTaskDefinitions; the listing, the deregistration and the mapping of
 * ECS's errors are copy-task-ecs.ts's, which the reconciler shares). The calls, against the ECS API
 * reference:
 * - DescribeTaskDefinition(family) answers the latest ACTIVE revision, or ClientException
 *   ("Unable to describe task definition.") when the family has none: how a retry after a lost
 *   RegisterTaskDefinition reply finds the revision that call made;
 * - RegisterTaskDefinition makes a new revision (it is not idempotent: a second call makes a
 *   second revision, which deregisterCopyTaskDefinitions removes with the first).
 */
import type { ContainerDefinition, RegisterTaskDefinitionCommandInput, TaskDefinition, Volume } from '@aws-sdk/client-ecs';
import { ecs, ecsCall as call, ecsSdk, familyOf, MIGRATION_FAMILY_INFIX, NO_SUCH_TASK_DEFINITION } from './copy-task-ecs.js';
import { errorCode } from '../drivers/volume/aws-ebs-ec2.js';
import { ShareMigrationFailed } from './flow.js';

export { deregisterCopyTaskDefinitions, familyOf } from './copy-task-ecs.js';

/** ECS's family: up to 255 letters, digits, hyphens and underscores. */
const FAMILY_RE = /^[A-Za-z0-9_-]{1,255}$/;

/** Where the copy task mounts a migration's own file systems (its env points the worker there). */
export const COPY_VOLUME_ROOT = '/mnt/ferry-copy';

/** One EFS file system the copy task mounts: TLS and IAM (the task role is what the share's policy names). */
export interface CopyVolume {
  name: 'source' | 'destination';
  fileSystemId: string;
  readOnly: boolean;
}

/** The family registered for one migration: the stack's copy family (RunTask is allowed on `<family>-m-*`) and the migration id. */
export function copyTaskFamily(baseTaskDefinition: string, migrationId: string): string {
  const family = `${familyOf(baseTaskDefinition)}${MIGRATION_FAMILY_INFIX}${migrationId}`;
  if (!FAMILY_RE.test(family)) throw new ShareMigrationFailed(`the copy task family ${JSON.stringify(family)} is not one ECS takes (up to 255 letters, digits, - and _)`);
  return family;
}

/** The latest ACTIVE revision of a family, or undefined when it has none. */
export async function activeCopyTaskDefinition(family: string): Promise<string | undefined> {
  const { DescribeTaskDefinitionCommand } = await ecsSdk();
  try {
    const out = await (await ecs()).send(new DescribeTaskDefinitionCommand({ taskDefinition: family }));
    return out.taskDefinition?.status === 'ACTIVE' ? out.taskDefinition.taskDefinitionArn : undefined;
  } catch (e) {
    if (errorCode(e) === 'ClientException' && NO_SUCH_TASK_DEFINITION.test((e as Error).message)) return undefined;
    return call('DescribeTaskDefinition', { family }, () => Promise.reject(e));
  }
}

/**
 * The registration of `family`: the base definition (the stack's copy worker) with `volumes`
 * instead of its own, keeping its share storage volume (and mount) only when `keepShareStorage`.
 * Pure, so a test reads what ECS is asked.
 */
export function copyTaskRegistration(base: TaskDefinition, family: string, volumes: CopyVolume[], keepShareStorage: boolean): RegisterTaskDefinitionCommandInput {
  const kept = keepShareStorage ? (base.volumes ?? []) : [];
  const keptNames = new Set(kept.map((v) => v.name));
  const own: Volume[] = volumes.map((v) => ({
    name: v.name,
    efsVolumeConfiguration: { fileSystemId: v.fileSystemId, rootDirectory: '/', transitEncryption: 'ENABLED', authorizationConfig: { iam: 'ENABLED' } },
  }));
  const containers: ContainerDefinition[] = (base.containerDefinitions ?? []).map((c) => ({
    ...c,
    mountPoints: [
      ...(c.mountPoints ?? []).filter((m) => keptNames.has(m.sourceVolume ?? '')),
      ...volumes.map((v) => ({ sourceVolume: v.name, containerPath: `${COPY_VOLUME_ROOT}/${v.name}`, readOnly: v.readOnly })),
    ],
  }));
  return {
    family,
    taskRoleArn: base.taskRoleArn,
    executionRoleArn: base.executionRoleArn,
    networkMode: base.networkMode,
    requiresCompatibilities: base.requiresCompatibilities,
    cpu: base.cpu,
    memory: base.memory,
    runtimePlatform: base.runtimePlatform,
    containerDefinitions: containers,
    volumes: [...kept, ...own],
  };
}

/** Registers a revision of `family` from the base task definition; answers its ARN. */
export async function registerCopyTaskDefinition(baseTaskDefinition: string, family: string, volumes: CopyVolume[], keepShareStorage: boolean): Promise<string> {
  const { DescribeTaskDefinitionCommand, RegisterTaskDefinitionCommand } = await ecsSdk();
  const base = await call('DescribeTaskDefinition', { taskDefinition: baseTaskDefinition }, async () => (await ecs()).send(new DescribeTaskDefinitionCommand({ taskDefinition: baseTaskDefinition })));
  if (!base.taskDefinition) throw new ShareMigrationFailed(`ECS DescribeTaskDefinition answered no task definition for ${baseTaskDefinition}`);
  const input = copyTaskRegistration(base.taskDefinition, family, volumes, keepShareStorage);
  const made = await call('RegisterTaskDefinition', { family }, async () => (await ecs()).send(new RegisterTaskDefinitionCommand(input)));
  const arn = made.taskDefinition?.taskDefinitionArn;
  if (!arn) throw new ShareMigrationFailed(`ECS RegisterTaskDefinition answered no task definition for ${family}`);
  return arn;
}
