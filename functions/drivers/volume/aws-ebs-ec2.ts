/**
 * What the aws-ebs volume driver knows of EC2: the tags that name a Ferry volume or snapshot, the
 * states and error codes it acts on, and how it derives a client token and a region.
 */
import { createHash } from 'node:crypto';
import type { EC2Client, Snapshot, Volume } from '@aws-sdk/client-ec2';
import { BackendNotReady, DriverError } from '../../core/errors.js';
import type { AttachmentState } from './driver.js';

export const EBS_DRIVER_VERSION = '1.0';
export const DEFAULT_EBS_VOLUME_TYPE = 'gp3';
/** EC2's recommended device names for EBS data volumes on Linux instances. */
export const EBS_DEVICE_NAMES = 'fghijklmnop'.split('').map((c) => `/dev/sd${c}`);
/**
 * How long a driver call looks at a change in progress before it answers BackendNotReady (3 looks,
 * 1 s apart): a quick change finishes in the same call; a slower one is waited for by the state
 * machine (infra/asl/policy.ts BACKEND_WAIT), never inside a function.
 */
export const DEFAULT_POLL_INTERVAL_MS = 1_000;
export const DEFAULT_POLL_ATTEMPTS = 3;

export const TAG_NAME = 'Name';
export const TAG_BACKEND_NAME = 'ferry:backend-name';
export const TAG_BACKEND = 'ferry:backend';
export const TAG_POOL = 'ferry:pool';
export const TAG_SNAPSHOT_NAME = 'ferry:snapshot-name';
/** On a drill's copy in a target region (aws-ebs-replication.ts): never one of the backend's volumes. */
export const TAG_DRILL = 'ferry:drill';
/**
 * On a volume Ferry did not make but took over by manage (adoptVolume): only such a volume's
 * `ferry:*` tags may ever be removed (releaseAdopted; the IAM grant requires it too).
 */
export const TAG_ADOPTED = 'ferry:adopted';
/** Every tag adoption puts on a volume, and what its release removes. */
export const ADOPTION_TAG_KEYS = [TAG_BACKEND_NAME, TAG_BACKEND, TAG_POOL, TAG_ADOPTED];

export const GONE_STATES = new Set(['deleting', 'deleted']);
export const CONNECTED_STATES = new Set(['attaching', 'attached', 'busy']);
export const NOT_FOUND_CODES = new Set(['InvalidVolume.NotFound']);
export const SNAPSHOT_NOT_FOUND_CODES = new Set(['InvalidSnapshot.NotFound']);
/** Snapshot states that still hold (or will hold) the data; `error` ones are replaced. */
export const LIVE_SNAPSHOT_STATES = new Set(['pending', 'completed', 'recoverable', 'recovering']);
/** DetachVolume on a volume not attached to that instance. */
export const NOT_ATTACHED_CODES = new Set(['IncorrectState', 'InvalidAttachment.NotFound']);
export const MULTIATTACH_TYPES = new Set(['io1', 'io2']);
/** EC2's throttle (RequestLimitExceeded) and the SDK's: the call may succeed later, nothing was decided. */
export const THROTTLE_CODES = new Set(['RequestLimitExceeded', 'ThrottlingException', 'Throttling']);

/**
 * Where EC2's attachment of a volume to an instance stands (EC2 VolumeAttachment.State: attaching,
 * attached, detaching, detached, busy). `busy` is attached and in use. An attachment that went
 * `detaching`/`detached`, or none at all, is a connection EC2 no longer holds: the attach did not
 * take (the instance stopped or terminated, the device name taken, a detach by someone else).
 */
export function attachmentStateOf(volume: Volume | undefined, instanceId: string, what: string): AttachmentState {
  if (!volume || GONE_STATES.has(volume.State ?? '')) return { state: 'gone', reason: `EBS volume of ${what} no longer exists (state ${volume?.State ?? 'not found'})` };
  const attachments = (volume.Attachments ?? []).filter((a) => a.InstanceId === instanceId);
  const live = attachments.find((a) => CONNECTED_STATES.has(a.State ?? ''));
  if (live?.State === 'attaching') return { state: 'attaching' };
  if (live) return { state: 'attached' };
  const seen = attachments.map((a) => a.State).join(', ');
  return {
    state: 'gone',
    reason: `EC2 holds no attachment of EBS volume ${volume.VolumeId} to instance ${instanceId}${seen ? ` (its attachment is ${seen})` : ''}: the attach did not take (instance stopped or terminated, device name taken, or detached meanwhile)`,
  };
}

