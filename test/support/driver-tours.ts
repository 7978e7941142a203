/**
 * The tours of test/infra/permissions.test.ts: every path of each AWS driver run against its mocked
 * clients, each call it made turned into the IAM requests AWS authorizes for it (iam-requests.ts),
 * with the tags its resources had at the moment of the call. aws-ebs (one region, and replication
 * across two), aws-efs (create, access rules, extend and quota, lost replies, delete, and migration
 * by replication with its cancel).
 */
import { EC2Client } from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { AwsEfsShareDriver } from '../../functions/drivers/share/aws-efs.js';
import { AwsEbsVolumeDriver } from '../../functions/drivers/volume/aws-ebs.js';
import { FAKE_EC2_BACKEND, FakeEc2, awsError, fakeRegions, wireFakeEc2 } from './fake-ec2.js';
import { efsBackend, untilReady } from './fake-efs.js';
import { mockedEfsClients } from './fake-efs-clients.js';
import { linkEfsRegions } from './fake-efs-replication.js';
import { ec2Requests, efsRequests, type IamRequest } from './iam-requests.js';

export const REGION = 'eu-west-1';

export interface Recorded {
  command: string;
  requests: IamRequest[];
}

/** Every operation of the driver, including the paths a lost reply and a delete of an attached volume take. */
export async function recordEbsCalls(): Promise<Recorded[]> {
  const client = new EC2Client({ region: REGION });
  const ec2 = mockClient(client);
  const fake = new FakeEc2(FAKE_EC2_BACKEND);
  const calls: { command: string; input: Record<string, unknown>; tags: Map<string, { Key?: string; Value?: string }[] | undefined> }[] = [];
  wireFakeEc2(ec2, fake, (command, input) => {
    // The tags each named resource has at the moment of the call: IAM evaluates aws:ResourceTag then.
    const i = input as Record<string, string | undefined>;
    const tags = new Map<string, { Key?: string; Value?: string }[] | undefined>();
    if (i.VolumeId) tags.set(`volume/${i.VolumeId}`, fake.volumes.get(i.VolumeId)?.Tags);
    if (i.SnapshotId) tags.set(`snapshot/${i.SnapshotId}`, fake.snapshots.get(i.SnapshotId)?.Tags);
    for (const id of (input as { Resources?: string[] }).Resources ?? []) tags.set(`volume/${id}`, structuredClone(fake.volumes.get(id)?.Tags));
    calls.push({ command, input: structuredClone(input) as Record<string, unknown>, tags });
  });
  const driver = new AwsEbsVolumeDriver(
    { host: FAKE_EC2_BACKEND, driver: 'aws-ebs', availabilityZone: `${REGION}a`, ebsVolumeType: 'io2', pools: [{ name: 'gp', totalCapacityGb: 40 }], serviceUuid: '22222222-2222-4222-8222-222222222222', volumeBackendName: 'ebs-a' },
    { client, pollIntervalMs: 0, pollAttempts: 5 },
  );
  await driver.capabilities();
  await driver.createVolume({ backendName: 'volume-1', sizeGb: 4, pool: 'gp', multiattach: true });
  await driver.getVolume('volume-1');
  await driver.extendVolume('volume-1', 5);
  // Manage of a volume Ferry did not make: adopted (tagged), and released again as a failed manage does.
  const legacy = fake.add('legacy', 4, 'gp', { Tags: [{ Key: 'Name', Value: 'legacy' }] }).VolumeId!;
  await driver.listAdoptable();
  await driver.getVolume(legacy);
  await driver.adoptVolume(legacy, 'gp');
  await driver.releaseAdopted(legacy);
  await driver.initializeConnection('volume-1', { host: 'i-1' });
  // volume-attach-wait's look (attachment-steps) at the attach EC2 had not finished.
  await driver.attachmentState('volume-1', { host: 'i-1' });
  await driver.listConnections();
  await driver.terminateConnection('volume-1', { host: 'i-1' });
  await driver.createSnapshot('volume-1', 'snapshot-1');
  // Volumes with data (CopyingDriver): from a snapshot (CreateVolume with SnapshotId), a clone (through a snapshot), a failed clone's cleanup.
  await driver.createVolumeFromSnapshot({ backendName: 'volume-2', sizeGb: 5, pool: 'gp' }, { volumeBackendName: 'volume-1', snapshotName: 'snapshot-1' });
  await driver.cloneVolume({ backendName: 'volume-3', sizeGb: 5, pool: 'gp' }, 'volume-1');
  await driver.abandonCopy('volume-3', 'volume-1');
  await driver.listSnapshots();
  await driver.deleteSnapshot('volume-1', 'snapshot-1');
  // A lost AttachVolume reply: the attach happened, the driver looks before failing.
  fake.devices.set('i-2', ['/dev/sda1']);
  const attach = fake.attachVolume.bind(fake);
  fake.attachVolume = (input) => {
    attach(input);
    throw awsError('RequestTimeout');
  };
  await driver.initializeConnection('volume-1', { host: 'i-2' });
  // Deleting a volume still attached detaches it first.
  await driver.listVolumes();
  await driver.deleteVolume('volume-1');
  ec2.restore();

  const out: Recorded[] = [];
  for (const c of calls) {
    const known = { tagsOf: (type: string, id: string) => c.tags.get(`${type}/${id}`) };
    out.push({ command: c.command, requests: await ec2Requests(REGION, c.command, c.input, known) });
  }
  return out;
}

