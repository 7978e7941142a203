/**
 * EBS volumes and attachments end to end through the Cinder API, with the aws-ebs driver behind an
 * inventory backend and EC2 mocked (every EC2Client in the process answers from test/support/fake-ec2.ts,
 * whose replies follow the EC2 API reference): create and delete through their state machines
 * (waiting in the machine while EC2 is still at it), extend, an attachment whose connector host is
 * an EC2 instance (attachment_update answers at once with the volume, instance and device),
 * snapshots, a throttled call; the audit is clean after each.
 */
import { DescribeVolumesCommand, EC2Client } from '@aws-sdk/client-ec2';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mockClient } from 'aws-sdk-client-mock';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import type { Inventory } from '../../functions/inventory/schema.js';
import { SANDBOX_INVENTORY, readInventoryFile } from '../../infra/inventory-file.js';
import { FakeEc2, awsError, wireFakeEc2 } from '../support/fake-ec2.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const ec2 = mockClient(EC2Client);
const fake = new FakeEc2('ferry@ebs-a');
let stack: TestLocalStack;

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${stack.url}/volume/v3/admin${path}`, {
    method,
    headers: { 'X-Auth-Token': 'admin:admin', 'Content-Type': 'application/json', 'OpenStack-API-Version': 'volume 3.44' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}
const statusOf = async (id: string) => ((await api('GET', `/volumes/${id}`)).body?.volume?.status as string | undefined) ?? 'gone';
const becomes = (id: string, want: string) => eventually(async (note) => note(await statusOf(id)) === want || undefined, `volume ${id} ${want}`);
async function auditClean(): Promise<void> {
  expect((await runAudit()).findings).toEqual([]);
}

beforeAll(async () => {
  wireFakeEc2(ec2, fake);
  fake.devices.set('i-0abc', ['/dev/sda1']);
  const inventory = structuredClone(readInventoryFile(SANDBOX_INVENTORY)) as Inventory;
  inventory.volumeBackends.push({ host: 'ferry@ebs-a', driver: 'aws-ebs', availabilityZone: 'eu-west-1a', ebsVolumeType: 'gp3', volumeBackendName: 'ebs-a', pools: [{ name: 'gp', totalCapacityGb: 100 }] });
  inventory.volumeTypes.push({ name: 'ebs', extraSpecs: { volume_backend_name: 'ebs-a' } });
  const file = join(await mkdtemp(join(tmpdir(), 'ferry-ebs-')), 'inventory.yaml');
  await writeFile(file, stringify(inventory));
  stack = await useLocalStack({ inventory: file });
}, 120_000);
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
    const updated = await api('PUT', `/attachments/${attId}`, { attachment: { connector: { host: 'i-0abc', initiator: 'iqn.x', ip: '10.0.0.5' } } });
    expect(updated.status).toBe(200);
    const volumeId = [...fake.volumes.keys()][0]!;
    expect(updated.body.attachment.connection_info).toMatchObject({ driver_volume_type: 'aws_ebs', volume_id: volumeId, instance_id: 'i-0abc', device: '/dev/sdf' });
    expect(fake.volumes.get(volumeId)!.Attachments).toEqual([expect.objectContaining({ InstanceId: 'i-0abc', State: 'attaching' })]);
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
