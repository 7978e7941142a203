/**
 * Issue 11, reproduction 2, through the whole local stack over HTTP: a process that dies during
 * PUT /attachments/{id} right after the backend export was made (a crash-after fault on the
 * driver's initializeConnection: the request never answers), then a restart. The connect intent
 * written before the export lets recovery undo it, so after the attachment is deleted no host
 * keeps access to the volume (the CVE-2023-2088 class) and the audit is clean.
 *
 * The test runs recoverPendingConnects itself with the restart's time; the stack may also run it
 * at start (recovery is idempotent, so the outcome is the same either way).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { recoverPendingConnects } from '../../functions/attachments/recovery.js';
import { getVolumeRecord } from '../../functions/attachments/repo.js';
import { runAudit } from '../../functions/audit/audit.js';
import { clearFaultCalls, clearFaults, crashedCalls, injectFault } from '../../functions/core/faults.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
/** A restart stops and starts DynamoDB Local's JVM and the whole stack: slow on a busy machine. */
const CRASH_TEST_TIMEOUT_MS = 240_000;
const HEADERS = { 'X-Auth-Token': 'demo:demo', 'OpenStack-API-Version': 'volume 3.70', 'Content-Type': 'application/json' };

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${stack.url}/volume/v3${path}`, { method, headers: HEADERS, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

const connector = (host: string) => ({ host, initiator: `iqn.2004-10.org:${host}`, ip: '127.0.0.1', platform: 'x86_64', os_type: 'linux2', multipath: false, mountpoint: '/dev/vdb' });
const instance = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
const volumeStatus = async (id: string) => (await api('GET', `/volumes/${id}`)).body.volume.status as string;

async function availableVolume(name: string, type: string): Promise<{ id: string; backend: string; backendName: string }> {
  const created = await api('POST', '/volumes', { volume: { size: 1, name, volume_type: type } });
  expect(created.status).toBe(202);
  const id = created.body.volume.id as string;
  await eventually(async () => ((await volumeStatus(id)) === 'available' ? true : undefined), `volume ${id} available`);
  const { volume } = (await getVolumeRecord(id))!;
  return { id, backend: volume.host!.split('#')[0]!, backendName: volume.backendName };
}

async function reserve(volumeId: string, i: number): Promise<string> {
  const r = await api('POST', '/attachments', { attachment: { volume_uuid: volumeId, instance_uuid: instance(i), connector: null } });
  expect(r.status).toBe(200);
  return r.body.attachment.id;
}

/** The hosts the backend really exports the volume to (what the audit compares with). */
async function exportedHosts(volume: { backend: string; backendName: string }): Promise<string[]> {
  const driver = await driverForHost(volume.backend);
  return (await driver.listConnections()).filter((c) => c.backendName === volume.backendName).map((c) => c.host).sort();
}

/** A PUT that may never answer: its outcome, whatever it is, once it settles (a killed stack answers nothing). */
const fire = (path: string, body: unknown) => api('PUT', path, body).then((r) => r.status, (e: unknown) => String(e));

/** Kill -9 stand-in: the crashed call stays dead; the stack restarts; recovery runs with the restart's time. */
async function crashAndRestart(): Promise<void> {
  await eventually(() => crashedCalls().some((c) => c.method === 'initializeConnection'), 'the connect to crash after initializeConnection');
  const restartedAt = new Date();
  await stack.restart();
  await recoverPendingConnects({ before: restartedAt });
}

beforeAll(async () => {
  stack = await useLocalStack();
});
beforeEach(() => clearFaultCalls());
afterAll(async () => {
  clearFaults();
  await stack?.stop();
});

describe('a crash during PUT /attachments/{id} (issue 11, reproduction 2)', () => {
  test('crash right after the export: after restart, recovery and delete no host keeps the volume; audit clean', async () => {
    const volume = await availableVolume('crash-put', 'default');
    const attachmentId = await reserve(volume.id, 1);
    injectFault({ kind: 'volume', backend: volume.backend, method: 'initializeConnection', mode: 'crash-after', times: 1 });

    const put = fire(`/attachments/${attachmentId}`, { attachment: { connector: connector('cmp2') } });
    await crashAndRestart();
    expect(typeof (await put)).toBe('string'); // the request never answered: the stack went away under it

    const deleted = await api('DELETE', `/attachments/${attachmentId}`);
    expect(deleted.status).toBe(200);
    expect(await exportedHosts(volume)).toEqual([]);
    expect(await volumeStatus(volume.id)).toBe('available');
    expect((await runAudit()).findings).toEqual([]);
  }, CRASH_TEST_TIMEOUT_MS);

  test('8 concurrent clients on a multiattach volume, one crashing after its export: every export left is one an attachment uses', async () => {
    const volume = await availableVolume('crash-put-8', 'multiattach');
    const ids = await Promise.all(Array.from({ length: 8 }, (_, i) => reserve(volume.id, 100 + i)));
    // Hosts cmp0 and cmp1 shared by several attachments, cmp-solo used by attachment 7 alone:
    // whichever call crashes, its host is either used by others (kept) or by nobody (removed).
    // The restart also kills the calls still in flight, as a kill -9 of the stack would.
    const hostOf = (i: number) => (i === 7 ? 'cmp-solo' : `cmp${i % 2}`);
    injectFault({ kind: 'volume', backend: volume.backend, method: 'initializeConnection', mode: 'crash-after', times: 1 });

    const puts = ids.map((id, i) => fire(`/attachments/${id}`, { attachment: { connector: connector(hostOf(i)) } }));
    await crashAndRestart();
    const outcomes = await Promise.all(puts);

    // The calls that answered connected their attachments; the crashed one's attachment stays reserved.
    const answered = outcomes.filter((o) => o === 200).length;
    expect(answered).toBeLessThanOrEqual(7);
    const listed = (await api('GET', `/attachments?volume_id=${volume.id}&limit=100`)).body.attachments as { id: string; status: string }[];
    expect(listed).toHaveLength(8);
    const { volume: after } = (await getVolumeRecord(volume.id))!;
    const hostsInUse = Object.keys(after.connections).sort();
    expect(await exportedHosts(volume)).toEqual(hostsInUse);
    expect((await runAudit()).findings).toEqual([]);

    // Detaching everything leaves no host with access.
    for (const id of ids) expect((await api('DELETE', `/attachments/${id}`)).status).toBe(200);
    expect(await exportedHosts(volume)).toEqual([]);
    expect(await volumeStatus(volume.id)).toBe('available');
    expect((await runAudit()).findings).toEqual([]);
  }, CRASH_TEST_TIMEOUT_MS);
});
