/**
 * The aws-ebs volume driver's volumes and host connections (its snapshots: aws-ebs.ts, which
 * extends this). A Ferry volume is an EBS volume found by its tags, a host connection an EBS
 * attachment to the EC2 instance named by `connector.host`.
 */
import type { EC2Client, Filter, Volume, VolumeAttachment, VolumeType } from '@aws-sdk/client-ec2';
import { awsApiClientConfig } from '../../core/aws-http.js';
import { BackendNotReady, DriverError } from '../../core/errors.js';
import type { AttachmentState, BackendConfig, BackendConnection, BackendVolume, ConnectionProperties, Connector, PoolCapabilities, VolumeDriver } from './driver.js';
import {
  CONNECTED_STATES,
  throttledAsNotReady,
  attachmentStateOf,
  freeDeviceOf,
  DEFAULT_EBS_VOLUME_TYPE,
  DEFAULT_POLL_ATTEMPTS,
  DEFAULT_POLL_INTERVAL_MS,
  EBS_DRIVER_VERSION,
  EBS_SIZE_LIMITS,
  GONE_STATES,
  MULTIATTACH_TYPES,
  NOT_ATTACHED_CODES,
  NOT_FOUND_CODES,
  TAG_BACKEND,
  TAG_BACKEND_NAME,
  TAG_DRILL,
  TAG_NAME,
  TAG_POOL,
  clientTokenFor,
  errorCode,
  provisionedIops,
  regionOfAvailabilityZone,
  ec2Sdk,
  sleep,
  tagOf,
  type AwsEbsDriverOptions,
} from './aws-ebs-ec2.js';

/** How many checks right after CreateVolume may find the new id unknown before it counts as gone. */
export const NEW_VOLUME_UNSEEN_CHECKS = 3;

export class AwsEbsVolumeStore implements VolumeDriver {
  readonly backendHost: string;
  /** An EBS volume attached to an EC2 instance (connection_info `volume_id`, `instance_id`, `device`). */
  readonly driverVolumeType = 'aws_ebs';
  private readonly clients = new Map<string, EC2Client>();
  private readonly clientFor?: (region: string) => EC2Client;
  protected readonly pollIntervalMs: number;
  protected readonly pollAttempts: number;

  /** `config` is the site the driver works on: the primary's, or after a failover the target's zone (aws-ebs.ts). */
  constructor(
    protected readonly config: BackendConfig,
    options: AwsEbsDriverOptions = {},
  ) {
    this.backendHost = config.host;
    if (options.client) this.clients.set(this.homeRegion(), options.client);
    this.clientFor = options.clientFor;
    this.pollIntervalMs = options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;
    this.pollAttempts = options.pollAttempts ?? DEFAULT_POLL_ATTEMPTS;
  }

  /** The region of the zone the driver works in ('' when the configuration names none: the SDK's default). */
  protected homeRegion(): string {
    return this.config.availabilityZone ? regionOfAvailabilityZone(this.config.availabilityZone) : '';
  }

  /** The EC2 client of the site the driver works on. */
  protected ec2Client(): Promise<EC2Client> {
    return this.ec2ClientFor(this.homeRegion());
  }

  /** The EC2 client of a region: an injected one, or one made (and the SDK loaded) on first use. */
  protected async ec2ClientFor(region: string): Promise<EC2Client> {
    let client = this.clients.get(region) ?? this.clientFor?.(region);
    if (!client) {
      const { EC2Client: Client } = await ec2Sdk();
      client = new Client(awsApiClientConfig(region));
    }
    this.clients.set(region, client);
    return client;
  }

  protected fail(message: string, context: Record<string, unknown> = {}, cause?: unknown): DriverError {
    return new DriverError(`backend ${this.backendHost}: ${message}`, { cause, context: { host: this.backendHost, ...context } });
  }

  protected awsFail(operation: string, e: unknown, context: Record<string, unknown>): DriverError {
    return this.fail(`EBS ${operation} failed: ${errorCode(e)}: ${(e as Error)?.message ?? String(e)}`, { operation, code: errorCode(e), ...context }, e);
  }

