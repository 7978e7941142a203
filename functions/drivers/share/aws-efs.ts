/**
 * The AWS share driver (kind `aws-efs`): a share is an EFS file system of its own, so each share
 * carries its own network access and can later move on its own. Per share:
 * - the file system (CreateFileSystem, encrypted, CreationToken derived from backend and share
 *   name, tags `ferry:backend`, `ferry:share-name`, `ferry:pool`, `ferry:quota-gb`, `Name`);
 * - a security group of its own in the backend's VPC (tags `ferry:backend`, `ferry:share-name`),
 *   whose NFS ingress is the share's `ip` rules;
 * - a mount target in each of the backend's subnets, behind that group;
 * - a file system policy: the rules' levels and `user` rules (aws-efs-access.ts says what EFS can
 *   enforce and how).
 * Its export location is the file system's DNS name, `<fs-id>.efs.<region>.amazonaws.com:/`, which
 * resolves in the VPC to the mount target of the client's zone.
 *
 * Everything is found again by creation token and tags, never by a remembered id, so a step retried
 * after a lost reply carries on from what AWS holds. Work AWS accepted but has not finished (a file
 * system or mount target `creating`, mount targets `deleting`) is looked at a few times, then
 * answered with BackendNotReady: the state machine Task waits (BACKEND_WAIT) and calls again.
 *
 * The size: EFS grows without limit, so the share's size is a quota the driver keeps (the
 * `ferry:quota-gb` tag, set at create and raised by extendShare), counted against the pool's
 * capacity at create and extend, and enforced by withholding writes (a Deny of ClientWrite in the
 * policy) from a share whose metered size (DescribeFileSystems' SizeInBytes) is over it
 * (enforceQuota, which the reconciler calls: functions/audit/share-backend-repairs.ts; every policy
 * updateAccess writes blocks writes exactly when the share is over its size).
 *
 * Driver-assisted migration to another aws-efs backend is EFS replication (aws-efs-migration.ts,
 * the class this one extends).
 */
import type { IpPermission } from '@aws-sdk/client-ec2';
import type { FileSystemDescription, PerformanceMode, ThroughputMode } from '@aws-sdk/client-efs';
import { BackendNotReady } from '../../core/errors.js';
import { ShareShrinkingPossibleDataLoss, type BackendShare, type ConnectionInfo, type DataNodeMount, type DriverAccessRule, type ShareBackendConfig, type ShareDataNodeDriver, type ShareDriver, type SharePoolCapabilities, type ShareQuotaDriver, type ShareReplicationDriver, type ShareSizeRestorer, type ShareUsage } from './driver.js';
import { fileSystemRefOf, planAccess, readDescription, readPolicy } from './aws-efs-access.js';
import { EfsMigrationBackend } from './aws-efs-migration.js';
import {
  DEFAULT_PERFORMANCE_MODE,
  DEFAULT_THROUGHPUT_MODE,
  EFS_DRIVER_VERSION,
  FS_ALREADY_EXISTS,
  FS_IN_USE,
  FS_NOT_FOUND,
  GIB,
  GONE_STATES,
  NFS_PORT,
  TAG_BACKEND,
  TAG_NAME,
  TAG_POOL,
  TAG_QUOTA_GB,
  TAG_SHARE_NAME,
  awsEfsShareBackend,
  creationTokenFor,
  efsSdk,
  errorCode,
  exportLocationOf,
  tagOf,
  type AwsEfsDriverOptions,
} from './aws-efs-sdk.js';

export { creationTokenFor, exportLocationOf, type AwsEfsDriverOptions } from './aws-efs-sdk.js';


