/**
 * Replication v2.1 (seed 001) on EBS. A replication_device is another AWS region, named by a zone
 * there (`{backend_id, availability_zone}`). Replication is asynchronous and incremental: each pass
 * (the stack's schedule) snapshots every replicated volume — EBS snapshots store only the blocks
 * changed since the previous one — copies the newest completed snapshot to every target region
 * (CopySnapshot, incremental too once an earlier copy is there), and prunes what no failover needs.
 * A pass never waits: what EC2 has not finished, the next pass looks at again.
 *
 * Failover creates, in the target zone, a volume from the newest copy that has arrived of each
 * volume, tagged as the backend's under the same backend name, so the driver built for the target
 * (activeBackendId) finds it as any other; nothing is asked of the primary region, which may be
 * gone. The copy chosen is recorded in the failover's batch before the first CreateVolume (the
 * step's recordReplicas), and the ClientToken derives from the backend, target, name and that
 * recorded choice (the copy and when it was chosen), so a failover repeated after a crash starts
 * from the same copy and makes no second volume, even when a newer copy arrived in between; and a
 * failover after a failback is a new request, from a newer copy or the same one: EC2 answers a
 * reused token with what it first made, even deleted, or IdempotentParameterMismatch when the
 * request differs, for at least 24 hours. Failback runs the same way the other way round
 * (aws-ebs-failback.ts); drills are aws-ebs-drill.ts.
 *
 * Every object is found by its tags (`ferry:backend`, `ferry:replica-of`, `ferry:replication`),
 * never by a remembered id, so each call is idempotent.
 */
import type { EC2Client, Filter, Snapshot, Volume, VolumeType } from '@aws-sdk/client-ec2';
import { ConfigurationError, DriverError } from '../../core/errors.js';
import { InvalidReplicationTarget, type BackendConfig, type DrillCopy, type FailoverResult, type RecordReplicaChoices, type ReplicatedVolumeRef } from './driver.js';
import {
  DEFAULT_EBS_VOLUME_TYPE,
  NOT_FOUND_CODES,
  SNAPSHOT_NOT_FOUND_CODES,
  TAG_BACKEND,
  TAG_BACKEND_NAME,
  TAG_NAME,
  TAG_POOL,
  clientTokenFor,
  ec2Sdk,
  errorCode,
  provisionedIops,
  regionOfAvailabilityZone,
  tagOf,
} from './aws-ebs-ec2.js';

export const TAG_REPLICATED = 'ferry:replicated';
export const TAG_REPLICA_OF = 'ferry:replica-of';
/** `source` (a snapshot in the volume's region), `copy` (its copy in a target region), `drill`. */
export const TAG_REPLICATION = 'ferry:replication';
export const TAG_SOURCE_SNAPSHOT = 'ferry:source-snapshot';
/** When the source snapshot of a copy was taken (ISO): what the replica holds the volume as of. */
export const TAG_SOURCE_TIME = 'ferry:source-time';
export const TAG_TARGET = 'ferry:target';

/** EC2's most values in one filter: the batch reads of a failover go by this many names. */
export const MAX_FILTER_VALUES = 200;

/** A pass does not snapshot a volume again sooner than this after its newest snapshot. */
export const DEFAULT_REPLICATION_INTERVAL_MS = 5 * 60_000;

export interface EbsSite {
  /** '' for the primary. */
  backendId: string;
  availabilityZone: string;
  region: string;
}

/** The targets of an aws-ebs backend, checked: each names a zone (`availability_zone`) in another region. */
export function ebsTargets(config: BackendConfig): EbsSite[] {
  const primary = regionOfAvailabilityZone(config.availabilityZone ?? '');
  return (config.replicationDevices ?? []).map((d) => {
    const zone = d.availability_zone;
    if (typeof zone !== 'string' || !/^[a-z]{2}(-[a-z]+)+-\d[a-z]$/.test(zone)) {
      throw new ConfigurationError(`backend ${config.host}: replication_device ${d.backend_id} needs availability_zone, a zone such as us-east-1a`);
    }
    const region = regionOfAvailabilityZone(zone);
    if (region === primary) throw new ConfigurationError(`backend ${config.host}: replication_device ${d.backend_id} is in ${region}, the backend's own region; a target is another region`);
    return { backendId: d.backend_id, availabilityZone: zone, region };
  });
}

