/**
 * The Nova server-side view builders per microversion for a server's history: migrations
 * (GET /os-migrations and GET /servers/{id}/migrations; 2.23, 2.59, 2.80) and instance actions
 * (2.51, 2.58, 2.62, 2.84). Servers and volume attachments: server-views-server.test.ts.
 */
import { describe, expect, test } from 'vitest';
import type { InstanceAction, Migration } from '../../functions/servers/model.js';
import { instanceActionDetailView, instanceActionView, migrationView, serverMigrationView } from '../../functions/servers/history-views.js';
import { v, CTX, CTX_P, UUID, instance, USER, sha224 } from '../support/server-view-fixtures.js';

function migration(over: Partial<Migration> = {}): Migration {
  return {
    id: 4,
    uuid: '42341d4b-346a-40d0-83c6-5f4f6892b650',
    instanceUuid: UUID,
    migrationType: 'resize',
    status: 'migrating',
    sourceCompute: 'compute10',
    sourceNode: 'node10',
    destCompute: 'compute20',
    destNode: 'node20',
    destHost: '5.6.7.8',
    oldInstanceTypeId: 5,
    newInstanceTypeId: 6,
    crossCellMove: true,
    memoryTotal: 1000,
    memoryProcessed: 300,
    memoryRemaining: 700,
    diskTotal: 2000,
    diskProcessed: 500,
    diskRemaining: 1500,
    projectId: 'proj1',
    userId: 'user1',
    createdAt: '2016-06-23T14:42:02.000Z',
    updatedAt: '2016-06-23T14:42:03.250Z',
    ...over,
  };
}

describe('GET /os-migrations', () => {
  const base = {
    id: 4,
    status: 'migrating',
    instance_uuid: UUID,
    source_node: 'node10',
    source_compute: 'compute10',
    dest_node: 'node20',
    dest_compute: 'compute20',
    dest_host: '5.6.7.8',
    old_instance_type_id: 5,
    new_instance_type_id: 6,
    created_at: '2016-06-23T14:42:02.000000',
    updated_at: '2016-06-23T14:42:03.250000',
  };
  test.each<[string, Record<string, unknown>]>([
    ['2.1', base],
    ['2.22', base],
    ['2.23', { ...base, migration_type: 'resize' }],
    ['2.58', { ...base, migration_type: 'resize' }],
    ['2.59', { ...base, migration_type: 'resize', uuid: '42341d4b-346a-40d0-83c6-5f4f6892b650' }],
    ['2.79', { ...base, migration_type: 'resize', uuid: '42341d4b-346a-40d0-83c6-5f4f6892b650' }],
    ['2.80', { ...base, migration_type: 'resize', uuid: '42341d4b-346a-40d0-83c6-5f4f6892b650', user_id: 'user1', project_id: 'proj1' }],
  ])('resize at %s', (ver, body) => {
    const out = migrationView(migration(), v(ver), CTX);
    expect(out).toEqual(body);
    for (const hidden of ['cross_cell_move', 'hidden', 'memory_total', 'disk_total', 'deleted']) expect(out).not.toHaveProperty(hidden);
  });
  test.each([
    ['queued', true],
    ['preparing', true],
    ['running', true],
    ['post-migrating', true],
    ['completed', false],
    ['error', false],
  ] as const)('live migration %s: links=%s at 2.23', (status, links) => {
    const out = migrationView(migration({ migrationType: 'live-migration', status }), v('2.23'), CTX_P);
    if (links) {
      expect(out.links).toEqual([
        { rel: 'self', href: `http://h/compute/v2.1/p1/servers/${UUID}/migrations/4` },
        { rel: 'bookmark', href: `http://h/compute/p1/servers/${UUID}/migrations/4` },
      ]);
    } else {
      expect(out).not.toHaveProperty('links');
    }
    expect(out.migration_type).toBe('live-migration');
  });
  test('no links before 2.23 even for a running live migration', () => {
    const out = migrationView(migration({ migrationType: 'live-migration', status: 'running' }), v('2.22'), CTX);
    expect(out).not.toHaveProperty('links');
    expect(out).not.toHaveProperty('migration_type');
  });
});