/** Does an ingress permission reach the NFS port (all traffic, or a TCP range holding 2049)? */
const reachesNfs = (p: IpPermission) => p.IpProtocol === '-1' || (p.IpProtocol === 'tcp' && (p.FromPort ?? 0) <= NFS_PORT && NFS_PORT <= (p.ToPort ?? 65535));
const isExactNfs = (p: IpPermission) => p.IpProtocol === 'tcp' && p.FromPort === NFS_PORT && p.ToPort === NFS_PORT;
/** The one ingress a share's group holds besides its ip rules: NFS from its own members (its mount targets, and a Ferry copy task that joins the group). */
const membersNfs = (groupId: string): IpPermission => ({ IpProtocol: 'tcp', FromPort: NFS_PORT, ToPort: NFS_PORT, UserIdGroupPairs: [{ GroupId: groupId, Description: MEMBERS_DESCRIPTION }] });
const MEMBERS_DESCRIPTION = 'ferry data node: NFS from members of this group';
const nfsRange = (cidr: string, Description?: string): IpPermission => ({
  IpProtocol: 'tcp',
  FromPort: NFS_PORT,
  ToPort: NFS_PORT,
  ...(cidr.includes(':') ? { Ipv6Ranges: [{ CidrIpv6: cidr, Description }] } : { IpRanges: [{ CidrIp: cidr, Description }] }),
});

export class AwsEfsShareDriver extends EfsMigrationBackend implements ShareDriver, ShareQuotaDriver, ShareSizeRestorer, ShareReplicationDriver, ShareDataNodeDriver {
  readonly kind = 'aws-efs' as const;

  constructor(config: ShareBackendConfig, options: AwsEfsDriverOptions = {}) {
    super(awsEfsShareBackend(config), options);
  }

  /** The driver of a migration's destination backend: this backend's clients when it is in this region, else its region's. */
  protected peer(config: ShareBackendConfig): AwsEfsShareDriver {
    const region = awsEfsShareBackend(config).region;
    const clients = region === this.config.region ? { efs: this.options.efs, ec2: this.options.ec2 } : (this.options.clientsFor?.(region) ?? {});
    return new AwsEfsShareDriver(config, { ...this.options, efs: clients.efs, ec2: clients.ec2 });
  }

  private shareOf(fs: FileSystemDescription, name: string): BackendShare {
    return { name, exportLocation: exportLocationOf(fs.FileSystemId!, this.config.region) };
  }

  private quotaOf(fs: FileSystemDescription): number {
    return Number(tagOf(fs, TAG_QUOTA_GB) ?? 0);
  }

  private overQuota(fs: FileSystemDescription, quotaGb = this.quotaOf(fs)): boolean {
    return (fs.SizeInBytes?.Value ?? 0) > quotaGb * GIB;
  }

  /** GiB promised on the pool: the quotas of the backend's file systems in it (but `except`). */
  private async allocatedGb(pool: string, except?: string): Promise<number> {
    return (await this.backendFileSystems()).filter((fs) => tagOf(fs, TAG_POOL) === pool && fs.FileSystemId !== except).reduce((sum, fs) => sum + this.quotaOf(fs), 0);
  }

  private async checkCapacity(pool: string, sizeGb: number, name: string, except?: string): Promise<void> {
    const total = this.config.pools.find((p) => p.name === pool)?.totalCapacityGb;
    if (total === undefined) return;
    const free = total - (await this.allocatedGb(pool, except));
    if (sizeGb > free) throw this.fail(`pool ${pool} has ${free} GiB free, ${sizeGb} GiB wanted for ${name}`, { pool, freeGb: free, sizeGb, name });
  }

  async capabilities(): Promise<SharePoolCapabilities[]> {
    return this.config.pools.map((p) => ({
      pool: p.name,
      totalCapacityGb: p.totalCapacityGb,
      driverHandlesShareServers: false,
      storageProtocol: 'NFS',
      vendorName: 'Ferry',
      driverVersion: EFS_DRIVER_VERSION,
      snapshotSupport: false,
    }));
  }

