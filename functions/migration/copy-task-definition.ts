/**
 * The ECS side of a host-assisted copy that reaches a share which is a file system of its own
 * (aws-efs). RunTask has no volume override (its overrides are per container: environment,
 * command, resources; never volumes or mount points), so the file systems a copy task mounts are
 * fixed by its task definition: per migration, a revision of a family named by the migration
 * (copyTaskFamily) is registered from the stack's copy worker task definition (same image, roles,
 * size, logs), its volumes replaced by the migration's file systems, and deregistered when the
 * migration ends. The calls, against the ECS API reference:
 * - DescribeTaskDefinition(family) answers the latest ACTIVE revision, or ClientException
 *   ("Unable to describe task definition.") when the family has none: how a retry after a lost
 *   RegisterTaskDefinition reply finds the revision that call made;
 * - RegisterTaskDefinition makes a new revision (it is not idempotent: a second call makes a
 *   second revision, which deregisterCopyTaskDefinitions removes with the first);
 * - ListTaskDefinitions(familyPrefix, ACTIVE) + DeregisterTaskDefinition per revision: the undo
 *   (an INACTIVE revision cannot run new tasks; a task already running keeps running).
 * ClientException, InvalidParameterException and AccessDeniedException are a request ECS refuses
 * (a family or volume it does not take, a permission missing): a ShareMigrationFailed, which no
 * retry would change. Anything else (throttling, which the SDK retries first, ServerException, a
 * reply lost on the way) answers BackendNotReady: the machine's Task runs the step again after its
 * wait, and the step finds what the first call made.
 */
import type { ContainerDefinition, ECSClient, RegisterTaskDefinitionCommandInput, TaskDefinition, Volume } from '@aws-sdk/client-ecs';
import { BackendNotReady } from '../core/errors.js';
import { errorCode } from '../drivers/volume/aws-ebs-ec2.js';
import { ShareMigrationFailed } from './flow.js';

/** The ECS SDK: loaded on the first ECS call, so a step that never registers a task definition never imports it. */
let sdk: Promise<typeof import('@aws-sdk/client-ecs')> | undefined;
const ecsSdk = () => (sdk ??= import('@aws-sdk/client-ecs'));
let client: ECSClient | undefined;
async function ecs(): Promise<ECSClient> {
  return (client ??= new (await ecsSdk()).ECSClient({}));
}

const REFUSED = new Set(['ClientException', 'InvalidParameterException', 'AccessDeniedException']);
/** DescribeTaskDefinition's answer for a family with no ACTIVE revision. */
const NO_SUCH_TASK_DEFINITION = /unable to describe task definition/i;
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

async function call<T>(operation: string, context: Record<string, unknown>, send: () => Promise<T>): Promise<T> {
  try {
    return await send();
  } catch (e) {
    const code = errorCode(e);
    const message = `ECS ${operation} (${JSON.stringify(context)}): ${code}: ${(e as Error).message}`;
    if (REFUSED.has(code)) throw Object.assign(new ShareMigrationFailed(message), { cause: e });
    throw new BackendNotReady(message, { cause: e, context });
  }
}

/** The family of a task definition given as an ARN (`…:task-definition/<family>:<revision>`), `family:revision` or `family`. */
export function familyOf(taskDefinition: string): string {
  return taskDefinition.replace(/^arn:[^:]+:ecs:[^:]*:[^:]*:task-definition\//, '').replace(/:\d+$/, '');
}

/** The family registered for one migration: the stack's copy family (RunTask is allowed on `<family>-m-*`) and the migration id. */
export function copyTaskFamily(baseTaskDefinition: string, migrationId: string): string {
  const family = `${familyOf(baseTaskDefinition)}-m-${migrationId}`;
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

/** Deregisters every ACTIVE revision of `family` (none is success): the undo of registerCopyTaskDefinition. */
export async function deregisterCopyTaskDefinitions(family: string): Promise<string[]> {
  const { ListTaskDefinitionsCommand, DeregisterTaskDefinitionCommand } = await ecsSdk();
  const arns: string[] = [];
  let nextToken: string | undefined;
  do {
    const page = await call('ListTaskDefinitions', { family }, async () => (await ecs()).send(new ListTaskDefinitionsCommand({ familyPrefix: family, status: 'ACTIVE', ...(nextToken ? { nextToken } : {}) })));
    // familyPrefix is a prefix: only this family's revisions are this migration's.
    arns.push(...(page.taskDefinitionArns ?? []).filter((arn) => familyOf(arn) === family));
    nextToken = page.nextToken;
  } while (nextToken);
  for (const arn of arns) await call('DeregisterTaskDefinition', { taskDefinition: arn }, async () => (await ecs()).send(new DeregisterTaskDefinitionCommand({ taskDefinition: arn })));
  return arns;
}
