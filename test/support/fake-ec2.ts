/**
 * A small EC2 model behind aws-sdk-client-mock, for the aws-ebs volume driver's tests and its run
 * of the volume driver contract suite (test/contracts/volume-driver.ts). Replies are shaped like
 * the EC2 API reference's (DescribeVolumes pages with NextToken, InvalidVolume.NotFound for an
 * unknown id, a ClientToken answered with the volume it first made), and it refuses what EC2
 * refuses: an io1/io2 volume without Iops or below 4 GiB, Multi-Attach on another type, a second
 * attachment of a volume without Multi-Attach (VolumeInUse), a volume and instance in different zones.
 */
import {
  AttachVolumeCommand,
  CopySnapshotCommand,
  CreateSnapshotCommand,
  CreateTagsCommand,
  CreateVolumeCommand,
  DeleteSnapshotCommand,
  DeleteTagsCommand,
  DeleteVolumeCommand,
  DescribeInstancesCommand,
  DescribeSnapshotsCommand,
  DescribeVolumesCommand,
  DetachVolumeCommand,
  ModifyVolumeCommand,
  type EC2Client,
  type Filter,
  type Snapshot,
  type Volume,
  type VolumeAttachment,
} from '@aws-sdk/client-ec2';
import type { AwsClientStub } from 'aws-sdk-client-mock';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';

/** The backend host whose tags the fake's `add` puts on a volume. */
export const FAKE_EC2_BACKEND = 'ferry@ebs-a';
/** The zone of the fake's volumes and instances unless told otherwise. */
export const FAKE_EC2_ZONE = 'eu-west-1a';
/** The gp backend of FAKE_EC2_BACKEND in FAKE_EC2_ZONE that the driver unit tests run on the fake. */
export const FAKE_EC2_GP_BACKEND: BackendConfig = {
  host: FAKE_EC2_BACKEND, driver: 'aws-ebs', availabilityZone: FAKE_EC2_ZONE, pools: [{ name: 'gp', totalCapacityGb: 100 }],
  serviceUuid: '22222222-2222-4222-8222-222222222222', volumeBackendName: 'ebs-a',
};
const MIN_SIZE: Record<string, number> = { io1: 4, io2: 4, st1: 125, sc1: 125 };

export const awsError = (name: string, message = name) => Object.assign(new Error(message), { name, $fault: 'client' });

/**
 * A small EC2 model behind the mocked client: volumes become available, attachments attached and
 * detachments done one DescribeVolumes after the request, as on EC2 where they take a moment.
 */
export class FakeEc2 {
  volumes = new Map<string, Volume>();
  snapshots = new Map<string, Snapshot>();
  private nextSnapshot = 1;

  /** The fakes of the other regions, by region (CopySnapshot reads its source there): fakeRegions(). */
  peers = new Map<string, FakeEc2>();
  /** The clock snapshots are stamped with (StartTime). */
  clock: () => number = () => Date.now();

  constructor(
    readonly backend: string = FAKE_EC2_BACKEND,
    readonly zone: string = FAKE_EC2_ZONE,
  ) {}

  tokens = new Map<string, string>();
  /** What the request that first used each ClientToken asked for (a reuse asking otherwise is IdempotentParameterMismatch). */
  private tokenRequests = new Map<string, { Size?: number; SnapshotId?: string }>();
  devices = new Map<string, string[]>([['i-1', ['/dev/sda1']]]);
  /** An instance's zone, when not the fake's own. */
  instanceZones = new Map<string, string>();
  pageSize = 2;
  private next = 1;

  add(backendName: string, sizeGb: number, pool = 'gp', extra: Partial<Volume> = {}): Volume {
    const v: Volume = {
      VolumeId: `vol-${this.next++}`,
      Size: sizeGb,
      State: 'available',
      CreateTime: new Date(this.clock()),
      AvailabilityZone: this.zone,
      VolumeType: 'gp3',
      MultiAttachEnabled: false,
      Attachments: [],
      Tags: [
        { Key: 'Name', Value: backendName },
        { Key: 'ferry:backend-name', Value: backendName },
        { Key: 'ferry:backend', Value: this.backend },
        { Key: 'ferry:pool', Value: pool },
      ],
      ...extra,
    };
    this.volumes.set(v.VolumeId!, v);
    return v;
  }

