/**
 * Failback ('default') of an aws-ebs backend running on a target region: each volume's data goes
 * home the way replication brought it out, then the backend switches. Per volume, each call does
 * what is due and never waits:
 *   1. a snapshot of the volume in the target region (`ferry:replication` = failback-source);
 *   2. once completed, its copy to the primary region (failback-copy);
 *   3. once arrived, a volume in the primary zone from it (ClientToken per backend, name and copy,
 *      so a repeat makes none twice); the stale primary volume of the same name, if the region kept
 *      one, is deleted, and so is the target's volume: replication starts again from the primary,
 *      from the failback's snapshots kept as its newest source and copy (keepFailbackPoint).
 * While any volume of the batch is still on its way, the call answers BackendNotReady after
 * starting what it could, and the failover machine runs the batch again after its wait.
 *
 * As upstream, failback takes the volumes as they are when it starts: writes made on the target
 * after its snapshot are not carried home, so stop I/O first (docs/aws.md).
 */
import type { Snapshot, Volume } from '@aws-sdk/client-ec2';
import { BackendNotReady } from '../../core/errors.js';
import type { FailoverResult, ReplicatedVolumeRef } from './driver.js';
import { CONNECTED_STATES, TAG_BACKEND, TAG_BACKEND_NAME, TAG_NAME, TAG_POOL, clientTokenFor, ec2Sdk, tagOf } from './aws-ebs-ec2.js';
import { deleteVolumeIn, TAG_REPLICATED, TAG_REPLICA_OF, TAG_REPLICATION, TAG_SOURCE_SNAPSHOT, TAG_SOURCE_TIME, TAG_TARGET, type EbsReplication, type EbsReplicationContext, type EbsSite } from './aws-ebs-replication.js';

export const TAG_FAILBACK_COPY = 'ferry:failback-copy';
/** On a volume a failback brought home: the target volume it was brought from. */
export const TAG_FAILBACK_OF = 'ferry:failback-of';

type Step = { done: true; volumeId: string } | { done: false; waiting: string } | { error: string };

export async function failBack(r: EbsReplication, c: EbsReplicationContext, from: EbsSite, volumes: ReplicatedVolumeRef[]): Promise<FailoverResult> {
  const volumeUpdates: FailoverResult['volumeUpdates'] = [];
  const waiting: string[] = [];
  for (const v of volumes) {
    const step = await failBackVolume(r, c, from, v);
    if ('error' in step) volumeUpdates.push({ volumeId: v.volumeId, updates: { status: 'error' } });
    else if (step.done) volumeUpdates.push({ volumeId: v.volumeId, updates: { replicationStatus: 'enabled', providerLocation: step.volumeId } });
    else waiting.push(`${v.backendName}: ${step.waiting}`);
  }
  if (waiting.length > 0) {
    throw new BackendNotReady(`backend ${c.host}: failback to the primary is on its way for ${waiting.length} volume(s): ${waiting.slice(0, 5).join('; ')}`, { context: { host: c.host, waiting: waiting.length } });
  }
  return { activeBackendId: '', volumeUpdates };
}