  /**
   * Called by share-create's CreateOnBackend (and a host-assisted migration's HostPrepare for its
   * destination). Each stage is found before it is made, so any retry carries on where AWS is.
   */
  async createShare(req: { name: string; sizeGb: number; proto: string; pool: string }): Promise<BackendShare> {
    const name = this.checkName(req.name);
    if (!this.config.pools.some((p) => p.name === req.pool)) throw this.fail(`no pool ${req.pool}`, { pool: req.pool, name });
    if (!this.config.protocols.includes(req.proto)) throw this.fail(`EFS exports NFS only, not ${req.proto}`, { proto: req.proto, name });
    if (!Number.isInteger(req.sizeGb) || req.sizeGb < 1) throw this.fail(`invalid size ${req.sizeGb} GiB for ${name}`, { sizeGb: req.sizeGb, name });

    let fs = await this.fileSystemOf(name);
    if (fs && GONE_STATES.has(fs.LifeCycleState ?? '')) {
      // A share of the same name was deleted: its token is free once its file system is gone.
      fs = await this.poll(`the file system of an earlier share ${name} is still being deleted`, { name }, () => this.fileSystemOf(name), (v) => !v || !GONE_STATES.has(v.LifeCycleState ?? ''));
    }
    if (!fs) {
      await this.checkCapacity(req.pool, req.sizeGb, name);
      fs = await this.createFileSystem(name, req.sizeGb, req.pool);
    }
    fs = await this.untilAvailable(fs, name);
    const groupId = await this.ensureSecurityGroup(name);
    await this.ensureMountTargets(fs.FileSystemId!, groupId, name);
    return this.shareOf(fs, name);
  }

  private async createFileSystem(name: string, sizeGb: number, pool: string): Promise<FileSystemDescription> {
    const CreationToken = creationTokenFor(this.backendHost, name);
    try {
      return await this.attempt('CreateFileSystem', { name }, async () => (await this.efs()).send(new (await efsSdk()).CreateFileSystemCommand({
          CreationToken,
          Encrypted: true,
          PerformanceMode: (this.config.performanceMode ?? DEFAULT_PERFORMANCE_MODE) as PerformanceMode,
          ThroughputMode: (this.config.throughputMode ?? DEFAULT_THROUGHPUT_MODE) as ThroughputMode,
          Tags: [
            { Key: TAG_NAME, Value: name },
            { Key: TAG_BACKEND, Value: this.backendHost },
            { Key: TAG_SHARE_NAME, Value: name },
            { Key: TAG_POOL, Value: pool },
            { Key: TAG_QUOTA_GB, Value: String(sizeGb) },
          ],
        }),
      ));
    } catch (e) {
      if (e instanceof BackendNotReady) throw e;
      // The token was used: an earlier try made it (its reply lost) and the look above did not see it yet.
      const existingId = (e as { FileSystemId?: string }).FileSystemId;
      if (errorCode(e) !== FS_ALREADY_EXISTS || !existingId) throw this.awsFail('CreateFileSystem', e, { name });
      const existing = await this.fileSystemById(existingId);
      if (!existing) throw this.notReady(`EFS file system ${existingId} of ${name} exists but cannot be read yet`, { name, fileSystemId: existingId });
      return existing;
    }
  }

  /** Called by share-delete's DeleteOnBackend and share-create's Rollback: mount targets, file system, security group; absent is success. */
  async deleteShare(name: string): Promise<void> {
    this.checkName(name);
    const fs = await this.liveFileSystemOf(name);
    if (fs) {
      const fileSystemId = fs.FileSystemId!;
      // A file system still being made (a create rolled back) is deleted once it is available.
      if (fs.LifeCycleState !== 'available' && fs.LifeCycleState !== 'error') await this.untilAvailable(fs, name);
      await this.removeMountTargets(fileSystemId, name);
      try {
        await this.attempt('DeleteFileSystem', { name, fileSystemId }, async () => (await this.efs()).send(new (await efsSdk()).DeleteFileSystemCommand({ FileSystemId: fileSystemId })));
      } catch (e) {
        if (e instanceof BackendNotReady) throw e;
        if (errorCode(e) === FS_IN_USE) throw this.notReady(`EFS file system ${fileSystemId} of ${name} still has mount targets`, { name, fileSystemId });
        if (errorCode(e) !== FS_NOT_FOUND) throw this.awsFail('DeleteFileSystem', e, { name, fileSystemId });
      }
    }
    await this.deleteSecurityGroup(name);
  }

