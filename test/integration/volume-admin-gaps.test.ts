/**
 * Cinder API gaps Tempest found (issue 15), on the local stack over HTTP: os-force_detach
 * (C/api/contrib/admin_actions.py) as Tempest's test_force_detach_volume drives it, and volume
 * type access (C/api/contrib/volume_type_access.py). Every refusal
 * is checked to change nothing, and the audit finds DynamoDB and the backends agreeing after each
 * scenario.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { eventually } from '../support/poll.js';
import { ADMIN, DEMO, useAuditedStack, volumeApi } from '../support/volume-api.js';

const stack = useAuditedStack();
const api = volumeApi(stack, '3.0');

const action = (id: string, body: unknown, token = DEMO) => api('POST', `/volumes/${id}/action`, body, token);
const volume = async (id: string) => (await api('GET', `/volumes/${id}`, undefined, ADMIN)).body.volume;

async function availableVolume(name: string, token = DEMO): Promise<string> {
  const created = await api('POST', '/volumes', { volume: { size: 1, name } }, token);
  expect(created.status).toBe(202);
  const id = created.body.volume.id as string;
  await eventually(async () => ((await volume(id)).status === 'available' ? true : undefined), `${name} available`);
  return id;
}

/** Runs a refused request and checks the volume reads the same afterwards. */
async function refused(id: string, call: () => Promise<{ status: number; body: any }>, status: number, message?: string) {
  const before = await volume(id);
  const res = await call();
  expect(res.status).toBe(status);
  if (message !== undefined) expect(Object.values(res.body ?? {})[0]).toMatchObject({ message });
  expect(await volume(id)).toEqual(before);
  return res;
}

describe('os-force_detach (admin_actions.py _force_detach)', () => {
  test('an attached volume reset to error is detached by the admin and becomes available; refusals change nothing', async () => {
    const id = await availableVolume('force-detach');
    const server = randomUUID();
    expect((await action(id, { 'os-attach': { instance_uuid: server, mountpoint: '/dev/vdb' } })).status).toBe(202);
    const attached = await volume(id);
    expect(attached.status).toBe('in-use');
    const attachmentId = attached.attachments[0].attachment_id as string;
    expect((await action(id, { 'os-reset_status': { status: 'error' } }, ADMIN)).status).toBe(202);

    await refused(id, () => action(id, { 'os-force_detach': { attachment_id: attachmentId } }), 403);
    await refused(id, () => action(id, { 'os-force_detach': { attachment_id: attachmentId, bogus: 1 } }, ADMIN), 400);
    await refused(id, () => action(id, { 'os-force_detach': { attachment_id: 5 } }, ADMIN), 400);
    const other = randomUUID();
    await refused(
      id,
      () => action(id, { 'os-force_detach': { attachment_id: other } }, ADMIN),
      400,
      `Error force detaching volume - VolumeAttachmentNotFound: Volume attachment could not be found with filter: attachment_id = ${other}, volume_id = ${id}.`,
    );

    // Tempest's call: connector None and the attachment's id.
    expect((await action(id, { 'os-force_detach': { connector: null, attachment_id: attachmentId } }, ADMIN)).status).toBe(202);
    const after = await volume(id);
    expect(after).toMatchObject({ status: 'available', attachments: [] });
    expect((await api('DELETE', `/volumes/${id}`)).status).toBe(202);
    await eventually(async () => ((await api('GET', `/volumes/${id}`, undefined, ADMIN)).status === 404 ? true : undefined), 'volume deleted');
  });
});