describe('GET /servers/{id}/migrations', () => {
  const base = {
    created_at: '2016-06-23T14:42:02.000000',
    dest_compute: 'compute20',
    dest_host: '5.6.7.8',
    dest_node: 'node20',
    disk_processed_bytes: 500,
    disk_remaining_bytes: 1500,
    disk_total_bytes: 2000,
    id: 4,
    memory_processed_bytes: 300,
    memory_remaining_bytes: 700,
    memory_total_bytes: 1000,
    server_uuid: UUID,
    source_compute: 'compute10',
    source_node: 'node10',
    status: 'running',
    updated_at: '2016-06-23T14:42:03.250000',
  };
  test.each<[string, Record<string, unknown>]>([
    ['2.23', base],
    ['2.58', base],
    ['2.59', { ...base, uuid: '42341d4b-346a-40d0-83c6-5f4f6892b650' }],
    ['2.79', { ...base, uuid: '42341d4b-346a-40d0-83c6-5f4f6892b650' }],
    ['2.80', { ...base, uuid: '42341d4b-346a-40d0-83c6-5f4f6892b650', user_id: 'user1', project_id: 'proj1' }],
  ])('at %s', (ver, body) => {
    expect(serverMigrationView(migration({ migrationType: 'live-migration', status: 'running' }), v(ver))).toEqual(body);
  });
});

describe('instance actions', () => {
  const action: InstanceAction = {
    action: 'resize',
    instanceUuid: UUID,
    requestId: 'req-0d819d5c-1527-4669-bdf0-ffad31b5105b',
    userId: 'user1',
    projectId: 'proj1',
    startTime: '2018-04-25T01:26:36.341Z',
    finishTime: null,
    message: 'Error',
    updatedAt: '2018-04-25T01:26:36.790Z',
    events: [
      { event: 'conductor_migrate_server', startTime: '2018-04-25T01:26:36.539Z', finishTime: '2018-04-25T01:26:36.790Z', result: 'Error', traceback: 'Traceback (most recent call last)', host: 'cond1', details: 'No valid host' },
      { event: 'cold_migrate', startTime: '2018-04-25T01:26:36.600Z', finishTime: null, result: null, traceback: null, host: null, details: null },
    ],
  };
  const listBase = {
    action: 'resize',
    instance_uuid: UUID,
    request_id: 'req-0d819d5c-1527-4669-bdf0-ffad31b5105b',
    user_id: 'user1',
    project_id: 'proj1',
    start_time: '2018-04-25T01:26:36.341000',
    message: 'Error',
  };

  test.each<[string, Record<string, unknown>]>([
    ['2.1', listBase],
    ['2.57', listBase],
    ['2.58', { ...listBase, updated_at: '2018-04-25T01:26:36.790000' }],
  ])('list entry at %s', (ver, body) => {
    expect(instanceActionView(action, v(ver), USER)).toEqual(body);
  });

  const ev0 = { event: 'conductor_migrate_server', start_time: '2018-04-25T01:26:36.539000', finish_time: '2018-04-25T01:26:36.790000', result: 'Error' };
  const ev1 = { event: 'cold_migrate', start_time: '2018-04-25T01:26:36.600000', finish_time: null, result: null };
  const hid = sha224('proj1cond1');

  test.each<[string, boolean, unknown]>([
    ['2.1', false, undefined],
    ['2.50', false, undefined],
    ['2.51', false, [ev0, ev1]],
    ['2.61', false, [ev0, ev1]],
    ['2.62', false, [{ ...ev0, hostId: hid }, { ...ev1, hostId: '' }]],
    ['2.84', false, [{ ...ev0, hostId: hid }, { ...ev1, hostId: '' }]],
    ['2.1', true, [{ ...ev0, traceback: 'Traceback (most recent call last)' }, { ...ev1, traceback: null }]],
    ['2.61', true, [{ ...ev0, traceback: 'Traceback (most recent call last)' }, { ...ev1, traceback: null }]],
    ['2.62', true, [{ ...ev0, traceback: 'Traceback (most recent call last)', host: 'cond1', hostId: hid }, { ...ev1, traceback: null, host: null, hostId: '' }]],
    ['2.83', true, [{ ...ev0, traceback: 'Traceback (most recent call last)', host: 'cond1', hostId: hid }, { ...ev1, traceback: null, host: null, hostId: '' }]],
    [
      '2.84',
      true,
      [
        { ...ev0, traceback: 'Traceback (most recent call last)', host: 'cond1', hostId: hid, details: 'No valid host' },
        { ...ev1, traceback: null, host: null, hostId: '', details: null },
      ],
    ],
  ])('detail at %s admin=%s', (ver, isAdmin, events) => {
    const out = instanceActionDetailView(action, v(ver), { isAdmin });
    if (events === undefined) {
      expect(out).not.toHaveProperty('events');
      expect(out).toEqual(listBase);
    } else {
      expect(out.events).toEqual(events);
    }
    expect(Object.prototype.hasOwnProperty.call(out, 'updated_at')).toBe(v(ver).atLeast('2.58'));
  });

  test('hostId falls back to the server project when the action has none', () => {
    const out = instanceActionDetailView({ ...action, projectId: '' }, v('2.62'), { isAdmin: false, instanceProjectId: 'projX' });
    expect((out.events as Record<string, unknown>[])[0]!.hostId).toBe(sha224('projXcond1'));
  });
});

