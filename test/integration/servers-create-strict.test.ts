/**
 * `POST /servers` as strict as Nova's schema (issue 15's probe: an unknown field, min_count
 * 9223372036854775808 and a name with control characters were accepted; min_count 3 made one
 * server), multi-create (`<name>-1..N`, one reservation id, `return_reservation_id`), and Nova's
 * volume proxy `/os-volumes` (2.1–2.35) over Cinder, on the local stack over real HTTP. Every
 * refusal is checked to change nothing (test/support/server-state.ts).
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { SANDBOX_IMAGES } from '../../functions/servers/images.js';
import { listInstances } from '../../functions/servers/repo.js';
import { assertCleanAudit, cinderClient, createVolume, novaClient, serverState, settled, type Cinder, type Nova } from '../support/nova.js';
import { eventually } from '../support/poll.js';
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
afterEach(async () => {
  for (const s of await listInstances()) {
    await nova('DELETE', `/servers/${s.instance.uuid}`);
    await settled(nova, s.instance.uuid, LONG);
  }
  await assertCleanAudit();
}, 300_000);

const server = (extra: Record<string, unknown> = {}) => ({ server: { name: 'strict', flavorRef: '1', imageRef: SANDBOX_IMAGES.cirrosTiny.id, networks: 'auto', ...extra } });
const refused = async (body: unknown, version?: string) => {
  const res = await changesNothing(() => demo('POST', '/servers', { body, ...(version ? { version } : {}) }));
  expect(res.status, JSON.stringify(res.body)).toBeGreaterThanOrEqual(400);
  return res;
};

describe('POST /servers refuses what Nova\'s schema refuses, changing nothing', () => {
  test('an unknown field in server or beside it; a field of a later microversion', TEST, async () => {
    expect((await refused(server({ bogus_field: 'x' }))).body).toEqual({
      badRequest: { code: 400, message: expect.stringMatching(/^Invalid input for field\/attribute server\. Value: .*\. Additional properties are not allowed \('bogus_field' was unexpected\)$/) },
    });
    expect((await refused({ ...server(), bogus: 1 })).body).toEqual({ badRequest: { code: 400, message: "Additional properties are not allowed ('bogus' was unexpected)" } });
    // host is a 2.74 property; description 2.19.
    expect((await refused(server({ description: 'd' }), '2.18')).status).toBe(400);
    expect((await refused(server({ host: 'cmp1' }), '2.73')).status).toBe(400);
  });

  test('names: control characters, leading or trailing whitespace, empty, too long', TEST, async () => {
    const invalidName = "An invalid 'name' value was provided. The name must be: printable characters. Can not start or end with whitespace.";
    for (const name of ['\u0000\u0007', 'a\u0007b', ' lead', 'trail ', 'tab\there', 'line\u2028sep']) {
      expect((await refused(server({ name }))).body, JSON.stringify(name)).toEqual({ badRequest: { code: 400, message: invalidName } });
    }
    expect((await refused(server({ name: '' }))).body.badRequest.message).toBe(`Invalid input for field/attribute name. Value: "". '' is too short`);
    expect((await refused(server({ name: 'x'.repeat(256) }))).status).toBe(400);
    expect((await refused(server({ name: 5 }))).body.badRequest.message).toBe("Invalid input for field/attribute name. Value: 5. 5 is not of type 'string'");
  });

  test('min_count / max_count: out of range, not integers, min above max, a volume for several', TEST, async () => {
    const big = await refused(JSON.parse(`{"server":{"name":"x","flavorRef":"1","imageRef":"${SANDBOX_IMAGES.cirrosTiny.id}","min_count":9223372036854775808}}`));
    expect(big.body.badRequest.message).toMatch(/^Invalid input for field\/attribute min_count\. Value: .*is greater than the maximum of 9007199254740991$/);
    expect((await refused(server({ min_count: 0 }))).body.badRequest.message).toBe('Invalid input for field/attribute min_count. Value: 0. 0 is less than the minimum of 1');
    expect((await refused(server({ max_count: 'x' }))).status).toBe(400);
    expect((await refused(server({ min_count: 1.5 }))).status).toBe(400);
    expect((await refused(server({ min_count: 3, max_count: 2 }))).body).toEqual({ badRequest: { code: 400, message: 'min_count must be <= max_count' } });
    expect((await refused(server({ min_count: 11 }))).status).toBe(403);
    expect((await refused(server({ return_reservation_id: 'maybe' }))).status).toBe(400);
    const vol = await createVolume(cinder, 1, 'boot');
    const bdm = [{ boot_index: 0, uuid: vol, source_type: 'volume', destination_type: 'volume' }];
    expect((await refused(server({ imageRef: '', block_device_mapping_v2: bdm, max_count: 2 }))).body).toEqual({ badRequest: { code: 400, message: 'Cannot attach one or more volumes to multiple instances' } });
    await cinder('DELETE', `/volumes/${vol}`);
  });
});

describe('multi-create', () => {
  test('min_count 3 boots three servers named <name>-1..3 with one reservation id; the response is the first', TEST, async () => {
    const res = await demo('POST', '/servers', { body: server({ name: 'trio', min_count: 3 }) });
    expect(res.status, JSON.stringify(res.body)).toBe(202);
    const first = res.body.server.id as string;
    const mine = (await listInstances()).filter((s) => s.instance.projectId === 'demo');
    expect(mine.map((s) => s.instance.name).sort()).toEqual(['trio-1', 'trio-2', 'trio-3']);
    expect(mine.find((s) => s.instance.uuid === first)?.instance.name).toBe('trio-1');
    for (const s of mine) expect((await settled(nova, s.instance.uuid, LONG)).status).toBe('ACTIVE');
    const reservations = new Set(await Promise.all(mine.map(async (s) => (await nova('GET', `/servers/${s.instance.uuid}`, { version: '2.3' })).body.server['OS-EXT-SRV-ATTR:reservation_id'])));
    expect(reservations.size).toBe(1);
    expect([...reservations][0]).toMatch(/^r-[0-9a-z]{8}$/);
  });

  test('return_reservation_id answers {reservation_id} alone; the servers carry it', TEST, async () => {
    const res = await demo('POST', '/servers', { body: server({ name: 'resv', max_count: 2, return_reservation_id: true }) });
    expect(res.status).toBe(202);
    expect(Object.keys(res.body)).toEqual(['reservation_id']);
    const made = (await listInstances()).filter((s) => s.instance.systemMetadata.reservation_id === res.body.reservation_id);
    expect(made.map((s) => s.instance.name).sort()).toEqual(['resv-1', 'resv-2']);
    for (const s of made) await settled(nova, s.instance.uuid, LONG);
  });

  test('one server keeps its name and still gets a reservation id', TEST, async () => {
    const res = await demo('POST', '/servers', { body: server({ name: 'solo', min_count: '1', max_count: '1' }) });
    expect(res.status).toBe(202);
    const { instance } = await serverState(res.body.server.id);
    expect(instance.name).toBe('solo');
    expect(instance.systemMetadata.reservation_id).toMatch(/^r-/);
    await settled(nova, instance.uuid, LONG);
  });
});

describe('/os-volumes, Nova\'s proxy to Cinder (2.1-2.35)', () => {
  test('create (200, Nova\'s view), list, detail, show, delete; 404 from 2.36; refusals change nothing', TEST, async () => {
    const v21 = { version: '2.1' };
    const created = await demo('POST', '/os-volumes', { ...v21, body: { volume: { size: 1, display_name: 'proxied', display_description: 'via nova', metadata: { k: 'v' } } } });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const id = created.body.volume.id as string;
    expect(created.body.volume).toMatchObject({ id, size: 1, displayName: 'proxied', displayDescription: 'via nova', metadata: { k: 'v' }, attachments: [{}], snapshotId: null, availabilityZone: expect.any(String) });
    expect(created.headers.get('location')).toMatch(new RegExp(`/os-volumes/${id}$`));
    // Cinder holds it: the volume API shows the same volume.
    await eventually(async (note) => note((await cinder('GET', `/volumes/${id}`)).body.volume.status) === 'available' || undefined, `volume ${id} available`);
    const shown = await demo('GET', `/os-volumes/${id}`, v21);
    expect(shown.body.volume).toMatchObject({ id, status: 'available', volumeType: expect.any(String), createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) });
    expect(Object.keys(shown.body.volume).sort()).toEqual(['attachments', 'availabilityZone', 'createdAt', 'displayDescription', 'displayName', 'id', 'metadata', 'size', 'snapshotId', 'status', 'volumeType']);
    for (const path of ['/os-volumes', '/os-volumes/detail']) expect((await demo('GET', path, v21)).body.volumes.map((v: { id: string }) => v.id)).toContain(id);
    // Another project neither lists nor sees it.
    const alt = novaClient(stack, { token: 'alt:alt' });
    expect((await alt('GET', '/os-volumes', v21)).body.volumes.map((v: { id: string }) => v.id)).not.toContain(id);
    expect((await alt('GET', `/os-volumes/${id}`, v21)).status).toBe(404);
    expect((await demo('GET', `/os-volumes/${id}`, { version: '2.36' })).status).toBe(404);

    for (const body of [{ volume: {} }, { volume: { size: 0 } }, { volume: { size: 1, name: 'x' } }, { volume: { size: 'big' } }, {}]) {
      const res = await changesNothing(() => demo('POST', '/os-volumes', { ...v21, body }));
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
    expect((await changesNothing(() => demo('POST', '/os-volumes', { version: '2.36', body: { volume: { size: 1 } } }))).status).toBe(404);

    const del = await demo('DELETE', `/os-volumes/${id}`, v21);
    expect(del.status).toBe(202);
    await eventually(async () => (await cinder('GET', `/volumes/${id}`)).status === 404 || undefined, `volume ${id} deleted`);
    expect((await demo('DELETE', `/os-volumes/${id}`, v21)).status).toBe(404);
  });
});