/**
 * Replication across two regions: passes (snapshot, copy, prune), a drill, failover with the
 * primary region's client, failback until done, disable. Each call recorded with its region.
 */
export async function recordEbsReplicationCalls(): Promise<Recorded[]> {
  const target = 'eu-central-1';
  const fakes = fakeRegions(FAKE_EC2_BACKEND, [`${REGION}a`, `${target}a`]);
  const calls: { region: string; command: string; input: Record<string, unknown>; tags: Map<string, { Key?: string; Value?: string }[] | undefined> }[] = [];
  const clients = new Map<string, EC2Client>();
  const mocks = [];
  for (const [region, fake] of fakes) {
    const client = new EC2Client({ region });
    clients.set(region, client);
    const mock = mockClient(client);
    mocks.push(mock);
    wireFakeEc2(mock, fake, (command, input) => {
      const i = input as Record<string, string | string[] | undefined>;
      const tags = new Map<string, { Key?: string; Value?: string }[] | undefined>();
      const snapshotTags = (id: string) => [...fakes.values()].map((f) => f.snapshots.get(id)?.Tags).find(Boolean);
      if (typeof i.VolumeId === 'string') tags.set(`volume/${i.VolumeId}`, structuredClone(fake.volumes.get(i.VolumeId)?.Tags));
      for (const id of [i.SnapshotId, i.SourceSnapshotId]) if (typeof id === 'string') tags.set(`snapshot/${id}`, structuredClone(snapshotTags(id)));
      // CreateTags names volumes (replication's mark) and snapshots (a failback's kept point).
      for (const id of (i.Resources as string[] | undefined) ?? []) {
        if (id.startsWith('snap-')) tags.set(`snapshot/${id}`, structuredClone(snapshotTags(id)));
        else tags.set(`volume/${id}`, structuredClone(fake.volumes.get(id)?.Tags));
      }
      calls.push({ region, command, input: structuredClone(input) as Record<string, unknown>, tags });
    });
  }
  const config = {
    host: FAKE_EC2_BACKEND,
    driver: 'aws-ebs' as const,
    availabilityZone: `${REGION}a`,
    ebsVolumeType: 'gp3',
    pools: [{ name: 'gp', totalCapacityGb: 40 }],
    serviceUuid: '22222222-2222-4222-8222-222222222222',
    volumeBackendName: 'ebs-a',
    replicationDevices: [{ backend_id: 'fra', availability_zone: `${target}a` }],
  };
  const on = (activeBackendId = '') => new AwsEbsVolumeDriver(config, { clientFor: (r) => clients.get(r)!, pollIntervalMs: 0, pollAttempts: 5, activeBackendId });
  const ref = { volumeId: 'id-1', backendName: 'volume-r', sizeGb: 1 };
  await on().createVolume({ backendName: 'volume-r', sizeGb: 1, pool: 'gp' });
  await on().enableReplication('volume-r');
  for (let i = 0; i < 6; i++) await on().syncNow(0);
  await on().replicationStatus('volume-r');
  await on().endDrill(await on().startDrill([ref], 'fra'));
  await on().failoverHost([ref], 'fra');
  for (let i = 0; i < 6; i++) if (await on('fra').failoverHost([ref], 'default').catch(() => undefined)) break;
  await on().enableReplication('volume-r');
  for (let i = 0; i < 6; i++) await on().syncNow(0);
  // A failover whose volume was deleted meanwhile: the replica it made is discarded (replication/failover-discard.ts).
  const replica = (await on().failoverHost([ref], 'fra')).volumeUpdates[0]!.updates.providerLocation!;
  await on().discardFailedOver([{ volumeId: ref.volumeId, backendName: ref.backendName, targetBackendId: 'fra', location: replica }]);
  // The audit of unowned replicas (audit/replica-unowned.ts): the sites listed (from the primary, and failed over), an orphan looked at and deleted.
  const orphan = fakes.get(target)!.add('volume-orphan', 1).VolumeId!;
  await on().listSiteVolumes();
  await on('fra').listSiteVolumes();
  await on().getSiteVolume('fra', orphan);
  await on().deleteSiteVolume('fra', orphan);
  await on().disableReplication('volume-r');
  for (const m of mocks) m.restore();
  const out: Recorded[] = [];
  for (const c of calls) {
    const known = { tagsOf: (type: string, id: string) => c.tags.get(`${type}/${id}`) };
    out.push({ command: c.command, requests: await ec2Requests(c.region, c.command, c.input, known) });
  }
  return out;
}


