/**
 * A snapshot the backend is still making when POST /snapshots answers is waited for by the
 * snapshot-create machine (statemachines/snapshot-create.asl.json), not by the reconciler: the
 * embedded stack with the sandbox's local backends (fault mode `not-ready-after` plays the slow
 * backend) and an aws-ebs backend whose EC2 is mocked (test/support/fake-ec2.ts; DescribeSnapshots
 * answering `pending` or `error` as the test says). The reconciler runs only at the stack's start
 * here, so whatever ends a snapshot after that is the machine, unless a test calls recovery itself.
 */
import { DeleteSnapshotCommand, DescribeSnapshotsCommand, EC2Client, type Snapshot as EbsSnapshot } from '@aws-sdk/client-ec2';
import { ListExecutionsCommand, StartExecutionCommand, type SFNClient } from '@aws-sdk/client-sfn';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mockClient } from 'aws-sdk-client-mock';
import { stringify } from 'yaml';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { describeExecution, executionArnOf, setSfn, sfn, stateMachineArn } from '../../functions/core/executions.js';
import { clearFaultCalls, clearFaults, faultCalls, injectFault } from '../../functions/core/faults.js';
import { clearDriverCache, snapshotDriverFor } from '../../functions/drivers/volume/registry.js';
import type { Inventory } from '../../functions/inventory/schema.js';
import { SNAPSHOT_CREATE_MACHINE, snapshotCreateExecutionName, snapshotCreateStatus, startSnapshotCreate } from '../../functions/snapshots/machine.js';
import { recoverPendingSnapshots } from '../../functions/snapshots/recovery.js';
import { getSnapshot } from '../../functions/snapshots/repo.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { SANDBOX_INVENTORY, readInventoryFile } from '../../infra/inventory-file.js';
import { FakeEc2, wireFakeEc2 } from '../support/fake-ec2.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const EBS = 'ferry@ebs-a';
const ec2 = mockClient(EC2Client);
const fake = new FakeEc2(EBS);
let stack: TestLocalStack;

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${stack.url}/volume/v3/admin${path}`, {
    method,
    headers: { 'X-Auth-Token': 'admin:admin', 'Content-Type': 'application/json', 'OpenStack-API-Version': 'volume 3.70' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function newVolume(body: Record<string, unknown>): Promise<string> {
  const created = await api('POST', '/volumes', { volume: { size: 1, ...body } });
  expect(created.status).toBe(202);
  const id = created.body.volume.id as string;
  await eventually(async (note) => note((await api('GET', `/volumes/${id}`)).body.volume.status) === 'available' || undefined, `volume ${id} available`);
  return id;
}

/** POST /snapshots: the 202 body's snapshot. */
async function snapshotOf(volumeId: string): Promise<{ id: string; status: string }> {
  const res = await api('POST', '/snapshots', { snapshot: { volume_id: volumeId, name: 'snap' } });
  expect(res.status).toBe(202);
  return res.body.snapshot;
}

const snapshotBecomes = (id: string, wanted: string[]) =>
  eventually(async (note) => {
    const status = note((await getSnapshot(id))?.status);
    return status && wanted.includes(status) ? (await getSnapshot(id))! : undefined;
  }, `snapshot ${id} ${wanted.join('|')}`);

const executionEnds = (id: string) =>
  eventually(async (note) => {
    const out = await describeExecution(executionArnOf(SNAPSHOT_CREATE_MACHINE, snapshotCreateExecutionName(id)));
    return note(out.status) === 'RUNNING' ? undefined : out;
  }, `snapshot-create of ${id} to end`);

/** How many executions of snapshot-create carry this name (ListExecutions). */
async function executionsNamed(name: string): Promise<number> {
  const out = await (await sfn()).send(new ListExecutionsCommand({ stateMachineArn: stateMachineArn(SNAPSHOT_CREATE_MACHINE), maxResults: 1000 }));
  return (out.executions ?? []).filter((e) => e.name === name).length;
}

/**
 * DescribeSnapshots answers from the fake, with every snapshot it returns in the state `override`
 * gives for that answer (undefined: as the fake says). Calls that find no snapshot are not asked.
 */
function describeSnapshotsAs(override: () => Partial<EbsSnapshot> | undefined): void {
  ec2.on(DescribeSnapshotsCommand).callsFake((input: Parameters<FakeEc2['describeSnapshots']>[0]) => {
    const answer = fake.describeSnapshots(input);
    const state = answer.Snapshots.length > 0 ? override() : undefined;
    return state ? { Snapshots: answer.Snapshots.map((s) => ({ ...s, ...state })) } : answer;
  });
}

async function localBackendSnapshots(volumeId: string): Promise<string[]> {
  const v = (await api('GET', `/volumes/${volumeId}`)).body.volume;
  const driver = snapshotDriverFor(await driverForHost(v['os-vol-host-attr:host'] as string))!;
  return (await driver.listSnapshots()).filter((s) => s.backendName === `volume-${volumeId}`).map((s) => s.snapshotName);
}

beforeAll(async () => {
  wireFakeEc2(ec2, fake);
  const inventory = structuredClone(readInventoryFile(SANDBOX_INVENTORY)) as Inventory;
  inventory.volumeBackends.push({ host: EBS, driver: 'aws-ebs', availabilityZone: 'eu-west-1a', ebsVolumeType: 'gp3', volumeBackendName: 'ebs-a', pools: [{ name: 'gp', totalCapacityGb: 100 }] });
  inventory.volumeTypes.push({ name: 'ebs', extraSpecs: { volume_backend_name: 'ebs-a' } });
  const file = join(await mkdtemp(join(tmpdir(), 'ferry-snapshot-create-')), 'inventory.yaml');
  await writeFile(file, stringify(inventory));
  stack = await useLocalStack({ inventory: file });
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  ec2.restore();
  clearDriverCache();
});
afterEach(async () => {
  clearFaults();
  setSfn(undefined);
  wireFakeEc2(ec2, fake);
  // Every scenario ends with DynamoDB and the backends agreeing.
  expect((await runAudit()).findings).toEqual([]);
});

describe('a local backend that plays a slow one (fault mode not-ready-after)', () => {
  let volumeId: string;
  beforeAll(async () => {
    volumeId = await newVolume({ name: 'local' });
  });

  test('the quick path is kept: a backend that answers at once makes the snapshot available in the request, no machine', async () => {
    const snap = await snapshotOf(volumeId);
    expect(snap.status).toBe('available');
    expect(await snapshotCreateStatus(snap.id)).toBeUndefined();
  });

  test('still making it: 202 creating, then available through snapshot-create; one snapshot on the backend', async () => {
    // Prepare: the backend accepts the snapshot but answers "not finished" twice (the API's try and the machine's first).
    injectFault({ kind: 'volume', method: 'createSnapshot', mode: 'not-ready-after', times: 2 });
    clearFaultCalls();
    // Act
    const snap = await snapshotOf(volumeId);
    // Assess
    expect(snap.status).toBe('creating');
    expect((await snapshotBecomes(snap.id, ['available', 'error'])).status).toBe('available');
    const execution = await executionEnds(snap.id);
    expect([execution.status, execution.name]).toEqual(['SUCCEEDED', `snapshot-create-${snap.id}`]);
    expect(faultCalls().filter((c) => c.method === 'createSnapshot').map((c) => c.outcome)).toEqual(['injected-not-ready', 'injected-not-ready', 'ok']);
    expect(await localBackendSnapshots(volumeId)).toContain(`snapshot-${snap.id}`);
  });

  test('the execution name is the snapshot: starting it again is the same execution, and a console start of an available snapshot changes nothing', async () => {
    // Prepare
    injectFault({ kind: 'volume', method: 'createSnapshot', mode: 'not-ready-after', times: 1 });
    const snap = await snapshotOf(volumeId);
    const first = await snapshotBecomes(snap.id, ['available', 'error']);
    expect(first.status).toBe('available');
    await executionEnds(snap.id);
    clearFaultCalls();
    // Act: the API's start again (ExecutionAlreadyExists is that execution), and a console start under another name.
    const arn = await startSnapshotCreate(snap.id);
    const consoleStart = await (await sfn()).send(new StartExecutionCommand({ stateMachineArn: stateMachineArn(SNAPSHOT_CREATE_MACHINE), name: `console-${snap.id}`, input: JSON.stringify({ snapshotId: snap.id }) }));
    const consoleEnd = await eventually(async () => {
      const out = await describeExecution(consoleStart.executionArn!);
      return out.status === 'RUNNING' ? undefined : out;
    }, 'console execution to end');
    // Assess
    expect(arn).toBe(executionArnOf(SNAPSHOT_CREATE_MACHINE, snapshotCreateExecutionName(snap.id)));
    expect(await executionsNamed(snapshotCreateExecutionName(snap.id))).toBe(1);
    expect(consoleEnd.status).toBe('SUCCEEDED');
    expect(faultCalls().filter((c) => c.method === 'createSnapshot')).toEqual([]);
    expect(await getSnapshot(snap.id)).toEqual(first);
  });

  test('the backend fails after accepting it: error with the reason, nothing left on the backend, SnapshotCreateFailed', async () => {
    // Prepare: the API's try makes the snapshot and answers not-ready; every later try fails.
    injectFault({ kind: 'volume', method: 'createSnapshot', mode: 'not-ready-after', times: 1 });
    injectFault({ kind: 'volume', method: 'createSnapshot', mode: 'fail', message: 'the backend lost the snapshot' });
    // Act
    const snap = await snapshotOf(volumeId);
    // Assess
    expect(snap.status).toBe('creating');
    const failed = await snapshotBecomes(snap.id, ['error', 'available']);
    expect([failed.status, failed.errorReason]).toEqual(['error', 'the backend lost the snapshot']);
    const execution = await executionEnds(snap.id);
    expect([execution.status, execution.error]).toEqual(['FAILED', 'SnapshotCreateFailed']);
    expect(await localBackendSnapshots(volumeId)).not.toContain(`snapshot-${snap.id}`);
  });

  test('a console start of a snapshot that is not creating is refused and changes nothing', async () => {
    // Prepare: a snapshot in error (the driver refused it in the request).
    injectFault({ kind: 'volume', method: 'createSnapshot', mode: 'fail', times: 1 });
    const snap = await snapshotOf(volumeId);
    expect(snap.status).toBe('error');
    const before = await getSnapshot(snap.id);
    clearFaultCalls();
    // Act
    await startSnapshotCreate(snap.id);
    const execution = await executionEnds(snap.id);
    // Assess
    expect([execution.status, execution.error]).toEqual(['FAILED', 'SnapshotCreateFailed']);
    expect(await getSnapshot(snap.id)).toEqual(before);
    expect(faultCalls().filter((c) => c.method === 'createSnapshot' || c.method === 'deleteSnapshot')).toEqual([]);
  });
});

describe('an EBS backend (EC2 mocked)', () => {
  let volumeId: string;
  beforeAll(async () => {
    volumeId = await newVolume({ name: 'on-ebs', volume_type: 'ebs', availability_zone: 'eu-west-1a' });
  });

  test('pending: 202 creating, the machine waits (the reconciler leaves it to the machine), then available', async () => {
    // Prepare: EC2 says pending until the test lets it complete.
    let completed = false;
    let pendingLooks = 0;
    describeSnapshotsAs(() => (completed ? undefined : (pendingLooks++, { State: 'pending' })));
    // Act
    const snap = await snapshotOf(volumeId);
    // Assess: the request's three looks saw pending; the machine's CreateOnBackend keeps looking.
    expect(snap.status).toBe('creating');
    await eventually(() => pendingLooks > 8 || undefined, 'the machine to look again after its wait', 60_000);
    expect(await snapshotCreateStatus(snap.id)).toBe('RUNNING');
    // A retried start is the same execution.
    expect(await startSnapshotCreate(snap.id)).toBe(executionArnOf(SNAPSHOT_CREATE_MACHINE, snapshotCreateExecutionName(snap.id)));
    expect(await executionsNamed(snapshotCreateExecutionName(snap.id))).toBe(1);
    // The reconciler's pass, with a cut-off past the snapshot's last change: the machine owns it, so
    // the pass neither calls the driver for it (that would answer `pending`) nor records anything.
    expect((await recoverPendingSnapshots({ before: new Date(Date.now() + 60_000) })).filter((r) => r.snapshotId === snap.id)).toEqual([]);
    expect((await getSnapshot(snap.id))!.status).toBe('creating');
    // EBS completes it.
    completed = true;
    expect((await snapshotBecomes(snap.id, ['available', 'error'])).status).toBe('available');
    expect((await executionEnds(snap.id)).status).toBe('SUCCEEDED');
    expect([...fake.snapshots.values()].filter((s) => s.Tags?.some((t) => t.Key === 'ferry:snapshot-name' && t.Value === `snapshot-${snap.id}`))).toHaveLength(1);
  }, 90_000);

  test('error on EC2: the snapshot ends error with the reason, and every EBS snapshot made under its name is deleted', async () => {
    // Prepare: pending for the request's three looks, then EC2 reports the snapshot in state error.
    let looks = 0;
    describeSnapshotsAs(() => (++looks <= 3 ? { State: 'pending' } : { State: 'error', StateMessage: 'EBS internal error' }));
    const before = fake.snapshots.size;
    ec2.resetHistory();
    // Act
    const snap = await snapshotOf(volumeId);
    // Assess
    expect(snap.status).toBe('creating');
    const failed = await snapshotBecomes(snap.id, ['error', 'available']);
    expect(failed.status).toBe('error');
    expect(failed.errorReason).toMatch(/went into state error: EBS internal error/);
    const execution = await executionEnds(snap.id);
    expect([execution.status, execution.error]).toEqual(['FAILED', 'SnapshotCreateFailed']);
    expect(ec2.commandCalls(DeleteSnapshotCommand).length).toBeGreaterThan(0);
    expect(fake.snapshots.size).toBe(before);
    expect([...fake.snapshots.values()].filter((s) => s.Tags?.some((t) => t.Value === `snapshot-${snap.id}`))).toEqual([]);
  }, 90_000);

  test('a StartExecution that fails leaves the snapshot creating (202), and the reconciler finishes it', async () => {
    // Prepare: EC2 pending for the request's three looks; Step Functions refusing every call.
    let looks = 0;
    describeSnapshotsAs(() => (++looks <= 3 ? { State: 'pending' } : undefined));
    const refusing = { send: async () => Promise.reject(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' })) } as unknown as SFNClient;
    setSfn(refusing);
    // Act
    const snap = await snapshotOf(volumeId);
    setSfn(undefined);
    // Assess: accepted, no execution; the reconciler's pass (no machine owns it) finishes it.
    expect(snap.status).toBe('creating');
    expect(await snapshotCreateStatus(snap.id)).toBeUndefined();
    const recovered = (await recoverPendingSnapshots({ before: new Date(Date.now() + 60_000) })).filter((r) => r.snapshotId === snap.id);
    expect(recovered.map((r) => r.action)).toEqual(['created']);
    expect((await getSnapshot(snap.id))!.status).toBe('available');
  });

  test('the reconciler touches nothing when Step Functions cannot say whether a machine owns the snapshot', async () => {
    // Prepare: a creating snapshot without an execution, as the test above makes one.
    let looks = 0;
    describeSnapshotsAs(() => (++looks <= 3 ? { State: 'pending' } : undefined));
    setSfn({ send: async () => Promise.reject(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' })) } as unknown as SFNClient);
    const snap = await snapshotOf(volumeId);
    // Act: the pass while Step Functions still cannot answer.
    const unread = (await recoverPendingSnapshots({ before: new Date(Date.now() + 60_000) })).filter((r) => r.snapshotId === snap.id);
    setSfn(undefined);
    // Assess
    expect(unread.map((r) => r.action)).toEqual(['owner-unknown']);
    expect((await getSnapshot(snap.id))!.status).toBe('creating');
    // And the next pass, with Step Functions back, finishes it.
    expect((await recoverPendingSnapshots({ before: new Date(Date.now() + 60_000) })).filter((r) => r.snapshotId === snap.id).map((r) => r.action)).toEqual(['created']);
  });
});
