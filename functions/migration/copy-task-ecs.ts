/**
 * The ECS calls both the migration steps and the reconciler make on a migration's own copy task
 * definitions (families `<copy family>-m-<migration id>`, copy-task-definition.ts): the client, the
 * error mapping, and the listing and deregistration of revisions. Kept apart from the registration
 * (copy-task-definition.ts) so that a function bundling only this module (the reconciler) needs, and
 * gets, no RegisterTaskDefinition and no iam:PassRole. Against the ECS API reference:
 * - ListTaskDefinitionFamilies(familyPrefix, status ACTIVE) answers the families that have an ACTIVE
 *   revision, a page at a time (nextToken, up to 100 a page);
 * - ListTaskDefinitions(familyPrefix, ACTIVE) answers revisions' ARNs, paged likewise;
 * - DescribeTaskDefinition(family) answers the latest ACTIVE revision (with `registeredAt`), or
 *   ClientException "Unable to describe task definition." when the family has none;
 * - DeregisterTaskDefinition(family:revision) marks a revision INACTIVE (an INACTIVE revision cannot
 *   run new tasks; a task already running keeps running).
 * ClientException, InvalidParameterException and AccessDeniedException are a request ECS refuses (a
 * ShareMigrationFailed, which no retry would change). Anything else (throttling, which the SDK
 * retries first, ServerException, a reply lost on the way) answers BackendNotReady: the caller runs
 * again later (a machine's Task retry, the reconciler's next pass) and finds what the first call did.
 */
import type { ECSClient } from '@aws-sdk/client-ecs';
import { awsApiClientConfig } from '../core/aws-http.js';
import { BackendNotReady } from '../core/errors.js';
import { errorCode } from '../drivers/volume/aws-ebs-ec2.js';
import { ShareMigrationFailed } from './flow.js';

/** The ECS SDK: loaded on the first ECS call, so a step that never calls ECS never imports it. */
let sdk: Promise<typeof import('@aws-sdk/client-ecs')> | undefined;
export const ecsSdk = () => (sdk ??= import('@aws-sdk/client-ecs'));
let client: ECSClient | undefined;
export async function ecs(): Promise<ECSClient> {
  return (client ??= new (await ecsSdk()).ECSClient(awsApiClientConfig()));
}

const REFUSED = new Set(['ClientException', 'InvalidParameterException', 'AccessDeniedException']);
/** DescribeTaskDefinition's answer for a family with no ACTIVE revision. */
export const NO_SUCH_TASK_DEFINITION = /unable to describe task definition/i;
/** What separates the stack's copy family from a migration id in a migration's own family. */
export const MIGRATION_FAMILY_INFIX = '-m-';

/** One ECS call: a refused request is ShareMigrationFailed, anything else BackendNotReady (see above). */
export async function ecsCall<T>(operation: string, context: Record<string, unknown>, send: () => Promise<T>): Promise<T> {
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

/** Deregisters every ACTIVE revision of `family` (none is success): the undo of registerCopyTaskDefinition. */
export async function deregisterCopyTaskDefinitions(family: string): Promise<string[]> {
  const { ListTaskDefinitionsCommand, DeregisterTaskDefinitionCommand } = await ecsSdk();
  const arns: string[] = [];
  let nextToken: string | undefined;
  do {
    const page = await ecsCall('ListTaskDefinitions', { family }, async () => (await ecs()).send(new ListTaskDefinitionsCommand({ familyPrefix: family, status: 'ACTIVE', ...(nextToken ? { nextToken } : {}) })));
    // familyPrefix is a prefix: only this family's revisions are this migration's.
    arns.push(...(page.taskDefinitionArns ?? []).filter((arn) => familyOf(arn) === family));
    nextToken = page.nextToken;
  } while (nextToken);
  for (const arn of arns) await ecsCall('DeregisterTaskDefinition', { taskDefinition: arn }, async () => (await ecs()).send(new DeregisterTaskDefinitionCommand({ taskDefinition: arn })));
  return arns;
}

/** Every family starting with `prefix` that has an ACTIVE revision (all pages). */
export async function activeFamilies(prefix: string): Promise<string[]> {
  const { ListTaskDefinitionFamiliesCommand } = await ecsSdk();
  const families: string[] = [];
  let nextToken: string | undefined;
  do {
    const page = await ecsCall('ListTaskDefinitionFamilies', { prefix }, async () => (await ecs()).send(new ListTaskDefinitionFamiliesCommand({ familyPrefix: prefix, status: 'ACTIVE', ...(nextToken ? { nextToken } : {}) })));
    families.push(...(page.families ?? []).filter((f) => f.startsWith(prefix)));
    nextToken = page.nextToken;
  } while (nextToken);
  return families;
}

/** The latest ACTIVE revision of a family and when it was registered, or undefined when it has none. */
export async function latestActiveRevision(family: string): Promise<{ arn: string; registeredAt?: Date } | undefined> {
  const { DescribeTaskDefinitionCommand } = await ecsSdk();
  try {
    const out = await (await ecs()).send(new DescribeTaskDefinitionCommand({ taskDefinition: family }));
    const d = out.taskDefinition;
    return d?.status === 'ACTIVE' && d.taskDefinitionArn ? { arn: d.taskDefinitionArn, ...(d.registeredAt ? { registeredAt: d.registeredAt } : {}) } : undefined;
  } catch (e) {
    if (errorCode(e) === 'ClientException' && NO_SUCH_TASK_DEFINITION.test((e as Error).message)) return undefined;
    return ecsCall('DescribeTaskDefinition', { family }, () => Promise.reject(e));
  }
}