type Tags = { Key?: string; Value?: string }[] | undefined;

/**
 * The aws-efs driver's paths: a share made (its file system first hidden from DescribeFileSystems,
 * so the lost-reply path through FileSystemAlreadyExists is taken), access rules of both kinds set,
 * read, changed and emptied, the size extended and enforced over quota and back, listed, deleted
 * while a mount target's interface still holds its group. EFS and EC2 calls in their region.
 */
export async function recordEfsCalls(): Promise<Recorded[]> {
  const { fake, efs, ec2, calls, restore } = recordingEfs(REGION);
  fake.knownRoles = new Set(['analyst']);
  const driver = new AwsEfsShareDriver(efsBackend('ferry@efs-a', { pools: [{ name: 'pool0', totalCapacityGb: 40 }] }), { efs, ec2, pollIntervalMs: 0, pollAttempts: 5 });
  const name = 'share-11111111-1111-4111-a111-111111111111';
  await driver.capabilities();
  // A lost CreateFileSystem reply: the retry's look does not see it yet, EFS answers FileSystemAlreadyExists.
  fake.failNext('CreateFileSystem', awsError('RequestTimeout'), { after: true });
  await driver.createShare({ name, sizeGb: 2, proto: 'NFS', pool: 'pool0' }).catch(() => undefined);
  fake.hiddenFileSystems = new Set(fake.fileSystems.keys());
  await driver.createShare({ name, sizeGb: 2, proto: 'NFS', pool: 'pool0' });
  fake.hiddenFileSystems.clear();
  await driver.getShare(name);
  await driver.listShares();
  await driver.updateAccess(name, [
    { id: 'r1', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'rw' },
    { id: 'r2', accessType: 'user', accessTo: 'analyst', accessLevel: 'ro' },
  ]);
  await driver.updateAccess(name, [{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'rw' }, { id: 'r3', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'rw' }]);
  // A host-assisted migration's copy task joins the share's group: its members admitted once, kept by the next updateAccess.
  await driver.dataNodeMount(name);
  await driver.updateAccess(name, [{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'rw' }, { id: 'r3', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'rw' }]);
  await driver.getAccess(name);
  await driver.connectionGetInfo(name);
  fake.setUsage(fake.fileSystemNamed(name)!.FileSystemId!, 3 * 1024 ** 3);
  await driver.enforceQuota(name);
  await driver.extendShare(name, 4);
  await driver.shareUsage(name);
  // The reconciler's paths: a shrink, the quota enforced with the record's rules, the replications listed and one deleted.
  await driver.shrinkShare(name, 3);
  // The undo of a failed extend (functions/shares/resize.ts): the quota tag set below the metered size, writes withheld.
  await driver.restoreShareSize(name, 2);
  await driver.enforceQuota(name, [{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'rw' }]);
  await driver.shareReplications();
  await driver.deleteShareReplication(name);
  await driver.updateAccess(name, []);
  await driver.deleteShare(name);
  restore();
  return toRequests(calls);
}

/**
 * Driver-assisted migration between aws-efs backends: to a backend of the same region, a start
 * whose reply was lost, phase 1 to its end, progress, cancel; again, phase 2 cast and not yet cut
 * over, cancel (the cast lifted); again, phase 2 to the end; and to a backend in another region
 * (the replica made and its protection turned off there, with that region's clients).
 */
