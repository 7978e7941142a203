/**
 * Replication v2.1 through the embedded local stack over HTTP (seed 001): a "smoking hole"
 * failover of ferry@lvm-r after its primary directory is destroyed, the replicated volumes read on
 * the target (bytes as of the last sync), the non-replicated ones error/not-capable with their
 * snapshots error, failback with `default`, an invalid target, freeze/thaw and what frozen refuses,
 * a restart of the stack in the middle of a failover, and a drill. Every scenario ends with a
 * clean audit.
 */
import { randomBytes } from 'node:crypto';
import { open, readFile, rm } from 'node:fs/promises';
import { readBytesAt } from '../support/files.js';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { clearFaults, faultCalls, injectFault } from '../../functions/core/faults.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { volumeFilePath, type LocalVolumeDriver } from '../../functions/drivers/volume/local.js';
import { getOperation, listDrillCopies } from '../../functions/replication/repo.js';
import { getBackendItem } from '../../functions/replication/service-repo.js';
import { getSnapshot } from '../../functions/snapshots/repo.js';
import { queryAll } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { getVolume } from '../../functions/volumes/repo.js';
import { eventually } from '../support/poll.js';
import { listOperations } from '../support/replication-operations.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const HOST = 'ferry@lvm-r';
const ADMIN = 'admin:admin';
const DEMO = 'demo:demo';
const FROZEN = 'Invalid input received: Modification operations are not allowed on frozen storage backends.';

let stack: TestLocalStack;
beforeAll(async () => {
  // Replication happens only when a test syncs, so "the last synced state" is known exactly.
  process.env.FERRY_REPLICATION_INTERVAL_MS = String(3_600_000);
  process.env.FERRY_FAILOVER_BATCH_SIZE = '2';
  // One volume per transaction: every batch of two writes two transactions side by side.
  process.env.FERRY_FAILOVER_TRANSACTION_VOLUMES = '1';
  stack = await useLocalStack();
  // A type that lands on the replicated backend without asking for replication.
  const plain = await api('POST', '/types', { volume_type: { name: 'lvm-r-plain', extra_specs: { volume_backend_name: 'lvm-r' } } }, ADMIN);
  expect(plain.status).toBe(200);
});
afterAll(async () => {
  delete process.env.FERRY_FAILOVER_BATCH_SIZE;
  delete process.env.FERRY_FAILOVER_TRANSACTION_VOLUMES;
  delete process.env.FERRY_REPLICATION_INTERVAL_MS;
  await stack?.stop();
});
afterEach(async () => {
  clearFaults();
  expect((await runAudit()).findings).toEqual([]);
});

