/**
 * The AWS volume driver: a Ferry volume is an EBS volume, a host connection an EBS attachment to an
 * EC2 instance (`connector.host` is the instance id).
 *
 * Volumes are found by tag, never by a stored id: `ferry:backend` (the backend host) and
 * `ferry:backend-name` (the stable backend name), so a step retried after a lost reply finds what
 * its first try made. CreateVolume also carries a ClientToken derived from the backend name, so two
 * tries racing each other make one volume.
 *
 * Snapshots are EBS snapshots found the same way, by tags (`ferry:backend`, `ferry:backend-name`,
 * `ferry:snapshot-name`). Replication to other regions: aws-ebs-replication.ts, -failback, -drill.
 *
 * Manage adopts: a volume of the backend's zone that no Ferry backend has tagged, named by its EBS
 * id, is tagged as this backend's (plus `ferry:adopted`) under that id as its backend name; a
 * failed manage removes those tags again. Unmanage keeps them (the volume table's unmanaged marker
 * says it is no longer Ferry's), so a later manage finds it under the same name.
 */
import type { Filter, Snapshot } from '@aws-sdk/client-ec2';
import { BackendNotReady, ConfigurationError } from '../../core/errors.js';
import {
  FAILBACK_SENTINEL,
  InvalidReplicationTarget,
  type AdoptingDriver,
  type BackendConfig,
  type BackendVolume,
  type CopyingDriver,
  type CreateVolumeRequest,
  type DrillCopy,
  type FailoverResult,
  type PoolCapabilities,
  type RecordReplicaChoices,
  type ReplicatedVolumeRef,
  type ReplicationDriver,
  type SiteVolumeDriver,
  type SnapshotDriver,
} from './driver.js';
import {
  ADOPTION_TAG_KEYS, CONNECTED_STATES, LIVE_SNAPSHOT_STATES, SNAPSHOT_NOT_FOUND_CODES, TAG_ADOPTED, TAG_BACKEND, TAG_BACKEND_NAME, TAG_NAME,
  TAG_POOL, TAG_SNAPSHOT_NAME, ec2Sdk, errorCode, regionOfAvailabilityZone, sleep, tagOf, type AwsEbsDriverOptions,
} from './aws-ebs-ec2.js';
import { endDrill, startDrill } from './aws-ebs-drill.js';
import { failBack } from './aws-ebs-failback.js';
import { deleteSiteVolume, getSiteVolume, listSiteVolumes } from './aws-ebs-sites.js';
import { DEFAULT_REPLICATION_INTERVAL_MS, EbsReplication, TAG_REPLICATED, ebsTargets, type EbsReplicationContext, type EbsSite } from './aws-ebs-replication.js';
import { AwsEbsVolumeStore } from './aws-ebs-volumes.js';
import { LagTally, type BackendLag } from './replication-lag.js';

/** What a replication pass started, per the schedule (or the local stack's loop) that ran it. */
export interface EbsPassReport {
  skipped?: string;
  volumes: number;
  snapshotsStarted: number;
  copiesStarted: number;
  errors: { backendName: string; message: string }[];
  /** Per target, over the volumes this pass looked at (absent when skipped). */
  lag?: BackendLag;
}

// The driver's module is where callers (tests, operators' scripts) find its names.
export { DEFAULT_EBS_VOLUME_TYPE, EBS_DRIVER_VERSION, clientTokenFor, regionOfAvailabilityZone, type AwsEbsDriverOptions } from './aws-ebs-ec2.js';

export class AwsEbsVolumeDriver extends AwsEbsVolumeStore implements SnapshotDriver, AdoptingDriver, ReplicationDriver, CopyingDriver, SiteVolumeDriver {
  private readonly targets: EbsSite[];
  /** The replication target the backend was failed over to, or undefined on the primary. */
  private readonly activeTarget?: EbsSite;
  private readonly replicationContext: EbsReplicationContext;
  private readonly replication: EbsReplication;

