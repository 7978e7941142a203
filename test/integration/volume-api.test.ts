/**
 * The composed Cinder handler (functions/api/volume.ts) called directly, against DynamoDB Local and
 * the local driver. Create/delete/manage through the state machines are in
 * test/integration/volumes-flow.test.ts (they need the local Step Functions).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { handler } from '../../functions/api/volume.js';
import type { AuthContext } from '../../functions/core/auth.js';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { getVolumeOrThrow, listVolumes, removeVolumeRecord, updateVolume } from '../../functions/volumes/repo.js';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { db } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { usageKey } from '../../functions/quotas/engine.js';
import { recordNewVolume } from '../../functions/volumes/create.js';
import { seedVolumeSandbox } from '../../functions/volumes/seed.js';
import * as steps from '../../functions/volumes/steps.js';
import { ADMIN, DEMO, OTHER, call, cinder } from '../support/events.js';
import { useLocalDynamo } from '../support/dynamo.js';

const DEMO_AUTH: AuthContext = { userId: 'demo', projectId: 'demo', isAdmin: false, roles: ['member'] };
let ddb: LocalDynamo;
let dataDir: string;

beforeAll(async () => {
  ddb = await useLocalDynamo();
  dataDir = await mkdtemp(join(tmpdir(), 'ferry-volapi-'));
  await seedVolumeSandbox({ dataDir });
});
afterAll(async () => {
  await ddb?.stop();
  clearDriverCache();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

/** An available volume of demo's, made by the create steps (no state machine here). */
async function availableVolume(size = 1, name: string | null = null, metadata: Record<string, string> = {}) {
  const v = await recordNewVolume(DEMO_AUTH, { size, name, description: null, volumeType: null, availabilityZone: null, metadata, serverId: null });
  await steps.schedule(v.id);
  await steps.createOnBackend(v.id);
  await steps.markAvailable(v.id);
  return getVolumeOrThrow(v.id);
}

const V = cinder('3.70');

describe('version discovery', () => {
  test('GET /volume/ -> 300 with the v3.0 entry, no token needed', async () => {
    const res = await call(handler, { method: 'GET', path: '/volume/', caller: null });
    expect(res.status).toBe(300);
    expect(res.body.versions).toHaveLength(1);
    expect(res.body.versions[0]).toMatchObject({ id: 'v3.0', status: 'CURRENT', version: '3.70', min_version: '3.0' });
    expect(res.body.versions[0].links).toContainEqual({ rel: 'self', href: 'http://127.0.0.1:8780/volume/v3/' });
  });
  test('GET /volume/v3/ -> 200 {"versions": [...]} (VersionsController.index), /volume/v3 -> 302 there', async () => {
    const res = await call(handler, { method: 'GET', path: '/volume/v3/', caller: null });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(['versions']);
    expect(res.body.versions).toHaveLength(1);
    expect(res.body.versions[0]).toMatchObject({ id: 'v3.0', status: 'CURRENT', version: '3.70', min_version: '3.0' });
    const bare = await call(handler, { method: 'GET', path: '/volume/v3', caller: null });
    expect(bare.status).toBe(302);
    expect(bare.headers.Location).toBe('http://127.0.0.1:8780/volume/v3/');
  });
  test('an unknown path under /volume/v3 answers 404, never a version document', async () => {
    for (const path of ['/volume/v3/foo', '/volume/v3/foo/', '/volume/v3/demo', '/volume/v3/demo/nothing']) {
      const res = await call(handler, { method: 'GET', path, headers: V, caller: DEMO });
      expect({ path, status: res.status, body: res.body }).toEqual({ path, status: 404, body: { itemNotFound: { code: 404, message: 'The resource could not be found.' } } });
    }
  });
});

