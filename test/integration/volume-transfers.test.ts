/**
 * Cinder volume transfers (functions/transfers/) on the local stack over HTTP and the upstream
 * `cinder` CLI, as Tempest's test_volume_transfers drives them: create answers the auth key once,
 * the volume shows `awaiting-transfer`, list / detail / show by the owner, accept by another
 * project moves the volume, its snapshots and their quota in one transaction, delete gives the
 * volume back. Every refusal is checked to change nothing, and the audit finds DynamoDB and the
 * backends agreeing after each scenario.
 */
import { describe, expect, test } from 'vitest';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { db } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { cinderCli, parsePropertyTable } from '../support/cli.js';
import { eventually } from '../support/poll.js';
import { ADMIN, DEMO, OTHER, useAuditedStack, volumeApi } from '../support/volume-api.js';

const stack = useAuditedStack();
const api = volumeApi(stack, '3.0');

const volume = async (id: string) => (await api('GET', `/volumes/${id}`, undefined, ADMIN)).body.volume;
const usage = async (project: string) => {
  const q = (await api('GET', `/os-quota-sets/${project}?usage=true`, undefined, ADMIN)).body.quota_set;
  return { volumes: q.volumes.in_use, gigabytes: q.gigabytes.in_use, snapshots: q.snapshots.in_use };
};

async function availableVolume(name: string, size = 1): Promise<string> {
  const created = await api('POST', '/volumes', { volume: { size, name } });
  expect(created.status).toBe(202);
  const id = created.body.volume.id as string;
  await eventually(async () => ((await volume(id)).status === 'available' ? true : undefined), `${name} available`);
  return id;
}

/** Runs a refused request and checks the volume and the transfer read the same afterwards. */
async function refused(volumeId: string, transferId: string | null, call: () => Promise<{ status: number; body: any }>, status: number, message?: string) {
  const before = [await volume(volumeId), transferId && (await api('GET', `/os-volume-transfer/${transferId}`, undefined, ADMIN)).body];
  const res = await call();
  expect(res.status).toBe(status);
  if (message !== undefined) expect(Object.values(res.body ?? {})[0]).toMatchObject({ message });
  expect([await volume(volumeId), transferId && (await api('GET', `/os-volume-transfer/${transferId}`, undefined, ADMIN)).body]).toEqual(before);
  return res;
}

