/**
 * Drills of an aws-ebs backend (seed 001's drill, Ferry's extension): volumes made in a target
 * region from the copies that have arrived there, tagged as a drill (`ferry:drill` = the volume's
 * backend name), never the backend's volumes; ending the drill deletes them.
 *
 * A drill runs while the replication passes go on (it leaves the primary alone), so a pass may
 * prune the copy a batch recorded (once a newer one has arrived) between a crashed run of that
 * batch and its re-run. The re-run then chooses again (chooseAgain) instead of failing, and the end
 * of a drill finds its volumes by their tag as well as by what the batches recorded, so a drill
 * volume whose record a crash lost is deleted all the same.
 */
import type { Snapshot } from '@aws-sdk/client-ec2';
import { DriverError } from '../../core/errors.js';
import type { DrillCopy, RecordReplicaChoices, ReplicatedVolumeRef } from './driver.js';
import { SNAPSHOT_NOT_FOUND_CODES, TAG_DRILL, TAG_NAME, clientTokenFor, tagOf } from './aws-ebs-ec2.js';
import { MAX_FILTER_VALUES, TAG_REPLICATION, newest, type EbsReplication, type EbsReplicationContext, type EbsSite } from './aws-ebs-replication.js';

/** How many times a drill chooses a volume's copy again when the one chosen was pruned meanwhile, before it gives up. */
const MAX_DRILL_RECHOICES = 3;

/**
 * A drill volume per volume from its newest arrived copy, the copies chosen recorded first (as
 * failOver's). A recorded copy that is gone with no volume made under its token is chosen again:
 * the newest copy there now, recorded in place of the gone one (recordReplicas' `replacing`, so
 * two runs agree on one), then made under that choice's token. A volume the crashed run made is
 * answered by EC2 under the first token even once its copy is gone, so nothing is made twice.
 */
export async function startDrill(r: EbsReplication, c: EbsReplicationContext, volumes: ReplicatedVolumeRef[], targetId: string, recordReplicas?: RecordReplicaChoices): Promise<DrillCopy[]> {
  const t = r.target(targetId);
  const copies = new Map<string, Snapshot[]>();
  for (const v of volumes) copies.set(v.backendName, await r.completedCopies(t.region, v.backendName));
  const chosen = await r.chosenCopies(volumes, copies, recordReplicas);
  const out: DrillCopy[] = [];
  for (const v of volumes) {
    let { copy, choice } = chosen.get(v.volumeId) ?? {};
    let location: string | undefined;
    for (let attempt = 0; !location; attempt++) {
      if (!copy || !choice) throw c.fail(`no replica of ${v.backendName} has arrived in ${t.backendId} yet: nothing to drill on`, { backendName: v.backendName, target: t.backendId });
      if (attempt > MAX_DRILL_RECHOICES) throw c.fail(`the copies of ${v.backendName} in ${t.backendId} were pruned ${MAX_DRILL_RECHOICES} times while a drill chose them`, { backendName: v.backendName, target: t.backendId });
      const token = clientTokenFor(c.host, `drill:${t.backendId}:${v.backendName}:${choice}`);
      location = await r.volumeFrom(t, copy, token, { [TAG_NAME]: `drill-${v.backendName}`, [TAG_DRILL]: v.backendName, [TAG_REPLICATION]: 'drill' }).catch((e: unknown) => {
        // The copy chosen is gone and no volume was made from it under this token.
        if (e instanceof DriverError && SNAPSHOT_NOT_FOUND_CODES.has(String(e.context.code))) return undefined;
        throw e;
      });
      if (!location) ({ copy, choice } = await chooseAgain(r, c, t, v, choice, recordReplicas));
    }
    out.push({ volumeId: v.volumeId, backendName: v.backendName, targetBackendId: t.backendId, location });
  }
  return out;
}

/** A volume's copy in place of `gone` (pruned): the newest completed one there now, recorded where the record still names `gone`; what is recorded answers. */
async function chooseAgain(r: EbsReplication, c: EbsReplicationContext, t: EbsSite, v: ReplicatedVolumeRef, gone: string, recordReplicas?: RecordReplicaChoices): Promise<{ copy?: Snapshot; choice?: string }> {
  const goneId = gone.split('@')[0];
  const copies = (await r.completedCopies(t.region, v.backendName)).filter((s) => s.SnapshotId !== goneId);
  const copy = newest(copies);
  if (!copy) return {};
  const fresh = recordReplicas ? `${copy.SnapshotId}@${new Date(c.now()).toISOString()}` : copy.SnapshotId!;
  const choice = recordReplicas ? (await recordReplicas({ [v.volumeId]: fresh }, { [v.volumeId]: gone }))[v.volumeId] : fresh;
  if (!choice) return {};
  const id = choice.split('@')[0];
  return { copy: copies.find((s) => s.SnapshotId === id) ?? { SnapshotId: id, VolumeSize: v.sizeGb }, choice };
}

/**
 * Deletes a drill's volumes: those recorded (`location`), then every drill volume of the same
 * volumes the target lists (`ferry:drill`), which takes in one a run made whose reply or record was
 * lost (a crash between its CreateVolume and the batch's record of it; `location` '' when the
 * batch recorded only its choices). One drill runs per backend at a time, so each is this drill's.
 * Idempotent: a volume already gone is done.
 */
export async function endDrill(r: EbsReplication, c: EbsReplicationContext, copies: DrillCopy[]): Promise<void> {
  await r.deleteTargetVolumes(copies.filter((x) => x.location), 'drill copy');
  const deleted = new Set(copies.map((x) => x.location));
  for (const targetId of new Set(copies.map((x) => x.targetBackendId))) {
    const t = r.target(targetId);
    const names = [...new Set(copies.filter((x) => x.targetBackendId === targetId).map((x) => x.backendName))];
    for (let i = 0; i < names.length; i += MAX_FILTER_VALUES) {
      const found = await c.volumes(t.region, [{ Name: `tag:${TAG_DRILL}`, Values: names.slice(i, i + MAX_FILTER_VALUES) }]);
      const left = found.filter((v) => !deleted.has(v.VolumeId!)).map((v) => ({ volumeId: '', backendName: tagOf(v, TAG_DRILL)!, targetBackendId: targetId, location: v.VolumeId! }));
      await r.deleteTargetVolumes(left, 'drill copy');
    }
  }
}