async function failBackVolume(r: EbsReplication, c: EbsReplicationContext, from: EbsSite, v: ReplicatedVolumeRef): Promise<Step> {
  const { backendName } = v;
  const home = c.primary;
  const named = [{ Name: `tag:${TAG_BACKEND_NAME}`, Values: [backendName] }];
  const inTarget = await c.volumes(from.region, named);
  // The volume failed over to (the record's location); unknown, the newest of the name there. An
  // older one of the same name (an earlier failover's whose delete failed) is never brought home.
  const onTarget = v.location ? inTarget.find((x) => x.VolumeId === v.location) : newestVolume(inTarget);
  // Done before (a repeated batch): the primary holds the volume made from a failback copy of this
  // target volume (it names it). One an earlier failback brought holds older data: never taken.
  // With the target's volume gone (a repeat after finish deleted it), finish deleted those already.
  const homeVolumes = await c.volumes(home.region, named);
  const brought = homeVolumes.find((x) => tagOf(x, TAG_FAILBACK_COPY) && (!onTarget || tagOf(x, TAG_FAILBACK_OF) === onTarget.VolumeId));
  if (brought) return finish(r, c, from, backendName, homeVolumes, brought, onTarget);
  if (!onTarget) return { error: `no volume ${backendName} in ${from.backendId} to bring home` };

  const sources = await r.snapshots(from.region, { [TAG_REPLICA_OF]: backendName, [TAG_REPLICATION]: 'failback-source' });
  const source = sources.find((s) => s.State === 'completed');
  if (!source) {
    if (!sources.some((s) => s.State === 'pending')) {
      await c.send('CreateSnapshot', { backendName, volumeId: onTarget.VolumeId }, async () =>
        (await c.client(from.region)).send(new (await ec2Sdk()).CreateSnapshotCommand({
            VolumeId: onTarget.VolumeId,
            Description: `Ferry failback of ${backendName}`,
            TagSpecifications: [{ ResourceType: 'snapshot', Tags: tags({ [TAG_NAME]: `failback-${backendName}`, [TAG_BACKEND]: c.host, [TAG_REPLICA_OF]: backendName, [TAG_REPLICATION]: 'failback-source', [TAG_POOL]: tagOf(onTarget, TAG_POOL) ?? '' }) }],
          }),
        ),
      );
    }
    return { done: false, waiting: `snapshot in ${from.backendId}` };
  }
  const copies = await r.snapshots(home.region, { [TAG_REPLICA_OF]: backendName, [TAG_REPLICATION]: 'failback-copy', [TAG_SOURCE_SNAPSHOT]: source.SnapshotId! });
  const copy = copies.find((s) => s.State === 'completed');
  if (!copy) {
    if (copies.length === 0) await copyHome(c, from, source, backendName);
    return { done: false, waiting: 'copy to the primary region' };
  }
  const token = clientTokenFor(c.host, `failback:${backendName}:${copy.SnapshotId}`);
  // Marked replicated as it is made (`ferry:replicated`), so the passes take it up again at once.
  const id = await r.volumeFrom(home, copy, token, { [TAG_NAME]: backendName, [TAG_BACKEND_NAME]: backendName, [TAG_POOL]: tagOf(copy, TAG_POOL) ?? '', [TAG_FAILBACK_COPY]: copy.SnapshotId!, [TAG_FAILBACK_OF]: onTarget.VolumeId!, [TAG_REPLICATED]: 'true' });
  return finish(r, c, from, backendName, homeVolumes, { VolumeId: id }, onTarget);
}

async function copyHome(c: EbsReplicationContext, from: EbsSite, source: Snapshot, backendName: string): Promise<void> {
  await c.send('CopySnapshot', { backendName, snapshotId: source.SnapshotId }, async () =>
    (await c.client(c.primary.region)).send(new (await ec2Sdk()).CopySnapshotCommand({
        SourceRegion: from.region,
        SourceSnapshotId: source.SnapshotId,
        Description: `Ferry failback of ${backendName}`,
        TagSpecifications: [
          {
            ResourceType: 'snapshot',
            Tags: tags({
              [TAG_NAME]: `failback-${backendName}`,
              [TAG_BACKEND]: c.host,
              [TAG_REPLICA_OF]: backendName,
              [TAG_REPLICATION]: 'failback-copy',
              [TAG_SOURCE_SNAPSHOT]: source.SnapshotId!,
              [TAG_SOURCE_TIME]: new Date(source.StartTime ?? Date.now()).toISOString(),
              [TAG_POOL]: tagOf(source, TAG_POOL) ?? '',
            }),
          },
        ],
      }),
    ),
  );
}

/**
 * The primary has the volume again: the stale one of the same name the region may have kept goes,
 * then the target's (not while attached: that is the operator's to detach), then the failback's
 * snapshots. Each delete tolerates "already gone", so a repeat finishes what a crash left.
 */
