/**
 * POST /volumes with snapshot_id or source_volid (C/volume/flows/api/create_volume.py): the new
 * volume's bytes are the source's, on the source's backend; refusals change nothing; a source is
 * not deleted while a volume is being created from it. The embedded stack with the sandbox's two
 * local backends (lvm-a, lvm-b: the default type lands on either, so pinning is seen) and an
 * aws-ebs backend whose EC2 is mocked (test/support/fake-ec2.ts).
 */
import { CreateSnapshotCommand, CreateVolumeCommand, EC2Client } from '@aws-sdk/client-ec2';
import { mkdtemp, open, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mockClient } from 'aws-sdk-client-mock';
import { stringify } from 'yaml';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { clearFault, clearFaults, faultCalls, injectFault, clearFaultCalls } from '../../functions/core/faults.js';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import { GIB } from '../../functions/drivers/volume/local.js';
import type { Inventory } from '../../functions/inventory/schema.js';
import { getSnapshot } from '../../functions/snapshots/repo.js';
import { backendOf } from '../../functions/volumes/backends.js';
import { getVolume } from '../../functions/volumes/repo.js';
import { SANDBOX_INVENTORY, readInventoryFile } from '../../infra/inventory-file.js';
import { SANDBOX_IMAGES, deterministicBytes } from '../../functions/servers/images.js';
import { cinderCli, parsePropertyTable } from '../support/cli.js';
import { FakeEc2, wireFakeEc2 } from '../support/fake-ec2.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const EBS = 'ferry@ebs-a';
const ec2 = mockClient(EC2Client);
const fake = new FakeEc2(EBS);
let stack: TestLocalStack;

