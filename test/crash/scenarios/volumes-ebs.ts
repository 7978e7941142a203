/**
 * The crash scenario of the volume-failover machine on an aws-ebs backend (issue 14): a local stack
 * whose inventory adds an aws-ebs backend in eu-west-1a replicating to Frankfurt (eu-central-1a),
 * every EC2 client answered by one fake per region (test/support/fake-ec2.ts). The fakes live in
 * the test process, outside the stack: a crash and restart of Ferry leaves them as they were, as
 * a restart of Ferry leaves EC2 as it is. So the promise checked at every point is the region's:
 * each replicated volume has exactly one volume in Frankfurt (counted in the fake, not in calls:
 * CreateVolume is idempotent by ClientToken), its record points at that volume, `available` /
 * `failed-over`, and the audit is clean. While the failover runs, Frankfurt's DescribeVolumes by
 * tag does not list the volumes it made (EC2's eventual consistency, longest right after a create):
 * so a batch re-run after a crash does not find the volume its first run made and sends CreateVolume
 * again, and only the ClientToken keeps it from making a second one. A copy in flight when the
 * failover starts arrives during it (copiesInFlight), so that token must come from the copy the
 * batch recorded, not from the newest one the re-run sees.
 */
import { getVolume } from '../../../functions/volumes/repo.js';
import type { CrashOutcome, CrashScenario } from '../../support/crash.js';
import { startReplicatedEbsStack, type EbsStack } from '../../support/ebs-stack.js';
import type { FakeEc2 } from '../../support/fake-ec2.js';
import { eventually } from '../../support/poll.js';
import { replicationPass } from '../../support/replication-pass.js';
import { replicatedService } from './failover-service.js';
import type { TestLocalStack } from '../../support/stack.js';

export const EBS_CRASH_HOST = 'ferry@ebs-crash';
const TYPE = 'ebs-crash-replicated';
/** Runs of the replication schedule that take a new volume to an arrived copy: snapshot, (pending), copy, (pending), arrived. */
const PASSES_TO_A_COPY = 5;

let ebs: EbsStack | undefined;
/** Set while a failover runs: Frankfurt's DescribeVolumes by filter leaves out the volumes made since. */
let unlistedSince: Date | undefined;

/** The stack of the EBS crash file: started once per file; its fakes outlive every restart. */
export async function startEbsCrashStack(): Promise<TestLocalStack> {
  ebs = await startReplicatedEbsStack({ host: EBS_CRASH_HOST, volumeBackendName: 'ebs-crash', typeName: TYPE, ebsVolumeType: 'gp3' });
  const frankfurt = fakeOf('eu-central-1');
  const describe = frankfurt.describeVolumes.bind(frankfurt);
  frankfurt.describeVolumes = (input) => {
    const out = describe(input);
    if (!input.Filters || !unlistedSince) return out;
    return { ...out, Volumes: out.Volumes.filter((v) => !(v.CreateTime && v.CreateTime >= unlistedSince!)) };
  };
  return ebs.stack;
}

const fakeOf = (region: string): FakeEc2 => {
  const fake = ebs?.fakes.get(region);
  if (!fake) throw new Error('startEbsCrashStack() first: no fake EC2 for ' + region);
  return fake;
};

/** The volumes the Frankfurt fake holds under a record's backend name (a drill's copies aside). */
const inFrankfurt = (volumeId: string) =>
  [...fakeOf('eu-central-1').volumes.values()].filter((v) => v.Tags?.some((t) => t.Key === 'ferry:backend-name' && t.Value === `volume-${volumeId}`) && !v.Tags?.some((t) => t.Key === 'ferry:drill'));

/**
 * A copy of each volume that started before the failover and is still pending in Frankfurt, its
 * source taken later than the arrived one's: the fake completes it once it is described, so the
 * batch's first run sees it pending and a re-run after a crash sees a newer arrived copy. Only the
 * copy the first run recorded keeps the re-run's ClientToken the first run's.
 */
