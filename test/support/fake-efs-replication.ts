/**
 * EFS replication for the fake EFS (fake-efs.ts), as the EFS API reference and user guide describe
 * it, and a small data plane to show what replication carries:
 * - CreateReplicationConfiguration to an existing file system (the driver's way): the destination
 *   must exist in the destination Region (FileSystemNotFound), have its replication overwrite
 *   protection DISABLED (turned off by UpdateFileSystemProtection; BadRequest otherwise), be
 *   encrypted when the source is (ConflictException); a file system can be part of one replication
 *   configuration only, as source or destination (BadRequest); the source must be `available`
 *   (IncorrectFileSystemLifeCycleState). The destination's protection becomes REPLICATING: it is
 *   read-only, written only by replication.
 * - DescribeReplicationConfigurations by the source's or the destination's id (ReplicationNotFound
 *   when it is in none, FileSystemNotFound when it does not exist), or all of them. Status ENABLING,
 *   then ENABLED; each look completes the sync that was running (LastReplicatedTimestamp = when that
 *   sync began: everything written before it is on the replica) and begins the next; the first full
 *   sync takes `initialSyncLooks` looks. `fallBehind` freezes the syncs (a replication that falls
 *   behind: its LastReplicatedTimestamp ages); `setStatus` plays ERROR or PAUSED with a message.
 * - DeleteReplicationConfiguration by the source's id: DELETING, gone after `settleLooks` looks;
 *   then the destination's protection is re-enabled and it is writable again.
 * - UpdateFileSystemProtection: ReplicationAlreadyExists on a file system in a replication.
 * - The clock: every call moves it on by `tickMs` (at least to the real time), so a driver given
 *   `now: () => fake.replication.time` and the fake agree on what "after" means.
 * - Data (`write`, `read`): a write needs an available mount target, a file system not read-only
 *   (REPLICATING or DISABLED protection) and no Deny of ClientWrite to everyone in its policy.
 * Regions: fake EFSs linked with `linkEfsRegions` share one replication registry.
 */
import {
  CreateReplicationConfigurationCommand,
  DeleteReplicationConfigurationCommand,
  DescribeReplicationConfigurationsCommand,
  UntagResourceCommand,
  UpdateFileSystemProtectionCommand,
} from '@aws-sdk/client-efs';
import { awsError } from './fake-ec2.js';

/** An EFS error as the SDK throws it: `name` and `ErrorCode` its code, extra fields on it (FileSystemId). */
export const efsError = (name: string, message: string, extra: object = {}) => Object.assign(awsError(name, message), { ErrorCode: name, ...extra });

/** EFS's ThrottlingException as the client throws it once the SDK's retries are spent (`name` and `ErrorCode`; HTTP 429, as @aws-sdk/client-efs's model registers it). */
export const efsThrottle = () => Object.assign(efsError('ThrottlingException', 'Rate exceeded'), { $metadata: { httpStatusCode: 429 } });

/** What the replication needs of a fake EFS (fake-efs.ts FakeEfs). */
export interface EfsRegion {
  region: string;
  fileSystems: Map<string, { FileSystemId?: string; FileSystemArn?: string; LifeCycleState?: string; Encrypted?: boolean; OwnerId?: string; FileSystemProtection?: { ReplicationOverwriteProtection?: string } }>;
  mountTargets: Map<string, { FileSystemId?: string; LifeCycleState?: string }>;
  policies: Map<string, string>;
  settleLooks: number;
}

interface Replication {
  source: { region: string; id: string; arn: string };
  destination: { region: string; id: string };
  status: 'ENABLING' | 'ENABLED' | 'DELETING' | 'ERROR' | 'PAUSED';
  message?: string;
  created: number;
  looks: number;
  syncs: number;
  behind: boolean;
  syncStartedAt?: number;
  lastReplicated?: number;
}

type Files = Map<string, { content: string; at: number }>;

export class FakeEfsReplication {
  readonly regions = new Map<string, EfsRegion>();
  readonly replications = new Map<string, Replication>();
  /** Per file system: path -> content and when it was written. */
  readonly files = new Map<string, Files>();
  /** Looks in ENABLED before the first full sync completes. */
  initialSyncLooks = 1;
  tickMs = 1;
  time = Date.now();

  tick(): void {
    this.time = Math.max(this.time + this.tickMs, Date.now());
  }

  private fs(region: string, id: string | undefined) {
    const fs = id ? this.regions.get(region)?.fileSystems.get(id) : undefined;
    if (!fs) throw efsError('FileSystemNotFound', `File system '${id}' does not exist.`);
    return fs;
  }

  /** The replication a file system is part of, as source or destination. */
  of(region: string, id: string): Replication | undefined {
    return [...this.replications.values()].find((r) => (r.source.region === region && r.source.id === id) || (r.destination.region === region && r.destination.id === id));
  }