describe('volume transfers (C/transfer/api.py)', () => {
  test('create, list, show, accept by another project: volume, snapshot and quota move; refusals change nothing', async () => {
    const id = await availableVolume('xfer', 2);
    const snap = await api('POST', '/snapshots', { snapshot: { volume_id: id, name: 'xfer-snap' } });
    await eventually(async () => ((await api('GET', `/snapshots/${snap.body.snapshot.id}`)).body.snapshot.status === 'available' ? true : undefined), 'snapshot available');
    const demoBefore = await usage('demo');
    const otherBefore = await usage('other');

    const created = await api('POST', '/os-volume-transfer', { transfer: { volume_id: id, name: ' xfer-1 ' } });
    expect(created.status).toBe(202);
    const t = created.body.transfer;
    expect(Object.keys(t).sort()).toEqual(['auth_key', 'created_at', 'id', 'links', 'name', 'volume_id']);
    expect(t).toMatchObject({ name: 'xfer-1', volume_id: id });
    expect(t.auth_key).toMatch(/^[0-9a-f]{16}$/);
    expect((await volume(id)).status).toBe('awaiting-transfer');
    // Only the key's HMAC is stored.
    const item = (await db().send(new GetCommand({ TableName: tableName('volume'), Key: { pk: `XFER#${t.id}`, sk: 'XFER' } }))).Item!;
    expect(JSON.stringify(item)).not.toContain(t.auth_key);

    const shown = await api('GET', `/os-volume-transfer/${t.id}`);
    expect(shown.body.transfer).toEqual({ id: t.id, created_at: t.created_at, name: 'xfer-1', volume_id: id, links: t.links });
    expect((await api('GET', '/os-volume-transfer')).body.transfers).toEqual([{ id: t.id, volume_id: id, name: 'xfer-1', links: t.links }]);
    expect((await api('GET', '/os-volume-transfer/detail')).body.transfers).toEqual([shown.body.transfer]);
    // 3.57 adds the history fields, at /volume-transfers.
    const v357 = await api('GET', `/volume-transfers/${t.id}`, undefined, DEMO, '3.57');
    expect(v357.body.transfer).toMatchObject({ no_snapshots: false, source_project_id: 'demo', destination_project_id: null, accepted: false });
    // Another project neither lists nor sees it.
    expect((await api('GET', '/os-volume-transfer', undefined, OTHER)).body.transfers).toEqual([]);
    expect((await api('GET', `/os-volume-transfer/${t.id}`, undefined, OTHER)).status).toBe(404);

    await refused(id, t.id, () => api('POST', '/os-volume-transfer', { transfer: { volume_id: id } }), 400, 'Invalid volume: status must be available');
    await refused(id, t.id, () => api('POST', `/os-volume-transfer/${t.id}/accept`, { accept: { auth_key: 'wrong' } }, OTHER), 400, `Invalid auth key: Attempt to transfer ${t.id} with invalid auth key.`);
    await refused(id, t.id, () => api('POST', `/os-volume-transfer/${t.id}/accept`, { accept: {} }, OTHER), 400);
    await refused(id, t.id, () => api('DELETE', `/volumes/${id}`), 400);

    const accepted = await api('POST', `/os-volume-transfer/${t.id}/accept`, { accept: { auth_key: t.auth_key } }, OTHER);
    expect(accepted).toEqual({ status: 202, body: { transfer: { id: t.id, volume_id: id, name: 'xfer-1', links: t.links } } });
    const moved = await volume(id);
    expect(moved).toMatchObject({ status: 'available', 'os-vol-tenant-attr:tenant_id': 'other', user_id: 'other' });
    expect((await api('GET', `/volumes/${id}`, undefined, DEMO)).status).toBe(404);
    expect((await api('GET', `/snapshots/${snap.body.snapshot.id}`, undefined, OTHER)).body.snapshot.volume_id).toBe(id);
    expect((await api('GET', `/os-volume-transfer/${t.id}`, undefined, ADMIN)).status).toBe(404);
    expect(await usage('demo')).toEqual({ volumes: demoBefore.volumes - 1, gigabytes: demoBefore.gigabytes - 4, snapshots: demoBefore.snapshots - 1 });
    expect(await usage('other')).toEqual({ volumes: otherBefore.volumes + 1, gigabytes: otherBefore.gigabytes + 4, snapshots: otherBefore.snapshots + 1 });
    // A second accept finds no transfer.
    expect((await api('POST', `/os-volume-transfer/${t.id}/accept`, { accept: { auth_key: t.auth_key } }, OTHER)).status).toBe(404);

    // Clean up as the new owner.
    expect((await api('DELETE', `/snapshots/${snap.body.snapshot.id}`, undefined, OTHER)).status).toBe(202);
    expect((await api('DELETE', `/volumes/${id}`, undefined, OTHER)).status).toBe(202);
    await eventually(async () => ((await api('GET', `/volumes/${id}`, undefined, ADMIN)).status === 404 ? true : undefined), 'volume deleted');
  });

  test('/volume-transfers (3.55 no_snapshots) through the cinder CLI; delete gives the volume back', async () => {
    const id = await availableVolume('xfer-cli');
    const cli = await cinderCli(`${stack.current().url}/volume/v3`, 'demo', 'demo', ['--os-volume-api-version', '3.55', 'transfer-create', '--name', 'by-cli', '--no-snapshots', id]);
    expect(cli.code, cli.stderr).toBe(0);
    const props = parsePropertyTable(cli.stdout);
    expect(props).toMatchObject({ name: 'by-cli', volume_id: id, no_snapshots: 'True' });
    expect((await volume(id)).status).toBe('awaiting-transfer');
    const t = (await api('GET', `/volume-transfers/${props.id}`, undefined, DEMO, '3.55')).body.transfer;
    expect(t).toMatchObject({ id: props.id, no_snapshots: true });

    await refused(id, t.id, () => api('DELETE', `/volume-transfers/${t.id}`, undefined, OTHER, '3.55'), 404, `Transfer ${t.id} could not be found.`);
    expect((await api('DELETE', `/volume-transfers/${t.id}`, undefined, DEMO, '3.55')).status).toBe(202);
    expect((await volume(id)).status).toBe('available');
    expect((await api('GET', '/volume-transfers', undefined, DEMO, '3.55')).body.transfers).toEqual([]);
    expect((await api('DELETE', `/volumes/${id}`)).status).toBe(202);
    await eventually(async () => ((await api('GET', `/volumes/${id}`, undefined, ADMIN)).status === 404 ? true : undefined), 'volume deleted');
  });
});
