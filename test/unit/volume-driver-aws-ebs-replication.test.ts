/**
 * Replication v2.1 on EBS (aws-ebs-replication.ts, aws-ebs-failback.ts) against three mocked
 * regions (test/support/fake-ec2.ts: snapshots pending until looked at once, CopySnapshot only of a
 * completed source, CreateVolume from a snapshot, ClientToken answered with the volume it made):
 * passes that snapshot, copy and prune; the lag; failover with the primary region not answering;
 * failback; drills; disable. Throttling and a replication that falls behind are cases of the
 * shared replication contract (test/contracts/replication-driver.ts), which this driver runs too.
 */
import { CreateVolumeCommand } from '@aws-sdk/client-ec2';
import { beforeEach, describe, expect, it } from 'vitest';
import { BackendNotReady, ConfigurationError } from '../../functions/core/errors.js';
import { AwsEbsVolumeDriver } from '../../functions/drivers/volume/aws-ebs.js';
import { InvalidReplicationTarget } from '../../functions/drivers/volume/driver.js';
import { awsError, replicatedEbsBackend } from '../support/fake-ec2.js';
import { EBS_REGIONS, useEbsReplication } from '../support/ebs-regions.js';

const HOST = 'ferry@ebs-r';
const config = replicatedEbsBackend(HOST);
const h = useEbsReplication(HOST);
const { clients, mocks, driverOn, fake, kinds, ref, replicated, pass } = h;

describe('configuration and capabilities', () => {
  it('reports its targets as pools\' replication capabilities; a target in its own region is refused', async () => {
    const pools = await driverOn().capabilities();
    expect(pools[0]).toMatchObject({ replicationEnabled: true, replicationTargets: ['frankfurt', 'virginia'], replicationCount: 2, replicationType: ['async'] });

    const sameRegion = { ...config, replicationDevices: [{ backend_id: 'near', availability_zone: 'eu-west-1b' }] };
    expect(() => new AwsEbsVolumeDriver(sameRegion, { clientFor: (r) => clients.get(r)! })).toThrow(ConfigurationError);
    expect(() => driverOn('nowhere')).toThrow(/not one of its replication_devices/);
  });
});

describe('replication passes', () => {
  it('snapshot, then copies to each target, then the lag is the age of the newest arrived copy; older ones are pruned', async () => {
    // EC2 (the fake) reports a new snapshot pending the first time it is looked at, completed after.
    const driver = await replicated('volume-1', 1);
    expect(kinds('eu-west-1')).toEqual(['source:pending']);

    await pass(driver); // sees it pending: nothing else to do yet
    await pass(driver); // completed: a copy to each target starts, and the next snapshot
    expect(kinds('eu-central-1')).toEqual(['copy:pending']);
    await pass(driver);
    await pass(driver); // the copies have arrived
    const status = await driver.replicationStatus('volume-1');
    expect(status.map((s) => s.targetBackendId)).toEqual(['frankfurt', 'virginia']);
    for (const s of status) {
      expect(s.lastSyncAt).toBe(Date.parse('2026-11-25T00:01:00Z'));
      expect(s.lagMs).toBe(h.clock - s.lastSyncAt!);
    }

    for (let i = 0; i < 4; i++) await pass(driver);
    // One arrived copy per target (plus at most one in flight); the primary keeps only sources newer than what arrived everywhere.
    for (const r of ['eu-central-1', 'us-east-1']) expect(kinds(r).filter((k) => k === 'copy:completed')).toHaveLength(1);
    expect(kinds('eu-west-1').length).toBeLessThanOrEqual(3);
    const [newer] = await driver.replicationStatus('volume-1');
    expect(newer!.lastSyncAt).toBeGreaterThan(Date.parse('2026-11-25T00:01:00Z'));
  });

  it('disable removes the tag and every replica in every region', async () => {
    const driver = await replicated('volume-1', 3);
    await driver.disableReplication('volume-1');
    for (const r of EBS_REGIONS) expect(fake(r).snapshots.size).toBe(0);
    expect((await pass(driver)).volumes).toBe(0);
  });
});

