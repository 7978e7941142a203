/**
 * The concurrency and durability claims, through the real local stack over HTTP:
 * - 100 concurrent attachment creates for one non-multiattach volume from 100 instances: exactly
 *   one succeeds, the other 99 get 400 and leave nothing behind;
 * - the same for a multiattach volume: all 100 succeed;
 * - a restart of the local stack while volume creations are in flight loses nothing: the
 *   executions resume and finish, and everything written before the restart is still there.
 * Each scenario ends with a clean audit.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { clearFaults, faultCalls, injectFault } from '../../functions/core/faults.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
const HEADERS = { 'X-Auth-Token': 'demo:demo', 'OpenStack-API-Version': 'volume 3.70', 'Content-Type': 'application/json' };

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${stack.url}/volume/v3${path}`, { method, headers: HEADERS, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function createVolume(name: string, type = 'default'): Promise<string> {
  const r = await api('POST', '/volumes', { volume: { size: 1, name, volume_type: type } });
  expect(r.status).toBe(202);
  return r.body.volume.id;
}

const volumeStatus = async (id: string) => (await api('GET', `/volumes/${id}`)).body.volume.status as string;
const waitAvailable = (id: string) => eventually(async () => ((await volumeStatus(id)) === 'available' ? true : undefined), `volume ${id} available`);
const instance = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;

beforeAll(async () => {
  stack = await useLocalStack();
});
afterAll(async () => {
  clearFaults();
  await stack?.stop();
});

describe('the local stack under concurrency and restart', () => {
  test('100 concurrent attaches to a non-multiattach volume: one 200, 99 × 400, nothing left behind', async () => {
    const volumeId = await createVolume('single');
    await waitAvailable(volumeId);

    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => api('POST', '/attachments', { attachment: { volume_uuid: volumeId, instance_uuid: instance(i), connector: null } })),
    );

    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    expect(statuses.filter((s) => s === 400)).toHaveLength(99);
    const listed = (await api('GET', `/attachments?volume_id=${volumeId}`)).body.attachments;
    expect(listed).toHaveLength(1);
    expect(listed[0].id).toBe(results.find((r) => r.status === 200)!.body.attachment.id);
    expect(await volumeStatus(volumeId)).toBe('reserved');
    expect((await runAudit()).findings).toEqual([]);
  });

  test('100 concurrent attaches to a multiattach volume: all succeed, each listed once', async () => {
    const volumeId = await createVolume('shared', 'multiattach');
    await waitAvailable(volumeId);

    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => api('POST', '/attachments', { attachment: { volume_uuid: volumeId, instance_uuid: instance(1000 + i), connector: null } })),
    );

    expect(results.map((r) => r.status)).toEqual(Array(100).fill(200));
    const listed = (await api('GET', `/attachments?volume_id=${volumeId}&limit=1000`)).body.attachments as { id: string }[];
    expect(new Set(listed.map((a) => a.id))).toEqual(new Set(results.map((r) => r.body.attachment.id)));
    const volume = (await api('GET', `/volumes/${volumeId}`)).body.volume;
    expect(volume.status).toBe('reserved');
    expect((await runAudit()).findings).toEqual([]);
  });

  test('a restart while volume creations are in flight loses nothing', async () => {
    // Prepare: what exists before the restart.
    const before = (await api('GET', '/attachments?limit=1000')).body.attachments.map((a: { id: string }) => a.id).sort();
    expect(before.length).toBe(101);
    // Hold the backend calls of the next three creations, so their executions are mid-way.
    const hold = injectFault({ kind: 'volume', method: 'createVolume', mode: 'hang', times: 3 });
    const inFlight = [await createVolume('r1'), await createVolume('r2'), await createVolume('r3')];
    await eventually(async () => (faultCalls().filter((c) => c.method === 'createVolume' && c.hanging).length === 3 ? true : undefined), 'three held createVolume calls');
    expect(await Promise.all(inFlight.map(volumeStatus))).toEqual(['creating', 'creating', 'creating']);

    // Act: restart the whole stack (DynamoDB Local, S3, Step Functions, HTTP) on the same data.
    await stack.restart();

    // Assess: the executions resumed and finished; nothing from before was lost.
    for (const id of inFlight) await waitAvailable(id);
    const after = (await api('GET', '/attachments?limit=1000')).body.attachments.map((a: { id: string }) => a.id).sort();
    expect(after).toEqual(before);
    // The calls held before the restart are "zombies" of the old run: release them and let them
    // finish; every step is idempotent, so they change nothing.
    const zombies = faultCalls().filter((c) => c.method === 'createVolume' && c.hanging);
    expect(zombies.length).toBe(3);
    clearFaults();
    await eventually(async () => (faultCalls().every((c) => c.outcome !== 'pending') ? true : undefined), 'released calls to settle');
    await new Promise((r) => setTimeout(r, 500));
    expect(await Promise.all(inFlight.map(volumeStatus))).toEqual(['available', 'available', 'available']);
    expect((await runAudit()).findings).toEqual([]);
  });
});
