/**
 * A small model of EFS (file systems, mount targets, file system policies, tags) and of EC2's
 * security-group calls, behind aws-sdk-client-mock, for the aws-efs share driver's tests and its
 * run of the share driver contract (test/contracts/share-driver.ts). Replies follow the EFS and
 * EC2 API references: a file system and a mount target are `creating` when made and `available`
 * once described (`settleLooks` describes), `deleting` and then gone the same way; a reused
 * CreationToken answers FileSystemAlreadyExists with the id of the file system it made, until that
 * one is gone; FileSystemNotFound, MountTargetNotFound, PolicyNotFound, InvalidGroup.NotFound for
 * what is not there (DescribeFileSystems by the id or the creation token of a deleted one too, as
 * its reference says; a token never used lists nothing). It refuses what AWS refuses: DeleteFileSystem while mount targets exist
 * (FileSystemInUse), a mount target on a file system not available or a second one in a zone
 * (MountTargetConflict), a policy that is malformed, names an unknown role (when `knownRoles` is
 * set) or grants `*` without a condition (block public access), a security group still used by a
 * mount target (DependencyViolation), an ingress rule twice (InvalidPermission.Duplicate) and the
 * revoke of one not there (InvalidPermission.NotFound), a file system in a replication deleted.
 * Each code is one the API reference lists for that operation (@aws-sdk/client-efs's model) or a
 * common error (`efsThrottle`). Any call can fail before or after its effect (`failNext`): a
 * throttle, a lost reply. Replication, the clock, data: fake-efs-replication.ts (`replication`).
 */
import { AuthorizeSecurityGroupIngressCommand, CreateSecurityGroupCommand, DeleteSecurityGroupCommand, DescribeSecurityGroupsCommand, RevokeSecurityGroupIngressCommand, UpdateSecurityGroupRuleDescriptionsIngressCommand, type EC2Client, type Filter, type IpPermission, type SecurityGroup } from '@aws-sdk/client-ec2';
import { CreateFileSystemCommand, CreateMountTargetCommand, DeleteFileSystemCommand, DeleteMountTargetCommand, DescribeFileSystemPolicyCommand, DescribeFileSystemsCommand, DescribeMountTargetsCommand, PutFileSystemPolicyCommand, TagResourceCommand, type EFSClient, type FileSystemDescription, type MountTargetDescription, type Tag } from '@aws-sdk/client-efs';
import type { AwsClientStub } from 'aws-sdk-client-mock';
import type { AwsEfsShareBackendConfig } from '../../functions/drivers/share/driver.js';
import { awsError } from './fake-ec2.js';
import { efsError, FakeEfsReplication, wireFakeEfsReplication } from './fake-efs-replication.js';

export const FAKE_EFS_ACCOUNT = '111122223333';
export const FAKE_EFS_REGION = 'eu-west-1';
export const FAKE_EFS_VPC = 'vpc-0feed';
/** The fake's subnets and their zones: one per zone, as a backend configures them. */
export const FAKE_EFS_SUBNETS: Record<string, string> = { 'subnet-0a1': 'eu-west-1a', 'subnet-0b2': 'eu-west-1b' };

/** An aws-efs backend on the fake's VPC and subnets. */
export function efsBackend(host: string, over: Partial<AwsEfsShareBackendConfig> = {}): AwsEfsShareBackendConfig {
  return {
    host,
    driver: 'aws-efs',
    region: FAKE_EFS_REGION,
    vpcId: FAKE_EFS_VPC,
    subnetIds: Object.keys(FAKE_EFS_SUBNETS),
    pools: [{ name: 'pool0', totalCapacityGb: 10 }],
    shareBackendName: host.split('@')[1]!,
    protocols: ['NFS'],
    ...over,
  };
}

