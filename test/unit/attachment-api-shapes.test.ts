import { describe, expect, test } from 'vitest';
import { BadRequest } from '../../functions/core/errors.js';
import type { Attachment } from '../../functions/attachments/model.js';
import { attachmentFromItem, attachmentToItem } from '../../functions/attachments/model.js';
import { parseCreateBody, parseUpdateBody } from '../../functions/attachments/routes.js';
import { detailView, summaryView, summaryViewFromVolume } from '../../functions/attachments/views.js';
import { connectorFor, INSTANCE_A, T0, T1, VOLUME_ID } from '../support/attachment-fixtures.js';

const ATT_ID = '33333333-3333-3333-3333-333333333333';

function attachmentFixture(overrides: Partial<Attachment> = {}): Attachment {
  return {
    id: ATT_ID,
    volumeId: VOLUME_ID,
    projectId: 'demo',
    instanceUuid: INSTANCE_A,
    attachStatus: 'reserved',
    attachMode: 'null',
    volumeHost: 'ferry@lvm-a#pool0',
    connector: null,
    attachedHost: null,
    mountpoint: null,
    attachTime: null,
    detachTime: null,
    connectionInfo: null,
    createdAt: T0,
    updatedAt: T0,
    version: 1,
    ...overrides,
  };
}

describe('views (C/api/v3/views/attachments.py)', () => {
  test('SUMMARY has exactly id, status (attach_status), instance and volume_id', () => {
    expect(summaryView(attachmentFixture())).toEqual({ id: ATT_ID, status: 'reserved', instance: INSTANCE_A, volume_id: VOLUME_ID });
    expect(summaryViewFromVolume(VOLUME_ID, ATT_ID, { status: 'attached', instanceUuid: null, host: 'h', mode: 'rw', attachedAt: null, connected: true })).toEqual({
      id: ATT_ID,
      status: 'attached',
      instance: null,
      volume_id: VOLUME_ID,
    });
  });

  test('DETAIL of a reserved attachment: empty times, attach_mode "null", connection_info null', () => {
    expect(detailView(attachmentFixture())).toEqual({
      id: ATT_ID,
      status: 'reserved',
      instance: INSTANCE_A,
      volume_id: VOLUME_ID,
      attached_at: '',
      detached_at: '',
      attach_mode: 'null',
      connection_info: null,
    });
  });

  test('DETAIL times use the upstream format YYYY-MM-DDTHH:MM:SS.ffffff', () => {
    const view = detailView(attachmentFixture({ attachStatus: 'attaching', attachTime: T0, detachTime: T1, attachMode: 'rw', connectionInfo: { driver_volume_type: 'local' } }));
    expect(view.attached_at).toBe('2026-01-02T03:04:05.678000');
    expect(view.detached_at).toBe('2026-01-02T03:04:06.000000');
    expect(view.attach_mode).toBe('rw');
    expect(view.connection_info).toEqual({ driver_volume_type: 'local' });
  });
});

describe('item layout', () => {
  test('a live attachment is listed under its project; a tombstone is not, and expires', () => {
    const live = attachmentToItem(attachmentFixture());
    expect(live).toMatchObject({ pk: `ATT#${ATT_ID}`, sk: 'ATT', gsi1pk: 'PROJ#demo#ATT', gsi1sk: `${T0}#${ATT_ID}` });
    expect(attachmentFromItem(live)).toEqual(attachmentFixture());
    const tomb = attachmentToItem(attachmentFixture({ deleted: true, updatedAt: T1 }));
    expect(tomb).not.toHaveProperty('gsi1pk');
    expect(tomb.expiresAt).toBe(Math.floor(Date.parse(T1) / 1000) + 7 * 24 * 3600);
  });
});

function badRequest(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(BadRequest);
    return (e as BadRequest).message;
  }
  throw new Error('expected a 400');
}

