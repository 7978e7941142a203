/**
 * Issue 14's safety net (audit/replica-unowned.ts): volumes Ferry tagged in a target region that
 * nothing holds, left by a path we did not foresee, are reported and, once past the grace,
 * available and still unowned, deleted by the repair. An aws-ebs backend in Ireland replicated to
 * Frankfurt and Virginia (EC2 mocked per region, test/support/fake-ec2.ts):
 * - Frankfurt holds orphans made an hour ago (a drill copy, a failover volume of a deleted volume,
 *   one in use, one in error, one named after a live volume, one a failover records right after the audit read,
 *   one deleting) and one made just now; Virginia does not answer (RequestLimitExceeded);
 * - a drill's copies, a failover's volumes and what it left in Ireland are all held.
 */
import { DeleteCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import { runAudit, type AuditFinding } from '../../functions/audit/audit.js';
import { repairFinding } from '../../functions/audit/repair.js';
import { db } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { leftReplicasKey } from '../../functions/replication/failover-discard.js';
import { awsError, type FakeEc2 } from '../support/fake-ec2.js';
import { startEbsStack, type EbsStack } from '../support/ebs-stack.js';
import { eventually } from '../support/poll.js';
import { replicationPass } from '../support/replication-pass.js';

const HOST = 'ferry@ebs-u';
const TYPE = 'replicated-ebs-u';
const HOUR = 3_600_000;
let ebs: EbsStack;
let frankfurt: FakeEc2;
let virginia: FakeEc2;
const api = (method: string, path: string, body?: unknown) => ebs.api(method, path, body);
const service = async () => (await api('GET', `/os-services?host=${encodeURIComponent(HOST)}&binary=cinder-volume`)).body.services[0] as Record<string, any>;
const drillTags = (name: string) => [{ Key: 'Name', Value: `drill-${name}` }, { Key: 'ferry:drill', Value: name }, { Key: 'ferry:replication', Value: 'drill' }, { Key: 'ferry:backend', Value: HOST }];
/** A volume of the backend in a region's fake, made `ago` ms ago (its CreateTime). */
function madeAgo(fake: FakeEc2, ago: number, name: string, extra: Parameters<FakeEc2['add']>[3] = {}): string {
  const clock = fake.clock;
  fake.clock = () => Date.now() - ago;
  try {
    return fake.add(name, 1, 'gp', extra).VolumeId!;
  } finally {
    fake.clock = clock;
  }
}
const replicaFindings = (findings: AuditFinding[]) => findings.filter((f) => f.kind.startsWith('replica-')).map((f) => `${f.kind} ${f.resource}`).sort();

beforeAll(async () => {
  ebs = await startEbsStack({
    zones: ['eu-west-1a', 'eu-central-1a', 'us-east-1a'],
    backends: [
      {
        host: HOST,
        driver: 'aws-ebs',
        availabilityZone: 'eu-west-1a',
        ebsVolumeType: 'gp3',
        volumeBackendName: 'ebs-u',
        pools: [{ name: 'gp', totalCapacityGb: 100 }],
        replicationDevices: [
          { backend_id: 'frankfurt', availability_zone: 'eu-central-1a' },
          { backend_id: 'virginia', availability_zone: 'us-east-1a' },
        ],
      },
    ],
    types: [{ name: TYPE, extraSpecs: { volume_backend_name: 'ebs-u', replication_enabled: '<is> True' } }],
  });
  frankfurt = ebs.fakes.get('eu-central-1')!;
  virginia = ebs.fakes.get('us-east-1')!;
}, 120_000);
afterAll(async () => {
  await ebs?.stop();
});
/** What a test changed in the fakes and the table, put back after it whether it passed or not. */
const undo: (() => unknown)[] = [];
const afterThisTest = (fn: () => unknown) => undo.push(fn);
afterEach(async () => {
  for (const fn of undo.splice(0).reverse()) await fn();
});

test('the audit reports what nothing holds in a target region and a region it cannot read; the repair deletes the available orphans past the grace, and leaves one in use or in error, one a failover would take up, one recorded meanwhile', async () => {
  // Prepare: a live replicated volume, and Frankfurt's orphans.
  const kept = (await api('POST', '/volumes', { volume: { size: 1, name: 'kept', volume_type: TYPE, availability_zone: 'eu-west-1a' } })).body.volume.id as string;
  await eventually(async () => ((await api('GET', `/volumes/${kept}`)).body.volume.status === 'available' ? true : undefined), 'volume available');
  // Each fake numbers its volumes from vol-1, and a record's providerLocation names no region: the
  // audit takes a record naming an id as holding it in every region (the safe side), so Frankfurt's
  // ids are kept apart from Ireland's.
  for (let i = 0; i < 10; i++) frankfurt.volumes.delete(frankfurt.add('burnt', 1).VolumeId!);
  const drillCopy = madeAgo(frankfurt, HOUR, 'drill-volume-gone-1', { Tags: drillTags('volume-gone-1') });
  const failedOver = madeAgo(frankfurt, HOUR, 'volume-gone-2');
  const inUse = madeAgo(frankfurt, HOUR, 'volume-gone-3', { State: 'in-use', Attachments: [{ InstanceId: 'i-9', State: 'attached', Device: '/dev/sdf' }] });
  const namedLive = madeAgo(frankfurt, HOUR, `volume-${kept}`);
  const recordedMeanwhile = madeAgo(frankfurt, HOUR, 'volume-gone-4');
  const broken = madeAgo(frankfurt, HOUR, 'volume-gone-7', { State: 'error' });
  const deleting = madeAgo(frankfurt, HOUR, 'volume-gone-5', { State: 'deleting' });
  const recent = madeAgo(frankfurt, 0, 'volume-gone-6');
  afterThisTest(() => [drillCopy, failedOver, inUse, namedLive, recordedMeanwhile, broken, deleting, recent].forEach((id) => frankfurt.volumes.delete(id)));
  const { describeVolumes } = virginia;
  virginia.describeVolumes = () => {
    throw awsError('RequestLimitExceeded', 'Request limit exceeded.');
  };
  afterThisTest(() => Object.assign(virginia, { describeVolumes }));

  // Act: the audit
  const audit = await runAudit();

  // Assess
  expect(replicaFindings(audit.findings)).toEqual(
    [`replica-site-unreadable ${HOST} virginia`, ...[drillCopy, failedOver, inUse, namedLive, recordedMeanwhile, broken].map((id) => `replica-unowned ${HOST} frankfurt ${id}`)].sort(),
  );
  const findingOf = (id: string) => audit.findings.find((f) => f.resource.endsWith(id))!;
  expect(findingOf('virginia').detail).toContain('RequestLimitExceeded');
  expect(findingOf(inUse).detail).toContain('in use');
  expect(findingOf(namedLive).detail).toContain('a failover to frankfurt would take it up');

  // Act: a failover records one right after the audit read (what failover-discard.ts writes), and
  // Frankfurt refuses the first DeleteVolume of another; the repairs act on the audit's findings.
  const race = leftReplicasKey('op-after-the-audit', 0);
  await db().send(new PutCommand({ TableName: tableName('volume'), Item: { ...race, replicas: [{ volumeId: 'v', backendName: 'volume-gone-4', targetBackendId: 'frankfurt', location: recordedMeanwhile }], error: 'refused', at: new Date().toISOString() } }));
  afterThisTest(() => db().send(new DeleteCommand({ TableName: tableName('volume'), Key: race })));
  const { deleteVolume } = frankfurt;
  let refusals = 1;
  frankfurt.deleteVolume = (input) => {
    if (input.VolumeId === failedOver && refusals-- > 0) throw awsError('UnauthorizedOperation', 'You are not authorized to perform this operation.');
    return deleteVolume.call(frankfurt, input);
  };
  afterThisTest(() => Object.assign(frankfurt, { deleteVolume }));
  const repairs = async () => {
    const out: Record<string, string> = {};
    for (const f of audit.findings.filter((x) => x.kind.startsWith('replica-'))) {
      const r = await repairFinding(f, { before: new Date(Date.now() + 1000) });
      out[f.resource.split(' ').pop()!] = r ? `${r.outcome}: ${r.did}` : 'not repairable';
    }
    return out;
  };
  const first = await repairs();
  const second = await repairs();

  // Assess
  expect(first[drillCopy]).toMatch(/^repaired/);
  expect(first[failedOver]).toMatch(/^failed: .*UnauthorizedOperation/);
  expect(second[failedOver]).toMatch(/^repaired/);
  expect(first[inUse]).toMatch(/^left: .*in use/);
  expect(first[broken]).toMatch(/^left: .*error, not available/);
  expect(first[namedLive]).toMatch(/^left: .*would take it up/);
  expect(first[recordedMeanwhile]).toMatch(/^left: .*op-after-the-audit records it/);
  expect(first.virginia).toBe('not repairable');
  expect([drillCopy, failedOver].filter((id) => frankfurt.volumes.has(id))).toEqual([]);
  expect([inUse, namedLive, recordedMeanwhile].filter((id) => frankfurt.volumes.has(id))).toEqual([inUse, namedLive, recordedMeanwhile]);
  expect(frankfurt.volumes.has(broken)).toBe(true);
});

test('a drill\'s copies, a failover\'s volumes and what it left on the primary are held: an audit an hour later finds nothing unowned', async () => {
  // Prepare
  const id = (await api('POST', '/volumes', { volume: { size: 1, name: 'drilled', volume_type: TYPE, availability_zone: 'eu-west-1a' } })).body.volume.id as string;
  await eventually(async () => ((await api('GET', `/volumes/${id}`)).body.volume.status === 'available' ? true : undefined), 'volume available');
  for (let i = 0; i < 5; i++) await replicationPass(HOST);
  const later = () => runAudit({ now: new Date(Date.now() + HOUR) });

  // Act + Assess: a drill's copies are its own.
  expect((await api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'frankfurt', drill: true })).status).toBe(202);
  await eventually(async (note) => note((await service()).drill?.status) === 'active' || undefined, 'drill active');
  expect([...frankfurt.volumes.values()].filter((v) => v.Tags?.some((t) => t.Key === 'ferry:drill')).length).toBeGreaterThan(0);
  expect(replicaFindings((await later()).findings)).toEqual([]);
  expect((await api('PUT', '/os-services/failover_host', { host: HOST, drill: 'end' })).status).toBe(202);
  await eventually(async (note) => note((await service()).drill?.status ?? 'ended') === 'ended' || undefined, 'drill ended');

  // Act + Assess: failed over, the volumes in Frankfurt are the backend's and Ireland's are what a failback takes up.
  expect((await api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'frankfurt' })).status).toBe(202);
  await eventually(async () => ((await service()).replication_status === 'failed-over' ? true : undefined), 'service failed-over');
  expect(replicaFindings((await later()).findings)).toEqual([]);
});
