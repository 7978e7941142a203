/**
 * EBS volumes and attachments end to end through the Cinder API, the aws-ebs driver behind an
 * inventory backend, EC2 mocked (test/support/fake-ec2.ts, replies as the EC2 API reference says):
 * create and delete through their machines (waiting while EC2 is at it), extend, an attachment to an
 * EC2 instance (attachment_update answers at once; volume-attach-wait looks at EC2 until the attach is
 * done or failed: after N looks, dropped, throttled looks, a delete meanwhile, the bound reached; the
 * reconciler starting a wait whose start failed, repairing one whose execution ended: attached, a new
 * wait, error_attaching; retrying a detach EC2 refused), snapshots, a throttled call; the audit clean after each.
 */
import { DescribeVolumesCommand, DetachVolumeCommand, EC2Client } from '@aws-sdk/client-ec2';
import { ListExecutionsCommand, StartExecutionCommand, type SFNClient } from '@aws-sdk/client-sfn';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mockClient } from 'aws-sdk-client-mock';
import { stringify } from 'yaml';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { ATTACH_WAIT_MACHINE } from '../../functions/attachments/attach-wait.js';
import { attachWaitFailed, lookAtAttach } from '../../functions/attachments/attach-wait-steps.js';
import { getAttachmentRecord, getVolumeRecord } from '../../functions/attachments/repo.js';
import { runAudit } from '../../functions/audit/audit.js';
import { reconcile } from '../../functions/audit/reconciler.js';
import { describeExecution, executionArnOf, setSfn, sfn, startExecution, stateMachineArn } from '../../functions/core/executions.js';
import { MACHINE_WORST_CASE_SECONDS } from '../../functions/core/machine-bounds.js';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import type { Inventory } from '../../functions/inventory/schema.js';
import { SANDBOX_INVENTORY, readInventoryFile } from '../../infra/inventory-file.js';
import { attachWaitOf } from '../support/attach-wait-record.js';
import { FakeEc2, awsError, wireFakeEc2 } from '../support/fake-ec2.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';
import { ADMIN, volumeApi } from '../support/volume-api.js';

const ec2 = mockClient(EC2Client);
const fake = new FakeEc2('ferry@ebs-a');
let stack: TestLocalStack;
let realSfn: SFNClient;
/** The attachments the running test made: afterEach deletes what is left of them. */
const made = new Set<string>();

const cinder = volumeApi({ current: () => stack }, '3.44');
const api = (method: string, path: string, body?: unknown) => cinder(method, `/admin${path}`, body, ADMIN);
const statusOf = async (id: string) => ((await api('GET', `/volumes/${id}`)).body?.volume?.status as string | undefined) ?? 'gone';
const becomes = (id: string, want: string) => eventually(async (note) => note(await statusOf(id)) === want || undefined, `volume ${id} ${want}`);
async function auditClean(): Promise<void> {
  expect((await runAudit()).findings).toEqual([]);
}

const INSTANCE = '66666666-6666-4666-8666-666666666666';
const ebsVolume = () => [...fake.volumes.values()][0]!;

/** A new attachment of the volume, connected (PUT) to the EC2 instance `host`: its id. */
async function attachTo(host: string): Promise<string> {
  const volumeId = (await api('GET', '/volumes')).body.volumes[0].id as string;
  const att = await api('POST', '/attachments', { attachment: { volume_uuid: volumeId, instance_uuid: INSTANCE } });
  expect(att.status).toBe(200);
  const attId = att.body.attachment.id as string;
  made.add(attId);
  const updated = await api('PUT', `/attachments/${attId}`, { attachment: { connector: { host } } });
  expect(updated.status).toBe(200);
  return attId;
}
const detachAll = async (attId: string) => expect((await api('DELETE', `/attachments/${attId}`)).status).toBe(200);

