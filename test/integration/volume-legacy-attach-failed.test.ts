/**
 * The pre-3.27 os-attach (functions/attachments/legacy.ts) on a volume with a failed attach beside
 * a connected one on the same host: an EBS backend, EC2 mocked (test/support/ebs-stack.ts), whose
 * first attach EC2 drops, so volume-attach-wait leaves that attachment `error_attaching` (the only
 * way an attach fails after its connect); os-initialize_connection on the same host then connects a
 * new one, and os-attach attaches that one, never the failed one, which is left as it is (as
 * upstream's attach_volume leaves it, attaching a new attachment beside it). A server whose own
 * attach (POST /attachments, PUT) failed gets a new attachment from os-attach, not its failed one.
 */
import { describe, expect, test } from 'vitest';
import { randomUUID } from 'node:crypto';
import { runAudit } from '../../functions/audit/audit.js';
import { attachWaitOf } from '../support/attach-wait-record.js';
import { useOneEbsBackend } from '../support/ebs-stack.js';
import { eventually } from '../support/poll.js';

const INSTANCES = ['i-0legacy1', 'i-0legacy2', 'i-0legacy3'];
const ebs = useOneEbsBackend(INSTANCES);

const action = (id: string, body: unknown) => ebs().api('POST', `/volumes/${id}/action`, body);
const volume = async (id: string) => (await ebs().api('GET', `/volumes/${id}`)).body.volume;
const statuses = async (id: string) =>
  Object.fromEntries(((await ebs().api('GET', `/attachments?volume_id=${id}`)).body.attachments as { id: string; status: string }[]).map((a) => [a.id, a.status]));
/** The attachment's volume-attach-wait ended (the failed one's detach of what EC2 held done too). */
const waitEnded = (attId: string) =>
  eventually(async (note) => {
    const wait = await attachWaitOf(attId);
    return note(wait?.status) !== 'waiting' && !wait?.detachPending ? wait : undefined;
  }, `volume-attach-wait of ${attId} to end`);

/** A new EBS volume, available: its id. */
async function availableVolume(): Promise<string> {
  const created = await ebs().api('POST', '/volumes', { volume: { size: 1, volume_type: 'ebs', availability_zone: 'eu-west-1a' } });
  expect(created.status).toBe(202);
  const id = created.body.volume.id as string;
  await eventually(async (note) => note((await volume(id)).status) === 'available' || undefined, `volume ${id} available`);
  return id;
}

/** An EBS volume on `instance` with a failed attach (EC2 dropped it) and, beside it, a connected one: both made by os-initialize_connection. */
async function failedBesideConnected(instance: string): Promise<{ id: string; failed: string; connected: string }> {
  const id = await availableVolume();
  const connector = { host: instance, initiator: `iqn.x:${instance}`, ip: '10.0.0.5' };
  ebs().fake.attachEnds.set(instance, { looks: 1, then: 'vanish' });
  expect((await action(id, { 'os-initialize_connection': { connector } })).status).toBe(200);
  const [failed] = Object.keys(await statuses(id));
  expect((await waitEnded(failed!)).status).toBe('failed');
  ebs().fake.attachEnds.delete(instance);
  expect((await action(id, { 'os-initialize_connection': { connector } })).status).toBe(200);
  const connected = Object.keys(await statuses(id)).find((a) => a !== failed)!;
  expect((await waitEnded(connected)).status).toBe('attached');
  expect(await statuses(id)).toEqual({ [failed!]: 'error_attaching', [connected]: 'attaching' });
  return { id, failed: failed!, connected };
}

async function detachAll(id: string): Promise<void> {
  for (const attId of Object.keys(await statuses(id))) expect((await ebs().api('DELETE', `/attachments/${attId}`)).status).toBe(200);
  expect((await volume(id)).status).toBe('available');
  expect((await runAudit()).findings).toEqual([]);
}

describe('os-attach beside a failed attach on the same host', () => {
  test("Nova's legacy os-attach (instance, no host): the connected attachment is attached, the failed one left error_attaching", async () => {
    const { id, failed, connected } = await failedBesideConnected(INSTANCES[0]!);
    const server = randomUUID();
    expect((await action(id, { 'os-attach': { instance_uuid: server, mountpoint: '/dev/sdf', mode: 'rw' } })).status).toBe(202);
    expect(await statuses(id)).toEqual({ [failed]: 'error_attaching', [connected]: 'attached' });
    const v = await volume(id);
    expect([v.status, v.attachments.map((a: { attachment_id: string; server_id: string }) => [a.attachment_id, a.server_id])]).toEqual(['in-use', [[connected, server]]]);
    await detachAll(id);
  });

  // Without the fix, which of the two on the host was attached went by the volume's map order: a failure most runs, not every one.
  test('os-attach to the host by name: the connected attachment on it is attached, not the failed one', async () => {
    const { id, failed, connected } = await failedBesideConnected(INSTANCES[1]!);
    expect((await action(id, { 'os-attach': { host_name: INSTANCES[1], mountpoint: '/dev/sdf' } })).status).toBe(202);
    expect(await statuses(id)).toEqual({ [failed]: 'error_attaching', [connected]: 'attached' });
    expect((await volume(id)).status).toBe('in-use');
    await detachAll(id);
  });

  test('os-attach for the server whose own attach failed (POST /attachments with it, then PUT): a new attachment is attached, the failed one left', async () => {
    const id = await availableVolume();
    const server = randomUUID();
    const failed = (await ebs().api('POST', '/attachments', { attachment: { volume_uuid: id, instance_uuid: server } })).body.attachment.id as string;
    ebs().fake.attachEnds.set(INSTANCES[2]!, { looks: 1, then: 'vanish' });
    expect((await ebs().api('PUT', `/attachments/${failed}`, { attachment: { connector: { host: INSTANCES[2] } } })).status).toBe(200);
    expect((await waitEnded(failed)).status).toBe('failed');
    expect((await action(id, { 'os-attach': { instance_uuid: server, mountpoint: '/dev/sdf' } })).status).toBe(202);
    const after = await statuses(id);
    const attached = Object.keys(after).find((a) => a !== failed);
    expect(after).toEqual({ [failed]: 'error_attaching', [attached!]: 'attached' });
    expect((await volume(id)).status).toBe('in-use');
    await detachAll(id);
  });
});