describe('failover, failback and drills', () => {
  it('fails over with the primary region gone: a volume per arrived copy in the target, once; one without a copy goes to error', async () => {
    await replicated('volume-1', 5);
    await driverOn().createVolume({ backendName: 'volume-2', sizeGb: 1, pool: 'gp' });
    mocks.get('eu-west-1')!.reset();
    mocks.get('eu-west-1')!.onAnyCommand().rejects(awsError('RequestTimeout', 'the region does not answer'));

    // The choices recorded as the batch records them; the run again carries them, as a re-run's refs do.
    const recorded: Record<string, string | null> = {};
    const record = async (chosen: Record<string, string | null>) => Object.assign(recorded, chosen);
    const first = await driverOn().failoverHost([ref('volume-1'), ref('volume-2')], 'frankfurt', record);
    const again = await driverOn().failoverHost([{ ...ref('volume-1'), replica: recorded['id-volume-1'] ?? null }], 'frankfurt', record);

    const [made] = [...fake('eu-central-1').volumes.values()];
    expect(first).toEqual({
      activeBackendId: 'frankfurt',
      volumeUpdates: [
        { volumeId: 'id-volume-1', updates: { replicationStatus: 'failed-over', providerLocation: made!.VolumeId } },
        { volumeId: 'id-volume-2', updates: { status: 'error' } },
      ],
    });
    expect(again.volumeUpdates).toEqual([first.volumeUpdates[0]]);
    expect(fake('eu-central-1').volumes.size).toBe(1);
    expect(mocks.get('eu-central-1')!.commandCalls(CreateVolumeCommand)).toHaveLength(1);
    // The driver of the failed-over backend works in Frankfurt and finds it under its name.
    const there = driverOn('frankfurt');
    expect(await there.getVolume('volume-1')).toEqual({ backendName: 'volume-1', sizeGb: 1 });
    fake('eu-central-1').devices.set('i-fra', ['/dev/sda1']);
    expect((await there.initializeConnection('volume-1', { host: 'i-fra' })).data).toMatchObject({ volume_id: made!.VolumeId, instance_id: 'i-fra' });
    expect((await there.syncNow(0)).skipped).toBe('failed over to frankfurt');
    await expect(there.failoverHost([ref('volume-1')], 'virginia')).rejects.toBeInstanceOf(InvalidReplicationTarget);
  });

  it('fails back: snapshot in the target, copy home, a volume there; the stale and the target volume go; a repeat changes nothing', async () => {
    await replicated('volume-1', 5);
    await driverOn().failoverHost([ref('volume-1')], 'frankfurt');
    const there = driverOn('frankfurt');
    const stale = [...fake('eu-west-1').volumes.keys()];

    const tries: string[] = [];
    let result;
    for (let i = 0; i < 5 && !result; i++) {
      result = await there.failoverHost([ref('volume-1')], 'default').catch((e: unknown) => {
        expect(e).toBeInstanceOf(BackendNotReady);
        tries.push((e as Error).message);
        return undefined;
      });
    }

    expect(tries.length).toBeGreaterThanOrEqual(2);
    const home = [...fake('eu-west-1').volumes.values()];
    expect(home).toHaveLength(1);
    expect(stale).not.toContain(home[0]!.VolumeId);
    expect(result).toEqual({ activeBackendId: '', volumeUpdates: [{ volumeId: 'id-volume-1', updates: { replicationStatus: 'enabled', providerLocation: home[0]!.VolumeId } }] });
    expect(fake('eu-central-1').volumes.size).toBe(0);
    expect(kinds('eu-west-1').filter((k) => k.startsWith('failback'))).toEqual([]);
    expect(await there.failoverHost([ref('volume-1')], 'default')).toEqual(result);
    expect(await driverOn().getVolume('volume-1')).toEqual({ backendName: 'volume-1', sizeGb: 1 });
    await expect(driverOn().failoverHost([ref('volume-1')], 'default')).rejects.toBeInstanceOf(InvalidReplicationTarget);
  });

  describe('a batch run again after a lost CreateVolume reply, while a newer copy has arrived and Frankfurt does not list the first volume yet', () => {
    /** The copy of volume-1 in Frankfurt as a copy that started before the failover and arrives during it: its source taken later. */
    const newerCopyArrives = () => {
      const [arrived] = [...fake('eu-central-1').snapshots.values()].filter((s) => s.State === 'completed');
      const later = new Date(h.clock + 1_000).toISOString();
      const tags = arrived!.Tags!.map((t) => (t.Key === 'ferry:source-time' ? { ...t, Value: later } : t));
      fake('eu-central-1').snapshots.set('snap-newer', { ...arrived!, SnapshotId: 'snap-newer', Tags: tags });
    };
    /** CreateVolume makes the volume, a newer copy arrives, and the reply is lost; DescribeVolumes by tag lists no volume made from now on. */
    const loseFirstReply = () => {
      const frankfurt = fake('eu-central-1');
      const create = frankfurt.createVolume.bind(frankfurt);
      const describe = frankfurt.describeVolumes.bind(frankfurt);
      frankfurt.describeVolumes = (input) => ({ ...describe(input), ...(input.Filters ? { Volumes: [] } : {}) });
      let lost = false;
      frankfurt.createVolume = (input) => {
        const made = create(input);
        if (lost) return made;
        lost = true;
        newerCopyArrives();
        throw awsError('RequestTimeout', 'the reply was lost');
      };
    };
    const volumesOf = (name: string) => [...fake('eu-central-1').volumes.values()].filter((v) => v.Tags?.some((t) => t.Value === name));
    let recorded: Record<string, string | null> | undefined;
    const record = async (chosen: Record<string, string | null>) => (recorded ??= chosen);
    beforeEach(() => {
      recorded = undefined;
    });

    it('failover starts from the copy its first run recorded: the same ClientToken, one volume', async () => {
      // Prepare
      await replicated('volume-1', 5);
      loseFirstReply();
      await expect(driverOn().failoverHost([ref('volume-1')], 'frankfurt', record)).rejects.toThrow(/RequestTimeout/);
      const chosen = recorded!['id-volume-1'];
      expect(chosen).toMatch(/^snap-eu-central-1a-\d+@2026-/);

      // Act: the re-run, with the batch's record
      const again = await driverOn().failoverHost([{ ...ref('volume-1'), replica: chosen }], 'frankfurt', record);

      // Assess
      const made = volumesOf('volume-1');
      expect(made.map((v) => v.SnapshotId)).toEqual([chosen!.split('@')[0]]);
      expect(again.volumeUpdates).toEqual([{ volumeId: 'id-volume-1', updates: { replicationStatus: 'failed-over', providerLocation: made[0]!.VolumeId } }]);
    });

    it('a drill does the same: one drill copy, from the copy recorded', async () => {
      await replicated('volume-1', 5);
      loseFirstReply();
      await expect(driverOn().startDrill([ref('volume-1')], 'frankfurt', record)).rejects.toThrow(/RequestTimeout/);

      const copies = await driverOn().startDrill([{ ...ref('volume-1'), replica: recorded!['id-volume-1'] }], 'frankfurt', record);

      expect(volumesOf('volume-1').map((v) => v.VolumeId)).toEqual([copies[0]!.location]);
      expect(volumesOf('volume-1')[0]!.SnapshotId).toBe(recorded!['id-volume-1']!.split('@')[0]);
    });

    it('a recorded copy that is gone, with no volume made from it, leaves that volume in error and makes nothing; a recorded none is none', async () => {
      await replicated('volume-1', 5);
      await replicated('volume-2', 5);

      const result = await driverOn().failoverHost([{ ...ref('volume-1'), replica: 'snap-gone' }, { ...ref('volume-2'), replica: null }], 'frankfurt', record);

      expect(result.volumeUpdates.map((u) => u.updates)).toEqual([{ status: 'error' }, { status: 'error' }]);
      expect(fake('eu-central-1').volumes.size).toBe(0);
      expect(recorded).toBeUndefined();
    });
  });

  it('a drill makes copies in the target that are never the backend\'s volumes, and its end removes them', async () => {
    await replicated('volume-1', 5);
    const driver = driverOn();
    const copies = await driver.startDrill([ref('volume-1')], 'virginia');

    expect(copies).toEqual([{ volumeId: 'id-volume-1', backendName: 'volume-1', targetBackendId: 'virginia', location: expect.stringMatching(/^vol-/) }]);
    expect(fake('us-east-1').volumes.get(copies[0]!.location)?.Tags).toEqual(expect.arrayContaining([{ Key: 'ferry:drill', Value: 'volume-1' }]));
    expect(await driverOn('virginia').listVolumes()).toEqual([]);
    await driver.endDrill(copies);
    await driver.endDrill(copies);
    expect(fake('us-east-1').volumes.size).toBe(0);
    await expect(driver.startDrill([ref('volume-2')], 'virginia')).rejects.toThrow(/no replica of volume-2 has arrived in virginia/);
  });

  describe('a drill batch that crashed after its first drill volume, its recorded copies pruned by a pass before the re-run', () => {
    /** The batch's record of its choices, as repo.ts recordReplicaChoices keeps it (a replacement only where the gone choice is still recorded). */
    let recorded: Record<string, string | null> | undefined;
    const record = async (chosen: Record<string, string | null>, replacing?: Record<string, string | null>) => {
      if (!replacing) return (recorded ??= { ...chosen });
      for (const [volumeId, gone] of Object.entries(replacing)) if (recorded![volumeId] === gone) recorded![volumeId] = chosen[volumeId]!;
      return { ...recorded! };
    };
    const drillVolumes = () => [...fake('eu-central-1').volumes.values()].filter((v) => v.Tags?.some((t) => t.Key === 'ferry:drill'));
    const drillOf = (name: string) => drillVolumes().filter((v) => v.Tags?.some((t) => t.Key === 'ferry:drill' && t.Value === name));
    /** The first run: volume-1's drill volume made, then the crash before volume-2's CreateVolume; then passes until newer copies arrived and the recorded ones are pruned. */
    async function crashThenPrune(): Promise<string> {
      await replicated('volume-1', 5);
      await replicated('volume-2', 5);
      recorded = undefined;
      const frankfurt = fake('eu-central-1');
      const create = frankfurt.createVolume.bind(frankfurt);
      let calls = 0;
      frankfurt.createVolume = (input) => {
        if (++calls === 2) throw awsError('RequestTimeout', 'the Lambda running the batch was stopped');
        return create(input);
      };
      await expect(driverOn().startDrill([ref('volume-1'), ref('volume-2')], 'frankfurt', record)).rejects.toThrow(/RequestTimeout/);
      frankfurt.createVolume = create;
      const [first] = drillOf('volume-1');
      for (let i = 0; i < 5; i++) await pass(driverOn());
      for (const choice of Object.values(recorded!)) expect(frankfurt.snapshots.has(choice!.split('@')[0]!)).toBe(false);
      return first!.VolumeId!;
    }

    it('the re-run keeps the volume its first run made, chooses the newest copy again for the other, recorded in place of the gone one: one drill volume each', async () => {
      // Prepare
      const first = await crashThenPrune();
      const before = { ...recorded! };

      // Act: the re-run, with the batch's record
      const copies = await driverOn().startDrill(['volume-1', 'volume-2'].map((n) => ({ ...ref(n), replica: before[`id-${n}`] })), 'frankfurt', record);

      // Assess
      expect(drillOf('volume-1').map((v) => v.VolumeId)).toEqual([first]);
      expect(drillOf('volume-2')).toHaveLength(1);
      expect(copies.map((c) => c.location)).toEqual([first, drillOf('volume-2')[0]!.VolumeId]);
      expect(recorded!['id-volume-1']).toBe(before['id-volume-1']);
      expect(recorded!['id-volume-2']).not.toBe(before['id-volume-2']);
      expect(drillOf('volume-2')[0]!.SnapshotId).toBe(recorded!['id-volume-2']!.split('@')[0]);
      expect(fake('eu-central-1').snapshots.get(drillOf('volume-2')[0]!.SnapshotId!)?.State).toBe('completed');
    });

    it('ending the drill with only its choices recorded (no re-run) deletes the volume its first run made', async () => {
      await crashThenPrune();

      await driverOn().endDrill(['volume-1', 'volume-2'].map((n) => ({ volumeId: `id-${n}`, backendName: n, targetBackendId: 'frankfurt', location: '' })));

      expect(drillVolumes()).toEqual([]);
    });
  });

  it('discarding failed-over replicas deletes each (already gone: done); one refused leaves the others deleted and is named in the error', async () => {
    for (const name of ['volume-1', 'volume-2', 'volume-3']) await replicated(name, 5);
    const refs = ['volume-1', 'volume-2', 'volume-3'].map(ref);
    const made = (await driverOn().failoverHost(refs, 'frankfurt')).volumeUpdates.map((u, i) => ({ ...refs[i]!, targetBackendId: 'frankfurt', location: u.updates.providerLocation! }));
    const frankfurt = fake('eu-central-1');
    const realDelete = frankfurt.deleteVolume;
    frankfurt.deleteVolume = (input) => {
      if (input.VolumeId === made[1]!.location) throw awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.');
      return realDelete.call(frankfurt, input);
    };
    realDelete.call(frankfurt, { VolumeId: made[0]!.location });

    const refused = await driverOn().discardFailedOver(made).catch((e: unknown) => e);

    expect(refused).toMatchObject({ context: { left: [made[1]] } });
    expect(String(refused)).toContain(`EBS DeleteVolume of failed-over replica ${made[1]!.location} failed: UnauthorizedOperation`);
    expect([...frankfurt.volumes.keys()]).toEqual([made[1]!.location]);
  });
});
