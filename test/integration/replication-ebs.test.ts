/**
 * Replication v2.1 on EBS through the Cinder API, EC2 mocked per region (test/support/fake-ec2.ts):
 * volumes of a replicated type on an aws-ebs backend whose target is another region; the
 * replication-pass machine (functions/replication/pass.ts, run by the local interpreter) snapshots
 * and copies them; freeze stops it; a drill brings copies up in the target and ending it removes them
 * (also after a crash whose re-run finds the copies it recorded pruned, and after a drill that failed midway);
 * failover_host runs the volume-failover machine with the primary region not answering; a failed-
 * over volume attaches to an instance of the target zone; failback ('default') brings the volumes
 * home, waiting in the machine while the copies travel, and the next pass replicates them from the
 * failback's point; the audit is clean at the end; a failover
 * right after, whose first CreateVolume reply is lost while newer copies arrive, runs its batch
 * again from the copies it recorded: one volume each.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { getBatch } from '../../functions/replication/repo.js';
import { getVolume } from '../../functions/volumes/repo.js';
import { awsError, type FakeEc2 } from '../support/fake-ec2.js';
import { listOperations } from '../support/replication-operations.js';
import { startReplicatedEbsStack, type EbsStack } from '../support/ebs-stack.js';
import { eventually } from '../support/poll.js';
import { replicationPass } from '../support/replication-pass.js';

const HOST = 'ferry@ebs-r';
let ebs: EbsStack;
let home: FakeEc2;
let frankfurt: FakeEc2;
const ids: string[] = [];
const api = (method: string, path: string, body?: unknown) => ebs.api(method, path, body);
const volume = async (id: string) => (await api('GET', `/volumes/${id}`)).body.volume as Record<string, any>;
const service = async () => (await api('GET', `/os-services?host=${encodeURIComponent(HOST)}&binary=cinder-volume`)).body.services[0] as Record<string, any>;
const serviceBecomes = (status: string) => eventually(async (note) => note((await service()).replication_status) === status || undefined, `service ${status}`);
const lagOnPool = async () =>
  ((await api('GET', '/scheduler-stats/get_pools?detail=true')).body.pools as { name: string; capabilities: Record<string, any> }[]).find((p) => p.name.startsWith(`${HOST}#`))!.capabilities.replication_lag?.frankfurt;
const kinds = (fake: FakeEc2) => [...fake.snapshots.values()].map((s) => `${s.Tags?.find((t) => t.Key === 'ferry:replication')?.Value}:${s.State}`).sort();

beforeAll(async () => {
  ebs = await startReplicatedEbsStack({ host: HOST, volumeBackendName: 'ebs-r', typeName: 'ebs-replicated', ebsVolumeType: 'gp3' });
  home = ebs.fakes.get('eu-west-1')!;
  frankfurt = ebs.fakes.get('eu-central-1')!;
}, 120_000);
afterAll(async () => {
  await ebs?.stop();
});

describe('EBS replication to another region through the API (EC2 mocked per region)', () => {
  test('volumes of a replicated type are marked; the schedule snapshots them and copies the snapshots to the target', async () => {
    for (const name of ['db', 'logs']) {
      const created = await api('POST', '/volumes', { volume: { size: 1, name, volume_type: 'ebs-replicated', availability_zone: 'eu-west-1a' } });
      expect(created.status).toBe(202);
      ids.push(created.body.volume.id);
    }
    for (const id of ids) await eventually(async (note) => note(JSON.stringify(await volume(id))).includes(`"status":"available"`) || undefined, `volume ${id} available`);
    expect((await volume(ids[0]!)).replication_status).toBe('enabled');
    expect([...home.volumes.values()].every((v) => v.Tags?.some((t) => t.Key === 'ferry:replicated' && t.Value === 'true'))).toBe(true);

    // Five runs of the schedule: snapshot, (pending), copy, (pending), arrived. The pools show each
    // run's count of volumes with a copy in the target, so one can wait for it before failing over.
    expect(await lagOnPool()).toBeUndefined();
    expect(await replicationPass(HOST)).toMatchObject({ volumes: 2, failed: 0 });
    expect(await lagOnPool()).toMatchObject({ volumes: 2, replicated: 0, max_lag_seconds: null });
    for (let i = 0; i < 4; i++) expect(await replicationPass(HOST)).toMatchObject({ volumes: 2, failed: 0 });
    expect(kinds(frankfurt)).toEqual(['copy:completed', 'copy:completed']);
    const lag = await lagOnPool();
    expect(lag).toMatchObject({ volumes: 2, replicated: 2 });
    expect(lag.max_lag_seconds).toBeGreaterThanOrEqual(0);
    expect(Date.parse(lag.as_of)).toBeGreaterThan(Date.now() - 60_000);
  });

  test('a frozen backend is skipped by the schedule; thaw resumes it', async () => {
    expect((await api('PUT', '/os-services/freeze', { host: HOST })).status).toBe(200);
    expect(await replicationPass(HOST)).toMatchObject({ run: false, why: 'frozen', volumes: 0 });
    expect((await api('PUT', '/os-services/thaw', { host: HOST })).status).toBe(200);
    await serviceBecomes('enabled');
    expect(await replicationPass(HOST)).toMatchObject({ volumes: 2, failed: 0 });
  });

  test('a drill makes volumes in Frankfurt from the copies, tagged as a drill, and leaves the primary and the records alone; ending it deletes them', async () => {
    const seen = async () => (await Promise.all(ids.map(volume))).map((v) => [v.status, v.replication_status, v['os-vol-host-attr:host']]);
    const before = { records: await seen(), home: [...home.volumes.keys()].sort() };
    expect((await api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'frankfurt', drill: true })).status).toBe(202);
    await eventually(async (note) => note((await service()).drill?.status) === 'active' || undefined, 'drill active');
    const drillOf = (v: { Tags?: { Key?: string; Value?: string }[] }) => v.Tags?.find((t) => t.Key === 'ferry:drill')?.Value;
    expect([...frankfurt.volumes.values()].map(drillOf).sort()).toEqual(ids.map((id) => `volume-${id}`).sort());
    expect({ records: await seen(), home: [...home.volumes.keys()].sort() }).toEqual(before);
    expect((await service()).replication_status).toBe('enabled');

    expect((await api('PUT', '/os-services/failover_host', { host: HOST, drill: 'end' })).status).toBe(202);
    await eventually(async (note) => note((await service()).drill?.status ?? 'ended') === 'ended' || undefined, 'drill ended');
    expect(frankfurt.volumes.size).toBe(0);
    expect(await seen()).toEqual(before.records);
  });

  test('a drill whose batch crashed after its first drill volume, the copies it recorded pruned before the re-run: the re-run chooses again, one drill volume each; a drill that failed midway leaves nothing once ended', async () => {
    // Prepare: the batch's second CreateVolume finds that newer copies arrived and a pass pruned
    // the ones recorded, then the Lambda running it stops (the Task's Retry runs the batch again).
    const real = { createVolume: frankfurt.createVolume };
    const drills = () => [...frankfurt.volumes.values()].filter((v) => v.Tags?.some((t) => t.Key === 'ferry:drill'));
    let calls = 0;
    frankfurt.createVolume = (input) => {
      if (++calls !== 2) return real.createVolume.call(frankfurt, input);
      for (const arrived of [...frankfurt.snapshots.values()].filter((c) => c.State === 'completed')) {
        const Tags = arrived.Tags!.map((t) => (t.Key === 'ferry:source-time' ? { ...t, Value: new Date().toISOString() } : t));
        frankfurt.snapshots.set(`${arrived.SnapshotId}-arrived`, { ...arrived, SnapshotId: `${arrived.SnapshotId}-arrived`, Tags });
        frankfurt.snapshots.delete(arrived.SnapshotId!);
      }
      throw awsError('RequestTimeout', 'the Lambda running the batch was stopped');
    };
    try {
      // Act
      expect((await api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'frankfurt', drill: true })).status).toBe(202);
      await eventually(async (note) => ['active', 'failed'].includes(note((await service()).drill?.status)) || undefined, 'drill ended its start');
    } finally {
      Object.assign(frankfurt, real);
    }

    // Assess: active, one drill volume per volume, the second from a copy recorded in place of the pruned one.
    const [drill] = (await listOperations(HOST)).filter((o) => o.kind === 'drill');
    expect({ drill: (await service()).drill?.status, error: drill!.error }).toEqual({ drill: 'active', error: undefined });
    const { replicaChoices } = await getBatch(drill!.id, 0);
    for (const id of ids) {
      const made = drills().filter((v) => v.Tags?.some((t) => t.Key === 'ferry:drill' && t.Value === `volume-${id}`));
      expect(made).toHaveLength(1);
      expect(made[0]!.SnapshotId).toBe(replicaChoices?.[id]?.split('@')[0]);
    }
    expect(Object.values(replicaChoices ?? {}).filter((c) => c?.split('@')[0]?.endsWith('-arrived'))).toHaveLength(1);
    expect((await api('PUT', '/os-services/failover_host', { host: HOST, drill: 'end' })).status).toBe(202);
    await eventually(async (note) => note((await service()).drill?.status ?? 'ended') === 'ended' || undefined, 'drill ended');
    expect(drills()).toEqual([]);

    // A drill whose second volume is refused on every try fails with its first drill volume made and unrecorded; ending it removes that one.
    const drillName = (input: Parameters<FakeEc2['createVolume']>[0]) => input.TagSpecifications?.[0]?.Tags?.find((t) => t.Key === 'ferry:drill')?.Value;
    let first: string | undefined;
    frankfurt.createVolume = (input) => {
      if ((first ??= drillName(input)) !== drillName(input)) throw awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.');
      return real.createVolume.call(frankfurt, input);
    };
    try {
      expect((await api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'frankfurt', drill: true })).status).toBe(202);
      await eventually(async (note) => note((await service()).drill?.status) === 'failed' || undefined, 'drill failed');
    } finally {
      Object.assign(frankfurt, real);
    }
    expect(drills()).toHaveLength(1);
    expect((await api('PUT', '/os-services/failover_host', { host: HOST, drill: 'end' })).status).toBe(202);
    await eventually(async (note) => note((await service()).drill?.status ?? 'ended') === 'ended' || undefined, 'drill ended');
    expect(drills()).toEqual([]);
  });

  test('failover with the primary region gone: each volume is a volume in Frankfurt, and attaches to an instance there', async () => {
    const primary = { describeVolumes: home.describeVolumes, describeSnapshots: home.describeSnapshots };
    const gone = (): never => {
      throw awsError('RequestTimeout', 'eu-west-1 does not answer');
    };
    home.describeVolumes = gone;
    home.describeSnapshots = gone;
    try {
      expect((await api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'frankfurt' })).status).toBe(202);
      await serviceBecomes('failed-over');
    } finally {
      Object.assign(home, primary);
    }
    expect((await service()).active_backend_id).toBe('frankfurt');
    expect(frankfurt.volumes.size).toBe(2);
    for (const id of ids) expect((await volume(id)).replication_status).toBe('failed-over');
    expect(await replicationPass(HOST)).toMatchObject({ run: false, why: 'failed over to frankfurt' });

    frankfurt.devices.set('i-fra', ['/dev/sda1']);
    const att = await api('POST', '/attachments', { attachment: { volume_uuid: ids[0], instance_uuid: '66666666-6666-4666-8666-666666666666' } });
    const updated = await api('PUT', `/attachments/${att.body.attachment.id}`, { attachment: { connector: { host: 'i-fra' } } });
    expect(updated.status).toBe(200);
    const there = [...frankfurt.volumes.values()].find((v) => v.Tags?.some((t) => t.Key === 'ferry:backend-name' && t.Value === `volume-${ids[0]}`))!;
    expect(updated.body.attachment.connection_info).toMatchObject({ volume_id: there.VolumeId, instance_id: 'i-fra' });
    expect((await api('DELETE', `/attachments/${att.body.attachment.id}`)).status).toBe(200);
  });

  test('failback waits in the machine while the copies travel home, then the volumes are home and Frankfurt is empty', async () => {
    expect((await api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'default' })).status).toBe(202);
    await serviceBecomes('enabled');

    expect((await service()).active_backend_id ?? null).toBeNull();
    for (const id of ids) expect((await volume(id)).replication_status).toBe('enabled');
    expect(frankfurt.volumes.size).toBe(0);
    const homeNames = [...home.volumes.values()].map((v) => v.Tags?.find((t) => t.Key === 'ferry:backend-name')?.Value).sort();
    expect(homeNames).toEqual(ids.map((id) => `volume-${id}`).sort());
    expect(kinds(home).filter((k) => k.startsWith('failback'))).toEqual([]);
    expect((await runAudit()).findings).toEqual([]);
    // The lag measured before the failover is gone; the next pass takes the volumes up again and
    // measures from the failback's own snapshots, kept as the newest copies in Frankfurt.
    expect(await lagOnPool()).toBeUndefined();
    expect(await replicationPass(HOST)).toMatchObject({ volumes: 2, failed: 0 });
    const lag = await lagOnPool();
    expect(lag).toMatchObject({ volumes: 2, replicated: 2 });
    expect(lag.max_lag_seconds).toBeLessThan(120);
  });

  test('failing over again at once, the first CreateVolume\'s reply lost while newer copies arrive: the batch runs again from the copies it recorded, one volume each', async () => {
    // Prepare: no pass since the failback, so Frankfurt holds the copies the first failover started
    // from; Frankfurt's DescribeVolumes by tag lists none made from now on (EC2's eventual consistency).
    const since = new Date();
    const real = { createVolume: frankfurt.createVolume, describeVolumes: frankfurt.describeVolumes };
    frankfurt.describeVolumes = (input) => {
      const out = real.describeVolumes.call(frankfurt, input);
      return input.Filters ? { ...out, Volumes: out.Volumes.filter((v) => !(v.CreateTime && v.CreateTime >= since)) } : out;
    };
    let lost = 0;
    frankfurt.createVolume = (input) => {
      const made = real.createVolume.call(frankfurt, input);
      if (lost++ > 0) return made;
      // Copies that started before the failover arrive now, their sources taken later.
      for (const arrived of [...frankfurt.snapshots.values()].filter((c) => c.State === 'completed')) {
        const Tags = arrived.Tags!.map((t) => (t.Key === 'ferry:source-time' ? { ...t, Value: new Date().toISOString() } : t));
        frankfurt.snapshots.set(`${arrived.SnapshotId}-newer`, { ...arrived, SnapshotId: `${arrived.SnapshotId}-newer`, Tags });
      }
      throw awsError('RequestTimeout', 'the reply was lost');
    };

    // Act
    try {
      expect((await api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'frankfurt' })).status).toBe(202);
      await serviceBecomes('failed-over');
    } finally {
      Object.assign(frankfurt, real);
    }

    // Assess: one volume per record, from the copy recorded in the batch (not a newer one), where the record points.
    expect(lost).toBeGreaterThan(ids.length);
    const [op] = await listOperations(HOST);
    const { replicaChoices } = await getBatch(op!.id, 0);
    for (const id of ids) {
      const made = [...frankfurt.volumes.values()].filter((v) => v.Tags?.some((t) => t.Key === 'ferry:backend-name' && t.Value === `volume-${id}`));
      expect(made).toHaveLength(1);
      expect(made[0]!.SnapshotId).not.toMatch(/-newer$/);
      expect(made[0]!.SnapshotId).toBe(replicaChoices?.[id]?.split('@')[0]);
      expect(await volume(id)).toMatchObject({ replication_status: 'failed-over', status: 'available' });
      expect((await getVolume(id))!.providerLocation).toBe(made[0]!.VolumeId);
    }
  });
});
