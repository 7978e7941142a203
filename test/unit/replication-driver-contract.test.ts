/**
 * The replication driver contract (test/contracts/replication-driver.ts) against both drivers that
 * replicate: the local driver on directories (a pass of its engine makes replicas arrive; losing the
 * primary moves its root away), and the aws-ebs driver on three mocked regions (passes of the
 * schedule; losing the primary makes its region's client fail every call).
 */
import { mkdir, mkdtemp, rename, rm } from 'node:fs/promises';
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
  return {
    on,
    targets: ['site-b', 'site-c'],
    pool: 'pool0',
    sizeGb: 1,
    replicate: async () => {
      await on('').syncNow();
    },
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
  return {
    on,
    targets: ['frankfurt', 'virginia'],
    pool: 'gp',
    sizeGb: 1,
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
