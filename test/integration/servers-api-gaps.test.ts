/**
 * The Nova API gaps Tempest and a probe found (issue 15), on the local stack over real HTTP (and
 * the real `nova` CLI where it sends the request): the action values Nova's schemas accept
 * (`{}` as well as null for confirmResize, revertResize, shelve; reboot's six spellings),
 * `GET /servers/{id}/ips[/{label}]`, lock / unlock with 2.73's locked_reason and what a lock
 * refuses to non-admins, pause / unpause / suspend / resume and rebuild as tested transitions
 * (each a conditional write from task_state None, so of two at once one wins). Every refusal is
 * checked to change nothing (test/support/server-state.ts).
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { computeDriverFor } from '../../functions/drivers/compute/registry.js';
import { nodeOfHost } from '../../functions/servers/engine.js';
import { SANDBOX_IMAGES } from '../../functions/servers/images.js';
import { POWER_STATE } from '../../functions/drivers/compute/driver.js';
import { novaCli } from '../support/cli.js';
import { action, assertCleanAudit, bootServer, cinderClient, createVolume, novaClient, serverState, settled, type Cinder, type Nova } from '../support/nova.js';
import { changesNothing } from '../support/server-state.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
let nova: Nova; // admin
let demo: Nova;
let cinder: Cinder;
beforeAll(async () => {
  stack = await useLocalStack();
  nova = novaClient(stack);
  demo = novaClient(stack, { token: 'demo:demo' });
  cinder = cinderClient(stack, 'demo:demo');
}, 120_000);
afterAll(async () => stack?.stop());

const LONG = 240_000;
const TEST = { timeout: 600_000 };
const servers: string[] = [];
afterEach(async () => {
  for (const id of servers.splice(0)) {
    await nova('POST', `/servers/${id}/action`, { body: { unlock: null } });
    await nova('DELETE', `/servers/${id}`);
    await settled(nova, id, LONG);
  }
  await assertCleanAudit();
}, 300_000);
const boot = async (opts: Parameters<typeof bootServer>[1] = {}) => {
  const id = await bootServer(demo, opts);
  servers.push(id);
  return id;
};
const endpoint = () => `${stack.url}/compute/v2.1`;
const guestOf = async (id: string) => {
  const { instance } = await serverState(id);
  return computeDriverFor((await nodeOfHost(instance.host!)).node.config).getGuest(id);
};
/** The instance actions, newest first, as os-instance-actions lists them. */
const actionNames = async (id: string): Promise<string[]> => ((await nova('GET', `/servers/${id}/os-instance-actions`)).body.instanceActions as { action: string }[]).map((a) => a.action);
const fault = (res: { body: any }) => res.body.badRequest?.message ?? res.body.conflictingRequest?.message ?? res.body.forbidden?.message ?? res.body.itemNotFound?.message;

describe('action values as Nova validates them', () => {
  test('confirmResize, revertResize and shelve take {} (Tempest) as well as null; reboot takes Nova\'s six spellings only', TEST, async () => {
    const id = await boot({ name: 'values' });
    await action(nova, id, { migrate: null });
    expect((await settled(nova, id, LONG)).status).toBe('VERIFY_RESIZE');
    await action(demo, id, { revertResize: {} });
    expect((await settled(nova, id, LONG)).status).toBe('ACTIVE');
    await action(nova, id, { migrate: null });
    expect((await settled(nova, id, LONG)).status).toBe('VERIFY_RESIZE');
    const confirmed = await action(demo, id, { confirmResize: {} }, 204);
    expect(confirmed.body).toBeUndefined();
    expect((await settled(nova, id, LONG)).status).toBe('ACTIVE');

    await action(demo, id, { reboot: { type: 'hard' } });
    expect((await settled(nova, id, LONG)).status).toBe('ACTIVE');
    const refused = await changesNothing(() => demo('POST', `/servers/${id}/action`, { body: { reboot: { type: 'HARD', bogus: 1 } } }));
    expect(refused.status).toBe(400);
    expect(fault(refused)).toBe(`Invalid input for field/attribute reboot. Value: {"type":"HARD","bogus":1}. Additional properties are not allowed ('bogus' was unexpected)`);
    const warm = await changesNothing(() => demo('POST', `/servers/${id}/action`, { body: { reboot: { type: 'WARM' } } }));
    expect(warm.status).toBe(400);

    await action(demo, id, { shelve: {} });
    expect((await settled(nova, id, LONG)).status).toMatch(/^SHELVED/);
    await action(demo, id, { unshelve: null });
    expect((await settled(nova, id, LONG)).status).toBe('ACTIVE');
    const names = (await actionNames(id));
    expect(names).toEqual(expect.arrayContaining(['revertResize', 'confirmResize', 'reboot', 'shelve', 'unshelve']));
  });
});

