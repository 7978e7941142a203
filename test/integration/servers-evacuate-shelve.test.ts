/**
 * Evacuate, shelve / shelve-offload / unshelve, and attach / detach while SHELVED_OFFLOADED on the
 * local stack (reference §2.1 rows Evacuate, Shelve, Unshelve, the offloaded attach/detach rows;
 * traces vol_test_08, 09, 10): the attachments API calls in upstream's order, bytes intact, the
 * allocations, the migration, and the failure rows (evacuate spawn fails, evacuate with no valid
 * host, unshelve spawn fails, shelve snapshot fails) ending with BDM attachment ids equal to
 * Cinder's live attachments and nothing left on the wrong host. Its stack and helpers (hosts down,
 * what a host holds, Cinder's live attachments) are in test/support/evacuate-shelve.ts.
 */
import { describe, expect, test } from 'vitest';
import { resetCinderCalls } from '../../functions/servers/cinder.js';
import { injectFault } from '../../functions/core/faults.js';
import { cleanupEvacuatedGuests } from '../../functions/servers/flows/evacuate/host-restart.js';
import '../../functions/servers/flows/shelve/api.js';
import { getImage, listImages } from '../../functions/servers/images.js';
import { listPortsOf } from '../../functions/servers/network.js';
import { allocationsOf } from '../../functions/compute/placement.js';
import { action, bootServer, createVolume, readThroughGuest, serverState, settled, writeThroughGuest } from '../support/nova.js';
import { SMALL_ROOT_FLAVOR, useEvacuateShelveStack } from '../support/evacuate-shelve.js';

const { nova, cinder, callNames, driverOf, nodeUuidOf, guestsOn, connectedVolumesOn, setComputeDown, setServiceDisabled, lastEvacuation, liveAttachments, expectBdmsMatchCinder, volumeOf, attach, eventsOf } =
  useEvacuateShelveStack();