  /**
   * How EC2 ends an attach to an instance (by instance id), when not on the next look: `attached`
   * after `looks` more DescribeVolumes that see it, or `vanish`ed (the attach did not take: EC2
   * drops the attachment), or `stuck` attaching for ever.
   */
  attachEnds = new Map<string, { looks: number; then: 'attached' | 'vanish' | 'stuck' }>();

  private settleAttach(a: VolumeAttachment): VolumeAttachment[] {
    const end = this.attachEnds.get(a.InstanceId ?? '');
    if (end && end.looks > 0) end.looks--;
    else if (end?.then === 'vanish') {
      this.devices.set(a.InstanceId!, (this.devices.get(a.InstanceId!) ?? []).filter((d) => d !== a.Device));
      return [];
    } else if (end?.then !== 'stuck') return [{ ...a, State: 'attached' }];
    return [a];
  }

  private settle(v: Volume): void {
    if (v.State === 'creating') v.State = 'available';
    v.Attachments = (v.Attachments ?? []).filter((a) => a.State !== 'detaching').flatMap((a) => (a.State === 'attaching' ? this.settleAttach(a) : [a]));
    if (v.State === 'available' || v.State === 'in-use') v.State = v.Attachments.length ? 'in-use' : 'available';
  }

  describeVolumes(input: { VolumeIds?: string[]; Filters?: Filter[]; NextToken?: string }) {
    let found: Volume[];
    if (input.VolumeIds) {
      found = input.VolumeIds.map((id) => {
        const v = this.volumes.get(id);
        if (!v) throw awsError('InvalidVolume.NotFound', `The volume '${id}' does not exist.`);
        return v;
      });
    } else {
      const valueOf = (v: Volume, name: string) => (name === 'availability-zone' ? v.AvailabilityZone : v.Tags?.find((t) => `tag:${t.Key}` === name)?.Value);
      found = [...this.volumes.values()].filter((v) => (input.Filters ?? []).every((f) => f.Values!.includes(valueOf(v, f.Name!) ?? '')));
    }
    found.forEach((v) => this.settle(v));
    const start = Number(input.NextToken ?? 0);
    const page = found.slice(start, start + this.pageSize);
    const more = start + this.pageSize < found.length;
    return { Volumes: structuredClone(page), NextToken: more ? String(start + this.pageSize) : undefined };
  }