/** The attachment's volume-attach-wait execution (`named`, or the name its volume's record holds), once it ended. */
const waitEnds = (attId: string, named?: string) =>
  eventually(async (note) => {
    const name = named ?? (await attachWaitOf(attId))?.execution;
    if (!name) return undefined;
    const out = await describeExecution(executionArnOf(ATTACH_WAIT_MACHINE, name));
    return note(out.status) === 'RUNNING' ? undefined : out;
  }, `volume-attach-wait of ${attId} to end`);

const waitExecutionNames = async () => ((await (await sfn()).send(new ListExecutionsCommand({ stateMachineArn: stateMachineArn(ATTACH_WAIT_MACHINE), maxResults: 1000 }))).executions ?? []).map((e) => e.name!);
const executionsNamed = async (name: string) => (await waitExecutionNames()).filter((n) => n === name).length;

beforeAll(async () => {
  wireFakeEc2(ec2, fake);
  fake.devices.set('i-0abc', ['/dev/sda1']);
  const inventory = structuredClone(readInventoryFile(SANDBOX_INVENTORY)) as Inventory;
  inventory.volumeBackends.push({ host: 'ferry@ebs-a', driver: 'aws-ebs', availabilityZone: 'eu-west-1a', ebsVolumeType: 'gp3', volumeBackendName: 'ebs-a', pools: [{ name: 'gp', totalCapacityGb: 100 }] });
  inventory.volumeTypes.push({ name: 'ebs', extraSpecs: { volume_backend_name: 'ebs-a' } });
  const file = join(await mkdtemp(join(tmpdir(), 'ferry-ebs-')), 'inventory.yaml');
  await writeFile(file, stringify(inventory));
  stack = await useLocalStack({ inventory: file });
  realSfn = await sfn();
}, 120_000);
/** Each test stands alone: one that fails halfway leaves no attachment (the volume is not multiattach), EC2 attachment or stand-in client behind. */
afterEach(async () => {
  setSfn(realSfn);
  wireFakeEc2(ec2, fake);
  for (const attId of made) expect([200, 404]).toContain((await api('DELETE', `/attachments/${attId}`)).status);
  made.clear();
  for (const volume of fake.volumes.values()) volume.Attachments = [];
});
afterAll(async () => {
  await stack?.stop();
  ec2.restore();
  clearDriverCache();
});