  protected async send<T>(operation: string, context: Record<string, unknown>, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (e) {
      throw this.awsFail(operation, e, context);
    }
  }

  /** Every live volume matching the filters, across pages, in the region the driver works in. */
  protected describe(filters: Filter[]): Promise<Volume[]> {
    return this.describeIn(this.homeRegion(), filters);
  }

  protected async describeIn(region: string, filters: Filter[]): Promise<Volume[]> {
    const out: Volume[] = [];
    let nextToken: string | undefined;
    do {
      const page = await this.describePageIn(region, filters, nextToken);
      out.push(...page.volumes);
      nextToken = page.nextToken;
    } while (nextToken);
    return out;
  }

  /** One DescribeVolumes page (live volumes only) and the token of the next, if any; `maxResults` is EC2's 5-500 (its default: all). */
  protected async describePageIn(region: string, filters: Filter[], nextToken?: string, maxResults?: number): Promise<{ volumes: Volume[]; nextToken?: string }> {
    const page = await this.send('DescribeVolumes', { filters, region }, async () =>
      (await this.ec2ClientFor(region)).send(new (await ec2Sdk()).DescribeVolumesCommand({ Filters: filters, NextToken: nextToken, MaxResults: maxResults })),
    );
    return { volumes: (page.Volumes ?? []).filter((v) => !GONE_STATES.has(v.State ?? '')), ...(page.NextToken ? { nextToken: page.NextToken } : {}) };
  }

  /** The backend's volumes in the region it works in (a replication drill's copies are not among them). */
  private async backendVolumes(): Promise<Volume[]> {
    return (await this.describe([{ Name: `tag:${TAG_BACKEND}`, Values: [this.backendHost] }])).filter((v) => !tagOf(v, TAG_DRILL));
  }

  protected async find(backendName: string): Promise<Volume | undefined> {
    const found = await this.describe([
      { Name: `tag:${TAG_BACKEND}`, Values: [this.backendHost] },
      { Name: `tag:${TAG_BACKEND_NAME}`, Values: [backendName] },
    ]);
    if (found.length > 1) throw this.fail(`${found.length} EBS volumes carry backend name ${backendName}`, { backendName, volumeIds: found.map((v) => v.VolumeId) });
    return found[0];
  }

  protected async describeById(volumeId: string): Promise<Volume | undefined> {
    try {
      const out = await (await this.ec2Client()).send(new (await ec2Sdk()).DescribeVolumesCommand({ VolumeIds: [volumeId] }));
      return out.Volumes?.[0];
    } catch (e) {
      if (NOT_FOUND_CODES.has(errorCode(e))) return undefined;
      throw this.awsFail('DescribeVolumes', e, { volumeId });
    }
  }

