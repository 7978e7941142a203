/**
 * Cross-cell resize on the local stack (reference §1, traces xcell_a, b, c, g, h): an m1 server in
 * cell1 resized to m2.small can only land in cell2 (cmp3/cmp4). Per phase: the API view (one
 * server, one migration, continuous actions), both copies, the §1.10 attachments-API call order,
 * allocations, guests and kept disks per host, and the root-disk and volume bytes through the guest.
 */
import { describe, expect, test } from 'vitest';
import { cinderCalls, resetCinderCalls } from '../../functions/servers/cinder.js';
import { resetPolicyCache } from '../../functions/core/policy.js';
import { action, bootServer, putSmallRootFlavor, serverState, settled } from '../support/nova.js';
import {
  allocsByHost, allowCrossCell, crossCellSuite, apiMigrations, attachNewVolume, attachmentRecords, attachmentsOf, CELL1_HOSTS, CELL2_HOSTS, cell1Server, copies, driverOf, expectSettledOn, guestsOn,
  LONG, migrationRecords, readRoot, readVolume, resizeTempImages, TEST,
} from '../support/cross-cell.js';

const { nova, cinder, servers } = crossCellSuite();

const calls = () => cinderCalls().map((c) => `${c.call}:${c.id}`);
const host = (s: any) => s['OS-EXT-SRV-ATTR:host'] as string;

/** The server's actions (newest first) and one action's events by name -> result. */
async function actions(id: string): Promise<{ action: string; request_id: string; message: string | null }[]> {
  const res = await nova('GET', `/servers/${id}/os-instance-actions`, { version: '2.84' });
  expect(res.status).toBe(200);
  return res.body.instanceActions;
}
async function events(id: string, requestId: string): Promise<Record<string, string | null>> {
  const res = await nova('GET', `/servers/${id}/os-instance-actions/${requestId}`, { version: '2.84' });
  expect(res.status).toBe(200);
  return Object.fromEntries(res.body.instanceAction.events.map((e: { event: string; result: string | null }) => [e.event, e.result]));
}

/** Resize to `flavor` and wait for VERIFY_RESIZE on a host of `cells`. */
async function resizeTo(id: string, flavor: string, hosts: string[]): Promise<any> {
  await action(nova, id, { resize: { flavorRef: flavor } });
  const verify = await settled(nova, id, LONG);
  expect(verify.status, JSON.stringify(verify.fault ?? verify)).toBe('VERIFY_RESIZE');
  expect(hosts).toContain(host(verify));
  return verify;
}

/** The move's view while VERIFY_RESIZE: one listed server, one API migration, two copies, two attachments per volume. */
async function expectVerifyView(id: string, vols: string[], source: string, dest: string): Promise<void> {
  for (const path of ['/servers', '/servers/detail']) {
    const listed = (await nova('GET', path)).body.servers.filter((s: { id: string }) => s.id === id);
    expect(listed, path).toHaveLength(1);
  }
  // One row per migration (both copies hold this move's record); earlier moves keep their own rows.
  const ms = await apiMigrations(nova, id);
  expect(new Set(ms.map((m) => m.uuid)).size).toBe(ms.length);
  const current = ms.filter((m) => m.status === 'finished');
  expect(current).toHaveLength(1);
  expect(current[0]).toMatchObject({ source_compute: source, dest_compute: dest });
  for (const m of ms) expect(m).not.toHaveProperty('cross_cell_move');
  const cs = await copies(id);
  expect(cs.map((c) => c.instance!.hidden ?? false)).toEqual([false, true]);
  expect(cs[0]!.instance).toMatchObject({ vmState: 'resized', taskState: null, host: dest, operation: null });
  expect(cs[1]!.instance!.operation ?? null).toBeNull();
  for (const vol of vols) {
    const [shown, hidden] = [cs[0]!.bdms.find((b) => b.volumeId === vol)!, cs[1]!.bdms.find((b) => b.volumeId === vol)!];
    expect(shown.attachmentId).not.toBe(hidden.attachmentId);
    const recs = await attachmentRecords(cinder, vol);
    expect(recs.map((r) => r.id).sort()).toEqual([shown.attachmentId, hidden.attachmentId].sort());
    // The source placeholder is reserved without a connector; the destination one is attached.
    expect(recs.find((r) => r.id === hidden.attachmentId)!.status).toBe('reserved');
    expect(recs.find((r) => r.id === shown.attachmentId)!.status).toBe('attached');
  }
}

