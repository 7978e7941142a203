/**
 * What the aws-ebs volume driver knows of EC2: the tags that name a Ferry volume or snapshot, the
 * states and error codes it acts on, and how it derives a client token and a region.
 */
import { createHash } from 'node:crypto';
import type { EC2Client, Snapshot, Volume } from '@aws-sdk/client-ec2';

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

export const GONE_STATES = new Set(['deleting', 'deleted']);
export const CONNECTED_STATES = new Set(['attaching', 'attached', 'busy']);
export const NOT_FOUND_CODES = new Set(['InvalidVolume.NotFound']);
export const SNAPSHOT_NOT_FOUND_CODES = new Set(['InvalidSnapshot.NotFound']);
/** Snapshot states that still hold (or will hold) the data; `error` ones are replaced. */
export const LIVE_SNAPSHOT_STATES = new Set(['pending', 'completed', 'recoverable', 'recovering']);
/** DetachVolume on a volume not attached to that instance. */
export const NOT_ATTACHED_CODES = new Set(['IncorrectState', 'InvalidAttachment.NotFound']);
export const MULTIATTACH_TYPES = new Set(['io1', 'io2']);

export interface AwsEbsDriverOptions {
  client?: EC2Client;
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