  createVolume(input: {
    Size?: number;
    SnapshotId?: string;
    ClientToken: string;
    AvailabilityZone?: string;
    VolumeType?: string;
    Iops?: number;
    MultiAttachEnabled?: boolean;
    TagSpecifications: { Tags: { Key: string; Value: string }[] }[];
  }) {
    const known = this.tokens.get(input.ClientToken);
    if (known) {
      // EC2 compares a reused token's request with the one that made the volume (not with the volume:
      // a create from a snapshot names no Size, and its volume has one).
      const first = this.tokenRequests.get(input.ClientToken);
      if (first && (first.Size !== input.Size || first.SnapshotId !== input.SnapshotId)) throw awsError('IdempotentParameterMismatch');
      // A volume deleted since: EC2 still answers the token with what it made.
      return structuredClone(this.volumes.get(known) ?? { VolumeId: known, State: 'deleted' as const });
    }
    const type = input.VolumeType ?? 'gp2';
    const from = input.SnapshotId ? this.snapshots.get(input.SnapshotId) : undefined;
    if (input.SnapshotId && !from) throw awsError('InvalidSnapshot.NotFound', `The snapshot '${input.SnapshotId}' does not exist.`);
    if (from && from.State !== 'completed') throw awsError('IncorrectState', `Snapshot '${input.SnapshotId}' is not completed.`);
    const size = input.Size ?? from?.VolumeSize ?? 0;
    const provisioned = type === 'io1' || type === 'io2';
    if (provisioned && input.Iops === undefined) throw awsError('InvalidParameterCombination', `The parameter iops must be specified for ${type} volumes.`);
    if (size < (MIN_SIZE[type] ?? 1)) throw awsError('InvalidParameterValue', `Volume of ${size}GiB is too small; minimum is ${MIN_SIZE[type]}GiB.`);
    if (input.MultiAttachEnabled && !provisioned) throw awsError('InvalidParameterCombination', `Multi-Attach is supported only for io1 and io2 volumes.`);
    const tags = input.TagSpecifications[0].Tags;
    const v = this.add(tags.find((t) => t.Key === 'ferry:backend-name')?.Value ?? '', size, tags.find((t) => t.Key === 'ferry:pool')?.Value ?? '', {
      ...(input.SnapshotId ? { SnapshotId: input.SnapshotId } : {}),
      State: 'creating',
      // The volume carries the request's tags, as on EC2 (whichever backend asked).
      Tags: structuredClone(tags),
      AvailabilityZone: input.AvailabilityZone ?? this.zone,
      VolumeType: type as Volume['VolumeType'],
      ...(input.Iops !== undefined ? { Iops: input.Iops } : {}),
      MultiAttachEnabled: input.MultiAttachEnabled === true,
    });
    this.tokens.set(input.ClientToken, v.VolumeId!);
    this.tokenRequests.set(input.ClientToken, { Size: input.Size, SnapshotId: input.SnapshotId });
    return structuredClone(v);
  }

  attachVolume(input: { VolumeId: string; InstanceId: string; Device: string }) {
    const v = this.volumes.get(input.VolumeId);
    if (!v) throw awsError('InvalidVolume.NotFound', `The volume '${input.VolumeId}' does not exist.`);
    if ((this.devices.get(input.InstanceId) ?? []).includes(input.Device)) throw awsError('InvalidParameterValue', `device ${input.Device} in use`);
    if ((this.instanceZones.get(input.InstanceId) ?? this.zone) !== v.AvailabilityZone) throw awsError('InvalidVolume.ZoneMismatch', `The volume '${v.VolumeId}' is not in the same availability zone as instance '${input.InstanceId}'`);
    const others = (v.Attachments ?? []).filter((a) => a.State !== 'detaching');
    if (others.some((a) => a.InstanceId === input.InstanceId) || (others.length > 0 && !v.MultiAttachEnabled)) throw awsError('VolumeInUse', `${v.VolumeId} is already attached to an instance`);
    v.Attachments!.push({ VolumeId: v.VolumeId, InstanceId: input.InstanceId, Device: input.Device, State: 'attaching' });
    this.devices.set(input.InstanceId, [...(this.devices.get(input.InstanceId) ?? []), input.Device]);
    return { State: 'attaching' };
  }

  detachVolume(input: { VolumeId: string; InstanceId: string }) {
    const v = this.volumes.get(input.VolumeId);
    if (!v) throw awsError('InvalidVolume.NotFound');
    const a = v.Attachments!.find((x) => x.InstanceId === input.InstanceId && x.State !== 'detaching');
    if (!a) throw awsError('IncorrectState', `Volume '${input.VolumeId}' is in the 'available' state.`);
    a.State = 'detaching';
    this.devices.set(input.InstanceId, (this.devices.get(input.InstanceId) ?? []).filter((d) => d !== a.Device));
    return { State: 'detaching' };
  }

  deleteVolume(input: { VolumeId: string }) {
    const v = this.volumes.get(input.VolumeId);
    if (!v) throw awsError('InvalidVolume.NotFound');
    if (v.Attachments!.length) throw awsError('VolumeInUse');
    this.volumes.delete(input.VolumeId);
    return {};
  }