describe('cross-cell resize', () => {
  test('image-backed with a volume: to cell2, confirm; back to cell1, revert', TEST, async () => {
    const s = await cell1Server(nova, cinder, 'xa');
    servers.push(s.id);
    const attS = (await serverState(s.id)).bdms.find((b) => b.volumeId === s.vol)!.attachmentId!;
    const before = (await nova('GET', `/servers/${s.id}`)).body.server;
    resetCinderCalls();
    const verify = await resizeTo(s.id, '3', CELL2_HOSTS);
    const dest = host(verify);
    expect(verify.id).toBe(s.id);
    expect(verify.addresses).toEqual(before.addresses);
    expect(verify.flavor.original_name).toBe('m2.small');
    expect(verify['os-extended-volumes:volumes_attached'].map((v: { id: string }) => v.id)).toEqual([s.vol]);
    await expectVerifyView(s.id, [s.vol], 'cmp1', dest);
    const [shown, hidden] = await copies(s.id);
    const attD = shown!.bdms.find((b) => b.volumeId === s.vol)!.attachmentId!;
    const attS2 = hidden!.bdms.find((b) => b.volumeId === s.vol)!.attachmentId!;
    // §1.10: att_D reserved at dest, att_S2 placeholder then att_S deleted at source, att_D connected at finish.
    // A create is logged by its volume (the ids are checked through the BDMs above).
    expect(calls()).toEqual([`attachment_create:${s.vol}`, `attachment_create:${s.vol}`, `attachment_delete:${attS}`, `attachment_update:${attD}`, `attachment_get:${attD}`, `attachment_complete:${attD}`]);
    const mig = (await migrationRecords(s.id)).map((r) => r.migration)[0]!;
    expect(mig.crossCellMove).toBe(true);
    expect(await allocsByHost(mig.uuid)).toEqual({ cmp1: 1 });
    expect(await allocsByHost(s.id)).toEqual({ [dest]: 1 });
    expect(await guestsOn(s.id)).toEqual({ cmp1: ['kept'], [dest]: ['guest'] });
    expect(await readRoot(s.id, dest)).toBe(s.rootDigest);
    expect(await readVolume(s.id)).toBe(s.volDigest);
    expect(await resizeTempImages('xa')).toEqual([]);
    // Actions continuous: the resize after the attach and the create, its events finished Success (B2 fixed).
    const acts = await actions(s.id);
    expect(acts.map((a) => a.action)).toEqual(['resize', 'attach_volume', 'create']);
    expect(await events(s.id, acts[0]!.request_id)).toMatchObject({
      conductor_migrate_server: 'Success', cold_migrate: 'Success',
      compute_prep_snapshot_based_resize_at_dest: 'Success', compute_finish_snapshot_based_resize_at_dest: 'Success',
    });

    resetCinderCalls();
    await action(nova, s.id, { confirmResize: null }, 204);
    const done = await settled(nova, s.id, LONG);
    expect(done.status).toBe('ACTIVE');
    expect(host(done)).toBe(dest);
    expect(calls()).toEqual([`attachment_delete:${attS2}`]);
    await expectSettledOn(cinder, { id: s.id, name: 'xa', vols: [s.vol] }, dest);
    expect((await attachmentsOf(cinder, s.vol))[0]!.attachment_id).toBe(attD);
    expect((await migrationRecords(s.id)).map((r) => r.migration.status)).toEqual(['confirmed']);
    expect((await apiMigrations(nova, s.id)).map((m) => m.status)).toEqual(['confirmed']);
    expect(await allocsByHost(mig.uuid)).toEqual({});
    expect(await allocsByHost(s.id)).toEqual({ [dest]: 1 });
    expect((await serverState(s.id)).instance).toMatchObject({ oldFlavor: null, newFlavor: null, vmState: 'active' });
    expect(await readRoot(s.id, dest)).toBe(s.rootDigest);
    expect(await readVolume(s.id)).toBe(s.volDigest);
    const confirmActs = await actions(s.id);
    expect(confirmActs.map((a) => a.action)).toEqual(['confirmResize', 'resize', 'attach_volume', 'create']);
    expect(await events(s.id, confirmActs[0]!.request_id)).toEqual({ conductor_confirm_snapshot_based_resize: 'Success', compute_confirm_snapshot_based_resize_at_source: 'Success' });

    // Back into cell1, then revert: it returns to its cell2 host.
    const back = await resizeTo(s.id, '1', CELL1_HOSTS);
    await expectVerifyView(s.id, [s.vol], dest, host(back));
    expect(await readRoot(s.id, host(back))).toBe(s.rootDigest);
    const attD2 = (await copies(s.id))[1]!.bdms.find((b) => b.volumeId === s.vol)!.attachmentId!;
    const attBack = (await copies(s.id))[0]!.bdms.find((b) => b.volumeId === s.vol)!.attachmentId!;
    resetCinderCalls();
    await action(nova, s.id, { revertResize: null }, 202);
    const reverted = await settled(nova, s.id, LONG);
    expect(reverted.status).toBe('ACTIVE');
    expect(host(reverted)).toBe(dest);
    expect(reverted.flavor.original_name).toBe('m2.small');
    // §1.10 revert: att_D deleted at dest, the placeholder connected at the source.
    expect(calls()).toEqual([`attachment_delete:${attBack}`, `attachment_update:${attD2}`, `attachment_get:${attD2}`, `attachment_complete:${attD2}`]);
    await expectSettledOn(cinder, { id: s.id, name: 'xa', vols: [s.vol] }, dest);
    expect((await apiMigrations(nova, s.id)).map((m) => m.status).sort()).toEqual(['confirmed', 'reverted']);
    expect(await allocsByHost(s.id)).toEqual({ [dest]: 1 });
    expect(await readRoot(s.id, dest)).toBe(s.rootDigest);
    expect(await readVolume(s.id)).toBe(s.volDigest);
    const revertActs = await actions(s.id);
    expect(revertActs[0]!.action).toBe('revertResize');
    expect(await events(s.id, revertActs[0]!.request_id)).toEqual({
      conductor_revert_snapshot_based_resize: 'Success', compute_revert_snapshot_based_resize_at_dest: 'Success', compute_finish_revert_snapshot_based_resize_at_source: 'Success',
    });
  });

  test('volume-backed: resize and revert, no snapshot image made', TEST, async () => {
    const s = await cell1Server(nova, cinder, 'xb', { bootVolume: true });
    servers.push(s.id);
    const images = await resizeTempImages('xb');
    const verify = await resizeTo(s.id, '3', CELL2_HOSTS);
    await expectVerifyView(s.id, [s.bootVolume!, s.vol], 'cmp1', host(verify));
    expect((await serverState(s.id)).instance.operation).toBeNull();
    // The op's holds never named an image: nothing was snapshotted.
    expect(await resizeTempImages('xb')).toEqual(images);
    expect(await readVolume(s.id)).toBe(s.volDigest);
    await action(nova, s.id, { revertResize: null }, 202);
    const reverted = await settled(nova, s.id, LONG);
    expect(reverted.status).toBe('ACTIVE');
    expect(host(reverted)).toBe('cmp1');
    expect(reverted.flavor.original_name).toBe('m1.small');
    await expectSettledOn(cinder, { id: s.id, name: 'xb', vols: [s.bootVolume!, s.vol] }, 'cmp1');
    expect((await apiMigrations(nova, s.id)).map((m) => m.status)).toEqual(['reverted']);
    expect(await readVolume(s.id)).toBe(s.volDigest);
  });

  test('stopped server: SHUTOFF -> VERIFY_RESIZE (guest off) -> revert -> SHUTOFF', TEST, async () => {
    const s = await cell1Server(nova, cinder, 'xh');
    servers.push(s.id);
    await action(nova, s.id, { 'os-stop': null });
    expect((await settled(nova, s.id, LONG)).status).toBe('SHUTOFF');
    const verify = await resizeTo(s.id, '3', CELL2_HOSTS);
    expect(verify['OS-EXT-STS:power_state']).toBe(4);
    expect((await (await driverOf(host(verify))).getGuest(s.id))?.powerState).toBe(4);
    await action(nova, s.id, { revertResize: null }, 202);
    const reverted = await settled(nova, s.id, LONG);
    expect(reverted.status).toBe('SHUTOFF');
    expect(host(reverted)).toBe('cmp1');
    await expectSettledOn(cinder, { id: s.id, name: 'xh', vols: [s.vol] }, 'cmp1');
    await action(nova, s.id, { 'os-start': null });
    expect((await settled(nova, s.id, LONG)).status).toBe('ACTIVE');
    expect(await readRoot(s.id, 'cmp1')).toBe(s.rootDigest);
    expect(await readVolume(s.id)).toBe(s.volDigest);
  });

  test('attach one volume and detach another while VERIFY_RESIZE, then revert: source BDMs reconciled', TEST, async () => {
    const s = await cell1Server(nova, cinder, 'xc');
    servers.push(s.id);
    await resizeTo(s.id, '3', CELL2_HOSTS);
    const added = await attachNewVolume(nova, cinder, s.id, 'xc-added', '/dev/vdc');
    const del = await nova('DELETE', `/servers/${s.id}/os-volume_attachments/${s.vol}`);
    expect(del.status, JSON.stringify(del.body)).toBe(202);
    const still = await settled(nova, s.id, LONG);
    expect(still.status).toBe('VERIFY_RESIZE');
    // Detached while resized: att_D is gone, the source placeholder waits for the revert's reconcile.
    const hiddenAtt = (await copies(s.id))[1]!.bdms.find((b) => b.volumeId === s.vol)!.attachmentId;
    // (The volume's own `attachments` list shows attached ones only: the placeholder is reserved.)
    expect((await attachmentRecords(cinder, s.vol)).map((a) => a.id)).toEqual([hiddenAtt]);
    await action(nova, s.id, { revertResize: null }, 202);
    const reverted = await settled(nova, s.id, LONG);
    expect(reverted.status).toBe('ACTIVE');
    expect(host(reverted)).toBe('cmp1');
    expect(reverted['os-extended-volumes:volumes_attached'].map((v: { id: string }) => v.id)).toEqual([added.vol]);
    await expectSettledOn(cinder, { id: s.id, name: 'xc', vols: [added.vol] }, 'cmp1');
    expect((await serverState(s.id)).bdms.filter((b) => b.volumeId).map((b) => b.volumeId)).toEqual([added.vol]);
    expect((await cinder('GET', `/volumes/${s.vol}`)).body.volume.status).toBe('available');
    expect(await readThroughDevice(s.id, '/dev/vdc')).toBe(added.digest);
    expect(await readRoot(s.id, 'cmp1')).toBe(s.rootDigest);
  });

  test('delete while VERIFY_RESIZE confirms first: nothing left on either host or cell', TEST, async () => {
    const s = await cell1Server(nova, cinder, 'xg');
    servers.push(s.id);
    const verify = await resizeTo(s.id, '3', CELL2_HOSTS);
    const mig = (await migrationRecords(s.id))[0]!.migration;
    expect((await nova('DELETE', `/servers/${s.id}`)).status).toBe(204);
    expect((await settled(nova, s.id, LONG)).status).toBe('DELETED');
    expect(await copies(s.id)).toEqual([]);
    expect(await guestsOn(s.id)).toEqual({});
    expect(await attachmentsOf(cinder, s.vol)).toEqual([]);
    expect((await cinder('GET', `/volumes/${s.vol}`)).body.volume.status).toBe('available');
    expect(await allocsByHost(s.id)).toEqual({});
    expect(await allocsByHost(mig.uuid)).toEqual({});
    expect(await resizeTempImages('xg')).toEqual([]);
    expect(host(verify)).toMatch(/cmp[34]/);
  });
});

