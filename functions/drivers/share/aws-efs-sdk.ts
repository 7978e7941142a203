/**
 * What the aws-efs share driver knows of EFS and of EC2's security groups: the tags that name a
 * Ferry share, the states and error codes it acts on, how it derives a creation token and an
 * export location, its configuration check, and the EFS SDK loaded on first use (the EC2 one is
 * the volume driver's loader, `ec2Sdk`, shared so the module is imported once).
 */
import { createHash } from 'node:crypto';
import type { EC2Client } from '@aws-sdk/client-ec2';
import type { EFSClient, FileSystemDescription } from '@aws-sdk/client-efs';
import { ConfigurationError } from '../../core/errors.js';
import type { AwsEfsShareBackendConfig, ShareBackendConfig } from './driver.js';

export { ec2Sdk, errorCode, sleep } from '../volume/aws-ebs-ec2.js';

export const EFS_DRIVER_VERSION = '1.0';
export const DEFAULT_PERFORMANCE_MODE = 'generalPurpose';
export const DEFAULT_THROUGHPUT_MODE = 'elastic';
/** NFS: the one port a mount target serves, and so the one port a share's security group opens. */
export const NFS_PORT = 2049;
/**
 * How long a driver call looks at a change in progress before it answers BackendNotReady (3 looks,
 * 1 s apart), as aws-ebs does: a quick change finishes in the same call; a slower one (a mount
 * target takes about a minute and a half) is waited for by the state machine (BACKEND_WAIT).
 */
export const DEFAULT_POLL_INTERVAL_MS = 1_000;
export const DEFAULT_POLL_ATTEMPTS = 3;
export const GIB = 1024 ** 3;

export const TAG_NAME = 'Name';
export const TAG_BACKEND = 'ferry:backend';
export const TAG_SHARE_NAME = 'ferry:share-name';
export const TAG_POOL = 'ferry:pool';
/** The share's size in GiB: EFS has none, the driver keeps it (set at create, raised by extend). */
export const TAG_QUOTA_GB = 'ferry:quota-gb';
/** On a migration's source: when its read-only cast was complete (ISO time; aws-efs-migration.ts). */
export const TAG_MIGRATION_CAST = 'ferry:migration-cast-at';
/** On a migration's source: the replica its phase 2 cuts over to (set before the replication is deleted). */
export const TAG_MIGRATION_CUTOVER = 'ferry:migration-cutover';

/** States of a file system or mount target that is going or gone: not a share, not a mount target. */
export const GONE_STATES = new Set(['deleting', 'deleted']);

export const FS_NOT_FOUND = 'FileSystemNotFound';
export const FS_ALREADY_EXISTS = 'FileSystemAlreadyExists';
export const FS_IN_USE = 'FileSystemInUse';
export const MT_NOT_FOUND = 'MountTargetNotFound';
export const MT_CONFLICT = 'MountTargetConflict';
export const POLICY_NOT_FOUND = 'PolicyNotFound';
export const SG_NOT_FOUND = 'InvalidGroup.NotFound';
export const SG_DUPLICATE = 'InvalidGroup.Duplicate';
export const SG_IN_USE = 'DependencyViolation';
export const RULE_DUPLICATE = 'InvalidPermission.Duplicate';
export const RULE_NOT_FOUND = 'InvalidPermission.NotFound';
export const REPLICATION_NOT_FOUND = 'ReplicationNotFound';
/**
 * Answers that say "the same call, again, later", checked against the EFS API reference (the
 * errors each operation the driver makes lists, @aws-sdk/client-efs 3.1141's model) and AWS's
 * common errors: ThrottlingException (the common error of every AWS API, and EFS's own for
 * CreateAccessPoint), RequestLimitExceeded (EC2's throttle), DependencyTimeout (DeleteMountTarget:
 * "the client should try the call again"), IncorrectFileSystemLifeCycleState (CreateMountTarget,
 * PutFileSystemPolicy, UpdateFileSystemProtection, CreateReplicationConfiguration: "not available";
 * the driver makes these calls only on a file system it saw available, so it is `updating` for a
 * moment, or being deleted, which the next look finds), InsufficientThroughputCapacity
 * (CreateFileSystem, CreateReplicationConfiguration, UpdateFileSystemProtection: "not enough
 * capacity to provision additional throughput... Try again later", HTTP 503) and TooManyRequests
 * (UpdateFileSystemProtection, HTTP 429: a throughput change less than 24 hours ago; the same call
 * succeeds once the day is over, so it is a wait, not a failure: the machine's bounded wait, and
 * the code in the error its end carries). The SDK retries throttles itself first; what reaches the
 * driver is retried a few times in the call and then answered with BackendNotReady (the step runs
 * again after its wait). Not here: InternalServerError, which every operation lists with no advice
 * to try again (the SDK's own retries of a 5xx have been spent when it reaches the driver).
 */
