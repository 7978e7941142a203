/**
 * Three mocked EC2 regions (fake-ec2.ts) for the aws-ebs replication tests: each test gets new
 * fakes, clients and mocks, in the same Map objects (so a test file keeps them as constants), and
 * the mocks are restored after it; useEbsReplication adds the replicated backend and its steps.
 */
import { EC2Client } from '@aws-sdk/client-ec2';
import { mockClient, type AwsClientStub } from 'aws-sdk-client-mock';
import { afterEach, beforeEach, expect } from 'vitest';
import { AwsEbsVolumeDriver } from '../../functions/drivers/volume/aws-ebs.js';
import type { ReplicatedVolumeRef } from '../../functions/drivers/volume/driver.js';
import { REPLICATED_EBS_ZONES, fakeRegions, replicatedEbsBackend, wireFakeEc2, type FakeEc2 } from './fake-ec2.js';

export const EBS_REGIONS = ['eu-west-1', 'eu-central-1', 'us-east-1'];

export interface EbsRegions {
  fakes: Map<string, FakeEc2>;
  clients: Map<string, EC2Client>;
  mocks: Map<string, AwsClientStub<EC2Client>>;
}

/** Registers the hooks; `now` is each fake's clock. */
export function useEbsRegions(host: string, now: () => number): EbsRegions {
  const regions: EbsRegions = { fakes: new Map(), clients: new Map(), mocks: new Map() };
  beforeEach(() => {
    regions.fakes.clear();
    for (const [r, f] of fakeRegions(host, REPLICATED_EBS_ZONES)) regions.fakes.set(r, Object.assign(f, { clock: now }));
    for (const r of EBS_REGIONS) {
      regions.clients.set(r, new EC2Client({ region: r }));
      regions.mocks.set(r, mockClient(regions.clients.get(r)!));
      wireFakeEc2(regions.mocks.get(r)!, regions.fakes.get(r)!);
    }
  });
  afterEach(() => {
    for (const m of regions.mocks.values()) m.restore();
  });
  return regions;
}

/** What the replication tests drive: the regions, a clock they move, and the driver's steps. */
export interface EbsReplicationHarness extends EbsRegions {
  /** The time every fake and driver reads; a test moves it forward. */
  clock: number;
  driverOn(activeBackendId?: string): AwsEbsVolumeDriver;
  fake(region: string): FakeEc2;
  /** Each snapshot of a region as `replication-kind:state`, sorted. */
  kinds(region: string): string[];
  ref(backendName: string): ReplicatedVolumeRef;
  /** A replicated volume of 1 GiB, with `passes` replication passes run (each a tick of the clock). */
  replicated(backendName: string, passes: number): Promise<AwsEbsVolumeDriver>;
  /** A replication pass a minute later, which must end without errors. */
  pass(driver: AwsEbsVolumeDriver): Promise<Awaited<ReturnType<AwsEbsVolumeDriver['syncNow']>>>;
}

export const EBS_REPLICATION_START = Date.parse('2026-11-25T00:00:00Z');

/** An aws-ebs backend in eu-west-1a replicated to Frankfurt and Virginia, on three mocked regions; the clock starts at EBS_REPLICATION_START in each test. */
export function useEbsReplication(host: string): EbsReplicationHarness {
  const config = replicatedEbsBackend(host);
  const h: EbsReplicationHarness = {
    ...useEbsRegions(host, () => h.clock),
    clock: EBS_REPLICATION_START,
    driverOn: (activeBackendId = '') => new AwsEbsVolumeDriver(config, { clientFor: (r) => h.clients.get(r)!, pollIntervalMs: 0, pollAttempts: 5, activeBackendId, now: () => h.clock }),
    fake: (region) => h.fakes.get(region)!,
    kinds: (region) => [...h.fake(region).snapshots.values()].map((s) => `${s.Tags?.find((t) => t.Key === 'ferry:replication')?.Value}:${s.State}`).sort(),
    ref: (backendName) => ({ volumeId: `id-${backendName}`, backendName, sizeGb: 1 }),
    async replicated(backendName, passes) {
      const driver = h.driverOn();
      await driver.createVolume({ backendName, sizeGb: 1, pool: 'gp' });
      await driver.enableReplication(backendName);
      for (let i = 0; i < passes; i++) await h.pass(driver);
      return driver;
    },
    async pass(driver) {
      h.clock += 60_000;
      const report = await driver.syncNow(0);
      expect(report.errors).toEqual([]);
      return report;
    },
  };
  beforeEach(() => {
    h.clock = EBS_REPLICATION_START;
  });
  return h;
}
