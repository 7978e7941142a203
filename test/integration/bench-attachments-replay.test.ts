/**
 * bench/attachments/replay.ts: one attachment cycle through the API handler is recorded, and its
 * requests sent again for other copies of the volume, as bench:attachments does after each
 * 32-client round. The copies must end where the API's volume ended (every versioned write landed,
 * one version step per cycle), with each cycle's attachment written and deleted as the API's was.
 */
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { describe, expect, test } from 'vitest';
import { recordCycle, replay, forCopy, send } from '../../bench/attachments/replay.js';
import { attachmentRoutes } from '../../functions/attachments/routes.js';
import { createApiHandler } from '../../functions/core/api.js';
import { db } from '../../functions/core/db.js';
import { VOLUME_VERSIONS } from '../../functions/core/microversion.js';
import { tableName } from '../../functions/core/tables.js';
import { volumeRoutes } from '../../functions/volumes/routes.js';
import { call, cinder, DEMO } from '../support/events.js';
import { connector, putVolume, readVolume, useAttachmentEnv } from './attachments-support.js';

const handler = createApiHandler({ service: VOLUME_VERSIONS, rootPath: '/volume', versionPath: '/v3', routes: [...volumeRoutes, ...attachmentRoutes], unversioned: [] });
const api = async (method: string, path: string, body?: unknown) => {
  const res = await call(handler, { method, path: `/volume/v3${path}`, headers: cinder('3.70'), caller: DEMO, body });
  expect(res.status, `${method} ${path}: ${JSON.stringify(res.body)}`).toBeLessThan(300);
  return res.body;
};

// The copies the replay writes have no backend object: the audit would report them.
useAttachmentEnv({ audit: false });

const INSTANCE = '00000000-0000-4000-8000-0000000000cc';
const HOST = 'bench-host-recorded';

/** The bench's cycle: create, update (connect), complete, delete; the attachment's id. */
async function cycle(volumeId: string): Promise<string> {
  const { attachment } = await api('POST', '/attachments', { attachment: { volume_uuid: volumeId, instance_uuid: INSTANCE, connector: null } });
  await api('PUT', `/attachments/${attachment.id}`, { attachment: { connector: connector(HOST) } });
  await api('POST', `/attachments/${attachment.id}/action`, { 'os-complete': null });
  await api('DELETE', `/attachments/${attachment.id}`);
  return attachment.id;
}

const item = async (pk: string, sk: string) => (await db().send(new GetCommand({ TableName: tableName('volume'), Key: { pk, sk }, ConsistentRead: true }))).Item;

