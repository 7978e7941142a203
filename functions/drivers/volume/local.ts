/**
 * The local volume driver: real bytes on the local disk, the embedded stack's default and what the
 * tests run. Volumes, connections and snapshots on the active site: local-volumes.ts (its layout:
 * local-layout.ts); this module adds replication v2.1 on top.
 *
 * A backend with replication_devices is replicated (local-sites.ts, local-replication.ts): each device's `root` is a
 * second site with the same layout. The driver reads and writes the ACTIVE site only: the primary
 * `config.root`, or after a failover the target's root (constructor option `activeBackendId`).
 *
 * Decisions beyond upstream's driver contract:
 * - Connections follow the volume: the replicator mirrors each replicated volume's connection
 *   entries to the targets on every pass, and a failover copies the current ones from the old site
 *   when it is still readable; failback makes the primary's entries those of the target. So the
 *   active site's connections always match the attachments recorded in DynamoDB, and a host's
 *   `device_path` after a failover is on the target.
 * - Snapshots: the replicator mirrors snapshots of replicated volumes, so they survive a failover.
 * - Deleting or un-replicating a volume removes its copies from every other reachable site.
 */
import { mkdir, open, rm, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { logger } from '../../core/logger.js';
import type { BackendConfig, DrillCopy, FailoverResult, ReplicatedVolumeRef, ReplicationDriver } from './driver.js';
import { FAILBACK_SENTINEL } from './driver.js';
import { isDirectory, isErrno, statOrUndefined } from '../files.js';
import { checkName } from './local-layout.js';
import { replicationEngineFor, type LocalReplicationEngine, type ReplicaStatus, type ReplicationPassReport } from './local-replication.js';
import {
  FROZEN_MARKER,
  InvalidReplicationTarget,
  PRIMARY_BACKEND_ID,
  PROMOTED_MARKER,
  REPLICATION_DIR,
  drillCopyPath,
  findVolumeOn,
  hasSiteMarker,
  hostEntriesOn,
  mirrorConnections,
  mirrorSnapshots,
  removeSiteMarker,
  poolsOn,
  removeVolumeFromSite,
  replicationMarkerPath,
  siteRoot,
  writeReplicationMarker,
  writeReplicationMarkers,
  writeSiteMarker,
} from './local-sites.js';
import { LocalVolumeStore } from './local-volumes.js';
import { sparseCopyFile } from './sparse-copy.js';

// The driver's module is where callers (the audit, tests) find its paths and its refusal.
export { GIB, LOCAL_DRIVER_VERSION, connectionPath, decodeHost, encodeHost, poolVolumePath, snapshotPath, volumeFilePath } from './local-layout.js';
export { InvalidReplicationTarget } from './local-sites.js';

/** Volumes a failover brings up at once (file system calls in flight, not threads). */
const FAILOVER_PARALLELISM = 32;

export class LocalVolumeDriver extends LocalVolumeStore implements ReplicationDriver {
  /**
   * `activeBackendId`: the service's (reference §2.3 "Use at startup"). The driver never switches
   * site by itself: after failoverHost the caller persists the returned id and builds a new driver
   * with it (registry.driverFor), so a retried failover on this instance gives the same answer.
   */
  constructor(config: BackendConfig, options: { activeBackendId?: string } = {}) {
    super(config, options);
  }

  private get engine(): LocalReplicationEngine {
    return replicationEngineFor(this.config);
  }

  protected override async removeVolume(backendName: string): Promise<void> {
    if (!this.replicated) return this.deleteFromActiveSite(backendName);
    // Replicas go first and the registration marker last, so a retry after a crash finds the volume
    // still registered; inside `exclusive` so no pass recreates a replica meanwhile.
    await this.engine.exclusive(async () => {
      await this.removeFromOtherSites(backendName);
      await this.deleteFromActiveSite(backendName);
      await unlink(replicationMarkerPath(this.root, backendName)).catch((e: unknown) => {
        if (!isErrno(e, 'ENOENT', 'ENOTDIR')) throw e;
      });
    });
  }

  /** Every site but the active one: the targets' replicas, or after a failover the stale primary copy too. */
  private async removeFromOtherSites(backendName: string): Promise<void> {
    for (const id of [PRIMARY_BACKEND_ID, ...this.replicationTargets()]) {
      if (id === this.activeBackendId) continue;
      await removeVolumeFromSite(siteRoot(this.config, id), this.config, backendName);
      await rm(drillCopyPath(siteRoot(this.config, id), backendName), { force: true });
    }
    this.engine.forget(backendName);
  }

  // ---- Replication v2.1 -----------------------------------------------------------------------

  replicationTargets(): string[] {
    return this.targetIds();
  }

  private checkTarget(backendId: string): string {
    const targets = this.replicationTargets();
    if (!targets.includes(backendId)) {
      const known = targets.length ? `one of ${targets.join(', ')}` : 'none: the backend has no replication_device';
      throw new InvalidReplicationTarget(`${backendId} is not a replication target of ${this.backendHost} (expected ${known}).`, { host: this.backendHost, backendId });
    }
    return siteRoot(this.config, backendId);
  }

  /**
   * Registers the volume for replication (a marker on the active site) and, while on the primary,
   * copies it in full to every target before returning: a replica exists once this succeeds.
   * While failed over it only registers the volume; failback copies it to the primary.
   */
  async enableReplication(backendName: string): Promise<void> {
    if (!this.replicated) throw this.fail('the backend has no replication_device: volumes cannot be replicated', { backendName });
    await this.engine.exclusive(async () => {
      if (!(await this.find(backendName))) throw this.fail(`volume ${backendName} not found`, { backendName });
      await writeReplicationMarker(this.root, backendName, Date.now());
      if (this.activeBackendId !== PRIMARY_BACKEND_ID) return;
      for (const target of this.replicationTargets()) {
        try {
          await this.engine.syncVolumeTo(backendName, target);
        } catch (e) {
          throw this.fail(`cannot make the initial copy of ${backendName} on ${target}: ${(e as Error).message}`, { backendName, target }, e);
        }
      }
    });
  }

  async disableReplication(backendName: string): Promise<void> {
    checkName('volume', backendName, this.config);
    if (!this.replicated) return;
    await this.engine.exclusive(async () => {
      await this.removeFromOtherSites(backendName);
      await unlink(replicationMarkerPath(this.root, backendName)).catch((e: unknown) => {
        if (!isErrno(e, 'ENOENT', 'ENOTDIR')) throw e;
      });
    });
  }

  /** Per target: last completed sync, lag, bytes the last sync wrote (measured against the primary). */
  async replicationStatus(backendName: string): Promise<ReplicaStatus[]> {
    checkName('volume', backendName, this.config);
    return this.replicated ? this.engine.status(backendName) : [];
  }

  /** Runs a replication pass now (after any running one); what the stack's loop does every interval. */
  async syncNow(): Promise<ReplicationPassReport> {
    if (!this.replicated) return { volumes: 0, bytesCopied: 0, bytesRead: 0, errors: [], skipped: 'not replicated' };
    return this.engine.syncAll(this.activeBackendId);
  }

  /**
   * Upstream failover_host (reference §2.4). To a target: promotes it (no pass writes into it any
   * more) and reports each volume it holds a replica of as failed-over at its path there; a volume
   * without a replica gets `{status: 'error'}`. Nothing is read from the old site's volumes (it may
   * be a smoking hole): the target holds each volume as of its last completed sync.
   * `'default'`: fails back (see failBack).
   */
  async failoverHost(volumes: ReplicatedVolumeRef[], secondaryId: string | null): Promise<FailoverResult> {
    for (const v of volumes) checkName('volume', v.backendName, this.config);
    if (secondaryId === FAILBACK_SENTINEL) {
      if (this.activeBackendId === PRIMARY_BACKEND_ID) {
        throw new InvalidReplicationTarget(`${this.backendHost} is not failed over; there is nothing to fail back from.`, { host: this.backendHost });
      }
      return this.engine.exclusive(() => this.failBack(volumes));
    }
    // null: the first target. Always the first, not "the first but the current one", so that a
    // retried failover_host(null) lands where the first try did.
    const target = secondaryId ?? this.replicationTargets()[0];
    const targetRoot = this.checkTarget(target ?? '');
    return this.engine.exclusive(() => this.failOverTo(target, targetRoot, volumes));
  }

  private async failOverTo(target: string, targetRoot: string, volumes: ReplicatedVolumeRef[]): Promise<FailoverResult> {
    if (!(await isDirectory(targetRoot))) {
      throw this.fail(`Unable to failover to replication target: ${target} is unreachable (${targetRoot} is not a directory).`, { target });
    }
    const wasPromoted = await hasSiteMarker(targetRoot, PROMOTED_MARKER);
    // Promote first: from here no replication pass writes into the target, in any driver instance.
    await writeSiteMarker(targetRoot, PROMOTED_MARKER, { from: this.activeBackendId, at: Date.now() });
    try {
      // Connections: the old site's entries are the current ones when it is still readable; after a
      // smoking hole the target keeps those the replicator mirrored on its last pass.
      const oldRoot = this.root;
      const oldSiteReadable = target !== this.activeBackendId && (await isDirectory(oldRoot));
      // What every volume of the call looks in is listed once: the target's pools, both sites'
      // connection host entries (nothing else writes them while this runs: `exclusive`).
      const pools = await poolsOn(targetRoot, this.config);
      const hostEntries = oldSiteReadable ? { from: await hostEntriesOn(oldRoot), to: await hostEntriesOn(targetRoot) } : undefined;
      const one = async (v: ReplicatedVolumeRef): Promise<FailoverResult['volumeUpdates'][number]> => {
        const replica = await findVolumeOn(targetRoot, this.config, v.backendName, pools);
        if (!replica) return { volumeId: v.volumeId, updates: { status: 'error' } };
        if (hostEntries) await mirrorConnections(oldRoot, targetRoot, v.backendName, replica.pool, hostEntries);
        return { volumeId: v.volumeId, updates: { replicationStatus: 'failed-over', providerLocation: replica.path } };
      };
      // Each volume is a few stats of its own: FAILOVER_PARALLELISM of them at a time keep
      // libuv's threads busy instead of waiting on one file system call after another.
      const volumeUpdates: FailoverResult['volumeUpdates'] = [];
      for (let i = 0; i < volumes.length; i += FAILOVER_PARALLELISM) volumeUpdates.push(...(await Promise.all(volumes.slice(i, i + FAILOVER_PARALLELISM).map(one))));
      // The volumes with a replica are registered on the target, their markers made durable by one
      // fsync of the marker directory for the whole call (writeReplicationMarkers says why that is
      // enough), before the caller records any of them failed over.
      const found = new Set(volumeUpdates.filter((u) => u.updates.status !== 'error').map((u) => u.volumeId));
      await writeReplicationMarkers(targetRoot, volumes.filter((v) => found.has(v.volumeId)).map((v) => v.backendName), Date.now(), FAILOVER_PARALLELISM);
      return { activeBackendId: target, volumeUpdates };
    } catch (e) {
      // Upstream: on an unrecoverable error, raise and stay on the previous backend.
      if (!wasPromoted) {
        // A promoted marker left behind stops replication into the target: the operator must know.
        await removeSiteMarker(targetRoot, PROMOTED_MARKER).catch((markerError: unknown) =>
          logger.error('a refused failover could not remove the promoted marker of its target; replication into it stays stopped', {
            host: this.backendHost,
            target,
            error: markerError as Error,
          }),
        );
      }
      throw this.fail(`Unable to failover to replication target: ${(e as Error).message}`, { target }, e);
    }
  }

  /**
   * Failback to the primary: every volume is brought back from the active target by a full chunk
   * comparison (the primary, even its root, is recreated where it was lost), with its connections
   * and snapshots; then no target is promoted any more and replication resumes from the primary.
   * A volume that cannot be brought back gets `{status: 'error'}` (the manager makes it failover-error).
   */
  private async failBack(volumes: ReplicatedVolumeRef[]): Promise<FailoverResult> {
    const from = this.activeBackendId;
    const fromRoot = this.root;
    if (!(await isDirectory(fromRoot))) throw this.fail(`Unable to fail back: the active site ${from} is unreachable (${fromRoot} is not a directory).`, { from });
    const primary = siteRoot(this.config, PRIMARY_BACKEND_ID);
    await mkdir(primary, { recursive: true });
    const volumeUpdates: FailoverResult['volumeUpdates'] = [];
    for (const v of volumes) {
      const source = await findVolumeOn(fromRoot, this.config, v.backendName);
      if (!source) {
        volumeUpdates.push({ volumeId: v.volumeId, updates: { status: 'error' } });
        continue;
      }
      try {
        const dst = join(primary, source.pool, v.backendName);
        const src = await open(source.path, 'r');
        try {
          const { size, blocks } = await src.stat();
          await this.engine.copyChangedChunks(src, size, dst, undefined, blocks, source.path);
        } finally {
          await src.close();
        }
        await mirrorConnections(fromRoot, primary, v.backendName, source.pool);
        await mirrorSnapshots(fromRoot, primary, v.backendName, source.pool);
        await writeReplicationMarker(primary, v.backendName, Date.now());
        await this.engine.recordInSync(from, v.backendName, source.pool);
        volumeUpdates.push({ volumeId: v.volumeId, updates: { replicationStatus: 'enabled', providerLocation: dst } });
      } catch (e) {
        logger.error('failback of a volume failed', { host: this.backendHost, backendName: v.backendName, error: e as Error });
        volumeUpdates.push({ volumeId: v.volumeId, updates: { status: 'error' } });
      }
    }
    // The targets are replicas again: the next pass (once the service is back on '') replicates.
    await this.engine.clearPromotion();
    await rm(join(fromRoot, REPLICATION_DIR), { recursive: true, force: true });
    return { activeBackendId: PRIMARY_BACKEND_ID, volumeUpdates };
  }

  /** Freeze has nothing to stop on a local backend: a marker on the active site records it. */
  async freezeBackend(): Promise<void> {
    await writeSiteMarker(this.root, FROZEN_MARKER, { at: Date.now() });
  }

  async thawBackend(): Promise<void> {
    await removeSiteMarker(this.root, FROZEN_MARKER);
  }

  async isFrozen(): Promise<boolean> {
    return hasSiteMarker(this.root, FROZEN_MARKER);
  }

  /**
   * Beyond upstream: each volume's replica on the target is copied (reflink, else sparse) to
   * `<target>/.drill/<backendName>`, as the replica is now; the primary and the replicas stay as
   * they are. A volume with no replica on the target is left out of the answer (and logged).
   */
  async startDrill(volumes: ReplicatedVolumeRef[], targetBackendId: string): Promise<DrillCopy[]> {
    for (const v of volumes) checkName('volume', v.backendName, this.config);
    const targetRoot = this.checkTarget(targetBackendId);
    if (targetBackendId === this.activeBackendId) {
      throw new InvalidReplicationTarget(`${targetBackendId} is the active site of ${this.backendHost}, not a replica to drill on.`, { host: this.backendHost, targetBackendId });
    }
    return this.engine.exclusive(async () => {
      const copies: DrillCopy[] = [];
      for (const v of volumes) {
        const replica = await findVolumeOn(targetRoot, this.config, v.backendName);
        if (!replica) {
          logger.warn('drill: no replica on the target', { host: this.backendHost, backendName: v.backendName, targetBackendId });
          continue;
        }
        const location = drillCopyPath(targetRoot, v.backendName);
        // A retried startDrill keeps the copy it made (a drill may already be using it).
        if (!(await statOrUndefined(location))) await sparseCopyFile(replica.path, location);
        copies.push({ volumeId: v.volumeId, backendName: v.backendName, targetBackendId, location });
      }
      return copies;
    });
  }

  /** Removes the drill copies; the path is recomputed from the target and name, never taken from `location`. */
  async endDrill(copies: DrillCopy[]): Promise<void> {
    for (const c of copies) {
      checkName('volume', c.backendName, this.config);
      await rm(drillCopyPath(this.checkTarget(c.targetBackendId), c.backendName), { force: true });
    }
  }

  /**
   * failOverTo's compensation for a volume deleted meanwhile: everything of it on the target (the
   * replica it reported, the marker and connections it wrote), as a delete removes a volume from a
   * site. A delete driven on the old site already does so when it runs after failOverTo (both are
   * `exclusive`): then this finds nothing.
   */
  async discardFailedOver(replicas: DrillCopy[]): Promise<void> {
    for (const r of replicas) checkName('volume', r.backendName, this.config);
    await this.engine.exclusive(async () => {
      for (const r of replicas) await removeVolumeFromSite(this.checkTarget(r.targetBackendId), this.config, r.backendName);
    });
  }
}
