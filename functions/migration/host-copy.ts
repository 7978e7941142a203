/**
 * Host-assisted phase 1 (reference §1.8): the source cast read-only, the destination share made,
 * the data node given access, then the copy worker as a task (its operation record in
 * functions/copy/progress.ts) until it ends, and the data node's access removed. The copy record
 * is removed by deleteCopyRecord when the migration ends.
 *
 * A side that is a file system of its own (aws-efs, ShareDataNodeDriver) is mounted by the copy task
 * as a volume of a task definition registered for the migration (copy-task-definition.ts): its
 * family is recorded before it is registered and deregistered when the migration ends
 * (deregisterCopyTaskDefinition, by the cleanup and by phase 2's deleteRetired). The task runs in
 * the subnets where every file system it mounts has a mount target, behind the shares' own groups
 * (plus the stack's task group when the other side is the share storage).
 */
import { DeleteCommand } from '@aws-sdk/lib-dynamodb';
import { db } from '../core/db.js';
import { reasonOf } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { tableName } from '../core/tables.js';
import { isShareDataNodeDriver, type DataNodeMount } from '../drivers/share/driver.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { copyOperationKey, getCopyOperation } from '../copy/progress.js';
import { backendShareName, sharePoolOf, type Share, type ShareMigration } from '../shares/model.js';
import { getShareBackend } from '../shares/repo.js';
import { dataNodeAccessTo, syncDestinationRules, syncSourceRules } from './access.js';
import { activeCopyTaskDefinition, COPY_VOLUME_ROOT, copyTaskFamily, deregisterCopyTaskDefinitions, registerCopyTaskDefinition, type CopyVolume } from './copy-task-definition.js';
import { apply, load, MAX_COPY_ATTEMPTS, now, ShareMigrationFailed, task, type MigrationStepInput } from './flow.js';

const list = (v: string | undefined) => (v ? v.split(',').map((x) => x.trim()).filter(Boolean) : []);

/** The ECS RunTask parameters of the copy worker (on AWS from the stack; locally placeholders the local integration ignores). */
export function copyTaskParameters(operationId: string, source: string, destination: string, own: { taskDefinition?: string; subnets?: string[]; securityGroups?: string[] } = {}) {
  return {
    cluster: process.env.FERRY_COPY_CLUSTER ?? 'ferry-local',
    taskDefinition: own.taskDefinition ?? process.env.FERRY_COPY_TASK_DEFINITION ?? 'ferry-copy-worker',
    subnets: own.subnets ?? list(process.env.FERRY_COPY_SUBNETS),
    securityGroups: own.securityGroups ?? list(process.env.FERRY_COPY_SECURITY_GROUPS),
    environment: [
      { Name: 'FERRY_COPY_OPERATION_ID', Value: operationId },
      { Name: 'FERRY_COPY_SOURCE', Value: source },
      { Name: 'FERRY_COPY_DESTINATION', Value: destination },
    ],
  };
}

export const copyOperationIdOf = (migrationId: string) => `share-migration-${migrationId}`;

/**
 * Host-assisted preparation (reference §1.8): source rules cast read-only, destination share
 * created and `migrating_to`, the data node given access to both, then the copy task's parameters.
 */
export async function hostPrepare(input: MigrationStepInput): Promise<{ copyTask: ReturnType<typeof copyTaskParameters> }> {
  let { s, m } = await load(input);
  if (s.taskState === 'data_copying_completing' || s.taskState === 'data_copying_completed') {
    // Resumed after the copy: the worker finds its operation completed and exits at once; HostFinish resumes.
    return { copyTask: await copyTaskOf(s, copyOperationIdOf(m.id)) };
  }
  if (s.taskState === 'migration_in_progress') {
    if (!m.readOnlyCast) s = await apply(input, { type: 'read-only', at: now(), migrationId: m.id, cast: true });
    await syncSourceRules(s);
    m = s.migration!;
    const d = m.destination!;
    const destBackend = await getShareBackend(d.host);
    if (!d.ownsBackendShare) s = await apply(input, { type: 'destination-update', at: now(), migrationId: m.id, changes: { ownsBackendShare: true } });
    const created = await shareDriverFor(destBackend).createShare({ name: backendShareName(d.id), sizeGb: s.size, proto: s.shareProto, pool: sharePoolOf(d.host)! });
    s = await apply(input, { type: 'destination-update', at: now(), migrationId: m.id, changes: { exportLocations: [created.exportLocation], status: 'migrating_to' } });
    s = await task(input, ['migration_in_progress'], 'data_copying_starting');
  }
  if (s.taskState === 'data_copying_starting') {
    // Refused here (the cleanup undoes the destination) when no task can mount both sides.
    const reach = await copyReach(s);
    const kindOf = async (host: string) => (await getShareBackend(host)).driver;
    const dataNode = { source: dataNodeAccessTo(s.shareProto, await kindOf(s.host!)), destination: dataNodeAccessTo(s.shareProto, await kindOf(s.migration!.destination!.host)) };
    s = await apply(input, { type: 'data-node-access', at: now(), migrationId: s.migration!.id, present: true, dataNode });
    await syncSourceRules(s);
    await syncDestinationRules(s);
    if (reach.volumes.length) s = await ensureCopyTaskDefinition(input, s, reach);
    s = await task(input, ['data_copying_starting'], 'data_copying_in_progress');
  }
  if (s.taskState !== 'data_copying_in_progress') throw new ShareMigrationFailed(`share ${s.id} is ${s.taskState}, not ready to copy.`);
  return { copyTask: await startCopyAttempt(input) };
}