export const RETRY_LATER_CODES = new Set(['ThrottlingException', 'Throttling', 'RequestLimitExceeded', 'DependencyTimeout', 'IncorrectFileSystemLifeCycleState', 'InsufficientThroughputCapacity', 'TooManyRequests']);

export interface AwsEfsDriverOptions {
  /** The EFS client of the backend's region (tests inject a mocked one); default: made on first use. */
  efs?: EFSClient;
  /** The EC2 client of the backend's region, for the security groups; default: made on first use. */
  ec2?: EC2Client;
  pollIntervalMs?: number;
  pollAttempts?: number;
  /** The clock a migration's cast time is taken from and compared with EFS's LastReplicatedTimestamp; default Date.now. */
  now?: () => number;
  /** The clients of a migration destination in another region (tests inject them); default: made on first use. */
  clientsFor?: (region: string) => { efs?: EFSClient; ec2?: EC2Client };
}

/** The EFS SDK module: loaded on the first EFS call, so a function that never calls EFS never imports it. */
export type EfsSdk = typeof import('@aws-sdk/client-efs');
let sdk: Promise<EfsSdk> | undefined;
export const efsSdk = (): Promise<EfsSdk> => (sdk ??= import('@aws-sdk/client-efs'));

/**
 * CreateFileSystem's CreationToken: stable per (backend, share name) and 64 characters (EFS's
 * limit), so a create retried after a lost reply, or two racing creates, make one file system.
 */
export function creationTokenFor(backendHost: string, name: string): string {
  return createHash('sha256').update(`aws-efs\n${backendHost}\n${name}`).digest('hex');
}

/** What a tenant mounts: the file system's DNS name (it resolves to the mount target of the client's zone) and its root. */
export function exportLocationOf(fileSystemId: string, region: string): string {
  const suffix = region.startsWith('cn-') ? 'amazonaws.com.cn' : 'amazonaws.com';
  return `${fileSystemId}.efs.${region}.${suffix}:/`;
}

/** The security group of one share: unique per VPC, as EC2 requires of group names. */
export function securityGroupNameFor(backendHost: string, name: string): string {
  return `ferry-${backendHost}-${name}`;
}

export const tagOf = (fs: Pick<FileSystemDescription, 'Tags'> | { Tags?: { Key?: string; Value?: string }[] }, key: string) =>
  fs.Tags?.find((t) => t.Key === key)?.Value;

const REGION_RE = /^[a-z]{2}(-[a-z]+)+-\d$/;

/** An aws-efs backend's record, checked: every problem is named at once, as the inventory does. */
export function awsEfsShareBackend(config: ShareBackendConfig): AwsEfsShareBackendConfig {
  const c = config as Partial<AwsEfsShareBackendConfig>;
  const problems: string[] = [];
  if (c.driver !== 'aws-efs') problems.push(`driver is ${JSON.stringify(c.driver)}, not aws-efs`);
  if (typeof c.region !== 'string' || !REGION_RE.test(c.region)) problems.push(`region must be a region such as eu-west-1, not ${JSON.stringify(c.region)}`);
  if (typeof c.vpcId !== 'string' || !/^vpc-[0-9a-f]+$/.test(c.vpcId)) problems.push(`vpcId must be a VPC id (vpc-...), not ${JSON.stringify(c.vpcId)}`);
  const subnets = c.subnetIds;
  if (!Array.isArray(subnets) || subnets.length === 0 || !subnets.every((s) => typeof s === 'string' && /^subnet-[0-9a-f]+$/.test(s))) {
    problems.push(`subnetIds must be one or more subnet ids (subnet-...), not ${JSON.stringify(subnets)}`);
  } else if (new Set(subnets).size !== subnets.length) problems.push('subnetIds names a subnet twice');
  if (c.performanceMode !== undefined && c.performanceMode !== 'generalPurpose' && c.performanceMode !== 'maxIO') problems.push(`performanceMode must be generalPurpose or maxIO, not ${JSON.stringify(c.performanceMode)}`);
  if (c.throughputMode !== undefined && c.throughputMode !== 'elastic' && c.throughputMode !== 'bursting') problems.push(`throughputMode must be elastic or bursting, not ${JSON.stringify(c.throughputMode)}`);
  // EFS refuses this pair at CreateFileSystem: said once here instead of at every create.
  if (c.performanceMode === 'maxIO' && (c.throughputMode ?? DEFAULT_THROUGHPUT_MODE) === 'elastic') problems.push('performanceMode maxIO cannot go with elastic throughput (set throughputMode: bursting)');
  if (!Array.isArray(c.protocols) || c.protocols.length === 0 || c.protocols.some((p) => p !== 'NFS')) problems.push(`protocols must be [NFS]: EFS exports NFS only, not ${JSON.stringify(c.protocols)}`);
  if (problems.length > 0) throw new ConfigurationError(`share backend ${config.host} (aws-efs): ${problems.join('; ')}`, { context: { host: config.host } });
  return config as AwsEfsShareBackendConfig;
}