  async getShare(name: string): Promise<BackendShare | undefined> {
    this.checkName(name);
    const fs = await this.liveFileSystemOf(name);
    return fs && this.shareOf(fs, name);
  }

  async listShares(): Promise<BackendShare[]> {
    return (await this.backendFileSystems()).map((fs) => this.shareOf(fs, tagOf(fs, TAG_SHARE_NAME)!));
  }

  /**
   * Manila's update_access with every rule, called by the access API and the migration's access
   * steps. The whole set is checked first (a set EFS cannot hold changes nothing), then: ingress
   * that is no longer wanted is revoked, the policy put, missing ingress authorized, in that order
   * so that no address is ever admitted with more than the old or the new set gives it.
   */
  async updateAccess(name: string, rules: DriverAccessRule[]): Promise<void> {
    this.checkName(name);
    const fs = await this.availableFileSystemOf(name);
    const fileSystemId = fs.FileSystemId!;
    const current = await this.policyOf(fileSystemId);
    // A migration's read-only cast stays through any rule change until the migration ends.
    const plan = planAccess(rules, fileSystemRefOf(fs.FileSystemArn!), this.overQuota(fs), readPolicy(current).castReadOnly);
    if (typeof plan === 'string') throw this.fail(`cannot apply the access rules of ${name}: ${plan}`, { name, rules });
    const group = await this.securityGroupOf(name);
    if (!group) throw this.fail(`share ${name} has no security group (create the share again to make it)`, { name, fileSystemId });
    const groupId = group.GroupId!;
    const held = new Map<string, string | undefined>();
    for (const p of group.IpPermissions ?? []) {
      if (!reachesNfs(p)) continue;
      const sources: [string, IpPermission][] = [
        ...(p.IpRanges ?? []).map((r): [string, IpPermission] => [r.CidrIp!, { ...p, IpRanges: [r], Ipv6Ranges: [], UserIdGroupPairs: [], PrefixListIds: [] }]),
        ...(p.Ipv6Ranges ?? []).map((r): [string, IpPermission] => [r.CidrIpv6!, { ...p, IpRanges: [], Ipv6Ranges: [r], UserIdGroupPairs: [], PrefixListIds: [] }]),
        ...(p.UserIdGroupPairs ?? []).map((g): [string, IpPermission] => [`group ${g.GroupId}`, { ...p, IpRanges: [], Ipv6Ranges: [], UserIdGroupPairs: [g], PrefixListIds: [] }]),
        ...(p.PrefixListIds ?? []).map((l): [string, IpPermission] => [`prefix list ${l.PrefixListId}`, { ...p, IpRanges: [], Ipv6Ranges: [], UserIdGroupPairs: [], PrefixListIds: [l] }]),
      ];
      for (const [source, single] of sources) {
        const range = single.IpRanges?.[0] ?? single.Ipv6Ranges?.[0];
        // Only an exact NFS range of a wanted CIDR stays, and the group's own members (dataNodeMount): anything else reaching port 2049 is not a rule.
        if (isExactNfs(p) && single.UserIdGroupPairs?.[0]?.GroupId === groupId) continue;
        if (isExactNfs(p) && range && plan.ingress.has(source)) held.set(source, range.Description);
        else await this.revoke(groupId, single, { name, groupId, source });
      }
    }
    for (const [cidr, description] of plan.ingress) {
      if (held.has(cidr) && held.get(cidr) !== description) await this.describeRange(groupId, nfsRange(cidr, description), { name, groupId, cidr });
    }
    await this.putPolicy(fileSystemId, current, plan.policy, name);
    for (const [cidr, description] of plan.ingress) {
      if (!held.has(cidr)) await this.authorize(groupId, nfsRange(cidr, description), { name, groupId, cidr });
    }
  }