describe('an EBS backend through the Cinder API (EC2 mocked)', () => {
  let id: string;

  test('create: the machine waits while EC2 still reports creating; one EBS volume, tagged', async () => {
    // The first looks by id see `creating`: the driver answers BackendNotReady and the machine waits.
    let looks = 0;
    ec2.on(DescribeVolumesCommand).callsFake((input: { VolumeIds?: string[] }) => {
      const answer = fake.describeVolumes(input);
      if (input.VolumeIds && ++looks <= 4) return { Volumes: answer.Volumes?.map((v) => ({ ...v, State: 'creating' })) };
      return answer;
    });
    const created = await api('POST', '/volumes', { volume: { size: 2, name: 'on-ebs', volume_type: 'ebs', availability_zone: 'eu-west-1a' } });
    expect(created.status).toBe(202);
    id = created.body.volume.id;
    await becomes(id, 'available');
    wireFakeEc2(ec2, fake);
    // Three looks of the first call saw `creating` (BackendNotReady); the machine's retry found it available.
    expect(looks).toBeGreaterThanOrEqual(3);
    expect([...fake.volumes.values()].map((v) => [v.Size, v.Tags?.find((t) => t.Key === 'ferry:backend-name')?.Value])).toEqual([[2, `volume-${id}`]]);
    await auditClean();
  });

  test('extend, after a throttled first try', async () => {
    ec2.on(DescribeVolumesCommand).rejectsOnce(awsError('RequestLimitExceeded', 'Request limit exceeded.')).callsFake((i) => fake.describeVolumes(i));
    const extended = await api('POST', `/volumes/${id}/action`, { 'os-extend': { new_size: 3 } });
    if (extended.status !== 202) {
      // A throttle the API call met is a 500 that changed nothing; the operator's retry goes through.
      expect((await api('GET', `/volumes/${id}`)).body.volume.size).toBe(2);
      expect((await api('POST', `/volumes/${id}/action`, { 'os-extend': { new_size: 3 } })).status).toBe(202);
    }
    await eventually(async () => (await api('GET', `/volumes/${id}`)).body.volume.size === 3 || undefined, 'size 3');
    expect([...fake.volumes.values()][0]!.Size).toBe(3);
  });

  test('an attachment to an EC2 instance: update answers at once with volume, instance and device; delete detaches', async () => {
    const att = await api('POST', '/attachments', { attachment: { volume_uuid: id, instance_uuid: '55555555-5555-4555-8555-555555555555' } });
    expect(att.status).toBe(200);
    const attId = att.body.attachment.id as string;
    made.add(attId);
    const updated = await api('PUT', `/attachments/${attId}`, { attachment: { connector: { host: 'i-0abc', initiator: 'iqn.x', ip: '10.0.0.5' } } });
    expect(updated.status).toBe(200);
    const volumeId = [...fake.volumes.keys()][0]!;
    expect(updated.body.attachment.connection_info).toMatchObject({ driver_volume_type: 'aws_ebs', volume_id: volumeId, instance_id: 'i-0abc', device: '/dev/sdf' });
    // EC2 accepted the attach; volume-attach-wait sees it attached (the fake's next look settles it).
    expect(fake.volumes.get(volumeId)!.Attachments).toEqual([expect.objectContaining({ InstanceId: 'i-0abc', State: expect.stringMatching(/^attach(ing|ed)$/) })]);
    expect((await waitEnds(attId)).status).toBe('SUCCEEDED');
    expect((await attachWaitOf(attId))).toMatchObject({ host: 'i-0abc', status: 'attached' });
    const completed = await api('POST', `/attachments/${attId}/action`, { 'os-complete': null });
    expect(completed.body ?? completed.status).toBe(204);
    expect(await statusOf(id)).toBe('in-use');

    expect((await api('DELETE', `/attachments/${attId}`)).status).toBe(200);
    expect(await statusOf(id)).toBe('available');
    // DescribeVolumes settles the fake's detach: nothing left attached.
    fake.describeVolumes({ VolumeIds: [volumeId] });
    expect(fake.volumes.get(volumeId)!.Attachments).toEqual([]);
    await auditClean();
  });

  describe('an attach EC2 has not finished: volume-attach-wait (issue 13)', () => {
    beforeAll(() => {
      for (const i of ['i-0n', 'i-0drop', 'i-0thr', 'i-0slow', 'i-0stuck', 'i-0nostart', 'i-0nodetach', 'i-0ended', 'i-0renew', 'i-0gone', 'i-0raced']) fake.devices.set(i, ['/dev/sda1']);
    });

    test('an attach that finishes after 3 looks: attached on the record; a second start of the same name starts nothing', async () => {
      fake.attachEnds.set('i-0n', { looks: 3, then: 'attached' });
      const attId = await attachTo('i-0n');
      const wait = (await attachWaitOf(attId))!;
      expect(wait.execution).toMatch(new RegExp(`^volume-attach-wait-${attId}-v\\d+$`));
      expect((await waitEnds(attId)).status).toBe('SUCCEEDED');
      expect(fake.attachEnds.get('i-0n')!.looks).toBe(0);
      expect((await attachWaitOf(attId))).toMatchObject({ status: 'attached', endedAt: expect.any(String) });
      await startExecution(ATTACH_WAIT_MACHINE, wait.execution, { attachmentId: attId });
      expect(await executionsNamed(wait.execution)).toBe(1);
      await detachAll(attId);
    });

    test('an attach EC2 drops: error_attaching with the reason, the volume available, nothing left attached', async () => {
      fake.attachEnds.set('i-0drop', { looks: 1, then: 'vanish' });
      const attId = await attachTo('i-0drop');
      const ended = await waitEnds(attId);
      expect([ended.status, ended.error]).toEqual(['FAILED', 'AttachFailed']);
      expect(await getAttachmentRecord(attId)).toMatchObject({ attachStatus: 'error_attaching', connectionInfo: null });
      expect(await attachWaitOf(attId)).toEqual({ execution: expect.any(String), host: 'i-0drop', status: 'failed', startedAt: expect.any(String), endedAt: expect.any(String), reason: expect.stringContaining('EC2 holds no attachment of EBS volume') });
      expect((await api('GET', `/attachments/${attId}`)).body.attachment.status).toBe('error_attaching');
      expect(await statusOf(id)).toBe('available');
      expect(ebsVolume().Attachments).toEqual([]);
      await detachAll(attId);
    });

    test('throttled looks are looked at again, not a failed attach', async () => {
      let throttles = 0;
      let attached = false;
      wireFakeEc2(ec2, fake, (command) => {
        if (command === 'AttachVolume') attached = true;
        else if (command === 'DescribeVolumes' && attached && throttles < 3) {
          throttles++;
          throw awsError('RequestLimitExceeded', 'Request limit exceeded.');
        }
      });
      fake.attachEnds.set('i-0thr', { looks: 1, then: 'attached' });
      const attId = await attachTo('i-0thr');
      expect((await waitEnds(attId)).status).toBe('SUCCEEDED');
      expect(throttles).toBe(3);
      expect((await attachWaitOf(attId))!.status).toBe('attached');
      wireFakeEc2(ec2, fake);
      await detachAll(attId);
    });

    test('a delete while the wait runs wins: the wait ends and touches nothing (the delete dropped the wait from the volume)', async () => {
      fake.attachEnds.set('i-0slow', { looks: 0, then: 'stuck' });
      const attId = await attachTo('i-0slow');
      const { execution } = (await attachWaitOf(attId))!;
      await detachAll(attId);
      expect((await waitEnds(attId, execution)).status).toBe('SUCCEEDED');
      expect([(await getAttachmentRecord(attId))!.deleted, await attachWaitOf(attId)]).toEqual([true, undefined]);
    });

    test('past the bound: the failure detaches what EC2 holds, once, and the machine then ends untouched', async () => {
      fake.attachEnds.set('i-0stuck', { looks: 0, then: 'stuck' });
      const attId = await attachTo('i-0stuck');
      // What the Catch hands the Failed step when Look's Retry runs out (every look BackendNotReady).
      const error = { Error: 'BackendNotReady', Cause: JSON.stringify({ errorMessage: 'still attaching after the bound' }) };
      const detaches = () => ec2.commandCalls(DetachVolumeCommand).filter((c) => c.args[0].input.InstanceId === 'i-0stuck').length;
      const { execution } = (await attachWaitOf(attId))!;
      expect(await attachWaitFailed(attId, error, execution)).toEqual({ outcome: 'failed', reason: 'still attaching after the bound' });
      expect(detaches()).toBe(1);
      expect(await attachWaitFailed(attId, error, execution)).toEqual({ outcome: 'superseded' });
      expect(detaches()).toBe(1);
      expect((await waitEnds(attId)).status).toBe('SUCCEEDED');
      expect([(await getAttachmentRecord(attId))!.attachStatus, await attachWaitOf(attId)]).toEqual(['error_attaching', expect.objectContaining({ status: 'failed', reason: 'still attaching after the bound' })]);
      fake.describeVolumes({ VolumeIds: [ebsVolume().VolumeId!] });
      expect(ebsVolume().Attachments).toEqual([]);
      await detachAll(attId);
      await auditClean();
    });

    /** One reconciler pass that takes every record as past its grace: its records about `attId`. */
    const reconcileNow = async (attId: string) => {
      const pass = await reconcile({ before: new Date(Date.now() + 1000) });
      return [...pass.repaired, ...pass.left].filter((r) => r.resource === `attachment ${attId}`);
    };

    test('a wait whose start failed (a crash between the transaction and the start) is started by the reconciler, once', async () => {
      // Prepare: Step Functions refuses the connect's start of volume-attach-wait, once.
      const real = await sfn();
      let refused = 0;
      setSfn({
        send: (command: unknown) => {
          if (command instanceof StartExecutionCommand && command.input.name?.startsWith(`${ATTACH_WAIT_MACHINE}-`) && refused++ === 0) {
            return Promise.reject(awsError('ServiceUnavailable', 'Step Functions is unavailable.'));
          }
          return real.send(command as never);
        },
      } as unknown as SFNClient);
      fake.attachEnds.set('i-0nostart', { looks: 1, then: 'attached' });
      const attId = await attachTo('i-0nostart');
      setSfn(real);
      const wait = (await attachWaitOf(attId))!;
      expect([refused, wait.status, await executionsNamed(wait.execution)]).toEqual([1, 'waiting', 0]);
      // The audit reports it only past the machine's own bound (3.8 h), not its usual hour: before that an execution may still run.
      const auditAt = async (ms: number) => (await runAudit({ now: new Date(Date.parse(wait.startedAt) + ms) })).findings.filter((f) => f.resource === `attachment ${attId}`).map((f) => f.kind);
      const bound = MACHINE_WORST_CASE_SECONDS[ATTACH_WAIT_MACHINE] * 1000;
      expect([await auditAt(bound - 1000), await auditAt(bound + 1000)]).toEqual([expect.not.arrayContaining(['stuck-attach-wait']), expect.arrayContaining(['stuck-attach-wait'])]);
      // Act
      const first = await reconcile({ before: new Date(Date.now() + 1000) });
      // Assess: started under its recorded name; the machine records the attach; the next pass has nothing to do.
      expect(first.repaired.filter((r) => r.resource === `attachment ${attId}`)).toEqual([expect.objectContaining({ kind: 'stuck-attach-wait', did: `started ${wait.execution}, which no start had made` })]);
      expect((await waitEnds(attId)).status).toBe('SUCCEEDED');
      expect((await attachWaitOf(attId))).toMatchObject({ execution: wait.execution, status: 'attached' });
      expect(await reconcileNow(attId)).toEqual([]);
      expect(await executionsNamed(wait.execution)).toBe(1);
      await detachAll(attId);
      await auditClean();
    });

    /** An attachment whose wait's execution ended without ending it (a console start naming no attachment: it ends at once, touching nothing): its id and wait. */
    async function endedWaitOn(host: string) {
      const real = await sfn();
      setSfn({ send: (command: unknown) => (command instanceof StartExecutionCommand ? Promise.reject(awsError('ServiceUnavailable', 'Step Functions is unavailable.')) : real.send(command as never)) } as unknown as SFNClient);
      fake.attachEnds.set(host, { looks: 0, then: 'stuck' });
      const attId = await attachTo(host);
      setSfn(real);
      const wait = (await attachWaitOf(attId))!;
      await startExecution(ATTACH_WAIT_MACHINE, wait.execution, { attachmentId: 'no-such-attachment' });
      expect((await waitEnds(attId)).status).toBe('SUCCEEDED');
      expect((await attachWaitOf(attId))).toMatchObject({ execution: wait.execution, status: 'waiting' });
      return { attId, wait };
    }
    const ec2Calls = (host: string) => ec2.calls().filter((c) => ['AttachVolumeCommand', 'DetachVolumeCommand'].includes(c.args[0].constructor.name) && (c.args[0].input as { InstanceId?: string }).InstanceId === host).length;
    const waitExecutions = async (attId: string) => (await waitExecutionNames()).filter((n) => n.startsWith(`${ATTACH_WAIT_MACHINE}-${attId}-`)).length;

    test('a wait whose execution ended without ending it, EC2 attached: the reconciler records it attached, and does nothing else', async () => {
      const { attId } = await endedWaitOn('i-0ended');
      fake.attachEnds.set('i-0ended', { looks: 0, then: 'attached' });
      const [calls, executions] = [ec2Calls('i-0ended'), await waitExecutions(attId)];
      expect((await reconcileNow(attId)).map((r) => [r.kind, r.outcome, r.did])).toEqual([['stuck-attach-wait', 'repaired', expect.stringMatching(/^recorded attached: .* ended SUCCEEDED without ending the wait/)]]);
      expect((await attachWaitOf(attId))).toMatchObject({ status: 'attached', endedAt: expect.any(String) });
      expect([ec2Calls('i-0ended'), await waitExecutions(attId), await reconcileNow(attId)]).toEqual([calls, executions, []]);
      await detachAll(attId);
      await auditClean();
    });

    test('a wait whose execution ended, EC2 still attaching: the reconciler starts a new wait (the volume\'s next version\'s name), which records the attach; the old execution\'s steps leave it alone', async () => {
      const { attId, wait } = await endedWaitOn('i-0renew');
      const volumeId = (await getAttachmentRecord(attId))!.volumeId;
      const version = (await getVolumeRecord(volumeId))!.volume.version;
      const calls = ec2Calls('i-0renew');
      expect((await reconcileNow(attId)).map((r) => [r.kind, r.outcome])).toEqual([['stuck-attach-wait', 'repaired']]);
      const renewed = `${ATTACH_WAIT_MACHINE}-${attId}-v${version + 1}`;
      expect((await getVolumeRecord(volumeId))!.volume).toMatchObject({ version: version + 1, attachWaits: { [attId]: { execution: renewed, status: 'waiting' } } });
      // Look and Failed of the ended execution (a stale run of its steps) are superseded: they neither end the renewed wait nor detach.
      const lost = { Error: 'AttachmentLost', Cause: JSON.stringify({ errorMessage: 'a stale look' }) };
      expect([await lookAtAttach(attId, wait.execution), await attachWaitFailed(attId, lost, wait.execution)]).toEqual([{ outcome: 'superseded' }, { outcome: 'superseded' }]);
      expect([(await attachWaitOf(attId)), ec2Calls('i-0renew')]).toEqual([expect.objectContaining({ execution: renewed, status: 'waiting' }), calls]);
      fake.attachEnds.set('i-0renew', { looks: 0, then: 'attached' });
      expect((await waitEnds(attId)).status).toBe('SUCCEEDED');
      expect((await attachWaitOf(attId))).toMatchObject({ execution: renewed, status: 'attached' });
      expect([await executionsNamed(wait.execution), await executionsNamed(renewed), await waitExecutions(attId), await reconcileNow(attId)]).toEqual([1, 1, 2, []]);
      await detachAll(attId);
      await auditClean();
    });

    test('a wait whose execution ended, EC2 dropped the attach: error_attaching and the detach, as the Failed step; a delete during the pass\'s look wins', async () => {
      const { attId } = await endedWaitOn('i-0gone');
      fake.attachEnds.set('i-0gone', { looks: 0, then: 'vanish' });
      const executions = await waitExecutions(attId);
      expect((await reconcileNow(attId)).map((r) => [r.kind, r.outcome, r.did])).toEqual([['stuck-attach-wait', 'repaired', expect.stringContaining('error_attaching (Attach of volume')]]);
      expect(await getAttachmentRecord(attId)).toMatchObject({ attachStatus: 'error_attaching', connectionInfo: null });
      expect(await attachWaitOf(attId)).toEqual({ execution: expect.any(String), host: 'i-0gone', status: 'failed', startedAt: expect.any(String), endedAt: expect.any(String), reason: expect.stringContaining('EC2 holds no attachment of EBS volume') });
      expect([await statusOf(id), await waitExecutions(attId), await reconcileNow(attId)]).toEqual(['available', executions, []]);
      await detachAll(attId);
      // A delete while the pass looks at EC2 (still attaching) wins: the renewal's write is refused, nothing starts.
      const raced = await endedWaitOn('i-0raced');
      let armed = true;
      ec2.on(DescribeVolumesCommand).callsFake(async (input) => {
        if (armed) {
          armed = false;
          await detachAll(raced.attId);
        }
        return fake.describeVolumes(input);
      });
      const left = await reconcileNow(raced.attId);
      wireFakeEc2(ec2, fake);
      expect(left.map((r) => [r.kind, r.outcome, r.did])).toEqual([['stuck-attach-wait', 'left', expect.stringContaining('a delete or a connect changed the wait meanwhile')]]);
      expect([(await getAttachmentRecord(raced.attId))!.deleted, await waitExecutions(raced.attId)]).toEqual([true, 1]);
      await auditClean();
    });

    test('a failed wait whose detach failed is an audit finding, and the reconciler detaches it once EC2 lets it', async () => {
      // Prepare: past the bound, EC2 refuses the Failed step's detach (the machine's retries would meet the same).
      fake.attachEnds.set('i-0nodetach', { looks: 0, then: 'stuck' });
      const attId = await attachTo('i-0nodetach');
      let refuse = true;
      const detaches = () => ec2.commandCalls(DetachVolumeCommand).filter((c) => c.args[0].input.InstanceId === 'i-0nodetach').length;
      wireFakeEc2(ec2, fake, (command, input) => {
        if (refuse && command === 'DetachVolume' && (input as { InstanceId?: string }).InstanceId === 'i-0nodetach') throw awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.');
      });
      const error = { Error: 'BackendNotReady', Cause: JSON.stringify({ errorMessage: 'still attaching after the bound' }) };
      await expect(attachWaitFailed(attId, error, (await attachWaitOf(attId))!.execution)).rejects.toThrow();
      expect((await waitEnds(attId)).status).toBe('SUCCEEDED');
      expect((await attachWaitOf(attId))).toMatchObject({ status: 'failed', detachPending: true });
      // EC2's attachment is also what the audit calls an orphan host connection (no attachment uses it).
      expect((await runAudit()).findings.map((f) => f.kind)).toEqual(['attach-wait-detach-pending', 'orphan-host-connection']);
      // Act + Assess: a pass while EC2 still refuses fails and keeps the intent; once EC2 lets it, the pass detaches.
      expect((await reconcile({ before: new Date(Date.now() + 1000) })).left.filter((r) => r.resource === `attachment ${attId}`).map((r) => [r.kind, r.outcome])).toEqual([['attach-wait-detach-pending', 'failed']]);
      expect((await attachWaitOf(attId))!.detachPending).toBe(true);
      refuse = false;
      const before = detaches();
      const pass = await reconcile({ before: new Date(Date.now() + 1000) });
      expect(pass.repaired.filter((r) => r.resource === `attachment ${attId}`).map((r) => r.kind)).toEqual(['attach-wait-detach-pending']);
      expect(detaches()).toBe(before + 1);
      expect((await attachWaitOf(attId))!.detachPending).toBeUndefined();
      fake.describeVolumes({ VolumeIds: [ebsVolume().VolumeId!] });
      expect(ebsVolume().Attachments).toEqual([]);
      expect(await reconcileNow(attId)).toEqual([]);
      wireFakeEc2(ec2, fake);
      await detachAll(attId);
      await auditClean();
    });
  });

  test('a snapshot, then its delete; then the volume delete through its machine leaves EC2 empty', async () => {
    const snap = await api('POST', '/snapshots', { snapshot: { volume_id: id, name: 's1' } });
    expect(snap.status).toBe(202);
    const snapId = snap.body.snapshot.id as string;
    await eventually(async () => (await api('GET', `/snapshots/${snapId}`)).body.snapshot.status === 'available' || undefined, 'snapshot available');
    expect([...fake.snapshots.values()]).toHaveLength(1);
    expect((await api('DELETE', `/snapshots/${snapId}`)).status).toBe(202);
    await eventually(async () => (await api('GET', `/snapshots/${snapId}`)).status === 404 || undefined, 'snapshot gone');
    expect([...fake.snapshots.values()]).toHaveLength(0);

    expect((await api('DELETE', `/volumes/${id}`)).status).toBe(202);
    await becomes(id, 'gone');
    expect(fake.volumes.size).toBe(0);
    await auditClean();
  });
});