const CLIENT_ACTIONS = new Set(['elasticfilesystem:ClientMount', 'elasticfilesystem:ClientWrite', 'elasticfilesystem:ClientRootAccess']);
const PRINCIPAL_RE = /^(\*|\d{12}|arn:aws:iam::(\d{12}):(root|role\/[\w+=,.@/-]+|user\/[\w+=,.@/-]+))$/;
const SG_TEXT_RE = /^[a-zA-Z0-9. _\-:/()#,@[\]+=&;{}!$*]{0,255}$/;
const list = <T>(v: T | T[] | undefined): T[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);

type Statement = { Sid?: string; Effect: string; Principal?: { AWS?: string | string[] } | string; Action: string | string[]; Resource?: string; Condition?: object };
type Policy = { Statement: Statement[]; [k: string]: unknown };

export class FakeEfs {
  fileSystems = new Map<string, FileSystemDescription>();
  mountTargets = new Map<string, MountTargetDescription & { SecurityGroups: string[] }>();
  policies = new Map<string, string>();
  groups = new Map<string, SecurityGroup>();
  /** The VPC's subnets and their zones. */
  subnets: Record<string, string> = { ...FAKE_EFS_SUBNETS };
  /** How many describes a `creating` or `deleting` thing is seen so before it settles. */
  settleLooks = 1;
  /** Roles of the fake's account that exist; when set, a policy naming another is refused as IAM does. */
  knownRoles?: Set<string>;
  /** File system ids not yet seen by DescribeFileSystems by token or as a list (eventual consistency); by id they are. */
  hiddenFileSystems = new Set<string>();
  private deletedTokens = new Set<string>();
  /** Security group ids whose tags the tag filters do not see yet. */
  untaggedGroups = new Set<string>();
  pageSize = 2;
  /** Every call, in order (service, command, input). */
  calls: { service: 'efs' | 'ec2'; command: string; input: Record<string, unknown> }[] = [];
  private looks = new Map<string, number>();
  private failures = new Map<string, { error: Error; after: boolean }[]>();
  private next = 1;
  replication = new FakeEfsReplication();

  constructor(readonly region = FAKE_EFS_REGION) {
    this.replication.regions.set(region, this);
  }

  /** The next call of `command` fails with `error`: before its effect, or after it (`after`: a lost reply). */
  failNext(command: string, error: Error, options: { after?: boolean } = {}): void {
    this.failures.set(command, [...(this.failures.get(command) ?? []), { error, after: options.after === true }]);
  }

  /** What a file system meters as used (SizeInBytes), as EFS reports it later. */
  setUsage(fileSystemId: string, bytes: number): void {
    this.fileSystems.get(fileSystemId)!.SizeInBytes = { Value: bytes, ValueInStandard: bytes, ValueInIA: 0, ValueInArchive: 0 };
  }

  /** The one live file system tagged with this share name (tests read it). */
  fileSystemNamed(name: string): FileSystemDescription | undefined {
    return [...this.fileSystems.values()].find((f) => f.Tags?.some((t) => t.Key === 'ferry:share-name' && t.Value === name) && f.LifeCycleState !== 'deleting');
  }

  groupNamed(name: string): SecurityGroup | undefined {
    return [...this.groups.values()].find((g) => g.Tags?.some((t) => t.Key === 'ferry:share-name' && t.Value === name));
  }

  policyOf(fileSystemId: string): Policy | undefined {
    return this.policies.has(fileSystemId) ? (JSON.parse(this.policies.get(fileSystemId)!) as Policy) : undefined;
  }

  call(service: 'efs' | 'ec2', command: string, input: Record<string, unknown>, answer: () => unknown): unknown {
    this.calls.push({ service, command, input: structuredClone(input) });
    this.replication.tick();
    const failure = this.failures.get(command)?.shift();
    if (failure && !failure.after) throw failure.error;
    const out = answer();
    if (failure) throw failure.error;
    return out;
  }

  /** A thing in a transitional state moves on once it has been seen `settleLooks` times. */
  private seen(id: string, settle: () => void): void {
    const n = (this.looks.get(id) ?? 0) + 1;
    if (n < this.settleLooks) this.looks.set(id, n);
    else {
      this.looks.delete(id);
      settle();
    }
  }

  private fs(id: string | undefined): FileSystemDescription {
    const fs = id ? this.fileSystems.get(id) : undefined;
    if (!fs) throw efsError('FileSystemNotFound', `File system '${id}' does not exist.`);
    return fs;
  }

  private liveMountTargets(fileSystemId: string) {
    return [...this.mountTargets.values()].filter((m) => m.FileSystemId === fileSystemId);
  }

  // ---- EFS -------------------------------------------------------------------------------------

  createFileSystem(i: { CreationToken?: string; PerformanceMode?: string; ThroughputMode?: string; Encrypted?: boolean; Tags?: Tag[] }) {
    if (!i.CreationToken || i.CreationToken.length > 64) throw efsError('BadRequest', 'CreationToken must be 1 to 64 characters.');
    const known = [...this.fileSystems.values()].find((f) => f.CreationToken === i.CreationToken);
    if (known) throw efsError('FileSystemAlreadyExists', `File system '${known.FileSystemId}' already exists with creation token '${i.CreationToken}'`, { FileSystemId: known.FileSystemId });
    if (i.PerformanceMode === 'maxIO' && i.ThroughputMode === 'elastic') throw efsError('BadRequest', 'Performance mode maxIO is not supported with throughput mode elastic.');
    const id = `fs-${(this.next++).toString(16).padStart(17, '0')}`;
    const fs: FileSystemDescription = {
      OwnerId: FAKE_EFS_ACCOUNT,
      CreationToken: i.CreationToken,
      FileSystemId: id,
      FileSystemArn: `arn:aws:elasticfilesystem:${this.region}:${FAKE_EFS_ACCOUNT}:file-system/${id}`,
      CreationTime: new Date(),
      LifeCycleState: 'creating',
      Name: i.Tags?.find((t) => t.Key === 'Name')?.Value,
      NumberOfMountTargets: 0,
      SizeInBytes: { Value: 6144, ValueInStandard: 6144, ValueInIA: 0, ValueInArchive: 0 },
      PerformanceMode: (i.PerformanceMode ?? 'generalPurpose') as FileSystemDescription['PerformanceMode'],
      ThroughputMode: (i.ThroughputMode ?? 'bursting') as FileSystemDescription['ThroughputMode'],
      Encrypted: i.Encrypted === true,
      FileSystemProtection: { ReplicationOverwriteProtection: 'ENABLED' },
      Tags: structuredClone(i.Tags ?? []),
    };
    this.fileSystems.set(id, fs);
    return structuredClone(fs);
  }

  describeFileSystems(i: { FileSystemId?: string; CreationToken?: string; Marker?: string; MaxItems?: number }) {
    const found = i.FileSystemId
      ? [this.fs(i.FileSystemId)]
      : [...this.fileSystems.values()].filter((f) => !this.hiddenFileSystems.has(f.FileSystemId!) && (i.CreationToken === undefined || f.CreationToken === i.CreationToken));
    if (i.CreationToken && found.length === 0 && this.deletedTokens.has(i.CreationToken)) throw efsError('FileSystemNotFound', `File system with creation token '${i.CreationToken}' does not exist.`);
    const start = i.FileSystemId || i.CreationToken ? 0 : Number(i.Marker ?? 0);
    const size = i.FileSystemId || i.CreationToken ? found.length : Math.min(i.MaxItems ?? this.pageSize, this.pageSize);
    const page = found.slice(start, start + size);
    const out = page.map((f) => structuredClone({ ...f, NumberOfMountTargets: this.liveMountTargets(f.FileSystemId!).length }));
    for (const f of page) {
      if (f.LifeCycleState === 'creating') this.seen(f.FileSystemId!, () => (f.LifeCycleState = 'available'));
      else if (f.LifeCycleState === 'deleting') this.seen(f.FileSystemId!, () => this.fileSystems.delete(f.FileSystemId!) && this.deletedTokens.add(f.CreationToken!) && this.policies.delete(f.FileSystemId!));
    }
    return { FileSystems: out, ...(start + size < found.length ? { NextMarker: String(start + size) } : {}) };
  }

  deleteFileSystem(i: { FileSystemId: string }) {
    const fs = this.fs(i.FileSystemId);
    if (this.liveMountTargets(i.FileSystemId).length > 0) throw efsError('FileSystemInUse', `File system '${i.FileSystemId}' has mount targets.`);
    if (this.replication.of(this.region, i.FileSystemId)) throw efsError('FileSystemInUse', `File system '${i.FileSystemId}' is part of a replication configuration.`);
    // DeleteFileSystem's reference lists BadRequest, FileSystemInUse, FileSystemNotFound only (no lifecycle-state error).
    if (fs.LifeCycleState === 'creating' || fs.LifeCycleState === 'updating') throw efsError('BadRequest', `File system '${i.FileSystemId}' is ${fs.LifeCycleState}.`);
    fs.LifeCycleState = 'deleting';
    return {};
  }

  createMountTarget(i: { FileSystemId: string; SubnetId: string; SecurityGroups?: string[] }) {
    const fs = this.fs(i.FileSystemId);
    if (fs.LifeCycleState !== 'available') throw efsError('IncorrectFileSystemLifeCycleState', `File system '${i.FileSystemId}' is ${fs.LifeCycleState}.`);
    const zone = this.subnets[i.SubnetId];
    if (!zone) throw efsError('SubnetNotFound', `Subnet '${i.SubnetId}' does not exist.`);
    if (this.liveMountTargets(i.FileSystemId).some((m) => m.AvailabilityZoneName === zone)) throw efsError('MountTargetConflict', `File system '${i.FileSystemId}' already has a mount target in ${zone}.`);
    const groups = i.SecurityGroups ?? [];
    if (groups.length > 5) throw efsError('SecurityGroupLimitExceeded', 'At most 5 security groups.');
    for (const g of groups) if (this.groups.get(g)?.VpcId !== FAKE_EFS_VPC) throw efsError('SecurityGroupNotFound', `Security group '${g}' does not exist in the subnet's VPC.`);
    const id = `fsmt-${(this.next++).toString(16).padStart(17, '0')}`;
    const m = { OwnerId: FAKE_EFS_ACCOUNT, MountTargetId: id, FileSystemId: i.FileSystemId, SubnetId: i.SubnetId, LifeCycleState: 'creating' as const, IpAddress: `10.0.${this.next % 250}.${this.next % 250}`, NetworkInterfaceId: `eni-${id.slice(5)}`, AvailabilityZoneName: zone, VpcId: FAKE_EFS_VPC, SecurityGroups: groups };
    this.mountTargets.set(id, m);
    const { SecurityGroups: _groups, ...reply } = m;
    return structuredClone(reply);
  }

  describeMountTargets(i: { FileSystemId?: string; MountTargetId?: string; Marker?: string }) {
    let found;
    if (i.MountTargetId) {
      const m = this.mountTargets.get(i.MountTargetId);
      if (!m) throw efsError('MountTargetNotFound', `Mount target '${i.MountTargetId}' does not exist.`);
      found = [m];
    } else found = this.liveMountTargets(this.fs(i.FileSystemId).FileSystemId!);
    const start = Number(i.Marker ?? 0);
    const page = found.slice(start, start + this.pageSize);
    const out = page.map(({ SecurityGroups: _groups, ...m }) => structuredClone(m));
    for (const m of page) {
      if (m.LifeCycleState === 'creating') this.seen(m.MountTargetId!, () => (m.LifeCycleState = 'available'));
      else if (m.LifeCycleState === 'deleting') this.seen(m.MountTargetId!, () => this.mountTargets.delete(m.MountTargetId!));
    }
    return { MountTargets: out, ...(start + this.pageSize < found.length ? { NextMarker: String(start + this.pageSize) } : {}) };
  }

  deleteMountTarget(i: { MountTargetId: string }) {
    const m = this.mountTargets.get(i.MountTargetId);
    if (!m) throw efsError('MountTargetNotFound', `Mount target '${i.MountTargetId}' does not exist.`);
    if (m.LifeCycleState === 'creating') throw efsError('BadRequest', `Mount target '${i.MountTargetId}' is creating.`);
    m.LifeCycleState = 'deleting';
    return {};
  }

  putFileSystemPolicy(i: { FileSystemId: string; Policy: string }) {
    const fs = this.fs(i.FileSystemId);
    if (fs.LifeCycleState !== 'available') throw efsError('IncorrectFileSystemLifeCycleState', `File system '${i.FileSystemId}' is ${fs.LifeCycleState}.`);
    if (i.Policy.length > 20_000) throw efsError('InvalidPolicyException', 'Policy exceeds 20,000 characters.');
    let policy: Policy;
    try {
      policy = JSON.parse(i.Policy) as Policy;
    } catch {
      throw efsError('InvalidPolicyException', 'Policy is not valid JSON.');
    }
    const statements = list(policy.Statement);
    if (statements.length === 0) throw efsError('InvalidPolicyException', 'Policy has no statement.');
    for (const [n, s] of statements.entries()) {
      if (s.Effect !== 'Allow' && s.Effect !== 'Deny') throw efsError('InvalidPolicyException', `Statement ${n}: invalid Effect.`);
      if (!list(s.Action).length || !list(s.Action).every((a) => CLIENT_ACTIONS.has(a) || a.startsWith('elasticfilesystem:'))) throw efsError('InvalidPolicyException', `Statement ${n}: invalid Action.`);
      const principals = typeof s.Principal === 'string' ? [s.Principal] : list(s.Principal?.AWS);
      for (const p of principals) {
        const m = PRINCIPAL_RE.exec(p);
        if (!m) throw efsError('InvalidPolicyException', `Invalid principal in policy: ${p}`);
        const role = m[3]?.startsWith('role/') ? m[3].slice(5) : undefined;
        if (role && m[2] === FAKE_EFS_ACCOUNT && this.knownRoles && !this.knownRoles.has(role)) throw efsError('InvalidPolicyException', `Invalid principal in policy: ${p}`);
      }
      // Block public access (on for new file systems): `*` allowed only under a condition such as AccessedViaMountTarget.
      if (s.Effect === 'Allow' && principals.includes('*') && !s.Condition) throw efsError('InvalidPolicyException', 'Policy would grant public access to the file system; block public access is on.');
    }
    const stored = { ...policy, Statement: statements.map((s, n) => ({ Sid: s.Sid ?? `efs-statement-${n}`, ...s, Resource: s.Resource ?? fs.FileSystemArn })) };
    this.policies.set(i.FileSystemId, JSON.stringify(stored, null, 4));
    return { FileSystemId: i.FileSystemId, Policy: this.policies.get(i.FileSystemId) };
  }

  describeFileSystemPolicy(i: { FileSystemId: string }) {
    this.fs(i.FileSystemId);
    if (!this.policies.has(i.FileSystemId)) throw efsError('PolicyNotFound', `File system '${i.FileSystemId}' has the default policy.`);
    return { FileSystemId: i.FileSystemId, Policy: this.policies.get(i.FileSystemId) };
  }

  tagResource(i: { ResourceId: string; Tags: Tag[] }) {
    const fs = this.fs(i.ResourceId);
    fs.Tags = [...(fs.Tags ?? []).filter((t) => !i.Tags.some((n) => n.Key === t.Key)), ...i.Tags];
    return {};
  }

  // ---- EC2 security groups ---------------------------------------------------------------------

  private group(id: string | undefined): SecurityGroup {
    const g = id ? this.groups.get(id) : undefined;
    if (!g) throw awsError('InvalidGroup.NotFound', `The security group '${id}' does not exist`);
    return g;
  }

  describeSecurityGroups(i: { GroupIds?: string[]; Filters?: Filter[] }) {
    const valueOf = (g: SecurityGroup, name: string) =>
      name === 'vpc-id' ? g.VpcId : name === 'group-name' ? g.GroupName : name === 'group-id' ? g.GroupId : this.untaggedGroups.has(g.GroupId!) ? undefined : g.Tags?.find((t) => `tag:${t.Key}` === name)?.Value;
    const found = i.GroupIds ? i.GroupIds.map((id) => this.group(id)) : [...this.groups.values()].filter((g) => (i.Filters ?? []).every((f) => f.Values!.includes(valueOf(g, f.Name!) ?? '')));
    return { SecurityGroups: structuredClone(found) };
  }

  createSecurityGroup(i: { GroupName: string; Description: string; VpcId?: string; TagSpecifications?: { Tags?: { Key: string; Value: string }[] }[] }) {
    if (i.VpcId !== FAKE_EFS_VPC) throw awsError('InvalidVpcID.NotFound', `The vpc ID '${i.VpcId}' does not exist`);
    if (i.GroupName.startsWith('sg-') || !SG_TEXT_RE.test(i.GroupName) || !SG_TEXT_RE.test(i.Description)) throw awsError('InvalidParameterValue', 'Invalid group name or description.');
    if ([...this.groups.values()].some((g) => g.VpcId === i.VpcId && g.GroupName === i.GroupName)) throw awsError('InvalidGroup.Duplicate', `The security group '${i.GroupName}' already exists for VPC '${i.VpcId}'`);
    const GroupId = `sg-${(this.next++).toString(16).padStart(17, '0')}`;
    const Tags = structuredClone(i.TagSpecifications?.[0]?.Tags ?? []);
    this.groups.set(GroupId, { GroupId, GroupName: i.GroupName, Description: i.Description, VpcId: i.VpcId, OwnerId: FAKE_EFS_ACCOUNT, Tags, IpPermissions: [], IpPermissionsEgress: [{ IpProtocol: '-1', IpRanges: [{ CidrIp: '0.0.0.0/0' }] }] });
    return { GroupId, Tags };
  }

  /** Each (permission, source) of a request: the group's permission of the same protocol and ports, and the source (a range, or a group pair) there. */
  private ranges(g: SecurityGroup, perms: IpPermission[]) {
    return perms.flatMap((p) =>
      [
        ...(p.IpRanges ?? []).map((r) => ({ kind: 'IpRanges' as const, cidr: r.CidrIp!, Description: r.Description })),
        ...(p.Ipv6Ranges ?? []).map((r) => ({ kind: 'Ipv6Ranges' as const, cidr: r.CidrIpv6!, Description: r.Description })),
        ...(p.UserIdGroupPairs ?? []).map((r) => ({ kind: 'UserIdGroupPairs' as const, cidr: r.GroupId!, Description: r.Description })),
      ].map((r) => {
        const held = g.IpPermissions!.find((h) => h.IpProtocol === p.IpProtocol && h.FromPort === p.FromPort && h.ToPort === p.ToPort);
        const range = (held?.[r.kind] as { CidrIp?: string; CidrIpv6?: string; GroupId?: string; Description?: string }[] | undefined)?.find((x) => (x.CidrIp ?? x.CidrIpv6 ?? x.GroupId) === r.cidr);
        return { p, r, held, range };
      }),
    );
  }

  authorizeSecurityGroupIngress(i: { GroupId: string; IpPermissions: IpPermission[] }) {
    const g = this.group(i.GroupId);
    const ranges = this.ranges(g, i.IpPermissions);
    for (const { p, r, range } of ranges) {
      if (range) throw awsError('InvalidPermission.Duplicate', `the specified rule "peer: ${r.cidr}, ${p.IpProtocol?.toUpperCase()}, from port: ${p.FromPort}, to port: ${p.ToPort}, ALLOW" already exists`);
      if (r.Description !== undefined && !SG_TEXT_RE.test(r.Description)) throw awsError('InvalidParameterValue', 'Invalid rule description.');
      if (r.kind === 'UserIdGroupPairs' && !this.groups.has(r.cidr)) throw awsError('InvalidGroup.NotFound', `The security group '${r.cidr}' does not exist`);
      if (r.kind === 'IpRanges') {
        const [addr, bits] = r.cidr.split('/');
        const value = addr!.split('.').reduce((v, o) => v * 256 + Number(o), 0);
        if (bits === undefined || value % 2 ** (32 - Number(bits)) !== 0) throw awsError('InvalidParameterValue', `CIDR block ${r.cidr} is malformed`);
      }
    }
    for (const { p, r } of ranges) {
      let held = g.IpPermissions!.find((h) => h.IpProtocol === p.IpProtocol && h.FromPort === p.FromPort && h.ToPort === p.ToPort);
      if (!held) g.IpPermissions!.push((held = { IpProtocol: p.IpProtocol, FromPort: p.FromPort, ToPort: p.ToPort, IpRanges: [], Ipv6Ranges: [], UserIdGroupPairs: [], PrefixListIds: [] }));
      (held[r.kind] as object[]).push(r.kind === 'IpRanges' ? { CidrIp: r.cidr, Description: r.Description } : r.kind === 'Ipv6Ranges' ? { CidrIpv6: r.cidr, Description: r.Description } : { GroupId: r.cidr, UserId: FAKE_EFS_ACCOUNT, Description: r.Description });
    }
    return { Return: true };
  }

  revokeSecurityGroupIngress(i: { GroupId: string; IpPermissions: IpPermission[] }) {
    const g = this.group(i.GroupId);
    const ranges = this.ranges(g, i.IpPermissions);
    if (ranges.length === 0 || ranges.some((x) => !x.range)) throw awsError('InvalidPermission.NotFound', 'The specified rule does not exist in this security group.');
    for (const { held, range } of ranges) for (const k of ['IpRanges', 'Ipv6Ranges', 'UserIdGroupPairs'] as const) held![k] = (held![k] as object[]).filter((x) => x !== range) as never;
    g.IpPermissions = g.IpPermissions!.filter((h) => (h.IpRanges?.length ?? 0) + (h.Ipv6Ranges?.length ?? 0) + (h.UserIdGroupPairs?.length ?? 0) + (h.PrefixListIds?.length ?? 0) > 0);
    return { Return: true };
  }

  updateSecurityGroupRuleDescriptionsIngress(i: { GroupId: string; IpPermissions: IpPermission[] }) {
    const g = this.group(i.GroupId);
    const ranges = this.ranges(g, i.IpPermissions);
    if (ranges.some((x) => !x.range)) throw awsError('InvalidPermission.NotFound', 'The specified rule does not exist in this security group.');
    for (const { r, range } of ranges) range!.Description = r.Description;
    return { Return: true };
  }

  deleteSecurityGroup(i: { GroupId: string }) {
    this.group(i.GroupId);
    const user = [...this.mountTargets.values()].find((m) => m.SecurityGroups.includes(i.GroupId));
    if (user) throw awsError('DependencyViolation', `resource ${i.GroupId} has a dependent object (${user.NetworkInterfaceId})`);
    this.groups.delete(i.GroupId);
    this.untaggedGroups.delete(i.GroupId);
    return {};
  }
}

const COMMANDS = [
  ['efs', CreateFileSystemCommand, 'createFileSystem'],
  ['efs', DescribeFileSystemsCommand, 'describeFileSystems'],
  ['efs', DeleteFileSystemCommand, 'deleteFileSystem'],
  ['efs', CreateMountTargetCommand, 'createMountTarget'],
  ['efs', DescribeMountTargetsCommand, 'describeMountTargets'],
  ['efs', DeleteMountTargetCommand, 'deleteMountTarget'],
  ['efs', PutFileSystemPolicyCommand, 'putFileSystemPolicy'],
  ['efs', DescribeFileSystemPolicyCommand, 'describeFileSystemPolicy'],
  ['efs', TagResourceCommand, 'tagResource'],
  ['ec2', DescribeSecurityGroupsCommand, 'describeSecurityGroups'],
  ['ec2', CreateSecurityGroupCommand, 'createSecurityGroup'],
  ['ec2', AuthorizeSecurityGroupIngressCommand, 'authorizeSecurityGroupIngress'],
  ['ec2', RevokeSecurityGroupIngressCommand, 'revokeSecurityGroupIngress'],
  ['ec2', UpdateSecurityGroupRuleDescriptionsIngressCommand, 'updateSecurityGroupRuleDescriptionsIngress'],
  ['ec2', DeleteSecurityGroupCommand, 'deleteSecurityGroup'],
] as const;

/** Routes every EFS and security-group command the driver sends to the fake (its method looked up at each call, so a test may replace one). */
export function wireFakeEfs(efs: AwsClientStub<EFSClient>, ec2: AwsClientStub<EC2Client>, fake: FakeEfs): void {
  for (const [service, Command, method] of COMMANDS) {
    const stub = (service === 'efs' ? efs : ec2) as AwsClientStub<EFSClient>;
    stub.on(Command as never).callsFake((input: Record<string, unknown>) => fake.call(service, Command.name.replace(/Command$/, ''), input, () => (fake[method] as (i: object) => unknown).call(fake, input)));
  }
  wireFakeEfsReplication(efs as never, fake);
}

/** Calls until it stops answering BackendNotReady (test/support/until-ready.ts), as the EFS tests have always imported it from here. */
export { untilReady } from './until-ready.js';