  /** The rules the backend holds, read back from the security group (ip) and the policy (levels, user). */
  async getAccess(name: string): Promise<DriverAccessRule[]> {
    this.checkName(name);
    const fs = await this.liveFileSystemOf(name);
    if (!fs || fs.LifeCycleState === 'creating') return [];
    const group = await this.securityGroupOf(name);
    const policy = readPolicy(await this.policyOf(fs.FileSystemId!));
    const rules: (DriverAccessRule & { n: number })[] = [];
    for (const p of group?.IpPermissions ?? []) {
      if (!isExactNfs(p) || !policy.ipLevel) continue;
      for (const r of [...(p.IpRanges ?? []), ...(p.Ipv6Ranges ?? [])]) {
        for (const e of readDescription(r.Description)) rules.push({ n: e.n, id: e.id, accessType: 'ip', accessTo: e.accessTo, accessLevel: policy.ipLevel });
      }
    }
    for (const u of policy.users) rules.push({ n: u.n, id: u.id, accessType: 'user', accessTo: u.accessTo, accessLevel: u.level });
    return rules.sort((a, b) => a.n - b.n).map(({ id, accessType, accessTo, accessLevel }) => ({ id, accessType, accessTo, accessLevel }));
  }

  // ---- the size: a quota the driver keeps (ShareQuotaDriver) ----------------------------------

  async extendShare(name: string, newSizeGb: number): Promise<void> {
    this.checkName(name);
    const fs = await this.availableFileSystemOf(name);
    const size = this.quotaOf(fs);
    if (newSizeGb !== size) {
      if (!Number.isInteger(newSizeGb) || newSizeGb < size) throw this.fail(`cannot shrink ${name} from ${size} GiB to ${newSizeGb} GiB`, { name, sizeGb: size, newSizeGb });
      const pool = tagOf(fs, TAG_POOL);
      if (pool) await this.checkCapacity(pool, newSizeGb, name, fs.FileSystemId);
      await this.tagFileSystem(fs.FileSystemId!, { [TAG_QUOTA_GB]: String(newSizeGb) }, name);
    }
    // Also at the same size: a retry after the tag was set but the block not yet lifted finishes it.
    await this.enforce(name, fs, newSizeGb);
  }

  /**
   * Manila's shrink_share: refused (ShareShrinkingPossibleDataLoss, nothing changed) when EFS meters
   * more than the new size. The metering lags the writes (module comment), so what was written in
   * the last minutes may not be counted; a share shrunk below it is blocked by the next enforcement.
   */
  async shrinkShare(name: string, newSizeGb: number): Promise<void> {
    await this.setQuota(name, newSizeGb, true);
  }

  /** ShareSizeRestorer: the quota put back after a failed extend or shrink, with no data-loss check (driver.ts says why); a share over it has its writes withheld at once. */
  async restoreShareSize(name: string, sizeGb: number): Promise<void> {
    await this.setQuota(name, sizeGb, false);
  }

  private async setQuota(name: string, newSizeGb: number, shrinkOnly: boolean): Promise<void> {
    this.checkName(name);
    const fs = await this.availableFileSystemOf(name);
    const size = this.quotaOf(fs);
    if (newSizeGb !== size) {
      if (!Number.isInteger(newSizeGb) || newSizeGb < 1 || (shrinkOnly && newSizeGb > size)) throw this.fail(`cannot shrink ${name} from ${size} GiB to ${newSizeGb} GiB`, { name, sizeGb: size, newSizeGb });
      const used = fs.SizeInBytes?.Value ?? 0;
      if (shrinkOnly && used > newSizeGb * GIB) {
        throw new ShareShrinkingPossibleDataLoss(`backend ${this.backendHost}: ${name} holds ${used} bytes, more than ${newSizeGb} GiB: shrinking it could lose data`, {
          context: { host: this.backendHost, name, usedBytes: used, sizeGb: size, newSizeGb },
        });
      }
      await this.tagFileSystem(fs.FileSystemId!, { [TAG_QUOTA_GB]: String(newSizeGb) }, name);
    }
    await this.enforce(name, fs, newSizeGb);
  }

  async shareUsage(name: string): Promise<ShareUsage | undefined> {
    this.checkName(name);
    const fs = await this.liveFileSystemOf(name);
    if (!fs) return undefined;
    const writesBlocked = fs.LifeCycleState === 'creating' ? false : readPolicy(await this.policyOf(fs.FileSystemId!)).quotaBlocked;
    return { name, sizeGb: this.quotaOf(fs), usedBytes: fs.SizeInBytes?.Value ?? 0, overQuota: this.overQuota(fs), writesBlocked };
  }