  /**
   * Looks at one volume a few times (pollAttempts, pollIntervalMs apart) until `done` holds
   * (undefined = the volume is gone); still not done is BackendNotReady, not a failure: the state
   * machine runs the step again after its wait, so no function waits on EC2 for long.
   */
  private async waitFor(volumeId: string, what: string, done: (v: Volume | undefined) => boolean): Promise<Volume | undefined> {
    for (let attempt = 0; attempt < this.pollAttempts; attempt++) {
      const v = await this.describeById(volumeId);
      if (done(v)) return v;
      if (v?.State === 'error') throw this.fail(`EBS volume ${volumeId} went into state error while waiting for it to be ${what}`, { volumeId });
      if (attempt + 1 < this.pollAttempts) await sleep(this.pollIntervalMs);
    }
    throw new BackendNotReady(`backend ${this.backendHost}: EBS volume ${volumeId} is not ${what} yet`, { context: { host: this.backendHost, volumeId } });
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

  /** `fromEbsSnapshot`: the EBS snapshot the new volume starts from (CopyingDriver, aws-ebs.ts). */
  async createVolume(req: { backendName: string; sizeGb: number; pool: string; multiattach?: boolean }, fromEbsSnapshot?: string): Promise<{ providerLocation: string }> {
    const { backendName, sizeGb, pool } = req;
    const poolConf = this.config.pools.find((p) => p.name === pool);
    if (!poolConf) throw this.fail(`no pool ${pool}`, { pool });
    if (!this.config.availabilityZone) throw this.fail('the aws-ebs driver needs config.availabilityZone');
    const volumeType = this.config.ebsVolumeType ?? DEFAULT_EBS_VOLUME_TYPE;
    const limits = EBS_SIZE_LIMITS[volumeType] ?? { min: 1, max: Infinity };
    // EC2 would refuse these with InvalidParameterValue; said here in Cinder's terms instead.
    if (!Number.isInteger(sizeGb) || sizeGb < limits.min || sizeGb > limits.max) {
      throw this.fail(`invalid size ${sizeGb} GiB for ${backendName}: EBS ${volumeType} volumes are ${limits.min} to ${limits.max} GiB`, { backendName, sizeGb, volumeType });
    }
    if (req.multiattach && !MULTIATTACH_TYPES.has(volumeType)) throw this.fail(`${backendName} is multiattach but EBS ${volumeType} volumes cannot attach to several instances (io1 and io2 can)`, { backendName, volumeType });

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
      const created = await this.send('CreateVolume', { backendName }, async () =>
        (await this.ec2Client()).send(new (await ec2Sdk()).CreateVolumeCommand({
            Size: sizeGb,
            AvailabilityZone: this.config.availabilityZone,
            VolumeType: volumeType as VolumeType,
            Iops: provisionedIops(volumeType, sizeGb, this.config.ebsIopsPerGb),
            // Per volume on EBS: only a volume of a multiattach type gets it (and its limits: Nitro instances, no boot).
            ...(req.multiattach ? { MultiAttachEnabled: true } : {}),
            ...(fromEbsSnapshot ? { SnapshotId: fromEbsSnapshot } : {}),
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
      let unseen = 0;
      await this.waitFor(volumeId, 'available', (v) => {
        // EC2 is eventually consistent: right after CreateVolume, DescribeVolumes may not know the
        // id yet (InvalidVolume.NotFound). Only a volume still unknown after a few checks, or one
        // deleting, is gone: EC2 answers a reused ClientToken with the volume it first made, even
        // if that was deleted since.
        if (!v && ++unseen <= NEW_VOLUME_UNSEEN_CHECKS) return false;
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
      await (await this.ec2Client()).send(new (await ec2Sdk()).DeleteVolumeCommand({ VolumeId: volumeId }));
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
    await this.send('ModifyVolume', { backendName, volumeId: volume.VolumeId }, async () =>
      (await this.ec2Client()).send(new (await ec2Sdk()).ModifyVolumeCommand({ VolumeId: volume.VolumeId, Size: newSizeGb })),
    );
  }

  async initializeConnection(backendName: string, connector: Connector): Promise<ConnectionProperties> {
    const instanceId = this.instanceOf(connector);
    const volume = await this.find(backendName);
    if (!volume) throw this.fail(`volume ${backendName} not found`, { backendName, instanceId });
    const volumeId = volume.VolumeId!;
    const attachment = this.attachmentTo(volume, instanceId);
    let device = attachment?.Device;
    let state = attachment?.State;
    if (!attachment) {
      device = typeof connector.mountpoint === 'string' && connector.mountpoint ? connector.mountpoint : await this.freeDevice(instanceId, backendName);
      try {
        state = (await (await this.ec2Client()).send(new (await ec2Sdk()).AttachVolumeCommand({ VolumeId: volumeId, InstanceId: instanceId, Device: device }))).State ?? 'attaching';
      } catch (e) {
        // The attach may have happened with its reply lost (or a racing call did it): look before
        // failing. If the look fails too, the attach's own error is the one to report (a retry looks again).
        let now: Volume | undefined;
        try {
          now = await this.describeById(volumeId);
        } catch (lookError) {
          throw this.awsFail('AttachVolume', e, { backendName, volumeId, instanceId, device, lookError: (lookError as Error).message });
        }
        const found = now && this.attachmentTo(now, instanceId);
        if (!found) throw this.awsFail('AttachVolume', e, { backendName, volumeId, instanceId, device });
        device = found.Device ?? device;
        state = found.State;
      }
    }
    // No wait for `attached` here: the connection_info is known once EC2 accepted the attach, so
    // attachment_update answers at once; `pending` makes it start volume-attach-wait, which looks
    // at EC2 (attachmentState) until the attachment is attached or gone.
    return { driverVolumeType: this.driverVolumeType, data: { volume_id: volumeId, instance_id: instanceId, device }, pending: state === 'attaching' };
  }

  /** The volume-attach-wait machine's look. A throttled DescribeVolumes is BackendNotReady: looked at again after the wait, never a failed attach. */
  async attachmentState(backendName: string, connector: Connector): Promise<AttachmentState> {
    const instanceId = this.instanceOf(connector);
    const volume = await this.find(backendName).catch((e: unknown) => Promise.reject(throttledAsNotReady(e, this.backendHost, backendName)));
    return attachmentStateOf(volume, instanceId, backendName);
  }

  async terminateConnection(backendName: string, connector: Connector): Promise<void> {
    const instanceId = this.instanceOf(connector);
    const volume = await this.find(backendName);
    if (!volume || !this.attachmentTo(volume, instanceId)) return;
    // No wait for the detach to finish: the export is gone once EC2 accepted it; a delete of the
    // volume waits for `available` in its state machine (deleteVolume: BackendNotReady).
    await this.detach(volume.VolumeId!, instanceId, backendName);
  }

  private async detach(volumeId: string, instanceId: string, backendName: string): Promise<void> {
    try {
      await (await this.ec2Client()).send(new (await ec2Sdk()).DetachVolumeCommand({ VolumeId: volumeId, InstanceId: instanceId }));
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
    const out = await this.send('DescribeInstances', { instanceId }, async () => (await this.ec2Client()).send(new (await ec2Sdk()).DescribeInstancesCommand({ InstanceIds: [instanceId] })));
    const instance = out.Reservations?.flatMap((r) => r.Instances ?? []).find((i) => i.InstanceId === instanceId);
    if (!instance) throw this.fail(`EC2 instance ${instanceId} not found`, { instanceId, backendName });
    const device = freeDeviceOf(instance.BlockDeviceMappings ?? []);
    if (!device) throw this.fail(`EC2 instance ${instanceId} has no free device in /dev/sdf../dev/sdp`, { instanceId, backendName });
    return device;
  }

  async listVolumes(): Promise<BackendVolume[]> {
    return (await this.backendVolumes()).map((v) => ({ backendName: tagOf(v, TAG_BACKEND_NAME) ?? v.VolumeId!, sizeGb: v.Size ?? 0 }));
  }

  async listConnections(): Promise<BackendConnection[]> {
    return (await this.backendVolumes()).flatMap((v) =>
      (v.Attachments ?? []).filter((a) => a.InstanceId && CONNECTED_STATES.has(a.State ?? '')).map((a) => ({ backendName: tagOf(v, TAG_BACKEND_NAME) ?? v.VolumeId!, host: a.InstanceId! })),
    );
  }

  /**
   * The volume a backend name names: Ferry's (by tag), or for manage a volume of this zone that no
   * Ferry backend has tagged, named by its id (`vol-…`), which adoptVolume takes over.
   */
  async getVolume(backendName: string): Promise<BackendVolume | undefined> {
    const v = (await this.find(backendName)) ?? (await this.foreignVolume(backendName));
    return v && { backendName, sizeGb: v.Size ?? 0 };
  }

  /** A live volume of this backend's zone carrying no `ferry:backend` tag, by its id; undefined for anything else. */
  protected async foreignVolume(volumeId: string): Promise<Volume | undefined> {
    if (!/^vol-[0-9a-f]+$/.test(volumeId)) return undefined;
    const v = await this.describeById(volumeId);
    if (!v || GONE_STATES.has(v.State ?? '') || v.AvailabilityZone !== this.config.availabilityZone || tagOf(v, TAG_BACKEND)) return undefined;
    return v;
  }
}
