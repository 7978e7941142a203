/**
 * Cold migration and same-cell resize with confirm and revert on the local stack (reference §2.1
 * rows Cold migrate / same-cell resize, Confirm, Revert; traces vol_test_06, 07, 14): the
 * attachments API calls in upstream's order per phase, API status, host, flavor, allocations
 * (source by migration and destination by instance while VERIFY_RESIZE), kept disks and volume
 * bytes; then the failure rows, each ending with the instance usable and nothing leaked.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { cinderCalls, resetCinderCalls } from '../../functions/servers/cinder.js';
import { clearFaults, injectFault } from '../../functions/core/faults.js';
import { computeDriverFor } from '../../functions/drivers/compute/registry.js';
import { nodeOfHost } from '../../functions/servers/engine.js';
import { allocationsOf } from '../../functions/compute/placement.js';
import { listMigrations } from '../../functions/servers/migrations.js';
import { getRequestSpec } from '../../functions/servers/repo.js';
import type { Migration } from '../../functions/servers/model.js';
import { serviceUuid } from '../../functions/compute/seed.js';
import { action, bootServer, cinderClient, createVolume, novaClient, readThroughGuest, serverState, settled, volumeStatus, writeThroughGuest, assertCleanAudit, type Cinder, type Nova } from '../support/nova.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
let nova: Nova;
let cinder: Cinder;
beforeAll(async () => {
  stack = await useLocalStack();
  nova = novaClient(stack);
  cinder = cinderClient(stack);
}, 120_000);
afterAll(async () => stack?.stop());

// Each test's servers are deleted after it: two hosts hold only a few servers.
const servers: string[] = [];
afterEach(async () => {
  clearFaults();
  for (const id of servers.splice(0)) {
    await nova('DELETE', `/servers/${id}`);
    await settled(nova, id, LONG);
  }
  await assertCleanAudit();
}, 300_000);
const boot = async (opts: Parameters<typeof bootServer>[1]) => {
  const id = await bootServer(nova, opts);
  servers.push(id);
  return id;
};

/** A move is several machine steps on two hosts: room for a loaded machine. */
const LONG = 240_000;
const TEST = { timeout: 600_000 };

const callNames = () => cinderCalls().map((c) => c.call);
const driverOf = async (host: string) => computeDriverFor((await nodeOfHost(host)).node.config);
const nodeUuidOf = async (host: string) => (await nodeOfHost(host)).node.uuid;

async function migrationOf(serverId: string): Promise<Migration> {
  const all = (await listMigrations()).map((m) => m.migration).filter((m) => m.instanceUuid === serverId);
  all.sort((a, b) => b.id - a.id);
  expect(all.length).toBeGreaterThan(0);
  return all[0]!;
}