async function startCopyAttempt(input: MigrationStepInput) {
  const operationId = copyOperationIdOf(input.migrationId);
  const s = await apply(input, { type: 'copy-started', at: now(), migrationId: input.migrationId, operationId });
  return copyTaskOf(s, operationId);
}

/** What the copy task mounts and where it runs: a side of a kind with ShareDataNodeDriver is a volume of the migration's own task definition. */
interface CopyReach {
  source: string;
  destination: string;
  volumes: CopyVolume[];
  usesShareStorage: boolean;
  subnets?: string[];
  securityGroups?: string[];
}

async function copyReach(s: Share): Promise<CopyReach> {
  const d = s.migration!.destination!;
  const sides = [
    { name: 'source' as const, host: s.host!, share: backendShareName(s.instanceId), exportLocation: s.exportLocations[0]!, readOnly: true },
    { name: 'destination' as const, host: d.host, share: backendShareName(d.id), exportLocation: d.exportLocations[0]!, readOnly: false },
  ];
  const mounts: (DataNodeMount | undefined)[] = [];
  for (const side of sides) {
    const driver = shareDriverFor(await getShareBackend(side.host));
    mounts.push(isShareDataNodeDriver(driver) ? await driver.dataNodeMount(side.share) : undefined);
  }
  if (!mounts.some(Boolean)) return { source: sides[0]!.exportLocation, destination: sides[1]!.exportLocation, volumes: [], usesShareStorage: true };
  const usesShareStorage = mounts.some((x) => !x);
  const own = mounts.flatMap((x, i) => (x ? [{ mount: x, side: sides[i]! }] : []));
  const where = (x: { mount: DataNodeMount; side: { share: string; host: string } }) => `${x.side.share} on ${x.side.host} (VPC ${x.mount.vpcId}, ${x.mount.region})`;
  // The stack's region, from its copy task definition's ARN: where ECS runs the task.
  const region = /^arn:[^:]+:ecs:([^:]+):/.exec(process.env.FERRY_COPY_TASK_DEFINITION ?? '')?.[1];
  const stackVpc = process.env.FERRY_COPY_VPC_ID;
  for (const x of own) {
    // EFS mounts a file system into a Fargate task only from the task's own VPC, and ECS runs the task in the stack's region.
    if (region && x.mount.region !== region) throw new ShareMigrationFailed(`the copy task runs in ${region} and cannot mount ${where(x)}`);
    if (x.mount.vpcId !== own[0]!.mount.vpcId) throw new ShareMigrationFailed(`one copy task cannot mount both ${where(own[0]!)} and ${where(x)}: EFS is mounted into a task from its own VPC only`);
    if (usesShareStorage && x.mount.vpcId !== stackVpc) {
      throw new ShareMigrationFailed(`the copy task mounts the share storage in VPC ${stackVpc ?? '(none: this deployment has no share storage)'} and cannot mount ${where(x)}: give that backend subnets of the stack's VPC`);
    }
  }
  const subnetSets = [...own.map((x) => x.mount.subnetIds), ...(usesShareStorage ? [list(process.env.FERRY_COPY_SUBNETS)] : [])];
  const subnets = subnetSets.reduce((a, b) => a.filter((x) => b.includes(x)));
  if (!subnets.length) throw new ShareMigrationFailed(`no subnet holds a mount target of every file system the copy task mounts (${subnetSets.map((x) => x.join(' ')).join(' | ')})`);
  const securityGroups = [...new Set([...own.map((x) => x.mount.securityGroupId), ...(usesShareStorage ? list(process.env.FERRY_COPY_SECURITY_GROUPS) : [])])];
  const pathOf = (i: number) => (mounts[i] ? `${COPY_VOLUME_ROOT}/${sides[i]!.name}` : sides[i]!.exportLocation);
  return { source: pathOf(0), destination: pathOf(1), volumes: own.map((x) => ({ name: x.side.name, fileSystemId: x.mount.fileSystemId, readOnly: x.side.readOnly })), usesShareStorage, subnets, securityGroups };
}