  modifyVolume(input: { VolumeId: string; Size: number }) {
    this.volumes.get(input.VolumeId)!.Size = input.Size;
    return { VolumeModification: { VolumeId: input.VolumeId, TargetSize: input.Size, ModificationState: 'modifying' } };
  }

  describeInstances(input: { InstanceIds: string[] }) {
    const id = input.InstanceIds[0];
    const devices = this.devices.get(id);
    if (!devices) throw awsError('InvalidInstanceID.NotFound');
    return { Reservations: [{ Instances: [{ InstanceId: id, BlockDeviceMappings: devices.map((d) => ({ DeviceName: d })) }] }] };
  }

  createSnapshot(input: { VolumeId: string; TagSpecifications: { Tags: { Key: string; Value: string }[] }[] }): Snapshot {
    if (!this.volumes.has(input.VolumeId)) throw awsError('InvalidVolume.NotFound', `The volume '${input.VolumeId}' does not exist.`);
    const s: Snapshot = {
      SnapshotId: `snap-${this.zone}-${this.nextSnapshot++}`,
      VolumeId: input.VolumeId,
      VolumeSize: this.volumes.get(input.VolumeId)!.Size,
      StartTime: new Date(this.clock()),
      State: 'pending',
      Tags: input.TagSpecifications[0].Tags,
    };
    this.snapshots.set(s.SnapshotId!, s);
    return structuredClone(s);
  }

  /** CopySnapshot into this region from the peer fake of SourceRegion: its source must be completed, as on EC2. */
  copySnapshot(input: { SourceRegion: string; SourceSnapshotId: string; TagSpecifications?: { Tags: { Key: string; Value: string }[] }[] }): { SnapshotId: string } {
    const source = this.peers.get(input.SourceRegion)?.snapshots.get(input.SourceSnapshotId);
    if (!source) throw awsError('InvalidSnapshot.NotFound', `The snapshot '${input.SourceSnapshotId}' does not exist.`);
    if (source.State !== 'completed') throw awsError('IncorrectState', `Snapshot '${input.SourceSnapshotId}' is not completed.`);
    const s: Snapshot = { SnapshotId: `snap-${this.zone}-${this.nextSnapshot++}`, VolumeSize: source.VolumeSize, StartTime: new Date(this.clock()), State: 'pending', Tags: input.TagSpecifications?.[0]?.Tags ?? [] };
    this.snapshots.set(s.SnapshotId!, s);
    return { SnapshotId: s.SnapshotId! };
  }

  /** A new snapshot is pending until described once. */
  describeSnapshots(input: { SnapshotIds?: string[]; Filters?: Filter[] }) {
    const found = input.SnapshotIds
      ? input.SnapshotIds.map((id) => {
          const s = this.snapshots.get(id);
          if (!s) throw awsError('InvalidSnapshot.NotFound', `The snapshot '${id}' does not exist.`);
          return s;
        })
      : [...this.snapshots.values()].filter((s) => (input.Filters ?? []).every((f) => f.Values!.includes(s.Tags?.find((t) => `tag:${t.Key}` === f.Name)?.Value ?? '')));
    const out = structuredClone(found);
    for (const s of found) if (s.State === 'pending') s.State = 'completed';
    return { Snapshots: out };
  }

  /** CreateTags on volumes (and snapshots): adds or overwrites each key. */
  createTags(input: { Resources: string[]; Tags: { Key: string; Value?: string }[] }) {
    for (const id of input.Resources) {
      const r = this.volumes.get(id) ?? this.snapshots.get(id);
      if (!r) throw awsError(id.startsWith('snap-') ? 'InvalidSnapshot.NotFound' : 'InvalidVolume.NotFound', `The resource '${id}' does not exist.`);
      r.Tags = [...(r.Tags ?? []).filter((t) => !input.Tags.some((n) => n.Key === t.Key)), ...input.Tags];
    }
    return {};
  }