describe('create body (C/api/schemas/attachments.py create, create_v354)', () => {
  const body = (attachment: Record<string, unknown>) => ({ attachment });

  test('cinderclient without --connect: connector {} means no connector', () => {
    expect(parseCreateBody(body({ volume_uuid: VOLUME_ID, connector: {}, instance_uuid: INSTANCE_A }), true)).toEqual({
      volumeId: VOLUME_ID,
      instanceUuid: INSTANCE_A,
      connector: null,
      mode: undefined,
    });
  });

  test("Nova's connector null and an absent instance_uuid are accepted", () => {
    expect(parseCreateBody(body({ volume_uuid: VOLUME_ID, connector: null }), false)).toMatchObject({ connector: null, instanceUuid: null });
  });

  test('cinderclient --connect with --mode at 3.54', () => {
    const connector = connectorFor('cmp1');
    expect(parseCreateBody(body({ volume_uuid: VOLUME_ID, connector, instance_uuid: INSTANCE_A, mode: 'ro' }), true)).toMatchObject({ connector, mode: 'ro' });
  });

  test.each([
    ['no body', undefined, "is not of type 'object'"],
    ['no attachment', {}, "'attachment' is a required property"],
    ['extra top-level property', { attachment: { volume_uuid: VOLUME_ID }, x: 1 }, "Additional properties are not allowed ('x' was unexpected)"],
    ['attachment not an object', { attachment: 'v' }, "is not of type 'object'"],
    ['no volume_uuid', body({ instance_uuid: INSTANCE_A }), "'volume_uuid' is a required property"],
    ['volume_uuid not a uuid', body({ volume_uuid: 'vol-1' }), "'vol-1' is not a 'uuid'"],
    ['volume_uuid not a string', body({ volume_uuid: 5 }), "5 is not of type 'string'"],
    ['instance_uuid not a uuid', body({ volume_uuid: VOLUME_ID, instance_uuid: 'server-1' }), "'server-1' is not a 'uuid'"],
    ['instance_uuid null', body({ volume_uuid: VOLUME_ID, instance_uuid: null }), "null is not of type 'string'"],
    ['connector a string', body({ volume_uuid: VOLUME_ID, connector: 'cmp1' }), "is not of type 'object', 'null'"],
    ['connector without host', body({ volume_uuid: VOLUME_ID, connector: { initiator: 'iqn.x' } }), "connector must have a 'host'"],
    ['mode "null"', body({ volume_uuid: VOLUME_ID, mode: 'null' }), `"null" is not one of ['rw', 'ro']`],
    ['unknown property', body({ volume_uuid: VOLUME_ID, host: 'x' }), "Additional properties are not allowed ('host' was unexpected)"],
  ])('%s -> 400', (_name, input, message) => {
    expect(badRequest(() => parseCreateBody(input, true))).toContain(message);
  });

  test('mode before 3.54 is an unexpected property', () => {
    expect(badRequest(() => parseCreateBody(body({ volume_uuid: VOLUME_ID, mode: 'rw' }), false))).toContain("('mode' was unexpected)");
  });
});

describe('update body (C/api/schemas/attachments.py update)', () => {
  test("cinderclient's connector with all 7 keys, nulls included", () => {
    const connector = connectorFor('cmp1', { mountpoint: '/dev/vdb' });
    expect(parseUpdateBody({ attachment: { connector } })).toEqual(connector);
  });

  test.each([
    ['no connector', { attachment: {} }, "'connector' is a required property"],
    ['empty connector', { attachment: { connector: {} } }, 'does not have enough properties'],
    ['null connector', { attachment: { connector: null } }, "null is not of type 'object'"],
    ['extra property', { attachment: { connector: { host: 'h' }, mode: 'rw' } }, "('mode' was unexpected)"],
    ['connector without host', { attachment: { connector: { initiator: 'iqn.x' } } }, "connector must have a 'host'"],
  ])('%s -> 400', (_name, input, message) => {
    expect(badRequest(() => parseUpdateBody(input))).toContain(message);
  });
});