export async function recordEfsMigrationCalls(): Promise<Recorded[]> {
  const home = recordingEfs(REGION);
  const away = recordingEfs('eu-central-1');
  const replication = linkEfsRegions([home.fake, away.fake]);
  // The driver and the fake read one clock, which every call moves on by a second.
  replication.tickMs = 1000;
  const options = { pollIntervalMs: 0, pollAttempts: 5, now: () => replication.time, clientsFor: () => ({ efs: away.efs, ec2: away.ec2 }) };
  const src = new AwsEfsShareDriver(efsBackend('ferry@efs-a'), { efs: home.efs, ec2: home.ec2, ...options });
  const destinations = [efsBackend('ferry@efs-b', { throughputMode: 'bursting' }), efsBackend('ferry@efs-c', { region: 'eu-central-1' })];
  let n = 0;
  for (const [destination, ending] of [[destinations[0]!, 'cancel'], [destinations[0]!, 'cast-then-cancel'], [destinations[0]!, 'complete'], [destinations[1]!, 'complete']] as const) {
    const name = `share-1111111${n}-1111-4111-a111-111111111111`;
    const req = { source: { name, sizeGb: 1, proto: 'NFS' }, destination: { name: `share-2222222${n++}-2222-4222-a222-222222222222`, host: `${destination.host}#pool0`, backend: destination } };
    await untilReady(() => src.createShare({ name, sizeGb: 1, proto: 'NFS', pool: 'pool0' }));
    await src.updateAccess(name, [{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.0/24', accessLevel: 'rw' }]);
    await src.migrationCheckCompatibility(req);
    if (n === 1) home.fake.failNext('CreateReplicationConfiguration', awsError('RequestTimeout'), { after: true });
    await untilReady(() => src.migrationStart(req));
    while (!(await src.migrationContinue(req)));
    await src.migrationGetProgress(req);
    // The audit's look at the replication (the replica read in its own region).
    await src.shareReplications();
    const sourceId = home.fake.fileSystemNamed(name)!.FileSystemId!;
    if (ending === 'cast-then-cancel') {
      home.fake.replication.fallBehind(sourceId);
      await src.migrationComplete(req).catch(() => undefined);
    }
    await untilReady<unknown>(() => (ending === 'complete' ? src.migrationComplete(req) : src.migrationCancel(req)));
    if (ending !== 'complete') await untilReady(() => src.deleteShare(name));
  }
  home.restore();
  away.restore();
  return toRequests([...home.calls, ...away.calls]);
}

type Call = { service: string; command: string; input: Record<string, unknown>; tags: Map<string, Tags>; mountTarget?: { fileSystemId: string; networkInterfaceId: string }; region: string };

/** A fake EFS and EC2 of a region behind clients of their own, recording every call with the tags its resources have at that moment (IAM evaluates aws:ResourceTag then). */
function recordingEfs(region: string) {
  const { efs, ec2, fake, restore } = mockedEfsClients(region);
  const calls: Call[] = [];
  const call = fake.call.bind(fake);
  fake.call = (service, command, input, answer) => {
    const tags = new Map<string, Tags>();
    const fsId = (input.FileSystemId ?? input.SourceFileSystemId ?? input.ResourceId) as string | undefined;
    const mt = typeof input.MountTargetId === 'string' ? fake.mountTargets.get(input.MountTargetId) : undefined;
    for (const id of [fsId, mt?.FileSystemId]) if (id) tags.set(`file-system/${id}`, structuredClone(fake.fileSystems.get(id)?.Tags));
    for (const g of [input.GroupId, ...((input.SecurityGroups as string[] | undefined) ?? [])]) if (typeof g === 'string') tags.set(`security-group/${g}`, structuredClone(fake.groups.get(g)?.Tags));
    calls.push({ service, command, input: structuredClone(input), tags, region, ...(mt ? { mountTarget: { fileSystemId: mt.FileSystemId!, networkInterfaceId: mt.NetworkInterfaceId! } } : {}) });
    return call(service, command, input, answer);
  };
  return { fake, efs, ec2, calls, restore };
}

async function toRequests(calls: Call[]): Promise<Recorded[]> {
  const out: Recorded[] = [];
  for (const c of calls) {
    const known = { tagsOf: (type: string, id: string) => c.tags.get(`${type}/${id}`), mountTarget: () => c.mountTarget };
    const region = c.region;
    out.push({ command: c.command, requests: c.service === 'efs' ? await efsRequests(region, c.command, c.input, known) : await ec2Requests(region, c.command, c.input, known) });
  }
  return out;
}