  /** After a failover (options.activeBackendId) the driver works in the target's zone and region. */
  constructor(primaryConfig: BackendConfig, options: AwsEbsDriverOptions = {}) {
    const targets = ebsTargets(primaryConfig);
    const active = options.activeBackendId ? targets.find((t) => t.backendId === options.activeBackendId) : undefined;
    if (options.activeBackendId && !active) throw new ConfigurationError(`backend ${primaryConfig.host} is active on ${options.activeBackendId}, which is not one of its replication_devices`);
    super(active ? { ...primaryConfig, availabilityZone: active.availabilityZone } : primaryConfig, options);
    this.targets = targets;
    this.activeTarget = active;
    const zone = primaryConfig.availabilityZone ?? '';
    this.replicationContext = {
      host: primaryConfig.host,
      config: primaryConfig,
      primary: { backendId: '', availabilityZone: zone, region: regionOfAvailabilityZone(zone) },
      targets,
      client: (region) => this.ec2ClientFor(region),
      volumes: (region, filters) => this.describeIn(region, [{ Name: `tag:${TAG_BACKEND}`, Values: [this.backendHost] }, ...filters]),
      send: (operation, context, call) => this.send(operation, context, call),
      fail: (message, context) => this.fail(message, context),
      now: options.now ?? (() => Date.now()),
    };
    this.replication = new EbsReplication(this.replicationContext);
  }

  // ---- replication (seed 001) ----------------------------------------------------------------------

  replicationTargets(): string[] {
    return this.targets.map((t) => t.backendId);
  }

  override async capabilities(): Promise<PoolCapabilities[]> {
    const pools = await super.capabilities();
    if (this.targets.length === 0) return pools;
    return pools.map((p) => ({ ...p, replicationEnabled: true, replicationTargets: this.replicationTargets(), replicationCount: this.targets.length, replicationType: ['async'] }));
  }

  /** Marks the volume for the replication passes (its `ferry:replicated` tag); the next pass snapshots it. */
  async enableReplication(backendName: string): Promise<void> {
    if (this.targets.length === 0) return;
    const volume = await this.find(backendName);
    if (!volume) throw this.fail(`volume ${backendName} not found`, { backendName });
    if (tagOf(volume, TAG_REPLICATED) === 'true') return;
    await this.send('CreateTags', { backendName }, async () =>
      (await this.ec2Client()).send(new (await ec2Sdk()).CreateTagsCommand({ Resources: [volume.VolumeId!], Tags: [{ Key: TAG_REPLICATED, Value: 'true' }] })),
    );
  }

  /** Stops replicating the volume and deletes its snapshots and copies in every region. */
  async disableReplication(backendName: string): Promise<void> {
    if (this.targets.length === 0) return;
    const volume = await this.find(backendName);
    if (volume && tagOf(volume, TAG_REPLICATED)) {
      await this.send('DeleteTags', { backendName }, async () =>
        (await this.ec2Client()).send(new (await ec2Sdk()).DeleteTagsCommand({ Resources: [volume.VolumeId!], Tags: [{ Key: TAG_REPLICATED }] })),
      );
    }
    await this.replication.removeReplicas(backendName);
  }

  async failoverHost(volumes: ReplicatedVolumeRef[], secondaryId: string | null, recordReplicas?: RecordReplicaChoices): Promise<FailoverResult> {
    if (secondaryId === FAILBACK_SENTINEL) {
      if (!this.activeTarget) throw new InvalidReplicationTarget(`${this.backendHost} is not failed over; there is nothing to fail back from.`, { host: this.backendHost });
      return failBack(this.replication, this.replicationContext, this.activeTarget, volumes);
    }
    // null: always the first target, so a retried failover_host(null) lands where the first try did.
    const target = secondaryId ?? this.targets[0]?.backendId;
    if (!target) throw new InvalidReplicationTarget(`${this.backendHost} has no replication targets.`, { host: this.backendHost });
    if (this.activeTarget && this.activeTarget.backendId !== target) throw new InvalidReplicationTarget(`${this.backendHost} is failed over to ${this.activeTarget.backendId}; fail back first.`, { host: this.backendHost });
    return this.replication.failOver(volumes, target, recordReplicas);
  }

