/**
 * Seed 001 on EBS, the volumes that are not replicated (issue 14): an aws-ebs backend replicating
 * to Frankfurt holds volumes of a replicated type and of a plain type (one of them with a snapshot).
 * failover_host through the API with the primary region answering nothing (the "smoking hole"):
 * each replicated volume comes up from its copy in Frankfurt (`available` / `failed-over`), each
 * plain volume goes to `error` / `not-capable` with its old status in previous_status and its
 * snapshot `error` (reference §2.4 step 2), every record keeps its host, and no EC2 call reached
 * eu-west-1. (Failback on EBS is replication-ebs.test.ts's; that a failback leaves the plain
 * volumes as the failover left them is replication-failover.test.ts's, driver-independent.)
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { getVolume } from '../../functions/volumes/repo.js';
import { awsError, type FakeEc2 } from '../support/fake-ec2.js';
import { startEbsStack, type EbsStack } from '../support/ebs-stack.js';
import { eventually } from '../support/poll.js';
import { replicationPass } from '../support/replication-pass.js';

const HOST = 'ferry@ebs-nc';
const POOL_HOST = `${HOST}#gp`;
let ebs: EbsStack;
let home: FakeEc2;
let frankfurt: FakeEc2;
const replicated: string[] = [];
const plain: string[] = [];
let snapshotId = '';
const api = (method: string, path: string, body?: unknown) => ebs.api(method, path, body);
const volume = async (id: string) => (await api('GET', `/volumes/${id}`)).body.volume as Record<string, any>;
const service = async () => (await api('GET', `/os-services?host=${encodeURIComponent(HOST)}&binary=cinder-volume`)).body.services[0] as Record<string, any>;
const serviceBecomes = (status: string) => eventually(async (note) => note((await service()).replication_status) === status || undefined, `service ${status}`);
const record = async (id: string) => {
  const v = await volume(id);
  return { status: v.status, replication_status: v.replication_status, host: v['os-vol-host-attr:host'] };
};

/** The EC2 methods of the fake; during the failover every one of them in eu-west-1 is recorded and times out. */
const EC2_METHODS = [
  'describeVolumes', 'createVolume', 'attachVolume', 'detachVolume', 'deleteVolume', 'modifyVolume', 'describeInstances',
  'createSnapshot', 'describeSnapshots', 'deleteSnapshot', 'copySnapshot', 'createTags', 'deleteTags',
] as const;

beforeAll(async () => {
  ebs = await startEbsStack({
    zones: ['eu-west-1a', 'eu-central-1a'],
    backends: [
      {
        host: HOST,
        driver: 'aws-ebs',
        availabilityZone: 'eu-west-1a',
        ebsVolumeType: 'gp3',
        volumeBackendName: 'ebs-nc',
        pools: [{ name: 'gp', totalCapacityGb: 100 }],
        replicationDevices: [{ backend_id: 'frankfurt', availability_zone: 'eu-central-1a' }],
      },
    ],
    types: [
      { name: 'ebs-nc-replicated', extraSpecs: { volume_backend_name: 'ebs-nc', replication_enabled: '<is> True' } },
      { name: 'ebs-nc-plain', extraSpecs: { volume_backend_name: 'ebs-nc' } },
    ],
  });
  home = ebs.fakes.get('eu-west-1')!;
  frankfurt = ebs.fakes.get('eu-central-1')!;
}, 120_000);
afterAll(async () => {
  await ebs?.stop();
});

describe('failover_host on EBS: the volumes that are not replicated go to error (seed 001)', () => {
  test('a backend with replicated and plain volumes, one plain with a snapshot, all copied that can be', async () => {
    for (const [type, into] of [['ebs-nc-replicated', replicated], ['ebs-nc-replicated', replicated], ['ebs-nc-plain', plain], ['ebs-nc-plain', plain]] as const) {
      const created = await api('POST', '/volumes', { volume: { size: 1, volume_type: type, availability_zone: 'eu-west-1a' } });
      expect(created.status).toBe(202);
      into.push(created.body.volume.id);
    }
    for (const id of [...replicated, ...plain]) await eventually(async (note) => note((await volume(id)).status) === 'available' || undefined, `volume ${id} available`);
    expect((await Promise.all(plain.map(volume))).map((v) => v.replication_status)).toEqual(['disabled', 'disabled']);
    expect((await Promise.all(replicated.map(volume))).map((v) => v.replication_status)).toEqual(['enabled', 'enabled']);

    const snap = await api('POST', '/snapshots', { snapshot: { volume_id: plain[0], name: 'before-failover' } });
    expect(snap.status).toBe(202);
    snapshotId = snap.body.snapshot.id;
    await eventually(async (note) => note((await api('GET', `/snapshots/${snapshotId}`)).body.snapshot.status) === 'available' || undefined, 'snapshot available');

    // The schedule's runs until each replicated volume has a copy in Frankfurt; plain ones have none.
    for (let i = 0; i < 5; i++) expect(await replicationPass(HOST)).toMatchObject({ volumes: 2, failed: 0 });
    expect([...frankfurt.snapshots.values()].filter((s) => s.State === 'completed')).toHaveLength(2);
  });

  test('failover with eu-west-1 gone: replicated volumes are in Frankfurt, plain ones and their snapshot are error, no call reached eu-west-1', async () => {
    // Prepare: every EC2 call to eu-west-1 is recorded and times out, as a region that is gone.
    const homeCalls: string[] = [];
    const saved = Object.fromEntries(EC2_METHODS.map((m) => [m, home[m]]));
    for (const m of EC2_METHODS) {
      (home as unknown as Record<string, () => never>)[m] = () => {
        homeCalls.push(m);
        throw awsError('RequestTimeout', 'eu-west-1 does not answer');
      };
    }
    const homeVolumesBefore = [...home.volumes.keys()].sort();

    // Act
    try {
      expect((await api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'frankfurt' })).status).toBe(202);
      await serviceBecomes('failed-over');
    } finally {
      Object.assign(home, saved);
    }

    // Assess: the service, every record, the snapshot, and the two regions.
    expect(homeCalls).toEqual([]);
    expect(await service()).toMatchObject({ status: 'disabled', disabled_reason: 'failed-over', active_backend_id: 'frankfurt' });
    for (const id of replicated) expect(await record(id)).toEqual({ status: 'available', replication_status: 'failed-over', host: POOL_HOST });
    for (const id of plain) {
      expect(await record(id)).toEqual({ status: 'error', replication_status: 'not-capable', host: POOL_HOST });
    }
    expect((await api('GET', `/snapshots/${snapshotId}`)).body.snapshot.status).toBe('error');
    const inFrankfurt = [...frankfurt.volumes.values()].map((v) => v.Tags?.find((t) => t.Key === 'ferry:backend-name')?.Value).sort();
    expect(inFrankfurt).toEqual(replicated.map((id) => `volume-${id}`).sort());
    expect([...home.volumes.keys()].sort()).toEqual(homeVolumesBefore);
  });

  test('each plain volume keeps its status before the failover in previous_status (the store; the API does not show it)', async () => {
    for (const id of plain) expect(await getVolume(id)).toMatchObject({ status: 'error', replicationStatus: 'not-capable', previousStatus: 'available' });
  });
});
