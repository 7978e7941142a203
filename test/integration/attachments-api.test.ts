/**
 * The attachments API through createApiHandler, with the requests cinderclient sends
 * (reference traces/cinderclient-requests.jsonl).
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { createApiHandler } from '../../functions/core/api.js';
import { VOLUME_VERSIONS } from '../../functions/core/microversion.js';
import { resetPolicyCache } from '../../functions/core/policy.js';
import { attachmentRoutes } from '../../functions/attachments/routes.js';
import { ADMIN, call, cinder, DEMO, OTHER } from '../support/events.js';
import { attachmentItems, backendConnections, connector, putVolume, readVolume, useAttachmentEnv } from './attachments-support.js';

const handler = createApiHandler({ service: VOLUME_VERSIONS, rootPath: '/volume', versionPath: '/v3', routes: attachmentRoutes, unversioned: [] });
const base = '/volume/v3';

useAttachmentEnv();

const create = (volumeId: string, extra: Record<string, unknown> = {}, caller = DEMO, version = '3.70') =>
  call(handler, { method: 'POST', path: `${base}/attachments`, headers: cinder(version), caller, body: { attachment: { volume_uuid: volumeId, connector: {}, ...extra } } });

describe('the cinderclient flow', () => {
  test('attachment-create, -update, -complete, -list, -show, -delete', async () => {
    // Prepare
    const volume = await putVolume();
    const instance = randomUUID();

    // Act / Assess: attachment-create <vol> <server> (connector {})
    const created = await create(volume.id, { instance_uuid: instance });
    expect(created.status).toBe(200);
    const id = created.body.attachment.id as string;
    expect(created.body).toEqual({
      attachment: { id, status: 'reserved', instance, volume_id: volume.id, attached_at: '', detached_at: '', attach_mode: 'null', connection_info: null },
    });

    // Act / Assess: attachment-update (all 7 connector keys)
    const updated = await call(handler, {
      method: 'PUT',
      path: `${base}/attachments/${id}`,
      headers: cinder(),
      caller: DEMO,
      body: { attachment: { connector: connector('cmp1', { mountpoint: '/dev/vdb' }) } },
    });
    expect(updated.status).toBe(200);
    expect(updated.body.attachment).toMatchObject({ id, status: 'attaching', attach_mode: 'rw' });
    expect(updated.body.attachment.attached_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$/);
    expect(updated.body.attachment.connection_info).toMatchObject({ driver_volume_type: 'local', access_mode: 'rw', attachment_id: id });

    // Act / Assess: attachment-complete
    const completed = await call(handler, { method: 'POST', path: `${base}/attachments/${id}/action`, headers: cinder(), caller: DEMO, body: { 'os-complete': null } });
    expect(completed.status).toBe(204);
    expect(completed.body).toBeUndefined();
    expect(await readVolume(volume.id)).toMatchObject({ status: 'in-use', attachStatus: 'attached' });

    // Act / Assess: attachment-list, with the client's filters
    const listed = await call(handler, { method: 'GET', path: `${base}/attachments`, query: `volume_id=${volume.id}`, headers: cinder(), caller: DEMO });
    expect(listed.body).toEqual({ attachments: [{ id, status: 'attached', instance, volume_id: volume.id }] });
    const byStatus = await call(handler, { method: 'GET', path: `${base}/attachments`, query: `all_tenants=1&status=attached&volume_id=${volume.id}`, headers: cinder(), caller: ADMIN });
    expect(byStatus.body).toEqual({ attachments: [] });
    const byAttachStatus = await call(handler, { method: 'GET', path: `${base}/attachments/detail`, query: `attach_status=attached&volume_id=${volume.id}`, headers: cinder(), caller: DEMO });
    expect(byAttachStatus.body.attachments.map((a: { id: string; connection_info: unknown }) => [a.id, !!a.connection_info])).toEqual([[id, true]]);
    const byInstance = await call(handler, { method: 'GET', path: `${base}/attachments`, query: `instance_id=${instance}`, headers: cinder(), caller: DEMO });
    expect(byInstance.body.attachments.map((a: { id: string }) => a.id)).toEqual([id]);

    // Act / Assess: attachment-show
    const shown = await call(handler, { method: 'GET', path: `${base}/attachments/${id}`, headers: cinder(), caller: DEMO });
    expect(shown.body.attachment).toEqual({ ...updated.body.attachment, status: 'attached' });

    // Act / Assess: attachment-delete
    const deleted = await call(handler, { method: 'DELETE', path: `${base}/attachments/${id}`, headers: cinder(), caller: DEMO });
    expect(deleted).toMatchObject({ status: 200, body: { attachments: [] } });
    expect(await readVolume(volume.id)).toMatchObject({ status: 'available', attachStatus: 'detached' });
    expect(await backendConnections(volume)).toEqual([]);
    expect((await call(handler, { method: 'GET', path: `${base}/attachments/${id}`, headers: cinder(), caller: DEMO })).status).toBe(404);
  });

  test('the path with the project id works as without it', async () => {
    const volume = await putVolume();
    const res = await call(handler, { method: 'POST', path: `${base}/demo/attachments`, headers: cinder(), caller: DEMO, body: { attachment: { volume_uuid: volume.id } } });
    expect(res.status).toBe(200);
    const shown = await call(handler, { method: 'GET', path: `${base}/demo/attachments/${res.body.attachment.id}`, headers: cinder(), caller: DEMO });
    expect(shown.body.attachment.id).toBe(res.body.attachment.id);
  });

  test('DELETE answers with the SUMMARY of the remaining attachments', async () => {
    const volume = await putVolume({ multiattach: true });
    const a = (await create(volume.id, { instance_uuid: randomUUID() })).body.attachment;
    const b = (await create(volume.id, { instance_uuid: randomUUID() })).body.attachment;
    const res = await call(handler, { method: 'DELETE', path: `${base}/attachments/${a.id}`, headers: cinder(), caller: DEMO });
    expect(res.body).toEqual({ attachments: [{ id: b.id, status: 'reserved', instance: b.instance, volume_id: volume.id }] });
  });
});

describe('microversions', () => {
  test.each([
    ['POST', '/attachments', '3.26'],
    ['GET', '/attachments', '3.26'],
    ['GET', '/attachments/x', '3.26'],
    ['POST', '/attachments/x/action', '3.43'],
  ])('%s %s at %s -> 404', async (method, path, version) => {
    const res = await call(handler, { method, path: `${base}${path}`, headers: cinder(version), caller: DEMO, body: method === 'POST' ? {} : undefined });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ itemNotFound: { code: 404, message: 'The resource could not be found.' } });
  });

  test('without a version header (3.0) the attachments API does not exist', async () => {
    const res = await call(handler, { method: 'GET', path: `${base}/attachments`, caller: DEMO });
    expect(res.status).toBe(404);
  });

  test('mode is accepted from 3.54 only', async () => {
    const volume = await putVolume();
    expect((await create(volume.id, { mode: 'ro' }, DEMO, '3.53')).status).toBe(400);
    const ok = await create(volume.id, { mode: 'ro' }, DEMO, '3.54');
    expect(ok.status).toBe(200);
    expect(ok.body.attachment.attach_mode).toBe('ro');
  });
});

describe('projects', () => {
  test("another project gets 404 for a project's volume and attachment; nothing changes", async () => {
    // Prepare
    const volume = await putVolume();
    const id = (await create(volume.id)).body.attachment.id as string;
    const before = await readVolume(volume.id);
    // Act
    const responses = await Promise.all([
      create(volume.id, {}, OTHER),
      call(handler, { method: 'GET', path: `${base}/attachments/${id}`, headers: cinder(), caller: OTHER }),
      call(handler, { method: 'PUT', path: `${base}/attachments/${id}`, headers: cinder(), caller: OTHER, body: { attachment: { connector: connector('cmp1') } } }),
      call(handler, { method: 'DELETE', path: `${base}/attachments/${id}`, headers: cinder(), caller: OTHER }),
      call(handler, { method: 'POST', path: `${base}/attachments/${id}/action`, headers: cinder(), caller: OTHER, body: { 'os-complete': null } }),
    ]);
    const listed = await call(handler, { method: 'GET', path: `${base}/attachments`, query: 'all_tenants=1', headers: cinder(), caller: OTHER });
    // Assess
    expect(responses.map((r) => r.status)).toEqual([404, 404, 404, 404, 404]);
    expect(responses[0]!.body.itemNotFound.message).toBe(`Volume ${volume.id} could not be found.`);
    expect(listed.body.attachments).toEqual([]);
    expect(await readVolume(volume.id)).toEqual(before);
    expect(await backendConnections(volume)).toEqual([]);
  });

  test('an admin sees every project with all_tenants, and can act on any attachment', async () => {
    const volume = await putVolume();
    const id = (await create(volume.id)).body.attachment.id as string;
    const all = await call(handler, { method: 'GET', path: `${base}/attachments`, query: 'all_tenants=1', headers: cinder(), caller: ADMIN });
    expect(all.body.attachments.map((a: { id: string }) => a.id)).toContain(id);
    const own = await call(handler, { method: 'GET', path: `${base}/attachments`, headers: cinder(), caller: ADMIN });
    expect(own.body.attachments.map((a: { id: string }) => a.id)).not.toContain(id);
    expect((await call(handler, { method: 'DELETE', path: `${base}/attachments/${id}`, headers: cinder(), caller: ADMIN })).status).toBe(200);
  });
});

describe('policy (§3.2 rows 3 and 5)', () => {
  async function withPolicy<T>(rules: Record<string, string>, fn: () => Promise<T>): Promise<T> {
    process.env.FERRY_POLICY = JSON.stringify(rules);
    resetPolicyCache();
    try {
      return await fn();
    } finally {
      delete process.env.FERRY_POLICY;
      resetPolicyCache();
    }
  }

  test('a denied create is 403 after the volume lookup, and writes nothing', async () => {
    const volume = await putVolume();
    const [denied, missing] = await withPolicy({ 'volume:attachment_create': 'admin_api' }, () => Promise.all([create(volume.id), create(randomUUID())]));
    expect(denied.status).toBe(403);
    expect(denied.body.forbidden.message).toBe("Policy doesn't allow volume:attachment_create to be performed.");
    expect(missing.status).toBe(404);
    expect(await attachmentItems(volume.id)).toEqual([]);
  });

  test('an in-use bootable multiattach volume also needs volume:multiattach_bootable_volume', async () => {
    const volume = await putVolume({ multiattach: true, bootable: true, status: 'in-use', attachStatus: 'attached' });
    const [member, admin] = await withPolicy({ 'volume:multiattach_bootable_volume': 'admin_api' }, async () => [await create(volume.id), await create(volume.id, {}, ADMIN)]);
    expect(member.status).toBe(403);
    expect(admin.status).toBe(200);
  });
});

describe('bad requests change nothing', () => {
  test.each([
    ['no attachment', { x: 1 }],
    ['no volume_uuid', { attachment: { connector: {} } }],
    ['a volume_uuid that is no uuid', { attachment: { volume_uuid: 'vol-1' } }],
    ['mode "null"', { attachment: { volume_uuid: '@VOL', mode: 'null' } }],
    ['a connector without host', { attachment: { volume_uuid: '@VOL', connector: { initiator: 'iqn.x' } } }],
    ['an unknown property', { attachment: { volume_uuid: '@VOL', status: 'attached' } }],
  ])('POST with %s -> 400', async (_name, body) => {
    // Prepare
    const volume = await putVolume();
    const before = await readVolume(volume.id);
    // Act
    const res = await call(handler, { method: 'POST', path: `${base}/attachments`, headers: cinder(), caller: DEMO, body: JSON.parse(JSON.stringify(body).replace('@VOL', volume.id)) });
    // Assess
    expect(res.status).toBe(400);
    expect(res.body.badRequest.code).toBe(400);
    expect(await readVolume(volume.id)).toEqual(before);
    expect(await attachmentItems(volume.id)).toEqual([]);
  });

  test('a malformed JSON body -> 400', async () => {
    const res = await call(handler, { method: 'POST', path: `${base}/attachments`, headers: cinder(), caller: DEMO, body: '{"attachment":' });
    expect(res.status).toBe(400);
  });

  test.each([
    ['an empty connector', { attachment: { connector: {} } }],
    ['no connector', { attachment: {} }],
    ['a connector without host', { attachment: { connector: { initiator: 'iqn.x' } } }],
    ['an extra property', { attachment: { connector: { host: 'cmp1' }, instance_uuid: randomUUID() } }],
  ])('PUT with %s -> 400', async (_name, body) => {
    // Prepare
    const volume = await putVolume();
    const id = (await create(volume.id)).body.attachment.id as string;
    const before = { volume: await readVolume(volume.id), items: await attachmentItems(volume.id) };
    // Act
    const res = await call(handler, { method: 'PUT', path: `${base}/attachments/${id}`, headers: cinder(), caller: DEMO, body });
    // Assess
    expect(res.status).toBe(400);
    expect({ volume: await readVolume(volume.id), items: await attachmentItems(volume.id) }).toEqual(before);
    expect(await backendConnections(volume)).toEqual([]);
  });

  test('an unknown action -> 400; a volume in error -> 400 with the upstream message', async () => {
    const volume = await putVolume();
    const id = (await create(volume.id)).body.attachment.id as string;
    const action = await call(handler, { method: 'POST', path: `${base}/attachments/${id}/action`, headers: cinder(), caller: DEMO, body: { 'os-reset': null } });
    expect(action.status).toBe(400);
    expect(action.body.badRequest.message).toBe('There is no such action: os-reset');

    const broken = await putVolume({ status: 'error' });
    const res = await create(broken.id);
    expect(res.status).toBe(400);
    expect(res.body.badRequest.message).toBe(
      `Invalid volume: Volume attachments can not be created if the volume is in an error state. The Volume ${broken.id} currently has a status of: error `,
    );
    expect(await attachmentItems(broken.id)).toEqual([]);
  });

  test('unknown attachment -> 404; bad limit -> 400; unknown sort key -> 400', async () => {
    const missing = await call(handler, { method: 'PUT', path: `${base}/attachments/${randomUUID()}`, headers: cinder(), caller: DEMO, body: { attachment: { connector: { host: 'h' } } } });
    expect(missing.status).toBe(404);
    expect((await call(handler, { method: 'GET', path: `${base}/attachments`, query: 'limit=x', headers: cinder(), caller: DEMO })).status).toBe(400);
    expect((await call(handler, { method: 'GET', path: `${base}/attachments`, query: 'limit=-1', headers: cinder(), caller: DEMO })).status).toBe(400);
    expect((await call(handler, { method: 'GET', path: `${base}/attachments`, query: 'sort=bogus:asc', headers: cinder(), caller: DEMO })).status).toBe(400);
  });
});

describe('list pagination', () => {
  test('limit pages through with attachments_links rel=next, newest first by default', async () => {
    // Prepare: a project of its own, so only these three are listed
    const caller = { userId: 'pager', projectId: 'pager' };
    const volume = await putVolume({ multiattach: true, projectId: 'pager' });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await create(volume.id, { instance_uuid: randomUUID() }, caller)).body.attachment.id);
    // Act
    const seen: string[] = [];
    let query = 'limit=2';
    let pages = 0;
    for (;;) {
      const res = await call(handler, { method: 'GET', path: `${base}/attachments`, query, headers: cinder(), caller });
      pages++;
      seen.push(...res.body.attachments.map((a: { id: string }) => a.id));
      const next = res.body.attachments_links?.find((l: { rel: string }) => l.rel === 'next');
      if (!next) break;
      expect(next.href).toMatch(/^http:\/\/127\.0\.0\.1:8780\/volume\/v3\/attachments\?limit=2&marker=/);
      query = new URL(next.href).search.slice(1);
    }
    // Assess: ordered by created_at, then id (two creates may share a millisecond)
    const key = (i: Record<string, unknown>) => `${i.createdAt as string}#${i.id as string}`;
    const ascending = (await attachmentItems(volume.id)).sort((a, b) => (key(a) < key(b) ? -1 : 1)).map((i) => i.id);
    expect([...ascending].sort()).toEqual([...ids].sort());
    expect(pages).toBe(2);
    expect(seen).toEqual([...ascending].reverse());
    const asc = await call(handler, { method: 'GET', path: `${base}/attachments`, query: 'sort=created_at:asc', headers: cinder(), caller });
    expect(asc.body.attachments.map((a: { id: string }) => a.id)).toEqual(ascending);
    const offset = await call(handler, { method: 'GET', path: `${base}/attachments`, query: 'sort=created_at:asc&offset=1&limit=1', headers: cinder(), caller });
    expect(offset.body.attachments.map((a: { id: string }) => a.id)).toEqual([ascending[1]]);
  });
});
