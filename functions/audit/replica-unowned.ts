/**
 * Issue 14's safety net: volumes a replication driver made on a site (aws-ebs: a region) that
 * nothing in DynamoDB holds, so an operator is never billed for an orphan that every known path
 * should have removed (a failover's discard, endDrill's listing, the LEFT repair) but a crash or a
 * bug we did not foresee left. The driver lists what it made where the backend does not run, and
 * its drill copies where it does (SiteVolumeDriver); a volume is held by:
 * - any running replication operation of the backend (its batches may be about to record it);
 * - a volume record whose providerLocation is it, a drill's COPIES or a failover's LEFT record
 *   naming it (the LEFT repair, replica-left-repairs.ts, removes those);
 * - a drill copy: the backend's drill on that site (endDrill finds its copies by tag);
 * - on the primary while failed over: a volume record of the backend with its name (the primary's
 *   own copy, or a failback's volume, which the failback takes up or deletes).
 * Only what is older than the grace (REPLICA_UNOWNED_GRACE_MS, by the backend's creation time) is
 * reported: a volume just made may not be recorded yet. A site that could not be read is reported
 * as such (`replica-site-unreadable`), never as a site with no orphans.
 *
 * The repair (`ferry audit --repair`, the reconciler) deletes one, and why that is safe:
 * - It looks at the volume first (the backend, by id), then reads the holders again (consistent
 *   reads), then deletes: only one still unowned, available (one in use is reported and left, never
 *   detached), made before the cut-off. EC2 itself refuses to delete an attached volume
 *   (VolumeInUse), so an attach racing the repair makes it fail (the finding stays), not detach.
 * - The cut-off is at least REPLICA_UNOWNED_GRACE_MS old, longer than a replication step's
 *   Lambda may run (900 s, functions/wiring.ts): whatever batch made the volume has ended by then,
 *   and what it wrote to hold it is in the read (an operation still running holds everything).
 * - Nothing can take the volume up after that read: the only path that takes up a volume it finds
 *   by its tags is a failover's or failback's look at the names of its batch's volumes, which are
 *   records of the backend; a volume a record of the backend is named after is never deleted here
 *   (a failover takes up only one made from its batch's chosen copy, which this audit does not
 *   read: reported for an operator). Backend names come from
 *   volume ids (or an adopted volume's own EBS id) and are never reused, so no such record appears
 *   meanwhile. A drill never takes up an existing copy (its ClientToken is new per choice).
 * So no tombstone is needed. DeleteVolume is idempotent (gone = done); one refused leaves the
 * finding and says why (the repair's `failed` outcome); the next run tries again.
 */