  /** The service's `frozen` flag is what refuses changes and stops the passes (the schedule reads it); EBS holds no state of its own for it. */
  async freezeBackend(): Promise<void> {}
  async thawBackend(): Promise<void> {}

  async startDrill(volumes: ReplicatedVolumeRef[], targetBackendId: string, recordReplicas?: RecordReplicaChoices): Promise<DrillCopy[]> {
    if (this.activeTarget?.backendId === targetBackendId) throw new InvalidReplicationTarget(`${targetBackendId} is the active site of ${this.backendHost}, not a replica to drill on.`, { host: this.backendHost, targetBackendId });
    return startDrill(this.replication, this.replicationContext, volumes, targetBackendId, recordReplicas);
  }

  readonly endDrill = (copies: DrillCopy[]): Promise<void> => endDrill(this.replication, this.replicationContext, copies);
  /** failOver's compensation (aws-ebs-replication.ts): the target volumes made for volumes deleted meanwhile. */
  readonly discardFailedOver = (replicas: DrillCopy[]): Promise<void> => this.replication.discardFailedOver(replicas);
  /** The audit of unowned replicas' look at the regions the backend does not run on, and its repair (aws-ebs-sites.ts). */
  readonly listSiteVolumes = () => listSiteVolumes(this.replicationContext, this.activeTarget);
  readonly getSiteVolume = (site: string, volumeId: string) => getSiteVolume(this.replication, this.replicationContext, site, volumeId);
  readonly deleteSiteVolume = (site: string, volumeId: string) => deleteSiteVolume(this.replication, this.replicationContext, site, volumeId);

  /**
   * One replication pass: each replicated volume of the backend moves one step (snapshot, copy,
   * prune), page after page. Skipped when failed over: nothing replicates until failback. One
   * volume's failure is reported and does not stop the others.
   */
  async syncNow(intervalMs = DEFAULT_REPLICATION_INTERVAL_MS): Promise<EbsPassReport> {
    const report: EbsPassReport = { volumes: 0, snapshotsStarted: 0, copiesStarted: 0, errors: [] };
    const skipped = this.passSkipped();
    if (skipped) return { ...report, skipped };
    const tally = new LagTally(this.targets.map((t) => t.backendId));
    let pageToken: string | undefined;
    do {
      const page = await this.syncPage({ pageToken, intervalMs, tally });
      for (const count of ['volumes', 'snapshotsStarted', 'copiesStarted'] as const) report[count] += page[count];
      report.errors.push(...page.errors);
      pageToken = page.nextToken;
    } while (pageToken);
    return { ...report, lag: tally.summary(this.replicationContext.now()) };
  }

  /** Why this backend has no pass here, if it has none. */
  passSkipped(): string | undefined {
    return this.targets.length === 0 ? 'not replicated' : this.activeTarget && `failed over to ${this.activeTarget.backendId}`;
  }

  /**
   * One page of a pass (the replication-pass machine runs one per step, so no step outlives its
   * Lambda): up to `maxVolumes` replicated volumes from `pageToken`, each moved one step, its lag
   * added to `tally`. `nextToken` when volumes are left.
   */
  async syncPage(page: { pageToken?: string; maxVolumes?: number; intervalMs?: number; tally: LagTally }): Promise<Omit<EbsPassReport, 'lag' | 'skipped'> & { nextToken?: string }> {
    const report = { volumes: 0, snapshotsStarted: 0, copiesStarted: 0, errors: [] as EbsPassReport['errors'] };
    const filters = [{ Name: `tag:${TAG_BACKEND}`, Values: [this.backendHost] }, { Name: `tag:${TAG_REPLICATED}`, Values: ['true'] }];
    const found = await this.describePageIn(this.homeRegion(), filters, page.pageToken, page.maxVolumes);
    for (const volume of found.volumes) {
      report.volumes++;
      try {
        const started = await this.replication.replicateVolume(volume, page.intervalMs ?? DEFAULT_REPLICATION_INTERVAL_MS);
        [report.snapshotsStarted, report.copiesStarted] = [report.snapshotsStarted + started.snapshots, report.copiesStarted + started.copies];
        for (const [target, lagMs] of started.lagMs) page.tally.add(target, lagMs);
      } catch (e) {
        report.errors.push({ backendName: tagOf(volume, TAG_BACKEND_NAME) ?? volume.VolumeId!, message: (e as Error).message });
        // Not looked at this pass: counted as having no replica, so the figure never promises a failover more than it knows.
        for (const t of this.targets) page.tally.add(t.backendId, null);
      }
    }
    return { ...report, ...(found.nextToken ? { nextToken: found.nextToken } : {}) };
  }

