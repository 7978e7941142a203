/**
 * Issue 14, "leave nothing behind": a volume whose record will not hold what its failover brings up
 * in the target (replication/failover-discard.ts). Two aws-ebs backends replicated to Frankfurt (EC2
 * mocked per region, test/support/fake-ec2.ts), each failed over once:
 * - ebs-d: while the batch is in the driver, right after Frankfurt's CreateVolume made their
 *   replicas, before the batch writes their outcomes, one volume is deleted, one is being deleted
 *   (its primary DeleteVolume held until the failover ended), one moves to another backend (its
 *   record's host changes, as a finished migration leaves it) and one is deleted with its replica's
 *   DeleteVolume refused. The batch removes the first three's replicas; the refused one is recorded
 *   for the audit and does not fail the failover, and the reconciler removes it once EC2 lets it.
 * - ebs-c: a crash between the CreateVolume of a deleted volume's replica and its removal (after the
 *   batch wrote its other outcome): the re-run of the batch removes it.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { reconcile } from '../../functions/audit/reconciler.js';
import { clearFaults, injectFault } from '../../functions/core/faults.js';
import { getBackendItem } from '../../functions/replication/service-repo.js';
import { runBatch } from '../../functions/replication/steps.js';
import { getVolume, writeVolumeWith } from '../../functions/volumes/repo.js';
import { awsError, type FakeEc2 } from '../support/fake-ec2.js';
import { startEbsStack, type EbsStack } from '../support/ebs-stack.js';
import { eventually } from '../support/poll.js';
import { replicationPass } from '../support/replication-pass.js';

const HOST = 'ferry@ebs-d';
const CRASH_HOST = 'ferry@ebs-c';
let ebs: EbsStack;
let ireland: FakeEc2;
let frankfurt: FakeEc2;
const api = (method: string, path: string, body?: unknown) => ebs.api(method, path, body);
const service = async (host: string) => (await api('GET', `/os-services?host=${encodeURIComponent(host)}&binary=cinder-volume`)).body.services[0] as Record<string, any>;
const nameOf = (v: { Tags?: { Key?: string; Value?: string }[] }) => v.Tags?.find((t) => t.Key === 'ferry:backend-name')?.Value;
const inFrankfurt = (id: string) => [...frankfurt.volumes.values()].filter((v) => nameOf(v) === `volume-${id}`);
const backend = (host: string) => ({
  host,
  driver: 'aws-ebs' as const,
  availabilityZone: 'eu-west-1a',
  ebsVolumeType: 'gp3' as const,
  volumeBackendName: host.split('@')[1]!,
  pools: [{ name: 'gp', totalCapacityGb: 100 }],
  replicationDevices: [{ backend_id: 'frankfurt', availability_zone: 'eu-central-1a' }],
});
const typeOf = (host: string) => `replicated-${host.split('@')[1]}`;

beforeAll(async () => {
  ebs = await startEbsStack({
    zones: ['eu-west-1a', 'eu-central-1a'],
    backends: [backend(HOST), backend(CRASH_HOST)],
    types: [HOST, CRASH_HOST].map((h) => ({ name: typeOf(h), extraSpecs: { volume_backend_name: h.split('@')[1]!, replication_enabled: '<is> True' } })),
  });
  ireland = ebs.fakes.get('eu-west-1')!;
  frankfurt = ebs.fakes.get('eu-central-1')!;
}, 120_000);
afterAll(async () => {
  clearFaults();
  await ebs?.stop();
});

/** Replicated volumes on `host` with copies arrived in Frankfurt. */
async function replicatedVolumes(host: string, names: string[]): Promise<string[]> {
  const ids = await Promise.all(names.map(async (name) => (await api('POST', '/volumes', { volume: { size: 1, name, volume_type: typeOf(host), availability_zone: 'eu-west-1a' } })).body.volume.id as string));
  for (const id of ids) await eventually(async () => ((await api('GET', `/volumes/${id}`)).body.volume.status === 'available' ? true : undefined), `volume ${id} available`);
  for (let i = 0; i < 5; i++) expect(await replicationPass(host)).toMatchObject({ volumes: names.length, failed: 0 });
  return ids;
}

async function deleteThroughApi(id: string, until: 'deleting' | 'gone'): Promise<void> {
  expect((await api('DELETE', `/volumes/${id}`)).status).toBe(202);
  await eventually(async () => {
    const got = await api('GET', `/volumes/${id}`);
    return (until === 'gone' ? got.status === 404 : got.body?.volume?.status === 'deleting') ? true : undefined;
  }, `volume ${id} ${until}`);
}

/** Frankfurt's CreateVolume of the replica of a volume named in `after` answers only once `after` has run for it. */
function onReplicaMade(after: Record<string, () => Promise<void>>): () => void {
  const real = frankfurt.createVolume;
  (frankfurt as { createVolume: unknown }).createVolume = async (input: Parameters<FakeEc2['createVolume']>[0]) => {
    const made = real.call(frankfurt, input);
    const name = input.TagSpecifications?.[0]?.Tags?.find((t) => t.Key === 'ferry:backend-name')?.Value;
    for (const [id, act] of Object.entries(after)) if (name === `volume-${id}`) await act();
    return made;
  };
  return () => Object.assign(frankfurt, { createVolume: real });
}