describe('volume types', () => {
  test('admin creates, shows by name and id, updates, sets and deletes extra specs, deletes', async () => {
    const created = await call(handler, { method: 'POST', path: '/volume/v3/types', headers: V, body: { volume_type: { name: 'fast', description: 'd', extra_specs: { volume_backend_name: 'lvm-a' } } } });
    expect(created.status).toBe(200);
    const id = created.body.volume_type.id;
    expect(created.body.volume_type).toMatchObject({ name: 'fast', is_public: true, description: 'd', extra_specs: { volume_backend_name: 'lvm-a' }, 'os-volume-type-access:is_public': true });
    expect((await call(handler, { method: 'GET', path: '/volume/v3/types/fast', headers: V })).body.volume_type.id).toBe(id);
    const renamed = await call(handler, { method: 'PUT', path: `/volume/v3/types/${id}`, headers: V, body: { volume_type: { name: 'faster' } } });
    expect(renamed.body.volume_type.name).toBe('faster');
    expect((await call(handler, { method: 'GET', path: '/volume/v3/types/fast', headers: V })).status).toBe(404);
    expect((await call(handler, { method: 'POST', path: `/volume/v3/types/${id}/extra_specs`, headers: V, body: { extra_specs: { k1: 'v1' } } })).body).toEqual({ extra_specs: { k1: 'v1' } });
    expect((await call(handler, { method: 'PUT', path: `/volume/v3/types/${id}/extra_specs/k1`, headers: V, body: { k1: 'v2' } })).body).toEqual({ k1: 'v2' });
    expect((await call(handler, { method: 'GET', path: `/volume/v3/types/${id}/extra_specs/k1`, headers: V })).body).toEqual({ k1: 'v2' });
    expect((await call(handler, { method: 'DELETE', path: `/volume/v3/types/${id}/extra_specs/k1`, headers: V })).status).toBe(202);
    const missing = await call(handler, { method: 'GET', path: `/volume/v3/types/${id}/extra_specs/k1`, headers: V });
    expect(missing.body).toEqual({ itemNotFound: { code: 404, message: `Volume Type ${id} has no extra specs with key k1.` } });
    expect((await call(handler, { method: 'DELETE', path: `/volume/v3/types/${id}`, headers: V })).status).toBe(202);
  });
  test('a duplicate name is 409 and writes nothing', async () => {
    const res = await call(handler, { method: 'POST', path: '/volume/v3/types', headers: V, body: { volume_type: { name: 'default' } } });
    expect(res.status).toBe(409);
    expect(res.body.conflictingRequest.message).toBe('Volume Type default already exists.');
  });
  test('non-admins may list and show, not create; they see only user-visible extra specs', async () => {
    expect((await call(handler, { method: 'POST', path: '/volume/v3/types', headers: V, caller: DEMO, body: { volume_type: { name: 'x' } } })).status).toBe(403);
    const list = await call(handler, { method: 'GET', path: '/volume/v3/types', headers: V, caller: DEMO });
    expect(list.body.volume_types.map((t: { name: string }) => t.name)).toEqual(expect.arrayContaining(['default', 'multiattach']));
    const ma = list.body.volume_types.find((t: { name: string }) => t.name === 'multiattach');
    expect(ma.extra_specs).toEqual({ multiattach: '<is> True' });
    expect(ma).not.toHaveProperty('qos_specs_id');
  });
  test('bad bodies: 400 with upstream messages', async () => {
    const noName = await call(handler, { method: 'POST', path: '/volume/v3/types', headers: V, body: { volume_type: {} } });
    expect(noName.body.badRequest.message).toBe("'name' is a required property");
    const noChange = await call(handler, { method: 'PUT', path: '/volume/v3/types/default', headers: V, body: { volume_type: {} } });
    expect(noChange.body.badRequest.message).toBe('Specify volume type name, description, is_public or a combination thereof.');
    const mismatch = await call(handler, { method: 'PUT', path: '/volume/v3/types/default/extra_specs/a', headers: V, body: { b: '1' } });
    expect(mismatch.body.badRequest.message).toBe('Request body and URI mismatch');
  });
  test('a type in use cannot be deleted (400)', async () => {
    await availableVolume();
    const res = await call(handler, { method: 'DELETE', path: '/volume/v3/types/default', headers: V });
    expect(res.status).toBe(400);
  });
});