async function finish(r: EbsReplication, c: EbsReplicationContext, from: EbsSite, backendName: string, homeVolumes: Volume[], brought: Pick<Volume, 'VolumeId'>, onTarget: Volume | undefined): Promise<Step> {
  const attached = [...homeVolumes.filter((x) => x.VolumeId !== brought.VolumeId), ...(onTarget ? [onTarget] : [])].filter((x) => (x.Attachments ?? []).some((a) => CONNECTED_STATES.has(a.State ?? '')));
  if (attached.length > 0) return { error: `${attached.map((x) => x.VolumeId).join(', ')} still attached: detach before failing back` };
  for (const stale of homeVolumes.filter((x) => x.VolumeId !== brought.VolumeId)) await deleteVolumeIn(c, c.primary.region, stale.VolumeId!);
  if (onTarget) await deleteVolumeIn(c, from.region, onTarget.VolumeId!);
  await keepFailbackPoint(r, c, from, backendName);
  return { done: true, volumeId: brought.VolumeId! };
}

/**
 * The failback's snapshots become the replication's newest point, not deleted: its copy home a
 * `source` (the snapshot the volume home was made from) and its snapshot in the target a `copy` of
 * it (the same data, already there). So the lag in the target is the failback's age from the next
 * pass on, not the pre-failover copies' (which that pass prunes as older), and a failover there
 * right after starts from what was failed back, not from before the failover. Retagged only once
 * both are completed (they are: the volume home was made from the copy); a repeat finds none left.
 */
async function keepFailbackPoint(r: EbsReplication, c: EbsReplicationContext, from: EbsSite, backendName: string): Promise<void> {
  const homeCopies = (await r.snapshots(c.primary.region, { [TAG_REPLICA_OF]: backendName, [TAG_REPLICATION]: 'failback-copy' })).filter((s) => s.State === 'completed');
  for (const source of await r.snapshots(from.region, { [TAG_REPLICA_OF]: backendName, [TAG_REPLICATION]: 'failback-source' })) {
    const home = homeCopies.find((h) => tagOf(h, TAG_SOURCE_SNAPSHOT) === source.SnapshotId);
    if (!home || source.State !== 'completed') {
      await r.deleteSnapshot(from.region, source.SnapshotId!);
      continue;
    }
    const at = new Date(source.StartTime ?? c.now()).toISOString();
    // The target's first, so a crash between the two leaves a copy whose source is still failback-copy (the repeat retags it), never a source with no copy.
    await retag(c, from.region, source.SnapshotId!, { [TAG_REPLICATION]: 'copy', [TAG_SOURCE_SNAPSHOT]: home.SnapshotId!, [TAG_SOURCE_TIME]: at, [TAG_TARGET]: from.backendId });
    await retag(c, c.primary.region, home.SnapshotId!, { [TAG_REPLICATION]: 'source', [TAG_SOURCE_TIME]: at });
  }
  for (const s of await r.snapshots(c.primary.region, { [TAG_REPLICA_OF]: backendName, [TAG_REPLICATION]: 'failback-copy' })) await r.deleteSnapshot(c.primary.region, s.SnapshotId!);
}

async function retag(c: EbsReplicationContext, region: string, snapshotId: string, values: Record<string, string>): Promise<void> {
  await c.send('CreateTags', { region, snapshotId }, async () => (await c.client(region)).send(new (await ec2Sdk()).CreateTagsCommand({ Resources: [snapshotId], Tags: tags(values) })));
}

const tags = (o: Record<string, string>) => Object.entries(o).map(([Key, Value]) => ({ Key, Value }));

function newestVolume(volumes: Volume[]): Volume | undefined {
  return volumes.reduce<Volume | undefined>((a, x) => (!a || (x.CreateTime?.getTime() ?? 0) > (a.CreateTime?.getTime() ?? 0) ? x : a), undefined);
}