  /** DeleteTags: removes the keys named (a key that is not there is no error, as on EC2). */
  deleteTags(input: { Resources: string[]; Tags: { Key: string }[] }) {
    for (const id of input.Resources) {
      const r = this.volumes.get(id) ?? this.snapshots.get(id);
      if (!r) throw awsError('InvalidVolume.NotFound', `The resource '${id}' does not exist.`);
      r.Tags = (r.Tags ?? []).filter((t) => !input.Tags.some((n) => n.Key === t.Key));
    }
    return {};
  }

  deleteSnapshot(input: { SnapshotId: string }) {
    if (!this.snapshots.delete(input.SnapshotId)) throw awsError('InvalidSnapshot.NotFound', `The snapshot '${input.SnapshotId}' does not exist.`);
    return {};
  }
}

/** The EC2 commands the fake answers, and the method of the fake that answers each. */
const COMMANDS = [
  [DescribeVolumesCommand, 'describeVolumes'],
  [CreateVolumeCommand, 'createVolume'],
  [AttachVolumeCommand, 'attachVolume'],
  [DetachVolumeCommand, 'detachVolume'],
  [DeleteVolumeCommand, 'deleteVolume'],
  [ModifyVolumeCommand, 'modifyVolume'],
  [DescribeInstancesCommand, 'describeInstances'],
  [CreateSnapshotCommand, 'createSnapshot'],
  [DescribeSnapshotsCommand, 'describeSnapshots'],
  [DeleteSnapshotCommand, 'deleteSnapshot'],
  [CopySnapshotCommand, 'copySnapshot'],
  [CreateTagsCommand, 'createTags'],
  [DeleteTagsCommand, 'deleteTags'],
] as const;

/**
 * Routes every EC2 command the driver sends to the fake, or with a map of fakes by region
 * (fakeRegions) to the fake of the region of the client that sent it. `onCall` sees each command
 * before the fake answers it. The fake's method is looked up at each call, so a test may replace one.
 */
export function wireFakeEc2(ec2: AwsClientStub<EC2Client>, fake: FakeEc2 | Map<string, FakeEc2>, onCall?: (command: string, input: object) => void): void {
  for (const [Command, method] of COMMANDS) {
    const answer = (target: FakeEc2 | undefined, input: object) => {
      if (!target) throw awsError('AuthFailure', 'no fake EC2 for the region of this client');
      onCall?.(Command.name.replace(/Command$/, ''), input);
      return (target[method] as (i: object) => unknown).call(target, input);
    };
    ec2.on(Command as never).callsFake(
      fake instanceof Map ? async (input: object, getClient: () => EC2Client) => answer(fake.get(await getClient().config.region()), input) : (input: object) => answer(fake, input),
    );
  }
}

/** One FakeEc2 per region, each knowing the others (CopySnapshot), keyed by region: `eu-west-1a` makes `eu-west-1`. */
export function fakeRegions(backend: string, zones: string[]): Map<string, FakeEc2> {
  const fakes = new Map(zones.map((z) => [z.replace(/[a-z]$/, ''), new FakeEc2(backend, z)]));
  for (const f of fakes.values()) f.peers = fakes;
  return fakes;
}

/** An aws-ebs backend in eu-west-1a replicated to Frankfurt and Virginia: the fakeRegions(host, REPLICATED_EBS_ZONES) setup of the replication tests. */
export const REPLICATED_EBS_ZONES = ['eu-west-1a', 'eu-central-1a', 'us-east-1a'];
export function replicatedEbsBackend(host: string): BackendConfig {
  return {
    host,
    driver: 'aws-ebs',
    availabilityZone: 'eu-west-1a',
    ebsVolumeType: 'gp3',
    pools: [{ name: 'gp', totalCapacityGb: 100 }],
    serviceUuid: '44444444-4444-4444-8444-444444444444',
    volumeBackendName: 'ebs-r',
    replicationDevices: [
      { backend_id: 'frankfurt', availability_zone: 'eu-central-1a' },
      { backend_id: 'virginia', availability_zone: 'us-east-1a' },
    ],
  };
}