describe('GET /servers/{id}/ips', () => {
  test('the addresses by label ({version, addr} only), one label, and Nova\'s 404s', TEST, async () => {
    const id = await boot({ name: 'ips' });
    const show = (await demo('GET', `/servers/${id}`)).body.server;
    const addr = show.addresses.private[0].addr as string;
    const all = await demo('GET', `/servers/${id}/ips`);
    expect(all.status).toBe(200);
    expect(all.body).toEqual({ addresses: { private: [{ version: 4, addr }] } });
    const one = await demo('GET', `/servers/${id}/ips/private`);
    expect(one.status).toBe(200);
    expect(one.body).toEqual({ private: [{ version: 4, addr }] });
    const other = await demo('GET', `/servers/${id}/ips/public`);
    expect(other.status).toBe(404);
    expect(other.body).toEqual({ itemNotFound: { code: 404, message: 'Instance is not a member of specified network' } });
    // Another project does not see the server at all (Nova's get_instance 404).
    const stranger = await novaClient(stack, { token: 'alt:alt' })('GET', `/servers/${id}/ips`);
    expect(stranger.status).toBe(404);
    expect((await demo('GET', '/servers/00000000-0000-0000-0000-000000000000/ips')).status).toBe(404);
  });
});

describe('lock and unlock', () => {
  test('an owner\'s lock with a reason (2.73, nova CLI); what it refuses the owner; what an admin may', TEST, async () => {
    const id = await boot({ name: 'locked' });
    const cli = await novaCli(endpoint(), ['lock', '--reason', 'maintenance window', id], { token: 'demo:demo', project: 'demo', version: '2.73' });
    expect(cli.code, cli.stderr).toBe(0);
    const shown = (await demo('GET', `/servers/${id}`, { version: '2.73' })).body.server;
    expect(shown).toMatchObject({ locked: true, locked_reason: 'maintenance window' });
    expect((await serverState(id)).instance.lockedBy).toBe('owner');
    // Before 2.73 locked_reason is not shown; before 2.9 neither is locked.
    expect((await demo('GET', `/servers/${id}`, { version: '2.72' })).body.server.locked_reason).toBeUndefined();

    for (const body of [{ 'os-stop': null }, { reboot: { type: 'HARD' } }, { pause: null }, { suspend: null }, { shelve: null }, { rebuild: { imageRef: SANDBOX_IMAGES.ferryTiny.id } }]) {
      const res = await changesNothing(() => demo('POST', `/servers/${id}/action`, { body }));
      expect(res.status, JSON.stringify(body)).toBe(409);
      expect(res.body).toEqual({ conflictingRequest: { code: 409, message: `Instance ${id} is locked` } });
    }
    const del = await changesNothing(() => demo('DELETE', `/servers/${id}`));
    expect(del.status).toBe(409);
    const vol = await createVolume(cinder, 1, 'locked-vol');
    const attach = await changesNothing(() => demo('POST', `/servers/${id}/os-volume_attachments`, { body: { volumeAttachment: { volumeId: vol } } }));
    expect(attach.status).toBe(409);
    await cinder('DELETE', `/volumes/${vol}`);

    // A second lock by the owner changes nothing (API.lock returns early).
    await changesNothing(() => action(demo, id, { lock: null }));
    // A bad reason is refused at 2.73.
    const bad = await changesNothing(() => demo('POST', `/servers/${id}/action`, { body: { lock: { locked_reason: '' } } , version: '2.73' }));
    expect(bad.status).toBe(400);

    // An admin is not held by the lock.
    await action(nova, id, { 'os-stop': null });
    expect((await settled(nova, id, LONG)).status).toBe('SHUTOFF');
    await action(demo, id, { unlock: null });
    expect((await demo('GET', `/servers/${id}`, { version: '2.73' })).body.server).toMatchObject({ locked: false, locked_reason: null });
    await action(demo, id, { 'os-start': null });
    expect((await settled(nova, id, LONG)).status).toBe('ACTIVE');
  });

  test('an admin\'s lock: the owner may not lift it (unlock_override), an admin may', TEST, async () => {
    const id = await boot({ name: 'admin-locked' });
    await action(nova, id, { lock: null });
    expect((await serverState(id)).instance.lockedBy).toBe('admin');
    const refused = await changesNothing(() => demo('POST', `/servers/${id}/action`, { body: { unlock: null } }));
    expect(refused.status).toBe(403);
    expect(fault(refused)).toContain('os_compute_api:os-lock-server:unlock:unlock_override');
    await action(nova, id, { unlock: null });
    const { instance } = await serverState(id);
    expect(instance).toMatchObject({ locked: false, lockedBy: null });
    expect((await actionNames(id)).slice(0, 2)).toEqual(['unlock', 'lock']);
  });
});