import { scanAll } from '../core/db.js';
import { NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { BackendConfig, BackendServiceState, DrillCopy, SiteListing, SiteVolume } from '../drivers/volume/driver.js';
import { isSiteVolumeDriver } from '../drivers/volume/driver.js';
import { driverFor } from '../drivers/volume/registry.js';
import { getBackendItem, type DrillState } from '../replication/service-repo.js';
import { backendOf } from '../volumes/backends.js';
import { leftAlone, type Find, type RepairOutcome } from './findings.js';

/** Longer than a replication step may run (its Lambda's 900 s timeout), so the batch that made a volume has recorded what it would. */
export const REPLICA_UNOWNED_GRACE_MS = 20 * 60_000;

export const REPLICA_UNOWNED_REPAIRS: Readonly<Record<string, string>> = {
  'replica-unowned': 'deletes a volume a replication made on a site that nothing holds, once older than the grace, available and still unowned on a fresh read (never one in use, never one a failover would take up)',
};

/** What holds the volumes of one backend's sites, from the volume table's items. */
export interface ReplicaHolders {
  activeSite: string;
  running: string[];
  drill?: DrillState;
  /** location -> what records it. */
  recorded: Map<string, string>;
  /** The backend names of the backend's volume records. */
  names: Set<string>;
}

export function holdersOf(items: Record<string, unknown>[], host: string): ReplicaHolders {
  const backend = items.find((i) => i.pk === `BACKEND#${host}`);
  const holders: ReplicaHolders = {
    activeSite: (backend?.service as BackendServiceState | undefined)?.activeBackendId ?? '',
    running: [],
    drill: backend?.drill as DrillState | undefined,
    recorded: new Map(),
    names: new Set(),
  };
  for (const i of items) {
    const pk = String(i.pk);
    const sk = String(i.sk);
    if (sk === 'VOL') {
      if (typeof i.providerLocation === 'string') holders.recorded.set(i.providerLocation, `volume ${String(i.id)} is there (its providerLocation)`);
      if (typeof i.host === 'string' && backendOf(i.host) === host) holders.names.add(String(i.backendName));
    } else if (pk.startsWith('REPLOP#')) {
      const op = pk.slice('REPLOP#'.length);
      if (sk === 'OP' && i.status === 'running' && backendOf(String(i.host)) === host) holders.running.push(`${String(i.kind)} ${op}`);
      for (const c of ((sk.startsWith('COPIES#') ? i.copies : sk.startsWith('LEFT#') ? i.replicas : undefined) as DrillCopy[] | undefined) ?? []) {
        if (c.location) holders.recorded.set(c.location, `${sk.startsWith('LEFT#') ? 'failover' : 'drill'} ${op} records it (${sk})`);
      }
    }
  }
  return holders;
}

/** What holds the volume, in words; undefined: nothing (it is unowned). */
export function holderOf(h: ReplicaHolders, v: SiteVolume): string | undefined {
  if (v.site === h.activeSite && v.kind !== 'drill') return `the backend runs on ${siteName(v.site)}: its own audit covers it`;
  if (h.running.length) return `replication operation ${h.running.join(', ')} of the backend is running`;
  const recorded = h.recorded.get(v.location);
  if (recorded) return recorded;
  if (v.kind === 'drill' && h.drill?.target === v.site) return `the backend's drill ${h.drill.operationId} (${h.drill.status}) on ${v.site}`;
  if (v.kind === 'volume' && v.site === '' && h.names.has(v.backendName)) return `a volume record of the backend is named ${v.backendName} (a failback takes up or deletes the primary's copy)`;
  return undefined;
}

/** A volume of a target a record of the backend is named after: a failover there would take it up as that volume's. */
const takenUpByFailover = (h: ReplicaHolders, v: SiteVolume) => v.kind === 'volume' && v.site !== '' && h.names.has(v.backendName);

const siteName = (site: string) => site || 'the primary';

/** Every replication backend's site volumes against their holders (`items`: the audit's scan of the volume table). Answers how many volumes it looked at. */
export async function auditUnownedReplicas(items: Record<string, unknown>[], backends: { config: BackendConfig; service: BackendServiceState }[], now: number, find: Find): Promise<number> {
  let looked = 0;
  for (const { config, service } of backends) {
    const host = config.host;
    let listings: SiteListing[];
    try {
      const driver = driverFor(config, service.activeBackendId);
      if (!isSiteVolumeDriver(driver)) continue;
      listings = await driver.listSiteVolumes();
    } catch (e) {
      find('replica-site-unreadable', host, `the driver could not list its replication sites: ${(e as Error).message}`);
      continue;
    }
    const holders = holdersOf(items, host);
    for (const listing of listings) {
      if ('error' in listing) {
        find('replica-site-unreadable', `${host} ${siteName(listing.site)}`, `could not be listed, so its unowned volumes are unknown: ${listing.error}`);
        continue;
      }
      for (const v of listing.volumes) {
        looked++;
        if (now - v.createdAt < REPLICA_UNOWNED_GRACE_MS || holderOf(holders, v)) continue;
        const notes = [v.inUse ? 'in use: a repair never detaches it' : '', takenUpByFailover(holders, v) ? `a volume record of the backend is named ${v.backendName}: a failover to ${v.site} would take it up, so a repair leaves it for an operator` : ''].filter(Boolean);
        find(
          'replica-unowned',
          `${host} ${siteName(v.site)} ${v.location}`,
          `${v.kind === 'drill' ? 'drill copy' : 'volume'} of ${v.backendName} (${v.state}, made ${new Date(v.createdAt).toISOString()}) that no volume record, operation, drill or left record holds${notes.length ? `; ${notes.join('; ')}` : ''}`,
          { host, site: v.site, location: v.location },
        );
      }
    }
  }
  return looked;
}

/** The holders of one backend's site volumes as they are now (consistent reads of the items that hold them). */
async function readHolders(host: string): Promise<ReplicaHolders> {
  const items = await scanAll({
    TableName: tableName('volume'),
    ConsistentRead: true,
    FilterExpression: 'sk = :vol OR begins_with(pk, :replop) OR pk = :backend',
    ExpressionAttributeValues: { ':vol': 'VOL', ':replop': 'REPLOP#', ':backend': `BACKEND#${host}` },
  });
  return holdersOf(items, host);
}

/** The repair of `replica-unowned` (the module's comment says why it is safe). `ref`: host, site, location. */
export async function removeUnownedReplica(ref: Record<string, string>, before: Date, now = Date.now()): Promise<RepairOutcome> {
  const { host = '', site = '', location = '' } = ref;
  const cutoff = Math.min(before.getTime(), now - REPLICA_UNOWNED_GRACE_MS);
  const backend = await backendRecord(host);
  if (!backend) return leftAlone(`backend ${host} no longer exists`);
  const driver = driverFor(backend.config, backend.service.activeBackendId);
  if (!isSiteVolumeDriver(driver)) return leftAlone(`backend ${host} no longer lists its replication sites`);
  // The volume first, then its holders: what is read after EC2's look includes whatever holds it.
  const v = await driver.getSiteVolume(site, location);
  if (!v) return leftAlone(`${location} in ${siteName(site)} of ${host} is gone`);
  const saw = `${v.kind === 'drill' ? 'drill copy' : 'volume'} ${location} of ${v.backendName} in ${siteName(site)} (${v.state}, made ${new Date(v.createdAt).toISOString()})`;
  if (v.inUse || v.state !== 'available') return leftAlone(saw, `left it: ${v.inUse ? 'in use (a repair never detaches)' : `${v.state}, not available`}`);
  if (!(v.createdAt < cutoff)) return leftAlone(saw, `left it: made within the grace period (before ${new Date(cutoff).toISOString()})`);
  const holders = await readHolders(host);
  const holder = holderOf(holders, v);
  if (holder) return leftAlone(saw, `left it: ${holder}`);
  if (takenUpByFailover(holders, v)) return leftAlone(saw, `left it for an operator: a volume record of the backend is named ${v.backendName}, and a failover to ${site} would take it up`);
  await driver.deleteSiteVolume(site, location);
  return { saw, did: `deleted it (nothing held it on a fresh read)`, outcome: 'repaired' };
}

async function backendRecord(host: string): Promise<{ config: BackendConfig; service: BackendServiceState } | undefined> {
  return getBackendItem(host).catch((e: unknown) => {
    if (e instanceof NotFound) return undefined;
    throw e;
  });
}