  private describe(r: Replication) {
    return {
      SourceFileSystemId: r.source.id,
      SourceFileSystemRegion: r.source.region,
      SourceFileSystemArn: r.source.arn,
      OriginalSourceFileSystemArn: r.source.arn,
      CreationTime: new Date(r.created),
      Destinations: [
        {
          Status: r.status,
          FileSystemId: r.destination.id,
          Region: r.destination.region,
          ...(r.lastReplicated !== undefined ? { LastReplicatedTimestamp: new Date(r.lastReplicated) } : {}),
          ...(r.message ? { StatusMessage: r.message } : {}),
        },
      ],
    };
  }

  /** One look moves a replication on (module comment). */
  private advance(r: Replication): void {
    const settle = this.regions.get(r.source.region)!.settleLooks;
    r.looks++;
    if (r.status === 'ENABLING' && r.looks >= settle) {
      r.status = 'ENABLED';
      r.looks = 0;
      r.syncStartedAt = this.time;
    } else if (r.status === 'ENABLED' && !r.behind && (r.syncs > 0 || r.looks >= this.initialSyncLooks)) {
      this.sync(r, r.syncStartedAt!);
      r.syncs++;
      r.syncStartedAt = this.time;
    } else if (r.status === 'DELETING' && r.looks >= settle) {
      this.replications.delete(r.source.id);
      const dest = this.regions.get(r.destination.region)?.fileSystems.get(r.destination.id);
      if (dest) dest.FileSystemProtection = { ReplicationOverwriteProtection: 'ENABLED' };
    }
  }

  /** The replica gets everything written to the source before `upTo` (and loses what the source no longer has). */
  private sync(r: Replication, upTo: number): void {
    const copy: Files = new Map([...(this.files.get(r.source.id) ?? new Map())].filter(([, f]) => f.at <= upTo));
    this.files.set(r.destination.id, copy);
    r.lastReplicated = upTo;
  }

  create(region: string, i: { SourceFileSystemId?: string; Destinations?: { Region?: string; FileSystemId?: string; AvailabilityZoneName?: string }[] }) {
    const source = this.fs(region, i.SourceFileSystemId);
    if (source.LifeCycleState !== 'available') throw efsError('IncorrectFileSystemLifeCycleState', `File system '${i.SourceFileSystemId}' is ${source.LifeCycleState}.`);
    if (i.Destinations?.length !== 1) throw efsError('BadRequest', 'Exactly one destination is supported.');
    const [d] = i.Destinations;
    const destRegion = d!.Region ?? region;
    if (!this.regions.has(destRegion)) throw efsError('BadRequest', `Region '${destRegion}' is not enabled for this account.`);
    if (!d!.FileSystemId) throw efsError('BadRequest', 'This fake replicates to an existing file system only (the driver never asks EFS to make one).');
    const dest = this.fs(destRegion, d!.FileSystemId);
    for (const [r, id] of [[region, source.FileSystemId!], [destRegion, dest.FileSystemId!]] as const) {
      if (this.of(r, id)) throw efsError('BadRequest', `File system '${id}' is already part of a replication configuration.`);
    }
    if (dest.FileSystemProtection?.ReplicationOverwriteProtection !== 'DISABLED') throw efsError('BadRequest', `File system '${dest.FileSystemId}' has replication overwrite protection enabled.`);
    if (source.Encrypted && !dest.Encrypted) throw efsError('ConflictException', 'The source file system is encrypted but the destination is not.');
    dest.FileSystemProtection = { ReplicationOverwriteProtection: 'REPLICATING' };
    const r: Replication = { source: { region, id: source.FileSystemId!, arn: source.FileSystemArn! }, destination: { region: destRegion, id: dest.FileSystemId! }, status: 'ENABLING', created: this.time, looks: 0, syncs: 0, behind: false };
    this.replications.set(source.FileSystemId!, r);
    return this.describe(r);
  }

  describeAll(region: string, i: { FileSystemId?: string; NextToken?: string; MaxResults?: number }) {
    let found: Replication[];
    if (i.FileSystemId) {
      this.fs(region, i.FileSystemId);
      const r = this.of(region, i.FileSystemId);
      if (!r) throw efsError('ReplicationNotFound', `File system '${i.FileSystemId}' has no replication configuration.`);
      found = [r];
    } else found = [...this.replications.values()].filter((r) => r.source.region === region || r.destination.region === region);
    const out = found.map((r) => this.describe(r));
    for (const r of found) this.advance(r);
    return { Replications: out };
  }

  delete(region: string, i: { SourceFileSystemId?: string }) {
    this.fs(region, i.SourceFileSystemId);
    const r = this.of(region, i.SourceFileSystemId!);
    if (!r) throw efsError('ReplicationNotFound', `File system '${i.SourceFileSystemId}' has no replication configuration.`);
    if (r.status !== 'DELETING') Object.assign(r, { status: 'DELETING', looks: 0 });
    return {};
  }