async function api(method: string, path: string, body?: unknown, token = DEMO, version = '3.70') {
  const res = await fetch(`${stack.url}/volume/v3${path}`, {
    method,
    headers: { 'X-Auth-Token': token, 'OpenStack-API-Version': `volume ${version}`, Accept: 'application/json', ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: any;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed };
}

async function createVolume(type: string, size = 1): Promise<string> {
  const created = await api('POST', '/volumes', { volume: { size, volume_type: type } });
  expect(created.status).toBe(202);
  const id = created.body.volume.id as string;
  await eventually(async () => {
    const v = (await api('GET', `/volumes/${id}`)).body?.volume;
    if (v?.status === 'error') throw new Error(`volume ${id} went to error: ${(await getVolume(id))?.errorReason}`);
    return v?.status === 'available' ? true : undefined;
  }, `volume ${id} available`);
  return id;
}

async function service(host = HOST): Promise<Record<string, any>> {
  const res = await api('GET', `/os-services?host=${encodeURIComponent(host)}&binary=cinder-volume`, undefined, ADMIN);
  expect(res.status).toBe(200);
  return res.body.services[0];
}

async function serviceBecomes(status: string): Promise<Record<string, any>> {
  return eventually(async () => {
    const s = await service();
    return s.replication_status === status ? s : undefined;
  }, `service ${HOST} to become ${status}`, 60_000);
}

async function lastOperationDone(): Promise<void> {
  await eventually(async () => {
    const [op] = await listOperations(HOST);
    return op && op.status !== 'running' ? true : undefined;
  }, 'the last replication operation to finish', 60_000);
}

async function failover(backendId: string | null, extra: Record<string, unknown> = {}) {
  return api('PUT', '/os-services/failover_host', { host: HOST, backend_id: backendId, ...extra }, ADMIN);
}

/** Writes `bytes` at `offset` of a volume's file on the site the backend runs on. */
async function writeVolume(id: string, bytes: Buffer, offset = 0): Promise<void> {
  const v = (await getVolume(id))!;
  const record = await getBackendItem(HOST);
  const path = volumeFilePath(record.config, v.backendName, record.service.activeBackendId)!;
  const f = await open(path, 'r+');
  try {
    await f.write(bytes, 0, bytes.length, offset);
  } finally {
    await f.close();
  }
}

async function readVolumeOn(id: string, site: string, length: number, offset = 0): Promise<Buffer> {
  const v = (await getVolume(id))!;
  const { config } = await getBackendItem(HOST);
  const path = volumeFilePath(config, v.backendName, site);
  if (!path) throw new Error(`volume ${id} has no file on ${site || 'the primary'}`);
  // The slice only: reading the whole 1 GiB file cost ~10 s a call on a busy machine.
  return readBytesAt(path, offset, length);
}

async function syncNow(): Promise<void> {
  const driver = (await driverForHost(HOST)) as unknown as LocalVolumeDriver;
  const report = await driver.syncNow();
  expect(report.errors).toEqual([]);
}

describe('capabilities and services', () => {
  test('os-services, capabilities and get_pools report the replicated backend', async () => {
    // Act
    const s = await service();
    const caps = await api('GET', `/capabilities/${HOST}`, undefined, ADMIN);
    const pools = await api('GET', '/scheduler-stats/get_pools?detail=true', undefined, ADMIN);
    // Assess
    expect(s).toMatchObject({ binary: 'cinder-volume', host: HOST, status: 'enabled', state: 'up', replication_status: 'enabled', active_backend_id: null, frozen: false });
    expect((await service('ferry@lvm-a')).replication_status).toBe('disabled');
    expect(caps.status).toBe(200);
    expect(caps.body).toMatchObject({ namespace: `OS::Storage::Capabilities::${HOST}`, replication_targets: ['site-b', 'site-c'], volume_backend_name: 'lvm-r' });
    // The view's keys are upstream's (views/capabilities.py); replication_enabled is the pools' stat.
    expect(caps.body).not.toHaveProperty('replication_enabled');
    const pool = pools.body.pools.find((p: { name: string }) => p.name === `${HOST}#pool0`);
    expect(pool.capabilities).toMatchObject({ replication_enabled: true, replication_targets: ['site-b', 'site-c'], volume_backend_name: 'lvm-r' });
    expect((await api('GET', '/capabilities/nohost@x', undefined, ADMIN)).body).toEqual({ itemNotFound: { code: 404, message: "Can't find service: nohost@x" } });
  });
});

describe('smoking hole: fail over after the primary is destroyed, then fail back', () => {
  test('replicated volumes come up on the target with the last synced bytes; the rest are error/not-capable', async () => {
    // Prepare: three replicated volumes with data, one plain volume with a snapshot, all on lvm-r.
    const replicated = [await createVolume('replicated'), await createVolume('replicated'), await createVolume('replicated')];
    const plain = await createVolume('lvm-r-plain');
    expect((await api('GET', `/volumes/${replicated[0]}`)).body.volume.replication_status).toBe('enabled');
    expect((await api('GET', `/volumes/${plain}`)).body.volume.replication_status).toBe('disabled');
    const snap = await api('POST', '/snapshots', { snapshot: { volume_id: plain, name: 'before-failover' } });
    expect(snap.status).toBe(202);
    expect(snap.body.snapshot.status).toBe('available');
    const synced = new Map<string, Buffer>();
    for (const id of replicated) {
      const bytes = randomBytes(64 * 1024);
      synced.set(id, bytes);
      await writeVolume(id, bytes, 4096);
    }
    await syncNow();
    // Written after the last sync: lost with the primary.
    for (const id of replicated) await writeVolume(id, Buffer.alloc(64 * 1024, 0xee), 4096);

    // Act: the primary site is gone; fail over to site-b.
    const { config } = await getBackendItem(HOST);
    await rm(config.root!, { recursive: true, force: true });
    const accepted = await failover('site-b');
    expect(accepted).toEqual({ status: 202, body: undefined });
    const s = await serviceBecomes('failed-over');
    await lastOperationDone();

    // Assess: the service, the driver, every volume and the snapshot.
    expect(s).toMatchObject({ status: 'disabled', disabled_reason: 'failed-over', active_backend_id: 'site-b', frozen: false });
    const driver = (await driverForHost(HOST)) as unknown as LocalVolumeDriver;
    expect(driver.activeBackendId).toBe('site-b');
    for (const id of replicated) {
      const v = (await api('GET', `/volumes/${id}`, undefined, ADMIN)).body.volume;
      expect(v).toMatchObject({ status: 'available', replication_status: 'failed-over' });
      expect(await readVolumeOn(id, 'site-b', 64 * 1024, 4096)).toEqual(synced.get(id));
    }
    const p = (await getVolume(plain))!;
    expect(p).toMatchObject({ status: 'error', replicationStatus: 'not-capable', previousStatus: 'available' });
    expect((await getSnapshot(snap.body.snapshot.id))!.status).toBe('error');

    // Act: fail back (the primary is rebuilt from site-b).
    expect((await failover('default')).status).toBe(202);
    const back = await serviceBecomes('enabled');
    await lastOperationDone();

    // Assess: home again; the non-replicated volume stays as the failover left it (upstream).
    expect(back).toMatchObject({ status: 'enabled', active_backend_id: null, disabled_reason: null });
    expect(((await driverForHost(HOST)) as unknown as LocalVolumeDriver).activeBackendId).toBe('');
    for (const id of replicated) {
      expect((await getVolume(id))!).toMatchObject({ status: 'available', replicationStatus: 'enabled' });
      expect(await readVolumeOn(id, '', 64 * 1024, 4096)).toEqual(synced.get(id));
    }
    expect((await getVolume(plain))!).toMatchObject({ status: 'error', replicationStatus: 'not-capable' });

    // Cleanup, so later scenarios start from replicated volumes only.
    expect((await api('DELETE', `/snapshots/${snap.body.snapshot.id}`)).status).toBe(202);
    await deleteVolume(plain);
    for (const id of replicated) await deleteVolume(id);
  }, 120_000);

  test('an unknown target: 202, then the service back to enabled and no volume changed', async () => {
    const id = await createVolume('replicated');
    const before = (await getVolume(id))!;
    expect((await failover('nowhere')).status).toBe(202);
    await lastOperationDone();
    const [op] = await listOperations(HOST);
    expect(op).toMatchObject({ status: 'failed', requestedBackendId: 'nowhere' });
    expect(op!.error).toMatch(/Invalid Replication Target: nowhere is not a replication target/);
    expect(await service()).toMatchObject({ replication_status: 'enabled', status: 'enabled', active_backend_id: null });
    expect((await getVolume(id))!.version).toBe(before.version);
    await deleteVolume(id);
  }, 60_000);
});

async function deleteVolume(id: string): Promise<void> {
  const res = await api('DELETE', `/volumes/${id}`, undefined, ADMIN);
  expect(res.status).toBe(202);
  await eventually(async () => ((await api('GET', `/volumes/${id}`, undefined, ADMIN)).status === 404 ? true : undefined), `volume ${id} deleted`);
}

describe('freeze and thaw', () => {
  test('frozen refuses volume delete and snapshot create/delete with the upstream 400; attach/detach keep working', async () => {
    // Prepare
    const id = await createVolume('replicated');
    const snap = await api('POST', '/snapshots', { snapshot: { volume_id: id } });
    expect(snap.body.snapshot.status).toBe('available');
    // Act
    expect(await api('PUT', '/os-services/freeze', { host: HOST }, ADMIN)).toEqual({ status: 200, body: undefined });
    // Assess
    expect(await service()).toMatchObject({ frozen: true, status: 'disabled', disabled_reason: 'frozen' });
    const refused = { status: 400, body: { badRequest: { code: 400, message: FROZEN } } };
    expect(await api('DELETE', `/volumes/${id}`)).toEqual(refused);
    expect(await api('POST', '/snapshots', { snapshot: { volume_id: id } })).toEqual(refused);
    expect(await api('DELETE', `/snapshots/${snap.body.snapshot.id}`)).toEqual(refused);
    expect((await getVolume(id))!.status).toBe('available');
    // A second freeze: upstream's conditional-update message.
    expect((await api('PUT', '/os-services/freeze', { host: HOST }, ADMIN)).body.badRequest.message).toBe(
      `Invalid input received: No service could be changed: frozen in ['${HOST}'] must be False to failover.`,
    );
    // Attachments are not blocked.
    const att = await api('POST', '/attachments', { attachment: { volume_uuid: id, instance_uuid: '5a5a5a5a-0000-4000-8000-00000000000a', connector: { host: 'cmp1', initiator: 'iqn.x' } } });
    expect(att.status).toBe(200);
    expect((await api('POST', `/attachments/${att.body.attachment.id}/action`, { 'os-complete': null })).status).toBe(204);
    expect((await api('GET', `/volumes/${id}`)).body.volume.status).toBe('in-use');
    expect((await api('DELETE', `/attachments/${att.body.attachment.id}`)).status).toBe(200);
    expect((await api('GET', `/volumes/${id}`)).body.volume.status).toBe('available');
    // The scheduler skips the frozen backend: a new replicated volume finds no backend.
    const created = await api('POST', '/volumes', { volume: { size: 1, volume_type: 'replicated' } });
    const failed = await eventually(async () => {
      const v = await getVolume(created.body.volume.id);
      return v?.status === 'error' ? v : undefined;
    }, 'the volume on a frozen backend to fail');
    expect(failed.errorReason).toMatch(/is frozen/);

    // Act: thaw.
    expect(await api('PUT', '/os-services/thaw', { host: HOST }, ADMIN)).toEqual({ status: 200, body: undefined });
    // Assess
    expect(await service()).toMatchObject({ frozen: false, status: 'enabled', disabled_reason: null });
    expect((await api('PUT', '/os-services/thaw', { host: HOST }, ADMIN)).body.badRequest.message).toBe(
      `Invalid input received: No service could be changed: frozen in ['${HOST}'] must be True to failover.`,
    );
    expect((await api('DELETE', `/snapshots/${snap.body.snapshot.id}`)).status).toBe(202);
    await deleteVolume(id);
    await deleteVolume(created.body.volume.id);
  }, 60_000);
});

describe('restart in the middle of a failover', () => {
  test('the execution resumes from its recorded plan and finishes; done volumes are skipped', async () => {
    // Prepare: 5 replicated volumes = 3 batches of 2; the driver hangs on one batch.
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await createVolume('replicated'));
    await syncNow();
    const created = new Map<string, number>();
    for (const id of ids) created.set(id, (await getVolume(id))!.version);
    injectFault({ kind: 'volume', backend: HOST, method: 'failoverHost', mode: 'hang', times: 1 });
    // Act
    expect((await failover('site-c')).status).toBe(202);
    await eventually(async () => (faultCalls().some((c) => c.method === 'failoverHost' && c.hanging) ? true : undefined), 'a batch to hang in the driver');
    const [op] = await listOperations(HOST);
    await eventually(async () => ((await getOperation(op!.id))!.volumesDone! >= 2 ? true : undefined), 'the other batches to finish');
    expect((await service()).replication_status).toBe('failing-over');
    // Every volume renamed after Prepare listed it: the hung batch carries versions that are stale
    // by then, so its writes must be refused and its volumes read again (versions below).
    for (const id of ids) expect((await api('PUT', `/volumes/${id}`, { volume: { name: 'renamed-mid-failover' } })).status).toBe(200);
    await stack.restart(() => clearFaults());
    // Assess: the resumed execution finishes the same operation.
    const s = await serviceBecomes('failed-over');
    expect(s.active_backend_id).toBe('site-c');
    // Every volume counted once, by the batches' own counts (the resumed batch's included).
    expect(await getOperation(op!.id)).toMatchObject({ status: 'succeeded', volumeCount: 5, volumesDone: 5 });
    // Each transaction counted in its own slot (two side by side never update one item): batches
    // 0 and 1 have slots 0 and 1, the last batch of one volume slot 0 only.
    const counts = await queryAll({
      TableName: tableName('volume'),
      KeyConditionExpression: 'pk = :p AND begins_with(sk, :s)',
      ExpressionAttributeValues: { ':p': `REPLOP#${op!.id}`, ':s': 'PROGRESS#' },
      ConsistentRead: true,
    });
    expect(counts.map((c) => [c.sk, c.done])).toEqual([
      ['PROGRESS#00000#000', 1],
      ['PROGRESS#00000#001', 1],
      ['PROGRESS#00001#000', 1],
      ['PROGRESS#00001#001', 1],
      ['PROGRESS#00002#000', 1],
    ]);
    for (const id of ids) expect((await getVolume(id))!).toMatchObject({ status: 'available', replicationStatus: 'failed-over', failoverOperationId: op!.id });
    // Each volume written twice, the rename and the failover, whichever came first: a failover
    // write from a stale read that went through would have left the version one short (both
    // writes setting the same next version), one that undid the rename, the old name.
    for (const id of ids) {
      const v = (await getVolume(id))!;
      expect({ name: v.name, version: v.version }).toEqual({ name: 'renamed-mid-failover', version: created.get(id)! + 2 });
    }
    expect(((await driverForHost(HOST)) as unknown as LocalVolumeDriver).activeBackendId).toBe('site-c');

    // And back, for the next scenario.
    expect((await failover('default')).status).toBe(202);
    await serviceBecomes('enabled');
    await lastOperationDone();
    for (const id of ids) await deleteVolume(id);
  }, 120_000);
});

describe('drill (beyond upstream)', () => {
  test('"drill": true brings copies up on the target and leaves the primary alone; "drill": "end" removes them', async () => {
    // Prepare
    const id = await createVolume('replicated');
    const bytes = randomBytes(8192);
    await writeVolume(id, bytes);
    await syncNow();
    const before = (await getVolume(id))!;
    // Act
    expect((await failover('site-b', { drill: true })).status).toBe(202);
    await lastOperationDone();
    // Assess: copies recorded and readable; service and volume unchanged.
    const s = await service();
    expect(s).toMatchObject({ replication_status: 'enabled', status: 'enabled', drill: { status: 'active', backend_id: 'site-b' } });
    const copies = await listDrillCopies(s.drill.operation_id);
    expect(copies).toEqual([expect.objectContaining({ volumeId: id, targetBackendId: 'site-b' })]);
    expect(await readBytesAt(copies[0]!.location, 0, 8192)).toEqual(bytes);
    expect((await getVolume(id))!.version).toBe(before.version);
    expect(await readVolumeOn(id, '', 8192)).toEqual(bytes);
    // A second drill is refused while one exists.
    expect((await failover('site-b', { drill: true })).body.badRequest.message).toMatch(/already has a drill/);

    // Act: end the drill.
    expect((await failover(null, { drill: 'end' })).status).toBe(202);
    await lastOperationDone();
    // Assess
    expect((await service()).drill).toBeUndefined();
    expect(await listDrillCopies(s.drill.operation_id)).toEqual([]);
    await expect(readFile(copies[0]!.location)).rejects.toThrow(/ENOENT/);
    await deleteVolume(id);
  }, 60_000);
});
