/**
 * The aws-efs share driver's view of AWS (the driver itself, aws-efs.ts, extends this): its
 * clients, made and their SDKs loaded on first use unless injected; every call wrapped so a
 * failure is a DriverError carrying the AWS code; the file systems found by creation token and
 * tags, never by a remembered id; each share's security group found by its tags; its mount
 * targets made in every configured subnet and removed again. Waits are a few looks in the call
 * (pollAttempts, pollIntervalMs apart) and then BackendNotReady: the state machine waits, no
 * function does (infra/asl/policy.ts BACKEND_WAIT).
 */
import type { EC2Client, IpPermission, SecurityGroup } from '@aws-sdk/client-ec2';
import type { EFSClient, FileSystemDescription, MountTargetDescription } from '@aws-sdk/client-efs';
import { awsApiClientConfig } from '../../core/aws-http.js';
import { BackendNotReady, DriverError } from '../../core/errors.js';
import type { AwsEfsShareBackendConfig } from './driver.js';
import { parsePolicy, policyKey, type PolicyDocument } from './aws-efs-access.js';
import {
  DEFAULT_POLL_ATTEMPTS,
  DEFAULT_POLL_INTERVAL_MS,
  FS_NOT_FOUND,
  GONE_STATES,
  MT_CONFLICT,
  MT_NOT_FOUND,
  POLICY_NOT_FOUND,
  RETRY_LATER_CODES,
  SG_DUPLICATE,
  SG_IN_USE,
  SG_NOT_FOUND,
  TAG_BACKEND,
  TAG_NAME,
  TAG_SHARE_NAME,
  creationTokenFor,
  ec2Sdk,
  efsSdk,
  errorCode,
  securityGroupNameFor,
  sleep,
  tagOf,
  type AwsEfsDriverOptions,
} from './aws-efs-sdk.js';

const NAME_RE = /^share-[0-9a-f-]{36}$/;

export class EfsBackend {
  readonly backendHost: string;
  protected readonly pollIntervalMs: number;
  protected readonly pollAttempts: number;
  private efsClient?: EFSClient;
  private ec2Client?: EC2Client;

  constructor(
    protected readonly config: AwsEfsShareBackendConfig,
    protected readonly options: AwsEfsDriverOptions = {},
  ) {
    this.backendHost = config.host;
    this.efsClient = options.efs;
    this.ec2Client = options.ec2;
    this.pollIntervalMs = options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;
    this.pollAttempts = Math.max(1, options.pollAttempts ?? DEFAULT_POLL_ATTEMPTS);
  }

  protected async efs(): Promise<EFSClient> {
    return (this.efsClient ??= new (await efsSdk()).EFSClient(awsApiClientConfig(this.config.region)));
  }

  protected async ec2(): Promise<EC2Client> {
    return (this.ec2Client ??= new (await ec2Sdk()).EC2Client(awsApiClientConfig(this.config.region)));
  }

  protected fail(message: string, context: Record<string, unknown> = {}, cause?: unknown): DriverError {
    return new DriverError(`backend ${this.backendHost}: ${message}`, { cause, context: { host: this.backendHost, ...context } });
  }

  protected notReady(message: string, context: Record<string, unknown> = {}): BackendNotReady {
    return new BackendNotReady(`backend ${this.backendHost}: ${message}`, { context: { host: this.backendHost, ...context } });
  }

  /** A failed AWS call as a DriverError: `context.code` is the AWS error code (ThrottlingException, RequestLimitExceeded...). */
  protected awsFail(operation: string, e: unknown, context: Record<string, unknown>): DriverError {
    return this.fail(`${operation} failed: ${errorCode(e)}: ${(e as Error)?.message ?? String(e)}`, { operation, code: errorCode(e), ...context }, e);
  }