/** A DriverError of a throttled EC2 call as BackendNotReady (the machine looks again after its wait); any other error as it is. */
export function throttledAsNotReady(e: unknown, host: string, backendName: string): unknown {
  const code = e instanceof DriverError ? e.context.code : undefined;
  if (typeof code !== 'string' || !THROTTLE_CODES.has(code)) return e;
  return new BackendNotReady(`backend ${host}: EC2 throttled the look at ${backendName} (${code})`, { cause: e, context: { host, backendName, code } });
}

/** The first of EBS_DEVICE_NAMES an instance's block device mappings leave free (/dev/sdf and /dev/xvdf name the same slot on Xen instances: a taken one takes both). */
export function freeDeviceOf(mappings: { DeviceName?: string }[]): string | undefined {
  const used = new Set(mappings.map((m) => (m.DeviceName ?? '').replace(/^\/dev\/xvd/, '/dev/sd')));
  return EBS_DEVICE_NAMES.find((d) => !used.has(d));
}

/** The sizes EC2 accepts per volume type, in GiB (EBS volume types reference: io1/io2 from 4, st1/sc1 from 125). */
export const EBS_SIZE_LIMITS: Record<string, { min: number; max: number }> = {
  gp2: { min: 1, max: 16_384 },
  gp3: { min: 1, max: 16_384 },
  io1: { min: 4, max: 16_384 },
  io2: { min: 4, max: 65_536 },
  st1: { min: 125, max: 16_384 },
  sc1: { min: 125, max: 16_384 },
  standard: { min: 1, max: 1_024 },
};

/** io1 and io2 volumes must be given their IOPS (CreateVolume's Iops is required for them): the range and the most per GiB. */
export const PROVISIONED_IOPS: Record<string, { min: number; max: number; maxPerGb: number }> = {
  io1: { min: 100, max: 64_000, maxPerGb: 50 },
  io2: { min: 100, max: 256_000, maxPerGb: 1_000 },
};
/** IOPS per GiB a backend provisions when its inventory entry names none: 50 is io1's most, valid for io2 too. */
export const DEFAULT_IOPS_PER_GB = 50;

/** The Iops to create a volume of this type and size with: undefined for types that take none. */
export function provisionedIops(volumeType: string, sizeGb: number, iopsPerGb = DEFAULT_IOPS_PER_GB): number | undefined {
  const limits = PROVISIONED_IOPS[volumeType];
  if (!limits) return undefined;
  const perGb = Math.min(iopsPerGb, limits.maxPerGb);
  return Math.max(limits.min, Math.min(limits.max, Math.floor(sizeGb * perGb)));
}

export interface AwsEbsDriverOptions {
  /** The client of the site the driver works on (tests inject a mocked one). */
  client?: EC2Client;
  /** Clients of other regions (replication targets); default: made on first use. */
  clientFor?: (region: string) => EC2Client;
  /** The service's active backend id: '' the primary, or the replication target a failover moved it to. */
  activeBackendId?: string;
  /** The clock replication's intervals and lag are measured with (tests give a fixed one). */
  now?: () => number;
  pollIntervalMs?: number;
  pollAttempts?: number;
}

/** Stable per (backend, backend name) and within EC2's 64-character limit. */
export function clientTokenFor(backendHost: string, backendName: string): string {
  return createHash('sha256').update(`${backendHost}\n${backendName}`).digest('hex');
}

/** `us-east-1a` -> `us-east-1`: the volume's region follows its availability zone. */
export function regionOfAvailabilityZone(az: string): string {
  return az.replace(/[a-z]$/, '');
}

/** The EC2 SDK module (1 s of import): loaded on the first EC2 call, so a function that never calls EC2 never pays for it. */
export type Ec2Sdk = typeof import('@aws-sdk/client-ec2');
let sdk: Promise<Ec2Sdk> | undefined;
export const ec2Sdk = (): Promise<Ec2Sdk> => (sdk ??= import('@aws-sdk/client-ec2'));

export const errorCode = (e: unknown) => (e as { name?: string; Code?: string } | undefined)?.Code ?? (e as { name?: string } | undefined)?.name ?? 'Error';
export const tagOf = (v: Volume | Snapshot, key: string) => v.Tags?.find((t) => t.Key === key)?.Value;
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
