/**
 * The share driver contract (test/contracts/share-driver.ts), run by both local kinds on temporary
 * directories and by aws-efs on mocked EFS and EC2 clients (test/support/fake-efs.ts), with the
 * contract's misbehaving backend played as the EFS API reference says EFS misbehaves: throttled
 * (ThrottlingException, 429), a lost reply (a retry's CreationToken answered FileSystemAlreadyExists),
 * eventual consistency (DescribeFileSystems not listing a new file system, mount targets `creating`
 * longer) and a replication that falls behind (its LastReplicatedTimestamp stops moving).
 */
import { EC2Client } from '@aws-sdk/client-ec2';
import { EFSClient } from '@aws-sdk/client-efs';
import { mockClient } from 'aws-sdk-client-mock';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AwsEfsShareDriver } from '../../functions/drivers/share/aws-efs.js';
import type { LocalShareBackendConfig } from '../../functions/drivers/share/driver.js';
import { LocalShareDriver } from '../../functions/drivers/share/local.js';
import { describeShareDriverContract, type ShareBackendFaults, type ShareDriverUnderTest } from '../contracts/share-driver.js';
import { efsBackend, FakeEfs, wireFakeEfs } from '../support/fake-efs.js';
import { efsThrottle } from '../support/fake-efs-replication.js';
import { awsError } from '../support/fake-ec2.js';

/** A backend of a local kind under a temporary directory; its shares' export locations are directories. */
function localBackend(kind: LocalShareBackendConfig['driver']) {
  return async (host: string): Promise<ShareDriverUnderTest> => {
    const dir = await mkdtemp(join(tmpdir(), `ferry-share-contract-${kind}-`));
    const backend: LocalShareBackendConfig = {
      host,
      driver: kind,
      root: join(dir, host),
      pools: [{ name: 'pool0', totalCapacityGb: 10 }],
      shareBackendName: host.split('@')[1]!,
      protocols: ['NFS', 'CIFS'],
    };
    return {
      driver: new LocalShareDriver(backend),
      backend,
      data: {
        write: (exportLocation, rel, data) => writeFile(join(exportLocation, rel), data),
        read: (exportLocation, rel) => readFile(join(exportLocation, rel), 'utf8'),
      },
      cleanup: () => rm(dir, { recursive: true, force: true }),
    };
  };
}

describeShareDriverContract('local-a', localBackend('local-a'));
describeShareDriverContract('local-b', localBackend('local-b'));

/** The aws-efs driver's tries per call: a throttle at every one of them is BackendNotReady. */
const EFS_POLL_ATTEMPTS = 4;

/**
 * The next file system made is not listed by DescribeFileSystems (by token or as a list; by id it
 * is, as EFS's reference describes) for `looks` such describes: the window after a create in
 * which a retry finds nothing and sends CreateFileSystem again with the same CreationToken.
 */
function hideNextCreated(fake: FakeEfs, looks: number): void {
  fake.createFileSystem = (input) => {
    const made = FakeEfs.prototype.createFileSystem.call(fake, input);
    delete (fake as Partial<FakeEfs>).createFileSystem;
    const id = made.FileSystemId!;
    fake.hiddenFileSystems.add(id);
    let left = looks;
    fake.describeFileSystems = (d) => {
      const out = FakeEfs.prototype.describeFileSystems.call(fake, d);
      if (!d.FileSystemId && --left <= 0) {
        fake.hiddenFileSystems.delete(id);
        delete (fake as Partial<FakeEfs>).describeFileSystems;
      }
      return out;
    };
    return made;
  };
}

function efsFaults(fake: FakeEfs): ShareBackendFaults {
  return {
    throttleNextCreate: (tries) => {
      for (let n = 0; n < (tries === 'once' ? 1 : EFS_POLL_ATTEMPTS); n++) fake.failNext('CreateFileSystem', efsThrottle());
    },
    loseNextCreateReply: () => {
      // The reply lost, and the new file system not listed yet when the retry looks: only the token holds.
      fake.failNext('CreateFileSystem', awsError('TimeoutError', 'Connection timed out after 120000 ms'), { after: true });
      hideNextCreated(fake, 2);
    },
    delayVisibilityOfNextCreate: () => {
      hideNextCreated(fake, 3);
      fake.settleLooks = 3;
    },
    replicationFallsBehind: (share) => {
      const source = fake.fileSystemNamed(share)!.FileSystemId!;
      fake.replication.fallBehind(source);
      return () => fake.replication.fallBehind(source, false);
    },
  };
}

/**
 * The backends of one test share one account and region: one fake EFS and EC2 behind one pair of
 * clients (mockClient of an instance mocks that instance only), so a migration's replica is made
 * where the destination's driver finds it. No data access: the suite cannot write files into an EFS.
 */
let world: { efs: EFSClient; ec2: EC2Client; fake: FakeEfs; restore(): void } | undefined;
describeShareDriverContract('aws-efs', async (host) => {
  if (!world) {
    const efs = new EFSClient({ region: 'eu-west-1' });
    const ec2 = new EC2Client({ region: 'eu-west-1' });
    const efsMock = mockClient(efs);
    const ec2Mock = mockClient(ec2);
    const fake = new FakeEfs();
    // The contract's user rule names the role `alice`: IAM refuses a policy naming a role that does not exist.
    fake.knownRoles = new Set(['alice']);
    // The driver and the fake read one clock, which every call moves on by a second.
    fake.replication.tickMs = 1000;
    wireFakeEfs(efsMock, ec2Mock, fake);
    world = { efs, ec2, fake, restore: () => (efsMock.restore(), ec2Mock.restore()) };
  }
  const { efs, ec2, fake } = world;
  const backend = efsBackend(host);
  return {
    driver: new AwsEfsShareDriver(backend, { efs, ec2, pollIntervalMs: 0, pollAttempts: EFS_POLL_ATTEMPTS, now: () => fake.replication.time }),
    backend,
    faults: efsFaults(fake),
    cleanup: async () => {
      world?.restore();
      world = undefined;
    },
  };
});
