/**
 * The reconciler's repairs of share-backends.ts's findings, each behind a recorded intent
 * (share-repair-record.ts) and each re-checked against the share records right before it acts:
 *
 * - `share-quota-unenforced` (the quota's enforcement: on AWS every 5 minutes, from the
 *   EventBridge schedule): the share re-read; it must still be that instance on that backend,
 *   available, in no task, unchanged since the grace cut-off. The intent is written in one
 *   transaction with a check that the share is still at the version re-read, then the driver pushes
 *   the share's whole rule set with the block its metered size calls for (enforceQuota with the
 *   record's rules: a change of the rules is never undone by it). If the share changed meanwhile
 *   (an access call), its rules as they are now are pushed again, so the record wins.
 * - `stray-share-replication`: no share record's migration holds the pair (re-read), and the
 *   replication is older than the grace cut-off (a migration records its destination before it
 *   replicates, so a live one is always held). The replication is deleted, then its replica when
 *   that is a Ferry share no record holds: a copy of a share that still has its data. Ferry's file
 *   systems are known by their `ferry:backend` tag only: two stacks whose inventories name the same
 *   backend hosts in one account and region would take each other's replications for strays.
 * - `stray-copy-task-definition`: a migration's own copy task definition family whose migration
 *   ended or is gone (copy-task-repairs.ts, which says why it is safe).
 *
 * BackendNotReady (EFS still deleting, throttled) leaves the intent: the next pass finishes it
 * (recoverShareRepairs, in the reconciler's first step).
 */
import { BackendNotReady } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { scanAll } from '../core/db.js';
import { isShareQuotaDriver, isShareReplicationDriver, type ShareDriver } from '../drivers/share/driver.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { sourceRules } from '../migration/access.js';
import { backendShareName, shareBackendOf, shareKey, type Share } from '../shares/model.js';
import { getShare, getShareBackend, listShares } from '../shares/repo.js';
import { COPY_TASK_REPAIRS, finishStrayCopyTask, removeStrayCopyTaskDefinition } from './copy-task-repairs.js';
import { heldReplicationPairs, heldShareNames } from './share-backends.js';
import { recordShareRepair, SHARE_REPAIR_SK, type ShareRepairRecord } from './share-repair-record.js';

export const SHARE_BACKEND_REPAIRS: Readonly<Record<string, string>> = {
  'share-quota-unenforced': 'withholds writes from a share over its size, or gives them back, by pushing its rules with the quota block (an intent recorded first)',
  'stray-share-replication': 'deletes a replication no migration holds, then its replica when no share record holds that (an intent recorded first)',
  ...COPY_TASK_REPAIRS,
};

/** What one repair saw and did (repair.ts RepairRecord without its kind and resource). */
export interface ShareRepairOutcome {
  saw: string;
  did: string;
  outcome: 'repaired' | 'left' | 'failed';
}
type Outcome = ShareRepairOutcome;
const left = (saw: string, did = 'left it'): Outcome => ({ saw, did, outcome: 'left' });

async function driverOf(host: string): Promise<ShareDriver> {
  return shareDriverFor(await getShareBackend(host));
}

/** Repairs one finding of share-backends.ts; undefined for other kinds. */
export async function repairShareBackendFinding(kind: string, ref: Record<string, string>, before: Date): Promise<Outcome | undefined> {
  if (kind === 'share-quota-unenforced') return enforceQuota(ref, before);
  if (kind === 'stray-share-replication') return removeStrayReplication(ref, before);
  if (kind === 'stray-copy-task-definition') return removeStrayCopyTaskDefinition(ref, before);
  return undefined;
}

