/**
 * Issue 14, "leave nothing behind": a volume deleted while its backend fails over (upstream allows
 * it; only `frozen` refuses a delete). Three replicated volumes on an aws-ebs backend (EC2 mocked
 * per region, test/support/fake-ec2.ts); two are deleted through the API while the failover's
 * batch is in the driver, right after Frankfurt's CreateVolume made their replicas, before the
 * batch writes their outcomes. The batch removes the replica it made for each (DeleteVolume in
 * Frankfurt); one DeleteVolume refused is recorded for the audit and does not fail the failover.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { awsError, type FakeEc2 } from '../support/fake-ec2.js';
import { startReplicatedEbsStack, type EbsStack } from '../support/ebs-stack.js';
import { eventually } from '../support/poll.js';
import { replicationPass } from '../support/replication-pass.js';

const HOST = 'ferry@ebs-d';
let ebs: EbsStack;
let frankfurt: FakeEc2;
const api = (method: string, path: string, body?: unknown) => ebs.api(method, path, body);
const service = async () => (await api('GET', `/os-services?host=${encodeURIComponent(HOST)}&binary=cinder-volume`)).body.services[0] as Record<string, any>;
const nameOf = (v: { Tags?: { Key?: string; Value?: string }[] }) => v.Tags?.find((t) => t.Key === 'ferry:backend-name')?.Value;
const inFrankfurt = (id: string) => [...frankfurt.volumes.values()].filter((v) => nameOf(v) === `volume-${id}`);

beforeAll(async () => {
  ebs = await startReplicatedEbsStack({ host: HOST, volumeBackendName: 'ebs-d', typeName: 'ebs-replicated-d', ebsVolumeType: 'gp3' });
  frankfurt = ebs.fakes.get('eu-central-1')!;
}, 120_000);
afterAll(async () => {
  await ebs?.stop();
});

test('volumes deleted during their failover leave no replica in the target; a replica that cannot be removed is recorded for the audit; the rest fail over', async () => {
  // Prepare: three replicated volumes with copies arrived in Frankfurt.
  const [kept, deleted, refused] = await Promise.all(
    ['kept', 'deleted', 'refused'].map(async (name) => (await api('POST', '/volumes', { volume: { size: 1, name, volume_type: 'ebs-replicated-d', availability_zone: 'eu-west-1a' } })).body.volume.id as string),
  );
  for (const id of [kept!, deleted!, refused!]) await eventually(async () => ((await api('GET', `/volumes/${id}`)).body.volume.status === 'available' ? true : undefined), `volume ${id} available`);
  for (let i = 0; i < 5; i++) expect(await replicationPass(HOST)).toMatchObject({ volumes: 3, failed: 0 });
  // Frankfurt's CreateVolume of a doomed volume's replica answers only once that volume is deleted
  // through the API; the replica of `refused` cannot be deleted (its DeleteVolume is refused).
  const real = { createVolume: frankfurt.createVolume, deleteVolume: frankfurt.deleteVolume };
  const deleteThroughApi = async (id: string) => {
    expect((await api('DELETE', `/volumes/${id}`)).status).toBe(202);
    await eventually(async () => ((await api('GET', `/volumes/${id}`)).status === 404 ? true : undefined), `volume ${id} deleted`);
  };
  (frankfurt as { createVolume: unknown }).createVolume = async (input: Parameters<FakeEc2['createVolume']>[0]) => {
    const made = real.createVolume.call(frankfurt, input);
    const name = input.TagSpecifications?.[0]?.Tags?.find((t) => t.Key === 'ferry:backend-name')?.Value;
    for (const id of [deleted!, refused!]) if (name === `volume-${id}`) await deleteThroughApi(id);
    return made;
  };
  frankfurt.deleteVolume = (input) => {
    if (nameOf(frankfurt.volumes.get(input.VolumeId) ?? {}) === `volume-${refused}`) throw awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.');
    return real.deleteVolume.call(frankfurt, input);
  };

  // Act
  try {
    expect((await api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'frankfurt' })).status).toBe(202);
    await eventually(async () => ((await service()).replication_status === 'failed-over' ? true : undefined), 'service failed-over');
  } finally {
    Object.assign(frankfurt, real);
  }

  // Assess: the kept volume failed over as before; nothing left for the deleted one; the refused one's replica recorded.
  expect(inFrankfurt(kept!)).toHaveLength(1);
  expect((await api('GET', `/volumes/${kept}`)).body.volume).toMatchObject({ replication_status: 'failed-over', status: 'available' });
  expect(inFrankfurt(deleted!)).toEqual([]);
  const left = inFrankfurt(refused!);
  expect(left).toHaveLength(1);
  const findings = (await runAudit()).findings.filter((f) => f.kind === 'failover-replica-left');
  expect(findings).toHaveLength(1);
  expect(findings[0]!.detail).toContain(`frankfurt ${left[0]!.VolumeId}`);
  expect(findings[0]!.detail).not.toContain(inFrankfurt(kept!)[0]!.VolumeId);
});
