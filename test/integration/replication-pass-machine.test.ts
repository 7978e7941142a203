/**
 * The replication-pass and replication-schedule machines on the local interpreter, EC2 mocked per
 * region (test/support/fake-ec2.ts, whose DescribeVolumes pages two volumes at a time): a backend's
 * volumes over several pages, a throttled page retried by the Task's Retry, the lag recorded, a
 * frozen backend ended at the first step with no EC2 call, a pass that finds another holding the
 * lease, a missing backend failing with its lease untouched, and the fan-out starting one pass per
 * backend per scheduled time.
 */
import type { Filter } from '@aws-sdk/client-ec2';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { describeExecution, executionArnOf } from '../../functions/core/executions.js';
import { passExecutionName } from '../../functions/replication/pass.js';
import { releasePassLease, takePassLease } from '../../functions/replication/pass-lease.js';
import { awsError, type FakeEc2 } from '../support/fake-ec2.js';
import { startReplicatedEbsStack, type EbsStack } from '../support/ebs-stack.js';
import { eventually } from '../support/poll.js';
import { replicationPass, runMachine } from '../support/replication-pass.js';

const HOST = 'ferry@ebs-pages';
const VOLUMES = 5;
let ebs: EbsStack;
let home: FakeEc2;
let frankfurt: FakeEc2;
/** The NextToken of each DescribeVolumes of the replicated volumes (a page of the pass). */
let pageCalls: (string | undefined)[] = [];
let throttleToken: string | undefined;

beforeAll(async () => {
  ebs = await startReplicatedEbsStack({ host: HOST, volumeBackendName: 'ebs-pages', typeName: 'ebs-paged' });
  home = ebs.fakes.get('eu-west-1')!;
  frankfurt = ebs.fakes.get('eu-central-1')!;
  const describeVolumes = home.describeVolumes.bind(home);
  home.describeVolumes = (input: { VolumeIds?: string[]; Filters?: Filter[]; NextToken?: string }) => {
    if (input.Filters?.some((f) => f.Name === 'tag:ferry:replicated')) {
      pageCalls.push(input.NextToken);
      if (throttleToken !== undefined && input.NextToken === throttleToken) {
        throttleToken = undefined;
        throw awsError('RequestLimitExceeded', 'Request limit exceeded.');
      }
    }
    return describeVolumes(input);
  };
  const ids: string[] = [];
  for (let i = 0; i < VOLUMES; i++) {
    const created = await ebs.api('POST', '/volumes', { volume: { size: 1, name: `v${i}`, volume_type: 'ebs-paged', availability_zone: 'eu-west-1a' } });
    expect(created.status).toBe(202);
    ids.push(created.body.volume.id);
  }
  for (const id of ids) await eventually(async (note) => note((await ebs.api('GET', `/volumes/${id}`)).body.volume.status) === 'available' || undefined, `volume ${id} available`);
}, 180_000);
afterAll(async () => {
  await ebs?.stop();
});

const lagOnPool = async () =>
  ((await ebs.api('GET', '/scheduler-stats/get_pools?detail=true')).body.pools as { name: string; capabilities: Record<string, any> }[]).find((p) => p.name.startsWith(`${HOST}#`))!.capabilities.replication_lag?.frankfurt;

describe('the replication-pass machine', () => {
  test('pages through the volumes, a throttled page retried, and records the lag once the copies arrived', async () => {
    // Prepare: the second page's first DescribeVolumes is throttled.
    pageCalls = [];
    throttleToken = '2';
    // Act
    const first = await replicationPass(HOST);
    // Assess: three pages of two (the fake's page size), the throttled one asked twice, every volume once.
    expect(pageCalls).toEqual([undefined, '2', '2', '4']);
    expect(first).toMatchObject({ run: true, volumes: VOLUMES, failed: 0, failures: [] });
    expect(first.nextToken).toBeUndefined();
    expect([...home.snapshots.values()].filter((s) => s.Tags?.some((t) => t.Key === 'ferry:backend' && t.Value === HOST))).toHaveLength(VOLUMES);
    // Four more passes: the snapshots complete, are copied, the copies arrive (the fake moves one state a look).
    for (let i = 0; i < 4; i++) expect(await replicationPass(HOST)).toMatchObject({ volumes: VOLUMES, failed: 0 });
    expect([...frankfurt.snapshots.values()].filter((s) => s.State === 'completed')).toHaveLength(VOLUMES);
    expect(await lagOnPool()).toMatchObject({ volumes: VOLUMES, replicated: VOLUMES });
  });

  test('a frozen backend: the first step ends the pass with the reason, no EC2 call; thaw resumes', async () => {
    expect((await ebs.api('PUT', '/os-services/freeze', { host: HOST })).status).toBe(200);
    pageCalls = [];
    expect(await replicationPass(HOST)).toMatchObject({ run: false, why: 'frozen', volumes: 0 });
    expect(pageCalls).toEqual([]);
    expect((await ebs.api('PUT', '/os-services/thaw', { host: HOST })).status).toBe(200);
    await eventually(async () => (await replicationPass(HOST)).run || undefined, 'a pass after thaw replicates');
  });

  test('a pass finding another holding the lease ends at once; the lease lets the next one in once given back', async () => {
    expect(await takePassLease(HOST, 'other-pass', Date.now())).toEqual({ taken: true });
    pageCalls = [];
    expect(await replicationPass(HOST)).toMatchObject({ run: false, why: `another pass (other-pass) is replicating ${HOST}` });
    expect(pageCalls).toEqual([]);
    expect(await releasePassLease(HOST, 'other-pass')).toBe(true);
    expect(await replicationPass(HOST)).toMatchObject({ run: true, volumes: VOLUMES });
    // The pass gave its own lease back at Finish: another can take it at once.
    expect(await takePassLease(HOST, 'after', Date.now())).toEqual({ taken: true });
    expect(await releasePassLease(HOST, 'after')).toBe(true);
  });

  test('a backend that does not exist: the pass fails (ReplicationPassFailed) through its Catch', async () => {
    const out = await runMachine('replication-pass', { backend: 'ferry@nowhere' });
    expect(out.status).toBe('FAILED');
    expect(out.error).toBe('ReplicationPassFailed');
  });
});

describe('the replication-schedule machine', () => {
  test('starts one pass per replicated aws-ebs backend, named by the scheduled time: a second delivery starts none', async () => {
    const scheduledTime = '2026-11-27T21:05:00Z';
    const name = passExecutionName(HOST, new Date(scheduledTime));
    const first = await runMachine('replication-schedule', { scheduledTime });
    expect(first.status).toBe('SUCCEEDED');
    // The sandbox's local backends are the local stack's loop's: only the EBS one is started.
    expect(JSON.parse(first.output!).started).toEqual({ started: [name] });
    const pass = await eventually(async () => {
      const out = await describeExecution(executionArnOf('replication-pass', name));
      return out.status === 'RUNNING' ? undefined : out;
    }, 'the started pass to end');
    expect(pass.status).toBe('SUCCEEDED');
    const again = await runMachine('replication-schedule', { scheduledTime });
    expect(JSON.parse(again.output!).started).toEqual({ started: [name] });
    expect((await describeExecution(executionArnOf('replication-pass', name))).startDate).toEqual(pass.startDate);
  });
});