/** A server on cmp1 (image-backed) with a data volume attached at /dev/vdb holding known bytes. */
async function serverWithVolume(name: string, flavor = '1'): Promise<{ id: string; vol: string; digest: string }> {
  const id = await boot({ name, host: 'cmp1', flavor });
  const vol = await createVolume(cinder, 1, `${name}-data`);
  const res = await nova('POST', `/servers/${id}/os-volume_attachments`, { body: { volumeAttachment: { volumeId: vol } } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  await settled(nova, id, LONG);
  const digest = await writeThroughGuest(id, '/dev/vdb', `${name}-bytes`);
  return { id, vol, digest };
}

/** The BDM's attachment is the volume's only Cinder attachment, attached to `host`. */
async function expectAttachmentOn(id: string, vol: string, host: string): Promise<string> {
  const { bdms } = await serverState(id);
  const bdm = bdms.find((b) => b.volumeId === vol)!;
  expect(bdm.attachmentId).toBeTruthy();
  expect(bdm.connectionInfo).toBeTruthy();
  const v = await volumeStatus(cinder, vol);
  expect(v.status).toBe('in-use');
  expect(v.attachments).toHaveLength(1);
  expect(v.attachments[0]).toMatchObject({ attachment_id: bdm.attachmentId, server_id: id, host_name: host });
  return bdm.attachmentId!;
}

/** Allocations by consumer and node host. */
async function allocs(consumer: string): Promise<{ node: string; vcpus: number; memoryMb: number }[]> {
  const byUuid = new Map([[await nodeUuidOf('cmp1'), 'cmp1'], [await nodeUuidOf('cmp2'), 'cmp2']]);
  return (await allocationsOf(consumer)).map((a) => ({ node: byUuid.get(a.nodeUuid) ?? a.nodeUuid, vcpus: a.vcpus, memoryMb: a.memoryMb }));
}

/** Where the guest is: defined guests and kept disks per host. */
async function placement(id: string): Promise<{ cmp1: string[]; cmp2: string[] }> {
  const of = async (host: string) => {
    const d = await driverOf(host);
    const out: string[] = [];
    if ((await d.listGuests()).some((g) => g.uuid === id)) out.push('guest');
    if ((await d.listKeptDisks()).some((g) => g.uuid === id)) out.push('kept');
    return out;
  };
  return { cmp1: await of('cmp1'), cmp2: await of('cmp2') };
}

async function connectionsFor(host: string, vol: string): Promise<number> {
  return (await (await driverOf(host)).listConnections()).filter((c) => c.volumeId === vol).length;
}

const PHASE_PREP_FINISH = ['attachment_create', 'attachment_delete', 'attachment_update', 'attachment_get', 'attachment_complete'];

describe('resize and cold migration', () => {
  test('resize m1.small -> m1.large with a data volume, then confirm', TEST, async () => {
    const { id, vol, digest } = await serverWithVolume('rsz');
    const before = await expectAttachmentOn(id, vol, 'cmp1');
    resetCinderCalls();
    await action(nova, id, { resize: { flavorRef: '2' } });
    const verify = await settled(nova, id, LONG);
    expect(verify.status).toBe('VERIFY_RESIZE');
    expect(verify['OS-EXT-SRV-ATTR:host']).toBe('cmp2');
    expect(verify.flavor.original_name).toBe('m1.large');
    expect(callNames()).toEqual(PHASE_PREP_FINISH);
    const calls = cinderCalls();
    expect(calls[1]!.id).toBe(before);
    const after = await expectAttachmentOn(id, vol, 'cmp2');
    expect(after).not.toBe(before);
    expect(calls.slice(2).map((c) => c.id)).toEqual([after, after, after]);
    const m = await migrationOf(id);
    expect(m).toMatchObject({ migrationType: 'resize', status: 'finished', sourceCompute: 'cmp1', destCompute: 'cmp2' });
    expect(await allocs(m.uuid)).toEqual([{ node: 'cmp1', vcpus: 1, memoryMb: 2048 }]);
    expect(await allocs(id)).toEqual([{ node: 'cmp2', vcpus: 4, memoryMb: 8192 }]);
    expect(await placement(id)).toEqual({ cmp1: ['kept'], cmp2: ['guest'] });
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
    const { instance } = await serverState(id);
    expect(instance.oldFlavor?.name).toBe('m1.small');
    expect(instance.newFlavor?.name).toBe('m1.large');

    resetCinderCalls();
    await action(nova, id, { confirmResize: null }, 204);
    const done = await settled(nova, id, LONG);
    expect(done.status).toBe('ACTIVE');
    expect(done['OS-EXT-SRV-ATTR:host']).toBe('cmp2');
    expect(done.flavor.original_name).toBe('m1.large');
    expect(callNames()).toEqual([]);
    expect((await migrationOf(id)).status).toBe('confirmed');
    expect(await allocs(m.uuid)).toEqual([]);
    expect(await allocs(id)).toEqual([{ node: 'cmp2', vcpus: 4, memoryMb: 8192 }]);
    expect(await placement(id)).toEqual({ cmp1: [], cmp2: ['guest'] });
    expect(await connectionsFor('cmp1', vol)).toBe(0);
    expect(await expectAttachmentOn(id, vol, 'cmp2')).toBe(after);
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
    const { instance: confirmed } = await serverState(id);
    expect(confirmed).toMatchObject({ oldFlavor: null, newFlavor: null, vmState: 'active' });
    // Later moves schedule for the new flavor.
    expect((await getRequestSpec(id))?.flavor.flavorid).toBe('2');
    const actions = (await nova('GET', `/servers/${id}/os-instance-actions`)).body.instanceActions.map((a: { action: string }) => a.action);
    expect(actions.slice(0, 2)).toEqual(['confirmResize', 'resize']);
  });

  test('migrate (admin, 2.56, host) then revert', TEST, async () => {
    const { id, vol, digest } = await serverWithVolume('mig');
    resetCinderCalls();
    await action(nova, id, { migrate: { host: 'cmp2' } }, 202, '2.56');
    const verify = await settled(nova, id, LONG);
    expect(verify.status).toBe('VERIFY_RESIZE');
    expect(verify['OS-EXT-SRV-ATTR:host']).toBe('cmp2');
    expect(verify.flavor.original_name).toBe('m1.small');
    expect(callNames()).toEqual(PHASE_PREP_FINISH);
    const destAtt = await expectAttachmentOn(id, vol, 'cmp2');
    const m = await migrationOf(id);
    expect(m).toMatchObject({ migrationType: 'migration', status: 'finished', destCompute: 'cmp2' });
    expect(await allocs(m.uuid)).toEqual([{ node: 'cmp1', vcpus: 1, memoryMb: 2048 }]);
    expect(await allocs(id)).toEqual([{ node: 'cmp2', vcpus: 1, memoryMb: 2048 }]);
    expect(await placement(id)).toEqual({ cmp1: ['kept'], cmp2: ['guest'] });
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);

    resetCinderCalls();
    await action(nova, id, { revertResize: null }, 202);
    const reverted = await settled(nova, id, LONG);
    expect(reverted.status).toBe('ACTIVE');
    expect(reverted['OS-EXT-SRV-ATTR:host']).toBe('cmp1');
    expect(callNames()).toEqual(PHASE_PREP_FINISH);
    expect(cinderCalls()[1]!.id).toBe(destAtt);
    const back = await expectAttachmentOn(id, vol, 'cmp1');
    expect(cinderCalls().slice(2).map((c) => c.id)).toEqual([back, back, back]);
    expect((await migrationOf(id)).status).toBe('reverted');
    expect(await allocs(m.uuid)).toEqual([]);
    expect(await allocs(id)).toEqual([{ node: 'cmp1', vcpus: 1, memoryMb: 2048 }]);
    expect(await placement(id)).toEqual({ cmp1: ['guest'], cmp2: [] });
    expect(await connectionsFor('cmp2', vol)).toBe(0);
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
    const ports = (await nova('GET', `/servers/${id}`)).body.server;
    expect(ports['OS-EXT-STS:vm_state']).toBe('active');
  });

  test('a stopped server resizes and stays stopped: SHUTOFF -> RESIZE -> VERIFY_RESIZE -> SHUTOFF', TEST, async () => {
    const { id, vol, digest } = await serverWithVolume('stp');
    await action(nova, id, { 'os-stop': null });
    expect((await settled(nova, id, LONG)).status).toBe('SHUTOFF');
    await action(nova, id, { resize: { flavorRef: '2' } });
    expect(['RESIZE', 'VERIFY_RESIZE']).toContain((await nova('GET', `/servers/${id}`)).body.server.status);
    const verify = await settled(nova, id, LONG);
    expect(verify.status).toBe('VERIFY_RESIZE');
    const guest = await (await driverOf('cmp2')).getGuest(id);
    expect(guest?.defined).toBe(true);
    expect(guest?.powerState).toBe(4);
    await expectAttachmentOn(id, vol, 'cmp2');
    await action(nova, id, { confirmResize: null }, 204);
    const done = await settled(nova, id, LONG);
    expect(done.status).toBe('SHUTOFF');
    expect(done['OS-EXT-SRV-ATTR:host']).toBe('cmp2');
    expect(await placement(id)).toEqual({ cmp1: [], cmp2: ['guest'] });
    await action(nova, id, { 'os-start': null });
    expect((await settled(nova, id, LONG)).status).toBe('ACTIVE');
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
  });

  test('API checks: flavor, same flavor, disk down, state, host, policy, not resized', TEST, async () => {
    const id = await boot({ name: 'chk', host: 'cmp1' });
    const big = await boot({ name: 'chk-big', host: 'cmp1', flavor: '2' });
    const post = (body: unknown, version?: string, token?: string) => nova('POST', `/servers/${id}/action`, { body, ...(version ? { version } : {}), ...(token ? { token } : {}) });
    expect((await post({ resize: { flavorRef: '999' } })).body.badRequest.message).toBe('Unable to locate requested flavor.');
    expect((await post({ resize: { flavorRef: '1' } })).body.badRequest.message).toBe('Resize requires a flavor change.');
    expect((await post({ resize: {} })).status).toBe(400);
    expect((await post({ resize: { flavorRef: '2', bogus: 1 } })).status).toBe(400);
    const down = await nova('POST', `/servers/${big}/action`, { body: { resize: { flavorRef: '1' } } });
    expect(down.status).toBe(400);
    expect(down.body.badRequest.message).toBe('Unable to resize disk down.');
    expect((await post({ migrate: { host: 'cmp1' } }, '2.56')).body.badRequest.message).toBe('Cannot migrate to the host where the server exists.');
    expect((await post({ migrate: { host: 'cmp3' } }, '2.56')).body.badRequest.message).toBe('Compute host cmp3 could not be found.');
    expect((await post({ migrate: { host: 'nope' } }, '2.56')).status).toBe(400);
    expect((await post({ migrate: { bogus: 1 } }, '2.56')).status).toBe(400);
    expect((await post({ migrate: null }, '2.56', 'demo:demo')).status).toBe(404);
    const confirm = await post({ confirmResize: null });
    expect(confirm.status).toBe(409);
    expect((await post({ revertResize: null })).status).toBe(409);
    // Nothing was started by the refused calls.
    expect((await serverState(id)).instance.taskState).toBeNull();
    expect((await listMigrations()).filter((m) => m.migration.instanceUuid === id)).toHaveLength(0);
  });
});

describe('failure rows', () => {
  test('(a) finish_resize fails on the destination: rolled back to the source, usable, migration error', TEST, async () => {
    const { id, vol, digest } = await serverWithVolume('fa');
    injectFault({ kind: 'compute', backend: 'cmp2', method: 'finishMigration', mode: 'fail', times: 1 });
    try {
      await action(nova, id, { resize: { flavorRef: '2' } });
      const after = await settled(nova, id, LONG);
      expect(after.status).toBe('ACTIVE');
      expect(after['OS-EXT-SRV-ATTR:host']).toBe('cmp1');
      expect(after.flavor.original_name).toBe('m1.small');
      expect((await serverState(id)).instance.fault?.message).toBeTruthy();
    } finally {
      clearFaults();
    }
    const m = await migrationOf(id);
    expect(m.status).toBe('error');
    const { instance } = await serverState(id);
    expect(instance).toMatchObject({ vmState: 'active', taskState: null, host: 'cmp1', oldFlavor: null, newFlavor: null });
    await expectAttachmentOn(id, vol, 'cmp1');
    expect(await allocs(m.uuid)).toEqual([]);
    expect(await allocs(id)).toEqual([{ node: 'cmp1', vcpus: 1, memoryMb: 2048 }]);
    expect(await placement(id)).toEqual({ cmp1: ['guest'], cmp2: [] });
    expect(await connectionsFor('cmp2', vol)).toBe(0);
    expect((await (await driverOf('cmp1')).getGuest(id))?.powerState).toBe(1);
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
  });

  test('(b) migrate_disk_and_power_off fails on the source: unchanged on the source, migration error', TEST, async () => {
    const { id, vol, digest } = await serverWithVolume('fb');
    const att = await expectAttachmentOn(id, vol, 'cmp1');
    injectFault({ kind: 'compute', backend: 'cmp1', method: 'migrateDiskAndPowerOff', mode: 'fail', times: 1 });
    try {
      await action(nova, id, { resize: { flavorRef: '2' } });
      const after = await settled(nova, id, LONG);
      expect(after.status).toBe('ACTIVE');
      expect(after['OS-EXT-SRV-ATTR:host']).toBe('cmp1');
    } finally {
      clearFaults();
    }
    const m = await migrationOf(id);
    expect(m.status).toBe('error');
    expect((await serverState(id)).instance).toMatchObject({ vmState: 'active', taskState: null, host: 'cmp1' });
    expect(await expectAttachmentOn(id, vol, 'cmp1')).toBe(att);
    expect(await allocs(m.uuid)).toEqual([]);
    expect(await allocs(id)).toEqual([{ node: 'cmp1', vcpus: 1, memoryMb: 2048 }]);
    expect(await placement(id)).toEqual({ cmp1: ['guest'], cmp2: [] });
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
  });

  test('(c) no valid host (the only other cell host disabled): vm unchanged, task None, migration error', TEST, async () => {
    const { id, vol, digest } = await serverWithVolume('fc');
    const svc = serviceUuid('cmp2', 'nova-compute');
    expect((await nova('PUT', `/os-services/${svc}`, { body: { status: 'disabled' }, version: '2.53' })).status).toBe(200);
    try {
      await action(nova, id, { migrate: null });
      const after = await settled(nova, id, LONG);
      expect(after.status).toBe('ACTIVE');
      expect(after['OS-EXT-SRV-ATTR:host']).toBe('cmp1');
      expect((await serverState(id)).instance.fault?.message).toMatch(/No valid host/);
    } finally {
      await nova('PUT', `/os-services/${svc}`, { body: { status: 'enabled' }, version: '2.53' });
    }
    const m = await migrationOf(id);
    expect(m).toMatchObject({ status: 'error', destCompute: null });
    await expectAttachmentOn(id, vol, 'cmp1');
    expect(await allocs(m.uuid)).toEqual([]);
    expect(await allocs(id)).toEqual([{ node: 'cmp1', vcpus: 1, memoryMb: 2048 }]);
    expect(await placement(id)).toEqual({ cmp1: ['guest'], cmp2: [] });
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
  });

  test('(d) confirm fails on the source: keeps running on the destination, migration allocation released, leftovers visible', TEST, async () => {
    const { id, vol, digest } = await serverWithVolume('fd');
    await action(nova, id, { resize: { flavorRef: '2' } });
    expect((await settled(nova, id, LONG)).status).toBe('VERIFY_RESIZE');
    const m = await migrationOf(id);
    injectFault({ kind: 'compute', backend: 'cmp1', method: 'confirmMigration', mode: 'fail', times: 1 });
    try {
      await action(nova, id, { confirmResize: null }, 204);
      const after = await settled(nova, id, LONG);
      expect(after.status).toBe('ACTIVE');
      expect(after['OS-EXT-SRV-ATTR:host']).toBe('cmp2');
      expect((await serverState(id)).instance.fault?.message).toBeTruthy();
    } finally {
      clearFaults();
    }
    expect((await migrationOf(id)).status).toBe('error');
    expect(await allocs(m.uuid)).toEqual([]);
    expect(await allocs(id)).toEqual([{ node: 'cmp2', vcpus: 4, memoryMb: 8192 }]);
    await expectAttachmentOn(id, vol, 'cmp2');
    // The kept disks the source could not remove are left for the audit, and the instance says where.
    expect(await placement(id)).toEqual({ cmp1: ['kept'], cmp2: ['guest'] });
    expect((await serverState(id)).instance.systemMetadata.move_source).toBe('cmp1');
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
    // Deleting the server removes them too.
    expect((await nova('DELETE', `/servers/${id}`)).status).toBe(204);
    expect((await settled(nova, id, LONG)).status).toBe('DELETED');
    expect(await placement(id)).toEqual({ cmp1: [], cmp2: [] });
    expect(await allocs(id)).toEqual([]);
  });

  test('(e) revert fails at the destination: back to VERIFY_RESIZE, and a second revert succeeds', TEST, async () => {
    const { id, vol, digest } = await serverWithVolume('fe');
    await action(nova, id, { resize: { flavorRef: '2' } });
    expect((await settled(nova, id, LONG)).status).toBe('VERIFY_RESIZE');
    const m = await migrationOf(id);
    const destAtt = await expectAttachmentOn(id, vol, 'cmp2');
    injectFault({ kind: 'compute', backend: 'cmp2', method: 'destroy', mode: 'fail', times: 1 });
    try {
      await action(nova, id, { revertResize: null }, 202);
      const after = await settled(nova, id, LONG);
      expect(after.status).toBe('VERIFY_RESIZE');
      expect(after['OS-EXT-SRV-ATTR:host']).toBe('cmp2');
      expect((await serverState(id)).instance.fault?.message).toBeTruthy();
    } finally {
      clearFaults();
    }
    expect((await migrationOf(id)).status).toBe('finished');
    expect(await expectAttachmentOn(id, vol, 'cmp2')).toBe(destAtt);
    expect(await allocs(m.uuid)).toEqual([{ node: 'cmp1', vcpus: 1, memoryMb: 2048 }]);
    expect(await allocs(id)).toEqual([{ node: 'cmp2', vcpus: 4, memoryMb: 8192 }]);
    expect(await placement(id)).toEqual({ cmp1: ['kept'], cmp2: ['guest'] });
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);

    await action(nova, id, { revertResize: null }, 202);
    const reverted = await settled(nova, id, LONG);
    expect(reverted.status).toBe('ACTIVE');
    expect(reverted['OS-EXT-SRV-ATTR:host']).toBe('cmp1');
    expect(reverted.flavor.original_name).toBe('m1.small');
    expect((await migrationOf(id)).status).toBe('reverted');
    await expectAttachmentOn(id, vol, 'cmp1');
    expect(await allocs(m.uuid)).toEqual([]);
    expect(await allocs(id)).toEqual([{ node: 'cmp1', vcpus: 1, memoryMb: 2048 }]);
    expect(await placement(id)).toEqual({ cmp1: ['guest'], cmp2: [] });
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
  });
});
