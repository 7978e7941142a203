/**
 * The Cinder snapshot API gaps Tempest found (issue 15), on the local stack over HTTP and the
 * upstream `cinder` CLI: the metadata API (C/api/v3/snapshot_metadata.py), `PUT /snapshots/{id}`,
 * os-update_snapshot_status (C/api/contrib/snapshot_actions.py) and os-unmanage
 * (C/api/contrib/snapshot_unmanage.py). Every refusal is checked to change nothing: the snapshot
 * reads the same (updated_at included) after it; the audit finds DynamoDB and the backends agreeing
 * after each scenario (an unmanaged snapshot's object is the operator's, not an orphan).
 */
import { afterEach, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { isSnapshotDriver } from '../../functions/drivers/volume/registry.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { cinderCli } from '../support/cli.js';
import { eventually } from '../support/poll.js';
import { ADMIN, DEMO, OTHER, useAuditedStack, volumeApi } from '../support/volume-api.js';

const stack = useAuditedStack();
const api = volumeApi(stack, '3.70');

const cinder = (token: string, ...args: string[]) => {
  const [user, project] = token.split(':') as [string, string];
  return cinderCli(`${stack.current().url}/volume/v3`, user, project, args);
};

async function availableSnapshot(name: string): Promise<Record<string, any>> {
  const created = await api('POST', '/volumes', { volume: { size: 1, name } });
  expect(created.status).toBe(202);
  const volumeId = created.body.volume.id;
  await eventually(async (note) => note((await api('GET', `/volumes/${volumeId}`)).body.volume.status) === 'available' || undefined, `volume ${name} available`);
  const snap = await api('POST', '/snapshots', { snapshot: { volume_id: volumeId, name: `${name}-snap`, metadata: { a: '1' } } });
  expect(snap.status).toBe(202);
  return eventually(async (note) => {
    const s = (await api('GET', `/snapshots/${snap.body.snapshot.id}`, undefined, ADMIN)).body.snapshot;
    return note(s.status) === 'available' ? s : undefined;
  }, `snapshot of ${name} available`);
}

const read = async (id: string) => (await api('GET', `/snapshots/${id}`, undefined, ADMIN)).body;

/** Runs a refused request and checks the snapshot reads the same afterwards. */
async function refused(id: string, call: () => Promise<{ status: number; body: any }>, status: number, message?: string) {
  const before = await read(id);
  const res = await call();
  expect(res.status).toBe(status);
  if (message !== undefined) expect(Object.values(res.body ?? {})[0]).toMatchObject({ message });
  expect(await read(id)).toEqual(before);
  return res;
}

describe('snapshot metadata (C/api/v3/snapshot_metadata.py)', () => {
  test('POST merges, PUT replaces, one key shown, set and deleted; refusals change nothing', async () => {
    const s = await availableSnapshot('smeta');
    const id = s.id;
    expect((await api('GET', `/snapshots/${id}/metadata`)).body).toEqual({ metadata: { a: '1' } });

    const merged = await api('POST', `/snapshots/${id}/metadata`, { metadata: { b: '2' } });
    expect(merged).toEqual({ status: 200, body: { metadata: { a: '1', b: '2' } } });
    const replaced = await api('PUT', `/snapshots/${id}/metadata`, { metadata: { c: '3' } });
    expect(replaced).toEqual({ status: 200, body: { metadata: { c: '3' } } });
    expect(await api('PUT', `/snapshots/${id}/metadata/d`, { meta: { d: '4' } })).toEqual({ status: 200, body: { meta: { d: '4' } } });
    expect(await api('GET', `/snapshots/${id}/metadata/d`)).toEqual({ status: 200, body: { meta: { d: '4' } } });
    expect((await api('DELETE', `/snapshots/${id}/metadata/c`)).status).toBe(200);
    expect((await read(id)).snapshot.metadata).toEqual({ d: '4' });

    // The `cinder snapshot-metadata` CLI sends the POST (set) and the DELETE per key (unset).
    expect((await cinder(DEMO, 'snapshot-metadata', id, 'set', 'tier=gold')).code).toBe(0);
    expect((await read(id)).snapshot.metadata).toEqual({ d: '4', tier: 'gold' });
    expect((await cinder(DEMO, 'snapshot-metadata', id, 'unset', 'tier')).code).toBe(0);
    expect((await read(id)).snapshot.metadata).toEqual({ d: '4' });

    await refused(id, () => api('PUT', `/snapshots/${id}/metadata/x`, { meta: { y: '1' } }), 400, 'Request body and URI mismatch');
    await refused(id, () => api('PUT', `/snapshots/${id}/metadata/x`, { meta: { x: '1', y: '2' } }), 400, 'Request body contains too many items');
    await refused(id, () => api('POST', `/snapshots/${id}/metadata`, { metadata: { k: 5 } }), 400);
    await refused(id, () => api('POST', `/snapshots/${id}/metadata`, { meta: { k: '5' } }), 400);
    await refused(id, () => api('GET', `/snapshots/${id}/metadata/nope`), 404, `Snapshot ${id} has no metadata with key nope.`);
    await refused(id, () => api('DELETE', `/snapshots/${id}/metadata/nope`), 404, `Snapshot ${id} has no metadata with key nope.`);
    // Another project's snapshot does not exist for it.
    await refused(id, () => api('POST', `/snapshots/${id}/metadata`, { metadata: { k: 'v' } }, OTHER), 404, `Snapshot ${id} could not be found.`);
  });

  test('PUT /snapshots/{id}: name and description (stripped), the detail view; a body without them refused', async () => {
    const s = await availableSnapshot('supdate');
    const res = await api('PUT', `/snapshots/${s.id}`, { snapshot: { name: ' renamed ', description: 'about' } });
    expect(res.status).toBe(200);
    expect(res.body.snapshot).toMatchObject({ id: s.id, name: 'renamed', description: 'about', status: 'available', metadata: { a: '1' } });
    expect(res.body.snapshot).not.toHaveProperty('os-extended-snapshot-attributes:progress');
    expect((await read(s.id)).snapshot).toMatchObject({ name: 'renamed', description: 'about' });
    // display_name is the pre-v2 spelling of name.
    expect((await api('PUT', `/snapshots/${s.id}`, { snapshot: { display_name: 'old-style' } })).body.snapshot.name).toBe('old-style');

    await refused(s.id, () => api('PUT', `/snapshots/${s.id}`, { snapshot: {} }), 400);
    await refused(s.id, () => api('PUT', `/snapshots/${s.id}`, { snapshot: { size: 2 } }), 400);
    await refused(s.id, () => api('PUT', `/snapshots/${s.id}`, { name: 'x' }), 400);
    await refused(s.id, () => api('PUT', `/snapshots/${s.id}`, { snapshot: { name: 'x' } }, OTHER), 404);
  });
});

describe('snapshot actions', () => {
  test('os-update_snapshot_status: only along status_map, progress shown; refusals change nothing', async () => {
    const s = await availableSnapshot('sstatus');
    const act = (body: unknown, token = DEMO) => api('POST', `/snapshots/${s.id}/action`, body, token);
    await refused(s.id, () => act({ 'os-update_snapshot_status': { status: 'error' } }), 400, 'Snapshot status available not allowed for update_snapshot_status');
    expect((await act({ 'os-reset_status': { status: 'creating' } }, ADMIN)).status).toBe(202);
    await refused(s.id, () => act({ 'os-update_snapshot_status': { status: 'deleting' } }), 400, 'Provided snapshot status deleting not allowed for snapshot with status creating.');
    await refused(s.id, () => act({ 'os-update_snapshot_status': { status: 'available', progress: 'half' } }), 400);
    await refused(s.id, () => act({ 'os-update_snapshot_status': { progress: '50%' } }), 400);
    await refused(s.id, () => act({ 'os-update_snapshot_status': { status: 'available', other: 1 } }), 400);

    expect((await act({ 'os-update_snapshot_status': { status: 'creating', progress: '50%' } })).status).toBe(202);
    expect((await read(s.id)).snapshot).toMatchObject({ status: 'creating', 'os-extended-snapshot-attributes:progress': '50%' });
    expect((await act({ 'os-update_snapshot_status': { status: 'available', progress: '100%' } })).status).toBe(202);
    expect((await read(s.id)).snapshot).toMatchObject({ status: 'available', 'os-extended-snapshot-attributes:progress': '100%' });
  });

  test('os-unmanage: admin only; the record goes (the backend object stays), a snapshot not available or error refused', async () => {
    const s = await availableSnapshot('sunmanage');
    const act = (body: unknown, token = ADMIN) => api('POST', `/snapshots/${s.id}/action`, body, token);
    await refused(s.id, () => act({ 'os-unmanage': null }, DEMO), 403);
    expect((await act({ 'os-reset_status': { status: 'creating' } })).status).toBe(202);
    await refused(s.id, () => act({ 'os-unmanage': null }), 400, 'Invalid snapshot: Snapshot status must be available or error and must not be part of a group.');
    expect((await act({ 'os-reset_status': { status: 'available' } })).status).toBe(202);
    expect((await act({ 'os-unmanage': {} })).status).toBe(202);
    expect((await api('GET', `/snapshots/${s.id}`, undefined, ADMIN)).status).toBe(404);
    // The object stays on the backend, the operator's now: the audit (afterEach) counts it as
    // unmanaged, not an orphan. The operator removes it; then the volume, which no longer lists
    // the snapshot, can be deleted.
    const host = (await api('GET', `/volumes/${s.volume_id}`, undefined, ADMIN)).body.volume['os-vol-host-attr:host'] as string;
    const driver = await driverForHost(host);
    if (!isSnapshotDriver(driver)) throw new Error('the local backend makes snapshots');
    const left = (await driver.listSnapshots()).filter((x) => x.snapshotName === `snapshot-${s.id}`);
    expect(left).toHaveLength(1);
    expect((await runAudit()).findings).toEqual([]);
    await driver.deleteSnapshot(left[0]!.backendName, left[0]!.snapshotName);
    expect((await api('DELETE', `/volumes/${s.volume_id}`)).status).toBe(202);
    await eventually(async () => ((await api('GET', `/volumes/${s.volume_id}`, undefined, ADMIN)).status === 404 ? true : undefined), 'volume deleted');
  });
});