  /**
   * Runs one AWS call, again after an answer that means "later" (RETRY_LATER_CODES: a throttle, a
   * dependency timeout, a file system updating; nothing was done), up to pollAttempts times with a
   * doubling pause; still refused, it is BackendNotReady carrying the code. Any other error is
   * thrown as AWS gave it.
   */
  protected async attempt<T>(operation: string, context: Record<string, unknown>, call: () => Promise<T>): Promise<T> {
    for (let n = 0; ; n++) {
      try {
        return await call();
      } catch (e) {
        const code = errorCode(e);
        if (!RETRY_LATER_CODES.has(code)) throw e;
        if (n + 1 >= this.pollAttempts) throw this.notReady(`${operation} was refused for now (${code}); the step runs again after its wait`, { ...context, operation, code });
        await sleep(this.pollIntervalMs * 2 ** n);
      }
    }
  }

  /** Runs one AWS call (attempt); an error whose code is in `tolerated` answers undefined (an absent thing, a repeated change), any other is a DriverError. */
  protected async send<T>(operation: string, context: Record<string, unknown>, call: () => Promise<T>, tolerated: readonly string[] = []): Promise<T | undefined> {
    try {
      return await this.attempt(operation, context, call);
    } catch (e) {
      if (e instanceof BackendNotReady) throw e;
      if (tolerated.includes(errorCode(e))) return undefined;
      throw this.awsFail(operation, e, context);
    }
  }