  /** Per target: when the newest copy that has arrived was taken, and the lag (now minus that). */
  async replicationStatus(backendName: string): Promise<{ targetBackendId: string; lastSyncAt: number | null; lagMs: number }[]> {
    const volume = await this.find(backendName);
    if (!volume) throw this.fail(`volume ${backendName} not found`, { backendName });
    return this.replication.status(backendName, volume.CreateTime ? new Date(volume.CreateTime).getTime() : this.replicationContext.now());
  }

  async listAdoptable(): Promise<(BackendVolume & { inUse: boolean })[]> {
    if (!this.config.availabilityZone) return [];
    const zone = await this.describe([{ Name: 'availability-zone', Values: [this.config.availabilityZone] }]);
    return zone
      .filter((v) => !tagOf(v, TAG_BACKEND))
      .map((v) => ({ backendName: v.VolumeId!, sizeGb: v.Size ?? 0, inUse: (v.Attachments ?? []).some((a) => CONNECTED_STATES.has(a.State ?? '')) }));
  }

  async adoptVolume(sourceName: string, pool: string): Promise<BackendVolume> {
    const mine = await this.find(sourceName);
    if (mine) return { backendName: sourceName, sizeGb: mine.Size ?? 0 };
    if (!this.config.pools.some((p) => p.name === pool)) throw this.fail(`no pool ${pool}`, { pool, sourceName });
    const v = await this.describeById(sourceName).catch((e: unknown) => {
      // Not an EBS id at all (a name only Ferry's tags could resolve): nothing to adopt.
      if (errorCode(e) === 'InvalidParameterValue' || errorCode(e) === 'InvalidVolumeID.Malformed') return undefined;
      throw e;
    });
    if (!v) throw this.fail(`no volume ${sourceName} to manage: neither a Ferry volume of this backend nor an EBS volume id`, { sourceName });
    const owner = tagOf(v, TAG_BACKEND);
    if (owner) throw this.fail(`EBS volume ${sourceName} belongs to Ferry backend ${owner}`, { sourceName, owner });
    if (v.AvailabilityZone !== this.config.availabilityZone) throw this.fail(`EBS volume ${sourceName} is in ${v.AvailabilityZone}, this backend in ${this.config.availabilityZone}`, { sourceName });
    const attached = (v.Attachments ?? []).filter((a) => CONNECTED_STATES.has(a.State ?? '')).map((a) => a.InstanceId);
    // Ferry would record it detached while EC2 has it attached: it must come in free.
    if (attached.length > 0) throw this.fail(`EBS volume ${sourceName} is attached to ${attached.join(', ')}: detach it before managing it`, { sourceName, attached });
    await this.send('CreateTags', { sourceName }, async () =>
      (await this.ec2Client()).send(new (await ec2Sdk()).CreateTagsCommand({
          Resources: [sourceName],
          Tags: [
            { Key: TAG_BACKEND_NAME, Value: sourceName },
            { Key: TAG_BACKEND, Value: this.backendHost },
            { Key: TAG_POOL, Value: pool },
            { Key: TAG_ADOPTED, Value: 'true' },
          ],
        }),
      ),
    );
    return { backendName: sourceName, sizeGb: v.Size ?? 0 };
  }