/** Why the share may not have its quota enforced by the reconciler now, or undefined. */
function quotaRefusal(s: Share | undefined, ref: Record<string, string>, before?: Date): string | undefined {
  if (!s) return `share ${ref.shareId} no longer exists`;
  if (!s.host || shareBackendOf(s.host) !== ref.host || backendShareName(s.instanceId) !== ref.name) return `share ${s.id} is no longer ${ref.name} on ${ref.host}`;
  if (s.status !== 'available' || s.taskState !== null) return `share ${s.id} is ${s.status}${s.taskState ? ` (${s.taskState})` : ''}`;
  if (before && Date.parse(s.updatedAt) >= before.getTime()) return `share ${s.id} changed at ${s.updatedAt}, within the grace period`;
  return undefined;
}

async function enforceQuota(ref: Record<string, string>, before: Date): Promise<Outcome> {
  const { shareId = '', host = '', name = '' } = ref;
  const s = await getShare(shareId);
  const refusal = quotaRefusal(s, ref, before);
  if (refusal) return left(refusal);
  const driver = await driverOf(host);
  if (!isShareQuotaDriver(driver)) return left(`backend ${host} keeps no quota`);
  const usage = await driver.shareUsage(name);
  if (!usage) return left(`${name} is not on ${host}`);
  if (usage.overQuota === usage.writesBlocked) return left(`${name} is enforced already (${usage.usedBytes} bytes used of ${usage.sizeGb} GiB)`);
  const saw = `${name} on ${host}: ${usage.usedBytes} bytes used of ${usage.sizeGb} GiB, writes ${usage.writesBlocked ? 'withheld' : 'allowed'}`;
  // What to do is read again when the intent is finished (the metered size moves): the target names the share only.
  const target = { shareId, host, name };
  const unchanged = { ConditionCheck: { TableName: tableName('share'), Key: shareKey(shareId), ConditionExpression: '#version = :v', ExpressionAttributeNames: { '#version': 'version' }, ExpressionAttributeValues: { ':v': s!.version } } };
  const intent = await recordShareRepair(`quota-${name}`, { type: 'intend', at: new Date().toISOString(), kind: 'quota', target, saw }, [unchanged]);
  if (!intent) return left(saw, 'left it: the share or another pass moved on since the re-check');
  return finishQuota(intent, driver, s!);
}

async function finishQuota(intent: ShareRepairRecord, driver: ShareDriver, s: Share): Promise<Outcome> {
  if (!isShareQuotaDriver(driver)) return left(intent.saw, `left it: backend ${intent.target.host} keeps no quota`);
  const name = intent.target.name!;
  let usage;
  try {
    usage = await driver.enforceQuota(name, sourceRules(s));
    const now = await getShare(s.id);
    // An access call raced the push: its rules as recorded now are what the backend must hold.
    if (now && now.version !== s.version && !quotaRefusal(now, intent.target)) usage = await driver.enforceQuota(name, sourceRules(now));
  } catch (e) {
    if (e instanceof BackendNotReady) return left(intent.saw, `in progress (${e.message}); the next pass finishes it`);
    throw e;
  }
  const did = usage.writesBlocked ? `withheld writes from ${name} (${usage.usedBytes} bytes used of ${usage.sizeGb} GiB)` : `gave writes back to ${name} (${usage.usedBytes} bytes used of ${usage.sizeGb} GiB)`;
  await recordShareRepair(intent.id, { type: 'done', at: new Date().toISOString(), did });
  return { saw: intent.saw, did, outcome: 'repaired' };
}

async function removeStrayReplication(ref: Record<string, string>, before: Date): Promise<Outcome> {
  const { host = '', name = '', sourceId = '', replicaId = '', replicaName } = ref;
  const shares = await listShares();
  const saw = `${host} ${name} (${sourceId}) replicates to ${replicaId}${replicaName ? ` (${ref.replicaHost} ${replicaName})` : ''}`;
  if (heldReplicationPairs(shares).has(`${name} ${replicaName ?? replicaId}`)) return left(`${saw}: a migration holds it now`);
  if (!ref.createdAt || Date.parse(ref.createdAt) >= before.getTime()) return left(`${saw}, made ${ref.createdAt ?? 'at an unknown time'}: not older than the grace cut-off ${before.toISOString()}`);
  const intent = await recordShareRepair(`replication-${sourceId}-${replicaId}`, { type: 'intend', at: new Date().toISOString(), kind: 'stray-replication', target: ref, saw: `${saw}; no migration holds it` });
  if (!intent) return left(saw, 'left it: another pass recorded it meanwhile');
  return finishStray(intent);
}

