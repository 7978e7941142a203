/**
 * The pre-3.27 attach actions (functions/attachments/legacy.ts) through the embedded local stack
 * over HTTP: each old-style attach is an attachment of the new API (listed by GET /attachments,
 * detached by DELETE /attachments/{id}), the backend connection is made and removed as the new
 * API's, and the audit finds DynamoDB and the backends agreeing after every scenario.
 */
import { describe, expect, test } from 'vitest';
import { randomUUID } from 'node:crypto';
import { eventually } from '../support/poll.js';
import { DEMO, useAuditedStack, volumeApi } from '../support/volume-api.js';

const stack = useAuditedStack();
const api = volumeApi(stack, '3.0');

const action = (id: string, body: unknown, token = DEMO) => api('POST', `/volumes/${id}/action`, body, token);
const volume = async (id: string) => (await api('GET', `/volumes/${id}`)).body.volume;
const attachmentsOf = async (id: string) => (await api('GET', `/attachments?volume_id=${id}`, undefined, 'demo:demo', '3.27')).body.attachments as { id: string; status: string; instance: string | null }[];
const connector = { initiator: 'iqn.1993-08.org.debian:01:cmp1', ip: '10.0.0.5', platform: 'x86_64', host: 'cmp1', os_type: 'linux', multipath: false };

async function availableVolume(name: string): Promise<string> {
  const created = await api('POST', '/volumes', { volume: { size: 1, name } });
  const id = created.body.volume.id as string;
  await eventually(async () => ((await volume(id)).status === 'available' ? true : undefined), `${name} available`);
  return id;
}

describe('pre-3.27 attach actions are attachments', () => {
  test('os-reserve shows attaching; os-unreserve takes the reservation back; a second reserve of a non-multiattach volume is refused', async () => {
    const id = await availableVolume('reserve');
    expect((await action(id, { 'os-reserve': null })).status).toBe(202);
    expect((await volume(id)).status).toBe('attaching');
    expect((await attachmentsOf(id)).map((a) => a.status)).toEqual(['reserved']);
    expect((await action(id, { 'os-reserve': null })).body.badRequest.message).toBe('Invalid volume: Volume status must be available to reserve, but the status is attaching.');
    expect((await action(id, { 'os-unreserve': null })).status).toBe(202);
    expect((await volume(id)).status).toBe('available');
    expect(await attachmentsOf(id)).toEqual([]);
  });

  test('os-attach alone (as tempest): in-use with the server; DELETE /attachments/{id} of the new API detaches it', async () => {
    const id = await availableVolume('attach-alone');
    const server = randomUUID();
    expect((await action(id, { 'os-attach': { instance_uuid: 'not-a-uuid', mountpoint: '/dev/vdb' } })).status).toBe(400);
    expect((await action(id, { 'os-attach': { mountpoint: '/dev/vdb' } })).status).toBe(400);
    expect((await volume(id)).status).toBe('available');
    expect((await action(id, { 'os-attach': { instance_uuid: server, mountpoint: '/dev/vdb' } })).status).toBe(202);
    const v = await volume(id);
    expect([v.status, v.attachments.map((a: any) => [a.server_id, a.device])]).toEqual(['in-use', [[server, '/dev/vdb']]]);
    const [att] = await attachmentsOf(id);
    expect(att).toMatchObject({ status: 'attached', instance: server });
    expect((await api('DELETE', `/attachments/${att!.id}`, undefined, 'demo:demo', '3.27')).status).toBe(200);
    expect((await volume(id)).status).toBe('available');
  });

  test("Nova's legacy path: reserve, initialize_connection, attach, begin_detaching, terminate_connection, detach", async () => {
    const id = await availableVolume('legacy-path');
    const server = randomUUID();
    expect((await action(id, { 'os-reserve': null })).status).toBe(202);
    const init = await action(id, { 'os-initialize_connection': { connector } });
    expect(init.status).toBe(200);
    expect(init.body.connection_info.driver_volume_type).toBe('local');
    expect(init.body.connection_info.data).toMatchObject({ access_mode: 'rw' });
    expect((await action(id, { 'os-attach': { instance_uuid: server, mountpoint: '/dev/vdc', mode: 'rw' } })).status).toBe(202);
    expect((await volume(id)).status).toBe('in-use');
    const [att] = await attachmentsOf(id);
    expect(att).toMatchObject({ status: 'attached', instance: server });
    const shown = (await api('GET', `/attachments/${att!.id}`, undefined, 'demo:demo', '3.27')).body.attachment;
    expect(shown).toMatchObject({ attached_at: expect.any(String), connection_info: expect.objectContaining({ driver_volume_type: 'local' }) });
    expect((await action(id, { 'os-begin_detaching': null })).status).toBe(202);
    expect((await volume(id)).status).toBe('detaching');
    expect((await action(id, { 'os-terminate_connection': { connector } })).status).toBe(202);
    expect(await attachmentsOf(id)).toHaveLength(1);
    expect((await action(id, { 'os-detach': { attachment_id: randomUUID() } })).status).toBe(400);
    expect((await action(id, { 'os-detach': {} })).status).toBe(202);
    expect((await volume(id)).status).toBe('available');
    expect(await attachmentsOf(id)).toEqual([]);
  });

  test('initialize_connection then terminate_connection with no attach leaves nothing behind', async () => {
    const id = await availableVolume('connect-only');
    expect((await action(id, { 'os-initialize_connection': {} })).status).toBe(400);
    expect((await action(id, { 'os-initialize_connection': { connector } })).status).toBe(200);
    expect(await attachmentsOf(id)).toHaveLength(1);
    expect((await action(id, { 'os-terminate_connection': { connector } })).status).toBe(202);
    expect(await attachmentsOf(id)).toEqual([]);
    expect((await volume(id)).status).toBe('available');
  });

  test('a read-only volume attaches only in mode ro', async () => {
    const id = await availableVolume('ro');
    expect((await action(id, { 'os-update_readonly_flag': { readonly: true } })).status).toBe(202);
    const refused = await action(id, { 'os-attach': { instance_uuid: randomUUID(), mountpoint: '/dev/vdb' } });
    expect(refused.body.badRequest.message).toBe(`Invalid attaching mode 'rw' for volume ${id}.`);
    expect([(await volume(id)).status, await attachmentsOf(id)]).toEqual(['available', []]);
    expect((await action(id, { 'os-attach': { instance_uuid: randomUUID(), mountpoint: '/dev/vdb', mode: 'ro' } })).status).toBe(202);
    expect((await action(id, { 'os-detach': null })).status).toBe(202);
  });
});