/** What the replication needs of the driver it serves. */
export interface EbsReplicationContext {
  host: string;
  config: BackendConfig;
  primary: EbsSite;
  targets: EbsSite[];
  client(region: string): Promise<EC2Client>;
  /** Live volumes of a region matching the filters (and `ferry:backend` = host). */
  volumes(region: string, filters: Filter[]): Promise<Volume[]>;
  send<T>(operation: string, context: Record<string, unknown>, call: () => Promise<T>): Promise<T>;
  fail(message: string, context?: Record<string, unknown>): DriverError;
  now(): number;
}

export class EbsReplication {
  constructor(private readonly c: EbsReplicationContext) {}

  target(backendId: string): EbsSite {
    const t = this.c.targets.find((x) => x.backendId === backendId);
    if (!t) throw new InvalidReplicationTarget(`${backendId} is not a replication target of ${this.c.host} (expected ${this.c.targets.map((x) => x.backendId).join(', ') || 'none'}).`, { host: this.c.host, backendId });
    return t;
  }

  /** This backend's snapshots in a region with the given tags, across pages. */
  async snapshots(region: string, tags: Record<string, string>, filters: Filter[] = []): Promise<Snapshot[]> {
    const Filters = [{ Name: `tag:${TAG_BACKEND}`, Values: [this.c.host] }, ...Object.entries(tags).map(([k, v]) => ({ Name: `tag:${k}`, Values: [v] })), ...filters];
    const out: Snapshot[] = [];
    let NextToken: string | undefined;
    do {
      const page = await this.c.send('DescribeSnapshots', { region, tags }, async () =>
        (await this.c.client(region)).send(new (await ec2Sdk()).DescribeSnapshotsCommand({ OwnerIds: ['self'], Filters, NextToken })),
      );
      out.push(...(page.Snapshots ?? []));
      NextToken = page.NextToken;
    } while (NextToken);
    return out;
  }

  async deleteSnapshot(region: string, snapshotId: string): Promise<void> {
    try {
      await (await this.c.client(region)).send(new (await ec2Sdk()).DeleteSnapshotCommand({ SnapshotId: snapshotId }));
    } catch (e) {
      if (errorCode(e) === 'InvalidSnapshot.NotFound') return;
      throw this.c.fail(`EBS DeleteSnapshot failed: ${errorCode(e)}: ${(e as Error).message}`, { region, snapshotId });
    }
  }

  /** The completed copies of a volume in a region (what a failover or drill there may start from). */
  async completedCopies(region: string, backendName: string): Promise<Snapshot[]> {
    return (await this.snapshots(region, { [TAG_REPLICA_OF]: backendName, [TAG_REPLICATION]: 'copy' })).filter((s) => s.State === 'completed');
  }

  /** Per target: when the newest arrived copy's snapshot was taken, and the lag that makes. */
  async status(backendName: string, createdAt: number): Promise<{ targetBackendId: string; lastSyncAt: number | null; lagMs: number }[]> {
    const now = this.c.now();
    const out = [];
    for (const t of this.c.targets) {
      const arrived = newest(await this.completedCopies(t.region, backendName));
      const at = arrived ? sourceTime(arrived) : null;
      out.push({ targetBackendId: t.backendId, lastSyncAt: at, lagMs: Math.max(0, now - (at ?? createdAt)) });
    }
    return out;
  }

