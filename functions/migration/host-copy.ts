/**
 * Host-assisted phase 1 (reference §1.8): the source cast read-only, the destination share made,
 * the data node given access, then the copy worker as a task (its operation record in
 * functions/copy/progress.ts) until it ends, and the data node's access removed. The copy record
 * is removed by deleteCopyRecord when the migration ends.
 */
import { DeleteCommand } from '@aws-sdk/lib-dynamodb';
import { db } from '../core/db.js';
import { reasonOf } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { tableName } from '../core/tables.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { copyOperationKey, getCopyOperation } from '../copy/progress.js';
import { backendShareName, sharePoolOf, type ShareMigration } from '../shares/model.js';
import { getShareBackend } from '../shares/repo.js';
import { syncDestinationRules, syncSourceRules } from './access.js';
import { apply, load, MAX_COPY_ATTEMPTS, now, ShareMigrationFailed, task, type MigrationStepInput } from './flow.js';

/** The ECS RunTask parameters of the copy worker (on AWS from the stack; locally placeholders the local integration ignores). */
export function copyTaskParameters(operationId: string, source: string, destination: string) {
  const list = (v: string | undefined) => (v ? v.split(',').map((x) => x.trim()).filter(Boolean) : []);
  return {
    cluster: process.env.FERRY_COPY_CLUSTER ?? 'ferry-local',
    taskDefinition: process.env.FERRY_COPY_TASK_DEFINITION ?? 'ferry-copy-worker',
    subnets: list(process.env.FERRY_COPY_SUBNETS),
    securityGroups: list(process.env.FERRY_COPY_SECURITY_GROUPS),
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
    return { copyTask: copyTaskParameters(copyOperationIdOf(m.id), s.exportLocations[0]!, m.destination!.exportLocations[0]!) };
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
    s = await apply(input, { type: 'data-node-access', at: now(), migrationId: s.migration!.id, present: true });
    await syncSourceRules(s);
    await syncDestinationRules(s);
    s = await task(input, ['data_copying_starting'], 'data_copying_in_progress');
  }
  if (s.taskState !== 'data_copying_in_progress') throw new ShareMigrationFailed(`share ${s.id} is ${s.taskState}, not ready to copy.`);
  return { copyTask: await startCopyAttempt(input) };
}

async function startCopyAttempt(input: MigrationStepInput) {
  const operationId = copyOperationIdOf(input.migrationId);
  const s = await apply(input, { type: 'copy-started', at: now(), migrationId: input.migrationId, operationId });
  return copyTaskParameters(operationId, s.exportLocations[0]!, s.migration!.destination!.exportLocations[0]!);
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