test('volumes deleted, being deleted or moved during their failover leave no replica in the target; a replica that cannot be removed is recorded for the audit, which removes it once it can; the rest fail over', async () => {
  // Prepare
  const [kept, deleted, deleting, moved, refused] = await replicatedVolumes(HOST, ['kept', 'deleted', 'deleting', 'moved', 'refused']);
  // The being-deleted volume's primary DeleteVolume is held until the failover ended.
  let releaseDelete!: () => void;
  const deleteHeld = new Promise<void>((resolve) => (releaseDelete = resolve));
  const real = { deleteVolume: frankfurt.deleteVolume, primaryDelete: ireland.deleteVolume };
  (ireland as { deleteVolume: unknown }).deleteVolume = async (input: Parameters<FakeEc2['deleteVolume']>[0]) => {
    if (nameOf(ireland.volumes.get(input.VolumeId) ?? {}) === `volume-${deleting}`) await deleteHeld;
    return real.primaryDelete.call(ireland, input);
  };
  frankfurt.deleteVolume = (input) => {
    if (nameOf(frankfurt.volumes.get(input.VolumeId) ?? {}) === `volume-${refused}`) throw awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.');
    return real.deleteVolume.call(frankfurt, input);
  };
  const restoreCreate = onReplicaMade({
    [deleted!]: () => deleteThroughApi(deleted!, 'gone'),
    [refused!]: () => deleteThroughApi(refused!, 'gone'),
    [deleting!]: () => deleteThroughApi(deleting!, 'deleting'),
    // What a migration that finished meanwhile leaves: the record on another backend.
    [moved!]: async () => {
      const v = (await getVolume(moved!))!;
      await writeVolumeWith(v, { ...v, host: 'ferry@ebs-elsewhere#gp' }, []);
    },
  });

  // Act
  try {
    expect((await api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'frankfurt' })).status).toBe(202);
    await eventually(async () => ((await service(HOST)).replication_status === 'failed-over' ? true : undefined), 'service failed-over');
  } finally {
    restoreCreate();
    releaseDelete();
  }
  await eventually(async () => ((await api('GET', `/volumes/${deleting}`)).status === 404 ? true : undefined), `volume ${deleting} deleted`);
  Object.assign(ireland, { deleteVolume: real.primaryDelete });

  // Assess: the kept volume failed over as before; nothing left for the deleted, being deleted or moved ones; the refused one's replica recorded.
  expect(inFrankfurt(kept!)).toHaveLength(1);
  expect((await api('GET', `/volumes/${kept}`)).body.volume).toMatchObject({ replication_status: 'failed-over', status: 'available' });
  // One assertion, so a failure names every case that left a replica.
  expect({ deleted: inFrankfurt(deleted!), deleting: inFrankfurt(deleting!), moved: inFrankfurt(moved!) }).toEqual({ deleted: [], deleting: [], moved: [] });
  const left = inFrankfurt(refused!);
  expect(left).toHaveLength(1);
  const findings = (await runAudit()).findings.filter((f) => f.kind === 'failover-replica-left');
  expect(findings).toHaveLength(1);
  expect(findings[0]!.detail).toContain(`frankfurt ${left[0]!.VolumeId}`);
  expect(findings[0]!.detail).not.toContain(inFrankfurt(kept!)[0]!.VolumeId);

  // The repair: while DeleteVolume is still refused, it fails and the finding stays; then it removes the replica and the record, once.
  const reconcileNow = async () => {
    const { repaired, left } = await reconcile({ before: new Date(Date.now() + 1000) });
    return { repaired: repaired.filter((r) => r.kind === 'failover-replica-left'), left: left.filter((r) => r.kind === 'failover-replica-left') };
  };
  const refusedRepair = (await reconcileNow()).left;
  expect(refusedRepair.map((r) => r.outcome)).toEqual(['failed']);
  expect(inFrankfurt(refused!)).toHaveLength(1);
  expect((await runAudit()).findings.filter((f) => f.kind === 'failover-replica-left')).toHaveLength(1);
  Object.assign(frankfurt, { deleteVolume: real.deleteVolume });
  expect((await reconcileNow()).repaired.map((r) => r.outcome)).toEqual(['repaired']);
  expect(inFrankfurt(refused!)).toEqual([]);
  expect((await runAudit()).findings.filter((f) => f.kind === 'failover-replica-left')).toEqual([]);
  expect(await reconcileNow()).toEqual({ repaired: [], left: [] });
});

test('a crash between the CreateVolume of a deleted volume\'s replica and its removal: the batch run again removes it', async () => {
  // Prepare: the batch's discard "dies" (kill -9: it never returns) once, after the kept volume's outcome was written.
  const [kept, deleted] = await replicatedVolumes(CRASH_HOST, ['kept', 'deleted']);
  const restoreCreate = onReplicaMade({ [deleted!]: () => deleteThroughApi(deleted!, 'gone') });
  injectFault({ kind: 'volume', backend: CRASH_HOST, method: 'discardFailedOver', mode: 'crash', times: 1 });
  try {
    expect((await api('PUT', '/os-services/failover_host', { host: CRASH_HOST, backend_id: 'frankfurt' })).status).toBe(202);
    await eventually(async () => ((await api('GET', `/volumes/${kept}`)).body.volume.replication_status === 'failed-over' ? true : undefined), 'the kept volume failed over');
  } finally {
    restoreCreate();
  }
  expect(inFrankfurt(deleted!)).toHaveLength(1);

  // Act: the restarted stack runs the batch again (the crashed run never answers).
  const operationId = (await getBackendItem(CRASH_HOST)).failoverOperationId!;
  await runBatch(operationId, 0);

  // Assess
  expect(inFrankfurt(deleted!)).toEqual([]);
  expect(inFrankfurt(kept!)).toHaveLength(1);
});