describe('volumes', () => {
  test('bad create bodies: 400 with the upstream message, nothing written', async () => {
    const before = (await listVolumes()).length;
    const res = await call(handler, { method: 'POST', path: '/volume/v3/volumes', headers: V, caller: DEMO, body: { volume: { size: 1, multiattach: true } } });
    expect(res.status).toBe(400);
    expect(res.body.badRequest.message).toMatch(/^multiattach parameter has been removed/);
    const noType = await call(handler, { method: 'POST', path: '/volume/v3/volumes', headers: V, caller: DEMO, body: { volume: { size: 1, volume_type: 'nope' } } });
    expect(noType.status).toBe(404);
    expect(noType.body.itemNotFound.message).toBe('Volume type with name nope could not be found.');
    const badZone = await call(handler, { method: 'POST', path: '/volume/v3/volumes', headers: V, caller: DEMO, body: { volume: { size: 1, availability_zone: 'mars' } } });
    expect(badZone.body.badRequest.message).toBe("Availability zone 'mars' is invalid.");
    expect((await listVolumes()).length).toBe(before);
  });

  test('show: the owner sees it (with or without project id in the path); another project gets 404', async () => {
    const v = await availableVolume(1, 'mine');
    const own = await call(handler, { method: 'GET', path: `/volume/v3/volumes/${v.id}`, headers: V, caller: DEMO });
    expect(own.status).toBe(200);
    expect(own.body.volume).toMatchObject({ id: v.id, name: 'mine', status: 'available', volume_type: 'default', bootable: 'false', shared_targets: false });
    expect((await call(handler, { method: 'GET', path: `/volume/v3/demo/volumes/${v.id}`, headers: V, caller: DEMO })).status).toBe(200);
    const other = await call(handler, { method: 'GET', path: `/volume/v3/volumes/${v.id}`, headers: V, caller: OTHER });
    expect(other.status).toBe(404);
    expect(other.body.itemNotFound.message).toBe(`Volume ${v.id} could not be found.`);
    expect((await call(handler, { method: 'GET', path: `/volume/v3/volumes/${v.id}`, headers: V, caller: ADMIN })).body.volume['os-vol-host-attr:host']).toBe(v.host);
  });

  test('list: project scoped, filters, limit with a next link, all_tenants for admins', async () => {
    const a = await availableVolume(1, 'listed', { tier: 'gold' });
    await availableVolume(1, 'listed');
    const byName = await call(handler, { method: 'GET', path: '/volume/v3/volumes/detail', query: 'name=listed', headers: V, caller: DEMO });
    expect(byName.body.volumes).toHaveLength(2);
    const byMeta = await call(handler, { method: 'GET', path: '/volume/v3/volumes', query: `metadata=${encodeURIComponent("{'tier': 'gold'}")}`, headers: V, caller: DEMO });
    expect(byMeta.body.volumes).toEqual([{ id: a.id, name: 'listed', links: expect.any(Array) }]);
    const page = await call(handler, { method: 'GET', path: '/volume/v3/volumes', query: 'name=listed&limit=1', headers: V, caller: DEMO });
    expect(page.body.volumes).toHaveLength(1);
    const next = new URL(page.body.volumes_links[0].href);
    expect(next.searchParams.get('marker')).toBe(page.body.volumes[0].id);
    const rest = await call(handler, { method: 'GET', path: next.pathname, query: next.search.slice(1), headers: V, caller: DEMO });
    expect(rest.body.volumes).toHaveLength(1);
    expect(rest.body.volumes[0].id).not.toBe(page.body.volumes[0].id);
    expect((await call(handler, { method: 'GET', path: '/volume/v3/volumes', headers: V, caller: OTHER })).body.volumes).toEqual([]);
    const all = await call(handler, { method: 'GET', path: '/volume/v3/volumes', query: 'all_tenants=1&name=listed', headers: V, caller: ADMIN });
    expect(all.body.volumes).toHaveLength(2);
    const invalid = await call(handler, { method: 'GET', path: '/volume/v3/volumes', query: 'host=x', headers: V, caller: DEMO });
    expect(invalid.body.badRequest.message).toBe('Invalid filters host are provided.');
  });

  test('update name, description, metadata', async () => {
    const v = await availableVolume();
    const res = await call(handler, { method: 'PUT', path: `/volume/v3/volumes/${v.id}`, headers: V, caller: DEMO, body: { volume: { name: 'renamed', metadata: { a: 'b' } } } });
    expect(res.status).toBe(200);
    expect(res.body.volume).toMatchObject({ name: 'renamed', metadata: { a: 'b' } });
    const after = await getVolumeOrThrow(v.id);
    expect(after.version).toBe(v.version + 1);
  });

  test('delete of an in-use volume: 400 with the upstream message, status unchanged', async () => {
    const v = await availableVolume();
    await updateVolume(v.id, { type: 'reset-status', at: new Date().toISOString(), status: 'in-use', attachStatus: 'attached' });
    const res = await call(handler, { method: 'DELETE', path: `/volume/v3/volumes/${v.id}`, headers: V, caller: DEMO });
    expect(res.status).toBe(400);
    expect(res.body.badRequest.message).toMatch(/^Invalid volume: Volume status must be available or error or error_restoring/);
    expect((await getVolumeOrThrow(v.id)).status).toBe('in-use');
  });
});