describe('pause, unpause, suspend, resume', () => {
  test('each a transition of the instance and of the guest (nova CLI), refused from the wrong state without a change', TEST, async () => {
    const id = await boot({ name: 'guest-states' });
    const run = async (verb: string) => {
      const r = await novaCli(endpoint(), [verb, id], { token: 'demo:demo', project: 'demo' });
      expect(r.code, `${verb}: ${r.stderr}`).toBe(0);
      return settled(nova, id, LONG);
    };
    expect((await run('pause')).status).toBe('PAUSED');
    expect((await guestOf(id))?.powerState).toBe(POWER_STATE.PAUSED);
    expect((await serverState(id)).instance).toMatchObject({ vmState: 'paused', powerState: POWER_STATE.PAUSED, taskState: null });
    const twice = await changesNothing(() => demo('POST', `/servers/${id}/action`, { body: { pause: null } }));
    expect(twice.body).toEqual({ conflictingRequest: { code: 409, message: `Cannot 'pause' instance ${id} while it is in vm_state paused` } });
    expect((await run('unpause')).status).toBe('ACTIVE');
    expect((await guestOf(id))?.powerState).toBe(POWER_STATE.RUNNING);

    const resume = await changesNothing(() => demo('POST', `/servers/${id}/action`, { body: { resume: null } }));
    expect(resume.body).toEqual({ conflictingRequest: { code: 409, message: `Cannot 'resume' instance ${id} while it is in vm_state active` } });
    expect((await run('suspend')).status).toBe('SUSPENDED');
    expect((await guestOf(id))?.powerState).toBe(POWER_STATE.SUSPENDED);
    expect((await run('resume')).status).toBe('ACTIVE');
    expect((await guestOf(id))?.powerState).toBe(POWER_STATE.RUNNING);
    const names = (await actionNames(id));
    expect(names.slice(0, 4)).toEqual(['resume', 'suspend', 'unpause', 'pause']);
  });

  test('two pauses at once: the conditional write lets one through, the other is 409', TEST, async () => {
    const id = await boot({ name: 'race' });
    const results = await Promise.all([0, 1].map(() => demo('POST', `/servers/${id}/action`, { body: { pause: {} } })));
    expect(results.map((r) => r.status).sort()).toEqual([202, 409]);
    expect((await settled(nova, id, LONG)).status).toBe('PAUSED');
    expect((await actionNames(id)).filter((a) => a === 'pause')).toHaveLength(1);
    await action(demo, id, { unpause: null });
    await settled(nova, id, LONG);
  });
});

