/**
 * What the audit asks of share backends that keep more than shares (auditShares calls it): the
 * size of a share on a backend that gives shares none (a quota driver: aws-efs), and replications
 * a backend makes by itself (aws-efs: EFS replication, a driver-assisted migration's phase 1).
 *
 * - `share-quota-unenforced`: a share whose writes are withheld while it is within its size, or
 *   allowed while the backend meters more than its size. Only shares that are available and in no
 *   task: a migration's own steps set its shares' policies. Repaired (share-backend-repairs.ts).
 * - `share-size-mismatch`: the size the backend keeps is not the share's. Reported only.
 * - `stray-share-replication`: a replication from a Ferry share that no share's migration holds
 *   (neither a migration's destination nor, after its flip, its retired source): left by a
 *   migration whose record was cleared, or made by hand. It blocks a new migration of the share
 *   (the driver refuses a second replication) and doubles its storage. Repaired: the replication
 *   deleted, and its replica when that is a Ferry share no record holds (a copy: nothing is lost).
 *
 * A file system of a backend that no share record holds is auditShares' `orphan-backend-share`,
 * reported only: it may hold the only copy of its data.
 */
import type { ShareBackendConfig, ShareDriver } from '../drivers/share/driver.js';
import { isShareQuotaDriver, isShareReplicationDriver } from '../drivers/share/driver.js';
import { backendShareName, shareBackendOf, type Share } from '../shares/model.js';
import type { Find } from './findings.js';

const GIB = 1024 ** 3;

/** Pairs (source, replica) of backend share names that share records' migrations hold. */
export function heldReplicationPairs(shares: Share[]): Set<string> {
  const held = new Set<string>();
  for (const s of shares) {
    const m = s.migration;
    if (m?.destination) held.add(`${backendShareName(s.instanceId)} ${backendShareName(m.destination.id)}`);
    if (m?.retired) held.add(`${backendShareName(m.retired.id)} ${backendShareName(s.instanceId)}`);
  }
  return held;
}

/** Every backend share name a share record holds (its instance, a migration's destination or retired source). */
export function heldShareNames(shares: Share[]): Set<string> {
  return new Set(shares.flatMap((s) => [s.instanceId, s.migration?.destination?.id, s.migration?.retired?.id].filter((id): id is string => Boolean(id)).map(backendShareName)));
}

const gib = (bytes: number) => `${(bytes / GIB).toFixed(2)} GiB`;

export async function auditShareBackends(shares: Share[], backends: { config: ShareBackendConfig; driver: ShareDriver }[], find: Find): Promise<Record<string, number>> {
  let usageRead = 0;
  let overSize = 0;
  let replications = 0;
  const held = heldReplicationPairs(shares);
  for (const { config, driver } of backends) {
    try {
      ({ usageRead, overSize, replications } = await auditBackend(config, driver, shares, held, find, { usageRead, overSize, replications }));
    } catch (e) {
      find('share-backend-unreadable', config.host, `the driver could not read its shares' usage or replications: ${(e as Error).message}`);
    }
  }
  return { 'share usages read': usageRead, 'shares over their size': overSize, 'backend share replications': replications };
}

type Counts = { usageRead: number; overSize: number; replications: number };

async function auditBackend(config: ShareBackendConfig, driver: ShareDriver, shares: Share[], held: Set<string>, find: Find, counts: Counts): Promise<Counts> {
  let { usageRead, overSize, replications } = counts;
  if (isShareQuotaDriver(driver)) {
    for (const s of shares.filter((x) => x.host && shareBackendOf(x.host) === config.host && x.ownsBackendShare && x.status === 'available' && x.taskState === null)) {
      const name = backendShareName(s.instanceId);
      const usage = await driver.shareUsage(name);
      if (!usage) continue; // missing-backend-share says so
      usageRead++;
      if (usage.overQuota) overSize++;
      if (usage.sizeGb !== s.size) find('share-size-mismatch', `share ${s.id}`, `its backend keeps ${usage.sizeGb} GiB as its size, the share says ${s.size} GiB`);
      if (usage.overQuota !== usage.writesBlocked) {
        const state = usage.writesBlocked ? 'writes are withheld although it is within its size' : 'writes are still allowed';
        find('share-quota-unenforced', `share ${s.id}`, `${config.host} meters ${gib(usage.usedBytes)} used of its ${usage.sizeGb} GiB: ${state}`, { shareId: s.id, host: config.host, name });
      }
    }
  }
  if (isShareReplicationDriver(driver)) {
    for (const r of await driver.shareReplications()) {
      replications++;
      const replicaName = r.replica.name ?? r.replica.id;
      if (held.has(`${r.name} ${replicaName}`)) continue;
      const replica = r.replica.host ? `${r.replica.host} ${r.replica.name} (${r.replica.id})` : `${r.replica.id} in ${r.replica.region}, not a Ferry share`;
      find('stray-share-replication', `${config.host} ${r.name}`, `replicates (${r.status}, made ${r.createdAt ?? 'at an unknown time'}) to ${replica}; no migration holds it`, {
        host: config.host,
        name: r.name,
        sourceId: r.sourceId,
        replicaId: r.replica.id,
        ...(r.createdAt ? { createdAt: r.createdAt } : {}),
        ...(r.replica.host && r.replica.name ? { replicaHost: r.replica.host, replicaName: r.replica.name } : {}),
      });
    }
  }
  return { usageRead, overSize, replications };
}