async function api(method: string, path: string, body?: unknown, token = 'admin:admin', project = 'admin'): Promise<{ status: number; body: any }> {
  const res = await fetch(`${stack.url}/volume/v3/${project}${path}`, {
    method,
    headers: { 'X-Auth-Token': token, 'Content-Type': 'application/json', 'OpenStack-API-Version': 'volume 3.70' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

const statusOf = async (id: string) => (await getVolume(id))?.status;
const becomes = (id: string, wanted: string[]) =>
  eventually(async (note) => {
    const s = note(await statusOf(id));
    return s && wanted.includes(s) ? s : undefined;
  }, `volume ${id} ${wanted.join('|')}`);

async function newVolume(body: Record<string, unknown>): Promise<any> {
  const created = await api('POST', '/volumes', { volume: body });
  expect(created.status, JSON.stringify(created.body)).toBe(202);
  expect(await becomes(created.body.volume.id, ['available', 'error'])).toBe('available');
  return created.body.volume;
}

async function snapshotOf(volumeId: string): Promise<string> {
  const res = await api('POST', '/snapshots', { snapshot: { volume_id: volumeId, name: 'snap' } });
  expect(res.status).toBe(202);
  await eventually(async () => ((await getSnapshot(res.body.snapshot.id))?.status === 'available' ? true : undefined), 'snapshot available');
  return res.body.snapshot.id;
}

/** Bytes written at these offsets (GiB 1 volumes): start, middle, the last bytes. */
const OFFSETS = [0, 512 * 1024 * 1024 + 17, GIB - 8];
async function fileOf(volumeId: string): Promise<string> {
  return (await getVolume(volumeId))!.providerLocation!;
}
async function writeMarks(volumeId: string, mark: string): Promise<void> {
  const fh = await open(await fileOf(volumeId), 'r+');
  try {
    for (const off of OFFSETS) await fh.write(Buffer.from(mark.padEnd(8, '.').slice(0, 8)), 0, 8, off);
  } finally {
    await fh.close();
  }
}
async function readMarks(volumeId: string): Promise<{ size: number; marks: string[] }> {
  const fh = await open(await fileOf(volumeId), 'r');
  try {
    const marks: string[] = [];
    for (const off of OFFSETS) {
      const buf = Buffer.alloc(8);
      await fh.read(buf, 0, 8, off);
      marks.push(buf.toString('latin1'));
    }
    return { size: (await fh.stat()).size, marks };
  } finally {
    await fh.close();
  }
}

/** What a refused request must leave as it was: the volumes, the source's record. */
async function world(sourceId: string, kind: 'snapshot' | 'volume') {
  const volumes = (await api('GET', '/volumes?all_tenants=1')).body.volumes.map((v: { id: string }) => v.id).sort();
  const source = kind === 'snapshot' ? await getSnapshot(sourceId) : await getVolume(sourceId);
  return { volumes, source };
}

beforeAll(async () => {
  wireFakeEc2(ec2, fake);
  const inventory = structuredClone(readInventoryFile(SANDBOX_INVENTORY)) as Inventory;
  inventory.volumeBackends.push({ host: EBS, driver: 'aws-ebs', availabilityZone: 'eu-west-1a', ebsVolumeType: 'gp3', volumeBackendName: 'ebs-a', pools: [{ name: 'gp', totalCapacityGb: 100 }] });
  inventory.volumeTypes.push({ name: 'ebs', extraSpecs: { volume_backend_name: 'ebs-a' } });
  // Puts a source on lvm-b, which the default type's weigher never picks first (ties go to lvm-a).
  inventory.volumeTypes.push({ name: 'on-b', extraSpecs: { volume_backend_name: 'lvm-b' } });
  const file = join(await mkdtemp(join(tmpdir(), 'ferry-from-source-')), 'inventory.yaml');
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
  // Every scenario ends with DynamoDB and the backends agreeing.
  expect((await runAudit()).findings).toEqual([]);
});

describe('local backends', () => {
  let source: any;
  let snapshotId: string;
  beforeAll(async () => {
    source = await newVolume({ size: 1, name: 'source', metadata: { k: 'v' } });
    await writeMarks(source.id, 'SNAPPED');
    snapshotId = await snapshotOf(source.id);
    // Written after the snapshot: a volume from the snapshot must not see it.
    await writeMarks(source.id, 'LATER');
  });

  test('from a snapshot: the snapshot bytes, its size, type and zone, on its backend; snapshot_id shown', async () => {
    const v = await newVolume({ snapshot_id: snapshotId, name: 'from-snap' });
    const shown = (await api('GET', `/volumes/${v.id}`)).body.volume;
    expect(shown).toMatchObject({ size: 1, snapshot_id: snapshotId, source_volid: null, volume_type: source.volume_type, availability_zone: source.availability_zone, status: 'available' });
    expect(backendOf(shown['os-vol-host-attr:host'])).toBe(backendOf((await getVolume(source.id))!.host!));
    expect(await readMarks(v.id)).toEqual({ size: GIB, marks: ['SNAPPED.', 'SNAPPED.', 'SNAPPED.'] });
    // The hold is given back: the snapshot may be deleted later.
    expect((await getSnapshot(snapshotId))!.dependentCreates).toBe(0);
  });

  test('a larger size: the snapshot bytes, then zeros to the new size', async () => {
    const v = await newVolume({ snapshot_id: snapshotId, size: 2 });
    const read = await readMarks(v.id);
    expect(read).toEqual({ size: 2 * GIB, marks: ['SNAPPED.', 'SNAPPED.', 'SNAPPED.'] });
    expect((await api('GET', `/volumes/${v.id}`)).body.volume.size).toBe(2);
  });

  test('from a source volume: its bytes now, on its backend; source_volid shown', async () => {
    const v = await newVolume({ source_volid: source.id });
    const shown = (await api('GET', `/volumes/${v.id}`)).body.volume;
    expect(shown).toMatchObject({ size: 1, source_volid: source.id, snapshot_id: null, volume_type: source.volume_type });
    expect(backendOf(shown['os-vol-host-attr:host'])).toBe(backendOf((await getVolume(source.id))!.host!));
    expect(await readMarks(v.id)).toEqual({ size: GIB, marks: ['LATER...', 'LATER...', 'LATER...'] });
    expect((await getVolume(source.id))!.dependentCreates).toBe(0);
  });

  test("pinned to the source's backend even when the type asked for would schedule elsewhere", async () => {
    const onB = await newVolume({ size: 1, volume_type: 'on-b' });
    expect(backendOf((await getVolume(onB.id))!.host!)).toBe('ferry@lvm-b');
    const blank = await newVolume({ size: 1, volume_type: 'default' });
    // lvm-b has the least free: the weigher never picks it for a blank volume now.
    expect(backendOf((await getVolume(blank.id))!.host!)).not.toBe('ferry@lvm-b');
    const snap = await snapshotOf(onB.id);
    const fromSnap = await newVolume({ snapshot_id: snap, volume_type: 'default' });
    const clone = await newVolume({ source_volid: onB.id, volume_type: 'default' });
    expect([backendOf((await getVolume(fromSnap.id))!.host!), backendOf((await getVolume(clone.id))!.host!)]).toEqual(['ferry@lvm-b', 'ferry@lvm-b']);
    expect([fromSnap.volume_type, clone.volume_type]).toEqual(['default', 'default']);
  });

  test.each([
    ['a size smaller than the snapshot', () => ({ snapshot_id: snapshotId, size: 1 }), 400, "Invalid input received: Volume size '1'GB cannot be smaller than the snapshot size 2GB. They must be >= original snapshot size."],
    ['a size smaller than the source volume', () => ({ source_volid: 'BIG', size: 1 }), 400, "Invalid input received: Volume size '1'GB cannot be smaller than original volume size  2GB. They must be >= original volume size."],
    ['an unknown snapshot', () => ({ snapshot_id: '00000000-0000-4000-8000-000000000001' }), 404, 'Snapshot 00000000-0000-4000-8000-000000000001 could not be found.'],
    ['an unknown source volume', () => ({ source_volid: '00000000-0000-4000-8000-000000000002' }), 404, 'Volume 00000000-0000-4000-8000-000000000002 could not be found.'],
    ['a snapshot_id that is not a uuid', () => ({ snapshot_id: 'nope', size: 1 }), 400, "Invalid input for field/attribute snapshot_id. Value: nope. 'nope' is not a 'uuid'"],
    ['another zone than the source', () => ({ snapshot_id: snapshotId, availability_zone: 'eu-west-1a', size: 2 }), 400, 'Invalid input received: Volume must be in the same availability zone as the snapshot'],
  ])('refused, changing nothing: %s', async (_what, body, status, message) => {
    const big = await newVolume({ size: 2 });
    const bigSnap = await snapshotOf(big.id);
    const b = JSON.parse(JSON.stringify(body()).replaceAll('BIG', big.id).replaceAll(snapshotId, bigSnap));
    const before = await world(bigSnap, 'snapshot');
    const bigBefore = await getVolume(big.id);
    const res = await api('POST', '/volumes', { volume: b });
    expect(res.status).toBe(status);
    expect(JSON.stringify(res.body)).toContain(JSON.stringify(message).slice(1, -1));
    expect(await world(bigSnap, 'snapshot')).toEqual(before);
    expect(await getVolume(big.id)).toEqual(bigBefore);
  });

  test('refused, changing nothing: a snapshot not available, a source volume in error', async () => {
    const src = await newVolume({ size: 1 });
    const snap = await snapshotOf(src.id);
    expect((await api('POST', `/snapshots/${snap}/action`, { 'os-reset_status': { status: 'error' } })).status).toBe(202);
    const before = await world(snap, 'snapshot');
    const refused = await api('POST', '/volumes', { volume: { snapshot_id: snap } });
    expect([refused.status, refused.body.badRequest?.message]).toEqual([400, "Invalid snapshot: Originating snapshot status must be one of 'available' values"]);
    expect(await world(snap, 'snapshot')).toEqual(before);

    expect((await api('POST', `/volumes/${src.id}/action`, { 'os-reset_status': { status: 'error' } })).status).toBe(202);
    const volBefore = await world(src.id, 'volume');
    const refused2 = await api('POST', '/volumes', { volume: { source_volid: src.id } });
    expect([refused2.status, refused2.body.badRequest?.message]).toEqual([400, "Invalid volume: Originating source volume status must be one of 'available, in-use' values"]);
    expect(await world(src.id, 'volume')).toEqual(volBefore);
    // Put back so the audit and the cleanup see ordinary records.
    await api('POST', `/snapshots/${snap}/action`, { 'os-reset_status': { status: 'available' } });
    await api('POST', `/volumes/${src.id}/action`, { 'os-reset_status': { status: 'available' } });
  });

  test("another project's snapshot and volume do not exist for a non-admin", async () => {
    const before = await world(snapshotId, 'snapshot');
    const a = await api('POST', '/volumes', { volume: { snapshot_id: snapshotId } }, 'demo:demo', 'demo');
    const b = await api('POST', '/volumes', { volume: { source_volid: source.id } }, 'demo:demo', 'demo');
    expect([a.status, b.status]).toEqual([404, 404]);
    expect(await world(snapshotId, 'snapshot')).toEqual(before);
  });

  test('a snapshot, and a volume, being copied from cannot be deleted (not even forced); once the copy is made they can', async () => {
    const src = await newVolume({ size: 1 });
    const snap = await snapshotOf(src.id);
    const hang = injectFault({ kind: 'volume', method: 'createVolumeFromSnapshot', mode: 'hang' });
    clearFaultCalls();
    const created = await api('POST', '/volumes', { volume: { snapshot_id: snap } });
    expect(created.status).toBe(202);
    await eventually(async () => (faultCalls().some((c) => c.method === 'createVolumeFromSnapshot' && c.hanging) ? true : undefined), 'copy under way');
    const del = await api('DELETE', `/snapshots/${snap}`);
    expect([del.status, del.body.badRequest?.message]).toEqual([400, `Invalid snapshot: Snapshot ${snap} has dependent volumes being created from it.`]);
    const forced = await api('POST', `/snapshots/${snap}/action`, { 'os-force_delete': {} });
    expect(forced.status).toBe(400);
    expect((await getSnapshot(snap))!.status).toBe('available');
    clearFault(hang);
    expect(await becomes(created.body.volume.id, ['available', 'error'])).toBe('available');
    expect((await api('DELETE', `/snapshots/${snap}`)).status).toBe(202);
    await eventually(async () => ((await getSnapshot(snap)) === undefined ? true : undefined), 'snapshot deleted');

    const hang2 = injectFault({ kind: 'volume', method: 'cloneVolume', mode: 'hang' });
    clearFaultCalls();
    const clone = await api('POST', '/volumes', { volume: { source_volid: src.id } });
    await eventually(async () => (faultCalls().some((c) => c.method === 'cloneVolume' && c.hanging) ? true : undefined), 'clone under way');
    const delVol = await api('DELETE', `/volumes/${src.id}`);
    expect([delVol.status, delVol.body.badRequest?.message]).toEqual([400, `Invalid volume: Volume ${src.id} has dependent volumes being created from it.`]);
    clearFault(hang2);
    expect(await becomes(clone.body.volume.id, ['available', 'error'])).toBe('available');
    expect((await api('DELETE', `/volumes/${src.id}`)).status).toBe(202);
    await eventually(async () => ((await getVolume(src.id)) === undefined ? true : undefined), 'source deleted');
  });

  test('the real cinder CLI: create --snapshot-id and --source-volid, shown with snapshot_id and source_volid', async () => {
    const cinder = async (...args: string[]) => {
      const r = await cinderCli(`${stack.url}/volume/v3`, 'admin', 'admin', args);
      if (r.code !== 0) throw new Error(`cinder ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
      return parsePropertyTable(r.stdout);
    };
    const fromSnap = await cinder('create', '--snapshot-id', snapshotId, '--name', 'cli-from-snap');
    expect(fromSnap.snapshot_id).toBe(snapshotId);
    const clone = await cinder('create', '--source-volid', source.id, '--name', 'cli-clone', '2');
    expect(clone.source_volid).toBe(source.id);
    expect(await becomes(fromSnap.id, ['available', 'error'])).toBe('available');
    expect(await becomes(clone.id, ['available', 'error'])).toBe('available');
    expect(await cinder('show', clone.id)).toMatchObject({ size: '2', source_volid: source.id, status: 'available' });
    expect(await readMarks(fromSnap.id)).toEqual({ size: GIB, marks: ['SNAPPED.', 'SNAPPED.', 'SNAPPED.'] });
    const fromImage = await cinder('create', '--image', SANDBOX_IMAGES.cirrosTiny.id, '1');
    expect(await becomes(fromImage.id, ['available', 'error'])).toBe('available');
    expect(await cinder('show', fromImage.id)).toMatchObject({ bootable: 'true' });
  });

  test('a copy the backend fails: the new volume is error, the hold is given back, nothing left on the backend', async () => {
    injectFault({ kind: 'volume', method: 'createVolumeFromSnapshot', mode: 'fail', message: 'copy failed' });
    const created = await api('POST', '/volumes', { volume: { snapshot_id: snapshotId } });
    expect(created.status).toBe(202);
    expect(await becomes(created.body.volume.id, ['error', 'available'])).toBe('error');
    expect((await getSnapshot(snapshotId))!.dependentCreates).toBe(0);
    expect((await getVolume(created.body.volume.id))!.source?.held).toBe(false);
    expect((await api('DELETE', `/volumes/${created.body.volume.id}`)).status).toBe(202);
  });
});

describe('from an image (imageRef)', () => {
  const image = SANDBOX_IMAGES.cirrosTiny;

  test("the image's bytes, then zeros; bootable, volume_image_metadata shown; on a backend that can write images", async () => {
    const v = await newVolume({ imageRef: image.id, size: 1, name: 'from-image' });
    // The create's answer has none of the extensions' attributes (Tempest's create schema refuses them).
    expect(v).not.toHaveProperty('volume_image_metadata');
    const shown = (await api('GET', `/volumes/${v.id}`)).body.volume;
    expect(shown).toMatchObject({ bootable: 'true', size: 1, status: 'available', volume_image_metadata: { image_id: image.id, image_name: image.name, size: String(image.sizeBytes) } });
    const fh = await open(await fileOf(v.id), 'r');
    try {
      const head = Buffer.alloc(image.sizeBytes + 4096);
      await fh.read(head, 0, head.length, 0);
      expect(Buffer.compare(head.subarray(0, image.sizeBytes), Buffer.from(deterministicBytes(image.name, image.sizeBytes)))).toBe(0);
      expect(head.subarray(image.sizeBytes).every((b) => b === 0)).toBe(true);
      expect((await fh.stat()).size).toBe(GIB);
    } finally {
      await fh.close();
    }
    // image_id is the other name of imageRef.
    const other = await newVolume({ image_id: image.id, size: 1 });
    expect((await api('GET', `/volumes/${other.id}`)).body.volume.volume_image_metadata.image_id).toBe(image.id);

    // A clone of it and a volume from its snapshot are bootable with its image metadata
    // (_handle_bootable_volume_glance_meta; Tempest test_create_from_bootable_volume); a plain source's are not.
    const clone = await newVolume({ source_volid: v.id });
    const fromSnap = await newVolume({ snapshot_id: await snapshotOf(v.id) });
    for (const id of [clone.id, fromSnap.id]) {
      expect((await api('GET', `/volumes/${id}`)).body.volume).toMatchObject({ bootable: 'true', volume_image_metadata: shown.volume_image_metadata });
    }
    const plainClone = await newVolume({ source_volid: (await newVolume({ size: 1 })).id });
    expect((await api('GET', `/volumes/${plainClone.id}`)).body.volume.bootable).toBe('false');
  });

  test.each([
    ['no size', () => ({ imageRef: SANDBOX_IMAGES.cirrosTiny.id }), 400, "Invalid input received: Volume size 'None' must be an integer and greater than 0"],
    ['an unknown image', () => ({ imageRef: '00000000-0000-4000-8000-000000000003', size: 1 }), 404, 'Image 00000000-0000-4000-8000-000000000003 could not be found.'],
    ['an image on aws-ebs', () => ({ imageRef: SANDBOX_IMAGES.cirrosTiny.id, size: 1, volume_type: 'ebs', availability_zone: 'eu-west-1a' }), 400, `Invalid input received: Creating a volume from an image is not supported on backend(s) ${EBS} (aws-ebs).`],
    ['an image and a snapshot', () => ({ imageRef: SANDBOX_IMAGES.cirrosTiny.id, snapshot_id: SANDBOX_IMAGES.cirrosTiny.id, size: 1 }), 400, 'Invalid input received: Only one of snapshot_id, source_volid and imageRef may be given.'],
  ])('refused, changing nothing: %s', async (_what, body, status, message) => {
    const before = (await api('GET', '/volumes?all_tenants=1')).body.volumes.length;
    const res = await api('POST', '/volumes', { volume: body() });
    expect([res.status, JSON.stringify(res.body).includes(JSON.stringify(message).slice(1, -1))]).toEqual([status, true]);
    expect((await api('GET', '/volumes?all_tenants=1')).body.volumes.length).toBe(before);
  });

  test('an image that is not active is refused', async () => {
    const queued = await fetch(`${stack.url}/image/v2/images`, {
      method: 'POST',
      headers: { 'X-Auth-Token': 'admin:admin', 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'queued', disk_format: 'raw', container_format: 'bare' }),
    }).then((r) => r.json() as Promise<{ id: string }>);
    const res = await api('POST', '/volumes', { volume: { imageRef: queued.id, size: 1 } });
    expect([res.status, res.body.badRequest?.message]).toEqual([400, `Invalid input received: Image ${queued.id} is not active.`]);
  });
});

describe('aws-ebs (EC2 mocked)', () => {
  test('from a snapshot: CreateVolume with its SnapshotId; a clone: a snapshot named after the new volume, a volume from it, the snapshot gone', async () => {
    const src = await newVolume({ size: 2, volume_type: 'ebs', availability_zone: 'eu-west-1a' });
    const snap = await snapshotOf(src.id);
    const srcEbs = (await getVolume(src.id))!.providerLocation!;
    const ebsSnap = [...fake.snapshots.values()].find((s) => s.VolumeId === srcEbs)!;

    const fromSnap = await newVolume({ snapshot_id: snap, size: 3 });
    const made = fake.volumes.get((await getVolume(fromSnap.id))!.providerLocation!)!;
    expect([made.SnapshotId, made.Size, (await getVolume(fromSnap.id))!.host]).toEqual([ebsSnap.SnapshotId, 3, `${EBS}#gp`]);

    const before = new Set(fake.snapshots.keys());
    const clone = await newVolume({ source_volid: src.id });
    const cloned = fake.volumes.get((await getVolume(clone.id))!.providerLocation!)!;
    const through = [...fake.snapshots.values()].find((s) => !before.has(s.SnapshotId!));
    // The snapshot it went through carried the clone's name, and is deleted (the fake keeps no deleted snapshots).
    expect(cloned.SnapshotId).toMatch(/^snap-/);
    expect(before.has(cloned.SnapshotId!)).toBe(false);
    expect(through).toBeUndefined();
    expect(cloned.Size).toBe(2);
  });

  test('a clone whose volume the backend refuses: error, and the snapshot it went through is removed', async () => {
    const src = await newVolume({ size: 1, volume_type: 'ebs', availability_zone: 'eu-west-1a' });
    const srcEbs = (await getVolume(src.id))!.providerLocation;
    const before = new Set(fake.snapshots.keys());
    // EC2 refuses every CreateVolume (after the clone's snapshot is made).
    ec2.on(CreateVolumeCommand).rejects(Object.assign(new Error('no volume for you'), { name: 'InsufficientVolumeCapacity' }));
    try {
      const created = await api('POST', '/volumes', { volume: { source_volid: src.id } });
      expect(await becomes(created.body.volume.id, ['error', 'available'])).toBe('error');
    } finally {
      wireFakeEc2(ec2, fake);
    }
    // It went through a snapshot of the source, which is gone again.
    expect(ec2.commandCalls(CreateSnapshotCommand).filter((c) => c.args[0].input.VolumeId === (srcEbs as string)).length).toBeGreaterThan(0);
    expect([...fake.snapshots.keys()].filter((k) => !before.has(k))).toEqual([]);
    expect((await getVolume(src.id))!.dependentCreates).toBe(0);
  });
});
