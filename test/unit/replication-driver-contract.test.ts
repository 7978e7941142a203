/**
 * The replication driver contract (test/contracts/replication-driver.ts) against both drivers that
 * replicate: the local driver on directories (a pass of its engine makes replicas arrive; losing the
 * primary moves its root away; a throttled or slow target is a target site that cannot be reached,
 * for one pass or for good), and the aws-ebs driver on three mocked regions (passes of the
 * schedule; losing the primary makes its region's client fail every call; a throttled target's
 * CopySnapshot answers RequestLimitExceeded once; a slow target's copies stay `pending`).
 */
import { mkdir, mkdtemp, rename, rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EC2Client } from '@aws-sdk/client-ec2';
import { mockClient, type AwsClientStub } from 'aws-sdk-client-mock';
import { AwsEbsVolumeDriver } from '../../functions/drivers/volume/aws-ebs.js';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';
import { LocalVolumeDriver } from '../../functions/drivers/volume/local.js';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import { describeReplicationDriverContract } from '../contracts/replication-driver.js';
import { REPLICATED_EBS_ZONES, awsError, fakeRegions, replicatedEbsBackend, wireFakeEc2 } from '../support/fake-ec2.js';

describeReplicationDriverContract('local', async () => {
  const base = await mkdtemp(join(tmpdir(), 'ferry-replication-contract-'));
  const roots = { primary: join(base, 'primary'), b: join(base, 'site-b'), c: join(base, 'site-c') };
  for (const dir of Object.values(roots)) await mkdir(dir);
  const config: BackendConfig = {
    host: 'ferry@rep',
    driver: 'local',
    root: roots.primary,
    pools: [{ name: 'pool0', totalCapacityGb: 100 }],
    serviceUuid: '33333333-3333-4333-8333-333333333333',
    volumeBackendName: 'rep',
    replicationDevices: [
      { backend_id: 'site-b', root: roots.b },
      { backend_id: 'site-c', root: roots.c },
    ],
  };
  const on = (activeBackendId: string) => new LocalVolumeDriver(config, { activeBackendId });
  const siteRoot = (target: string) => (target === 'site-b' ? roots.b : roots.c);
  // A throttled site is out of reach for one pass; a slow one for good (the local engine copies in place: nothing is ever in flight).
  const throttled = new Set<string>();
  const pass = async () => {
    const report = await on('').syncNow();
    for (const target of throttled) await rename(`${siteRoot(target)}.away`, siteRoot(target));
    throttled.clear();
    return report;
  };
  return {
    on,
    targets: ['site-b', 'site-c'],
    pool: 'pool0',
    sizeGb: 1,
    replicate: async () => {
      await pass();
    },
    pass,
    tickMs: 5,
    advance: () => sleep(5),
    throttleNextTransfer: async (target) => {
      await rename(siteRoot(target), `${siteRoot(target)}.away`);
      throttled.add(target);
    },
    slowDown: (target) => rename(siteRoot(target), `${siteRoot(target)}.away`),
    inFlight: async () => 0,
    losePrimary: () => rename(roots.primary, `${roots.primary}.gone`),
    restorePrimary: () => rename(`${roots.primary}.gone`, roots.primary),
    cleanup: async () => {
      clearDriverCache();
      await rm(base, { recursive: true, force: true });
    },
  };
});

describeReplicationDriverContract('aws-ebs', async () => {
  const host = 'ferry@ebs-r';
  const fakes = fakeRegions(host, REPLICATED_EBS_ZONES);
  let clock = Date.parse('2026-11-25T00:00:00Z');
  for (const f of fakes.values()) f.clock = () => clock;
  const clients = new Map([...fakes.keys()].map((r) => [r, new EC2Client({ region: r })]));
  const mocks = new Map<string, AwsClientStub<EC2Client>>([...clients].map(([r, c]) => [r, mockClient(c)]));
  for (const [r, m] of mocks) wireFakeEc2(m, fakes.get(r)!);
  const config = replicatedEbsBackend(host);
  const on = (activeBackendId: string) => new AwsEbsVolumeDriver(config, { clientFor: (r) => clients.get(r)!, pollIntervalMs: 0, pollAttempts: 5, activeBackendId, now: () => clock });
  const primary = mocks.get('eu-west-1')!;
  const regionOf = (target: string) => (target === 'frankfurt' ? 'eu-central-1' : 'us-east-1');
  const copiesOf = (target: string, backendName: string) => [...fakes.get(regionOf(target))!.snapshots.values()].filter((s) => s.Tags?.some((x) => x.Key === 'ferry:replica-of' && x.Value === backendName));
  return {
    on,
    targets: ['frankfurt', 'virginia'],
    pool: 'gp',
    sizeGb: 1,
    pass: async () => {
      clock += 60_000;
      return on('').syncNow(0);
    },
    tickMs: 60_000,
    advance: async () => {
      clock += 60_000;
    },
    // The target region's EC2 answers the next CopySnapshot RequestLimitExceeded (nothing copied), the ones after as usual.
    throttleNextTransfer: async (target) => {
      const fake = fakes.get(regionOf(target))!;
      const real = fake.copySnapshot;
      fake.copySnapshot = () => {
        fake.copySnapshot = real;
        throw awsError('RequestLimitExceeded', 'Request limit exceeded.');
      };
    },
    // Its copies stay pending: described as they are, never completed.
    slowDown: async (target) => {
      const slow = fakes.get(regionOf(target))!;
      slow.describeSnapshots = (input) => ({ Snapshots: [...slow.snapshots.values()].filter((s) => !input.Filters || input.Filters.every((f) => f.Values!.includes(s.Tags?.find((x) => `tag:${x.Key}` === f.Name)?.Value ?? ''))) });
    },
    inFlight: async (target, backendName) => copiesOf(target, backendName).filter((s) => s.State === 'pending').length,
    // Five passes: snapshot, (pending), copy, (pending), arrived.
    replicate: async () => {
      for (let i = 0; i < 5; i++) {
        clock += 60_000;
        await on('').syncNow(0);
      }
    },
    losePrimary: async () => {
      primary.reset();
      primary.onAnyCommand().rejects(awsError('RequestTimeout', 'eu-west-1 does not answer'));
    },
    restorePrimary: async () => {
      primary.reset();
      wireFakeEc2(primary, fakes.get('eu-west-1')!);
    },
    cleanup: async () => {
      for (const m of mocks.values()) m.restore();
    },
  };
});
