/**
 * Copy task definitions no migration holds: on AWS every host-assisted migration that mounts an
 * aws-efs share registers a family of its own, `<copy family>-m-<migration id>`
 * (functions/migration/copy-task-definition.ts), deregistered when the migration ends. A revision
 * outlives its migration when the cleanup failed and the share was deleted, when a Lambda retry
 * registered after the cleanup ran, or when a run died between RegisterTaskDefinition and the
 * record of its ARN and the migration then ended without finding it. Such a revision costs nothing
 * but a place in the account's task definition quota; it could still run a task that mounts two
 * shares, so the reconciler removes it.
 *
 * - Audit (auditCopyTaskDefinitions, from auditShares): the ACTIVE families with the migrations'
 *   prefix (ListTaskDefinitionFamilies, every page). A family whose migration is in flight (a share
 *   record's migration of that id, not ended) is held; any other is `stray-copy-task-definition`.
 *   Only where the deployment has a copy worker on ECS (FERRY_COPY_TASK_DEFINITION is its ARN) and
 *   aws-efs backends (else FERRY_COPY_MIGRATION_FAMILIES is `false`: infra/aws/copy-worker.ts);
 *   the local stack has none.
 * - Repair (removeStrayCopyTaskDefinition): the share records re-read after the listing (a
 *   migration records its family before it registers, so one in flight is always seen), the
 *   share of a migration that ended unchanged since the grace cut-off, and the family's latest
 *   revision registered before it (DescribeTaskDefinition's registeredAt); then an intent
 *   (`SREPAIR#copy-task-<family>`), every ACTIVE revision deregistered, the family cleared from
 *   an ended migration's record that still names it (its cleanup failed: migration_cancel would do
 *   the same), and the intent done. No step can register or run a revision of an ended migration's
 *   family again (its id is never reused), so finishing an intent needs no re-check.
 *
 * A throttle or a lost reply (BackendNotReady) leaves the intent for the next pass
 * (recoverShareRepairs); a refusal (AccessDeniedException) fails the repair, which the reconciler
 * reports and its function's Errors metric shows.
 */
import { BackendNotReady, FerryError, NotFound } from '../core/errors.js';
import { activeFamilies, deregisterCopyTaskDefinitions, familyOf, latestActiveRevision, MIGRATION_FAMILY_INFIX } from '../migration/copy-task-ecs.js';
import { migrationTransition } from '../migration/transitions.js';
import type { Share } from '../shares/model.js';
import { listShares, updateShareBy } from '../shares/repo.js';
import { leftAlone, type Find, type RepairOutcome } from './findings.js';
import { recordShareRepair, type ShareRepairRecord } from './share-repair-record.js';

export const COPY_TASK_REPAIRS: Readonly<Record<string, string>> = {
  'stray-copy-task-definition': "deregisters a migration's copy task definition once the migration has ended or is gone and the revision is older than the grace period (an intent recorded first)",
};

type Outcome = RepairOutcome;
const left = leftAlone;
const ENDED = new Set<string | null>([null, 'migration_success', 'migration_error', 'migration_cancelled']);

/** The prefix of the migrations' own families, when the deployment runs its copy worker on ECS (else undefined: nothing to audit). */
export function migrationFamilyPrefix(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const base = env.FERRY_COPY_TASK_DEFINITION;
  // `false` where no migration can register one (no aws-efs backend), and the VPC has no ECS endpoint to ask.
  if (!base?.startsWith('arn:') || env.FERRY_COPY_MIGRATION_FAMILIES === 'false') return undefined;
  return `${familyOf(base)}${MIGRATION_FAMILY_INFIX}`;
}

/** The share whose migration (current record) is `migrationId`, and whether that migration is still in flight. */
function holderOf(shares: Share[], migrationId: string): { share: Share; inFlight: boolean } | undefined {
  const share = shares.find((s) => s.migration?.id === migrationId);
  return share ? { share, inFlight: !ENDED.has(share.taskState) } : undefined;
}

const whose = (migrationId: string, holder: { share: Share } | undefined) =>
  holder ? `migration ${migrationId} of share ${holder.share.id} ended (${holder.share.taskState}) and its record still names it` : `no share record holds migration ${migrationId}`;

