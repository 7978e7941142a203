/**
 * EBS through the Cinder API, EC2 mocked (test/support/fake-ec2.ts, which refuses what EC2 refuses):
 * manage and unmanage of volumes Ferry did not make, under stable names (the EBS volume id, kept
 * through manage, unmanage and manage again), and io2 volumes of a multiattach type attached to two
 * instances. The audit is clean after each.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import type { FakeEc2 } from '../support/fake-ec2.js';
import { startEbsStack, type EbsStack } from '../support/ebs-stack.js';
import { eventually } from '../support/poll.js';

let ebs: EbsStack;
let fake: FakeEc2;
const api = (method: string, path: string, body?: unknown) => ebs.api(method, path, body);
const volumeOf = async (id: string) => (await api('GET', `/volumes/${id}`)).body?.volume as Record<string, any> | undefined;
const becomes = (id: string, want: string) => eventually(async (note) => note((await volumeOf(id))?.status ?? 'gone') === want || undefined, `volume ${id} ${want}`);
const tagsOf = (volumeId: string) => Object.fromEntries((fake.volumes.get(volumeId)?.Tags ?? []).map((t) => [t.Key, t.Value]));
const manageable = async () => (await api('GET', '/manageable_volumes/detail?host=ferry@ebs-a')).body['manageable-volumes'] as Record<string, any>[];
const manage = (sourceName: string) => api('POST', '/manageable_volumes', { volume: { host: 'ferry@ebs-a', ref: { 'source-name': sourceName }, volume_type: 'ebs', name: 'legacy' } });
async function auditClean(): Promise<void> {
  expect((await runAudit()).findings).toEqual([]);
}

beforeAll(async () => {
  ebs = await startEbsStack({
    instances: ['i-0a', 'i-0b'],
    backends: [
      { host: 'ferry@ebs-a', driver: 'aws-ebs', availabilityZone: 'eu-west-1a', ebsVolumeType: 'gp3', volumeBackendName: 'ebs-a', pools: [{ name: 'gp', totalCapacityGb: 100 }] },
      { host: 'ferry@ebs-m', driver: 'aws-ebs', availabilityZone: 'eu-west-1a', ebsVolumeType: 'io2', volumeBackendName: 'ebs-m', pools: [{ name: 'io', totalCapacityGb: 100 }] },
    ],
    types: [
      { name: 'ebs', extraSpecs: { volume_backend_name: 'ebs-a' } },
      { name: 'ebs-multi', extraSpecs: { volume_backend_name: 'ebs-m', multiattach: '<is> True' } },
    ],
  });
  fake = ebs.fake;
}, 120_000);
afterAll(async () => {
  await ebs?.stop();
});

describe('manage and unmanage volumes Ferry did not make (EBS, EC2 mocked)', () => {
  let legacy: string;
  let attached: string;
  let id: string;

  test('the manageable listing shows the zone\'s untagged volumes by id, an attached one not safe', async () => {
    legacy = fake.add('x', 5, 'gp', { Tags: [{ Key: 'Name', Value: 'legacy-db' }] }).VolumeId!;
    attached = fake.add('x', 3, 'gp', { State: 'in-use', Tags: [], Attachments: [{ InstanceId: 'i-0ff', State: 'attached', Device: '/dev/sdf' }] }).VolumeId!;
    fake.add('x', 7, 'gp', { Tags: [], AvailabilityZone: 'eu-west-1b' });

    const listed = await manageable();
    expect(listed.map((e) => [e.reference['source-name'], e.size, e.safe_to_manage, e.reason_not_safe])).toEqual([
      [legacy, 5, true, null],
      [attached, 3, false, 'volume in use'],
    ]);
  });

  test('manage adopts it under its id: available, its size, tagged as the backend\'s; listed as managed', async () => {
    const managed = await manage(legacy);
    expect(managed.status).toBe(202);
    id = managed.body.volume.id;
    await becomes(id, 'available');

    expect((await volumeOf(id))!.size).toBe(5);
    expect(tagsOf(legacy)).toEqual({ Name: 'legacy-db', 'ferry:backend-name': legacy, 'ferry:backend': 'ferry@ebs-a', 'ferry:pool': 'gp', 'ferry:adopted': 'true' });
    expect((await manageable()).find((e) => e.reference['source-name'] === legacy)).toMatchObject({ safe_to_manage: false, reason_not_safe: 'already managed', cinder_id: id });
    expect((await manage(legacy)).status).toBe(400);
    await auditClean();
  });

  test('unmanage forgets it and keeps the EBS volume; manage again finds it under the same name', async () => {
    const unmanaged = await api('POST', `/volumes/${id}/action`, { 'os-unmanage': null });
    expect(unmanaged.status).toBe(202);
    await becomes(id, 'gone');
    expect(fake.volumes.has(legacy)).toBe(true);
    expect((await manageable()).find((e) => e.reference['source-name'] === legacy)).toMatchObject({ safe_to_manage: true });
    await auditClean();

    const again = await manage(legacy);
    expect(again.status).toBe(202);
    id = again.body.volume.id;
    await becomes(id, 'available');
    expect(tagsOf(legacy)['ferry:backend-name']).toBe(legacy);
    await auditClean();
  });

  test('an attached volume cannot be managed: error_managing with the reason, its tags untouched', async () => {
    const managed = await manage(attached);
    expect(managed.status).toBe(202);
    const failedId = managed.body.volume.id as string;
    await becomes(failedId, 'error_managing');
    expect(tagsOf(attached)).toEqual({});
    expect((await api('DELETE', `/volumes/${failedId}`)).status).toBe(202);
    await becomes(failedId, 'gone');
    expect(fake.volumes.has(attached)).toBe(true);
    await auditClean();
  });

  test('a managed volume is deleted like any other: the EBS volume goes', async () => {
    expect((await api('DELETE', `/volumes/${id}`)).status).toBe(202);
    await becomes(id, 'gone');
    expect(fake.volumes.has(legacy)).toBe(false);
    await auditClean();
  });
});

describe('io2 multiattach through the API (EC2 mocked)', () => {
  const attach = async (volumeId: string, instance: string, server: string) => {
    const att = await api('POST', '/attachments', { attachment: { volume_uuid: volumeId, instance_uuid: server } });
    if (att.status !== 200) return att;
    const attId = att.body.attachment.id as string;
    const updated = await api('PUT', `/attachments/${attId}`, { attachment: { connector: { host: instance } } });
    expect([updated.status, JSON.stringify(updated.body)]).toEqual([200, expect.anything()]);
    expect((await api('POST', `/attachments/${attId}/action`, { 'os-complete': null })).status).toBe(204);
    return { status: 200, body: { id: attId, connection: updated.body.attachment.connection_info } };
  };

  test('a volume of a multiattach type is an io2 volume with Multi-Attach, attached to two instances and detached from both', async () => {
    const created = await api('POST', '/volumes', { volume: { size: 4, volume_type: 'ebs-multi', availability_zone: 'eu-west-1a' } });
    expect(created.status).toBe(202);
    const id = created.body.volume.id as string;
    await becomes(id, 'available');
    const ebs = [...fake.volumes.values()].find((v) => v.Tags?.some((t) => t.Value === `volume-${id}`))!;
    expect([ebs.VolumeType, ebs.Iops, ebs.MultiAttachEnabled, (await volumeOf(id))!.multiattach]).toEqual(['io2', 200, true, true]);

    const a = await attach(id, 'i-0a', '11111111-1111-4111-8111-111111111111');
    const b = await attach(id, 'i-0b', '22222222-2222-4222-8222-222222222222');
    expect([a.status, b.status]).toEqual([200, 200]);
    fake.describeVolumes({ VolumeIds: [ebs.VolumeId!] });
    expect(fake.volumes.get(ebs.VolumeId!)!.Attachments!.map((x) => [x.InstanceId, x.State])).toEqual([
      ['i-0a', 'attached'],
      ['i-0b', 'attached'],
    ]);
    expect(b.body.connection).toMatchObject({ volume_id: ebs.VolumeId, instance_id: 'i-0b' });
    await auditClean();

    for (const att of [a, b]) expect((await api('DELETE', `/attachments/${att.body.id}`)).status).toBe(200);
    expect((await volumeOf(id))!.status).toBe('available');
    expect((await api('DELETE', `/volumes/${id}`)).status).toBe(202);
    await becomes(id, 'gone');
    expect(fake.volumes.has(ebs.VolumeId!)).toBe(false);
    await auditClean();
  });

  test('a volume of a type without multiattach is refused a second instance by the API, before EC2 is asked', async () => {
    const created = await api('POST', '/volumes', { volume: { size: 1, volume_type: 'ebs', availability_zone: 'eu-west-1a' } });
    const id = created.body.volume.id as string;
    await becomes(id, 'available');
    const a = await attach(id, 'i-0a', '33333333-3333-4333-8333-333333333333');
    expect(a.status).toBe(200);
    const second = await api('POST', '/attachments', { attachment: { volume_uuid: id, instance_uuid: '44444444-4444-4444-8444-444444444444' } });
    expect(second.status).toBe(400);
    expect(JSON.stringify(second.body)).toMatch(/multiattach|in-use|attached/i);

    expect((await api('DELETE', `/attachments/${a.body.id}`)).status).toBe(200);
    expect((await api('DELETE', `/volumes/${id}`)).status).toBe(202);
    await becomes(id, 'gone');
    await auditClean();
  });
});