  /**
   * One step of a volume's replication: a snapshot when none is pending and the newest is older than
   * the interval; the newest completed one copied to each target that lacks it; older copies and
   * sources pruned once something newer has arrived everywhere. Returns what it started, and per
   * target the lag of the newest copy there (null: none has arrived yet).
   */
  async replicateVolume(volume: Volume, intervalMs: number): Promise<{ snapshots: number; copies: number; lagMs: Map<string, number | null> }> {
    const backendName = tagOf(volume, TAG_BACKEND_NAME) ?? volume.VolumeId!;
    const started = { snapshots: 0, copies: 0, lagMs: new Map<string, number | null>(this.c.targets.map((t) => [t.backendId, null])) };
    const sources = await this.snapshots(this.c.primary.region, { [TAG_REPLICA_OF]: backendName, [TAG_REPLICATION]: 'source' });
    // A source's time is when its data was taken: a failback's copy home carries it (aws-ebs-failback.ts).
    const completed = sources.filter((s) => s.State === 'completed').sort((a, b) => sourceTime(b) - sourceTime(a));
    const pending = sources.some((s) => s.State === 'pending');
    if (!pending && (!completed[0] || this.c.now() - sourceTime(completed[0]) >= intervalMs)) {
      await this.snapshotVolume(volume, backendName);
      started.snapshots++;
    }
    const newest = completed[0];
    if (!newest) return started;
    let arrivedEverywhere = Infinity;
    for (const t of this.c.targets) {
      const copies = await this.snapshots(t.region, { [TAG_REPLICA_OF]: backendName, [TAG_REPLICATION]: 'copy' });
      // One copy in flight per target: a replication that falls behind (copies slower than the
      // interval) lets its lag grow, not its pile of pending copies; the next one takes the newest.
      const inFlight = copies.some((c) => c.State === 'pending');
      if (!inFlight && !copies.some((c) => tagOf(c, TAG_SOURCE_SNAPSHOT) === newest.SnapshotId)) {
        await this.copy(newest, t, backendName, volume);
        started.copies++;
      }
      const arrived = copies.filter((c) => c.State === 'completed').sort((a, b) => sourceTime(b) - sourceTime(a));
      // Only the newest arrived copy is needed for a failover; a pending one replaces it when it arrives.
      for (const old of arrived.slice(1)) await this.deleteSnapshot(t.region, old.SnapshotId!);
      arrivedEverywhere = Math.min(arrivedEverywhere, arrived[0] ? sourceTime(arrived[0]) : -Infinity);
      if (arrived[0]) started.lagMs.set(t.backendId, this.c.now() - sourceTime(arrived[0]));
    }
    // A source is needed until a newer one has arrived in every target (and the newest is the base
    // of the next incremental copy), so only those older than what arrived everywhere go.
    for (const s of completed.slice(1)) if (sourceTime(s) < arrivedEverywhere) await this.deleteSnapshot(this.c.primary.region, s.SnapshotId!);
    return started;
  }

  private async snapshotVolume(volume: Volume, backendName: string): Promise<void> {
    await this.c.send('CreateSnapshot', { backendName, volumeId: volume.VolumeId }, async () =>
      (await this.c.client(this.c.primary.region)).send(new (await ec2Sdk()).CreateSnapshotCommand({
          VolumeId: volume.VolumeId,
          Description: `Ferry replication of ${backendName}`,
          TagSpecifications: [{ ResourceType: 'snapshot', Tags: tags({ [TAG_NAME]: `replica-${backendName}`, [TAG_BACKEND]: this.c.host, [TAG_REPLICA_OF]: backendName, [TAG_REPLICATION]: 'source', [TAG_POOL]: tagOf(volume, TAG_POOL) ?? '' }) }],
        }),
      ),
    );
  }

  private async copy(source: Snapshot, t: EbsSite, backendName: string, volume: Volume): Promise<void> {
    await this.c.send('CopySnapshot', { backendName, target: t.backendId, snapshotId: source.SnapshotId }, async () =>
      (await this.c.client(t.region)).send(new (await ec2Sdk()).CopySnapshotCommand({
          SourceRegion: this.c.primary.region,
          SourceSnapshotId: source.SnapshotId,
          Description: `Ferry replica of ${backendName} for ${t.backendId}`,
          TagSpecifications: [
            {
              ResourceType: 'snapshot',
              Tags: tags({
                [TAG_NAME]: `replica-${backendName}`,
                [TAG_BACKEND]: this.c.host,
                [TAG_REPLICA_OF]: backendName,
                [TAG_REPLICATION]: 'copy',
                [TAG_SOURCE_SNAPSHOT]: source.SnapshotId!,
                [TAG_SOURCE_TIME]: new Date(sourceTime(source)).toISOString(),
                [TAG_TARGET]: t.backendId,
                [TAG_POOL]: tagOf(volume, TAG_POOL) ?? tagOf(source, TAG_POOL) ?? '',
              }),
            },
          ],
        }),
      ),
    );
  }

  /** A volume in a site's zone from a snapshot there, once per token (EC2 answers a reused ClientToken with the volume it made). */
  async volumeFrom(site: EbsSite, snapshot: Snapshot, token: string, volumeTags: Record<string, string>): Promise<string> {
    const type = this.c.config.ebsVolumeType ?? DEFAULT_EBS_VOLUME_TYPE;
    const size = snapshot.VolumeSize ?? 1;
    const created = await this.c.send('CreateVolume', { site: site.backendId, snapshotId: snapshot.SnapshotId }, async () =>
      (await this.c.client(site.region)).send(new (await ec2Sdk()).CreateVolumeCommand({
          AvailabilityZone: site.availabilityZone,
          SnapshotId: snapshot.SnapshotId,
          VolumeType: type as VolumeType,
          Iops: provisionedIops(type, size, this.c.config.ebsIopsPerGb),
          ClientToken: token,
          TagSpecifications: [{ ResourceType: 'volume', Tags: tags({ ...volumeTags, [TAG_BACKEND]: this.c.host }) }],
        }),
      ),
    );
    if (!created.VolumeId) throw this.c.fail(`CreateVolume returned no volume id in ${site.region}`, { snapshotId: snapshot.SnapshotId });
    return created.VolumeId;
  }

