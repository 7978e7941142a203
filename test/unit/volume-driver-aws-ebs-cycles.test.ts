/**
 * aws-ebs replication after a failback (aws-ebs-replication.ts, aws-ebs-failback.ts), on three
 * mocked regions (test/support/ebs-regions.ts): the lag measured from the failback, failovers again
 * (a new volume, never the first one's or a stale one of the same name), and a second whole cycle
 * bringing the second failover's volume home.
 */
import { describe, expect, it } from 'vitest';
import { BackendNotReady } from '../../functions/core/errors.js';
import { useEbsReplication } from '../support/ebs-regions.js';

const h = useEbsReplication('ferry@ebs-r');
const { driverOn, fake, kinds, ref, replicated, pass } = h;

describe('failover and failback again', () => {
  it('a second failover and failback bring the second failover\'s volume home: the volume the first failback brought is not taken for it, and goes', async () => {
    const failBack = async (location: string) => {
      for (let i = 0; i < 6; i++) {
        const done = await driverOn('frankfurt').failoverHost([{ ...ref('volume-1'), location }], 'default').catch((e: unknown) => {
          expect(e).toBeInstanceOf(BackendNotReady);
          return undefined;
        });
        if (done) return done.volumeUpdates[0]!.updates.providerLocation as string;
      }
      throw new Error('the failback did not end');
    };
    // Prepare: one whole cycle (failover, failback), replicated again, failed over again.
    await replicated('volume-1', 5);
    const firstOut = (await driverOn().failoverHost([ref('volume-1')], 'frankfurt')).volumeUpdates[0]!.updates.providerLocation as string;
    const firstHome = await failBack(firstOut);
    for (let i = 0; i < 3; i++) await pass(driverOn());
    const secondOut = (await driverOn().failoverHost([ref('volume-1')], 'frankfurt')).volumeUpdates[0]!.updates.providerLocation as string;

    // Act
    const secondHome = await failBack(secondOut);

    // Assess: home holds one volume, new, made from a failback copy of a snapshot of the second failover's volume.
    expect(secondHome).not.toBe(firstHome);
    expect([...fake('eu-west-1').volumes.keys()]).toEqual([secondHome]);
    const homeCopy = fake('eu-west-1').snapshots.get(fake('eu-west-1').volumes.get(secondHome)!.SnapshotId!)!;
    const source = fake('eu-central-1').snapshots.get(homeCopy.Tags!.find((t) => t.Key === 'ferry:source-snapshot')!.Value!)!;
    expect(source.VolumeId).toBe(secondOut);
    expect(fake('eu-central-1').volumes.size).toBe(0);
  });

  it('after a failback the lag in the target is the failback\'s age from the next pass on, not the pre-failover copies\', and a failover right after starts from what was failed back', async () => {
    // Prepare: failed over for two hours (the volume written there), then back home.
    await replicated('volume-1', 5);
    await driverOn().failoverHost([ref('volume-1')], 'frankfurt');
    h.clock += 2 * 3_600_000;
    const failbackAt = h.clock;
    for (let i = 0; i < 5; i++) if (await driverOn('frankfurt').failoverHost([ref('volume-1')], 'default').catch(() => undefined)) break;
    expect(fake('eu-central-1').volumes.size).toBe(0);

    // Act: the next pass
    const report = await pass(driverOn());

    // Assess: the lag is the failback snapshot's age (one pass, a minute), in the pass's tally and per volume
    const frankfurtLag = report.lag!.targets.find((t) => t.targetBackendId === 'frankfurt')!;
    expect(frankfurtLag).toEqual({ targetBackendId: 'frankfurt', volumes: 1, replicated: 1, maxLagMs: h.clock - failbackAt });
    expect((await driverOn().replicationStatus('volume-1')).find((t) => t.targetBackendId === 'frankfurt')).toEqual({ targetBackendId: 'frankfurt', lastSyncAt: failbackAt, lagMs: h.clock - failbackAt });
    expect(kinds('eu-central-1').filter((k) => k === 'copy:completed')).toHaveLength(1);
    const kept = [...fake('eu-central-1').snapshots.values()].find((c) => c.Tags?.some((t) => t.Key === 'ferry:replication' && t.Value === 'copy'))!;
    const again = await driverOn().failoverHost([ref('volume-1')], 'frankfurt');
    expect(fake('eu-central-1').volumes.get(again.volumeUpdates[0]!.updates.providerLocation!)?.SnapshotId).toBe(kept.SnapshotId);
    expect(new Date(kept.StartTime!).getTime()).toBe(failbackAt);
  });

  it('fails over again after a failback: the second failover makes a new volume from the newer copy (its ClientToken is not the first one\'s)', async () => {
    // Prepare: failed over, back home, and replicated again until a newer copy has arrived.
    await replicated('volume-1', 5);
    const first = await driverOn().failoverHost([ref('volume-1')], 'frankfurt');
    const there = driverOn('frankfurt');
    for (let i = 0; i < 5; i++) if (await there.failoverHost([ref('volume-1')], 'default').catch(() => undefined)) break;
    expect(fake('eu-central-1').volumes.size).toBe(0);
    for (let i = 0; i < 5; i++) await pass(driverOn());

    // Act: EC2 answers a reused token with what the first request made, or IdempotentParameterMismatch when the request differs.
    const second = await driverOn().failoverHost([ref('volume-1')], 'frankfurt');

    // Assess
    const [made] = [...fake('eu-central-1').volumes.values()];
    expect(made).toBeDefined();
    expect(second.volumeUpdates).toEqual([{ volumeId: 'id-volume-1', updates: { replicationStatus: 'failed-over', providerLocation: made!.VolumeId } }]);
    expect(made!.VolumeId).not.toBe(first.volumeUpdates[0]!.updates.providerLocation);
  });

  it('fails over again with a stale target volume of the same name left (a failback whose delete failed): a new volume from the newest copy, the stale one never taken up', async () => {
    // Prepare: failed over and back home; the first failover's target volume stays behind, as a
    // delete that failed would leave it; then passes until a newer copy has arrived.
    await replicated('volume-1', 5);
    const first = await driverOn().failoverHost([ref('volume-1')], 'frankfurt');
    const staleId = first.volumeUpdates[0]!.updates.providerLocation as string;
    const stale = { ...fake('eu-central-1').volumes.get(staleId)! };
    const there = driverOn('frankfurt');
    for (let i = 0; i < 5; i++) if (await there.failoverHost([ref('volume-1')], 'default').catch(() => undefined)) break;
    fake('eu-central-1').volumes.set(staleId, { ...stale, State: 'available', Attachments: [] });
    for (let i = 0; i < 5; i++) await pass(driverOn());

    // Act
    const second = await driverOn().failoverHost([ref('volume-1')], 'frankfurt');

    // Assess: the volume failed over to is a new one, made from a newer copy than the stale one's.
    const made = second.volumeUpdates[0]!.updates.providerLocation as string;
    expect(second.volumeUpdates[0]!.updates.replicationStatus).toBe('failed-over');
    expect(made).not.toBe(staleId);
    expect(fake('eu-central-1').volumes.get(made)!.SnapshotId).not.toBe(stale.SnapshotId);
  });

  it('fails over again right after a failback, before a newer copy arrived: a new volume from the same copy, not the first failover\'s deleted one', async () => {
    // Prepare: failed over and back home, with no pass since (the copy in Frankfurt is the one the first failover used).
    await replicated('volume-1', 5);
    const recorder = () => {
      let recorded: Record<string, string | null> | undefined;
      return async (chosen: Record<string, string | null>) => (recorded ??= chosen);
    };
    const first = await driverOn().failoverHost([ref('volume-1')], 'frankfurt', recorder());
    for (let i = 0; i < 5; i++) if (await driverOn('frankfurt').failoverHost([ref('volume-1')], 'default').catch(() => undefined)) break;
    expect(fake('eu-central-1').volumes.size).toBe(0);
    h.clock += 60_000;

    // Act: a new operation, so a new record
    const second = await driverOn().failoverHost([ref('volume-1')], 'frankfurt', recorder());

    // Assess
    const [made] = [...fake('eu-central-1').volumes.values()];
    expect(made?.VolumeId).toBeDefined();
    expect(made!.VolumeId).not.toBe(first.volumeUpdates[0]!.updates.providerLocation);
    expect(second.volumeUpdates).toEqual([{ volumeId: 'id-volume-1', updates: { replicationStatus: 'failed-over', providerLocation: made!.VolumeId } }]);
  });
});
