import { scanAll } from '../core/db.js';
import { tableName } from '../core/tables.js';
import type { DriverAccessRule, ShareBackendConfig, ShareDriver } from '../drivers/share/driver.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { destinationRules, sourceRules } from '../migration/access.js';
import { heldByMigration } from '../migration/transitions.js';
import { backendShareName, BUSY_TASK_STATES, shareBackendOf, type HeldShareCapacity, type Share } from '../shares/model.js';
import { toShare } from '../shares/repo.js';
import type { Find } from './findings.js';
import { auditCopyTaskDefinitions } from './copy-task-repairs.js';
import { auditShareBackends } from './share-backends.js';

/**
 * Shares: pool allocations match what shares (and their migrations' destination and retired
 * instances) hold; every instance's directory exists; every directory has its instance; the
 * driver's rules are what the share (and its migration: read-only cast, data node) says; no copy
 * record outlives its migration; no finished migration still holds anything.
 */
export async function auditShares(now: number, stuckMs: number, find: Find): Promise<Record<string, number>> {
  const items = await scanAll({ TableName: tableName('share'), ConsistentRead: true });
  const shares = items.filter((i) => i.sk === 'SHARE').map((i) => toShare(i));
  const backends = items.filter((i) => i.sk === 'SBACKEND').map((i) => i.config as ShareBackendConfig);

  /** Every instance a share record holds, with what the backend should have for it. */
  interface HeldInstance {
    share: Share;
    role: 'share' | 'migration destination' | 'retired source';
    id: string;
    host: string | null;
    owns: boolean;
    creating: boolean;
    capacity: HeldShareCapacity | null;
    /** The rules its backend must hold; undefined = not checked (in the middle of a migration step). */
    rules?: DriverAccessRule[];
  }
  const instances: HeldInstance[] = [];
  for (const s of shares) {
    instances.push({ share: s, role: 'share', id: s.instanceId, host: s.host, owns: s.ownsBackendShare, creating: s.status === 'creating', capacity: s.capacity, rules: s.status === 'deleting' ? undefined : sourceRules(s) });
    const m = s.migration;
    if (m?.destination) {
      const d = m.destination;
      // Before phase 2 the destination holds only the data node's rule; during phase 2 the share's rules arrive.
      const rules = s.taskState === 'migration_completing' || s.status === 'error' ? undefined : destinationRules(s);
      instances.push({ share: s, role: 'migration destination', id: d.id, host: d.host, owns: d.ownsBackendShare, creating: false, capacity: d.capacity, rules });
    }
    if (m?.retired) instances.push({ share: s, role: 'retired source', id: m.retired.id, host: m.retired.host, owns: m.retired.ownsBackendShare, creating: false, capacity: m.retired.capacity });
    if (m && (m.error || !s.taskState || ['migration_success', 'migration_error', 'migration_cancelled'].includes(s.taskState))) {
      find('migration-leftovers', `share ${s.id}`, `migration ${m.id} ended (${s.taskState}) but still holds: ${heldByMigration(m).join(', ') || 'its record'}${m.error ? ` (${m.error})` : ''}`);
    }
  }

  const held = new Map<string, number>();
  for (const i of instances) if (i.capacity) held.set(i.capacity.pool, (held.get(i.capacity.pool) ?? 0) + i.capacity.gb);
  const pools = items.filter((i) => i.sk === 'SPOOL');
  for (const p of pools) {
    const pool = String(p.pk).slice('SPOOL#'.length);
    const allocated = Number(p.allocatedGb ?? 0);
    if (allocated !== (held.get(pool) ?? 0)) find('share-capacity-mismatch', `share pool ${pool}`, `allocated ${allocated} GiB, its shares hold ${held.get(pool) ?? 0} GiB`);
    if (p.totalGb !== undefined && allocated > Number(p.totalGb)) find('share-capacity-overcommitted', `share pool ${pool}`, `allocated ${allocated} GiB of ${p.totalGb} GiB`);
    held.delete(pool);
  }
  for (const [pool, gb] of held) find('share-capacity-mismatch', `share pool ${pool}`, `shares hold ${gb} GiB on a pool with no allocation record`);

  const copyRecords = new Map(items.filter((i) => i.sk === 'COPY').map((c) => [String(c.operationId), c]));
  for (const s of shares) {
    if (['creating', 'deleting'].includes(s.status) && now - Date.parse(s.updatedAt) > stuckMs) find('stuck-share', `share ${s.id}`, `${s.status} since ${s.updatedAt}`);
    // A migration step that is working moves something at least every few seconds (each
    // migration_continue poll writes the share, the copy worker its record); the two phase-1-done
    // states wait for the operator and may last for days.
    const working = s.taskState && BUSY_TASK_STATES.includes(s.taskState) && !['migration_driver_phase1_done', 'data_copying_completed'].includes(s.taskState);
    if (working) {
      const copy = s.migration?.copyOperationId ? copyRecords.get(s.migration.copyOperationId) : undefined;
      const last = Math.max(Date.parse(s.updatedAt), copy ? Date.parse(String(copy.updatedAt)) : 0);
      if (now - last > stuckMs) find('stuck-share-migration', `share ${s.id}`, `${s.taskState} with no progress since ${new Date(last).toISOString()} (is its migration machine still running?)`);
    }
  }
  // A type's share count (which keeps a type in use from being deleted) moves with the shares, also when a migration retypes one.
  for (const t of items.filter((i) => i.sk === 'STYPE')) {
    const counted = Number(t.shareCount ?? 0);
    const actual = shares.filter((s) => s.shareTypeId === t.id).length;
    if (counted !== actual) find('share-type-count-mismatch', `share type ${String(t.name)}`, `counts ${counted} shares, ${actual} use it`);
  }
  const copyIds = new Set(shares.map((s) => s.migration?.copyOperationId).filter(Boolean));
  for (const c of items.filter((i) => i.sk === 'COPY')) {
    if (!copyIds.has(String(c.operationId))) find('orphan-copy-record', `copy operation ${String(c.operationId)}`, `a ${String(c.status)} copy record no migration refers to`);
  }

  let backendShares = 0;
  const readable: { config: ShareBackendConfig; driver: ShareDriver }[] = [];
  for (const b of backends) {
    const driver = shareDriverFor(b);
    let listed;
    try {
      listed = await driver.listShares();
    } catch (e) {
      find('share-backend-unreadable', b.host, `the driver could not list the backend: ${(e as Error).message}`);
      continue;
    }
    readable.push({ config: b, driver });
    backendShares += listed.length;
    const onBackend = new Set(listed.map((x) => x.name));
    const mine = instances.filter((i) => i.host && shareBackendOf(i.host) === b.host);
    const expected = new Set(mine.filter((i) => i.owns || i.creating).map((i) => backendShareName(i.id)));
    for (const name of onBackend) if (!expected.has(name)) find('orphan-backend-share', `${b.host} ${name}`, 'a backend share (a directory; on aws-efs a file system tagged as Ferry\'s) no share record holds, nor a migration as its destination or retired source');
    for (const i of mine) {
      const name = backendShareName(i.id);
      const what = i.role === 'share' ? `share ${i.share.id}` : `share ${i.share.id} (${i.role} ${i.id})`;
      if (i.owns && !onBackend.has(name)) {
        // A migration step records the destination as owned just before the backend makes it.
        if (i.role === 'share' || !BUSY_TASK_STATES.includes(i.share.taskState as never)) find('missing-backend-share', what, `its backend share ${name} is not on ${b.host}`);
        continue;
      }
      if (!i.owns || !i.rules) continue;
      const want = JSON.stringify(i.rules);
      const got = JSON.stringify(await driver.getAccess(name));
      if (want !== got && Object.values(i.share.accessRules).every((r) => r.state === 'active')) find('share-access-mismatch', what, `the backend holds rules ${got}, the share ${want}`);
    }
  }
  // Sizes and replications of the backends that keep them (aws-efs): share-backends.ts.
  const extra = { ...(await auditShareBackends(shares, readable, find)), ...(await auditCopyTaskDefinitions(shares, find)) };
  return { shares: shares.length, 'share backends': backends.length, 'backend shares': backendShares, 'share migrations': shares.filter((s) => s.migration).length, ...extra };
}