  updateProtection(region: string, i: { FileSystemId?: string; ReplicationOverwriteProtection?: string }) {
    const fs = this.fs(region, i.FileSystemId);
    if (this.of(region, fs.FileSystemId!)) throw efsError('ReplicationAlreadyExists', `File system '${fs.FileSystemId}' is part of a replication configuration.`);
    if (i.ReplicationOverwriteProtection !== 'ENABLED' && i.ReplicationOverwriteProtection !== 'DISABLED') throw efsError('BadRequest', 'ReplicationOverwriteProtection must be ENABLED or DISABLED.');
    fs.FileSystemProtection = { ReplicationOverwriteProtection: i.ReplicationOverwriteProtection };
    return { ReplicationOverwriteProtection: i.ReplicationOverwriteProtection };
  }

  /** The replication of a source file system, for tests that steer it. */
  bySource(sourceId: string): Replication {
    const r = this.replications.get(sourceId);
    if (!r) throw new Error(`no replication from ${sourceId}`);
    return r;
  }

  fallBehind(sourceId: string, behind = true): void {
    this.bySource(sourceId).behind = behind;
  }

  setStatus(sourceId: string, status: 'ERROR' | 'PAUSED' | 'ENABLED', message?: string): void {
    Object.assign(this.bySource(sourceId), { status, message });
  }

  // ---- data ------------------------------------------------------------------------------------

  /** Why a client could not write to a file system now, or undefined when it can. */
  private refusal(region: string, id: string): string | undefined {
    const efs = this.regions.get(region)!;
    const fs = this.fs(region, id);
    if (!['available', 'creating'].includes(fs.LifeCycleState ?? '') || ![...efs.mountTargets.values()].some((m) => m.FileSystemId === id && m.LifeCycleState === 'available')) return 'no mount target: unreachable';
    if (['REPLICATING', 'DISABLED'].includes(fs.FileSystemProtection?.ReplicationOverwriteProtection ?? '')) return 'read-only file system (replication destination)';
    const policy = efs.policies.get(id);
    const statements = policy ? (JSON.parse(policy) as { Statement: { Effect: string; Principal?: { AWS?: string | string[] }; Action: string | string[] }[] }).Statement : [];
    const denied = statements.some((s) => s.Effect === 'Deny' && [s.Principal?.AWS].flat().includes('*') && [s.Action].flat().includes('elasticfilesystem:ClientWrite'));
    return denied ? 'permission denied (the file system policy denies ClientWrite)' : undefined;
  }

  write(region: string, id: string, path: string, content: string): void {
    const why = this.refusal(region, id);
    if (why) throw new Error(`write ${path} to ${id}: ${why}`);
    this.tick();
    const files = this.files.get(id) ?? new Map();
    files.set(path, { content, at: this.time });
    this.files.set(id, files);
  }

  read(id: string, path: string): string | undefined {
    return this.files.get(id)?.get(path)?.content;
  }

  canWrite(region: string, id: string): boolean {
    return this.refusal(region, id) === undefined;
  }
}

/** Fake EFSs of several regions sharing one replication registry (a cross-Region replication). */
export function linkEfsRegions(fakes: { region: string; replication: FakeEfsReplication }[]): FakeEfsReplication {
  const shared = fakes[0]!.replication;
  for (const f of fakes) {
    shared.regions.set(f.region, f as unknown as EfsRegion);
    f.replication = shared;
  }
  return shared;
}

type Stub = { on(command: never): { callsFake(f: (input: Record<string, unknown>) => unknown): unknown } };

/** Routes the replication commands (and UntagResource) of an EFS client stub to a fake EFS (fake-efs.ts wireFakeEfs calls it). */
export function wireFakeEfsReplication(stub: Stub, fake: EfsRegion & { replication: FakeEfsReplication; call(service: 'efs', command: string, input: Record<string, unknown>, answer: () => unknown): unknown }): void {
  const routes: [new (input: never) => unknown, (i: Record<string, unknown>) => unknown][] = [
    [CreateReplicationConfigurationCommand, (i) => fake.replication.create(fake.region, i)],
    [DescribeReplicationConfigurationsCommand, (i) => fake.replication.describeAll(fake.region, i)],
    [DeleteReplicationConfigurationCommand, (i) => fake.replication.delete(fake.region, i)],
    [UpdateFileSystemProtectionCommand, (i) => fake.replication.updateProtection(fake.region, i)],
    [
      UntagResourceCommand,
      (i) => {
        const fs = fake.fileSystems.get(i.ResourceId as string) as { Tags?: { Key?: string }[] } | undefined;
        if (!fs) throw efsError('FileSystemNotFound', `File system '${String(i.ResourceId)}' does not exist.`);
        fs.Tags = (fs.Tags ?? []).filter((t) => !(i.TagKeys as string[]).includes(t.Key!));
        return {};
      },
    ],
  ];
  for (const [Command, answer] of routes) stub.on(Command as never).callsFake((input) => fake.call('efs', Command.name.replace(/Command$/, ''), input, () => answer(input)));
}