describe('volume actions', () => {
  test('os-reset_status is admin only; admins set status and attach status', async () => {
    const v = await availableVolume();
    const denied = await call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, caller: DEMO, body: { 'os-reset_status': { status: 'error' } } });
    expect(denied.status).toBe(403);
    const ok = await call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, body: { 'os-reset_status': { status: 'in-use', attach_status: 'attached' } } });
    expect(ok.status).toBe(202);
    expect(await getVolumeOrThrow(v.id)).toMatchObject({ status: 'in-use', attachStatus: 'attached' });
    const bad = await call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, body: { 'os-reset_status': { attach_status: 'bogus' } } });
    expect(bad.body.badRequest.message).toBe('Must specify a valid attach status');
  });

  test('begin and roll detaching', async () => {
    const v = await availableVolume();
    const refused = await call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, caller: DEMO, body: { 'os-begin_detaching': null } });
    expect(refused.status).toBe(400);
    await updateVolume(v.id, { type: 'reset-status', at: new Date().toISOString(), status: 'in-use', attachStatus: 'attached' });
    expect((await call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, caller: DEMO, body: { 'os-begin_detaching': {} } })).status).toBe(202);
    expect((await getVolumeOrThrow(v.id)).status).toBe('detaching');
    expect((await call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, caller: DEMO, body: { 'os-roll_detaching': {} } })).status).toBe(202);
    expect((await getVolumeOrThrow(v.id)).status).toBe('in-use');
  });

  test('os-extend grows the backend object and the volume; a smaller size is refused', async () => {
    const v = await availableVolume(2);
    const small = await call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, caller: DEMO, body: { 'os-extend': { new_size: 2 } } });
    expect(small.body.badRequest.message).toBe('Invalid input received: New size for extend must be greater than current size. (current: 2, extended: 2).');
    const res = await call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, caller: DEMO, body: { 'os-extend': { new_size: 5 } } });
    expect(res.status).toBe(202);
    const after = await getVolumeOrThrow(v.id);
    expect([after.status, after.size, after.capacity?.gb]).toEqual(['available', 5, 5]);
    expect((await (await driverForHost(after.host!)).getVolume(after.backendName))?.sizeGb).toBe(5);
  });

  test("os-extend charges the quota by the increase: over per_volume_gigabytes or gigabytes Cinder's 413, nothing changed; removing the record gives it all back", async () => {
    const v = await availableVolume(2);
    const used = async () => ((await db().send(new GetCommand({ TableName: tableName('volume'), Key: usageKey('demo'), ConsistentRead: true }))).Item ?? {})['u:gigabytes'] as number;
    const quota = (quota_set: Record<string, number>) => call(handler, { method: 'PUT', path: '/volume/v3/os-quota-sets/demo', headers: V, body: { quota_set } });
    const extend = (n: number) => call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, caller: DEMO, body: { 'os-extend': { new_size: n } } });
    const before = await used();
    await quota({ gigabytes: before + 2, per_volume_gigabytes: 6 });
    try {
      expect((await extend(7)).body).toEqual({ overLimit: { code: 413, message: 'Requested volume size 7G is larger than maximum allowed limit 6G.' } });
      expect((await extend(5)).body).toEqual({ overLimit: { code: 413, message: `Requested volume or snapshot exceeds allowed gigabytes quota. Requested 3G, quota is ${before + 2}G and ${before}G has been consumed.` } });
      expect(await getVolumeOrThrow(v.id)).toMatchObject({ status: 'available', size: 2, capacity: { gb: 2 } });
      expect(await used()).toBe(before);
      expect((await extend(4)).status).toBe(202);
      expect(await used()).toBe(before + 2);
      expect((await getVolumeOrThrow(v.id)).quota).toMatchObject({ gigabytes: 4 });
      await removeVolumeRecord(await getVolumeOrThrow(v.id));
      expect(await used()).toBe(before - 2);
    } finally {
      await quota({ gigabytes: -1, per_volume_gigabytes: -1 });
    }
  });

  test('image metadata actions: set merges and answers it all, show, unset one key; an unknown key 404; another project 404; bad bodies 400', async () => {
    const v = await availableVolume(1);
    const act = (body: unknown, caller = DEMO) => call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, caller, body });
    const meta = { image_id: '5137a025-3c5f-43c1-bc64-5f41270040a5', image_name: 'image', ramdisk_id: 'somedisk' };
    expect(await act({ 'os-set_image_metadata': { metadata: meta } })).toMatchObject({ status: 200, body: { metadata: meta } });
    expect((await call(handler, { method: 'GET', path: `/volume/v3/volumes/${v.id}`, headers: V, caller: DEMO })).body.volume.volume_image_metadata).toEqual(meta);
    expect((await act({ 'os-set_image_metadata': { metadata: { kernel_id: 'k' } } })).body.metadata).toEqual({ ...meta, kernel_id: 'k' });
    expect(await act({ 'os-unset_image_metadata': { key: 'ramdisk_id' } })).toMatchObject({ status: 200 });
    expect((await act({ 'os-show_image_metadata': {} })).body).toEqual({ metadata: { image_id: meta.image_id, image_name: 'image', kernel_id: 'k' } });
    expect((await act({ 'os-unset_image_metadata': { key: 'ramdisk_id' } })).body).toEqual({ itemNotFound: { code: 404, message: `Glance metadata for volume ${v.id} cannot be found.` } });
    expect((await act({ 'os-show_image_metadata': {} }, OTHER)).status).toBe(404);
    for (const bad of [{ 'os-set_image_metadata': {} }, { 'os-set_image_metadata': { metadata: { k: 1 } } }, { 'os-unset_image_metadata': {} }]) expect((await act(bad)).status).toBe(400);
    expect((await act({ 'os-unset_image_metadata': { key: 5 } })).body.badRequest.message).toBe("Invalid input for field/attribute key. Value: 5. 5 is not of type 'string'");
    expect((await getVolumeOrThrow(v.id)).imageMetadata).toEqual({ image_id: meta.image_id, image_name: 'image', kernel_id: 'k' });
  });

  test('os-unmanage forgets the volume and keeps the backend object', async () => {
    const v = await availableVolume(1);
    const res = await call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, body: { 'os-unmanage': null } });
    expect(res.status).toBe(202);
    expect((await call(handler, { method: 'GET', path: `/volume/v3/volumes/${v.id}`, headers: V })).status).toBe(404);
    expect(await (await driverForHost(v.host!)).getVolume(v.backendName)).toEqual({ backendName: v.backendName, sizeGb: 1 });
    const listed = await call(handler, { method: 'GET', path: '/volume/v3/manageable_volumes/detail', query: `host=${encodeURIComponent('ferry@' + v.host!.split('@')[1]!.split('#')[0])}`, headers: V });
    expect(listed.body['manageable-volumes']).toContainEqual({ reference: { 'source-name': v.backendName }, size: 1, safe_to_manage: true, reason_not_safe: null, cinder_id: null, extra_info: null });
  });

  test('an unknown action is 400', async () => {
    const v = await availableVolume();
    const res = await call(handler, { method: 'POST', path: `/volume/v3/volumes/${v.id}/action`, headers: V, caller: DEMO, body: { 'os-frobnicate': {} } });
    expect(res.body).toEqual({ badRequest: { code: 400, message: 'There is no such action: os-frobnicate' } });
  });
});