  /** Looks up to pollAttempts times until `done`; still not done is BackendNotReady (`what` says what is awaited). */
  protected async poll<T>(what: string, context: Record<string, unknown>, look: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const v = await look();
      if (done(v)) return v;
      if (attempt + 1 >= this.pollAttempts) throw this.notReady(`${what} (still in progress; the step runs again after its wait)`, context);
      await sleep(this.pollIntervalMs);
    }
  }

  protected checkName(name: string): string {
    if (!NAME_RE.test(name)) throw this.fail(`invalid share name ${JSON.stringify(name)}`, { name });
    return name;
  }

  // ---- file systems ----------------------------------------------------------------------------

  /** The share's available file system, or a DriverError (not there) / BackendNotReady (still being made). */
  protected async availableFileSystemOf(name: string): Promise<FileSystemDescription> {
    const fs = await this.liveFileSystemOf(name);
    if (!fs) throw this.fail(`share ${name} does not exist`, { name });
    return this.untilAvailable(fs, name);
  }

  protected async policyOf(fileSystemId: string): Promise<PolicyDocument | undefined> {
    const out = await this.send(
      'DescribeFileSystemPolicy',
      { fileSystemId },
      async () => (await this.efs()).send(new (await efsSdk()).DescribeFileSystemPolicyCommand({ FileSystemId: fileSystemId })),
      [POLICY_NOT_FOUND],
    );
    return parsePolicy(out?.Policy);
  }

  /** Puts the policy unless the file system holds one that grants the same (a repeated set changes nothing). */
  protected async putPolicy(fileSystemId: string, current: PolicyDocument | undefined, wanted: PolicyDocument, name: string): Promise<void> {
    if (current && policyKey(current) === policyKey(wanted)) return;
    await this.send('PutFileSystemPolicy', { name, fileSystemId }, async () =>
      (await this.efs()).send(new (await efsSdk()).PutFileSystemPolicyCommand({ FileSystemId: fileSystemId, Policy: JSON.stringify(wanted) })),
    );
  }

  /** Sets tags of the driver's own keys on a file system (the quota, a migration's marks). */
  protected async tagFileSystem(fileSystemId: string, tags: Record<string, string>, name: string): Promise<void> {
    await this.send('TagResource', { name, fileSystemId }, async () =>
      (await this.efs()).send(new (await efsSdk()).TagResourceCommand({ ResourceId: fileSystemId, Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) })),
    );
  }

  protected async untagFileSystem(fileSystemId: string, keys: string[], name: string): Promise<void> {
    await this.send('UntagResource', { name, fileSystemId }, async () => (await this.efs()).send(new (await efsSdk()).UntagResourceCommand({ ResourceId: fileSystemId, TagKeys: keys })));
  }

  /**
   * The file system a share name's creation token names, in any state (deleting ones too), or
   * undefined. EFS answers the token of a deleted file system with FileSystemNotFound (DeleteFileSystem's
   * reference), a token never used with an empty list: both mean none.
   */
  protected async fileSystemOf(name: string): Promise<FileSystemDescription | undefined> {
    const CreationToken = creationTokenFor(this.backendHost, name);
    const out = await this.send('DescribeFileSystems', { name }, async () => (await this.efs()).send(new (await efsSdk()).DescribeFileSystemsCommand({ CreationToken })), [FS_NOT_FOUND]);
    const found = (out?.FileSystems ?? []).filter((fs) => fs.CreationToken === CreationToken);
    if (found.length > 1) throw this.fail(`${found.length} EFS file systems carry the creation token of ${name}`, { name, fileSystemIds: found.map((f) => f.FileSystemId) });
    const fs = found[0];
    if (fs && (tagOf(fs, TAG_BACKEND) ?? this.backendHost) !== this.backendHost) throw this.fail(`EFS file system ${fs.FileSystemId} of ${name} is tagged for backend ${tagOf(fs, TAG_BACKEND)}`, { name });
    return fs;
  }

  /** The share's file system unless it is going or gone. */
  protected async liveFileSystemOf(name: string): Promise<FileSystemDescription | undefined> {
    const fs = await this.fileSystemOf(name);
    return fs && !GONE_STATES.has(fs.LifeCycleState ?? '') ? fs : undefined;
  }

  protected async fileSystemById(fileSystemId: string): Promise<FileSystemDescription | undefined> {
    const out = await this.send(
      'DescribeFileSystems',
      { fileSystemId },
      async () => (await this.efs()).send(new (await efsSdk()).DescribeFileSystemsCommand({ FileSystemId: fileSystemId })),
      [FS_NOT_FOUND],
    );
    return out?.FileSystems?.[0];
  }

  /** Every live file system of this backend (tag `ferry:backend`), across DescribeFileSystems pages. */
  protected async backendFileSystems(): Promise<FileSystemDescription[]> {
    const out: FileSystemDescription[] = [];
    let Marker: string | undefined;
    do {
      const page = await this.send('DescribeFileSystems', { marker: Marker }, async () => (await this.efs()).send(new (await efsSdk()).DescribeFileSystemsCommand({ Marker })));
      for (const fs of page?.FileSystems ?? []) {
        if (tagOf(fs, TAG_BACKEND) === this.backendHost && tagOf(fs, TAG_SHARE_NAME) && !GONE_STATES.has(fs.LifeCycleState ?? '')) out.push(fs);
      }
      Marker = page?.NextMarker;
    } while (Marker);
    return out;
  }

  /** Until the file system is available; `error` is a DriverError, deleting or gone BackendNotReady (a retry starts afresh). */
  protected async untilAvailable(fs: FileSystemDescription, name: string): Promise<FileSystemDescription> {
    const fileSystemId = fs.FileSystemId!;
    let current: FileSystemDescription | undefined = fs;
    if (current.LifeCycleState === 'available') return current;
    current = await this.poll(`EFS file system ${fileSystemId} of ${name} is not available yet`, { name, fileSystemId }, () => this.fileSystemById(fileSystemId), (v) => {
      if (v?.LifeCycleState === 'error') throw this.fail(`EFS file system ${fileSystemId} of ${name} is in state error`, { name, fileSystemId });
      if (!v || GONE_STATES.has(v.LifeCycleState ?? '')) throw this.notReady(`EFS file system ${fileSystemId} of ${name} is being deleted`, { name, fileSystemId });
      return v.LifeCycleState === 'available';
    });
    return current!;
  }

  // ---- mount targets ---------------------------------------------------------------------------

  /** The file system's mount targets (deleting ones too); none for a file system not there. */
  protected async mountTargets(fileSystemId: string): Promise<MountTargetDescription[]> {
    const out: MountTargetDescription[] = [];
    let Marker: string | undefined;
    do {
      const page = await this.send(
        'DescribeMountTargets',
        { fileSystemId },
        async () => (await this.efs()).send(new (await efsSdk()).DescribeMountTargetsCommand({ FileSystemId: fileSystemId, Marker })),
        [FS_NOT_FOUND],
      );
      out.push(...(page?.MountTargets ?? []));
      Marker = page?.NextMarker;
    } while (Marker);
    return out;
  }

  /**
   * A mount target in each configured subnet, all available. Made where missing; a retry finds
   * those an earlier try made (MountTargetConflict: one is there already, or being removed).
   * A conflict that leaves a subnet without one is a second subnet of one zone: a DriverError.
   */
  protected async ensureMountTargets(fileSystemId: string, groupId: string, name: string): Promise<void> {
    const context = { name, fileSystemId };
    const conflicts = new Set<string>();
    const present = await this.mountTargets(fileSystemId);
    for (const subnetId of this.config.subnetIds) {
      if (present.some((m) => m.SubnetId === subnetId)) continue;
      const made = await this.send(
        'CreateMountTarget',
        { ...context, subnetId },
        async () => (await this.efs()).send(new (await efsSdk()).CreateMountTargetCommand({ FileSystemId: fileSystemId, SubnetId: subnetId, SecurityGroups: [groupId] })),
        [MT_CONFLICT],
      );
      if (!made) conflicts.add(subnetId);
    }
    let refused: string[] = [];
    try {
      await this.poll(`the mount targets of ${name} (${fileSystemId}) are not all available yet`, context, () => this.mountTargets(fileSystemId), (mts) => {
        for (const m of mts) if (m.LifeCycleState === 'error') throw this.fail(`mount target ${m.MountTargetId} of ${name} in ${m.SubnetId} is in state error`, { ...context, mountTargetId: m.MountTargetId });
        const missing = this.config.subnetIds.filter((s) => !mts.some((m) => m.SubnetId === s && !GONE_STATES.has(m.LifeCycleState ?? '')));
        refused = missing.filter((s) => conflicts.has(s) && !mts.some((m) => m.SubnetId === s));
        return missing.length === 0 && mts.every((m) => GONE_STATES.has(m.LifeCycleState ?? '') || m.LifeCycleState === 'available');
      });
    } catch (e) {
      // Refused and still not there after every look (a racing create would show by now): not a wait.
      if (e instanceof BackendNotReady && refused.length > 0) {
        throw this.fail(`EFS refused a mount target of ${name} in ${refused.join(', ')} (MountTargetConflict) and none is there: is another configured subnet in the same availability zone?`, { ...context, subnetIds: refused });
      }
      throw e;
    }
  }

  /** Deletes every mount target of the file system and looks until they are gone (BackendNotReady meanwhile). */
  protected async removeMountTargets(fileSystemId: string, name: string): Promise<void> {
    const context = { name, fileSystemId };
    await this.poll(`the mount targets of ${name} (${fileSystemId}) are not all deleted yet`, context, async () => {
      const mts = await this.mountTargets(fileSystemId);
      // A mount target still being made is deleted once it is available (a later look).
      for (const m of mts.filter((x) => x.LifeCycleState === 'available' || x.LifeCycleState === 'error')) {
        await this.send(
          'DeleteMountTarget',
          { ...context, mountTargetId: m.MountTargetId },
          async () => (await this.efs()).send(new (await efsSdk()).DeleteMountTargetCommand({ MountTargetId: m.MountTargetId })),
          [MT_NOT_FOUND],
        );
      }
      return mts;
    }, (mts) => mts.length === 0);
  }

  // ---- security groups -------------------------------------------------------------------------

  private async describeGroups(filters: { Name: string; Values: string[] }[]): Promise<SecurityGroup[]> {
    const out: SecurityGroup[] = [];
    const Filters = [{ Name: 'vpc-id', Values: [this.config.vpcId] }, ...filters];
    let NextToken: string | undefined;
    do {
      const page = await this.send('DescribeSecurityGroups', { filters: Filters }, async () => (await this.ec2()).send(new (await ec2Sdk()).DescribeSecurityGroupsCommand({ Filters, NextToken })));
      out.push(...(page?.SecurityGroups ?? []));
      NextToken = page?.NextToken;
    } while (NextToken);
    return out;
  }

  /** The share's security group, by its tags in the backend's VPC. */
  protected async securityGroupOf(name: string): Promise<SecurityGroup | undefined> {
    const found = await this.describeGroups([
      { Name: `tag:${TAG_BACKEND}`, Values: [this.backendHost] },
      { Name: `tag:${TAG_SHARE_NAME}`, Values: [name] },
    ]);
    if (found.length > 1) throw this.fail(`${found.length} security groups carry share ${name}`, { name, groupIds: found.map((g) => g.GroupId) });
    return found[0];
  }

  /** The share's security group, made (no ingress: the rules add it) when there is none. */
  protected async ensureSecurityGroup(name: string): Promise<string> {
    const existing = await this.securityGroupOf(name);
    if (existing) return existing.GroupId!;
    const GroupName = securityGroupNameFor(this.backendHost, name);
    const made = await this.send(
      'CreateSecurityGroup',
      { name, groupName: GroupName },
      async () =>
        (await this.ec2()).send(new (await ec2Sdk()).CreateSecurityGroupCommand({
            GroupName,
            VpcId: this.config.vpcId,
            Description: `Ferry share ${name} of ${this.backendHost}: NFS from its ip rules`,
            TagSpecifications: [
              {
                ResourceType: 'security-group',
                Tags: [
                  { Key: TAG_NAME, Value: name },
                  { Key: TAG_BACKEND, Value: this.backendHost },
                  { Key: TAG_SHARE_NAME, Value: name },
                ],
              },
            ],
          }),
        ),
      [SG_DUPLICATE],
    );
    if (made?.GroupId) return made.GroupId;
    // The name is taken: an earlier try made it (its reply lost) and its tags are not visible yet.
    const [named] = await this.describeGroups([{ Name: 'group-name', Values: [GroupName] }]);
    if (!named) throw this.notReady(`security group ${GroupName} of ${name} exists but cannot be read yet`, { name });
    if (tagOf(named, TAG_SHARE_NAME) !== undefined && tagOf(named, TAG_SHARE_NAME) !== name) throw this.fail(`security group ${GroupName} (${named.GroupId}) belongs to share ${tagOf(named, TAG_SHARE_NAME)}`, { name });
    return named.GroupId!;
  }

  /** Deletes the share's security group; absent is success, still used by a mount target's interface is BackendNotReady. */
  protected async deleteSecurityGroup(name: string): Promise<void> {
    const group = await this.securityGroupOf(name);
    if (!group) return;
    const context = { name, groupId: group.GroupId };
    await this.poll(`security group ${group.GroupId} of ${name} is still used by a mount target being deleted`, context, async () => {
      try {
        await this.attempt('DeleteSecurityGroup', context, async () => (await this.ec2()).send(new (await ec2Sdk()).DeleteSecurityGroupCommand({ GroupId: group.GroupId })));
        return true;
      } catch (e) {
        if (e instanceof BackendNotReady) throw e;
        if (errorCode(e) === SG_NOT_FOUND) return true;
        if (errorCode(e) === SG_IN_USE) return false;
        throw this.awsFail('DeleteSecurityGroup', e, context);
      }
    }, (deleted) => deleted);
  }

  /** Adds one NFS ingress range; already there (a lost reply, a race) is success. */
  protected async authorize(groupId: string, permission: IpPermission, context: Record<string, unknown>): Promise<void> {
    await this.send(
      'AuthorizeSecurityGroupIngress',
      context,
      async () => (await this.ec2()).send(new (await ec2Sdk()).AuthorizeSecurityGroupIngressCommand({ GroupId: groupId, IpPermissions: [permission] })),
      ['InvalidPermission.Duplicate'],
    );
  }

  /** Removes one ingress permission exactly as read; already gone is success. */
  protected async revoke(groupId: string, permission: IpPermission, context: Record<string, unknown>): Promise<void> {
    await this.send(
      'RevokeSecurityGroupIngress',
      context,
      async () => (await this.ec2()).send(new (await ec2Sdk()).RevokeSecurityGroupIngressCommand({ GroupId: groupId, IpPermissions: [permission] })),
      ['InvalidPermission.NotFound'],
    );
  }

  protected async describeRange(groupId: string, permission: IpPermission, context: Record<string, unknown>): Promise<void> {
    await this.send('UpdateSecurityGroupRuleDescriptionsIngress', context, async () =>
      (await this.ec2()).send(new (await ec2Sdk()).UpdateSecurityGroupRuleDescriptionsIngressCommand({ GroupId: groupId, IpPermissions: [permission] })),
    );
  }
}