  /**
   * Withholds writes (the quota Deny, which also stops deletes: EFS has no "remove only") while the
   * metered size is over the quota, and lifts it once the share is within it again (after an
   * extend). The metering lags the writes (EFS updates SizeInBytes from time to time, not per
   * write), so a share can run over its size by what was written since. The reconciler calls it
   * with the share's rules (functions/audit/share-backend-repairs.ts); extendShare and shrinkShare
   * enforce the new size themselves.
   */
  async enforceQuota(name: string, rules?: DriverAccessRule[]): Promise<ShareUsage> {
    this.checkName(name);
    if (!rules) {
      const fs = await this.availableFileSystemOf(name);
      return this.enforce(name, fs, this.quotaOf(fs));
    }
    // updateAccess plans the block from the metered size it reads; the usage is read back after it.
    await this.updateAccess(name, rules);
    const usage = await this.shareUsage(name);
    if (!usage) throw this.fail(`share ${name} does not exist`, { name });
    return usage;
  }

  private async enforce(name: string, fs: FileSystemDescription, quotaGb: number): Promise<ShareUsage> {
    const fileSystemId = fs.FileSystemId!;
    const over = this.overQuota(fs, quotaGb);
    const current = await this.policyOf(fileSystemId);
    if (readPolicy(current).quotaBlocked !== over) {
      const plan = planAccess(await this.getAccess(name), fileSystemRefOf(fs.FileSystemArn!), over, readPolicy(current).castReadOnly);
      if (typeof plan === 'string') throw this.fail(`cannot re-apply the access rules of ${name}: ${plan}`, { name });
      await this.putPolicy(fileSystemId, current, plan.policy, name);
    }
    return { name, sizeGb: quotaGb, usedBytes: fs.SizeInBytes?.Value ?? 0, overQuota: over, writesBlocked: over };
  }

  /**
   * Where Ferry's copy task mounts the share (ShareDataNodeDriver): the file system, its backend's
   * VPC and subnets, and the share's own group, made to admit NFS from its members. The task joins
   * that group for the copy; what it may do there is the data node's recorded `user` rule (the copy
   * task's role) in the policy, which the migration puts and removes (functions/migration/access.ts).
   * Nothing else joins a share's group but its mount targets, so the members' rule opens NFS to no
   * tenant; it stays with the group (deleted with the share).
   */
  async dataNodeMount(name: string): Promise<DataNodeMount> {
    this.checkName(name);
    const fs = await this.availableFileSystemOf(name);
    const group = await this.securityGroupOf(name);
    if (!group) throw this.fail(`share ${name} has no security group (create the share again to make it)`, { name, fileSystemId: fs.FileSystemId });
    const groupId = group.GroupId!;
    const held = (group.IpPermissions ?? []).some((p) => isExactNfs(p) && (p.UserIdGroupPairs ?? []).some((g) => g.GroupId === groupId));
    if (!held) await this.authorize(groupId, membersNfs(groupId), { name, groupId, members: true });
    return { kind: 'efs', fileSystemId: fs.FileSystemId!, region: this.config.region, vpcId: this.config.vpcId, subnetIds: [...this.config.subnetIds], securityGroupId: groupId };
  }

  /**
   * NFS 4.1 with the mount options AWS recommends for EFS (plain NFS: an `ip` rule's client). A
   * `user` rule's client mounts with the EFS mount helper instead (`mount -t efs -o tls,iam`).
   * The access mapping is Manila's default, which the contract (and the data node, which mounts
   * with an ip rule) expects.
   */
  async connectionGetInfo(name: string): Promise<ConnectionInfo> {
    this.checkName(name);
    return {
      mount: 'mount -t nfs4 -o nfsvers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport %(export)s %(path)s',
      unmount: 'umount %(path)s',
      access_mapping: { ip: ['nfs'], user: ['cifs'] },
    };
  }
}