describe('policy', () => {
  test('default policy: m2 resize fails cleanly (NoValidHost) and migrate --host cmp3 is 400; allowed: migrate --host cmp3 crosses', TEST, async () => {
    const flavor = '93';
    await putSmallRootFlavor(flavor, 'x1.nogen');
    const id = await bootServer(nova, { name: 'xp', host: 'cmp1', flavor });
    servers.push(id);
    delete process.env.FERRY_POLICY;
    resetPolicyCache();
    try {
      await action(nova, id, { resize: { flavorRef: '3' } });
      const after = await settled(nova, id, LONG);
      expect(after.status).toBe('ACTIVE');
      expect(host(after)).toBe('cmp1');
      const { instance } = await serverState(id);
      expect(instance).toMatchObject({ taskState: null, vmState: 'active', host: 'cmp1' });
      expect(instance.fault?.message).toMatch(/No valid host/);
      expect((await apiMigrations(nova, id)).map((m) => m.status)).toEqual(['error']);
      const acts = await actions(id);
      expect(acts[0]).toMatchObject({ action: 'resize', message: 'Error' });
      expect(Object.values(await events(id, acts[0]!.request_id))).toContain('Error');
      expect(await copies(id)).toHaveLength(1);
      const refused = await nova('POST', `/servers/${id}/action`, { body: { migrate: { host: 'cmp3' } }, version: '2.56' });
      expect(refused.status).toBe(400);
      expect(refused.body.badRequest.message).toBe('Compute host cmp3 could not be found.');
    } finally {
      allowCrossCell(); // the suite restores the policy the file started with
    }
    await action(nova, id, { migrate: { host: 'cmp3' } }, 202, '2.56');
    const verify = await settled(nova, id, LONG);
    expect(verify.status, JSON.stringify(verify.fault ?? verify)).toBe('VERIFY_RESIZE');
    expect(host(verify)).toBe('cmp3');
    await action(nova, id, { confirmResize: null }, 204);
    const done = await settled(nova, id, LONG);
    expect(done.status).toBe('ACTIVE');
    expect(host(done)).toBe('cmp3');
    expect(await copies(id)).toHaveLength(1);
    expect(await guestsOn(id)).toEqual({ cmp3: ['guest'] });
  });
});

const readThroughDevice = (id: string, device: string) => readVolume(id, device);