async function copyTaskOf(s: Share, operationId: string): Promise<ReturnType<typeof copyTaskParameters>> {
  const reach = await copyReach(s);
  if (!reach.volumes.length) return copyTaskParameters(operationId, reach.source, reach.destination);
  const arn = s.migration!.copyTaskDefinition?.arn;
  if (!arn) throw new ShareMigrationFailed(`share ${s.id} has no copy task definition registered for migration ${s.migration!.id}`);
  return copyTaskParameters(operationId, reach.source, reach.destination, { taskDefinition: arn, subnets: reach.subnets, securityGroups: reach.securityGroups });
}

/**
 * The migration's own copy task definition: its family recorded (the intent), then the revision an
 * earlier try registered (a lost reply) or a new one, then its ARN recorded. Undone by
 * deregisterCopyTaskDefinition.
 */
async function ensureCopyTaskDefinition(input: MigrationStepInput, s: Share, reach: CopyReach): Promise<Share> {
  const recorded = s.migration!.copyTaskDefinition;
  if (recorded?.arn) return s;
  const base = process.env.FERRY_COPY_TASK_DEFINITION;
  if (!base) throw new ShareMigrationFailed('this deployment has no copy worker task definition (FERRY_COPY_TASK_DEFINITION)');
  const family = recorded?.family ?? copyTaskFamily(base, s.migration!.id);
  if (!recorded) s = await apply(input, { type: 'copy-task-definition', at: now(), migrationId: input.migrationId, definition: { family, arn: null } });
  const arn = (await activeCopyTaskDefinition(family)) ?? (await registerCopyTaskDefinition(base, family, reach.volumes, reach.usesShareStorage));
  return apply(input, { type: 'copy-task-definition', at: now(), migrationId: input.migrationId, definition: { family, arn } });
}

/** The undo of ensureCopyTaskDefinition: every revision of the migration's family deregistered, then the record cleared. */
export async function deregisterCopyTaskDefinition(s: Share): Promise<void> {
  const recorded = s.migration?.copyTaskDefinition;
  if (!recorded) return;
  await deregisterCopyTaskDefinitions(recorded.family);
  await apply({ shareId: s.id }, { type: 'copy-task-definition', at: now(), migrationId: s.migration!.id, definition: null });
}

/**
 * After the copy task stopped (however it stopped): the operation record decides. A crashed or
 * failed run is started again (it resumes from its journal) up to MAX_COPY_ATTEMPTS in all.
 */
export async function copyEnded(input: MigrationStepInput): Promise<{ next: 'done' | 'retry' | 'cancel'; copyTask?: ReturnType<typeof copyTaskParameters> }> {
  const { m } = await load(input);
  if (m.cancelRequested) return { next: 'cancel' };
  const record = m.copyOperationId ? await getCopyOperation(m.copyOperationId) : undefined;
  if (record?.status === 'completed') return { next: 'done' };
  if (record?.status === 'cancelled') return { next: 'cancel' };
  const why = record?.error ?? reasonOf(input.error);
  if (m.copyAttempts >= MAX_COPY_ATTEMPTS) throw new ShareMigrationFailed(`the data copy failed ${m.copyAttempts} times; last: ${why}`);
  logger.warn('copy task ended without completing; starting it again', { shareId: input.shareId, attempt: m.copyAttempts, why });
  return { next: 'retry', copyTask: await startCopyAttempt(input) };
}

/** data_copying_completing: the data node's access removed; then data_copying_completed (phase 1 done). */
export async function hostFinish(input: MigrationStepInput): Promise<{ taskState: string }> {
  let { s } = await load(input);
  if (s.taskState === 'data_copying_completed') return { taskState: s.taskState };
  s = await task(input, ['data_copying_in_progress', 'data_copying_completing'], 'data_copying_completing');
  if (s.migration!.dataNodeAccess) s = await apply(input, { type: 'data-node-access', at: now(), migrationId: input.migrationId, present: false });
  await syncSourceRules(s);
  await syncDestinationRules(s);
  s = await task(input, ['data_copying_completing'], 'data_copying_completed');
  return { taskState: s.taskState! };
}

export async function deleteCopyRecord(m: ShareMigration): Promise<void> {
  if (!m.copyOperationId) return;
  await db().send(new DeleteCommand({ TableName: tableName('share'), Key: copyOperationKey(m.copyOperationId) }));
}