  /**
   * To a target: each volume's newest arrived copy becomes a volume in the target zone under the
   * same backend name (`{status: 'error'}` for one with no copy there, or whose copy is gone). Not
   * waited for: the volume is `creating` for a moment, and attaching it waits as any attach does.
   * What is already there and the copies are read for the whole batch at once (EC2 takes up to 200
   * values per filter), so a volume costs its one CreateVolume and a share of two Describe calls.
   */
  async failOver(volumes: ReplicatedVolumeRef[], targetId: string, recordReplicas?: RecordReplicaChoices): Promise<FailoverResult> {
    const t = this.target(targetId);
    // Each name's volumes in the target, with the snapshot each was made from: only the one made
    // from this batch's chosen copy is this failover's (a re-run's). Another of the same name (a
    // failback's target volume whose delete failed, an earlier failover's) holds older data and is
    // never taken up: the audit reports it (replica-unowned).
    const there = new Map<string, Volume[]>();
    const copies = new Map<string, Snapshot[]>();
    for (let i = 0; i < volumes.length; i += MAX_FILTER_VALUES) {
      const names = volumes.slice(i, i + MAX_FILTER_VALUES).map((v) => v.backendName);
      for (const v of await this.c.volumes(t.region, [{ Name: `tag:${TAG_BACKEND_NAME}`, Values: names }])) {
        const name = tagOf(v, TAG_BACKEND_NAME)!;
        there.set(name, [...(there.get(name) ?? []), v]);
      }
      for (const c of await this.snapshots(t.region, { [TAG_REPLICATION]: 'copy' }, [{ Name: `tag:${TAG_REPLICA_OF}`, Values: names }])) {
        const name = tagOf(c, TAG_REPLICA_OF)!;
        if (c.State === 'completed') copies.set(name, [...(copies.get(name) ?? []), c]);
      }
    }
    const chosen = await this.chosenCopies(volumes, copies, recordReplicas);
    const volumeUpdates: FailoverResult['volumeUpdates'] = [];
    for (const v of volumes) {
      const { copy, choice } = chosen.get(v.volumeId) ?? {};
      const made = there.get(v.backendName) ?? [];
      let id = copy && made.find((m) => m.SnapshotId === copy.SnapshotId)?.VolumeId;
      // Unrecorded (a caller with no batch to hold the choice): EC2 is the only evidence of an
      // earlier run's choice, so a volume made from one of the name's current copies is taken.
      if (!id && !recordReplicas && v.replica === undefined) id = made.find((m) => copies.get(v.backendName)?.some((c) => c.SnapshotId === m.SnapshotId))?.VolumeId;
      if (!id && copy) {
        const token = clientTokenFor(this.c.host, `failover:${t.backendId}:${v.backendName}:${choice}`);
        id = await this.volumeFrom(t, copy, token, { [TAG_NAME]: v.backendName, [TAG_BACKEND_NAME]: v.backendName, [TAG_POOL]: tagOf(copy, TAG_POOL) ?? '' }).catch((e: unknown) => {
          // The copy chosen is gone (deleted since it was listed or recorded) and no volume was made from it.
          if (e instanceof DriverError && SNAPSHOT_NOT_FOUND_CODES.has(String(e.context.code))) return undefined;
          throw e;
        });
      }
      volumeUpdates.push({ volumeId: v.volumeId, updates: id ? { replicationStatus: 'failed-over', providerLocation: id } : { status: 'error' } });
    }
    return { activeBackendId: t.backendId, volumeUpdates };
  }

