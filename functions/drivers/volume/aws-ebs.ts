/**
 * The AWS volume driver: a Ferry volume is an EBS volume, a host connection an EBS attachment to an
 * EC2 instance (`connector.host` is the instance id).
 *
 * Volumes are found by tag, never by a stored id: `ferry:backend` (the backend host) and
 * `ferry:backend-name` (the stable backend name), so a step retried after a lost reply finds what
 * its first try made. CreateVolume also carries a ClientToken derived from the backend name, so two
 * tries racing each other make one volume.
 *
 * Snapshots are EBS snapshots found the same way, by tags (`ferry:backend`, `ferry:backend-name`,
 * `ferry:snapshot-name`). EBS has no cross-site replication here: the driver is not a
 * ReplicationDriver and reports `replicationEnabled: false`.
 */
import { createHash } from 'node:crypto';
import {
  AttachVolumeCommand,
  CreateSnapshotCommand,
  CreateVolumeCommand,
  DeleteSnapshotCommand,
  DeleteVolumeCommand,
  DescribeInstancesCommand,
  DescribeSnapshotsCommand,
  DescribeVolumesCommand,
  DetachVolumeCommand,
  EC2Client,
  ModifyVolumeCommand,
  type Filter,
  type Snapshot,
  type Volume,
  type VolumeAttachment,
  type VolumeType,
} from '@aws-sdk/client-ec2';
import { DriverError } from '../../core/errors.js';
import type {
  BackendConfig,
  BackendConnection,
  BackendVolume,
  ConnectionProperties,
  Connector,
  PoolCapabilities,
  SnapshotDriver,
  VolumeDriver,
} from './driver.js';

export const EBS_DRIVER_VERSION = '1.0';
export const DEFAULT_EBS_VOLUME_TYPE = 'gp3';
/** EC2's recommended device names for EBS data volumes on Linux instances. */
export const EBS_DEVICE_NAMES = 'fghijklmnop'.split('').map((c) => `/dev/sd${c}`);
/** Volume and attachment state changes take seconds; 120 × 2 s stays well inside a Lambda's 15 minutes. */
export const DEFAULT_POLL_INTERVAL_MS = 2_000;
export const DEFAULT_POLL_ATTEMPTS = 120;

export const TAG_NAME = 'Name';
export const TAG_BACKEND_NAME = 'ferry:backend-name';
export const TAG_BACKEND = 'ferry:backend';
export const TAG_POOL = 'ferry:pool';
export const TAG_SNAPSHOT_NAME = 'ferry:snapshot-name';

const GONE_STATES = new Set(['deleting', 'deleted']);
const CONNECTED_STATES = new Set(['attaching', 'attached', 'busy']);
const NOT_FOUND_CODES = new Set(['InvalidVolume.NotFound']);
const SNAPSHOT_NOT_FOUND_CODES = new Set(['InvalidSnapshot.NotFound']);
/** Snapshot states that still hold (or will hold) the data; `error` ones are replaced. */
const LIVE_SNAPSHOT_STATES = new Set(['pending', 'completed', 'recoverable', 'recovering']);
/** DetachVolume on a volume not attached to that instance. */
const NOT_ATTACHED_CODES = new Set(['IncorrectState', 'InvalidAttachment.NotFound']);
const MULTIATTACH_TYPES = new Set(['io1', 'io2']);

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