  async releaseAdopted(sourceName: string): Promise<void> {
    const v = await this.find(sourceName);
    if (!v || tagOf(v, TAG_ADOPTED) !== 'true') return;
    await this.send('DeleteTags', { sourceName }, async () =>
      (await this.ec2Client()).send(new (await ec2Sdk()).DeleteTagsCommand({ Resources: [v.VolumeId!], Tags: ADOPTION_TAG_KEYS.map((Key) => ({ Key })) })),
    );
  }

  /** This backend's snapshots matching the extra filters, across pages (only our own account's). */
  private async describeSnapshots(filters: Filter[]): Promise<Snapshot[]> {
    const out: Snapshot[] = [];
    const Filters = [{ Name: `tag:${TAG_BACKEND}`, Values: [this.backendHost] }, ...filters];
    let NextToken: string | undefined;
    do {
      const page = await this.send('DescribeSnapshots', { filters: Filters }, async () =>
        (await this.ec2Client()).send(new (await ec2Sdk()).DescribeSnapshotsCommand({ OwnerIds: ['self'], Filters, NextToken })),
      );
      out.push(...(page.Snapshots ?? []));
      NextToken = page.NextToken;
    } while (NextToken);
    return out;
  }

  private snapshotsNamed(backendName: string, snapshotName: string): Promise<Snapshot[]> {
    return this.describeSnapshots([
      { Name: `tag:${TAG_BACKEND_NAME}`, Values: [backendName] },
      { Name: `tag:${TAG_SNAPSHOT_NAME}`, Values: [snapshotName] },
    ]);
  }

  /**
   * EC2 CreateSnapshot, then waits until it is completed (Cinder's snapshot is available only
   * then). CreateSnapshot takes no client token: the tags make a retry find the snapshot its first
   * try made; a snapshot in state `error` is replaced.
   */
  async createSnapshot(backendName: string, snapshotName: string): Promise<void> {
    let snapshot = (await this.snapshotsNamed(backendName, snapshotName)).find((s) => LIVE_SNAPSHOT_STATES.has(s.State ?? ''));
    if (!snapshot) {
      const volume = await this.find(backendName);
      if (!volume) throw this.fail(`volume ${backendName} not found`, { backendName, snapshotName });
      snapshot = await this.send('CreateSnapshot', { backendName, snapshotName, volumeId: volume.VolumeId }, async () =>
        (await this.ec2Client()).send(new (await ec2Sdk()).CreateSnapshotCommand({
            VolumeId: volume.VolumeId,
            Description: `Ferry snapshot ${snapshotName} of ${backendName}`,
            TagSpecifications: [
              {
                ResourceType: 'snapshot',
                Tags: [
                  { Key: TAG_NAME, Value: snapshotName },
                  { Key: TAG_BACKEND, Value: this.backendHost },
                  { Key: TAG_BACKEND_NAME, Value: backendName },
                  { Key: TAG_SNAPSHOT_NAME, Value: snapshotName },
                ],
              },
            ],
          }),
        ),
      );
    }
    const snapshotId = snapshot.SnapshotId;
    if (!snapshotId) throw this.fail(`CreateSnapshot returned no snapshot id for ${snapshotName} of ${backendName}`, { backendName, snapshotName });
    for (let attempt = 0; snapshot?.State !== 'completed'; attempt++) {
      if (snapshot?.State === 'error') throw this.fail(`EBS snapshot ${snapshotId} (${snapshotName} of ${backendName}) went into state error: ${snapshot.StateMessage ?? ''}`, { snapshotId, backendName, snapshotName });
      // Still pending: not a failure. The call is idempotent (the snapshot is found by its tags); the
      // caller comes back (the API starts the snapshot-create machine, which runs this again after its wait).
      if (attempt >= this.pollAttempts) throw new BackendNotReady(`backend ${this.backendHost}: EBS snapshot ${snapshotId} (${snapshotName} of ${backendName}) is not completed yet`, { context: { snapshotId, backendName, snapshotName } });
      await sleep(this.pollIntervalMs);
      snapshot = await this.describeSnapshotById(snapshotId);
      if (!snapshot) throw this.fail(`EBS snapshot ${snapshotId} (${snapshotName} of ${backendName}) vanished while being created`, { snapshotId, backendName, snapshotName });
    }
  }