describe('volume type access (volume_type_access.py)', () => {
  test('a private type is seen and used only by the projects on its access list; add / remove refusals change nothing', async () => {
    const created = await api('POST', '/types', { volume_type: { name: 'private-j', 'os-volume-type-access:is_public': false } }, ADMIN);
    expect(created.status).toBe(200);
    const typeId = created.body.volume_type.id as string;
    const accessList = async () => (await api('GET', `/types/${typeId}/os-volume-type-access`, undefined, ADMIN)).body;
    const typeAct = (body: unknown, token = ADMIN) => api('POST', `/types/${typeId}/action`, body, token);
    const demoSees = async () => ({
      show: (await api('GET', `/types/${typeId}`)).status,
      listed: ((await api('GET', '/types')).body.volume_types as { id: string }[]).some((t) => t.id === typeId),
    });
    expect(await accessList()).toEqual({ volume_type_access: [] });
    expect(await demoSees()).toEqual({ show: 404, listed: false });
    expect((await api('POST', '/volumes', { volume: { size: 1, name: 'private-vol', volume_type: typeId } })).status).toBe(404);

    /** A refused change: the access list reads the same after it. */
    const refusedChange = async (body: unknown, status: number, message?: string, token = ADMIN) => {
      const before = await accessList();
      const res = await typeAct(body, token);
      expect(res.status).toBe(status);
      if (message !== undefined) expect(Object.values(res.body ?? {})[0]).toMatchObject({ message });
      expect(await accessList()).toEqual(before);
    };
    await refusedChange({ addProjectAccess: { project: 'demo' } }, 403, undefined, DEMO);
    await refusedChange({ addProjectAccess: {} }, 400);
    await refusedChange({ addProjectAccess: { project: 'demo', other: 1 } }, 400);
    await refusedChange({ removeProjectAccess: { project: 'demo' } }, 404, `Volume type access not found for ${typeId} / demo combination.`);

    expect((await typeAct({ addProjectAccess: { project: 'demo' } })).status).toBe(202);
    await refusedChange({ addProjectAccess: { project: 'demo' } }, 409, `Volume type access for ${typeId} / demo combination already exists.`);
    expect(await accessList()).toEqual({ volume_type_access: [{ volume_type_id: typeId, project_id: 'demo' }] });
    expect(await demoSees()).toEqual({ show: 200, listed: true });
    expect((await api('GET', `/types/${typeId}`, undefined, 'other:other')).status).toBe(404);
    const vol = await api('POST', '/volumes', { volume: { size: 1, name: 'private-vol', volume_type: typeId } });
    expect(vol.status).toBe(202);
    await eventually(async () => (['available', 'error'].includes((await volume(vol.body.volume.id)).status) ? true : undefined), 'private-type volume settled');
    expect((await volume(vol.body.volume.id)).volume_type).toBe('private-j');

    expect((await typeAct({ removeProjectAccess: { project: 'demo' } })).status).toBe(202);
    expect(await accessList()).toEqual({ volume_type_access: [] });
    expect(await demoSees()).toEqual({ show: 404, listed: false });

    // A public type has no access list.
    const pub = await api('POST', '/types', { volume_type: { name: 'public-j' } }, ADMIN);
    expect((await api('GET', `/types/${pub.body.volume_type.id}/os-volume-type-access`, undefined, ADMIN)).status).toBe(404);
    const pubAdd = await api('POST', `/types/${pub.body.volume_type.id}/action`, { addProjectAccess: { project: 'demo' } }, ADMIN);
    expect(pubAdd.status).toBe(400);
    expect(pubAdd.body.badRequest.message).toBe('Invalid volume type: Type access modification is not applicable to public volume type.');

    expect((await api('DELETE', `/volumes/${vol.body.volume.id}`)).status).toBe(202);
    await eventually(async () => ((await api('GET', `/volumes/${vol.body.volume.id}`, undefined, ADMIN)).status === 404 ? true : undefined), 'volume deleted');
  });
});

describe('volume list paging (common.py _get_next_link)', () => {
  test('the next link has the path asked (with the project id only when the URL had it), limit and the last id as marker', async () => {
    const ids = [await availableVolume('paged'), await availableVolume('paged')];
    for (const [path, linkPath] of [
      ['/volumes', '/volume/v3/volumes'],
      ['/volumes/detail', '/volume/v3/volumes/detail'],
      ['/demo/volumes', '/volume/v3/demo/volumes'],
    ] as const) {
      const page = await api('GET', `${path}?name=paged&limit=1`);
      expect(page.status).toBe(200);
      expect(page.body.volumes).toHaveLength(1);
      const next = new URL(page.body.volumes_links[0].href);
      expect(next.pathname).toBe(linkPath);
      expect(Object.fromEntries(next.searchParams)).toEqual({ name: 'paged', limit: '1', marker: page.body.volumes[0].id });
      const rest = await api('GET', `${path}?${next.searchParams.toString()}`);
      expect(rest.body.volumes.map((v: { id: string }) => v.id)).toEqual(ids.filter((id) => id !== page.body.volumes[0].id));
    }
    // A page shorter than the limit is the last: no link.
    expect((await api('GET', '/volumes?name=paged&limit=5')).body).not.toHaveProperty('volumes_links');
    for (const id of ids) expect((await api('DELETE', `/volumes/${id}`)).status).toBe(202);
    for (const id of ids) await eventually(async () => ((await api('GET', `/volumes/${id}`, undefined, ADMIN)).status === 404 ? true : undefined), 'volume deleted');
  });
});