describe('manageable volumes', () => {
  test('needs host, 3.8, and admin; known objects are not safe to manage', async () => {
    const v = await availableVolume(1);
    const backend = v.host!.split('#')[0]!;
    expect((await call(handler, { method: 'GET', path: '/volume/v3/manageable_volumes', headers: cinder('3.7') })).status).toBe(404);
    expect((await call(handler, { method: 'GET', path: '/volume/v3/manageable_volumes', headers: V })).body.badRequest.message).toBe('One and only one of cluster and host must be set.');
    expect((await call(handler, { method: 'GET', path: '/volume/v3/manageable_volumes', query: `host=${backend}`, headers: V, caller: DEMO })).status).toBe(403);
    const res = await call(handler, { method: 'GET', path: '/volume/v3/manageable_volumes/detail', query: `host=${backend}`, headers: V });
    expect(res.body['manageable-volumes']).toContainEqual({ reference: { 'source-name': v.backendName }, size: 1, safe_to_manage: false, reason_not_safe: 'already managed', cinder_id: v.id, extra_info: null });
  });
  test('manage refuses a missing object and writes nothing', async () => {
    const before = (await listVolumes()).length;
    const res = await call(handler, { method: 'POST', path: '/volume/v3/manageable_volumes', headers: V, body: { volume: { host: 'ferry@lvm-a#pool0', ref: { 'source-name': 'no-such-object' } } } });
    expect(res.status).toBe(400);
    expect(res.body.badRequest.message).toMatch(/^Manage existing volume failed due to invalid backend reference/);
    expect((await listVolumes()).length).toBe(before);
  });
});
