/**
 * Cinder quotas (os-quota-sets, os-quota-class-sets) against DynamoDB Local: upstream's bodies and
 * 4xx, enforcement in the create transaction (20 concurrent creates against a quota of 5 make
 * exactly 5), release with the record, volumes from before quotas counted once; and Cinder's user
 * messages for a failed create.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeleteCommand, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { handler } from '../../functions/api/volume.js';
import type { AuthContext } from '../../functions/core/auth.js';
import { db } from '../../functions/core/db.js';
import { OverLimit } from '../../functions/core/errors.js';
import { tableName } from '../../functions/core/tables.js';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import { usageKey } from '../../functions/quotas/engine.js';
import { recordNewVolume } from '../../functions/volumes/create.js';
import { volumeGsi1, volumeKey } from '../../functions/volumes/model.js';
import { getVolumeOrThrow, listVolumes, removeVolumeRecord } from '../../functions/volumes/repo.js';
import { seedVolumeSandbox } from '../../functions/volumes/seed.js';
import * as steps from '../../functions/volumes/steps.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { ADMIN, call, cinder } from '../support/events.js';
import { useLocalDynamo } from '../support/dynamo.js';

let ddb: LocalDynamo;
let dataDir: string;
const V = cinder('3.70');
const auth = (project: string): AuthContext => ({ userId: project, projectId: project, isAdmin: false, roles: ['member'] });
const req = (size = 1) => ({ size, name: null, description: null, volumeType: null, availabilityZone: null, metadata: {}, serverId: null });

beforeAll(async () => {
  // Upstream's defaults (10 volumes, 1000 GB, 50 shares), not the test tiers' unlimited ones (test/support/setup.ts). quota-defaults-cleared
  delete process.env.FERRY_QUOTA_DEFAULTS;
  ddb = await useLocalDynamo();
  dataDir = await mkdtemp(join(tmpdir(), 'ferry-quota-'));
  await seedVolumeSandbox({ dataDir });
});
afterAll(async () => {
  await ddb?.stop();
  clearDriverCache();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

const usage = async (project: string) => (await db().send(new GetCommand({ TableName: tableName('volume'), Key: usageKey(project), ConsistentRead: true }))).Item ?? {};
const setQuota = (project: string, quota_set: Record<string, unknown>) => call(handler, { method: 'PUT', path: `/volume/v3/os-quota-sets/${project}`, headers: V, body: { quota_set } });

describe('os-quota-sets', () => {
  test("defaults: Cinder's resources and values, per-type ones unlimited", async () => {
    const res = await call(handler, { method: 'GET', path: '/volume/v3/os-quota-sets/qa/defaults', headers: V, caller: { userId: 'qa', projectId: 'qa' } });
    expect(res.status).toBe(200);
    expect(res.body.quota_set).toMatchObject({ id: 'qa', volumes: 10, per_volume_gigabytes: -1, snapshots: 10, gigabytes: 1000, backups: 10, backup_gigabytes: 1000, groups: 10, volumes_default: -1, gigabytes_default: -1, snapshots_default: -1 });
  });

  test('a member sees its own, not another project; only an admin updates or deletes (403, nothing written)', async () => {
    const mine = await call(handler, { method: 'GET', path: '/volume/v3/os-quota-sets/qm', headers: V, caller: { userId: 'qm', projectId: 'qm' } });
    expect(mine.status).toBe(200);
    const other = await call(handler, { method: 'GET', path: '/volume/v3/os-quota-sets/qa', headers: V, caller: { userId: 'qm', projectId: 'qm' } });
    expect(other.body).toEqual({ forbidden: { code: 403, message: "Policy doesn't allow volume_extension:quotas:show to be performed." } });
    const put = await call(handler, { method: 'PUT', path: '/volume/v3/os-quota-sets/qm', headers: V, caller: { userId: 'qm', projectId: 'qm' }, body: { quota_set: { volumes: 99 } } });
    expect(put.status).toBe(403);
    const cls = await call(handler, { method: 'GET', path: '/volume/v3/os-quota-class-sets/default', headers: V, caller: { userId: 'qm', projectId: 'qm' } });
    expect(cls.status).toBe(403);
    expect((await call(handler, { method: 'GET', path: '/volume/v3/os-quota-sets/qm', headers: V })).body.quota_set.volumes).toBe(10);
  });

  test("bad input: upstream's 400s, nothing written", async () => {
    expect((await setQuota('qb', { bogus: 1 })).body).toEqual({ badRequest: { code: 400, message: 'Invalid input received: Bad key(s) in quota set: bogus' } });
    expect((await setQuota('qb', { volumes: -2 })).body).toEqual({ badRequest: { code: 400, message: 'volumes must be >= -1' } });
    expect((await setQuota('qb', { volumes: 'x' })).body).toEqual({ badRequest: { code: 400, message: 'volumes must be an integer' } });
    expect((await setQuota('qb', {})).status).toBe(400);
    expect((await call(handler, { method: 'PUT', path: '/volume/v3/os-quota-sets/qb', headers: V, body: { quota: {} } })).status).toBe(400);
    const usageBad = await call(handler, { method: 'GET', path: '/volume/v3/os-quota-sets/qb', query: 'usage=maybe', headers: V });
    expect(usageBad.body).toEqual({ badRequest: { code: 400, message: "Value 'maybe' for 'usage' is not a boolean." } });
    expect((await call(handler, { method: 'GET', path: '/volume/v3/os-quota-sets/qb', headers: V })).body.quota_set).toMatchObject({ volumes: 10, gigabytes: 1000 });
  });

  test('update answers the limits (no id), usage=true shows limit/in_use/reserved, delete falls back to defaults', async () => {
    const up = await setQuota('qu', { volumes: 3, gigabytes_default: 50, id: 'ignored' });
    expect(up.status).toBe(200);
    expect(up.body.quota_set).toMatchObject({ volumes: 3, gigabytes: 1000, gigabytes_default: 50 });
    expect(up.body.quota_set.id).toBeUndefined();
    await recordNewVolume(auth('qu'), req(4));
    const shown = await call(handler, { method: 'GET', path: '/volume/v3/os-quota-sets/qu', query: 'usage=true', headers: V });
    expect(shown.body.quota_set).toMatchObject({ id: 'qu', volumes: { limit: 3, in_use: 1, reserved: 0 }, gigabytes: { limit: 1000, in_use: 4, reserved: 0 }, gigabytes_default: { limit: 50, in_use: 4, reserved: 0 } });
    const below = await setQuota('qu', { gigabytes: 3 });
    expect(below.body).toEqual({ badRequest: { code: 400, message: 'Quota gigabytes limit must be equal or greater than existing resources. Current usage is 4 and the requested limit is 3.' } });
    expect((await call(handler, { method: 'DELETE', path: '/volume/v3/os-quota-sets/qu', headers: V })).status).toBe(200);
    expect((await call(handler, { method: 'GET', path: '/volume/v3/os-quota-sets/qu', headers: V })).body.quota_set).toMatchObject({ volumes: 10, gigabytes_default: -1 });
  });

  test('quota class default: shown and updated by an admin; it becomes every project\'s default', async () => {
    const bad = await call(handler, { method: 'PUT', path: '/volume/v3/os-quota-class-sets/default', headers: V, body: { quota_class_set: { nope: 1 } } });
    expect(bad.body).toEqual({ badRequest: { code: 400, message: 'Invalid input received: Bad key(s) in quota class set: nope' } });
    const up = await call(handler, { method: 'PUT', path: '/volume/v3/os-quota-class-sets/default', headers: V, body: { quota_class_set: { backups: 0 } } });
    expect(up.status).toBe(200);
    expect(up.body.quota_class_set).toMatchObject({ backups: 0, volumes: 10 });
    const shown = await call(handler, { method: 'GET', path: '/volume/v3/os-quota-class-sets/default', headers: V });
    expect(shown.body.quota_class_set).toMatchObject({ id: 'default', backups: 0 });
    expect((await call(handler, { method: 'GET', path: '/volume/v3/os-quota-sets/qc/defaults', headers: V })).body.quota_set.backups).toBe(0);
    await call(handler, { method: 'PUT', path: '/volume/v3/os-quota-class-sets/default', headers: V, body: { quota_class_set: { backups: 10 } } });
  });
});

describe('enforcement', () => {
  test('20 concurrent creates against a quota of 5 make exactly 5; the rest get VolumeLimitExceeded', async () => {
    await setQuota('race', { volumes: 5 });
    const results = await Promise.allSettled(Array.from({ length: 20 }, () => recordNewVolume(auth('race'), req(1))));
    const made = results.filter((r) => r.status === 'fulfilled');
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(made).toHaveLength(5);
    expect(refused).toHaveLength(15);
    for (const r of refused) {
      expect(r.reason).toBeInstanceOf(OverLimit);
      expect((r.reason as Error).message).toBe("Maximum number of volumes allowed (5) exceeded for quota 'volumes'.");
    }
    expect(await listVolumes('race')).toHaveLength(5);
    expect(await usage('race')).toMatchObject({ 'u:volumes': 5, 'u:gigabytes': 5, 'u:volumes_default': 5 });
  });

  test('over quota over the API: 413 with Cinder\'s message, nothing written; gigabytes and per_volume_gigabytes too', async () => {
    const caller = { userId: 'big', projectId: 'big' };
    await setQuota('big', { gigabytes: 10, per_volume_gigabytes: 8 });
    const post = (size: number) => call(handler, { method: 'POST', path: '/volume/v3/volumes', headers: V, caller, body: { volume: { size } } });
    expect((await post(9)).body).toEqual({ overLimit: { code: 413, message: 'Requested volume size 9G is larger than maximum allowed limit 8G.' } });
    await recordNewVolume(auth('big'), req(6));
    const res = await post(5);
    expect(res.status).toBe(413);
    expect(res.body).toEqual({ overLimit: { code: 413, message: 'Requested volume or snapshot exceeds allowed gigabytes quota. Requested 5G, quota is 10G and 6G has been consumed.' } });
    expect(await listVolumes('big')).toHaveLength(1);
    expect(await usage('big')).toMatchObject({ 'u:volumes': 1, 'u:gigabytes': 6 });
  });

  test('removing the record gives its quota back in the same transaction; a failed create keeps it until deleted (as upstream)', async () => {
    await setQuota('rel', { volumes: 1 });
    const v = await recordNewVolume(auth('rel'), req(2));
    await expect(recordNewVolume(auth('rel'), req(1))).rejects.toBeInstanceOf(OverLimit);
    await steps.rollbackCreate(v.id, { Error: 'DriverError', Cause: 'boom' });
    expect((await getVolumeOrThrow(v.id)).status).toBe('error');
    await expect(recordNewVolume(auth('rel'), req(1))).rejects.toBeInstanceOf(OverLimit);
    await removeVolumeRecord(await getVolumeOrThrow(v.id));
    expect(await usage('rel')).toMatchObject({ 'u:volumes': 0, 'u:gigabytes': 0 });
    await recordNewVolume(auth('rel'), req(1));
  });

  test('volumes written before quotas are counted once, however many counters run', async () => {
    // Two volumes as an earlier Ferry wrote them: no `quota`, no usage item.
    for (const n of [1, 2]) {
      const base = await recordNewVolume(auth('legacy-src'), req(n));
      const stored = (await db().send(new GetCommand({ TableName: tableName('volume'), Key: volumeKey(base.id) }))).Item!;
      const { quota: _q, ...old } = stored;
      const id = `00000000-0000-4000-a000-00000000000${n}`;
      await db().send(new PutCommand({ TableName: tableName('volume'), Item: { ...old, ...volumeKey(id), ...volumeGsi1({ projectId: 'legacy', createdAt: old.createdAt as string, id }), id, projectId: 'legacy' } }));
    }
    await db().send(new DeleteCommand({ TableName: tableName('volume'), Key: usageKey('legacy') }));
    await setQuota('legacy', { volumes: 4 });
    const results = await Promise.allSettled(Array.from({ length: 5 }, () => recordNewVolume(auth('legacy'), req(1))));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(2);
    expect(await usage('legacy')).toMatchObject({ 'u:volumes': 4, 'u:gigabytes': 5, counted: true });
    const shown = await call(handler, { method: 'GET', path: '/volume/v3/os-quota-sets/legacy', query: 'usage=true', headers: V });
    expect(shown.body.quota_set.volumes).toEqual({ limit: 4, in_use: 4, reserved: 0 });
  });
});

describe('snapshots', () => {
  test("snapshots take snapshots and gigabytes: over quota 413 with Cinder's messages, nothing written; delete gives them back", async () => {
    const caller = { userId: 'snapq', projectId: 'snapq' };
    await setQuota('snapq', { snapshots: 1, gigabytes: 5 });
    const v = await recordNewVolume(auth('snapq'), req(2));
    await steps.schedule(v.id);
    await steps.createOnBackend(v.id);
    await steps.markAvailable(v.id);
    const snap = () => call(handler, { method: 'POST', path: '/volume/v3/snapshots', headers: V, caller, body: { snapshot: { volume_id: v.id } } });
    const first = await snap();
    expect(first.status).toBe(202);
    expect(await usage('snapq')).toMatchObject({ 'u:snapshots': 1, 'u:gigabytes': 4, 'u:snapshots_default': 1 });
    expect((await snap()).body).toEqual({ overLimit: { code: 413, message: 'Maximum number of snapshots allowed (1) exceeded' } });
    await setQuota('snapq', { snapshots: 5 });
    expect((await snap()).body).toEqual({ overLimit: { code: 413, message: 'Requested volume or snapshot exceeds allowed gigabytes quota. Requested 2G, quota is 5G and 4G has been consumed.' } });
    expect((await getVolumeOrThrow(v.id)).snapshotIds).toEqual([first.body.snapshot.id]);
    expect((await call(handler, { method: 'DELETE', path: `/volume/v3/snapshots/${first.body.snapshot.id}`, headers: V, caller })).status).toBe(202);
    expect(await usage('snapq')).toMatchObject({ 'u:snapshots': 0, 'u:gigabytes': 2 });
  });
});

describe('messages', () => {
  test('a create the scheduler could not place leaves a message: list, show, delete; 404 before 3.3', async () => {
    const v = await recordNewVolume(auth('msg'), req(1));
    await steps.rollbackCreate(v.id, { Error: 'NoValidBackend', Cause: 'No valid backend was found.' });
    await steps.rollbackCreate(v.id, { Error: 'NoValidBackend', Cause: 'No valid backend was found.' });
    const caller = { userId: 'msg', projectId: 'msg' };
    const list = await call(handler, { method: 'GET', path: '/volume/v3/messages', headers: cinder('3.3'), caller });
    expect(list.status).toBe(200);
    expect(list.body.messages).toHaveLength(1);
    const m = list.body.messages[0];
    expect(m).toMatchObject({
      event_id: 'VOLUME_VOLUME_001_003',
      user_message: 'schedule allocate volume:Could not find any available weighted backend.',
      message_level: 'ERROR',
      resource_type: 'VOLUME',
      resource_uuid: v.id,
    });
    expect(Date.parse(m.guaranteed_until + 'Z') - Date.parse(m.created_at + 'Z')).toBe(30 * 86400 * 1000);
    expect((await call(handler, { method: 'GET', path: `/volume/v3/messages/${m.id}`, headers: cinder('3.3'), caller })).body.message.id).toBe(m.id);
    expect((await call(handler, { method: 'GET', path: '/volume/v3/messages', headers: cinder('3.2'), caller })).status).toBe(404);
    const other = await call(handler, { method: 'GET', path: `/volume/v3/messages/${m.id}`, headers: cinder('3.3'), caller: { userId: 'x', projectId: 'x' } });
    expect(other.body).toEqual({ itemNotFound: { code: 404, message: `Message ${m.id} could not be found.` } });
    expect((await call(handler, { method: 'GET', path: '/volume/v3/messages', headers: cinder('3.3'), caller: { userId: 'x', projectId: 'x' } })).body.messages).toEqual([]);
    expect((await call(handler, { method: 'DELETE', path: `/volume/v3/messages/${m.id}`, headers: cinder('3.3'), caller })).status).toBe(204);
    expect((await call(handler, { method: 'GET', path: `/volume/v3/messages/${m.id}`, headers: cinder('3.3'), caller })).status).toBe(404);
  });

  test('a driver failure: CREATE_VOLUME_FROM_BACKEND / DRIVER_FAILED_CREATE', async () => {
    const v = await recordNewVolume(auth('msg2'), req(1));
    await steps.rollbackCreate(v.id, { Error: 'DriverError', Cause: 'disk on fire' });
    const list = await call(handler, { method: 'GET', path: '/volume/v3/messages', headers: cinder('3.3'), caller: ADMIN });
    expect(list.body.messages.find((m: { resource_uuid: string }) => m.resource_uuid === v.id)).toMatchObject({ event_id: 'VOLUME_VOLUME_008_012', user_message: 'create volume from backend storage:Driver failed to create the volume.' });
  });
});