  /**
   * The copy each volume starts from (undefined: none) and the ClientToken's part for it: the
   * choice an earlier run of the batch recorded (`replica`), else the newest completed copy, these
   * choices recorded (recordReplicas) before any is used. So a batch run again after a crash starts
   * every volume from the copy its first run chose, with the same ClientToken, even when a copy in
   * flight has arrived since and the target's DescribeVolumes does not list the volume made yet: no
   * second volume. A recorded choice also names when it was made (`<snapshot id>@<time>`), so a
   * later operation from the same copy (a failover after a failback before a newer copy arrived, a
   * second drill) is a new request, not the first one's token, which EC2 would answer with the
   * volume it made then, deleted since. Unrecorded (a caller without recordReplicas), the token
   * names the copy alone. A recorded copy no longer listed is named by its id alone (its volume's
   * size): EC2 answers a token it knows with the volume it made, and a new one InvalidSnapshot.NotFound.
   */
  async chosenCopies(volumes: ReplicatedVolumeRef[], copies: Map<string, Snapshot[]>, recordReplicas?: RecordReplicaChoices): Promise<Map<string, { copy: Snapshot; choice: string } | undefined>> {
    const unchosen = volumes.filter((v) => v.replica === undefined);
    let recorded: Record<string, string | null> = {};
    if (unchosen.length > 0) {
      const at = new Date(this.c.now()).toISOString();
      const choiceOf = (copy: Snapshot | undefined) => (copy ? (recordReplicas ? `${copy.SnapshotId}@${at}` : copy.SnapshotId!) : null);
      const chosen = Object.fromEntries(unchosen.map((v) => [v.volumeId, choiceOf(newest(copies.get(v.backendName) ?? []))]));
      recorded = recordReplicas ? await recordReplicas(chosen) : chosen;
    }
    return new Map(
      volumes.map((v) => {
        const choice = v.replica === undefined ? (recorded[v.volumeId] ?? null) : v.replica;
        if (choice === null) return [v.volumeId, undefined];
        const id = choice.split('@')[0]!;
        return [v.volumeId, { copy: copies.get(v.backendName)?.find((c) => c.SnapshotId === id) ?? { SnapshotId: id, VolumeSize: v.sizeGb }, choice }];
      }),
    );
  }

  /**
   * The volumes failOver made in a target for volumes deleted since: DeleteVolume of each
   * (InvalidVolume.NotFound: already done). One refused does not stop the others; the error names
   * those left (`context.left`).
   */
  async discardFailedOver(replicas: DrillCopy[]): Promise<void> {
    const left: DrillCopy[] = [];
    const errors: string[] = [];
    for (const r of replicas) {
      await this.deleteTargetVolumes([r], 'failed-over replica').catch((e: unknown) => {
        left.push(r);
        errors.push((e as Error).message);
      });
    }
    if (left.length) throw this.c.fail(errors.join('; '), { left });
  }

  async deleteTargetVolumes(volumes: DrillCopy[], what: string): Promise<void> {
    for (const copy of volumes) {
      const t = this.target(copy.targetBackendId);
      try {
        await (await this.c.client(t.region)).send(new (await ec2Sdk()).DeleteVolumeCommand({ VolumeId: copy.location }));
      } catch (e) {
        if (NOT_FOUND_CODES.has(errorCode(e))) continue;
        throw this.c.fail(`EBS DeleteVolume of ${what} ${copy.location} failed: ${errorCode(e)}: ${(e as Error).message}`, { copy });
      }
    }
  }

  /** Every replica of a volume, in its region and the targets (disable, delete). */
  async removeReplicas(backendName: string): Promise<void> {
    for (const site of [this.c.primary, ...this.c.targets]) {
      for (const s of await this.snapshots(site.region, { [TAG_REPLICA_OF]: backendName })) await this.deleteSnapshot(site.region, s.SnapshotId!);
    }
  }
}

/** DeleteVolume of one volume of a region; InvalidVolume.NotFound is done (EC2 refuses one attached: VolumeInUse, the caller's failure). */
export async function deleteVolumeIn(c: EbsReplicationContext, region: string, volumeId: string): Promise<void> {
  try {
    await (await c.client(region)).send(new (await ec2Sdk()).DeleteVolumeCommand({ VolumeId: volumeId }));
  } catch (e) {
    if (NOT_FOUND_CODES.has(errorCode(e))) return;
    throw c.fail(`EBS DeleteVolume of ${volumeId} in ${region} failed: ${errorCode(e)}: ${(e as Error).message}`, { region, volumeId, code: errorCode(e) });
  }
}

const tags = (o: Record<string, string>) => Object.entries(o).map(([Key, Value]) => ({ Key, Value }));
const time = (s: Snapshot) => (s.StartTime ? new Date(s.StartTime).getTime() : 0);
const sourceTime = (s: Snapshot) => Date.parse(tagOf(s, TAG_SOURCE_TIME) ?? '') || time(s);
/** The copy whose source was taken last. */
export const newest = (copies: Snapshot[]) => copies.reduce<Snapshot | undefined>((best, c) => (!best || sourceTime(c) > sourceTime(best) ? c : best), undefined);