async function finishStray(intent: ShareRepairRecord): Promise<Outcome> {
  const { host = '', name = '', replicaHost, replicaName } = intent.target;
  const driver = await driverOf(host);
  if (!isShareReplicationDriver(driver)) return left(intent.saw, `left it: backend ${host} makes no replications`);
  let did = `deleted the replication of ${name}`;
  try {
    await driver.deleteShareReplication(name);
    if (replicaHost && replicaName) {
      // Re-read: the replica is deleted only while no record holds it.
      if (heldShareNames(await listShares()).has(replicaName)) did += `; left its replica ${replicaName}: a share record holds it`;
      else {
        await (await driverOf(replicaHost)).deleteShare(replicaName);
        did += ` and its replica ${replicaHost} ${replicaName}`;
      }
    } else did += `; its replica ${intent.target.replicaId} is not a Ferry share and stays`;
  } catch (e) {
    if (e instanceof BackendNotReady) return left(intent.saw, `in progress (${e.message}); the next pass finishes it`);
    throw e;
  }
  await recordShareRepair(intent.id, { type: 'done', at: new Date().toISOString(), did });
  return { saw: intent.saw, did, outcome: 'repaired' };
}

/** The reconciler's first step: intents a pass left (it died, or EFS was still at work) before `before`, finished. */
export async function recoverShareRepairs(options: { before: Date }): Promise<(ShareRepairOutcome & { kind: string; resource: string })[]> {
  const items = await scanAll({ TableName: tableName('share'), FilterExpression: 'sk = :sk AND #state = :intent', ExpressionAttributeNames: { '#state': 'state' }, ExpressionAttributeValues: { ':sk': SHARE_REPAIR_SK, ':intent': 'intent' }, ConsistentRead: true });
  const out: (ShareRepairOutcome & { kind: string; resource: string })[] = [];
  for (const item of items) {
    const { pk: _pk, sk: _sk, ...rest } = item;
    const intent = rest as unknown as ShareRepairRecord;
    if (Date.parse(intent.intendedAt) >= options.before.getTime()) continue;
    const { kind, resource } = describeIntent(intent);
    try {
      out.push({ kind, resource, ...(await finishIntent(intent)) });
    } catch (e) {
      out.push({ kind, resource, saw: intent.saw, did: `finishing the recorded intent failed (${(e as Error).name}: ${(e as Error).message}); the next pass tries again`, outcome: 'failed' });
    }
  }
  return out;
}

/** The finding kind and resource an intent stands for, as the pass that recorded it reported them. */
function describeIntent(intent: ShareRepairRecord): { kind: string; resource: string } {
  if (intent.kind === 'quota') return { kind: 'share-quota-unenforced', resource: `share ${intent.target.shareId}` };
  if (intent.kind === 'copy-task-definition') return { kind: 'stray-copy-task-definition', resource: `copy task definition ${intent.target.family}` };
  return { kind: 'stray-share-replication', resource: `${intent.target.host} ${intent.target.name}` };
}

async function finishIntent(intent: ShareRepairRecord): Promise<Outcome> {
  if (intent.kind === 'stray-replication') return finishStray(intent);
  if (intent.kind === 'copy-task-definition') return finishStrayCopyTask(intent);
  const s = await getShare(intent.target.shareId!);
  const refusal = quotaRefusal(s, intent.target);
  if (refusal) {
    // The share went or moved on (its own operation sets its policy now): nothing is left to do.
    await recordShareRepair(intent.id, { type: 'done', at: new Date().toISOString(), did: `nothing: ${refusal}` });
    return { saw: intent.saw, did: `closed the intent: ${refusal}`, outcome: 'repaired' };
  }
  return finishQuota(intent, await driverOf(intent.target.host!), s!);
}