function copiesInFlight(ids: string[]): void {
  const frankfurt = fakeOf('eu-central-1');
  for (const id of ids) {
    const arrived = [...frankfurt.snapshots.values()].find((s) => s.State === 'completed' && s.Tags?.some((t) => t.Key === 'ferry:replica-of' && t.Value === `volume-${id}`));
    if (!arrived) throw new Error(`no copy of volume ${id} has arrived in Frankfurt`);
    const Tags = arrived.Tags!.map((t) => (t.Key === 'ferry:source-time' ? { ...t, Value: new Date().toISOString() } : t));
    frankfurt.snapshots.set(`${arrived.SnapshotId}-in-flight`, { ...arrived, SnapshotId: `${arrived.SnapshotId}-in-flight`, State: 'pending', Tags });
  }
}

export function ebsFailoverScenarios(): CrashScenario<any>[] {
  const api = (method: string, path: string, body?: unknown) => ebs!.api(method, path, body);
  const { service, failoverTo, homeFirst } = replicatedService(api, EBS_CRASH_HOST);

  const ebsFailover: CrashScenario<{ ids: string[] }> = {
    name: 'volume-failover (aws-ebs)',
    timeoutMs: 180_000,
    async setup() {
      // Home first (the last point's volumes were deleted in its cleanup, so the failback has none to bring).
      await homeFirst();
      const ids: string[] = [];
      for (let i = 0; i < 2; i++) {
        const res = await api('POST', '/volumes', { volume: { size: 1, volume_type: TYPE, availability_zone: 'eu-west-1a' } });
        if (res.status !== 202) throw new Error(`POST /volumes: ${res.status} ${JSON.stringify(res.body)}`);
        ids.push(res.body.volume.id);
      }
      for (const id of ids) await eventually(async () => ((await getVolume(id))?.status === 'available' ? true : undefined), `EBS volume ${id}`);
      for (let i = 0; i < PASSES_TO_A_COPY; i++) await replicationPass(EBS_CRASH_HOST);
      return { ids };
    },
    async start(f) {
      unlistedSince = new Date();
      copiesInFlight(f.ids);
      const res = await failoverTo('frankfurt');
      if (res.status !== 202) throw new Error(`failover: ${res.status} ${JSON.stringify(res.body)}`);
    },
    async outcome(f): Promise<CrashOutcome | undefined> {
      const s = await service();
      // A crash is no reason for a failover to fail: failover-error (the machine's Fail) breaks the promise.
      if (s.replication_status === 'failover-error') throw new Error(`the failover ended failover-error after the crash: ${JSON.stringify(s)}`);
      if (s.replication_status !== 'failed-over' || s.active_backend_id !== 'frankfurt') return undefined;
      // Finished only when every record is whole: failed-over, available, pointing at its one volume there.
      for (const id of f.ids) {
        const v = await getVolume(id);
        const there = inFrankfurt(id);
        if (v?.replicationStatus !== 'failed-over' || v.status !== 'available' || there.length !== 1 || v.providerLocation !== there[0]!.VolumeId) {
          throw new Error(`failed over, but volume ${id} is ${JSON.stringify({ status: v?.status, replicationStatus: v?.replicationStatus, providerLocation: v?.providerLocation })} with ${there.length} volume(s) in Frankfurt (${there.map((t) => t.VolumeId).join(', ')})`);
        }
      }
      // Ended: EC2's listings have caught up by the time the audit reads them.
      unlistedSince = undefined;
      return 'finished';
    },
    async effects(f) {
      return Object.fromEntries(f.ids.map((id) => [`volumes in Frankfurt of volume ${id}`, inFrankfurt(id).length]));
    },
    async cleanup(f) {
      // Deleted on the target, so the next point's failback has nothing to carry home.
      for (const id of f.ids) {
        const res = await api('DELETE', `/volumes/${id}`);
        if (res.status !== 202) throw new Error(`DELETE /volumes/${id}: ${res.status} ${JSON.stringify(res.body)}`);
      }
      for (const id of f.ids) await eventually(async () => ((await getVolume(id)) === undefined ? true : undefined), `volume ${id} deleted`, 60_000);
    },
  };

  return [ebsFailover];
}