describe('evacuate', () => {
  test('API: body per microversion, policy, host checks, the source must be down', async () => {
    const id = await bootServer(nova, { name: 'evac-api', host: 'cmp1', flavor: SMALL_ROOT_FLAVOR });
    expect((await action(nova, id, { evacuate: {} }, 400, '2.1')).body.badRequest.message).toContain('onSharedStorage');
    await action(nova, id, { evacuate: { force: true } }, 400, '2.68');
    await action(nova, id, { evacuate: { bogus: 1 } }, 400);
    expect((await nova('POST', `/servers/${id}/action`, { body: { evacuate: {} }, token: 'demo:demo' })).status).toBe(404); // not the owner's project
    expect((await action(nova, id, { evacuate: { host: 'nowhere' } }, 404)).body.itemNotFound.message).toBe('Compute host nowhere could not be found.');
    expect((await action(nova, id, { evacuate: { host: 'cmp1' } }, 400)).body.badRequest.message).toBe("The target host can't be the same one.");
    expect((await action(nova, id, { evacuate: {} }, 400)).body.badRequest.message).toBe('Compute service of cmp1 is still in use.');
    expect((await serverState(id)).instance).toMatchObject({ host: 'cmp1', taskState: null, vmState: 'active' });
  }, 240_000);

  test('image-backed server with a data volume off a down host (vol_08), then the source comes back and its stale guest is destroyed', async () => {
    const id = await bootServer(nova, { name: 'evac', host: 'cmp1', flavor: SMALL_ROOT_FLAVOR });
    const vol = await createVolume(cinder, 1, 'evac-data');
    expect(await attach(id, vol)).toBe('/dev/vdb');
    const digest = await writeThroughGuest(id, '/dev/vdb', 'evacuate');
    const before = (await serverState(id)).bdms.find((b) => b.volumeId === vol)!;

    await setComputeDown('cmp1', true);
    try {
      resetCinderCalls();
      const res = await action(nova, id, { evacuate: {} }, 200);
      expect(res.body).toBeUndefined();
      const after = await settled(nova, id);
      expect(after.status).toBe('ACTIVE');
      expect(after['OS-EXT-SRV-ATTR:host']).toBe('cmp2');
      expect(callNames()).toEqual(['attachment_create', 'attachment_delete', 'attachment_update', 'attachment_complete']);
      const bdm = (await serverState(id)).bdms.find((b) => b.volumeId === vol)!;
      expect(bdm.attachmentId).not.toBe(before.attachmentId);
      expect(bdm.connectionInfo).not.toBeNull();
      await expectBdmsMatchCinder(id);
      const v = await volumeOf(vol);
      expect(v.status).toBe('in-use');
      expect(v.attachments).toEqual([expect.objectContaining({ attachment_id: bdm.attachmentId, host_name: 'cmp2' })]);
      expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
      expect((await allocationsOf(id)).map((a) => a.nodeUuid)).toEqual([await nodeUuidOf('cmp2')]);
      expect(await lastEvacuation(id)).toMatchObject({ status: 'done', sourceCompute: 'cmp1', destCompute: 'cmp2' });
      expect((await listPortsOf(id)).map((p) => [p.bindingHostId, Object.keys(p.bindings)])).toEqual([['cmp2', ['cmp2']]]);
      expect(await eventsOf(id, 'evacuate')).toEqual(
        expect.arrayContaining([expect.objectContaining({ event: 'rebuild_server', result: 'Success' }), expect.objectContaining({ event: 'compute_rebuild_instance', result: 'Success' })]),
      );
      expect(await guestsOn('cmp2')).toContain(id);
    } finally {
      await setComputeDown('cmp1', false);
    }
    // The source is back: the guest it had is stale (Nova's _destroy_evacuated_instances).
    expect(await guestsOn('cmp1')).toContain(id);
    expect(await cleanupEvacuatedGuests('cmp1')).toEqual([id]);
    expect(await guestsOn('cmp1')).not.toContain(id);
    expect(await connectedVolumesOn('cmp1')).not.toContain(vol);
    expect((await lastEvacuation(id)).status).toBe('completed');
    expect(await cleanupEvacuatedGuests('cmp1')).toEqual([]);
    expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
    expect((await volumeOf(vol)).status).toBe('in-use');
  }, 240_000);

  test('spawn on the destination fails: ERROR on the source host, migration failed, nothing on the destination, one empty attachment; a second evacuate succeeds', async () => {
    const id = await bootServer(nova, { name: 'evac-fail', host: 'cmp1', flavor: SMALL_ROOT_FLAVOR });
    const vol = await createVolume(cinder, 1, 'evac-fail-data');
    await attach(id, vol);
    const digest = await writeThroughGuest(id, '/dev/vdb', 'evacuate-fail');
    await setComputeDown('cmp1', true);
    try {
      injectFault({ kind: 'compute', backend: 'cmp2', method: 'spawnEvacuated', mode: 'fail', times: 1 });
      resetCinderCalls();
      await action(nova, id, { evacuate: { host: 'cmp2' } }, 200);
      const after = await settled(nova, id);
      expect(after.status).toBe('ERROR');
      expect(after['OS-EXT-SRV-ATTR:host']).toBe('cmp1');
      expect(after.fault.message).toContain('spawnEvacuated');
      // detach_block_devices + _prep_block_device, then the rollback's reset to one empty attachment.
      expect(callNames()).toEqual(['attachment_create', 'attachment_delete', 'attachment_update', 'attachment_complete', 'attachment_create', 'attachment_delete']);
      expect((await lastEvacuation(id)).status).toBe('failed');
      expect((await allocationsOf(id)).map((a) => a.nodeUuid)).toEqual([await nodeUuidOf('cmp1')]);
      expect(await guestsOn('cmp2')).not.toContain(id);
      expect(await (await driverOf('cmp2')).listKeptDisks()).toEqual([]);
      expect(await connectedVolumesOn('cmp2')).not.toContain(vol);
      await expectBdmsMatchCinder(id);
      expect(await liveAttachments(vol)).toEqual([expect.objectContaining({ status: 'reserved', connector: false })]);
      expect((await volumeOf(vol)).status).toBe('reserved');
      expect((await listPortsOf(id)).map((p) => p.bindingHostId)).toEqual(['cmp1']);
      expect(await eventsOf(id, 'evacuate')).toEqual(expect.arrayContaining([expect.objectContaining({ event: 'compute_rebuild_instance', result: 'Error' })]));

      // ERROR may be evacuated again: the volume is switched from its empty attachment.
      resetCinderCalls();
      await action(nova, id, { evacuate: {} }, 200);
      const again = await settled(nova, id);
      expect(again.status).toBe('ACTIVE');
      expect(again['OS-EXT-SRV-ATTR:host']).toBe('cmp2');
      expect(callNames()).toEqual(['attachment_create', 'attachment_delete', 'attachment_update', 'attachment_complete']);
      await expectBdmsMatchCinder(id);
      expect(await readThroughGuest(id, '/dev/vdb')).toBe(digest);
      expect((await allocationsOf(id)).map((a) => a.nodeUuid)).toEqual([await nodeUuidOf('cmp2')]);
    } finally {
      await setComputeDown('cmp1', false);
    }
    expect(await cleanupEvacuatedGuests('cmp1')).toContain(id);
    expect(await guestsOn('cmp1')).not.toContain(id);
  }, 240_000);

  test('no valid host: vm_state kept, migration failed, no Cinder calls, allocation and attachment untouched', async () => {
    const id = await bootServer(nova, { name: 'evac-nohost', host: 'cmp1', flavor: SMALL_ROOT_FLAVOR });
    const vol = await createVolume(cinder, 1, 'evac-nohost-data');
    await attach(id, vol);
    const before = (await serverState(id)).bdms.find((b) => b.volumeId === vol)!;
    await setComputeDown('cmp1', true);
    await setServiceDisabled('cmp2', true);
    try {
      resetCinderCalls();
      await action(nova, id, { evacuate: {} }, 200);
      const after = await settled(nova, id);
      expect(after.status).toBe('ACTIVE');
      expect(after['OS-EXT-SRV-ATTR:host']).toBe('cmp1');
      expect((await serverState(id)).instance.fault?.message).toContain('No valid host');
      expect(callNames()).toEqual([]);
      expect((await lastEvacuation(id)).status).toBe('failed');
      expect((await allocationsOf(id)).map((a) => a.nodeUuid)).toEqual([await nodeUuidOf('cmp1')]);
      expect((await serverState(id)).bdms.find((b) => b.volumeId === vol)!.attachmentId).toBe(before.attachmentId);
      await expectBdmsMatchCinder(id);
    } finally {
      await setServiceDisabled('cmp2', false);
      await setComputeDown('cmp1', false);
    }
    // Nothing was evacuated: the guest on cmp1 is the live one.
    expect(await cleanupEvacuatedGuests('cmp1')).not.toContain(id);
    expect(await guestsOn('cmp1')).toContain(id);
  }, 240_000);
});

