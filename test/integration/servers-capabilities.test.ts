/**
 * The compute driver's capabilities, checked by the API before anything starts: a live migration
 * when the host's driver cannot live-migrate, a swap when it cannot swap volumes, and an attach,
 * a boot from a volume or a swap whose volume's driver_volume_type the host's driver cannot
 * connect are refused with a 400, and nothing changed: no attachment, no BDM, no task_state, no
 * instance action, no migration, no server.
 *
 * The local driver can do all of it, so each test narrows what it declares (a spy on its
 * `capabilities()`, which every compute host's driver answers from in this process).
 */
import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from 'vitest';
import type { ComputeDriverCapabilities } from '../../functions/drivers/compute/driver.js';
import { LocalComputeDriver } from '../../functions/drivers/compute/local.js';
import { listMigrations } from '../../functions/servers/migrations.js';
import { assertCleanAudit, bootServer, cinderClient, createVolume, novaClient, serverState, settled, volumeStatus, type Cinder, type Nova } from '../support/nova.js';
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
afterEach(() => vi.restoreAllMocks());

const EVERYTHING: ComputeDriverCapabilities = { volumeTypes: ['local'], liveMigration: true, swapVolume: true };

/** Every compute host's driver declares `caps` from now until the test ends. */
function declare(caps: Partial<ComputeDriverCapabilities>): void {
  vi.spyOn(LocalComputeDriver.prototype, 'capabilities').mockReturnValue({ ...EVERYTHING, ...caps });
}

/** What the refusal must leave as it was: the instance's state, its BDMs and actions, its migrations. */
async function snapshot(id: string) {
  const { instance, bdms } = await serverState(id);
  const actions = (await nova('GET', `/servers/${id}/os-instance-actions`)).body.instanceActions.length;
  const migrations = (await listMigrations()).filter((m) => m.migration.instanceUuid === id).length;
  return {
    vmState: instance.vmState,
    taskState: instance.taskState,
    operation: instance.operation,
    host: instance.host,
    bdms: bdms.map((b) => ({ volumeId: b.volumeId, attachmentId: b.attachmentId })),
    actions,
    migrations,
  };
}

describe('refused up front by the host driver capabilities', () => {
  test('attach of a volume whose driver_volume_type the host cannot connect: 400, nothing attached', async () => {
    const id = await bootServer(nova, { name: 'cap-attach' });
    const vol = await createVolume(cinder, 1, 'cap-attach-vol');
    const before = await snapshot(id);
    declare({ volumeTypes: ['iscsi'] });
    const res = await nova('POST', `/servers/${id}/os-volume_attachments`, { body: { volumeAttachment: { volumeId: vol } } });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.badRequest.message).toMatch(/driver_volume_type local\) cannot be connected by the compute driver of host cmp\d/);
    expect(await snapshot(id)).toEqual(before);
    expect(await volumeStatus(cinder, vol)).toEqual({ status: 'available', attachments: [] });
    vi.restoreAllMocks();
    expect((await nova('DELETE', `/servers/${id}`)).status).toBe(204);
    await settled(nova, id);
  });

  test('boot from a volume the chosen host cannot connect: 400, no server, the volume untouched', async () => {
    const vol = await createVolume(cinder, 1, 'cap-boot-vol');
    const servers = async () => (await nova('GET', '/servers?all_tenants=1')).body.servers.length;
    const count = await servers();
    declare({ volumeTypes: ['aws_ebs'] });
    const res = await nova('POST', '/servers', {
      body: { server: { name: 'cap-bfv', flavorRef: '1', networks: 'auto', block_device_mapping_v2: [{ boot_index: 0, uuid: vol, source_type: 'volume', destination_type: 'volume' }] } },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.badRequest.message).toMatch(new RegExp(`volume ${vol} \\(driver_volume_type local\\) cannot be connected`));
    expect(await servers()).toBe(count);
    expect(await volumeStatus(cinder, vol)).toEqual({ status: 'available', attachments: [] });
  });

  test('live migration when the driver cannot live-migrate: 400, no migration, no task_state', async () => {
    const id = await bootServer(nova, { name: 'cap-live' });
    const before = await snapshot(id);
    declare({ liveMigration: false });
    const res = await nova('POST', `/servers/${id}/action`, { body: { 'os-migrateLive': { host: null, block_migration: 'auto' } } });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.badRequest.message).toMatch(/does not support live migration/);
    expect(await snapshot(id)).toEqual(before);
    vi.restoreAllMocks();
    expect((await nova('DELETE', `/servers/${id}`)).status).toBe(204);
    await settled(nova, id);
  });

  test('swap when the driver cannot swap, or cannot connect the new volume: 400, both volumes as they were', async () => {
    const id = await bootServer(nova, { name: 'cap-swap' });
    const oldVol = await createVolume(cinder, 1, 'cap-swap-old');
    const newVol = await createVolume(cinder, 1, 'cap-swap-new');
    expect((await nova('POST', `/servers/${id}/os-volume_attachments`, { body: { volumeAttachment: { volumeId: oldVol } } })).status).toBe(200);
    await settled(nova, id);
    const before = await snapshot(id);
    const oldBefore = await volumeStatus(cinder, oldVol);
    expect(oldBefore.status).toBe('in-use');
    const swap = () => nova('PUT', `/servers/${id}/os-volume_attachments/${oldVol}`, { body: { volumeAttachment: { volumeId: newVol } } });

    declare({ swapVolume: false });
    const noSwap = await swap();
    expect(noSwap.status, JSON.stringify(noSwap.body)).toBe(400);
    expect(noSwap.body.badRequest.message).toMatch(/Swapping a volume is not supported by the compute driver of host cmp\d/);
    vi.restoreAllMocks();

    declare({ volumeTypes: ['iscsi'] });
    const noConnect = await swap();
    expect(noConnect.status, JSON.stringify(noConnect.body)).toBe(400);
    expect(noConnect.body.badRequest.message).toMatch(/driver_volume_type local\) cannot be connected/);
    vi.restoreAllMocks();

    expect(await snapshot(id)).toEqual(before);
    expect(await volumeStatus(cinder, oldVol)).toEqual(oldBefore);
    expect(await volumeStatus(cinder, newVol)).toEqual({ status: 'available', attachments: [] });
    expect((await nova('DELETE', `/servers/${id}`)).status).toBe(204);
    await settled(nova, id);
    await assertCleanAudit();
  });
});