describe('the API cycle replayed straight to DynamoDB', () => {
  test('recorded: the cycle\'s requests in order; replayed: each copy ends as the API\'s volume did, each cycle\'s attachment written and deleted', async () => {
    // Prepare: a volume this process remembers, as in the bench's rounds (a first cycle unrecorded).
    const volume = await putVolume();
    await cycle(volume.id);

    // Act: record one cycle, replay it for 2 copies x 3 cycles.
    const recorded = await recordCycle({ volume: volume.id, instance: INSTANCE, host: HOST }, () => cycle(volume.id));
    const asIs = await replay(recorded, 2, 3, 0);

    // Assess: what was recorded is the API's cycle (its volume moved by the recorded step).
    expect(recorded.requests.length).toBeGreaterThanOrEqual(4);
    expect(recorded.versionStep).toBeGreaterThan(0);
    expect((await readVolume(volume.id)).version).toBe(Number(recorded.volumeItem.version) + recorded.versionStep);
    expect(asIs).toBeGreaterThan(0);
    for (const copy of [0, 1]) {
      const copyId = forCopy(volume.id, recorded, recorded.versionStep, copy, 0);
      const stored = await readVolume(copyId);
      expect(stored.version).toBe(Number(recorded.volumeItem.version) + 3 * recorded.versionStep);
      expect(stored.status).toBe('available');
      expect(stored.attachments).toEqual({});
      for (const n of [0, 1, 2]) {
        const attachmentId = forCopy(recorded.ids.attachment, recorded, recorded.versionStep, copy, n);
        const att = await item(`ATT#${attachmentId}`, 'ATT');
        expect(att, `copy ${copy} cycle ${n}`).toMatchObject({ volumeId: copyId, attachStatus: 'detached', deleted: true });
      }
    }
  });

  test('the API\'s cycle: the intent, the connect and the complete are one UpdateItem of the volume each (the intent in the volume\'s own map, the rest in its summary of the attachment); create and delete stay transactions', async () => {
    // Prepare: a recorded cycle, as in the bench.
    const volume = await putVolume();
    await cycle(volume.id);
    const recorded = await recordCycle({ volume: volume.id, instance: INSTANCE, host: HOST }, () => cycle(volume.id));
    const requests = recorded.requests;
    expect(requests.map((r) => [r.command, r.input.TransactItems?.length ?? 1])).toEqual([
      ['TransactWriteItemsCommand', 2],
      ['UpdateItemCommand', 1],
      ['UpdateItemCommand', 1],
      ['UpdateItemCommand', 1],
      ['TransactWriteItemsCommand', 4],
      ['UpdateItemCommand', 1],
    ]);

    // Act: one copy, request by request, reading its volume after each.
    const copy = 9;
    const at = <T,>(x: T): T => forCopy(x, recorded, recorded.versionStep, copy, 0);
    const volumeId: string = at(volume.id);
    const attachmentId: string = at(recorded.ids.attachment);
    await db().send(new PutCommand({ TableName: tableName('volume'), Item: at(recorded.volumeItem) }));
    const seen: Record<string, any>[] = [];
    for (const r of requests) {
      await send(r.command, at(r.input));
      seen.push(await readVolume(volumeId));
    }

    // Assess: the intent is in the volume's map of intents without moving the version; the
    // connect's summary carries the connection and the connect ends the intent; the complete
    // marks it attached; the delete removes it.
    const start = Number(recorded.volumeItem.version);
    expect(seen[0]!.attachments[attachmentId]).toMatchObject({ status: 'reserved' });
    expect(seen[1]!.version).toBe(seen[0]!.version);
    expect(Object.values(seen[1]!.connectIntents)).toEqual([expect.objectContaining({ attachmentId, host: at(HOST) })]);
    expect(seen[2]!.attachments[attachmentId]).toMatchObject({ status: 'attaching', connected: true, host: at(HOST), connectionInfo: expect.objectContaining({ attachment_id: attachmentId }) });
    expect(seen[2]!.connectIntents).toEqual({});
    expect(seen[3]!.attachments[attachmentId]).toMatchObject({ status: 'attached' });
    expect(seen[4]!.attachments).toEqual({});
    expect(seen[5]!.version).toBe(start + recorded.versionStep);
    // The tombstone copies the last state from the summary.
    expect(await item(`ATT#${attachmentId}`, 'ATT')).toMatchObject({ volumeId, deleted: true, attachedHost: at(HOST) });
  });

  test('forCopy: ids replaced at their length, one per copy and per cycle; only the volume\'s version conditions move', () => {
    const recorded = {
      requests: [],
      volumeItem: { version: 7 },
      versionStep: 5,
      ids: { volume: '11111111-1111-4111-8111-111111111111', attachment: '22222222-2222-4222-8222-222222222222', instance: '33333333-3333-4333-8333-333333333333', host: 'bench-host-recorded' },
    };
    const input = { Key: { pk: `VOL#${recorded.ids.volume}` }, Names: { '#a': recorded.ids.attachment, '#i': recorded.ids.instance, '#h': recorded.ids.host }, Values: { ':version': 7, ':next': 8, ':one': 1, version: 3 } };
    const a = forCopy(input, recorded, 5, 1, 2);
    const b = forCopy(input, recorded, 5, 1, 3);
    const c = forCopy(input, recorded, 5, 2, 2);
    expect(a.Values).toEqual({ ':version': 17, ':next': 18, ':one': 1, version: 3 });
    expect(a.Names['#h']).toHaveLength(recorded.ids.host.length);
    expect(a.Key.pk).toHaveLength(input.Key.pk.length);
    expect(a.Key.pk).not.toBe(input.Key.pk);
    // The attachment: one per copy and cycle; the volume, instance and host: one per copy.
    expect(new Set([a.Names['#a'], b.Names['#a'], c.Names['#a'], recorded.ids.attachment]).size).toBe(4);
    expect(b.Key.pk).toBe(a.Key.pk);
    expect(c.Key.pk).not.toBe(a.Key.pk);
    expect([b.Names['#i'], b.Names['#h']]).toEqual([a.Names['#i'], a.Names['#h']]);
  });
});