export async function auditCopyTaskDefinitions(shares: Share[], find: Find): Promise<Record<string, number>> {
  const prefix = migrationFamilyPrefix();
  if (!prefix) return {};
  let families: string[];
  try {
    families = await activeFamilies(prefix);
  } catch (e) {
    find('copy-task-definitions-unreadable', `copy task families ${prefix}*`, `ECS could not list them: ${(e as Error).message}`);
    return {};
  }
  for (const family of families) {
    const migrationId = family.slice(prefix.length);
    const holder = holderOf(shares, migrationId);
    if (holder?.inFlight) continue;
    find('stray-copy-task-definition', `copy task definition ${family}`, `an ACTIVE copy task definition family: ${whose(migrationId, holder)}`, { family, migrationId });
  }
  return { 'migration copy task families': families.length };
}

export async function removeStrayCopyTaskDefinition(ref: Record<string, string>, before: Date): Promise<Outcome> {
  const { family = '', migrationId = '' } = ref;
  // Read after the audit listed the family: a migration in flight recorded it before registering.
  const holder = holderOf(await listShares(), migrationId);
  if (holder?.inFlight) return left(`${family}: migration ${migrationId} of share ${holder.share.id} is in flight (${holder.share.taskState})`);
  if (holder && Date.parse(holder.share.updatedAt) >= before.getTime()) return left(`${family}: share ${holder.share.id} changed at ${holder.share.updatedAt}, within the grace period`);
  const latest = await latestActiveRevision(family);
  if (!latest) return left(`${family} has no ACTIVE revision any more`, 'nothing to do');
  if (!latest.registeredAt || latest.registeredAt.getTime() >= before.getTime()) {
    return left(`${latest.arn}, registered ${latest.registeredAt?.toISOString() ?? 'at an unknown time'}: not older than the grace cut-off ${before.toISOString()}`);
  }
  const saw = `${latest.arn}, registered ${latest.registeredAt.toISOString()}: ${whose(migrationId, holder)}`;
  const target = { family, migrationId, ...(holder ? { shareId: holder.share.id } : {}) };
  const intent = await recordShareRepair(`copy-task-${family}`, { type: 'intend', at: new Date().toISOString(), kind: 'copy-task-definition', target, saw });
  if (!intent) return left(saw, 'left it: another pass recorded it meanwhile');
  return finishStrayCopyTask(intent);
}

/** Deregisters the family's ACTIVE revisions and clears an ended migration's record of it; the intent done. */
export async function finishStrayCopyTask(intent: ShareRepairRecord): Promise<Outcome> {
  const { family = '', migrationId = '', shareId } = intent.target;
  let arns: string[];
  try {
    arns = await deregisterCopyTaskDefinitions(family);
  } catch (e) {
    if (e instanceof BackendNotReady) return left(intent.saw, `in progress (${e.message}); the next pass finishes it`);
    throw e;
  }
  let did = arns.length ? `deregistered ${arns.join(', ')}` : `found no ACTIVE revision of ${family}`;
  if (shareId && (await clearFromEndedMigration(shareId, migrationId, family))) did += `; cleared it from migration ${migrationId} of share ${shareId}`;
  await recordShareRepair(intent.id, { type: 'done', at: new Date().toISOString(), did });
  return { saw: intent.saw, did, outcome: 'repaired' };
}

/** The family cleared from the share's record, when the share is still in that ended migration and names it (a versioned write). */
async function clearFromEndedMigration(shareId: string, migrationId: string, family: string): Promise<boolean> {
  let cleared = false;
  try {
    await updateShareBy(shareId, (s) => {
      cleared = false;
      if (s.migration?.id !== migrationId || s.migration.copyTaskDefinition?.family !== family || !ENDED.has(s.taskState)) return s;
      const after = migrationTransition(s, { type: 'copy-task-definition', at: new Date().toISOString(), migrationId, definition: null });
      cleared = !(after instanceof FerryError);
      return after;
    });
  } catch (e) {
    if (e instanceof NotFound) return false; // the share is gone: nothing names the family
    throw e;
  }
  return cleared;
}