describe('shelve, offloaded attach/detach, unshelve', () => {
  test('image-backed: shelve offloads (vol_09), attach and detach while offloaded, unshelve connects every volume with its bytes', async () => {
    const id = await bootServer(nova, { name: 'shelf', flavor: SMALL_ROOT_FLAVOR, host: 'cmp1' });
    const host = (await serverState(id)).instance.host!;
    const volA = await createVolume(cinder, 1, 'shelf-a');
    const volB = await createVolume(cinder, 1, 'shelf-b');
    const volC = await createVolume(cinder, 1, 'shelf-c');
    const devA = (await attach(id, volA))!;
    const digestA = await writeThroughGuest(id, devA, 'shelf-a');
    // B gets its bytes through this server now, and comes back while the server is offloaded.
    const devB = (await attach(id, volB))!;
    const digestB = await writeThroughGuest(id, devB, 'shelf-b');
    expect((await nova('DELETE', `/servers/${id}/os-volume_attachments/${volB}`)).status).toBe(202);
    await settled(nova, id);
    const oldA = (await serverState(id)).bdms.find((b) => b.volumeId === volA)!.attachmentId;

    resetCinderCalls();
    await action(nova, id, { shelve: null });
    const shelved = await settled(nova, id);
    expect(shelved.status).toBe('SHELVED_OFFLOADED');
    expect(shelved['OS-EXT-SRV-ATTR:host']).toBeNull();
    expect(callNames()).toEqual(['attachment_create', 'attachment_delete']);
    const { instance, bdms } = await serverState(id);
    expect(instance).toMatchObject({ vmState: 'shelved_offloaded', taskState: null, host: null, node: null });
    const imageId = instance.systemMetadata.shelved_image_id!;
    const image = await getImage(imageId);
    expect(image).toMatchObject({ name: 'shelf-shelved', status: 'active', ownerProjectId: instance.projectId });
    expect(image.sizeBytes).toBeGreaterThan(0);
    expect(await allocationsOf(id)).toEqual([]);
    expect(await guestsOn(host)).not.toContain(id);
    expect(await connectedVolumesOn(host)).not.toContain(volA);
    expect((await listPortsOf(id)).map((p) => [p.bindingHostId, Object.keys(p.bindings)])).toEqual([[null, []]]);
    const bdmA = bdms.find((b) => b.volumeId === volA)!;
    expect(bdmA.attachmentId).not.toBe(oldA);
    expect(bdmA.connectionInfo).toBeNull();
    await expectBdmsMatchCinder(id);
    // attachment_create without a connector: Cinder shows a reserved attachment, the volume 'reserved'.
    expect(await liveAttachments(volA)).toEqual([expect.objectContaining({ status: 'reserved', connector: false })]);
    expect((await volumeOf(volA)).status).toBe('reserved');
    expect(await eventsOf(id, 'shelve')).toEqual([
      expect.objectContaining({ event: 'compute_shelve_instance', result: 'Success' }),
      expect.objectContaining({ event: 'compute_shelve_offload_instance', result: 'Success' }),
    ]);

    // Attach while offloaded: API only (create, complete without a connector: 'in-use').
    resetCinderCalls();
    expect(await attach(id, volB)).toBeNull();
    expect(callNames()).toEqual(['attachment_create', 'attachment_complete']);
    expect((await volumeOf(volB)).status).toBe('in-use');
    // Attach and detach C while offloaded: the attachment is deleted, C available again.
    await attach(id, volC);
    resetCinderCalls();
    expect((await nova('DELETE', `/servers/${id}/os-volume_attachments/${volC}`)).status).toBe(202);
    await settled(nova, id);
    expect(callNames()).toEqual(['attachment_delete']);
    expect((await volumeOf(volC)).status).toBe('available');
    expect(await liveAttachments(volC)).toEqual([]);
    expect((await serverState(id)).bdms.map((b) => b.volumeId)).not.toContain(volC);
    await expectBdmsMatchCinder(id);

    resetCinderCalls();
    await action(nova, id, { unshelve: null });
    const back = await settled(nova, id);
    expect(back.status).toBe('ACTIVE');
    const newHost = back['OS-EXT-SRV-ATTR:host'] as string;
    expect(['cmp1', 'cmp2']).toContain(newHost);
    expect(callNames()).toEqual(['attachment_update', 'attachment_complete', 'attachment_update', 'attachment_complete']);
    const after = await serverState(id);
    const bdmB = after.bdms.find((b) => b.volumeId === volB)!;
    expect(bdmB.deviceName).toMatch(/^\/dev\/vd[c-z]$/);
    expect(after.instance.systemMetadata.shelved_image_id).toBeUndefined();
    await expect(getImage(imageId)).rejects.toThrow();
    await expectBdmsMatchCinder(id);
    for (const v of [volA, volB]) expect((await volumeOf(v)).attachments).toEqual([expect.objectContaining({ host_name: newHost })]);
    expect(await readThroughGuest(id, devA)).toBe(digestA);
    expect(await readThroughGuest(id, bdmB.deviceName!)).toBe(digestB);
    expect((await allocationsOf(id)).map((a) => a.nodeUuid)).toEqual([await nodeUuidOf(newHost)]);
    expect((await listPortsOf(id)).map((p) => p.bindingHostId)).toEqual([newHost]);
  }, 240_000);

  test('volume-backed: shelve goes straight to offload (no image), unshelve boots the volume again', async () => {
    const boot = await createVolume(cinder, 1, 'shelf-boot');
    const id = await bootServer(nova, { name: 'shelf-bfv', bootVolume: boot });
    const rootDigest = await writeThroughGuest(id, '/dev/vda', 'shelf-boot');
    const imagesBefore = (await listImages('admin', true)).length;
    resetCinderCalls();
    await action(nova, id, { shelve: null });
    expect((await settled(nova, id)).status).toBe('SHELVED_OFFLOADED');
    expect(callNames()).toEqual(['attachment_create', 'attachment_delete']);
    const { instance } = await serverState(id);
    expect(instance.systemMetadata.shelved_image_id).toBeUndefined();
    expect((await listImages('admin', true)).length).toBe(imagesBefore);
    expect(await eventsOf(id, 'shelve')).toEqual([expect.objectContaining({ event: 'compute_shelve_offload_instance', result: 'Success' })]);
    expect(await allocationsOf(id)).toEqual([]);
    await expectBdmsMatchCinder(id);
    // shelveOffload needs SHELVED.
    await action(nova, id, { shelveOffload: null }, 409);

    resetCinderCalls();
    await action(nova, id, { unshelve: null });
    expect((await settled(nova, id)).status).toBe('ACTIVE');
    expect(callNames()).toEqual(['attachment_update', 'attachment_complete']);
    expect(await readThroughGuest(id, '/dev/vda')).toBe(rootDigest);
    await expectBdmsMatchCinder(id);
    expect(await allocationsOf(id)).toHaveLength(1);
  }, 240_000);

  test('unshelve API: bodies by microversion, unshelve to a host needs admin', async () => {
    const id = await bootServer(nova, { name: 'shelf-api', flavor: SMALL_ROOT_FLAVOR, host: 'cmp1' });
    await action(nova, id, { unshelve: null }, 409); // not shelved
    // Nova's shelve schema is `{}`: any value is accepted (and ignored).
    await action(nova, id, { shelve: { x: 1 } });
    expect((await settled(nova, id)).status).toBe('SHELVED_OFFLOADED');
    await action(nova, id, { unshelve: {} }, 400, '2.77');
    await action(nova, id, { unshelve: { host: 'cmp2' } }, 400, '2.77');
    await action(nova, id, { unshelve: { availability_zone: 'elsewhere' } }, 400, '2.77');
    await action(nova, id, { unshelve: { host: 'nowhere' } }, 400, '2.91');
    expect((await nova('POST', `/servers/${id}/action`, { body: { unshelve: { host: 'cmp2' } }, token: 'demo:demo' })).status).toBe(404);
    await action(nova, id, { unshelve: { availability_zone: null, host: 'cmp2' } }, 202, '2.91');
    const back = await settled(nova, id);
    expect(back.status).toBe('ACTIVE');
    expect(back['OS-EXT-SRV-ATTR:host']).toBe('cmp2');
  }, 240_000);

  test('unshelve spawn fails (vol_10): stays SHELVED_OFFLOADED, allocations gone, attachments back to empty, image kept; a retry succeeds', async () => {
    const id = await bootServer(nova, { name: 'unshelf-fail', flavor: SMALL_ROOT_FLAVOR });
    const vol = await createVolume(cinder, 1, 'unshelf-fail-data');
    const dev = (await attach(id, vol))!;
    const digest = await writeThroughGuest(id, dev, 'unshelve-fail');
    await action(nova, id, { shelve: null });
    expect((await settled(nova, id)).status).toBe('SHELVED_OFFLOADED');
    const imageId = (await serverState(id)).instance.systemMetadata.shelved_image_id!;
    const reserved = (await serverState(id)).bdms.find((b) => b.volumeId === vol)!.attachmentId;

    injectFault({ kind: 'compute', method: 'spawn', mode: 'fail', times: 1 });
    resetCinderCalls();
    await action(nova, id, { unshelve: null });
    const after = await settled(nova, id);
    expect(after.status).toBe('SHELVED_OFFLOADED');
    expect(after['OS-EXT-STS:task_state']).toBeNull();
    expect(after['OS-EXT-SRV-ATTR:host']).toBeNull();
    expect(callNames()).toEqual(['attachment_update', 'attachment_complete', 'attachment_create', 'attachment_delete']);
    const { instance, bdms } = await serverState(id);
    expect(instance).toMatchObject({ vmState: 'shelved_offloaded', host: null, node: null });
    expect(bdms.find((b) => b.volumeId === vol)!.attachmentId).not.toBe(reserved);
    await expectBdmsMatchCinder(id);
    expect(await liveAttachments(vol)).toEqual([expect.objectContaining({ status: 'reserved', connector: false })]);
    expect(await allocationsOf(id)).toEqual([]);
    expect((await getImage(imageId)).status).toBe('active');
    for (const h of ['cmp1', 'cmp2']) {
      expect(await guestsOn(h)).not.toContain(id);
      expect(await connectedVolumesOn(h)).not.toContain(vol);
    }
    expect((await listPortsOf(id)).map((p) => p.bindingHostId)).toEqual([null]);
    expect(await eventsOf(id, 'unshelve')).toEqual([expect.objectContaining({ event: 'compute_unshelve_instance', result: 'Error' })]);

    await action(nova, id, { unshelve: null });
    expect((await settled(nova, id)).status).toBe('ACTIVE');
    expect(await readThroughGuest(id, dev)).toBe(digest);
    await expectBdmsMatchCinder(id);
  }, 240_000);

  test('shelve snapshot fails: back to ACTIVE and running, no image left, nothing released', async () => {
    const id = await bootServer(nova, { name: 'shelf-snapfail', flavor: SMALL_ROOT_FLAVOR });
    const vol = await createVolume(cinder, 1, 'shelf-snapfail-data');
    const dev = (await attach(id, vol))!;
    const digest = await writeThroughGuest(id, dev, 'shelve-snapshot-fails');
    const { instance: before, bdms: bdmsBefore } = await serverState(id);
    injectFault({ kind: 'compute', backend: before.host!, method: 'snapshot', mode: 'fail', times: 1 });
    resetCinderCalls();
    await action(nova, id, { shelve: null });
    const after = await settled(nova, id);
    expect(after.status).toBe('ACTIVE');
    expect(after['OS-EXT-STS:power_state']).toBe(1);
    expect(after['OS-EXT-SRV-ATTR:host']).toBe(before.host);
    expect(callNames()).toEqual([]);
    expect((await listImages('admin', true)).filter((i) => i.name === 'shelf-snapfail-shelved')).toEqual([]);
    const { instance, bdms } = await serverState(id);
    expect(instance.systemMetadata.shelved_image_id).toBeUndefined();
    expect(bdms.map((b) => b.attachmentId)).toEqual(bdmsBefore.map((b) => b.attachmentId));
    await expectBdmsMatchCinder(id);
    expect(await allocationsOf(id)).toHaveLength(1);
    expect((await (await driverOf(before.host!)).getGuest(id))?.powerState).toBe(1);
    expect(await readThroughGuest(id, dev)).toBe(digest);
    expect(await eventsOf(id, 'shelve')).toEqual([expect.objectContaining({ event: 'compute_shelve_instance', result: 'Error' })]);
  }, 240_000);

  test('shelve-offload fails (reverts_task_state): stays SHELVED on its host with its volume connected; a second offload succeeds', async () => {
    const id = await bootServer(nova, { name: 'shelf-offfail', flavor: SMALL_ROOT_FLAVOR });
    const vol = await createVolume(cinder, 1, 'shelf-offfail-data');
    const dev = (await attach(id, vol))!;
    const digest = await writeThroughGuest(id, dev, 'offload-fails');
    process.env.FERRY_SHELVED_OFFLOAD_TIME = '-1';
    try {
      await action(nova, id, { shelve: null });
      expect((await settled(nova, id)).status).toBe('SHELVED');
    } finally {
      delete process.env.FERRY_SHELVED_OFFLOAD_TIME;
    }
    const { instance: shelved, bdms: bdmsBefore } = await serverState(id);
    injectFault({ kind: 'compute', backend: shelved.host!, method: 'destroy', mode: 'fail', times: 1 });
    resetCinderCalls();
    await action(nova, id, { shelveOffload: null });
    const after = await settled(nova, id);
    expect(after.status).toBe('SHELVED');
    expect(after['OS-EXT-SRV-ATTR:host']).toBe(shelved.host);
    expect(callNames()).toEqual([]);
    const { bdms } = await serverState(id);
    expect(bdms.map((b) => b.attachmentId)).toEqual(bdmsBefore.map((b) => b.attachmentId));
    await expectBdmsMatchCinder(id);
    expect(await allocationsOf(id)).toHaveLength(1);
    expect(await eventsOf(id, 'shelveOffload')).toEqual([expect.objectContaining({ event: 'compute_shelve_offload_instance', result: 'Error' })]);
    // Again, without the fault: offloaded, then unshelved with the bytes.
    await action(nova, id, { shelveOffload: null });
    expect((await settled(nova, id)).status).toBe('SHELVED_OFFLOADED');
    expect(await allocationsOf(id)).toHaveLength(0);
    await action(nova, id, { unshelve: null });
    expect((await settled(nova, id)).status).toBe('ACTIVE');
    expect(await readThroughGuest(id, dev)).toBe(digest);
  }, 240_000);

  test('attach while offloaded fails at attachment_create (volume in error): 400, no BDM left, nothing reserved', async () => {
    const id = await bootServer(nova, { name: 'shelf-attfail', flavor: SMALL_ROOT_FLAVOR });
    await action(nova, id, { shelve: null });
    expect((await settled(nova, id)).status).toBe('SHELVED_OFFLOADED');
    const vol = await createVolume(cinder, 1, 'shelf-attfail-data');
    expect((await cinder('POST', `/volumes/${vol}/action`, { 'os-reset_status': { status: 'error' } })).status).toBe(202);
    const res = await nova('POST', `/servers/${id}/os-volume_attachments`, { body: { volumeAttachment: { volumeId: vol } } });
    expect(res.status).toBe(400);
    expect((await serverState(id)).bdms).toEqual([]);
    expect((await cinder('GET', `/attachments?volume_id=${vol}`)).body.attachments).toEqual([]);
    expect((await settled(nova, id)).status).toBe('SHELVED_OFFLOADED');
    await cinder('POST', `/volumes/${vol}/action`, { 'os-reset_status': { status: 'available' } });
  }, 240_000);
});