  private async describeSnapshotById(snapshotId: string): Promise<Snapshot | undefined> {
    try {
      const out = await (await this.ec2Client()).send(new (await ec2Sdk()).DescribeSnapshotsCommand({ SnapshotIds: [snapshotId] }));
      return out.Snapshots?.[0];
    } catch (e) {
      if (SNAPSHOT_NOT_FOUND_CODES.has(errorCode(e))) return undefined;
      throw this.awsFail('DescribeSnapshots', e, { snapshotId });
    }
  }

  /** Deletes every EBS snapshot carrying the name (two racing creates may have made two); none left is success. */
  async deleteSnapshot(backendName: string, snapshotName: string): Promise<void> {
    for (const s of await this.snapshotsNamed(backendName, snapshotName)) {
      try {
        await (await this.ec2Client()).send(new (await ec2Sdk()).DeleteSnapshotCommand({ SnapshotId: s.SnapshotId }));
      } catch (e) {
        if (SNAPSHOT_NOT_FOUND_CODES.has(errorCode(e))) continue;
        throw this.awsFail('DeleteSnapshot', e, { backendName, snapshotName, snapshotId: s.SnapshotId });
      }
    }
  }

  // ---- Volumes with data (CopyingDriver) -------------------------------------------------------

  /** CreateVolume with the EBS snapshot's SnapshotId (same ClientToken as any create of that name, so a retry gets the same volume). */
  async createVolumeFromSnapshot(req: CreateVolumeRequest, source: { volumeBackendName: string; snapshotName: string }): Promise<{ providerLocation: string }> {
    // Made already (a re-run): found by its tags, checked and waited for like any create.
    if (await this.find(req.backendName)) return this.createVolume(req);
    const snapshot = (await this.snapshotsNamed(source.volumeBackendName, source.snapshotName)).find((s) => s.State === 'completed');
    if (!snapshot?.SnapshotId) throw this.fail(`no completed EBS snapshot ${source.snapshotName} of ${source.volumeBackendName}`, { ...source, backendName: req.backendName });
    return this.createVolume(req, snapshot.SnapshotId);
  }

  /**
   * EBS has no clone: a snapshot of the source named after the new volume (its tags are the intent
   * a retry finds; BackendNotReady while it is pending, and the machine comes back), a volume from
   * it, then the snapshot goes. abandonCopy removes the snapshot of a clone that failed.
   */
  async cloneVolume(req: CreateVolumeRequest, sourceBackendName: string): Promise<{ providerLocation: string }> {
    const snapshotName = cloneSnapshotName(req.backendName);
    if (!(await this.find(req.backendName))) {
      await this.createSnapshot(sourceBackendName, snapshotName);
      await this.createVolumeFromSnapshot(req, { volumeBackendName: sourceBackendName, snapshotName });
    }
    const out = await this.createVolume(req);
    await this.deleteSnapshot(sourceBackendName, snapshotName);
    return out;
  }

  async abandonCopy(backendName: string, sourceBackendName: string): Promise<void> {
    await this.deleteSnapshot(sourceBackendName, cloneSnapshotName(backendName));
  }

  async listSnapshots(): Promise<{ backendName: string; snapshotName: string }[]> {
    const seen = new Set<string>();
    const out: { backendName: string; snapshotName: string }[] = [];
    for (const s of await this.describeSnapshots([])) {
      const backendName = tagOf(s, TAG_BACKEND_NAME);
      const snapshotName = tagOf(s, TAG_SNAPSHOT_NAME);
      if (!backendName || !snapshotName || s.State === 'error') continue;
      const key = `${backendName}\0${snapshotName}`;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push({ backendName, snapshotName });
    }
    return out;
  }
}

/** The EBS snapshot a clone goes through: named after the new volume, so every retry of the clone finds the same one. */
export const cloneSnapshotName = (backendName: string) => `clone-for-${backendName}`;