const errorCode = (e: unknown) => (e as { name?: string; Code?: string } | undefined)?.Code ?? (e as { name?: string } | undefined)?.name ?? 'Error';
const tagOf = (v: Volume | Snapshot, key: string) => v.Tags?.find((t) => t.Key === key)?.Value;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class AwsEbsVolumeDriver implements VolumeDriver, SnapshotDriver {
  readonly backendHost: string;
  private readonly client: EC2Client;
  private readonly pollIntervalMs: number;
  private readonly pollAttempts: number;

  constructor(
    private readonly config: BackendConfig,
    options: AwsEbsDriverOptions = {},
  ) {
    this.backendHost = config.host;
    this.client = options.client ?? new EC2Client(config.availabilityZone ? { region: regionOfAvailabilityZone(config.availabilityZone) } : {});
    this.pollIntervalMs = options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;
    this.pollAttempts = options.pollAttempts ?? DEFAULT_POLL_ATTEMPTS;
  }

  private fail(message: string, context: Record<string, unknown> = {}, cause?: unknown): DriverError {
    return new DriverError(`backend ${this.backendHost}: ${message}`, { cause, context: { host: this.backendHost, ...context } });
  }

  private awsFail(operation: string, e: unknown, context: Record<string, unknown>): DriverError {
    return this.fail(`EBS ${operation} failed: ${errorCode(e)}: ${(e as Error)?.message ?? String(e)}`, { operation, code: errorCode(e), ...context }, e);
  }

  private async send<T>(operation: string, context: Record<string, unknown>, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (e) {
      throw this.awsFail(operation, e, context);
    }
  }

  /** Every live volume matching the filters, across pages. */
  private async describe(filters: Filter[]): Promise<Volume[]> {
    const out: Volume[] = [];
    let NextToken: string | undefined;
    do {
      const page = await this.send('DescribeVolumes', { filters }, () =>
        this.client.send(new DescribeVolumesCommand({ Filters: filters, NextToken })),
      );
      for (const v of page.Volumes ?? []) if (!GONE_STATES.has(v.State ?? '')) out.push(v);
      NextToken = page.NextToken;
    } while (NextToken);
    return out;
  }

  private backendVolumes(): Promise<Volume[]> {
    return this.describe([{ Name: `tag:${TAG_BACKEND}`, Values: [this.backendHost] }]);
  }

  private async find(backendName: string): Promise<Volume | undefined> {
    const found = await this.describe([
      { Name: `tag:${TAG_BACKEND}`, Values: [this.backendHost] },
      { Name: `tag:${TAG_BACKEND_NAME}`, Values: [backendName] },
    ]);
    if (found.length > 1) throw this.fail(`${found.length} EBS volumes carry backend name ${backendName}`, { backendName, volumeIds: found.map((v) => v.VolumeId) });
    return found[0];
  }

  private async describeById(volumeId: string): Promise<Volume | undefined> {
    try {
      const out = await this.client.send(new DescribeVolumesCommand({ VolumeIds: [volumeId] }));
      return out.Volumes?.[0];
    } catch (e) {
      if (NOT_FOUND_CODES.has(errorCode(e))) return undefined;
      throw this.awsFail('DescribeVolumes', e, { volumeId });
    }
  }

  /** Polls one volume until `done` holds (undefined = the volume is gone). */
  private async waitFor(volumeId: string, what: string, done: (v: Volume | undefined) => boolean): Promise<Volume | undefined> {
    for (let attempt = 0; attempt < this.pollAttempts; attempt++) {
      const v = await this.describeById(volumeId);
      if (done(v)) return v;
      if (v?.State === 'error') throw this.fail(`EBS volume ${volumeId} went into state error while waiting for it to be ${what}`, { volumeId });
      await sleep(this.pollIntervalMs);
    }
    throw this.fail(`EBS volume ${volumeId} was not ${what} after ${this.pollAttempts} checks`, { volumeId });
  }

  private async usedGb(pool: string): Promise<number> {
    return (await this.backendVolumes()).filter((v) => tagOf(v, TAG_POOL) === pool).reduce((sum, v) => sum + (v.Size ?? 0), 0);
  }

  async capabilities(): Promise<PoolCapabilities[]> {
    const volumes = await this.backendVolumes();
    const multiattach = MULTIATTACH_TYPES.has(this.config.ebsVolumeType ?? DEFAULT_EBS_VOLUME_TYPE);
    return this.config.pools.map((pool) => {
      const used = volumes.filter((v) => tagOf(v, TAG_POOL) === pool.name).reduce((sum, v) => sum + (v.Size ?? 0), 0);
      return {
        pool: pool.name,
        totalCapacityGb: pool.totalCapacityGb,
        freeCapacityGb: Math.max(0, pool.totalCapacityGb - used),
        multiattach,
        sharedTargets: false,
        storageProtocol: 'aws_ebs',
        volumeBackendName: this.config.volumeBackendName,
        driverVersion: EBS_DRIVER_VERSION,
        vendorName: 'Ferry',
        replicationEnabled: false,
      };
    });
  }

  async createVolume(req: { backendName: string; sizeGb: number; pool: string }): Promise<{ providerLocation: string }> {
    const { backendName, sizeGb, pool } = req;
    const poolConf = this.config.pools.find((p) => p.name === pool);
    if (!poolConf) throw this.fail(`no pool ${pool}`, { pool });
    if (!this.config.availabilityZone) throw this.fail('the aws-ebs driver needs config.availabilityZone');
    if (!Number.isInteger(sizeGb) || sizeGb <= 0) throw this.fail(`invalid size ${sizeGb} GiB for ${backendName}`, { backendName, sizeGb });

    let volume = await this.find(backendName);
    if (volume) {
      this.checkSame(volume, req);
    } else {
      const free = poolConf.totalCapacityGb - (await this.usedGb(pool));
      if (sizeGb > free) throw this.fail(`pool ${pool} has ${free} GiB free, ${sizeGb} GiB requested for ${backendName}`, { pool, freeGb: free, sizeGb });
      const tags = [
        { Key: TAG_NAME, Value: backendName },
        { Key: TAG_BACKEND_NAME, Value: backendName },
        { Key: TAG_BACKEND, Value: this.backendHost },
        { Key: TAG_POOL, Value: pool },
      ];
      const created = await this.send('CreateVolume', { backendName }, () =>
        this.client.send(
          new CreateVolumeCommand({
            Size: sizeGb,
            AvailabilityZone: this.config.availabilityZone,
            VolumeType: (this.config.ebsVolumeType ?? DEFAULT_EBS_VOLUME_TYPE) as VolumeType,
            ClientToken: clientTokenFor(this.backendHost, backendName),
            TagSpecifications: [{ ResourceType: 'volume', Tags: tags }],
          }),
        ),
      );
      if (!created.VolumeId) throw this.fail(`CreateVolume returned no volume id for ${backendName}`, { backendName });
      volume = created;
    }
    // Cinder's create ends with the volume available: attach and extend need it so.
    const volumeId = volume.VolumeId!;
    if (volume.State !== 'available' && volume.State !== 'in-use') {
      await this.waitFor(volumeId, 'available', (v) => {
        // EC2 answers a reused ClientToken with the volume it first made, even if that is gone since.
        if (!v || GONE_STATES.has(v.State ?? '')) throw this.fail(`EBS volume ${volumeId} for ${backendName} is gone (deleted, or its create token was used before)`, { backendName, volumeId });
        return v.State === 'available' || v.State === 'in-use';
      });
    }
    return { providerLocation: volumeId };
  }

  private checkSame(volume: Volume, req: { backendName: string; sizeGb: number; pool: string }): void {
    const pool = tagOf(volume, TAG_POOL);
    if (volume.Size !== req.sizeGb || pool !== req.pool) {
      throw this.fail(`volume ${req.backendName} already exists with ${volume.Size} GiB in pool ${pool}`, {
        backendName: req.backendName,
        volumeId: volume.VolumeId,
        existingSizeGb: volume.Size,
        existingPool: pool,
      });
    }
  }

  async deleteVolume(backendName: string): Promise<void> {
    const volume = await this.find(backendName);
    if (!volume) return;
    const volumeId = volume.VolumeId!;
    const attachments = (volume.Attachments ?? []).filter((a) => CONNECTED_STATES.has(a.State ?? ''));
    for (const a of attachments) await this.detach(volumeId, a.InstanceId!, backendName);
    if (attachments.length > 0 || volume.State === 'in-use') {
      await this.waitFor(volumeId, 'detached', (v) => v === undefined || v.State === 'available' || v.State === 'error' || GONE_STATES.has(v.State ?? ''));
    }
    try {
      await this.client.send(new DeleteVolumeCommand({ VolumeId: volumeId }));
    } catch (e) {
      if (NOT_FOUND_CODES.has(errorCode(e))) return;
      throw this.awsFail('DeleteVolume', e, { backendName, volumeId });
    }
  }

  async extendVolume(backendName: string, newSizeGb: number): Promise<void> {
    const volume = await this.find(backendName);
    if (!volume) throw this.fail(`volume ${backendName} not found`, { backendName });
    const size = volume.Size ?? 0;
    // After ModifyVolume, DescribeVolumes already reports the target size: a retry ends here.
    if (newSizeGb === size) return;
    if (!Number.isInteger(newSizeGb) || newSizeGb < size) throw this.fail(`cannot shrink ${backendName} from ${size} GiB to ${newSizeGb} GiB`, { backendName, sizeGb: size, newSizeGb });
    const pool = tagOf(volume, TAG_POOL);
    const poolConf = this.config.pools.find((p) => p.name === pool);
    if (poolConf) {
      const free = poolConf.totalCapacityGb - (await this.usedGb(poolConf.name));
      if (newSizeGb - size > free) throw this.fail(`pool ${pool} has ${free} GiB free, ${backendName} needs ${newSizeGb - size} GiB more`, { pool, freeGb: free });
    }
    await this.send('ModifyVolume', { backendName, volumeId: volume.VolumeId }, () =>
      this.client.send(new ModifyVolumeCommand({ VolumeId: volume.VolumeId, Size: newSizeGb })),
    );
  }

  async initializeConnection(backendName: string, connector: Connector): Promise<ConnectionProperties> {
    const instanceId = this.instanceOf(connector);
    const volume = await this.find(backendName);
    if (!volume) throw this.fail(`volume ${backendName} not found`, { backendName, instanceId });
    const volumeId = volume.VolumeId!;
    let attachment = this.attachmentTo(volume, instanceId);
    if (!attachment) {
      const device = typeof connector.mountpoint === 'string' && connector.mountpoint ? connector.mountpoint : await this.freeDevice(instanceId, backendName);
      try {
        await this.client.send(new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: instanceId, Device: device }));
      } catch (e) {
        // The attach may have happened with its reply lost (or a racing call did it): look before failing.
        const now = await this.describeById(volumeId).catch(() => undefined);
        if (!now || !this.attachmentTo(now, instanceId)) throw this.awsFail('AttachVolume', e, { backendName, volumeId, instanceId, device });
      }
    }
    if (attachment?.State !== 'attached') {
      const v = await this.waitFor(volumeId, `attached to ${instanceId}`, (v) => this.attachmentTo(v, instanceId)?.State === 'attached');
      attachment = this.attachmentTo(v, instanceId);
    }
    return { driverVolumeType: 'aws_ebs', data: { volume_id: volumeId, instance_id: instanceId, device: attachment?.Device } };
  }

  async terminateConnection(backendName: string, connector: Connector): Promise<void> {
    const instanceId = this.instanceOf(connector);
    const volume = await this.find(backendName);
    if (!volume || !this.attachmentTo(volume, instanceId)) return;
    await this.detach(volume.VolumeId!, instanceId, backendName);
    await this.waitFor(volume.VolumeId!, `detached from ${instanceId}`, (v) => !this.attachmentTo(v, instanceId));
  }

  private async detach(volumeId: string, instanceId: string, backendName: string): Promise<void> {
    try {
      await this.client.send(new DetachVolumeCommand({ VolumeId: volumeId, InstanceId: instanceId }));
    } catch (e) {
      const code = errorCode(e);
      if (NOT_ATTACHED_CODES.has(code) || NOT_FOUND_CODES.has(code)) return;
      throw this.awsFail('DetachVolume', e, { backendName, volumeId, instanceId });
    }
  }

  /** The live attachment of the volume to the instance (attaching, attached or busy), if any. */
  private attachmentTo(volume: Volume | undefined, instanceId: string): VolumeAttachment | undefined {
    return volume?.Attachments?.find((a) => a.InstanceId === instanceId && CONNECTED_STATES.has(a.State ?? ''));
  }

  private instanceOf(connector: Connector): string {
    if (!connector || typeof connector.host !== 'string' || !connector.host) throw this.fail('connector has no host (the EC2 instance id)', { connector });
    return connector.host;
  }

  private async freeDevice(instanceId: string, backendName: string): Promise<string> {
    const out = await this.send('DescribeInstances', { instanceId }, () => this.client.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] })));
    const instance = out.Reservations?.flatMap((r) => r.Instances ?? []).find((i) => i.InstanceId === instanceId);
    if (!instance) throw this.fail(`EC2 instance ${instanceId} not found`, { instanceId, backendName });
    // /dev/sdf and /dev/xvdf name the same slot on Xen instances: a taken one takes both.
    const used = new Set((instance.BlockDeviceMappings ?? []).map((m) => (m.DeviceName ?? '').replace(/^\/dev\/xvd/, '/dev/sd')));
    const device = EBS_DEVICE_NAMES.find((d) => !used.has(d));
    if (!device) throw this.fail(`EC2 instance ${instanceId} has no free device in /dev/sdf../dev/sdp`, { instanceId, backendName });
    return device;
  }

  async listVolumes(): Promise<BackendVolume[]> {
    return (await this.backendVolumes()).map((v) => ({ backendName: tagOf(v, TAG_BACKEND_NAME) ?? v.VolumeId!, sizeGb: v.Size ?? 0 }));
  }

  async listConnections(): Promise<BackendConnection[]> {
    const out: BackendConnection[] = [];
    for (const v of await this.backendVolumes()) {
      const backendName = tagOf(v, TAG_BACKEND_NAME) ?? v.VolumeId!;
      for (const a of v.Attachments ?? []) if (a.InstanceId && CONNECTED_STATES.has(a.State ?? '')) out.push({ backendName, host: a.InstanceId });
    }
    return out;
  }

  async getVolume(backendName: string): Promise<BackendVolume | undefined> {
    const v = await this.find(backendName);
    return v && { backendName, sizeGb: v.Size ?? 0 };
  }

  // ---- Snapshots ------------------------------------------------------------------------------

  /** This backend's snapshots matching the extra filters, across pages (only our own account's). */
  private async describeSnapshots(filters: Filter[]): Promise<Snapshot[]> {
    const out: Snapshot[] = [];
    const Filters = [{ Name: `tag:${TAG_BACKEND}`, Values: [this.backendHost] }, ...filters];
    let NextToken: string | undefined;
    do {
      const page = await this.send('DescribeSnapshots', { filters: Filters }, () =>
        this.client.send(new DescribeSnapshotsCommand({ OwnerIds: ['self'], Filters, NextToken })),
      );
      out.push(...(page.Snapshots ?? []));
      NextToken = page.NextToken;
    } while (NextToken);
    return out;
  }

  private snapshotsNamed(backendName: string, snapshotName: string): Promise<Snapshot[]> {
    return this.describeSnapshots([
      { Name: `tag:${TAG_BACKEND_NAME}`, Values: [backendName] },
      { Name: `tag:${TAG_SNAPSHOT_NAME}`, Values: [snapshotName] },
    ]);
  }

  /**
   * EC2 CreateSnapshot, then waits until it is completed (Cinder's snapshot is available only
   * then). CreateSnapshot takes no client token: the tags make a retry find the snapshot its first
   * try made; a snapshot in state `error` is replaced.
   */
  async createSnapshot(backendName: string, snapshotName: string): Promise<void> {
    let snapshot = (await this.snapshotsNamed(backendName, snapshotName)).find((s) => LIVE_SNAPSHOT_STATES.has(s.State ?? ''));
    if (!snapshot) {
      const volume = await this.find(backendName);
      if (!volume) throw this.fail(`volume ${backendName} not found`, { backendName, snapshotName });
      snapshot = await this.send('CreateSnapshot', { backendName, snapshotName, volumeId: volume.VolumeId }, () =>
        this.client.send(
          new CreateSnapshotCommand({
            VolumeId: volume.VolumeId,
            Description: `Ferry snapshot ${snapshotName} of ${backendName}`,
            TagSpecifications: [
              {
                ResourceType: 'snapshot',
                Tags: [
                  { Key: TAG_NAME, Value: snapshotName },
                  { Key: TAG_BACKEND, Value: this.backendHost },
                  { Key: TAG_BACKEND_NAME, Value: backendName },
                  { Key: TAG_SNAPSHOT_NAME, Value: snapshotName },
                ],
              },
            ],
          }),
        ),
      );
    }
    const snapshotId = snapshot.SnapshotId;
    if (!snapshotId) throw this.fail(`CreateSnapshot returned no snapshot id for ${snapshotName} of ${backendName}`, { backendName, snapshotName });
    for (let attempt = 0; snapshot?.State !== 'completed'; attempt++) {
      if (snapshot?.State === 'error') throw this.fail(`EBS snapshot ${snapshotId} (${snapshotName} of ${backendName}) went into state error: ${snapshot.StateMessage ?? ''}`, { snapshotId, backendName, snapshotName });
      if (attempt >= this.pollAttempts) throw this.fail(`EBS snapshot ${snapshotId} was not completed after ${this.pollAttempts} checks`, { snapshotId, backendName, snapshotName });
      await sleep(this.pollIntervalMs);
      snapshot = await this.describeSnapshotById(snapshotId);
      if (!snapshot) throw this.fail(`EBS snapshot ${snapshotId} (${snapshotName} of ${backendName}) vanished while being created`, { snapshotId, backendName, snapshotName });
    }
  }

  private async describeSnapshotById(snapshotId: string): Promise<Snapshot | undefined> {
    try {
      const out = await this.client.send(new DescribeSnapshotsCommand({ SnapshotIds: [snapshotId] }));
      return out.Snapshots?.[0];
    } catch (e) {
      if (SNAPSHOT_NOT_FOUND_CODES.has(errorCode(e))) return undefined;
      throw this.awsFail('DescribeSnapshots', e, { snapshotId });
    }
  }

  /** Deletes every EBS snapshot carrying the name (two racing creates may have made two); none left is success. */
  async deleteSnapshot(backendName: string, snapshotName: string): Promise<void> {
    for (const s of await this.snapshotsNamed(backendName, snapshotName)) {
      try {
        await this.client.send(new DeleteSnapshotCommand({ SnapshotId: s.SnapshotId }));
      } catch (e) {
        if (SNAPSHOT_NOT_FOUND_CODES.has(errorCode(e))) continue;
        throw this.awsFail('DeleteSnapshot', e, { backendName, snapshotName, snapshotId: s.SnapshotId });
      }
    }
  }

  async listSnapshots(): Promise<{ backendName: string; snapshotName: string }[]> {
    const seen = new Set<string>();
    const out: { backendName: string; snapshotName: string }[] = [];
    for (const s of await this.describeSnapshots([])) {
      const backendName = tagOf(s, TAG_BACKEND_NAME);
      const snapshotName = tagOf(s, TAG_SNAPSHOT_NAME);
      if (!backendName || !snapshotName || s.State === 'error') continue;
      const key = `${backendName}\0${snapshotName}`;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push({ backendName, snapshotName });
    }
    return out;
  }
}