describe('rebuild', () => {
  test('onto another image: the guest respawned from it, name and metadata replaced; refusals change nothing', TEST, async () => {
    const id = await boot({ name: 'rebuild-me' });
    const before = await guestOf(id);
    expect(before?.imageRef).toBe(SANDBOX_IMAGES.cirrosTiny.id);

    const unknown = await changesNothing(() => demo('POST', `/servers/${id}/action`, { body: { rebuild: { imageRef: '00000000-0000-0000-0000-000000000000' } } }));
    expect(unknown.body).toEqual({ badRequest: { code: 400, message: 'Cannot find image for rebuild' } });
    const extra = await changesNothing(() => demo('POST', `/servers/${id}/action`, { body: { rebuild: { imageRef: SANDBOX_IMAGES.ferryTiny.id, bogus: true } } }));
    expect(extra.status).toBe(400);
    const missing = await changesNothing(() => demo('POST', `/servers/${id}/action`, { body: { rebuild: {} } }));
    expect(fault(missing)).toBe(`Invalid input for field/attribute rebuild. Value: {}. 'imageRef' is a required property`);

    const res = await action(demo, id, { rebuild: { imageRef: SANDBOX_IMAGES.ferryTiny.id, name: 'rebuilt', metadata: { role: 'db' }, adminPass: 'secret' } });
    expect(res.body.server).toMatchObject({ id, name: 'rebuilt', status: 'REBUILD', image: { id: SANDBOX_IMAGES.ferryTiny.id }, metadata: { role: 'db' }, adminPass: 'secret' });
    // 2.93: everything show has (key_name from 2.54, extended attributes from 2.75), user_data
    // and server_groups, but never OS-EXT-SRV-ATTR:user_data (show_user_data=False).
    expect(res.body.server).toMatchObject({ key_name: null, user_data: null, server_groups: [], locked: false, 'OS-EXT-STS:task_state': 'rebuilding' });
    expect(res.body.server).not.toHaveProperty('OS-EXT-SRV-ATTR:user_data');
    const after = await settled(nova, id, LONG);
    expect(after).toMatchObject({ status: 'ACTIVE', name: 'rebuilt', image: { id: SANDBOX_IMAGES.ferryTiny.id } });
    const guest = await guestOf(id);
    expect(guest).toMatchObject({ imageRef: SANDBOX_IMAGES.ferryTiny.id, powerState: POWER_STATE.RUNNING, rootDisk: 'local' });

    // A stopped server is rebuilt and stays stopped. (Not through `nova rebuild`: the CLI looks the
    // image up in Glance's /v2/images, which the admin_token endpoint setup cannot reach.)
    await action(demo, id, { 'os-stop': null });
    await settled(nova, id, LONG);
    // At 2.1 the response is rebuild_response's: no key_name (2.54), locked (2.9), description
    // (2.19), tags (2.26), user_data (2.57), server_groups (2.71) nor extended attributes (2.75).
    const old = await action(demo, id, { rebuild: { imageRef: SANDBOX_IMAGES.cirrosTiny.id } }, 202, '2.1');
    expect(Object.keys(old.body.server).sort()).toEqual(
      ['OS-DCF:diskConfig', 'accessIPv4', 'accessIPv6', 'adminPass', 'addresses', 'created', 'flavor', 'hostId', 'id', 'image', 'links', 'metadata', 'name', 'progress', 'status', 'tenant_id', 'updated', 'user_id'].sort(),
    );
    // extend_address is False too: each address is only version and addr.
    const ips = Object.values(old.body.server.addresses as Record<string, Record<string, unknown>[]>).flat();
    expect(ips.length).toBeGreaterThan(0);
    for (const ip of ips) expect(Object.keys(ip).sort()).toEqual(['addr', 'version']);
    expect((await settled(nova, id, LONG)).status).toBe('SHUTOFF');
    expect(await guestOf(id)).toMatchObject({ imageRef: SANDBOX_IMAGES.cirrosTiny.id, powerState: POWER_STATE.SHUTDOWN });
  });

  test('a volume-backed server is refused (Ferry does not reimage volumes)', TEST, async () => {
    const root = await createVolume(cinder, 1, 'root');
    const id = await boot({ name: 'bfv', bootVolume: root });
    const res = await changesNothing(() => demo('POST', `/servers/${id}/action`, { body: { rebuild: { imageRef: SANDBOX_IMAGES.cirrosTiny.id } } }));
    expect(res.body).toEqual({ badRequest: { code: 400, message: `Image ${SANDBOX_IMAGES.cirrosTiny.id} is unacceptable: Unable to rebuild with a different image for a volume-backed server.` } });
  });
});
